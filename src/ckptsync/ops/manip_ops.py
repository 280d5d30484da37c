"""Ops that rearrange whole tensors, as TF1: ``stack``/``unstack`` (``Pack``/``Unpack``),
``split`` (``Split``/``SplitV``), ``tile``, ``pad`` (``Pad``/``PadV2``/``MirrorPad``),
``reverse`` (``ReverseV2``), ``broadcast_to``, ``size``, ``rank``, ``shape_n``,
``placeholder_with_default`` and ``identity_n``.

Shape arguments may be tensors (``broadcast_to(x, tf.shape(y))``); static shapes are then
read from them as TF's shape inference does (:mod:`.const_fold`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError, InvalidArgumentError
from ..graph import Tensor, name_scope
from ..tensor_shape import TensorShape
from . import array_ops as _array
from .const_fold import constant_value, constant_value_as_shape
from .registry import make_op, register, single

__all__ = [
    "stack", "unstack", "split", "tile", "pad", "reverse", "broadcast_to", "size", "rank",
    "shape_n", "placeholder_with_default", "identity_n", "reverse_v2", "get_static_value",
]
NN_EXPORTS: tuple[str, ...] = ()


def _zeros_for(op: Any, grads: tuple[Any, ...]) -> list[Tensor]:
    """Output gradients with ``None`` replaced by zeros (TF fills them for multi-output ops)."""
    return [_array.zeros_like(t) if g is None else g for t, g in zip(op.outputs, grads)]


def _outs(arrays: Any) -> Any:
    """A multi-output kernel's result: the session stores a one-output op's result as is."""
    out = tuple(np.asarray(a) for a in arrays)
    return out[0] if len(out) == 1 else out


def _axis(axis: Any, rank: int | None, op: str, extra: int = 0) -> int:
    a = int(axis)
    if rank is None:
        return a
    n = rank + extra
    if not -n <= a < n:
        raise CkptsyncValueError(f"{op}: axis {a} is out of range for rank {rank} "
                                 f"(expected [-{n}, {n})).")
    return a % n


# --------------------------------------------------------------------- stack / unstack
def autopack(value: Any, dtype: Any, name: str) -> Tensor:
    """A list mixing Python numbers and tensors, packed as TF's autopacking (``Pack``)."""
    dt = _dtypes.as_dtype(dtype) if dtype is not None else next(
        (_array.convert_to_tensor(v).dtype for v in value
         if isinstance(v, Tensor) or hasattr(v, "_as_graph_element")), None)
    return stack([_array.convert_to_tensor(v, dtype=dt) for v in value], name=name)



@register("Pack", grad=lambda op, g: list(unstack(g, num=op.attrs["N"], axis=op.attrs["axis"])))
def _pack_kernel(*xs: np.ndarray, axis: int, N: int) -> np.ndarray:  # noqa: N803 - TF attr
    return np.stack(xs, axis=axis)


def stack(values: Any, axis: int = 0, name: str = "stack") -> Tensor:
    """Stacks ``N`` tensors of one shape ``[d0, ...]`` into rank+1 (``[N, d0, ...]`` for
    ``axis=0``), as ``tf.stack`` (op ``Pack``).

    Raises:
        ValueError: shapes are incompatible or ``axis`` out of range.
        TypeError: dtypes differ.
    """
    xs = [_array.convert_to_tensor(v) for v in values]
    if not xs:
        raise CkptsyncValueError("stack: needs at least one tensor.")
    dt = next((x.dtype for x, v in zip(xs, values) if isinstance(v, Tensor)), xs[0].dtype)
    xs = [x if isinstance(v, Tensor) else _array.convert_to_tensor(v, dtype=dt)
          for x, v in zip(xs, values)]
    if any(x.dtype != dt for x in xs):
        raise CkptsyncTypeError(f"stack: dtypes differ: {[x.dtype.name for x in xs]}.")
    shp = TensorShape(None)
    for x in xs:
        if not shp.is_compatible_with(x.shape):
            raise CkptsyncValueError(
                f"stack: shapes of all inputs must match: {[str(t.shape) for t in xs]}.")
        shp = shp.merge_with(x.shape)
    a = _axis(axis, shp.ndims, "stack", 1)
    out = None if shp.dims is None else [*shp.dims[:a], len(xs), *shp.dims[a:]]
    return single("Pack", xs, dt, out, name=name, attrs={"axis": a, "N": len(xs)})


@register("Unpack", grad=lambda op, *gs: [stack(_zeros_for(op, gs), axis=op.attrs["axis"])])
def _unpack_kernel(x: np.ndarray, *, num: int, axis: int) -> tuple[np.ndarray, ...]:
    if x.shape[axis] != num:
        raise InvalidArgumentError(None, None, f"Unpack: input dim {axis} must be {num}, got "
                                   f"shape {list(x.shape)}.")
    return _outs(np.moveaxis(x, axis, 0).copy())


def unstack(value: Any, num: int | None = None, axis: int = 0, name: str = "unstack"
            ) -> list[Tensor]:
    """Splits ``[.., N, ..]`` along ``axis`` into ``N`` tensors of rank-1, as ``tf.unstack``.

    Raises:
        ValueError: ``num`` is None and dim ``axis`` is not statically known ("Cannot
            infer argument `num` from shape").
    """
    x = _array.convert_to_tensor(value)
    dims = x.shape.dims
    a = _axis(axis, x.shape.ndims, "unstack")
    if num is None:
        n_ax = None if dims is None else dims[a]
        if n_ax is None:
            raise CkptsyncValueError(f"Cannot infer argument `num` from shape {x.shape}")
        num = n_ax
    out = None if dims is None else [*dims[:a], *dims[a + 1:]]
    op = make_op("Unpack", [x], [x.dtype] * num, [out] * num, name=name,
                 attrs={"num": int(num), "axis": a})
    return list(op.outputs)


# --------------------------------------------------------------------- split
def _split_grad(op: Any, *gs: Any) -> list[Any]:
    joined = _array.concat(_zeros_for(op, gs), op.attrs["axis"])
    return [None, joined] if op.type == "Split" else [joined, None, None]


@register("Split", grad=_split_grad)
def _split_kernel(axis_t: np.ndarray, x: np.ndarray, *, num_split: int, axis: int
                  ) -> tuple[np.ndarray, ...]:
    if x.shape[axis] % num_split:
        raise InvalidArgumentError(None, None, f"Split: number of ways to split should evenly "
                                   f"divide the split dimension, but got split_dim {axis} "
                                   f"(size = {x.shape[axis]}) and num_split {num_split}")
    return _outs(np.split(x, num_split, axis=axis))


@register("SplitV", grad=_split_grad)
def _splitv_kernel(x: np.ndarray, sizes: np.ndarray, axis_t: np.ndarray, *, num_split: int,
                   axis: int) -> tuple[np.ndarray, ...]:
    sizes = sizes.astype(np.int64)
    if (sizes == -1).any():
        sizes[sizes == -1] = x.shape[axis] - sizes[sizes != -1].sum()
    if sizes.sum() != x.shape[axis] or (sizes < 0).any():
        raise InvalidArgumentError(None, None, f"SplitV: sizes {sizes.tolist()} must sum to "
                                   f"dim {axis} of shape {list(x.shape)}.")
    return _outs(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def split(value: Any, num_or_size_splits: Any, axis: int = 0, num: int | None = None,
          name: str = "split") -> list[Tensor]:
    """Splits along ``axis``, as ``tf.split``: an int ``n`` gives ``n`` equal parts (op
    ``Split``); a list of sizes (one may be ``-1``) gives those parts (op ``SplitV``).

    Raises:
        ValueError: the known dim is not divisible by ``n``, or the sizes do not add up.
    """
    x = _array.convert_to_tensor(value)
    ax_v = constant_value(_array.convert_to_tensor(axis)) if isinstance(axis, Tensor) else axis
    if ax_v is None:
        raise CkptsyncValueError("split: axis must be known at graph-build time.")
    dims = x.shape.dims
    a = _axis(int(ax_v), x.shape.ndims, "split")
    size = None if dims is None else dims[a]
    if isinstance(num_or_size_splits, (int, np.integer)):
        n = int(num_or_size_splits)
        if size is not None and (n <= 0 or size % n):
            raise CkptsyncValueError(
                f"split: dimension {a} of {x.shape} ({size}) is not divisible by {n}.")
        shapes = [None if dims is None else
                  [*dims[:a], None if size is None else size // n, *dims[a + 1:]]] * n
        with name_scope(name) as scope:
            axis_t = _array.constant(np.int32(a), name="split_dim")
            op = make_op("Split", [axis_t, x], [x.dtype] * n, shapes, name=scope,
                         attrs={"num_split": n, "axis": a})
        return list(op.outputs)
    st = _array.convert_to_tensor(num_or_size_splits)
    sv = constant_value(st)
    if sv is None:
        if num is None:
            raise CkptsyncValueError(f"split: cannot infer num from shape {st.shape}")
        sizes: list[int | None] = [None] * int(num)
    else:
        sizes = [int(s) for s in np.reshape(sv, -1)]
        if sizes.count(-1) > 1:
            raise CkptsyncValueError("split: at most one size may be -1.")
        if size is not None:
            rest = size - sum(s for s in sizes if s is not None and s != -1)
            if rest < 0 or (-1 not in sizes and rest != 0):
                raise CkptsyncValueError(
                    f"split: sizes {sizes} do not add up to dimension {a} of {x.shape}.")
            sizes = [rest if s == -1 else s for s in sizes]
        sizes = [None if s == -1 else s for s in sizes]
    shapes = [None if dims is None else [*dims[:a], s, *dims[a + 1:]] for s in sizes]
    with name_scope(name) as scope:
        axis_t = _array.constant(np.int32(a), name="split_dim")
        op = make_op("SplitV", [x, st, axis_t], [x.dtype] * len(sizes), shapes, name=scope,
                     attrs={"num_split": len(sizes), "axis": a})
    return list(op.outputs)


# --------------------------------------------------------------------- tile / reverse
@register("Tile", grad=lambda op, g: [single("TileGrad", [g, op.inputs[1], op.inputs[0]],
                                             g.dtype, op.inputs[0].shape), None])
def _tile_kernel(x: np.ndarray, multiples: np.ndarray) -> np.ndarray:
    return np.tile(x, tuple(int(m) for m in multiples)) if x.ndim else x.copy()


@register("TileGrad")
def _tile_grad_kernel(g: np.ndarray, multiples: np.ndarray, x: np.ndarray) -> np.ndarray:
    split = [d for m, s in zip(multiples.tolist(), x.shape) for d in (m, s)]
    return g.reshape(split).sum(axis=tuple(range(0, 2 * x.ndim, 2))) if x.ndim else g


def tile(input: Any, multiples: Any, name: str | None = None) -> Tensor:  # noqa: A002
    """Repeats ``input`` ``multiples[i]`` times along dim ``i``, as ``tf.tile``.

    Raises:
        ValueError: ``multiples`` does not have one entry per dimension.
    """
    x = _array.convert_to_tensor(input)
    m = _array.convert_to_tensor(multiples)
    ms = constant_value_as_shape(m)
    if x.shape.ndims is not None and ms.ndims is not None and ms.ndims != x.shape.ndims:
        raise CkptsyncValueError(f"Tile: multiples has {ms.ndims} entries for shape {x.shape}.")
    rank = x.shape.ndims if x.shape.ndims is not None else ms.ndims
    out = None
    if rank is not None:
        xd = x.shape.dims or (None,) * rank
        md = ms.dims or (None,) * rank
        out = [None if a is None or b is None else a * b for a, b in zip(xd, md)]
    return single("Tile", [x, m], x.dtype, out, name=name or "Tile")


@register("ReverseV2", grad=lambda op, g: [reverse(g, op.inputs[1]), None])
def _reverse_kernel(x: np.ndarray, axis: np.ndarray) -> np.ndarray:
    return np.flip(x, tuple(int(a) for a in np.reshape(axis, -1))).copy() if axis.size else x


def reverse(tensor: Any, axis: Any, name: str | None = None) -> Tensor:
    """Reverses the dims in ``axis`` (a list of ints), as ``tf.reverse`` (``ReverseV2``)."""
    x = _array.convert_to_tensor(tensor)
    ax = _array.convert_to_tensor(axis)
    v = constant_value(ax)
    if v is not None and x.shape.ndims is not None:
        for a in np.reshape(v, -1).tolist():
            _axis(a, x.shape.ndims, "ReverseV2")
    return single("ReverseV2", [x, ax], x.dtype, x.shape, name=name or "ReverseV2")


reverse_v2 = reverse


def get_static_value(tensor: Any, partial: bool = False) -> np.ndarray | None:
    """The value of ``tensor`` if known at graph-build time (constants, shapes of known
    static shapes, and small pure computations on them), else None, as
    ``tf.get_static_value``. ``partial`` is accepted for TF's signature."""
    if not isinstance(tensor, Tensor):
        return np.asarray(tensor) if tensor is not None else None
    return constant_value(tensor)


# --------------------------------------------------------------------- pad
def _pad_grad(op: Any, g: Tensor) -> list[Any]:
    x, paddings = op.inputs[0], op.inputs[1]
    if op.type == "MirrorPad":
        dx = single("MirrorPadGrad", [g, paddings], g.dtype, x.shape, attrs=dict(op.attrs))
    else:
        from .slicing_ops import slice as _slice  # slicing_ops builds on this module

        dx = _slice(g, paddings[:, 0], _array.shape(x, out_type=paddings.dtype))
    return [dx, None] + ([None] if op.type == "PadV2" else [])


def _pad_np(x: np.ndarray, paddings: np.ndarray, value: Any = 0) -> np.ndarray:
    if paddings.shape != (x.ndim, 2) or (paddings < 0).any():
        raise InvalidArgumentError(None, None, f"Pad: paddings must be a non-negative "
                                   f"[{x.ndim}, 2] matrix, got {paddings.tolist()}.")
    return np.pad(x, paddings.astype(np.int64), mode="constant", constant_values=value)


register("Pad", grad=_pad_grad)(lambda x, paddings: _pad_np(x, paddings))
register("PadV2", grad=_pad_grad)(lambda x, paddings, value: _pad_np(x, paddings, value))


@register("MirrorPad", grad=_pad_grad)
def _mirror_pad_kernel(x: np.ndarray, paddings: np.ndarray, *, mode: str) -> np.ndarray:
    off = 0 if mode == "SYMMETRIC" else 1
    for d, (lo, hi) in enumerate(paddings.tolist()):
        if lo < 0 or hi < 0 or max(lo, hi) > x.shape[d] - off:
            raise InvalidArgumentError(None, None, f"MirrorPad: paddings must be no greater "
                                       f"than the dimension size: {lo}, {hi} greater than "
                                       f"{x.shape[d] - off} (dim {d}, mode {mode})")
    return np.pad(x, paddings.astype(np.int64), mode="symmetric" if off == 0 else "reflect")


@register("MirrorPadGrad")
def _mirror_pad_grad_kernel(g: np.ndarray, paddings: np.ndarray, *, mode: str) -> np.ndarray:
    off = 0 if mode == "SYMMETRIC" else 1
    for d, (lo, hi) in enumerate(paddings.tolist()):
        g = np.moveaxis(g, d, 0)
        core = g[lo:g.shape[0] - hi].copy()
        if lo:
            core[off:off + lo] += g[:lo][::-1]
        if hi:
            n = core.shape[0]
            core[n - off - hi:n - off] += g[g.shape[0] - hi:][::-1]
        g = np.moveaxis(core, 0, d)
    return np.ascontiguousarray(g)


def pad(tensor: Any, paddings: Any, mode: str = "CONSTANT", name: str | None = None,
        constant_values: Any = 0) -> Tensor:
    """Pads ``tensor`` by ``paddings`` (``[rank, 2]``: before/after per dim), as ``tf.pad``:
    ``CONSTANT`` (op ``Pad``, or ``PadV2`` with ``constant_values``), ``REFLECT`` and
    ``SYMMETRIC`` (op ``MirrorPad``); modes are case-insensitive.

    Raises:
        ValueError: an unknown mode, or ``paddings`` is not ``[rank, 2]``.
        InvalidArgumentError: a mirror padding exceeds the dim at run time.
    """
    x = _array.convert_to_tensor(tensor)
    p = _array.convert_to_tensor(paddings)
    if p.dtype not in (_dtypes.int32, _dtypes.int64):
        raise CkptsyncTypeError(f"pad: paddings must be int32 or int64, got {p.dtype.name}.")
    m = mode.upper()
    if m not in ("CONSTANT", "REFLECT", "SYMMETRIC"):
        raise CkptsyncValueError(f"pad: unknown padding mode {mode!r}.")
    pv = constant_value(p)
    rank_ = x.shape.ndims
    if p.shape.dims is not None and (len(p.shape.dims) != 2 or p.shape.dims[1] not in (2, None)
                                      or rank_ is not None and p.shape.dims[0] not in (rank_, None)):
        raise CkptsyncValueError(f"pad: paddings must be [{rank_}, 2], got shape {p.shape}.")
    out: Any = None
    if rank_ is not None:
        dims = list(x.shape.dims or ())
        out = [None if pv is None or d is None else d + int(pv[i].sum())
               for i, d in enumerate(dims)]
    elif pv is not None:
        out = [None] * pv.shape[0]
    if m != "CONSTANT":
        return single("MirrorPad", [x, p], x.dtype, out, name=name or "MirrorPad",
                      attrs={"mode": m})
    if isinstance(constant_values, Tensor) or np.any(np.asarray(constant_values) != 0):
        v = _array.convert_to_tensor(constant_values, dtype=x.dtype)
        return single("PadV2", [x, p, v], x.dtype, out, name=name or "PadV2")
    return single("Pad", [x, p], x.dtype, out, name=name or "Pad")


# --------------------------------------------------------------------- broadcasting
@register("BroadcastTo", grad=lambda op, g: [_array.sum_to_shape_of(g, op.inputs[0]), None])
def _broadcast_to_kernel(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    try:
        return np.array(np.broadcast_to(x, tuple(int(s) for s in shape)))
    except ValueError:
        raise InvalidArgumentError(None, None, f"BroadcastTo: cannot broadcast shape "
                                   f"{list(x.shape)} to {shape.tolist()}.") from None


def broadcast_to(input: Any, shape: Any, name: str | None = None) -> Tensor:  # noqa: A002
    """Broadcasts ``input`` to ``shape`` (numpy rules), as ``tf.broadcast_to``.

    Raises:
        ValueError: the static shapes cannot broadcast.
    """
    x = _array.convert_to_tensor(input)
    s = _array.convert_to_tensor(shape)
    target = constant_value_as_shape(s)
    if target.dims is not None and x.shape.dims is not None:
        if len(x.shape.dims) > len(target.dims):
            raise CkptsyncValueError(f"BroadcastTo: rank of {x.shape} exceeds {target}.")
        lead = len(target.dims) - len(x.shape.dims)
        dims = list(target.dims)
        for i, d in enumerate(x.shape.dims):
            t = dims[lead + i]
            if d is not None and d != 1 and t is not None and t != d:
                raise CkptsyncValueError(f"BroadcastTo: cannot broadcast {x.shape} to {target}.")
            if t is None and d is not None and d != 1:  # as TF's shape function
                dims[lead + i] = d
        target = TensorShape(dims)
    return single("BroadcastTo", [x, s], x.dtype, target, name=name or "BroadcastTo")


# --------------------------------------------------------------------- shape queries
@register("Size", not_differentiable=True)
def _size_kernel(x: np.ndarray, *, out_type: Any) -> np.ndarray:
    return np.asarray(x.size, out_type.np)


@register("Rank", not_differentiable=True)
def _rank_kernel(x: np.ndarray) -> np.ndarray:
    return np.asarray(x.ndim, np.int32)


@register("ShapeN", not_differentiable=True)
def _shape_n_kernel(*xs: np.ndarray, out_type: Any) -> tuple[np.ndarray, ...]:
    return _outs(np.asarray(x.shape, out_type.np) for x in xs)


def size(input: Any, name: str | None = None, out_type: Any = _dtypes.int32) -> Tensor:  # noqa: A002
    """The number of elements (a scalar), as ``tf.size``: a constant when the shape is
    fully known (TF1's ``optimize=True``), else op ``Size``."""
    x = _array.convert_to_tensor(input)
    dt = _dtypes.as_dtype(out_type)
    if x.shape.is_fully_defined():
        return _array.constant(np.asarray(x.shape.num_elements(), dt.np), name=name or "Size")
    return single("Size", [x], dt, [], name=name or "Size", attrs={"out_type": dt})


def rank(input: Any, name: str | None = None) -> Tensor:  # noqa: A002
    """The number of dimensions (an int32 scalar), as ``tf.rank``: a constant when known."""
    x = _array.convert_to_tensor(input)
    if x.shape.ndims is not None:
        return _array.constant(np.int32(x.shape.ndims), name=name or "Rank")
    return single("Rank", [x], _dtypes.int32, [], name=name or "Rank")


def shape_n(input: Any, out_type: Any = _dtypes.int32, name: str | None = None) -> list[Tensor]:  # noqa: A002
    """The shapes of several tensors (op ``ShapeN``), as ``tf.shape_n``."""
    xs = [_array.convert_to_tensor(v) for v in input]
    dt = _dtypes.as_dtype(out_type)
    op = make_op("ShapeN", xs, [dt] * len(xs), [[x.shape.ndims] for x in xs],
                 name=name or "ShapeN", attrs={"out_type": dt})
    return list(op.outputs)


# --------------------------------------------------------------------- identities
@register("PlaceholderWithDefault", grad=lambda op, g: [g])
def _placeholder_with_default_kernel(x: np.ndarray) -> np.ndarray:
    return x


def placeholder_with_default(input: Any, shape: Any, name: str | None = None) -> Tensor:  # noqa: A002
    """``input`` unless fed; static shape ``shape`` (may hold None dims), as
    ``tf.placeholder_with_default``.

    Raises:
        ValueError: ``input``'s shape is not compatible with ``shape``.
    """
    x = _array.convert_to_tensor(input)
    s = TensorShape(shape)
    if not s.is_compatible_with(x.shape):
        raise CkptsyncValueError(f"placeholder_with_default: default shape {x.shape} is not "
                                 f"compatible with shape {s}.")
    return single("PlaceholderWithDefault", [x], x.dtype, s,
                  name=name or "PlaceholderWithDefault")


@register("IdentityN", grad=lambda op, *gs: list(gs))
def _identity_n_kernel(*xs: np.ndarray) -> tuple[np.ndarray, ...]:
    return _outs(xs)


def identity_n(input: Any, name: str | None = None) -> list[Tensor]:  # noqa: A002
    """Identity of each tensor of a list (one ``IdentityN`` op), as ``tf.identity_n``."""
    xs = [_array.convert_to_tensor(v) for v in input]
    op = make_op("IdentityN", xs, [x.dtype for x in xs], [x.shape for x in xs],
                 name=name or "IdentityN")
    return list(op.outputs)
