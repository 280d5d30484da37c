"""Index builders: ``range``, ``one_hot``, ``sequence_mask``, ``dynamic_stitch``, as TF1
(issue 17).

Only ``dynamic_stitch`` has a gradient (TF registers ``Range`` and ``OneHot`` as not
differentiable; ``sequence_mask`` ends in a comparison).
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Tensor, get_default_graph
from .array_ops import convert_to_tensor
from .const_fold import constant_value
from .math_ops import cast, less, maximum, reduce_max
from .registry import register, single

__all__ = ["range", "one_hot", "sequence_mask", "dynamic_stitch"]
# Names also (or only) exported as ``cs.nn.<name>``.
NN_EXPORTS: tuple[str, ...] = ()

_RANGE_DTYPES = (_dtypes.int32, _dtypes.int64, _dtypes.float32, _dtypes.float64)


def _const(t: Tensor) -> np.ndarray | None:
    v = constant_value(t)
    return None if v is None else np.asarray(v)


def _graph_of(*values: Any) -> Any:
    for v in values:
        if isinstance(v, Tensor):
            return v.graph
    return get_default_graph()


# --------------------------------------------------------------------- range
def _range_size(start: Any, limit: Any, delta: Any, integral: bool) -> int:
    if delta == 0:
        raise CkptsyncValueError("Requires delta != 0")
    if delta > 0 and start > limit:
        raise CkptsyncValueError(f"Requires start <= limit when delta > 0: {start}/{limit}")
    if delta < 0 and start < limit:
        raise CkptsyncValueError(f"Requires start >= limit when delta < 0: {start}/{limit}")
    if integral:
        return int((abs(int(limit) - int(start)) + abs(int(delta)) - 1) // abs(int(delta)))
    return int(np.ceil(abs((float(limit) - float(start)) / float(delta))))


@register("Range", not_differentiable=True)
def _range_kernel(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    dt = start.dtype
    for arg, v in (("start", start), ("limit", limit), ("delta", delta)):
        if v.ndim != 0:
            raise CkptsyncValueError(f"{arg} must be a scalar, not shape {list(v.shape)}")
    n = _range_size(start[()], limit[()], delta[()], dt.kind in "iu")
    if n == 0:
        return np.zeros(0, dt)
    # As TF's kernel: repeated addition in the output dtype.
    steps = np.full(n, delta, dt)
    steps[0] = start
    return np.cumsum(steps, dtype=dt)


def range(start: Any, limit: Any = None, delta: Any = 1, dtype: Any = None,  # noqa: A001
          name: str = "range") -> Tensor:
    """``[start, start + delta, ...]`` up to (not including) ``limit``, as TF1's
    ``tf.range``; ``range(n)`` is ``range(0, n)``.

    The dtype, unless given, is the widest of the arguments' in the order int32, int64,
    float32, float64 (Python ints are int32, floats float32); tensor arguments are cast
    to it. The static shape is known when all three are known at build time (constants,
    static shapes: ``range(tf.shape(x)[0])``, as TF's shape inference).

    Raises:
        TypeError: an argument's dtype is not one of those four.
        ValueError: constant arguments that give no valid range (``delta == 0``, or
            ``limit`` on the wrong side of ``start``).
        InvalidArgumentError (at run time): the same for fed values.
    """
    if limit is None:
        start, limit = 0, start
    dt = None if dtype is None else _dtypes.as_dtype(dtype)
    with _graph_of(start, limit, delta).name_scope(name or "Range") as scope:
        args = [convert_to_tensor(v, dtype=None if isinstance(v, Tensor) else dt, name=n)
                for v, n in ((start, "start"), (limit, "limit"), (delta, "delta"))]
        for a in args:
            if a.dtype not in _RANGE_DTYPES:
                raise CkptsyncTypeError(
                    f"Range: arguments must be int32, int64, float32 or float64, got "
                    f"{a.dtype.name} ({a.name}).")
        if dt is None:
            dt = max((a.dtype for a in args), key=_RANGE_DTYPES.index)
        args = [cast(a, dt) for a in args]
        values = [_const(a) for a in args]
        size: int | None = None
        if all(v is not None for v in values):
            s, lim, d = (v.reshape(()).astype(dt.np) for v in values)  # type: ignore[union-attr]
            size = _range_size(s, lim, d, dt.is_integer)
        return single("Range", args, dt, [size], name=scope)


# --------------------------------------------------------------------- one_hot
@register("OneHot", not_differentiable=True)
def _one_hot_kernel(indices: np.ndarray, depth: np.ndarray, on: np.ndarray, off: np.ndarray,
                    *, axis: int) -> np.ndarray:
    d = int(depth)
    if d < 0:
        raise CkptsyncValueError(f"depth must be non-negative, got: {d}")
    if axis > indices.ndim:
        raise CkptsyncValueError(
            f"Expected axis to be -1 or between [0, {indices.ndim}).  But received: {axis}")
    hot = indices[..., None] == np.arange(d, dtype=np.int64)
    out = np.where(hot, on, off).astype(on.dtype, copy=False)
    if axis != -1:
        out = np.moveaxis(out, -1, axis)
    return np.ascontiguousarray(out)


def one_hot(indices: Any, depth: Any, on_value: Any = None, off_value: Any = None,
            axis: Any = None, dtype: Any = None, name: str | None = None) -> Tensor:
    """One-hot vectors: ``on_value`` where ``indices == i``, else ``off_value``, as TF1's
    ``tf.one_hot``.

    Args:
        indices: uint8/int8/int32/int64 ``[...]``; an index outside ``[0, depth)`` gives
            an all-off vector.
        depth: int32 scalar (Python int or tensor); the size of the new dimension.
        on_value, off_value: scalars (default 1 and 0 of ``dtype``).
        axis: where the new dimension goes (``-1``, the default, appends it).
        dtype: the output dtype; default the dtype of ``on_value``/``off_value``, else
            float32.

    Returns:
        ``indices.shape`` with ``depth`` inserted at ``axis``. Op ``OneHot``, named
        ``one_hot`` (its constants ``one_hot/on_value`` ...).

    Raises:
        TypeError: ``dtype`` and the on/off values' dtypes disagree; indices not integer.
        ValueError: ``axis < -1``; on/off values or ``depth`` not scalars.
        InvalidArgumentError (at run time): ``axis`` past the rank of ``indices``.
    """
    ax = -1 if axis is None else int(axis)
    with _graph_of(indices, depth, on_value, off_value).name_scope(name or "one_hot") as scope:
        idx = convert_to_tensor(indices, name="indices")
        if idx.dtype not in (_dtypes.uint8, _dtypes.int8, _dtypes.int32, _dtypes.int64):
            raise CkptsyncTypeError(
                f"OneHot: indices must be uint8, int8, int32 or int64, got {idx.dtype.name}.")
        dt = None if dtype is None else _dtypes.as_dtype(dtype)
        on_dt = None if on_value is None else convert_to_tensor(on_value).dtype
        off_dt = None if off_value is None else convert_to_tensor(off_value).dtype
        if on_dt is not None or off_dt is not None:
            if dt is not None:
                for which, vdt in (("on_value", on_dt), ("off_value", off_dt)):
                    if vdt is not None and vdt != dt:
                        raise CkptsyncTypeError(
                            f"one_hot: dtype {vdt.name} of {which} does not match dtype "
                            f"parameter {dt.name}.")
            else:
                dt = on_dt if on_dt is not None else off_dt
        elif dt is None:
            dt = _dtypes.float32
        if on_dt is not None and off_dt is not None and on_dt != off_dt:
            raise CkptsyncTypeError(
                f"one_hot: dtype {on_dt.name} of on_value does not match dtype "
                f"{off_dt.name} of off_value.")
        on = convert_to_tensor(1 if on_value is None else on_value, dtype=dt, name="on_value")
        off = convert_to_tensor(0 if off_value is None else off_value, dtype=dt,
                                name="off_value")
        dep = convert_to_tensor(depth, dtype=None if isinstance(depth, Tensor)
                                else _dtypes.int32, name="depth")
        if dep.dtype != _dtypes.int32:
            raise CkptsyncTypeError(f"OneHot: depth must be int32, got {dep.dtype.name}.")
        for arg, t in (("depth", dep), ("on_value", on), ("off_value", off)):
            if t.shape.ndims not in (None, 0):
                raise CkptsyncValueError(f"OneHot: {arg} must be a scalar, got {t.shape}.")
        dv = _const(dep)
        static_depth = None if dv is None else int(dv.reshape(()))
        if static_depth is not None and static_depth < 0:
            raise CkptsyncValueError(f"OneHot: depth must be non-negative, got {static_depth}.")
        shape: Any = None
        if idx.shape.dims is not None:
            # An axis past the rank is refused when the graph runs, as TF's.
            dims = list(idx.shape.dims)
            dims.insert(len(dims) if ax == -1 else ax, static_depth)
            shape = dims
        if ax < -1:
            raise CkptsyncValueError(f"OneHot: axis must be >= -1, got {ax}.")
        return single("OneHot", [idx, dep, on, off], on.dtype, shape, name=scope,
                      attrs={"axis": ax})


# --------------------------------------------------------------------- sequence_mask
@register("ExpandDimsLast", not_differentiable=True)
def _expand_last_kernel(x: np.ndarray) -> np.ndarray:
    return x[..., None]


def sequence_mask(lengths: Any, maxlen: Any = None, dtype: Any = _dtypes.bool,
                  name: str | None = None) -> Tensor:
    """``mask[..., j] = j < lengths[...]`` for ``j`` in ``[0, maxlen)``, as TF1's
    ``tf.sequence_mask``.

    Args:
        lengths: integer ``[...]``.
        maxlen: integer scalar (default ``max(0, max(lengths))``).
        dtype: the output dtype (bool, else cast).

    Returns:
        ``lengths.shape + [maxlen]`` (``maxlen`` static when constant), named
        ``SequenceMask/Less`` (``SequenceMask/Cast_1`` when cast), as TF's.

    Raises:
        ValueError: ``maxlen`` is not a scalar.
    """
    with _graph_of(lengths, maxlen).name_scope(name or "SequenceMask"):
        lens = convert_to_tensor(lengths)
        if maxlen is None:
            mx = reduce_max(lens, axis=builtins.list(builtins.range(lens.shape.ndims or 0))
                            if lens.shape.ndims is not None else None)
            mlen = maximum(convert_to_tensor(np.zeros((), mx.dtype.np)), mx)
        else:
            mlen = convert_to_tensor(maxlen)
        if mlen.shape.ndims not in (None, 0):
            raise CkptsyncValueError("maxlen must be scalar for sequence_mask")
        row = range(convert_to_tensor(np.zeros((), mlen.dtype.np)), mlen,
                    convert_to_tensor(np.ones((), mlen.dtype.np)), name="Range")
        dims = lens.shape.dims
        matrix = single("ExpandDimsLast", [lens], lens.dtype,
                        None if dims is None else [*dims, 1], name="ExpandDims")
        matrix = single("Cast", [matrix], mlen.dtype, matrix.shape,  # always, as TF's
                        attrs={"dtype": mlen.dtype})
        result = less(row, matrix)
        dt = _dtypes.as_dtype(dtype) if dtype is not None else _dtypes.bool
        return result if dt == _dtypes.bool else cast(result, dt)


# --------------------------------------------------------------------- dynamic_stitch
def _stitch_grad(op: Any, g: Tensor) -> list[Any]:
    n = op.attrs["N"]
    idx = op.inputs[:n]
    return [None] * n + [single("DynamicStitchGrad", [g, i], g.dtype, d.shape)
                         for i, d in zip(idx, op.inputs[n:])]


@register("DynamicStitchGrad")
def _stitch_grad_kernel(g: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return np.take(g, idx, axis=0)


@register("DynamicStitch", grad=_stitch_grad)
def _stitch_kernel(*arrays: np.ndarray, N: int) -> np.ndarray:  # noqa: N803 - TF's attr
    idx, data = arrays[:N], arrays[N:]
    rest = data[0].shape[idx[0].ndim:]
    for i, (ix, d) in enumerate(zip(idx, data)):
        if d.shape != ix.shape + rest:
            raise CkptsyncValueError(
                f"data[{i}].shape = {list(d.shape)} does not start with indices[{i}].shape "
                f"= {list(ix.shape)} followed by {list(rest)}")
    flat = np.concatenate([ix.reshape(-1) for ix in idx]).astype(np.int64)
    rows = np.concatenate([d.reshape((-1,) + rest) for d in data], axis=0)
    bad = np.flatnonzero(flat < 0)
    if bad.size:
        raise CkptsyncValueError(f"indices[{int(bad[0])}] is out of range")
    out = np.zeros((int(flat.max()) + 1 if flat.size else 0,) + rest, data[0].dtype)
    out[flat] = rows  # numpy assigns in order: a later index wins, as TF's
    return out


def dynamic_stitch(indices: Any, data: Any, name: str | None = None) -> Tensor:
    """Interleaves ``data`` into one tensor by ``indices``, as TF1's ``tf.dynamic_stitch``:
    ``merged[indices[m][i], ...] = data[m][i, ...]`` (the inverse of
    ``dynamic_partition``).

    Args:
        indices: a list of int32 tensors.
        data: as many tensors of one dtype; ``data[m].shape`` is ``indices[m].shape``
            followed by the same trailing dims.

    Returns:
        ``[max(indices) + 1] + trailing dims`` (the first dim static when every index is
        a build-time constant); rows no index names are 0; for repeated indices the
        later value wins. The gradient gathers (repeats get it too, as TF's).

    Raises:
        TypeError: an index tensor is not int32, or the data dtypes differ.
        ValueError: the lists differ in length or the shapes do not fit.
        InvalidArgumentError (at run time): a negative index, or fed shapes that differ.
    """
    idx = [convert_to_tensor(i) for i in indices]
    vals = [convert_to_tensor(d) for d in data]
    if len(idx) != len(vals) or not idx:
        raise CkptsyncValueError(
            f"dynamic_stitch: {len(vals)} data tensors must match {len(idx)} indices "
            f"tensors (at least one).")
    for i in idx:
        if i.dtype != _dtypes.int32:
            raise CkptsyncTypeError(
                f"DynamicStitch: indices must be int32, got {i.dtype.name} ({i.name}).")
    if len({v.dtype for v in vals}) > 1:
        raise CkptsyncTypeError(
            f"DynamicStitch: data dtypes differ: {[v.dtype.name for v in vals]}.")
    rest: Any = None
    for m, (i, v) in enumerate(zip(idx, vals)):
        if i.shape.ndims is None or v.shape.dims is None:
            continue
        r = i.shape.ndims
        if len(v.shape.dims) < r or not v.shape[:r].is_compatible_with(i.shape):
            raise CkptsyncValueError(
                f"DynamicStitch: data[{m}] {v.shape} must start with indices[{m}] "
                f"{i.shape}.")
        tail = v.shape[r:]
        if rest is not None and not rest.is_compatible_with(tail):
            raise CkptsyncValueError(
                f"DynamicStitch: the trailing dims of data[{m}] {v.shape} differ from "
                f"{rest}.")
        rest = tail if rest is None else rest.merge_with(tail)
    known = [_const(i) for i in idx]
    first = None
    if all(k is not None for k in known):
        first = max((int(k.max()) for k in known if k.size), default=-1) + 1  # type: ignore[union-attr]
    shape = None if rest is None else [first, *rest.as_list()]
    return single("DynamicStitch", [*idx, *vals], vals[0].dtype, shape,
                  name=name or "DynamicStitch", attrs={"N": len(idx)})
