"""Row updates of variables (``scatter_update``, ``scatter_add``, ``scatter_sub``,
``scatter_mul``, ``scatter_div``, ``scatter_min``, ``scatter_max``, as TF1's ``tf.scatter_*``
ref ops) and the kernels behind ``IndexedSlices``: their conversion to a
dense tensor and the summing of duplicate indices an optimizer's ``_apply_sparse`` needs.

A scatter writes only the rows it names: O(rows x row size), never a copy of the whole
variable, when the session's array of the variable is held by nobody else (no value of
this run, no fetch a caller still holds, no snapshot: counted by the array's references)
— the training step of an embedding. Otherwise the rows land in a copy, so a value read
before the update (a fetch, an unordered read, see :mod:`.state_ops`) never changes. Reads
ordered after the update see it, as TF1's ref ops.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError, InvalidArgumentError
from ..graph import Operation, Tensor
from ..indexed_slices import IndexedSlices
from ..tensor_shape import TensorShape
from .array_ops import convert_to_tensor
from .registry import make_op, register, single

__all__ = ["scatter_update", "scatter_add", "scatter_sub", "scatter_mul", "scatter_div",
           "scatter_min", "scatter_max"]
NN_EXPORTS: tuple[str, ...] = ()

#: From this many elements a conversion of IndexedSlices to dense warns (TF1's number).
LARGE_SPARSE_NUM_ELEMENTS = 100_000_000
# References to a variable's array held by the session's dict, a kernel's local name and
# sys.getrefcount's own argument: more means someone else holds it.
_OWNED_REFS = 3


def check_indices(op: Operation | None, indices: np.ndarray, n: int) -> np.ndarray:
    """``indices`` as an integer array, each in ``[0, n)``, else InvalidArgumentError
    naming the first bad one, as TF's CPU kernels (an ``IndexError`` for a pure kernel,
    ``op`` None: the session makes it an InvalidArgumentError naming the op)."""
    idx = np.asarray(indices)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        flat = idx.reshape(-1)
        k = int(np.flatnonzero((flat < 0) | (flat >= n))[0])
        # TF's SliceDebugString: the index in the indices' shape ("[0,1]"; none for a 0-d)
        at = "" if idx.ndim == 0 else "[" + ",".join(
            str(int(i)) for i in np.unravel_index(k, idx.shape)) + "]"
        msg = f"indices{at} = {int(flat[k])} is not in [0, {n})"
        if op is None:
            raise IndexError(msg)
        raise InvalidArgumentError(None, op, f"{op.type} op '{op.name}': {msg}")
    return idx


# Repeated indices are applied in rounds (round k: the k-th occurrence of each index, all
# distinct, one fancy-indexed update) up to this many occurrences of one index; beyond,
# rows are summed with one reduceat. Both are several times faster than ``np.add.at``.
_MAX_ROUNDS = 16


def _rounds(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    """``(order, starts, segment of each sorted position, rounds)`` of a stable sort of
    ``flat``: ``rounds[k]`` are the sorted positions of the k-th occurrences (empty list
    where there would be more than ``_MAX_ROUNDS``)."""
    order = np.argsort(flat, kind="stable")
    srt = flat[order]
    new = np.concatenate(([True], srt[1:] != srt[:-1]))
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, srt.size))
    seg = np.cumsum(new) - 1
    most = int(counts.max())
    if most > _MAX_ROUNDS:
        return order, starts, seg, []
    occ = np.arange(srt.size) - starts[seg]
    return order, starts, seg, [np.flatnonzero(occ == k) for k in range(most)]


def sum_rows(values: np.ndarray, flat_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(unique indices, sorted; the sum of the rows of each)`` for rows ``values[k]`` at
    ``flat_idx[k]`` (the rows of one index add up in the order given)."""
    if flat_idx.size == 0:
        return flat_idx, values[:0]
    order, starts, seg, rounds = _rounds(flat_idx)
    uniq = flat_idx[order[starts]]
    if not rounds:
        return uniq, np.add.reduceat(values[order], starts, axis=0)
    sums = values[order[starts]]  # a copy (fancy indexing): the first occurrences
    for pos in rounds[1:]:
        sums[seg[pos]] += values[order[pos]]
    return uniq, sums


# how -> (the in-place update, how the rows of one index combine first where there are
# more than _MAX_ROUNDS of them: a ufunc's reduceat, then the update with the result).
_UPDATES: dict[str, tuple[Any, Any]] = {
    "add": (np.add, np.add), "sub": (np.subtract, np.add),
    "mul": (np.multiply, np.multiply), "div": (np.divide, np.multiply),
    "min": (np.minimum, np.minimum), "max": (np.maximum, np.maximum),
}


def _update_rows(arr: np.ndarray, flat: np.ndarray, rows: np.ndarray, how: str) -> None:
    """``arr[flat[k]] = update(arr[flat[k]], rows[k])`` in place, one row after the other
    as TF's Scatter{Add,Sub,Mul,Div,Min,Max} (rows of one index in the order given)."""
    update, combine = _UPDATES[how]
    order, starts, seg, rounds = _rounds(flat)
    if not rounds:
        target = flat[order[starts]]
        arr[target] = update(arr[target], combine.reduceat(rows[order], starts, axis=0))
        return
    for pos in rounds:
        sel = order[pos]
        target = flat[sel]
        arr[target] = update(arr[target], rows[sel])


# --------------------------------------------------------------------- scatter kernels
def writable_value(ctx: Any, name: str) -> tuple[np.ndarray, bool]:
    """Variable ``name``'s array for a kernel to update rows of, and whether that is in
    place (nobody else holds the array; see the module docstring), else a copy. The
    caller must hold no reference to the variable's array of its own (it would force a
    copy), and must ``ctx.write_rows(name, array, rows)`` afterwards. For the row-update
    kernels (scatter ops, the optimizers' ``SparseApply*``). An array updated in place is
    noted (``ctx.note_in_place``: it changes even if the run fails)."""
    if name in ctx.writes:  # an earlier write of this run: on a copy of it
        return np.array(ctx.writes[name], copy=True), False
    arr = ctx.read(name)
    if (sys.getrefcount(arr) <= _OWNED_REFS and arr.flags.writeable
            and arr.flags.c_contiguous and arr.base is None):
        ctx.note_in_place(name)
        return arr, True
    return np.array(arr, copy=True), False


def _scatter(ctx: Any, op: Operation, updates: np.ndarray, indices: np.ndarray,
             how: str) -> np.ndarray:
    name = op.inputs[0].op.name
    arr = writable_value(ctx, name)[0]
    idx = check_indices(op, indices, arr.shape[0] if arr.ndim else 0)
    upd = np.asarray(updates, dtype=arr.dtype)
    want = idx.shape + arr.shape[1:]
    if upd.shape != want and upd.ndim != 0:
        raise InvalidArgumentError(
            None, op, f"{op.type} op '{op.name}': updates must have shape indices.shape + "
            f"ref.shape[1:] = {list(want)} or [], got {list(upd.shape)}")
    if how == "update":
        arr[idx] = upd
    elif idx.size:
        flat = idx.reshape(-1)
        rows = np.broadcast_to(upd, want).reshape((flat.size,) + arr.shape[1:])
        _update_rows(arr, flat, rows, how)
    ctx.write_rows(name, arr, idx)
    return arr


@register("ScatterUpdate", kind="stateful", ref_inputs=(0,), output_ref=0,
          not_differentiable=True)
def _scatter_update_kernel(ctx: Any, op: Operation, _ref: None, indices: np.ndarray,
                           updates: np.ndarray) -> np.ndarray:
    return _scatter(ctx, op, updates, indices, "update")


@register("ScatterAdd", kind="stateful", ref_inputs=(0,), output_ref=0,
          not_differentiable=True)
def _scatter_add_kernel(ctx: Any, op: Operation, _ref: None, indices: np.ndarray,
                        updates: np.ndarray) -> np.ndarray:
    return _scatter(ctx, op, updates, indices, "add")


@register("ScatterSub", kind="stateful", ref_inputs=(0,), output_ref=0,
          not_differentiable=True)
def _scatter_sub_kernel(ctx: Any, op: Operation, _ref: None, indices: np.ndarray,
                        updates: np.ndarray) -> np.ndarray:
    return _scatter(ctx, op, updates, indices, "sub")


def _register_scatter(op_type: str, how: str) -> None:
    def kernel(ctx: Any, op: Operation, _ref: None, indices: np.ndarray,
               updates: np.ndarray) -> np.ndarray:
        return _scatter(ctx, op, updates, indices, how)

    register(op_type, kind="stateful", ref_inputs=(0,), output_ref=0,
             not_differentiable=True)(kernel)


for _type, _how in (("ScatterMul", "mul"), ("ScatterDiv", "div"), ("ScatterMin", "min"),
                    ("ScatterMax", "max")):
    _register_scatter(_type, _how)


def _scatter_op(op_type: str, ref: Any, indices: Any, updates: Any, name: str | None) -> Tensor:
    r = ref._as_graph_element() if hasattr(ref, "_as_graph_element") else ref
    if not isinstance(r, Tensor) or r.op.type != "VariableV2":
        raise CkptsyncTypeError(f"{op_type}: ref must be a variable, got {ref!r}.")
    idx = convert_to_tensor(indices)
    if idx.dtype not in (_dtypes.int32, _dtypes.int64):
        raise CkptsyncTypeError(
            f"{op_type}: indices must be int32 or int64, got {idx.dtype.name}.")
    upd = convert_to_tensor(updates, dtype=r.dtype if not hasattr(updates, "dtype") else None)
    if upd.dtype != r.dtype:
        raise CkptsyncTypeError(f"{op_type}: updates of dtype {upd.dtype.name} do not match "
                                f"variable {r.op.name} of dtype {r.dtype.name}.")
    if r.shape.dims is not None and idx.shape.dims is not None and upd.shape.dims is not None \
            and upd.shape.ndims != 0:
        want = TensorShape(idx.shape.as_list() + r.shape.as_list()[1:])
        if not want.is_compatible_with(upd.shape):
            raise CkptsyncValueError(
                f"{op_type}: shapes of updates {upd.shape} and indices {idx.shape} do not fit "
                f"variable {r.op.name} of shape {r.shape}: updates.shape must be "
                f"indices.shape + ref.shape[1:] = {want}.")
    return single(op_type, [r, idx, upd], r.dtype, r.shape, name=name or op_type)


def scatter_update(ref: Any, indices: Any, updates: Any, use_locking: Any = True,
                   name: str | None = None) -> Tensor:
    """Sets rows ``ref[indices[i]] = updates[i]`` of a variable, as TF1's
    ``tf.scatter_update``; returns the variable's new value (``ref``'s dtype and shape).

    Args:
        ref: a variable ``[n, *rest]``.
        indices: int32/int64 ``[*idx]``, each in ``[0, n)``; for a repeated index one of
            its updates wins (the last here).
        updates: ``[*idx, *rest]`` of ``ref``'s dtype, or a scalar.

    Raises:
        TypeError: ``ref`` is no variable; dtypes do not match.
        ValueError: static shapes do not fit.
        InvalidArgumentError: (run time) an index out of range.
    """
    return _scatter_op("ScatterUpdate", ref, indices, updates, name)


def scatter_add(ref: Any, indices: Any, updates: Any, use_locking: Any = False,
                name: str | None = None) -> Tensor:
    """Adds ``updates[i]`` to rows ``ref[indices[i]]`` (repeated indices add up), as TF1's
    ``tf.scatter_add``; arguments and errors as :func:`scatter_update`."""
    return _scatter_op("ScatterAdd", ref, indices, updates, name)


def scatter_sub(ref: Any, indices: Any, updates: Any, use_locking: Any = False,
                name: str | None = None) -> Tensor:
    """Subtracts ``updates[i]`` from rows ``ref[indices[i]]`` (repeated indices add up),
    as TF1's ``tf.scatter_sub``; arguments and errors as :func:`scatter_update`."""
    return _scatter_op("ScatterSub", ref, indices, updates, name)


def scatter_mul(ref: Any, indices: Any, updates: Any, use_locking: Any = False,
                name: str | None = None) -> Tensor:
    """Multiplies rows ``ref[indices[i]]`` by ``updates[i]``, as TF1's ``tf.scatter_mul``;
    arguments and errors as :func:`scatter_update`."""
    return _scatter_op("ScatterMul", ref, indices, updates, name)


def scatter_div(ref: Any, indices: Any, updates: Any, use_locking: Any = False,
                name: str | None = None) -> Tensor:
    """Divides rows ``ref[indices[i]]`` by ``updates[i]``, as TF1's ``tf.scatter_div``
    (integers: numpy's true division cast back, where TF truncates); arguments and errors
    as :func:`scatter_update`."""
    return _scatter_op("ScatterDiv", ref, indices, updates, name)


def scatter_min(ref: Any, indices: Any, updates: Any, use_locking: Any = False,
                name: str | None = None) -> Tensor:
    """``ref[indices[i]] = minimum(ref[indices[i]], updates[i])``, as TF1's
    ``tf.scatter_min``; arguments and errors as :func:`scatter_update`."""
    return _scatter_op("ScatterMin", ref, indices, updates, name)


def scatter_max(ref: Any, indices: Any, updates: Any, use_locking: Any = False,
                name: str | None = None) -> Tensor:
    """``ref[indices[i]] = maximum(ref[indices[i]], updates[i])``, as TF1's
    ``tf.scatter_max``; arguments and errors as :func:`scatter_update`."""
    return _scatter_op("ScatterMax", ref, indices, updates, name)


# --------------------------------------------------------------------- IndexedSlices -> dense
def _to_dense_grad(op: Operation, g: Tensor) -> list[Any]:
    # d dense / d values[i] = g[indices[i]] (TF's UnsortedSegmentSum gradient).
    from .embedding_ops import gather  # here: embedding_ops imports this module (cycle)
    return [gather(g, op.inputs[1]), None, None]


@register("IndexedSlicesToDense", grad=_to_dense_grad)
def _to_dense_kernel(values: np.ndarray, indices: np.ndarray,
                     dense_shape: np.ndarray) -> np.ndarray:
    shape = tuple(int(d) for d in dense_shape)
    idx = np.asarray(indices).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= shape[0]):
        raise IndexError(f"IndexedSlices index out of range [0, {shape[0]}) converting to dense")
    out = np.zeros(shape, dtype=values.dtype)
    uniq, sums = sum_rows(values.reshape((idx.size,) + shape[1:]), idx)
    out[uniq] = sums
    return out


def indexed_slices_to_dense(slices: IndexedSlices, name: str = "UnsortedSegmentSum") -> Tensor:
    """The dense tensor of ``slices`` (rows of repeated indices summed), as TF1's
    IndexedSlices-to-Tensor conversion; warns (``UserWarning``) from 100,000,000 elements.

    Raises:
        ValueError: ``slices`` has no ``dense_shape``.
    """
    if slices.dense_shape is None:
        raise CkptsyncValueError(
            "Tensor conversion requested for IndexedSlices without dense_shape: "
            f"{slices!r}")
    shape = slices.shape
    n = shape.num_elements()
    if n is not None and n >= LARGE_SPARSE_NUM_ELEMENTS:
        warnings.warn(f"Converting sparse IndexedSlices to a dense Tensor with {n} elements. "
                      "This may consume a large amount of memory.", stacklevel=3)
    return single("IndexedSlicesToDense", [slices.values, slices.indices, slices.dense_shape],
                  slices.values.dtype, shape, name=name)


# --------------------------------------------------------------------- duplicate indices
@register("SumDuplicateIndices", not_differentiable=True)
def _sum_duplicates_kernel(values: np.ndarray, indices: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray]:
    idx = np.asarray(indices).reshape(-1)
    uniq, sums = sum_rows(values.reshape((idx.size,) + values.shape[1:]), idx)
    return sums, uniq


def sum_duplicate_indices(slices: IndexedSlices, name: str = "SumDuplicateIndices"
                          ) -> IndexedSlices:
    """``slices`` with each index once, its rows summed, as TF1's
    ``Optimizer._deduplicate_indexed_slices`` (``unique`` + ``unsorted_segment_sum``), but
    with the indices sorted (TF: in order of first appearance; the same update)."""
    v, i = slices.values, slices.indices
    op = make_op("SumDuplicateIndices", [v, i], [v.dtype, i.dtype],
                 [TensorShape([None] + (v.shape.as_list()[1:] if v.shape.dims is not None
                                        else [])) if v.shape.dims is not None
                  else TensorShape(None), TensorShape([None])], name=name)
    return IndexedSlices(op.outputs[0], op.outputs[1], slices.dense_shape)
