"""The global step, as TF1's ``tf.train.get_or_create_global_step`` and friends."""

from __future__ import annotations

import logging
from typing import Any

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Graph, GraphKeys, Tensor, get_default_graph
from ..initializers import zeros_initializer
from ..variable_scope import get_variable

__all__ = ["get_global_step", "create_global_step", "get_or_create_global_step", "global_step"]

log = logging.getLogger(__name__)


def get_global_step(graph: Graph | None = None) -> Any:
    """The global step variable or tensor, or None, as ``tf.train.get_global_step``.

    Looks for the sole item of the ``GLOBAL_STEP`` collection, then a tensor named
    ``"global_step:0"``.

    Raises:
        TypeError: the found tensor is not an integer scalar.
    """
    graph = graph or get_default_graph()
    items = graph.get_collection(GraphKeys.GLOBAL_STEP)
    step: Any = None
    if len(items) == 1:
        step = items[0]
    elif len(items) > 1:
        log.error("Multiple tensors in global_step collection.")
        return None
    else:
        try:
            step = graph.get_tensor_by_name("global_step:0")
        except KeyError:
            return None
    dt = step.dtype
    shape = step.get_shape()
    if not dt.is_integer or (shape.ndims is not None and shape.ndims != 0):
        raise CkptsyncTypeError(
            f"Existing \"global_step\" does not have integer type or is not a scalar: {dt.name} "
            f"{shape}")
    return step


def create_global_step(graph: Graph | None = None) -> Any:
    """Creates the int64 ``global_step`` variable in the current variable scope (so
    ``"model/global_step"`` under ``variable_scope("model")``), as
    ``tf.train.create_global_step``.

    Raises:
        ValueError: '"global_step" already exists.'
    """
    graph = graph or get_default_graph()
    if get_global_step(graph) is not None:
        raise CkptsyncValueError('"global_step" already exists.')
    # In the current variable scope, as TF1: under variable_scope("model") the step is
    # "model/global_step" (get_global_step finds it by its collection).
    with graph.as_default(), graph.name_scope(None):
        return get_variable(
            "global_step", shape=[], dtype=_dtypes.int64, initializer=zeros_initializer(),
            trainable=False, collections=[GraphKeys.GLOBAL_VARIABLES, GraphKeys.GLOBAL_STEP])


def get_or_create_global_step(graph: Graph | None = None) -> Any:
    """Returns the global step, creating it if needed (idempotent)."""
    graph = graph or get_default_graph()
    step = get_global_step(graph)
    return step if step is not None else create_global_step(graph)


def global_step(sess: Any, global_step_tensor: Any) -> int:
    """The global step's value as a Python int, as ``tf.train.global_step``."""
    if isinstance(global_step_tensor, int):
        return global_step_tensor
    return int(sess.run(global_step_tensor))


_ = Tensor
