"""Build-time values of tensors, as TF's shape inference sees them (``constant_value``).

TF1 computes static shapes from shape *tensors* when it can: ``tf.reshape(x, tf.shape(y))``
has ``y``'s static shape, ``tf.reshape(x, [-1, tf.shape(y)[1]])`` knows its last dim when
``y``'s dim 1 is known. TF's C++ shape refiner does this by evaluating small constant
subgraphs (``EvaluateConstantTensor``) and by reading partial shapes out of ``Shape``,
``Pack``, ``ConcatV2`` and ``StridedSlice``-of-``Shape`` (``ConstantPartialShape``). This
module does the same on ckptsync graphs:

* :func:`constant_value` -- the numpy value of a tensor computable at build time (consts,
  ``Shape``/``Size``/``Rank`` of statically known shapes, and pure ops of those), else None;
* :func:`constant_value_as_shape` -- a partial :class:`TensorShape` read from a 1-D shape
  tensor (``-1`` and unknown elements are ``None`` dims).

Nothing runs in a session; evaluation is bounded to small subgraphs and values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CkptsyncValueError
from ..graph import Tensor
from ..tensor_shape import TensorShape
from .registry import get_op_def

__all__ = ["constant_value", "constant_value_as_shape", "reshape_static_shape", "has_tensor"]


def has_tensor(value: Any) -> bool:
    """Whether a (nested) list holds tensors or variables (then TF packs it)."""
    return any(isinstance(v, Tensor) or hasattr(v, "_as_graph_element")
               or isinstance(v, (list, tuple)) and has_tensor(v) for v in value)

# Op types folded by running their kernel when all inputs are known (TF folds any
# stateless op; these are the ones shape arithmetic uses).
_FOLDABLE = frozenset({
    "Identity", "Pack", "ConcatV2", "StridedSlice", "Slice", "Reshape", "ExpandDims",
    "Squeeze", "Fill", "Cast", "AddV2", "Add", "Sub", "Mul", "FloorDiv", "RealDiv",
    "Maximum", "Minimum", "Neg", "Prod", "Sum", "Range", "Tile", "GatherV2", "Unpack",
})
_MAX_ELEMENTS = 1024  # TF skips constant folding of large tensors, too
_MAX_DEPTH = 24


def constant_value(t: Any) -> np.ndarray | None:
    """The value of ``t`` if it is known at graph-build time, else None (as TF's
    ``tensor_util.constant_value`` plus the shape refiner's folding)."""
    return _fold(t, 0, {}) if isinstance(t, Tensor) else None


def _fold(t: Tensor, depth: int, memo: dict[int, np.ndarray | None]) -> np.ndarray | None:
    key = id(t)
    if key not in memo:  # shared subgraphs are evaluated once
        memo[key] = _fold_once(t, depth, memo)
    return memo[key]


def _fold_once(t: Tensor, _depth: int, memo: dict[int, np.ndarray | None]
               ) -> np.ndarray | None:
    op = t.op
    if op.type == "Const":
        return op.attrs["value"]
    if op.type in ("Shape", "Size", "Rank", "ShapeN"):
        src = op.inputs[t.value_index if op.type == "ShapeN" else 0].shape
        dt = op.attrs["out_type"].np
        if op.type == "Rank":
            return None if src.ndims is None else np.asarray(src.ndims, dt)
        if not src.is_fully_defined():
            return None
        if op.type == "Size":
            return np.asarray(src.num_elements(), dt)
        return np.asarray(src.as_list(), dt)
    if op.type == "StridedSlice":
        dims = _shape_element(op)
        if dims is not None:
            return dims
    if op.type not in _FOLDABLE or _depth > _MAX_DEPTH:
        return None
    d = get_op_def(op.type)
    if d.kind != "pure" or d.kernel is None:
        return None
    vals = []
    for x in op.inputs:
        v = _fold(x, _depth + 1, memo)
        if v is None or np.size(v) > _MAX_ELEMENTS:
            return None
        vals.append(v)
    try:
        out = d.kernel(*vals, **op.attrs)
    except Exception:  # noqa: BLE001 - not foldable here; the run will report it
        return None
    res = out[t.value_index] if isinstance(out, (tuple, list)) else out
    return np.asarray(res)


def _shape_element(op: Any) -> np.ndarray | None:
    """``tf.shape(x)[i]`` with ``x``'s dim ``i`` known (TF's ``TryInferFromShapes``)."""
    src = op.inputs[0]
    if src.op.type != "Shape" or op.attrs.get("shrink_axis_mask") != 1:
        return None
    dims = src.op.inputs[0].shape.dims
    begin = constant_value(op.inputs[1])
    if dims is None or begin is None or begin.shape != (1,):
        return None
    i = int(begin[0])
    if not -len(dims) <= i < len(dims) or dims[i] is None:
        return None
    return np.asarray(dims[i], src.dtype.np)


def constant_value_as_shape(t: Tensor) -> TensorShape:
    """The partial shape a 1-D int tensor describes (as TF's ``ConstantPartialShape``).

    A scalar ``-1`` means unknown rank; elements that are ``-1`` or not known at build
    time are ``None`` dims; a vector of unknown length gives unknown rank.
    """
    op = t.op
    if t.shape.ndims == 0:
        v = constant_value(t)
        if v is not None and int(v) == -1:
            return TensorShape(None)
    if op.type == "Shape":
        return op.inputs[0].shape
    if op.type == "Pack" and op.attrs.get("axis", 0) == 0:
        dims: list[int | None] = []
        for x in op.inputs:
            v = constant_value(x)
            dims.append(None if v is None or int(v) < 0 else int(v))
        return TensorShape(dims)
    if op.type == "ConcatV2":
        out: list[int | None] = []
        for x in op.inputs[:-1]:
            part = constant_value_as_shape(x)
            if part.dims is None:
                return TensorShape(None)
            out.extend(part.dims)
        return TensorShape(out)
    if op.type == "StridedSlice" and op.inputs[0].op.type == "Shape":
        sliced = _sliced_shape(op)
        if sliced is not None:
            return sliced
    v = constant_value(t)
    if v is not None:
        return TensorShape([None if int(d) < 0 else int(d) for d in np.reshape(v, -1)])
    n = t.shape[0] if t.shape.ndims == 1 else None
    return TensorShape(None if n is None else [None] * n)


def _sliced_shape(op: Any) -> TensorShape | None:
    """``tf.shape(x)[a:b:c]``: the matching dims of ``x``'s static shape."""
    dims = op.inputs[0].op.inputs[0].shape.dims
    vals = [constant_value(x) for x in op.inputs[1:4]]
    masks = [op.attrs.get(k, 0) for k in ("ellipsis_mask", "new_axis_mask", "shrink_axis_mask")]
    if dims is None or any(v is None or v.shape != (1,) for v in vals) or any(masks):
        return None
    b, e, s = (int(v[0]) for v in vals if v is not None)
    return TensorShape(list(dims)[slice(None if op.attrs.get("begin_mask", 0) & 1 else b,
                                        None if op.attrs.get("end_mask", 0) & 1 else e, s)])


def reshape_static_shape(x: TensorShape, out: TensorShape) -> TensorShape:
    """TF's ``ReshapeShapeFn``: infers the one unknown output dim from known counts."""
    if out.dims is None or x.dims is None:
        return out
    unknown_out = [i for i, d in enumerate(out.dims) if d is None]
    unknown_in = [d for d in x.dims if d is None]
    if len(unknown_out) > 1 or len(unknown_in) > 1:
        return out
    known_out = int(np.prod([d for d in out.dims if d is not None]))
    known_in = int(np.prod([d for d in x.dims if d is not None]))
    if not unknown_in and not unknown_out and known_in != known_out:
        raise CkptsyncValueError(
            f"Reshape: cannot reshape a tensor with {known_in} elements ({x}) to shape "
            f"{out} ({known_out} elements).")
    if not unknown_in and unknown_out and known_out > 0:
        if known_in % known_out:
            raise CkptsyncValueError(
                f"Reshape: cannot reshape a tensor with {known_in} elements ({x}) to {out}.")
        dims = list(out.dims)
        dims[unknown_out[0]] = known_in // known_out
        return TensorShape(dims)
    return out
