"""Selection: ``gather_nd``, ``where`` / ``where_v2``, ``boolean_mask``, as TF1 (issue 17).

Indices are int32 or int64. Out-of-range indices raise ``InvalidArgumentError`` when the
graph runs (TF's CPU kernels); shapes that cannot fit raise ``ValueError`` while the
graph is built, dtypes that do not match ``TypeError``. Gradients are dense (as TF's
once a gradient reaches a dense tensor): ``gather_nd`` scatters the upstream gradient
into ``params``' shape, ``where`` selects it, ``boolean_mask`` scatters it back to the
masked positions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Tensor, get_default_graph
from ..tensor_shape import TensorShape, broadcast_static_shape
from .array_ops import convert_to_tensor, sum_to_shape_of, zeros_like
from .registry import register, single

__all__ = ["gather_nd", "where", "where_v2", "boolean_mask"]
# Names also (or only) exported as ``cs.nn.<name>``.
NN_EXPORTS: tuple[str, ...] = ()

_INDEX_DTYPES = (_dtypes.int32, _dtypes.int64)


def check_index_dtype(op: str, arg: str, t: Tensor) -> None:
    """Raises ``TypeError`` unless ``t`` is int32 or int64 (as TF's ``Tindices``)."""
    if t.dtype not in _INDEX_DTYPES:
        raise CkptsyncTypeError(
            f"{op}: '{arg}' must be int32 or int64, got {t.dtype.name} ({t.name}).")


def _is_tensorish(v: Any) -> bool:
    return isinstance(v, Tensor) or hasattr(v, "_as_graph_element")


def _same_dtype(op: str, x: Any, y: Any) -> tuple[Tensor, Tensor]:
    """Converts ``x`` and ``y`` to tensors of one dtype (a Python value takes the other
    operand's dtype, as TF's op-def conversion); ``TypeError`` if two tensors differ."""
    if _is_tensorish(x):
        x = convert_to_tensor(x)
        y = convert_to_tensor(y, dtype=None if _is_tensorish(y) else x.dtype)
    elif _is_tensorish(y):
        y = convert_to_tensor(y)
        x = convert_to_tensor(x, dtype=y.dtype)
    else:
        x = convert_to_tensor(x)
        y = convert_to_tensor(y, dtype=x.dtype)
    if x.dtype != y.dtype:
        raise CkptsyncTypeError(
            f"{op}: 'x' ({x.dtype.name}) and 'y' ({y.dtype.name}) must have the same dtype.")
    return x, y


# --------------------------------------------------------------------- gather_nd
def _nd_flat(params_shape: tuple[int, ...], idx: np.ndarray) -> tuple[np.ndarray, int]:
    """Checks ``idx`` (``[..., K]``) against ``params_shape``; returns the flat row
    numbers into ``params`` reshaped to ``[prod(shape[:K]), -1]`` and that row count."""
    k = idx.shape[-1]
    if k > len(params_shape):
        raise CkptsyncValueError(
            f"index innermost dimension length must be <= params rank; saw: {k} vs. "
            f"{len(params_shape)}")
    lead = params_shape[:k]
    flat_idx = idx.reshape(int(np.prod(idx.shape[:-1], dtype=np.int64)), k).astype(np.int64)
    bad = np.flatnonzero(((flat_idx < 0) | (flat_idx >= np.asarray(lead, np.int64))).any(1))
    if bad.size:
        pos = np.unravel_index(bad[0], idx.shape[:-1]) if idx.ndim > 1 else ()
        where_ = ",".join(str(int(p)) for p in pos)
        vals = ", ".join(str(int(v)) for v in flat_idx[bad[0]])
        raise CkptsyncValueError(
            f"indices[{where_}] = [{vals}] does not index into param shape "
            f"[{','.join(str(d) for d in params_shape)}]")
    rows = int(np.prod(lead, dtype=np.int64))
    if k == 0:
        return np.zeros(flat_idx.shape[0], np.int64), rows
    return np.ravel_multi_index(tuple(flat_idx.T), lead), rows


def _batched(params_shape: tuple[int, ...], idx: np.ndarray, b: int
             ) -> tuple[tuple[int, ...], np.ndarray]:
    """``batch_dims=b`` as plain ``gather_nd``: the batch dims of ``params`` flattened into
    one leading dim and each index row prefixed by its batch number."""
    if b == 0:
        return params_shape, idx
    batch = params_shape[:b]
    if idx.shape[:b] != batch:
        raise CkptsyncValueError(
            f"params.shape[:{b}] = {list(batch)} and indices.shape[:{b}] = "
            f"{list(idx.shape[:b])} must be equal (batch_dims={b})")
    nb = int(np.prod(batch, dtype=np.int64))
    inner = idx.reshape((nb,) + idx.shape[b:])
    num = np.broadcast_to(np.arange(nb).reshape((nb,) + (1,) * (inner.ndim - 1)),
                          inner.shape[:-1] + (1,))
    return (nb,) + params_shape[b:], np.concatenate([num.astype(idx.dtype), inner], -1)


def _gather_nd_grad(op: Any, g: Tensor) -> list[Any]:
    params, indices = op.inputs
    return [single("GatherNdGrad", [g, indices, params], g.dtype, params.shape,
                   attrs={"batch_dims": op.attrs["batch_dims"]}), None]


@register("GatherNd", grad=_gather_nd_grad)
def _gather_nd_kernel(params: np.ndarray, indices: np.ndarray, *, batch_dims: int
                      ) -> np.ndarray:
    shape, idx = _batched(params.shape, indices, batch_dims)
    flat, rows = _nd_flat(shape, idx)
    k = idx.shape[-1]
    table = params.reshape((rows,) + shape[k:])
    return np.take(table, flat, axis=0).reshape(indices.shape[:-1] + shape[k:])


def scatter_add_rows(ids: np.ndarray, values: np.ndarray, num: int) -> np.ndarray:
    """``out[ids[i]] += values[i]`` into zeros ``[num, ...]`` (vectorised: a stable sort
    and one ``add.reduceat``; ids must lie in ``[0, num)``)."""
    out = np.zeros((num,) + values.shape[1:], values.dtype)
    if ids.size == 0:
        return out
    order = np.argsort(ids, kind="stable")
    s = ids[order]
    starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    out[s[starts]] = np.add.reduceat(np.take(values, order, axis=0), starts, axis=0)
    return out


@register("GatherNdGrad")
def _gather_nd_grad_kernel(g: np.ndarray, indices: np.ndarray, params: np.ndarray, *,
                           batch_dims: int) -> np.ndarray:
    shape, idx = _batched(params.shape, indices, batch_dims)
    flat, rows = _nd_flat(shape, idx)
    rest = shape[idx.shape[-1]:]
    out = scatter_add_rows(flat, g.reshape((-1,) + rest), rows)
    return out.reshape(params.shape)


def gather_nd(params: Any, indices: Any, name: str | None = None, batch_dims: int = 0
              ) -> Tensor:
    """Gathers slices of ``params`` at the index tuples in ``indices``, as TF1's
    ``tf.gather_nd``.

    Args:
        params: a tensor ``[B..., d0, ..., dn]`` of any dtype (``B`` the first
            ``batch_dims`` dims).
        indices: int32/int64 ``[B..., ..., K]`` with ``K <= n + 1``; each innermost row
            is an index into ``d0 .. d(K-1)`` of its batch's ``params``.
        batch_dims: how many leading dims ``params`` and ``indices`` share (default 0).

    Returns:
        ``indices.shape[:-1] + params.shape[batch_dims+K:]``, ``params``' dtype; one
        ``GatherNd`` op (TF builds ``batch_dims > 0`` from a ``BatchGatherND`` scope of
        reshapes around it; the op names differ there, not the values).

    Raises:
        TypeError: ``indices`` is not int32/int64.
        ValueError: ``K`` exceeds ``params``' rank, ``indices`` is a scalar, the batch
            dims differ, or ``batch_dims`` is negative or too large.
        InvalidArgumentError (at run time): an index is out of range (names it).
    """
    p = convert_to_tensor(params)
    i = convert_to_tensor(indices)
    check_index_dtype("GatherNd", "indices", i)
    b = int(batch_dims)
    out_shape: Any = None
    idims, pdims = i.shape.dims, p.shape.dims
    if idims is not None and len(idims) == 0:
        raise CkptsyncValueError(f"GatherNd: indices must be at least a vector, got {i.shape}.")
    limits = [len(d) - drop for d, drop in ((idims, 1), (pdims, 0)) if d is not None]
    if b < 0 or any(b > lim for lim in limits):
        raise CkptsyncValueError(
            f"GatherNd: batch_dims={batch_dims} must be >= 0 and less than the rank of "
            f"indices {i.shape} and at most the rank of params {p.shape}.")
    if b and idims is not None and pdims is not None and not TensorShape(
            idims[:b]).is_compatible_with(pdims[:b]):
        raise CkptsyncValueError(
            f"GatherNd: batch dimensions of params {p.shape} and indices {i.shape} must "
            f"match (batch_dims={b}).")
    if idims is not None and idims[-1] is not None and pdims is not None:
        k = idims[-1]
        if b + k > len(pdims):
            raise CkptsyncValueError(
                f"GatherNd: indices.shape[-1] must be <= params rank - batch_dims, but saw "
                f"indices shape {i.shape} and params shape {p.shape} (batch_dims={b}).")
        lead = TensorShape(idims[:b]).merge_with(pdims[:b]).as_list()
        out_shape = lead + list(idims[b:-1]) + list(pdims[b + k:])
    graph = p.graph
    if b == 0:
        return single("GatherNd", [p, i], p.dtype, out_shape, name=name or "GatherNd",
                      attrs={"batch_dims": 0})
    with graph.name_scope(name or "BatchGatherND"):
        return single("GatherNd", [p, i], p.dtype, out_shape, attrs={"batch_dims": b})


# --------------------------------------------------------------------- where
@register("Where", not_differentiable=True)
def _where_kernel(cond: np.ndarray) -> np.ndarray:
    return np.argwhere(cond).astype(np.int64)


def _where_indices(condition: Any, name: str | None) -> Tensor:
    graph = condition.graph if isinstance(condition, Tensor) else get_default_graph()
    with graph.name_scope(name or "Where") as scope:
        c = convert_to_tensor(condition, dtype=None if _is_tensorish(condition)
                              else _dtypes.bool, name="condition")
        rank = c.shape.ndims
        return single("Where", [c], _dtypes.int64, [None, rank], name=scope)


def _select_grad(op: Any, g: Tensor) -> list[Any]:
    c, x = op.inputs[0], op.inputs[1]
    zeros = zeros_like(x)
    return [None, _select("Select", c, g, zeros, None), _select("Select", c, zeros, g, None)]


@register("Select", grad=_select_grad)
def _select_kernel(c: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.shape != y.shape:
        raise CkptsyncValueError(
            f"'then' and 'else' must have the same size.  but received: {list(x.shape)} vs. "
            f"{list(y.shape)}")
    if c.ndim == 1 and x.ndim > 1:
        if c.shape[0] != x.shape[0]:
            raise CkptsyncValueError(
                f"Number of batches of 'then' must match size of 'cond', but saw: "
                f"{x.shape[0]} vs. {c.shape[0]}")
        c = c.reshape(c.shape + (1,) * (x.ndim - 1))
    elif c.ndim != 0 and c.shape != x.shape:
        raise CkptsyncValueError(
            f"'cond' and 'then' must have the same shape: {list(c.shape)} vs {list(x.shape)}")
    return np.where(c, x, y)


def _select_shape(c: Tensor, x: Tensor, y: Tensor) -> TensorShape:
    try:
        data = x.shape.merge_with(y.shape)
    except ValueError:
        raise CkptsyncValueError(
            f"Select: 'x' and 'y' must have the same shape, but saw {x.shape} and "
            f"{y.shape}.") from None
    cr, dr = c.shape.ndims, data.ndims
    if cr is None or dr is None or cr == 0:
        return data
    if cr == 1 and dr >= 1:
        c0, d0 = c.shape.dims[0], data.dims[0]  # type: ignore[index]
        if c0 is not None and d0 is not None and c0 != d0:
            raise CkptsyncValueError(
                f"Select: a vector condition {c.shape} must match the first dimension of "
                f"{data}.")
        if dr == 1:
            return data.merge_with(c.shape)
        return TensorShape([d0 if d0 is not None else c0, *data.dims[1:]])  # type: ignore[index]
    try:
        return data.merge_with(c.shape)
    except ValueError:
        raise CkptsyncValueError(
            f"Select: condition {c.shape} must have the shape of 'x' {data} (or be a vector "
            f"of its first dimension, or a scalar).") from None


def _select_v2_grad(op: Any, g: Tensor) -> list[Any]:
    c, x, y = op.inputs
    zero = convert_to_tensor(np.zeros((), g.dtype.np))
    gx = _select("SelectV2", c, g, zero, None)
    gy = _select("SelectV2", c, zero, g, None)
    return [None, sum_to_shape_of(gx, x), sum_to_shape_of(gy, y)]


@register("SelectV2", grad=_select_v2_grad)
def _select_v2_kernel(c: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(c, x, y)


def _select(op_type: str, condition: Any, x: Any, y: Any, name: str | None) -> Tensor:
    c = convert_to_tensor(condition, dtype=None if _is_tensorish(condition) else _dtypes.bool)
    if c.dtype != _dtypes.bool:
        raise CkptsyncTypeError(f"{op_type}: 'condition' must be bool, got {c.dtype.name}.")
    xt, yt = _same_dtype(op_type, x, y)
    if op_type == "Select":
        shape: Any = _select_shape(c, xt, yt)
    else:
        s = broadcast_static_shape(xt.shape, yt.shape)
        s = None if s is None else broadcast_static_shape(c.shape, s)
        if s is None:
            raise CkptsyncValueError(
                f"SelectV2: shapes {c.shape}, {xt.shape} and {yt.shape} do not broadcast.")
        shape = s
    return single(op_type, [c, xt, yt], xt.dtype, shape, name=name or op_type)


def where(condition: Any, x: Any = None, y: Any = None, name: str | None = None) -> Tensor:
    """Elements of ``x`` or ``y`` by ``condition``, or ``condition``'s true coordinates, as
    TF1's ``tf.where``.

    With ``x`` and ``y`` (op ``Select``): ``x`` and ``y`` have one shape and dtype;
    ``condition`` (bool) has that shape, or is a vector ``[x.shape[0]]`` choosing whole
    rows, or a scalar. Without them (op ``Where``): an int64 ``[num_true, rank]`` of the
    coordinates of the true (non-zero) elements, in row-major order.

    Raises:
        ValueError: only one of ``x``, ``y`` given; the shapes do not fit.
        TypeError: ``x`` and ``y`` differ in dtype; ``condition`` is not bool.
        InvalidArgumentError (at run time): the fed shapes do not fit.
    """
    if x is None and y is None:
        return _where_indices(condition, name)
    if x is None or y is None:
        raise CkptsyncValueError("where: x and y must both be non-None or both be None.")
    return _select("Select", condition, x, y, name)


def where_v2(condition: Any, x: Any = None, y: Any = None, name: str | None = None) -> Tensor:
    """``where`` with numpy broadcasting of ``condition``, ``x`` and ``y`` (op
    ``SelectV2``), as TF's ``tf.where_v2``; without ``x``/``y`` as :func:`where`.

    Raises:
        ValueError: only one of ``x``, ``y`` given; the shapes do not broadcast.
        TypeError: ``x`` and ``y`` differ in dtype; ``condition`` is not bool.
    """
    if x is None and y is None:
        return _where_indices(condition, name)
    if x is None or y is None:
        raise CkptsyncValueError("where_v2: x and y must both be non-None or both be None.")
    return _select("SelectV2", condition, x, y, name)


# --------------------------------------------------------------------- boolean_mask
def _mask_parts(t: np.ndarray, mask: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    m = mask.ndim
    if t.shape[axis:axis + m] != mask.shape:
        raise CkptsyncValueError(
            f"mask shape {list(mask.shape)} does not match dimensions {axis}..{axis + m - 1} "
            f"of tensor shape {list(t.shape)}")
    flat = t.reshape(t.shape[:axis] + (mask.size,) + t.shape[axis + m:])
    return flat, np.flatnonzero(mask.reshape(-1))


def _boolean_mask_grad(op: Any, g: Tensor) -> list[Any]:
    t, mask = op.inputs
    return [single("BooleanMaskGrad", [g, t, mask], g.dtype, t.shape,
                   attrs={"axis": op.attrs["axis"]}), None]


@register("BooleanMask", grad=_boolean_mask_grad)
def _boolean_mask_kernel(t: np.ndarray, mask: np.ndarray, *, axis: int) -> np.ndarray:
    flat, keep = _mask_parts(t, mask, axis)
    return np.take(flat, keep, axis=axis)


@register("BooleanMaskGrad")
def _boolean_mask_grad_kernel(g: np.ndarray, t: np.ndarray, mask: np.ndarray, *, axis: int
                              ) -> np.ndarray:
    flat, keep = _mask_parts(t, mask, axis)
    out = np.zeros(flat.shape, g.dtype)
    index: list[Any] = [slice(None)] * flat.ndim
    index[axis] = keep
    out[tuple(index)] = g
    return out.reshape(t.shape)


def boolean_mask(tensor: Any, mask: Any, name: str = "boolean_mask", axis: Any = None
                 ) -> Tensor:
    """The elements (slices) of ``tensor`` where ``mask`` is true, as TF1's
    ``tf.boolean_mask``.

    Args:
        tensor: ``[d0, ..., dn]``, any dtype.
        mask: bool, rank ``k >= 1`` known statically, shape ``tensor.shape[axis:axis+k]``.
        axis: the first dimension the mask covers (default 0); negative counts from the
            end.

    Returns:
        ``tensor.shape[:axis] + [num_true] + tensor.shape[axis+k:]``, ``tensor``'s dtype;
        the output is named ``<name>/GatherV2`` as TF's (one ``BooleanMask`` op here).

    Raises:
        ValueError: ``mask`` is a scalar or of unknown rank, or its shape does not fit.
        InvalidArgumentError (at run time): the fed shapes do not fit.
    """
    graph = tensor.graph if isinstance(tensor, Tensor) else get_default_graph()
    with graph.name_scope(name or "boolean_mask"):
        t = convert_to_tensor(tensor, name="tensor")
        m = convert_to_tensor(mask, name="mask")
        k = m.shape.ndims
        if k == 0:
            raise CkptsyncValueError("boolean_mask: mask cannot be scalar.")
        if k is None:
            raise CkptsyncValueError(
                "boolean_mask: number of mask dimensions must be specified, even if some "
                "dimensions are None. E.g. shape=[None] is ok, but shape=None is not.")
        ax = 0 if axis is None else int(axis)
        dims = t.shape.dims
        out_shape: Any = None
        if dims is not None:
            if ax < 0:
                ax += len(dims)
            if not 0 <= ax <= len(dims) - k:
                raise CkptsyncValueError(
                    f"boolean_mask: axis {axis} with a rank-{k} mask does not fit tensor "
                    f"shape {t.shape}.")
            if not TensorShape(dims[ax:ax + k]).is_compatible_with(m.shape):
                raise CkptsyncValueError(
                    f"boolean_mask: shapes {TensorShape(dims[ax:ax + k])} and {m.shape} are "
                    f"incompatible (tensor {t.shape}, mask {m.shape}, axis {ax}).")
            out_shape = [*dims[:ax], None, *dims[ax + k:]]
        elif ax < 0:
            raise CkptsyncValueError("boolean_mask: a negative axis needs a known rank.")
        return single("BooleanMask", [t, m], t.dtype, out_shape, name="GatherV2",
                      attrs={"axis": ax})
