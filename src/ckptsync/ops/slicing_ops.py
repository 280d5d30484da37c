"""Slicing: ``slice``, ``strided_slice`` and tensor indexing (``x[:, 0]``,
``x[1:-1, ..., None]``, ``x[::-1]``, ``x[t]``), as TF1.

``x[...]`` builds one ``StridedSlice`` op (named ``strided_slice``) whose ``begin``,
``end`` and ``strides`` are packed from the index (Python ints become constants, scalar int
tensors are packed with them) and whose masks say which entries are ``:`` (begin/end
masks), ``...`` (ellipsis), ``None`` (new axis) or a single index (shrink axis). The
gradient is TF's ``StridedSliceGrad``: the upstream gradient scattered into zeros of the
input's shape. Static shapes follow TF's shape function: an unknown input dim stays
unknown unless the entry picks one element.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError, InvalidArgumentError
from ..graph import Tensor
from ..tensor import Tensor as _TensorClass
from ..tensor_shape import TensorShape
from . import array_ops as _array
from .const_fold import constant_value
from .manip_ops import pad, stack
from .registry import register, single

__all__ = ["slice", "strided_slice", "newaxis"]
newaxis = None  # tf.newaxis: x[:, tf.newaxis]
NN_EXPORTS: tuple[str, ...] = ()

builtins_slice = builtins.slice  # ``slice`` below is tf.slice
_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def _index(rank: int | None, begin: Any, end: Any, strides: Any, masks: dict[str, int]
           ) -> tuple[Any, ...]:
    """The numpy index tuple a strided slice spec stands for."""
    idx: list[Any] = []
    seen_ellipsis = False
    for i in range(len(begin)):
        bit = 1 << i
        if masks["ellipsis_mask"] & bit:
            if seen_ellipsis:
                raise CkptsyncValueError("strided_slice: multiple ellipses in slice spec not allowed.")
            seen_ellipsis = True
            idx.append(Ellipsis)
        elif masks["new_axis_mask"] & bit:
            idx.append(None)
        elif masks["shrink_axis_mask"] & bit:
            idx.append(int(begin[i]))
        else:
            s = int(strides[i])
            if s == 0:
                raise CkptsyncValueError(f"strided_slice: strides[{i}] must be non-zero")
            idx.append(builtins_slice(None if masks["begin_mask"] & bit else int(begin[i]),
                                      None if masks["end_mask"] & bit else int(end[i]), s))
    return tuple(idx)


def _dense(rank: int, idx: tuple[Any, ...]) -> list[tuple[int, Any]]:
    """Pairs (input dim or -1 for a new axis, entry) with the ellipsis expanded."""
    n_real = sum(1 for e in idx if e is not None and e is not Ellipsis)
    if n_real > rank:
        raise CkptsyncValueError(
            f"strided_slice: index of {n_real} dimensions into a tensor of rank {rank}.")
    out: list[tuple[int, Any]] = []
    d = 0
    if Ellipsis not in idx:
        idx = idx + (Ellipsis,)
    for e in idx:
        if e is Ellipsis:
            for _ in range(rank - n_real):
                out.append((d, builtins_slice(None)))
                d += 1
        elif e is None:
            out.append((-1, None))
        else:
            out.append((d, e))
            d += 1
    return out


def _static_shape(shape: TensorShape, idx: tuple[Any, ...]) -> TensorShape:
    """The output's static shape; ``idx`` entries not known at build time are ``"?"``
    (a slice of unknown length) or ``"shrink"`` (an unknown single index)."""
    if shape.dims is None:
        return TensorShape(None)
    dims = shape.dims
    out: list[int | None] = []
    for d, e in _dense(len(dims), idx):
        if d < 0:
            out.append(1)
            continue
        size = dims[d]
        if isinstance(e, int):
            if size is not None and not -size <= e < size:
                raise CkptsyncValueError(
                    f"slice index {e} of dimension {d} out of bounds (shape {shape}).")
        elif isinstance(e, builtins_slice):
            out.append(None if size is None else len(range(size)[e]))
        elif e == "?":
            out.append(None)
    return TensorShape(out)


def _partial_index(n: int, vs: np.ndarray | None, masks: dict[str, int]) -> tuple[Any, ...]:
    """The index as far as the masks (and known strides) tell, begin/end unknown."""
    out: list[Any] = []
    for i in range(n):
        if masks["ellipsis_mask"] >> i & 1:
            out.append(Ellipsis)
        elif masks["new_axis_mask"] >> i & 1:
            out.append(None)
        elif masks["shrink_axis_mask"] >> i & 1:
            out.append("shrink")
        elif vs is not None and masks["begin_mask"] >> i & 1 and masks["end_mask"] >> i & 1:
            out.append(builtins_slice(None, None, int(vs[i])))
        else:
            out.append("?")
    return tuple(out)


def _ss_grad(op: Any, g: Tensor) -> list[Any]:
    x = op.inputs[0]
    shp = _array.shape(x, out_type=op.inputs[1].dtype)
    dx = single("StridedSliceGrad", [shp, *op.inputs[1:4], g], g.dtype, x.shape,
                attrs={k: op.attrs[k] for k in _MASKS})
    return [dx, None, None, None]


@register("StridedSlice", grad=_ss_grad)
def _strided_slice_kernel(x: np.ndarray, begin: np.ndarray, end: np.ndarray,
                          strides: np.ndarray, **masks: int) -> np.ndarray:
    idx = _index(x.ndim, begin, end, strides, masks)
    try:
        return np.array(x[idx])
    except IndexError as e:
        raise InvalidArgumentError(None, None, f"StridedSlice: {e} (shape {list(x.shape)}): "
                                   "slice index out of bounds.") from None


def _ss_grad_grad(op: Any, g: Tensor) -> list[Any]:
    begin, end, strides = op.inputs[1:4]
    return [None, None, None, None,
            single("StridedSlice", [g, begin, end, strides], g.dtype, op.inputs[4].shape,
                   attrs={k: op.attrs[k] for k in _MASKS})]


@register("StridedSliceGrad", grad=_ss_grad_grad)
def _strided_slice_grad_kernel(shape: np.ndarray, begin: np.ndarray, end: np.ndarray,
                               strides: np.ndarray, dy: np.ndarray, **masks: int) -> np.ndarray:
    out = np.zeros(tuple(int(s) for s in shape), dy.dtype)
    idx = _index(out.ndim, begin, end, strides, masks)
    out[idx] = dy.reshape(out[idx].shape)
    return out


def strided_slice(input_: Any, begin: Any, end: Any, strides: Any = None, begin_mask: int = 0,
                  end_mask: int = 0, ellipsis_mask: int = 0, new_axis_mask: int = 0,
                  shrink_axis_mask: int = 0, var: Any = None, name: str | None = None
                  ) -> Tensor:
    """``input_[begin:end:strides]`` per dimension with TF's masks, as ``tf.strided_slice``.

    Args:
        input_: a tensor of any dtype and shape ``[d0, d1, ...]``.
        begin, end, strides: 1-D int32/int64 of one length ``n`` (lists may hold scalar
            tensors); ``strides`` defaults to ones.
        begin_mask, end_mask: bit ``i`` ignores ``begin[i]`` / ``end[i]`` (full range).
        ellipsis_mask: bit ``i``: entry ``i`` is ``...``; new_axis_mask: a new dim of 1;
        shrink_axis_mask: entry ``i`` picks index ``begin[i]`` and drops the dimension.

    Raises:
        ValueError: a statically known index is out of bounds, or the spec has more
            dimensions than the input (at build time).
        InvalidArgumentError: an index is out of bounds at run time.
    """
    x = _array.convert_to_tensor(input_)
    b = _array.convert_to_tensor(begin)
    e = _array.convert_to_tensor(end, dtype=b.dtype)
    if strides is None:
        strides = np.ones(b.shape.as_list() if b.shape.is_fully_defined() else [1],
                          b.dtype.np)
    s = _array.convert_to_tensor(strides, dtype=b.dtype)
    if b.dtype not in (_dtypes.int32, _dtypes.int64):
        raise CkptsyncTypeError(f"strided_slice: begin must be int32 or int64, got {b.dtype.name}.")
    masks = dict(zip(_MASKS, (int(begin_mask), int(end_mask), int(ellipsis_mask),
                              int(new_axis_mask), int(shrink_axis_mask))))
    vb, ve, vs = constant_value(b), constant_value(e), constant_value(s)
    n = b.shape[0] if b.shape.ndims == 1 else None
    if n is None or vs is None:
        out_shape = TensorShape(None)
    elif vb is not None and ve is not None:
        out_shape = _static_shape(x.shape, _index(x.shape.ndims, vb, ve, vs, masks))
    else:
        out_shape = _static_shape(x.shape, _partial_index(n, vs, masks))
    return single("StridedSlice", [x, b, e, s], x.dtype, out_shape,
                  name=name or "StridedSlice", attrs=masks)


def _is_int_scalar(t: Any) -> bool:
    return isinstance(t, Tensor) and t.dtype.is_integer and t.shape.ndims == 0


def _slice_helper(tensor: Tensor, key: Any) -> Tensor:
    """``tensor[key]`` as TF's ``_slice_helper``: one ``StridedSlice``."""
    if not isinstance(key, (list, tuple)) or isinstance(key, list) and any(
            isinstance(k, (list, np.ndarray)) for k in key):
        key = (key,)
    if isinstance(key, list):
        key = tuple(key)
    begin: list[Any] = []
    end: list[Any] = []
    strides: list[Any] = []
    masks = dict.fromkeys(_MASKS, 0)
    for i, k in enumerate(key):
        bit = 1 << i
        if isinstance(k, builtins_slice):
            for part, lst, mname in ((k.start, begin, "begin_mask"), (k.stop, end, "end_mask")):
                if part is None:
                    lst.append(0)
                    masks[mname] |= bit
                else:
                    lst.append(_check_index(part))
            strides.append(1 if k.step is None else _check_index(k.step))
        elif k is Ellipsis:
            begin.append(0)
            end.append(0)
            strides.append(1)
            masks["ellipsis_mask"] |= bit
        elif k is None:
            begin.append(0)
            end.append(0)
            strides.append(1)
            masks["new_axis_mask"] |= bit
        else:
            k = _check_index(k)
            begin.append(k)
            end.append(k + 1 if not isinstance(k, Tensor) else k + 1)
            strides.append(1)
            masks["shrink_axis_mask"] |= bit
    with tensor.graph.name_scope("strided_slice") as scope:
        if begin:
            dt = next((v.dtype for v in begin + end + strides if isinstance(v, Tensor)),
                      _dtypes.int32)
            b, e, s = (_pack(v, "stack" if j == 0 else f"stack_{j}", dt)
                       for j, v in enumerate((begin, end, strides)))
        else:  # x[()] : an empty spec
            b = e = s = _array.constant(np.zeros([0], np.int32))
        return strided_slice(tensor, b, e, s, name=scope, **masks)


def _check_index(k: Any) -> Any:
    if isinstance(k, Tensor):
        if not _is_int_scalar(k):
            raise CkptsyncTypeError(
                "Only integers, slices (`:`), ellipsis (`...`), tf.newaxis (`None`) and scalar "
                f"tf.int32/tf.int64 tensors are valid indices, got {k!r}")
        return k
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise CkptsyncTypeError(
            "Only integers, slices (`:`), ellipsis (`...`), tf.newaxis (`None`) and scalar "
            f"tf.int32/tf.int64 tensors are valid indices, got {k!r}")
    return int(k)


def _pack(vals: list[Any], name: str, dt: _dtypes.DType) -> Tensor:
    if not any(isinstance(v, Tensor) for v in vals):
        return _array.constant(np.asarray(vals, dt.np), name=name)
    return stack([_array.convert_to_tensor(v, dtype=dt) for v in vals], name=name)


_TensorClass.override_operator("__getitem__", _slice_helper)


# --------------------------------------------------------------------- tf.slice
def _slice_grad(op: Any, g: Tensor) -> list[Any]:
    x, begin, _ = op.inputs
    x_shape = _array.shape(x, out_type=begin.dtype)
    after = x_shape - _array.shape(op.outputs[0], out_type=begin.dtype) - begin
    paddings = _array.concat([_array.reshape(begin, [-1, 1]), _array.reshape(after, [-1, 1])], 1)
    return [pad(g, paddings), None, None]


@register("Slice", grad=_slice_grad)
def _slice_kernel(x: np.ndarray, begin: np.ndarray, size: np.ndarray) -> np.ndarray:
    idx = []
    for d, (b, n) in enumerate(zip(begin.tolist(), size.tolist())):
        n = x.shape[d] - b if n == -1 else n
        if b < 0 or n < 0 or b + n > x.shape[d]:
            raise InvalidArgumentError(
                None, None, f"Slice: expected begin[{d}]={b} and size[{d}]={n} to be within "
                f"the input's dim {d} of size {x.shape[d]}.")
        idx.append(builtins_slice(b, b + n))
    return np.array(x[tuple(idx)])


def slice(input_: Any, begin: Any, size: Any, name: str | None = None) -> Tensor:  # noqa: A001
    """``size[i]`` elements from ``begin[i]`` in each dim (``-1``: to the end), as ``tf.slice``.

    Raises:
        ValueError: begin/size do not match the input's rank, or a known slice is out of
            bounds (at build time).
        InvalidArgumentError: the slice is out of bounds at run time.
    """
    x = _array.convert_to_tensor(input_)
    b = _array.convert_to_tensor(begin)
    sz = _array.convert_to_tensor(size, dtype=b.dtype)
    vb, vs = constant_value(b), constant_value(sz)
    out: Any = None
    if vs is not None:
        rank = int(np.size(vs))
        if x.shape.ndims is not None and x.shape.ndims != rank:
            raise CkptsyncValueError(
                f"Slice: size has {rank} elements for an input of shape {x.shape}.")
        dims = x.shape.dims or (None,) * rank
        out = []
        for d, n in enumerate(np.reshape(vs, -1).tolist()):
            if n != -1:
                out.append(n)
            elif vb is not None and (full_d := dims[d]) is not None:
                bd = int(np.reshape(vb, -1)[d])
                if bd > full_d:
                    raise CkptsyncValueError(f"Slice: begin[{d}]={bd} is past dim {d} of {x.shape}.")
                out.append(full_d - bd)
            else:
                out.append(None)
        if vb is not None and x.shape.dims is not None:
            for d, (bd, n, full) in enumerate(zip(np.reshape(vb, -1).tolist(), out, dims)):
                if full is not None and n is not None and (bd < 0 or bd + n > full):
                    raise CkptsyncValueError(
                        f"Slice: begin[{d}]={bd}, size[{d}]={n} are out of bounds of {x.shape}.")
    elif b.shape.is_fully_defined():
        out = [None] * b.shape[0]
    return single("Slice", [x, b, sz], x.dtype, out, name=name or "Slice")
