"""Warm-starting variables from a checkpoint, as TF1's ``tf.train.init_from_checkpoint``.

``init_from_checkpoint`` changes no value by itself: it replaces the initializers of the
variables it maps, so the next run of their initializer (``global_variables_initializer``
made *after* the call, or ``v.initializer``) reads them from the checkpoint instead of
drawing them (a ``RestoreV2`` op named ``checkpoint_initializer``, which reads the file
when it runs).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..checkpoint import CheckpointReader, latest_checkpoint
from ..errors import CkptsyncValueError, InvalidArgumentError
from ..graph import Operation, Tensor, get_default_graph
from ..ops.registry import register
from ..ops.state_ops import assign
from ..tensor_shape import TensorShape
from ..variable_scope import get_variable_store
from ..variables import Variable

__all__ = ["init_from_checkpoint"]

log = logging.getLogger(__name__)


@register("RestoreV2", kind="stateful", not_differentiable=True)
def _restore_v2(ctx: Any, op: Operation) -> np.ndarray:
    # One tensor of a checkpoint, read when the op runs (TF1's RestoreV2 of one name).
    prefix, name, dtype = op.attrs["prefix"], op.attrs["tensor_name"], op.attrs["dtype"]
    with CheckpointReader(prefix) as reader:
        value = reader.get_tensor(name)
    if value.dtype != dtype.np:
        raise InvalidArgumentError(
            None, op, f"RestoreV2 op '{op.name}': tensor {name} of checkpoint {prefix} is "
            f"{_dtypes.as_dtype(value.dtype).name}, the variable expects {dtype.name}.")
    return value


def _checkpoint_prefix(ckpt_dir_or_file: str) -> str:
    import os

    path = os.fspath(ckpt_dir_or_file)
    if os.path.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise CkptsyncValueError(
                f"Couldn't find 'checkpoint' file or checkpoints in given directory {path}")
        return latest
    return path


def _set_initializer(var: Variable, prefix: str, tensor_name: str) -> None:
    graph = get_default_graph()
    with graph.control_dependencies(None):
        restore = graph.create_op(
            "RestoreV2", [], [var.dtype.base_dtype], [var.shape], name="checkpoint_initializer",
            attrs={"prefix": prefix, "tensor_name": tensor_name,
                   "dtype": var.dtype.base_dtype}).outputs[0]
        init = assign(var, restore)
    var._initializer_op = init.op if isinstance(init, Tensor) else init
    var._initial_value = restore


def init_from_checkpoint(ckpt_dir_or_file: str, assignment_map: Any) -> None:
    """Makes variables start from a checkpoint's values, as ``tf.train.init_from_checkpoint``.

    Args:
        ckpt_dir_or_file: a checkpoint prefix, or a directory (its latest checkpoint).
        assignment_map: ``{checkpoint name or scope: variable, variable name or scope}``
            (or a list of such pairs), TF1's forms:

            - ``{"old/w": "new/w"}`` or ``{"old/w": w}``: one variable;
            - ``{"old_scope/": "new_scope/"}``: every ``get_variable`` variable under
              ``new_scope/`` from the same name under ``old_scope/``;
            - ``{"/": "new_scope/"}``, ``{"old_scope/": "/"}``, ``{"/": "/"}``: the
              checkpoint's or the graph's top level.

    Raises:
        ValueError: a name missing from the checkpoint ("Tensor X is not found in ...
            checkpoint"), a shape that differs from the variable's, or a scope mapped to
            a name ("Assignment map with scope only name ...").
        NotFoundError: no checkpoint at ``ckpt_dir_or_file``.

    Example:
        >>> init_from_checkpoint("pretrained/", {"encoder/": "model/encoder/"})  # doctest: +SKIP
    """
    prefix = _checkpoint_prefix(ckpt_dir_or_file)
    with CheckpointReader(prefix) as reader:
        shapes = reader.get_variable_to_shape_map()
    pairs = assignment_map.items() if isinstance(assignment_map, Mapping) else assignment_map
    store_vars = get_variable_store(get_default_graph()).vars
    for ckpt_name, current in sorted(pairs, key=lambda kv: kv[0]):
        var = current if isinstance(current, Variable) else store_vars.get(current)
        if var is not None:
            if ckpt_name not in shapes:
                raise CkptsyncValueError(
                    f"Tensor {ckpt_name} is not found in {ckpt_dir_or_file} checkpoint "
                    f"{shapes}")
            _check_shape(var, ckpt_name, shapes[ckpt_name])
            _set_initializer(var, prefix, ckpt_name)
            log.debug("Initialize variable %s from checkpoint %s with %s", var.name,
                      ckpt_dir_or_file, ckpt_name)
            continue
        scopes = current[:current.rindex("/")] if "/" in current else ""
        if not ckpt_name.endswith("/"):
            raise CkptsyncValueError(
                f"Assignment map with scope only name {scopes} should map to scope only "
                f"{ckpt_name}. Should be 'scope/': 'other_scope/'.")
        for var_name in sorted(n for n in store_vars
                               if not scopes or n.startswith(scopes + "/")):
            full = var_name[len(scopes):]
            if current != "/":
                full = full[1:]
            if ckpt_name != "/":
                full = ckpt_name + full
            full = full.rstrip("/")
            if full not in shapes:
                raise CkptsyncValueError(
                    f"Tensor {full} ({var_name[len(scopes) + 1:]} in {ckpt_name}) is not "
                    f"found in {ckpt_dir_or_file} checkpoint")
            var = store_vars[var_name]
            _check_shape(var, full, shapes[full])
            _set_initializer(var, prefix, full)
            log.debug("Initialize variable %s from checkpoint %s with %s", var_name,
                      ckpt_dir_or_file, full)


def _check_shape(var: Variable, name: str, shape: list[int]) -> None:
    if not var.get_shape().is_compatible_with(TensorShape(shape)):
        raise CkptsyncValueError(
            f"Shape of variable {var.name} ({var.get_shape()}) doesn't match with shape of "
            f"tensor {name} ({shape}) from checkpoint reader.")
