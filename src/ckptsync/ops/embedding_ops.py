"""``gather`` and ``embedding_lookup``, with ``IndexedSlices`` gradients, as TF1.

The gradient of a gather along axis 0 with respect to its ``params`` is an
``IndexedSlices`` (the upstream rows and the indices, O(rows looked up)), as TF's
``_GatherV2Grad``; along another axis, or with ``batch_dims``, it is dense. A gather from a
variable reads only the rows it needs (op ``ResourceGather``: the variable is not read
whole into the run), so an embedding's training step never holds a second
``[vocab, dim]`` array (see :mod:`.scatter_ops` for the update).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..blocked_array import BlockedArray
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Operation, Tensor
from ..indexed_slices import IndexedSlices
from ..tensor_shape import TensorShape
from .array_ops import constant, convert_to_tensor, identity
from .array_ops import shape as _shape
from .registry import make_op, register, single
from .scatter_ops import check_indices

__all__ = ["gather"]
# Names also (or only) exported as ``cs.nn.<name>``.
NN_EXPORTS: tuple[str, ...] = ("embedding_lookup",)


# --------------------------------------------------------------------- kernels
def _gather_index(params: np.ndarray, indices: np.ndarray, axis: int, b: int
                  ) -> tuple[np.ndarray, tuple[Any, ...]]:
    """(view of ``params`` with ``axis`` moved to ``b``, the advanced index) such that
    ``view[index]`` is ``[*batch, *indices[b:], *params[b:axis], *params[axis+1:]]``."""
    view = np.moveaxis(params, axis, b) if axis != b else params
    if b == 0:
        return view, (indices,)
    n_i = indices.ndim - b
    index = tuple(np.arange(params.shape[k]).reshape((1,) * k + (-1,) + (1,) * (b - k - 1 + n_i))
                  for k in range(b))
    return view, (*index, indices)


def _gather(op: Operation | None, params: np.ndarray | BlockedArray, indices: np.ndarray,
            axis: int, b: int) -> np.ndarray:
    idx = check_indices(op, indices, params.shape[axis])
    if isinstance(params, BlockedArray):  # a served table stored in blocks (serving's COW)
        if b == 0 and axis == 0:
            return params.gather(idx)
        params = params.to_ndarray()
    if b == 0 and axis == 0:
        return params[idx]
    view, index = _gather_index(params, idx, axis, b)
    res = view[index]
    n_i, n_mid = idx.ndim - b, axis - b
    if n_i and n_mid:  # [B, I, mid, rest] -> [B, mid, I, rest]
        res = np.moveaxis(res, list(range(b, b + n_i)), list(range(b + n_mid, b + n_mid + n_i)))
    return np.ascontiguousarray(res)


@register("GatherV2", grad=lambda op, g: _gather_grad(op, g))
def _gather_kernel(params: np.ndarray, indices: np.ndarray, *, axis: int,
                   batch_dims: int) -> np.ndarray:
    return _gather(None, params, indices, axis, batch_dims)


@register("ResourceGather", kind="stateful", ref_inputs=(0,), read_refs=(0,),
          grad=lambda op, g: _gather_grad(op, g))
def _resource_gather_kernel(ctx: Any, op: Operation, _ref: None,
                            indices: np.ndarray) -> np.ndarray:
    params = ctx.read_rows_source(op.inputs[0].op.name)
    return _gather(op, params, indices, op.attrs["axis"], op.attrs["batch_dims"])


@register("VariableShape", kind="stateful", ref_inputs=(0,), read_refs=(0,),
          not_differentiable=True)
def _variable_shape_kernel(ctx: Any, op: Operation, _ref: None) -> np.ndarray:
    return np.asarray(ctx.read_rows_source(op.inputs[0].op.name).shape,
                      dtype=op.attrs["out_type"].np)


@register("GatherGradValues")
def _grad_values_kernel(g: np.ndarray, indices: np.ndarray) -> np.ndarray:
    return g.reshape((indices.size,) + g.shape[indices.ndim:])


@register("FlattenIndices")
def _flatten_indices_kernel(indices: np.ndarray) -> np.ndarray:
    return indices.reshape(-1)


@register("GatherGradDense")
def _gather_grad_dense_kernel(g: np.ndarray, indices: np.ndarray, shape: np.ndarray, *,
                              axis: int, batch_dims: int) -> np.ndarray:
    out = np.zeros(tuple(int(d) for d in shape), dtype=g.dtype)
    b = batch_dims
    idx = np.asarray(indices)
    n_i, n_mid = idx.ndim - b, axis - b
    if n_i and n_mid:  # [B, mid, I, rest] -> [B, I, mid, rest]
        g = np.moveaxis(g, list(range(b + n_mid, b + n_mid + n_i)), list(range(b, b + n_i)))
    view, index = _gather_index(out, idx, axis, b)
    np.add.at(view, index, g)
    return out


def _params_shape(params: Tensor) -> Tensor:
    """``params``' shape as an int32 tensor: a constant where static, else read at run
    time (a variable through ``VariableShape``, without reading its value)."""
    if params.shape.is_fully_defined():
        return constant(np.asarray(params.shape.as_list(), np.int32), name="Shape")
    if params.op.type == "VariableV2":
        return single("VariableShape", [params], _dtypes.int32, [params.shape.ndims],
                      name="Shape", attrs={"out_type": _dtypes.int32})
    return _shape(params)


def _gather_grad(op: Operation, g: Tensor) -> list[Any]:
    params, indices = op.inputs[0], op.inputs[1]
    axis, b = op.attrs["axis"], op.attrs["batch_dims"]
    dense_shape = _params_shape(params)
    if axis == 0 and b == 0:  # TF's _GatherV2Grad: IndexedSlices
        n = indices.shape.num_elements()
        rest = params.shape.as_list()[1:] if params.shape.dims is not None else None
        values = single("GatherGradValues", [g, indices], g.dtype,
                        TensorShape(None) if rest is None else [n, *rest], name="Reshape")
        flat = single("FlattenIndices", [indices], indices.dtype, [n], name="Reshape_1")
        return [IndexedSlices(values, flat, dense_shape), None]
    return [single("GatherGradDense", [g, indices, dense_shape], g.dtype, params.shape,
                   attrs={"axis": axis, "batch_dims": b}), None]


# --------------------------------------------------------------------- gather
def _as_params(params: Any) -> Tensor:
    t = params._as_graph_element() if hasattr(params, "_as_graph_element") else params
    return t if isinstance(t, Tensor) else convert_to_tensor(params)


def gather(params: Any, indices: Any, validate_indices: Any = None, name: str | None = None,
           axis: Any = None, batch_dims: int = 0) -> Tensor:
    """Slices of ``params`` at ``indices`` along ``axis``, as TF1's ``tf.gather``.

    Args:
        params: a tensor or variable ``[*p]`` of rank ≥ 1 (any dtype).
        indices: int32/int64 ``[*i]``, each in ``[0, p[axis])`` (checked at run time).
        axis: a Python int (default 0; negative counts from the end).
        batch_dims: leading dims shared by ``params`` and ``indices`` (≤ ``axis``).
        validate_indices: ignored, as TF (indices are always checked on CPU).

    Returns:
        ``[*p[:axis], *i[batch_dims:], *p[axis+1:]]`` of ``params``' dtype. Its gradient
        with respect to ``params`` is an ``IndexedSlices`` where ``axis`` is 0 (and
        ``batch_dims`` 0), else dense.

    Raises:
        TypeError: ``indices`` is not int32/int64.
        ValueError: ``axis`` or ``batch_dims`` out of range.
        InvalidArgumentError: (run time) an index out of range (names it).
    """
    p = _as_params(params)
    idx = convert_to_tensor(indices)
    if idx.dtype not in (_dtypes.int32, _dtypes.int64):
        raise CkptsyncTypeError(f"GatherV2: indices must be int32 or int64, got {idx.dtype.name}.")
    ax = 0 if axis is None else axis
    if isinstance(ax, Tensor):
        if ax.op.type != "Const":
            raise CkptsyncValueError("GatherV2: axis must be a Python int or a constant tensor.")
        ax = ax.op.attrs["value"]
    ax = int(np.asarray(ax))
    rank, i_rank = p.shape.ndims, idx.shape.ndims
    b = int(batch_dims)
    if b < 0:
        if i_rank is None:
            raise CkptsyncValueError("GatherV2: negative batch_dims needs indices of known rank.")
        b += i_rank
    if rank is not None:
        if not -rank <= ax < rank:
            raise CkptsyncValueError(f"GatherV2: axis {ax} out of range for params of rank "
                                     f"{rank} (expected [-{rank}, {rank})).")
        ax %= rank
    elif ax < 0:
        raise CkptsyncValueError("GatherV2: negative axis needs params of known rank.")
    if b > ax or (i_rank is not None and b > i_rank):
        raise CkptsyncValueError(f"GatherV2: batch_dims ({b}) must be <= axis ({ax}) and <= "
                                 f"rank(indices) ({i_rank}).")
    if rank is None or i_rank is None:
        out_shape = TensorShape(None)
    else:
        ps, is_ = p.shape.as_list(), idx.shape.as_list()
        for k in range(b):
            if ps[k] is not None and is_[k] is not None and ps[k] != is_[k]:
                raise CkptsyncValueError(
                    f"GatherV2: params.shape[{k}] ({ps[k]}) and indices.shape[{k}] ({is_[k]}) "
                    "must match for batch_dims.")
        out_shape = TensorShape(ps[:ax] + is_[b:] + ps[ax + 1:])
    op_type = "ResourceGather" if p.op.type == "VariableV2" else "GatherV2"
    return make_op(op_type, [p, idx], [p.dtype], [out_shape], name=name or "GatherV2",
                   attrs={"axis": ax, "batch_dims": b}).outputs[0]



# --------------------------------------------------------------------- embedding_lookup
@register("EmbeddingPartitionIds", not_differentiable=True)
def _partition_ids_kernel(ids: np.ndarray, *sizes: np.ndarray, strategy: str
                          ) -> tuple[np.ndarray, ...]:
    flat = ids.reshape(-1)
    n_p = len(sizes)
    if strategy == "mod":
        assign, new = flat % n_p, flat // n_p
    else:  # "div": the first (total % n_p) partitions hold one id more
        total = int(sum(int(s[0]) for s in sizes))
        per, extras = total // n_p, total % n_p
        assign = np.maximum(flat // (per + 1), (flat - extras) // max(per, 1))
        new = np.where(assign < extras, flat % (per + 1), (flat - extras) % max(per, 1))
    out: list[np.ndarray] = []
    positions = np.arange(flat.size, dtype=np.int32)
    for k in range(n_p):
        mask = assign == k
        out += [new[mask].astype(ids.dtype, copy=False), positions[mask]]
    return tuple(out)


def _stitch_grad(op: Operation, g: Tensor) -> list[Any]:
    n_p = len(op.inputs) // 2
    return [None] * n_p + [gather(g, op.inputs[k]) for k in range(n_p)]


@register("EmbeddingStitch", grad=_stitch_grad)
def _stitch_kernel(*args: np.ndarray) -> np.ndarray:
    n_p = len(args) // 2
    positions, parts = args[:n_p], args[n_p:]
    n = sum(p.size for p in positions)
    out = np.empty((n,) + parts[0].shape[1:], dtype=parts[0].dtype)
    for pos, part in zip(positions, parts):
        out[pos] = part
    return out


def _clip_by_norm_grad(op: Operation, g: Tensor) -> list[Any]:
    return [single("EmbeddingClipByNormGrad", [g, op.inputs[0]], g.dtype, g.shape,
                   attrs=dict(op.attrs))]


def _row_norms(t: np.ndarray, first: int) -> np.ndarray:
    axes = tuple(range(first, t.ndim))
    return np.sqrt(np.sum(t * t, axis=axes, keepdims=True))


@register("EmbeddingClipByNorm", grad=_clip_by_norm_grad)
def _clip_by_norm_kernel(t: np.ndarray, *, max_norm: float, first: int) -> np.ndarray:
    # t * max_norm / maximum(l2norm, max_norm), l2norm over the axes after the ids' (TF1).
    c = np.asarray(max_norm, t.dtype)
    return (t * c / np.maximum(_row_norms(t, first), c)).astype(t.dtype, copy=False)


@register("EmbeddingClipByNormGrad")
def _clip_by_norm_grad_kernel(g: np.ndarray, t: np.ndarray, *, max_norm: float,
                              first: int) -> np.ndarray:
    c = np.asarray(max_norm, t.dtype)
    n = _row_norms(t, first)
    clipped = n >= c  # TF's Maximum sends a tie's gradient to the norm
    safe = np.where(n > 0, n, 1).astype(t.dtype)
    axes = tuple(range(first, t.ndim))
    dot = np.sum(g * t, axis=axes, keepdims=True)
    shrunk = c / safe * (g - t * dot / (safe * safe))
    return np.where(clipped, shrunk, g).astype(t.dtype, copy=False)


def _clip(x: Tensor, ids: Tensor, max_norm: Any) -> Tensor:
    if max_norm is None:
        return x
    if ids.shape.ndims is None:
        raise CkptsyncValueError("embedding_lookup: max_norm needs ids of known rank.")
    return single("EmbeddingClipByNorm", [x], x.dtype, x.shape, name="clip_by_norm",
                  attrs={"max_norm": float(max_norm), "first": ids.shape.ndims})


def embedding_lookup(params: Any, ids: Any, partition_strategy: str = "mod",
                     name: str | None = None, validate_indices: Any = True,
                     max_norm: Any = None) -> Tensor:
    """Rows of an embedding table, as TF1's ``tf.nn.embedding_lookup``.

    Args:
        params: a tensor or variable ``[vocab, *dim]``, or a list of them (partitions
            ``[vocab_k, *dim]``, row ``id`` in partition ``id % n`` at ``id // n`` for
            ``"mod"``; contiguous ranges, the first ``vocab % n`` one row longer, for
            ``"div"``).
        ids: int32/int64 ``[*ids]``.
        max_norm: if given, each looked-up row whose l2 norm exceeds it is scaled to it.
        validate_indices: ignored (ids are always checked).

    Returns:
        ``[*ids, *dim]`` of ``params``' dtype; its gradient with respect to each partition
        is an ``IndexedSlices`` of the rows looked up.

    Raises:
        ValueError: no params; an unknown ``partition_strategy``; partitions of different
            row shapes.
        TypeError: ``ids`` is not int32/int64.
        InvalidArgumentError: (run time) an id out of range.
    """
    plist = list(params) if isinstance(params, (list, tuple)) else [params]
    if not plist:
        raise CkptsyncValueError("embedding_lookup: need at least one param.")
    if partition_strategy not in ("mod", "div"):
        raise CkptsyncValueError(f"embedding_lookup: unrecognized partition strategy: "
                                 f"{partition_strategy!r} (expected 'mod' or 'div').")
    ps = [_as_params(p) for p in plist]
    graph = ps[0].graph
    with graph.name_scope(name or "embedding_lookup") as scope:
        ids_t = convert_to_tensor(ids)
        if ids_t.dtype not in (_dtypes.int32, _dtypes.int64):
            raise CkptsyncTypeError(f"embedding_lookup: ids must be int32 or int64, got "
                                    f"{ids_t.dtype.name}.")
        if len(ps) == 1:
            out = _clip(gather(ps[0], ids_t, name=scope), ids_t, max_norm)
            return identity(out)
        row = ps[0].shape[1:] if ps[0].shape.dims is not None else TensorShape(None)
        for p in ps[1:]:
            if p.shape.dims is not None:
                if not row.is_compatible_with(p.shape[1:]):
                    raise CkptsyncValueError(
                        f"embedding_lookup: partitions' row shapes differ: {row} and "
                        f"{p.shape[1:]}.")
                row = row.merge_with(p.shape[1:])
        n = ids_t.shape.num_elements()
        sizes = [_params_shape(p) for p in ps]
        part = make_op("EmbeddingPartitionIds", [ids_t, *sizes],
                       [ids_t.dtype, _dtypes.int32] * len(ps),
                       [TensorShape([None])] * (2 * len(ps)), name="DynamicPartition",
                       attrs={"strategy": partition_strategy})
        gathered = [gather(p, part.outputs[2 * k]) for k, p in enumerate(ps)]
        positions = [part.outputs[2 * k + 1] for k in range(len(ps))]
        flat_shape = TensorShape([n, *row.as_list()]) if row.dims is not None else \
            TensorShape(None)
        stitched = single("EmbeddingStitch", [*positions, *gathered], ps[0].dtype, flat_shape,
                          name="ParallelDynamicStitch")
        out_shape = TensorShape(ids_t.shape.as_list() + row.as_list()) if (
            ids_t.shape.dims is not None and row.dims is not None) else TensorShape(None)
        ret = single("EmbeddingUnflatten", [stitched, ids_t], ps[0].dtype, out_shape,
                     name="Reshape")
        return identity(_clip(ret, ids_t, max_norm))


@register("EmbeddingUnflatten", grad=lambda op, g: [
    single("GatherGradValues", [g, op.inputs[1]], g.dtype, op.inputs[0].shape,
           name="Reshape"), None])
def _unflatten_kernel(x: np.ndarray, ids: np.ndarray) -> np.ndarray:
    return x.reshape(ids.shape + x.shape[1:])

