"""Variable updates and grouping: ``assign``, ``assign_add``, ``assign_sub``, ``no_op``,
``group``.

Run semantics, as TF1's ref variables: within one ``Session.run``, a read of a variable
ordered after an assignment of it (a data or control dependency) sees the assignment, and
an update builds on the run's earlier updates (``assign_add`` twice adds both); a read not
ordered after any assignment sees the value before the run (TF1: either value; see
:mod:`ckptsync.session.ordering`). Other runs see a run's assignments together, when it
ends. ``assign`` ops output the new value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError, InvalidArgumentError
from ..graph import Operation, Tensor, get_default_graph
from .array_ops import convert_to_tensor, identity
from .registry import register, register_special, single

__all__ = ["assign", "assign_add", "assign_sub", "no_op", "group", "tuple_"]


def _var_tensor(ref: Any) -> Tensor:
    t = ref._as_graph_element() if hasattr(ref, "_as_graph_element") else ref
    if not isinstance(t, Tensor) or t.op.type != "VariableV2":
        raise CkptsyncTypeError(f"Expected a variable to assign to, got {ref!r}.")
    return t


def _check_value(ref: Tensor, value: np.ndarray, op: Operation, validate: bool) -> np.ndarray:
    if validate:
        want = ref.shape
        if want.dims is not None and not want.is_compatible_with(value.shape):
            raise InvalidArgumentError(
                None, op, f"Assign requires shapes of both tensors to match. lhs shape= "
                f"{want.as_list()} rhs shape= {list(value.shape)} (variable {ref.op.name}).")
    if value.dtype != ref.dtype.np:
        value = value.astype(ref.dtype.np)
    return value


@register("Assign", kind="stateful", ref_inputs=(0,), output_ref=0)
def _assign_kernel(ctx: Any, op: Operation, _ref: None, value: np.ndarray) -> np.ndarray:
    value = _check_value(op.inputs[0], np.asarray(value), op, op.attrs["validate_shape"])
    ctx.write(op.inputs[0].op.name, value)
    return value


@register("AssignAdd", kind="stateful", ref_inputs=(0,), output_ref=0)
def _assign_add_kernel(ctx: Any, op: Operation, _ref: None, delta: np.ndarray) -> np.ndarray:
    name = op.inputs[0].op.name
    value = _check_value(op.inputs[0], ctx.read(name) + delta, op, True)
    ctx.write(name, value)
    return value


@register("AssignSub", kind="stateful", ref_inputs=(0,), output_ref=0)
def _assign_sub_kernel(ctx: Any, op: Operation, _ref: None, delta: np.ndarray) -> np.ndarray:
    name = op.inputs[0].op.name
    value = _check_value(op.inputs[0], ctx.read(name) - delta, op, True)
    ctx.write(name, value)
    return value


def _assign_like(op_type: str, ref: Any, value: Any, name: str | None,
                 validate_shape: bool = True) -> Tensor:
    r = _var_tensor(ref)
    v = convert_to_tensor(value, dtype=r.dtype if not hasattr(value, "dtype") else None)
    if v.dtype != r.dtype:
        raise CkptsyncTypeError(f"{op_type}: value of dtype {v.dtype.name} cannot be assigned to "
                                f"variable {r.op.name} of dtype {r.dtype.name}.")
    if validate_shape and not r.shape.is_compatible_with(v.shape):
        raise CkptsyncValueError(
            f"{op_type}: shapes must be equal for variable {r.op.name}: variable {r.shape} vs "
            f"value {v.shape}.")
    return single(op_type, [r, v], r.dtype, r.shape if validate_shape else v.shape,
                  name=name or op_type, attrs={"validate_shape": validate_shape})


def assign(ref: Any, value: Any, validate_shape: bool = True, use_locking: Any = None,
           name: str | None = None) -> Tensor:
    """Sets variable ``ref`` to ``value``, as ``tf.assign``; outputs the variable's new
    value (of ``ref``'s dtype; its shape unless ``validate_shape=False``): as TF1's ref
    output, an op reading it after a later update of ``ref`` ordered before that op sees
    that update.

    Raises:
        TypeError: ``ref`` is no variable; the dtypes differ.
        ValueError: the static shapes differ (with ``validate_shape``).
    """
    return _assign_like("Assign", ref, value, name, validate_shape)


def assign_add(ref: Any, value: Any, use_locking: Any = None, name: str | None = None) -> Tensor:
    """Adds ``value`` to variable ``ref``, as ``tf.assign_add``."""
    return _assign_like("AssignAdd", ref, value, name)


def assign_sub(ref: Any, value: Any, use_locking: Any = None, name: str | None = None) -> Tensor:
    """Subtracts ``value`` from variable ``ref``, as ``tf.assign_sub``."""
    return _assign_like("AssignSub", ref, value, name)


register_special("NoOp", "noop")


def no_op(name: str | None = None) -> Operation:
    """An op that does nothing; useful for control dependencies, as ``tf.no_op``."""
    return get_default_graph().create_op("NoOp", [], [], [], name=name or "NoOp")


def group(*inputs: Any, name: str | None = None) -> Operation:
    """An op that runs all ``inputs`` (ops or tensors), as ``tf.group``."""
    flat: list[Any] = []
    for x in inputs:
        if isinstance(x, (list, tuple)):
            flat.extend(x)
        elif isinstance(x, dict):
            flat.extend(x.values())
        elif x is not None:
            flat.append(x)
    g = get_default_graph()
    ops = []
    for x in flat:
        el = g.as_graph_element(x)
        ops.append(el.op if isinstance(el, Tensor) else el)
    return g.create_op("NoOp", [], [], [], name=name or "group_deps", control_inputs=ops)


def tuple_(tensors: Any, name: str | None = None) -> list[Tensor]:
    """Identity copies of ``tensors`` that are each available only after all are computed."""
    gate = group(*tensors)
    g = get_default_graph()
    with g.control_dependencies([gate]):
        return [identity(t) for t in tensors]


_ = _dtypes
