"""Segment reductions, ``unique`` and ``dynamic_partition``, as TF1 (issue 17).

``segment_*(data, segment_ids)``: ``segment_ids`` is int32/int64 ``[data.shape[0]]``,
sorted, non-negative; the output has ``segment_ids[-1] + 1`` rows (empty segments are 0).
``unsorted_segment_*(data, segment_ids, num_segments)``: ``segment_ids`` is a prefix of
``data``'s shape, in any order; negative ids are dropped (TF's CPU kernels); the output
is ``[num_segments] + data.shape[segment_ids.ndim:]``, empty segments 0 for sums and
means, 1 for products, the dtype's lowest (max) / highest (min) finite value. Ids out of range
raise ``InvalidArgumentError`` when the graph runs. Kernels are vectorised (a stable
sort and one ``ufunc.reduceat``).
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Tensor
from .array_ops import convert_to_tensor
from .const_fold import constant_value
from .registry import make_op, register, single
from .selection_ops import check_index_dtype

__all__ = [
    "segment_sum", "segment_mean", "segment_max", "segment_min", "segment_prod",
    "unsorted_segment_sum",
    "unsorted_segment_max", "unsorted_segment_min", "unsorted_segment_mean",
    "unsorted_segment_prod", "unique", "dynamic_partition",
]
# Names also (or only) exported as ``cs.nn.<name>``.
NN_EXPORTS: tuple[str, ...] = ()

_UFUNC = {"sum": np.add, "mean": np.add, "prod": np.multiply, "max": np.maximum,
          "min": np.minimum}


def _empty_value(kind: str, dtype: np.dtype, sorted_: bool) -> Any:
    if kind == "prod":
        return 1
    if kind in ("max", "min") and not sorted_:
        info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
        return info.min if kind == "max" else info.max
    return 0


def _reduce_rows(kind: str, data: np.ndarray, ids: np.ndarray, num: int, sorted_: bool
                 ) -> np.ndarray:
    """``[num] + data.shape[1:]``: ``data``'s rows reduced by ``kind`` per id (``ids`` in
    ``[0, num)``, one per row)."""
    rest = data.shape[1:]
    out = np.full((num,) + rest, _empty_value(kind, data.dtype, sorted_), data.dtype)
    if ids.size == 0:
        return out
    if sorted_:
        s, vals = ids, data
    else:
        order = np.argsort(ids, kind="stable")
        s, vals = ids[order], np.take(data, order, axis=0)
    starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    red = _UFUNC[kind].reduceat(vals, starts, axis=0)
    if kind == "mean":
        counts = np.diff(np.append(starts, s.size)).reshape((-1,) + (1,) * len(rest))
        red = red / counts.astype(red.dtype) if red.dtype.kind in "fc" else red // counts
    out[s[starts]] = red
    return out


def _sorted_ids(ids: np.ndarray, rows: int) -> int:
    if ids.ndim != 1 or ids.shape[0] != rows:
        raise CkptsyncValueError(
            f"segment_ids should be the same size as dimension 0 of input, got "
            f"{list(ids.shape)} for {rows} rows")
    if ids.size == 0:
        return 0
    if ids[0] < 0:
        raise CkptsyncValueError(f"segment ids must be >= 0, got {int(ids[0])}")
    bad = np.flatnonzero(ids[1:] < ids[:-1])
    if bad.size:
        i = int(bad[0])
        raise CkptsyncValueError(
            f"segment ids are not increasing: segment_ids[{i + 1}] = {int(ids[i + 1])} "
            f"after {int(ids[i])}")
    return int(ids[-1]) + 1


def _flat_unsorted(data: np.ndarray, ids: np.ndarray, num: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Checks ``ids`` and ``num``; returns data rows ``[n, ...]`` and their ids, the
    negative ids dropped."""
    if data.shape[:ids.ndim] != ids.shape:
        raise CkptsyncValueError(
            f"data.shape = {list(data.shape)} does not start with segment_ids.shape = "
            f"{list(ids.shape)}")
    if num < 0:
        raise CkptsyncValueError(f"num_segments must be >= 0, got {num}")
    flat_ids = ids.reshape(-1)
    rows = data.reshape((flat_ids.size,) + data.shape[ids.ndim:])
    bad = np.flatnonzero(flat_ids >= num)
    if bad.size:
        i = int(bad[0])
        raise CkptsyncValueError(
            f"segment_ids[{i}] = {int(flat_ids[i])} is out of range [0, {num})")
    keep = flat_ids >= 0
    if not keep.all():
        return rows[keep], flat_ids[keep]
    return rows, flat_ids


def _segment_grad(op: Any, g: Tensor) -> list[Any]:
    data, ids = op.inputs[0], op.inputs[1]
    kind = op.attrs["kind"]
    gd = single("SegmentReductionGrad", [g, data, ids, op.outputs[0]], g.dtype, data.shape,
                attrs={"kind": kind, "sorted": op.type.startswith("Segment")})
    return [gd] + [None] * (len(op.inputs) - 1)


@register("SegmentReductionGrad")
def _segment_grad_kernel(g: np.ndarray, data: np.ndarray, ids: np.ndarray, out: np.ndarray,
                         *, kind: str, sorted: bool) -> np.ndarray:  # noqa: A002
    """The gradient of every segment reduction, as TF's: ``g`` gathered at the ids (ids
    dropped get 0), divided by the count (mean), shared among the ties (max/min), times
    the product of the other elements (prod)."""
    flat_ids = ids.reshape(-1)
    rest = data.shape[ids.ndim:]
    x = data.reshape((flat_ids.size,) + rest)
    valid = flat_ids >= 0
    safe = np.where(valid, flat_ids, 0)
    bshape = (-1,) + (1,) * len(rest)
    gathered = np.take(g, safe, axis=0)
    if not valid.all():
        gathered = gathered * valid.reshape(bshape).astype(g.dtype)
    n = g.shape[0]
    if kind == "mean":
        counts = np.bincount(flat_ids[valid], minlength=n)[:n].astype(g.dtype)
        gathered = gathered / np.maximum(counts, 1)[safe].reshape(bshape)
    elif kind in ("max", "min"):
        selected = (x == out[safe]) & valid.reshape(bshape)
        num_sel = _reduce_rows("sum", selected.astype(g.dtype)[valid], flat_ids[valid], n, True
                               if sorted else False)
        with np.errstate(divide="ignore", invalid="ignore"):
            gathered = np.where(selected, gathered / num_sel[safe], 0).astype(g.dtype)
    elif kind == "prod":
        is_zero = x == 0
        nz = np.where(is_zero, np.ones_like(x), x)
        zeros = _reduce_rows("sum", is_zero.astype(np.int64)[valid], flat_ids[valid], n, False)
        nz_prod = _reduce_rows("prod", nz[valid], flat_ids[valid], n, False)
        with np.errstate(divide="ignore", invalid="ignore"):
            partial = np.where(is_zero, nz_prod[safe], out[safe] / nz)
        gathered = np.where(zeros[safe] > 1, 0, gathered * partial).astype(g.dtype)
    return gathered.reshape(data.shape)


def _register_kernels() -> None:
    for kind in ("sum", "mean", "max", "min", "prod"):
        def sorted_kernel(data: np.ndarray, ids: np.ndarray, *, kind: str = kind,
                          **_: Any) -> np.ndarray:
            num = _sorted_ids(ids, data.shape[0])
            return _reduce_rows(kind, data, ids, num, True)
        register(f"Segment{kind.capitalize()}", grad=_segment_grad)(sorted_kernel)
    for kind in ("sum", "max", "min", "prod"):
        def unsorted_kernel(data: np.ndarray, ids: np.ndarray, num: np.ndarray, *,
                            kind: str = kind, **_: Any) -> np.ndarray:
            rows, flat_ids = _flat_unsorted(data, ids, int(num))
            return _reduce_rows(kind, rows, flat_ids, int(num), False)
        register(f"UnsortedSegment{kind.capitalize()}", grad=_segment_grad)(unsorted_kernel)


_register_kernels()


def _check_data(op: str, d: Tensor, kind: str) -> None:
    if not (d.dtype.is_floating or d.dtype.is_integer or (d.dtype.is_complex and
                                                          kind in ("sum", "mean", "prod"))):
        raise CkptsyncTypeError(f"{op}: 'data' must be a real number type, got {d.dtype.name}.")


def _segment(kind: str, data: Any, segment_ids: Any, name: str | None) -> Tensor:
    op = f"Segment{kind.capitalize()}"
    d = convert_to_tensor(data)
    ids = convert_to_tensor(segment_ids)
    check_index_dtype(op, "segment_ids", ids)
    _check_data(op, d, kind)
    if ids.shape.ndims not in (None, 1):
        raise CkptsyncValueError(f"{op}: segment_ids must be a vector, got shape {ids.shape}.")
    if d.shape.ndims == 0:
        raise CkptsyncValueError(f"{op}: data must be at least a vector, got a scalar.")
    shape = None if d.shape.ndims is None else [None, *d.shape.dims[1:]]  # type: ignore[index, misc]
    return single(op, [d, ids], d.dtype, shape, name=name or op, attrs={"kind": kind})


def _const_int(t: Tensor) -> int | None:
    v = constant_value(t)
    return None if v is None or np.size(v) != 1 else int(np.asarray(v).reshape(()))


def _unsorted(kind: str, data: Any, segment_ids: Any, num_segments: Any, name: str | None
              ) -> Tensor:
    op = f"UnsortedSegment{kind.capitalize()}"
    d = convert_to_tensor(data)
    ids = convert_to_tensor(segment_ids)
    n = convert_to_tensor(num_segments)
    check_index_dtype(op, "segment_ids", ids)
    check_index_dtype(op, "num_segments", n)
    _check_data(op, d, kind)
    if n.shape.ndims not in (None, 0):
        raise CkptsyncValueError(f"{op}: num_segments must be a scalar, got {n.shape}.")
    num = _const_int(n)
    if num is not None and num < 0:
        raise CkptsyncValueError(f"{op}: num_segments must be >= 0, got {num}.")
    shape: Any = None
    if d.shape.ndims is not None and ids.shape.ndims is not None:
        r = ids.shape.ndims
        if r > d.shape.ndims or not d.shape[:r].is_compatible_with(ids.shape):
            raise CkptsyncValueError(
                f"{op}: data.shape {d.shape} must start with segment_ids.shape {ids.shape}.")
        shape = [num, *d.shape.dims[r:]]  # type: ignore[index, misc]
    return single(op, [d, ids, n], d.dtype, shape, name=name or op, attrs={"kind": kind})


def segment_sum(data: Any, segment_ids: Any, name: str | None = None) -> Tensor:
    """Sums the rows of ``data`` per sorted segment id, as TF1's ``tf.segment_sum``.

    Args:
        data: ``[n, ...]``, a real or complex type.
        segment_ids: int32/int64 ``[n]``, sorted, >= 0.

    Returns:
        ``[segment_ids[-1] + 1, ...]`` (static ``[None, ...]``), ``data``'s dtype; rows
        of empty segments are 0. Op ``SegmentSum``.

    Raises:
        TypeError: ``segment_ids`` is not int32/int64, or ``data`` not a number type.
        ValueError: the static shapes do not fit.
        InvalidArgumentError (at run time): ids unsorted, negative, or the wrong length.
    """
    return _segment("sum", data, segment_ids, name)


def segment_mean(data: Any, segment_ids: Any, name: str | None = None) -> Tensor:
    """As :func:`segment_sum` but the mean of each segment (empty: 0), as TF1's."""
    return _segment("mean", data, segment_ids, name)


def segment_max(data: Any, segment_ids: Any, name: str | None = None) -> Tensor:
    """As :func:`segment_sum` but the maximum of each segment (empty: 0), as TF1's; the
    gradient is shared among tied maxima."""
    return _segment("max", data, segment_ids, name)


def segment_min(data: Any, segment_ids: Any, name: str | None = None) -> Tensor:
    """As :func:`segment_sum` but the minimum of each segment (empty: 0), as TF1's."""
    return _segment("min", data, segment_ids, name)


def segment_prod(data: Any, segment_ids: Any, name: str | None = None) -> Tensor:
    """As :func:`segment_sum` but the product of each segment (empty: 1), as TF1's."""
    return _segment("prod", data, segment_ids, name)


def unsorted_segment_sum(data: Any, segment_ids: Any, num_segments: Any,
                         name: str | None = None) -> Tensor:
    """Sums ``data`` per segment id, ids in any order, as TF1's ``tf.unsorted_segment_sum``.

    Args:
        data: ``[d0, ..., dk, ...]``, a real or complex type.
        segment_ids: int32/int64 ``[d0, ..., dk]`` (a prefix of ``data``'s shape); a
            negative id drops its element.
        num_segments: int32/int64 scalar (a Python int or a tensor).

    Returns:
        ``[num_segments] + data.shape[k+1:]`` (``num_segments`` static when constant),
        ``data``'s dtype. Op ``UnsortedSegmentSum``.

    Raises:
        TypeError: ids or ``num_segments`` not int32/int64, ``data`` not a number type.
        ValueError: ``data``'s shape does not start with ``segment_ids``' shape.
        InvalidArgumentError (at run time): an id is ``>= num_segments``.
    """
    return _unsorted("sum", data, segment_ids, num_segments, name)


def unsorted_segment_max(data: Any, segment_ids: Any, num_segments: Any,
                         name: str | None = None) -> Tensor:
    """As :func:`unsorted_segment_sum` but the maximum (empty: the dtype's lowest)."""
    return _unsorted("max", data, segment_ids, num_segments, name)


def unsorted_segment_min(data: Any, segment_ids: Any, num_segments: Any,
                         name: str | None = None) -> Tensor:
    """As :func:`unsorted_segment_sum` but the minimum (empty: the dtype's highest)."""
    return _unsorted("min", data, segment_ids, num_segments, name)


def unsorted_segment_prod(data: Any, segment_ids: Any, num_segments: Any,
                          name: str | None = None) -> Tensor:
    """As :func:`unsorted_segment_sum` but the product (empty: 1); the gradient handles
    zeros as TF's."""
    return _unsorted("prod", data, segment_ids, num_segments, name)


def unsorted_segment_mean(data: Any, segment_ids: Any, num_segments: Any,
                          name: str | None = None) -> Tensor:
    """As :func:`unsorted_segment_sum` but the mean (empty: 0), as TF's
    ``tf.math.unsorted_segment_mean`` (one op here, ``UnsortedSegmentMean``; TF composes
    it from a sum and a division)."""
    return _unsorted("mean", data, segment_ids, num_segments, name)


@register("UnsortedSegmentMean", grad=_segment_grad)
def _unsorted_mean_kernel(data: np.ndarray, ids: np.ndarray, num: np.ndarray, **_: Any
                          ) -> np.ndarray:
    rows, flat_ids = _flat_unsorted(data, ids, int(num))
    return _reduce_rows("mean", rows, flat_ids, int(num), False)


# --------------------------------------------------------------------- unique
UniqueOutput = collections.namedtuple("UniqueOutput", ["y", "idx"])


@register("Unique")
def _unique_kernel(x: np.ndarray, *, out_idx: Any) -> tuple[np.ndarray, np.ndarray]:
    if x.ndim != 1:
        raise CkptsyncValueError(f"unique expects a 1D vector, got shape {list(x.shape)}")
    # NaNs are all distinct, as TF's hash table (numpy would fold them into one).
    uniq, first, inverse = np.unique(x, return_index=True, return_inverse=True,
                                     equal_nan=False)
    order = np.argsort(first, kind="stable")
    rank = np.empty(order.size, np.int64)
    rank[order] = np.arange(order.size)
    return uniq[order], rank[inverse.reshape(-1)].astype(out_idx.np)


def unique(x: Any, out_idx: Any = _dtypes.int32, name: str | None = None) -> UniqueOutput:
    """The distinct elements of a vector in order of first appearance, and each
    element's position among them, as TF1's ``tf.unique``.

    Returns:
        ``(y, idx)``: ``y`` ``[None]`` of ``x``'s dtype, ``idx`` ``x.shape`` of
        ``out_idx`` (int32/int64) with ``x == gather(y, idx)``. Op ``Unique`` (no
        gradient, as TF: differentiating through it raises ``LookupError``).

    Raises:
        ValueError: ``x`` is not a vector.
        TypeError: ``out_idx`` is not int32/int64.
    """
    t = convert_to_tensor(x)
    dt = _dtypes.as_dtype(out_idx)
    if dt not in (_dtypes.int32, _dtypes.int64):
        raise CkptsyncTypeError(f"Unique: out_idx must be int32 or int64, got {dt.name}.")
    if t.shape.ndims not in (None, 1):
        raise CkptsyncValueError(f"Unique: x must be a vector, got shape {t.shape}.")
    op = make_op("Unique", [t], [t.dtype, dt], [[None], t.shape], name=name or "Unique",
                 attrs={"out_idx": dt})
    return UniqueOutput(*op.outputs)


# --------------------------------------------------------------------- dynamic_partition
def _partition_order(partitions: np.ndarray, num: int) -> tuple[np.ndarray, np.ndarray]:
    flat = partitions.reshape(-1)
    bad = np.flatnonzero((flat < 0) | (flat >= num))
    if bad.size:
        i = int(bad[0])
        raise CkptsyncValueError(f"partitions[{i}] = {int(flat[i])} is not in [0, {num})")
    order = np.argsort(flat, kind="stable")
    cuts = np.cumsum(np.bincount(flat, minlength=num))[:-1]
    return order, cuts


def _dynamic_partition_grad(op: Any, *grads: Tensor | None) -> list[Any]:
    data, parts = op.inputs
    filled = [g if g is not None else single("ZerosLike", [o], o.dtype, o.shape,
                                             attrs={"dtype": o.dtype})
              for g, o in zip(grads, op.outputs)]
    return [single("DynamicPartitionGrad", [data, parts, *filled], data.dtype, data.shape,
                   attrs={"num_partitions": op.attrs["num_partitions"]}), None]


@register("DynamicPartition", grad=_dynamic_partition_grad)
def _dynamic_partition_kernel(data: np.ndarray, partitions: np.ndarray, *,
                              num_partitions: int) -> Any:
    if data.shape[:partitions.ndim] != partitions.shape:
        raise CkptsyncValueError(
            f"data.shape must start with partitions.shape, got data.shape = "
            f"{list(data.shape)}, partitions.shape = {list(partitions.shape)}")
    order, cuts = _partition_order(partitions, num_partitions)
    rows = np.take(data.reshape((order.size,) + data.shape[partitions.ndim:]), order, axis=0)
    if num_partitions == 1:  # a one-output op's kernel returns the array itself
        return rows
    return tuple(np.split(rows, cuts, axis=0))


@register("DynamicPartitionGrad")
def _dynamic_partition_grad_kernel(data: np.ndarray, partitions: np.ndarray,
                                   *grads: np.ndarray, num_partitions: int) -> np.ndarray:
    order, _ = _partition_order(partitions, num_partitions)
    rest = data.shape[partitions.ndim:]
    out = np.zeros((order.size,) + rest, grads[0].dtype if grads else data.dtype)
    out[order] = np.concatenate([g.reshape((-1,) + rest) for g in grads], axis=0)
    return out.reshape(data.shape)


def dynamic_partition(data: Any, partitions: Any, num_partitions: int,
                      name: str | None = None) -> list[Tensor]:
    """Splits ``data`` into ``num_partitions`` tensors by ``partitions``, as TF1's
    ``tf.dynamic_partition`` (order within a partition is kept).

    Args:
        data: ``[d0, ..., dk, ...]``, any dtype.
        partitions: int32 ``[d0, ..., dk]`` (a prefix of ``data``'s shape), values in
            ``[0, num_partitions)``.

    Returns:
        ``num_partitions`` tensors ``[None] + data.shape[k+1:]``. Op ``DynamicPartition``.

    Raises:
        TypeError: ``partitions`` is not int32.
        ValueError: ``num_partitions < 1`` or the shapes do not fit.
        InvalidArgumentError (at run time): a partition out of range.
    """
    d = convert_to_tensor(data)
    p = convert_to_tensor(partitions)
    if p.dtype != _dtypes.int32:
        raise CkptsyncTypeError(
            f"DynamicPartition: 'partitions' must be int32, got {p.dtype.name}.")
    num = int(num_partitions)
    if num < 1:
        raise CkptsyncValueError(
            f"DynamicPartition: num_partitions must be >= 1, got {num_partitions}.")
    shape: Any = None
    if d.shape.ndims is not None and p.shape.ndims is not None:
        r = p.shape.ndims
        if r > d.shape.ndims or not d.shape[:r].is_compatible_with(p.shape):
            raise CkptsyncValueError(
                f"DynamicPartition: data.shape {d.shape} must start with partitions.shape "
                f"{p.shape}.")
        shape = [None, *d.shape.dims[r:]]  # type: ignore[index, misc]
    op = make_op("DynamicPartition", [d, p], [d.dtype] * num, [shape] * num,
                 name=name or "DynamicPartition", attrs={"num_partitions": num})
    return list(op.outputs)
