"""Tensors from values, and ops that move elements without arithmetic.

Placeholders, constants, ``reshape``, ``transpose``, ``concat``, ``fill``, ``zeros``,
``ones``, ``zeros_like``, ``ones_like``, ``identity``, ``stop_gradient``, and the
internal ops gradients use to sum broadcast dimensions back to an input's shape.

Dtype rules (as TF1): Python floats become float32, Python ints int32; numpy arrays
keep their dtype; ``dtype=`` converts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError, InvalidArgumentError
from ..graph import Tensor, get_default_graph
from ..tensor_shape import TensorShape
from .const_fold import constant_value, constant_value_as_shape, has_tensor, reshape_static_shape
from .registry import register, register_special, single

__all__ = [
    "placeholder", "constant", "convert_to_tensor", "reshape", "transpose", "concat", "fill",
    "zeros", "ones", "zeros_like", "ones_like", "identity", "stop_gradient", "shape",
    "sum_to_shape_of", "expand_dims", "squeeze",
]


# --------------------------------------------------------------------- creation
def _infer_numpy(value: Any, dtype: _dtypes.DType | None) -> np.ndarray:
    if dtype is not None:
        try:
            arr = np.asarray(value, dtype=dtype.np)
        except (TypeError, ValueError) as e:
            raise CkptsyncTypeError(f"Cannot convert {value!r} to a tensor of {dtype.name}: {e}") from None
        return arr
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
    else:
        try:
            arr = np.asarray(value)
        except ValueError as e:
            raise CkptsyncValueError(f"Cannot convert {value!r} to a tensor: {e}") from None
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        elif arr.dtype == np.int64 and (arr.size == 0 or np.abs(arr).max() < 2**31):
            arr = arr.astype(np.int32)
    if arr.dtype.kind in "SUO":  # tf.string: bytes in an object array
        flat = [x.encode() if isinstance(x, str) else x for x in arr.reshape(-1).tolist()]
        if all(isinstance(x, bytes) for x in flat):
            arr = np.empty(arr.shape, dtype=object)
            arr.reshape(-1)[:] = flat
    if arr.dtype.kind not in "biufc" and not (arr.dtype.kind == "O" and arr.size
                                              and isinstance(arr.reshape(-1)[0], bytes)):
        raise CkptsyncTypeError(f"Cannot convert {value!r} (dtype {arr.dtype}) to a tensor.")
    return arr


register_special("Placeholder", "placeholder")


def placeholder(dtype: Any, shape: Any = None, name: str | None = None) -> Tensor:
    """A value fed at ``Session.run`` time, as ``tf.placeholder``.

    Args:
        dtype: element type, e.g. ``cs.float32``.
        shape: static shape, ``None`` dims for any size (e.g. ``[None, 64]``); ``None`` for
            any shape.
    """
    dt = _dtypes.as_dtype(dtype)
    return single("Placeholder", [], dt, shape, name=name or "Placeholder",
                  attrs={"dtype": dt, "shape": TensorShape(shape)})


@register("Const")
def _const_kernel(*, value: np.ndarray, **_: Any) -> np.ndarray:
    return value


def constant(value: Any, dtype: Any = None, shape: Any = None, name: str = "Const") -> Tensor:
    """A constant tensor, as ``tf.constant``. A scalar with ``shape`` is broadcast."""
    dt = _dtypes.as_dtype(dtype) if dtype is not None else None
    arr = _infer_numpy(value, dt)
    if shape is not None:
        shp = tuple(int(d) for d in TensorShape(shape).as_list())  # type: ignore[arg-type]
        if arr.size == 1:
            arr = np.full(shp, arr.reshape(()), dtype=arr.dtype)
        elif arr.size == int(np.prod(shp)):
            arr = arr.reshape(shp)
        else:
            raise CkptsyncValueError(
                f"Cannot create a constant of shape {list(shp)} from {arr.size} elements.")
    arr = np.array(arr, order="C", copy=True)  # ascontiguousarray would make 0-d 1-d
    arr.setflags(write=False)
    return single("Const", [], _dtypes.as_dtype(arr.dtype), arr.shape, name=name,
                  attrs={"value": arr})


def convert_to_tensor(value: Any, dtype: Any = None, name: str | None = None) -> Tensor:
    """A Tensor for ``value`` (a Tensor, Variable, array or Python number).

    Raises:
        ValueError: ``value`` is a tensor of another dtype than ``dtype``.
    """
    if hasattr(value, "_as_graph_element") and not isinstance(value, Tensor):
        value = value._as_graph_element()
    if isinstance(value, Tensor):
        if dtype is not None and _dtypes.as_dtype(dtype) != value.dtype:
            raise CkptsyncValueError(
                f"Tensor conversion requested dtype {_dtypes.as_dtype(dtype).name} for Tensor "
                f"with dtype {value.dtype.name}: {value!r}")
        return value
    if isinstance(value, TensorShape):
        if not value.is_fully_defined():
            raise CkptsyncValueError(
                f"Cannot convert a partially known TensorShape {value} to a Tensor.")
        value = value.as_list()
    if isinstance(value, (list, tuple)) and has_tensor(value):
        from .manip_ops import autopack  # manip_ops builds on this module

        return autopack(value, dtype, name or "packed")
    return constant(value, dtype=dtype, name=name or "Const")


# --------------------------------------------------------------------- reshaping
def _reshape_grad(op: Any, g: Tensor) -> list[Any]:
    return [_like("ReshapeLike", g, op.inputs[0]), None]


@register("Reshape", grad=_reshape_grad)
def _reshape_kernel(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    try:
        return np.reshape(x, tuple(int(s) for s in shape))
    except ValueError:
        raise InvalidArgumentError(None, None, f"Input to reshape is a tensor with {x.size} "
                                   f"values, but the requested shape is {shape.tolist()}") from None


def reshape(tensor: Any, shape: Any, name: str | None = None) -> Tensor:
    """Reshapes to ``shape`` (one ``-1`` allowed), as ``tf.reshape``.

    ``shape`` may be a list of ints, a 1-D int tensor (``tf.shape(y)``) or a list mixing
    ints and scalar tensors (packed); the static shape is read from it as TF does.

    Raises:
        ValueError: the static element counts differ (names the op and both shapes).
        InvalidArgumentError: they differ at run time.
    """
    x = convert_to_tensor(tensor)
    if isinstance(shape, Tensor) or isinstance(shape, (list, tuple, TensorShape)) and (
            isinstance(shape, TensorShape) or has_tensor(shape)):
        with _graph().name_scope(name or "Reshape") as scope:
            st = convert_to_tensor(shape, name="shape")
        name = scope
        out = constant_value_as_shape(st)
    else:
        shp = [int(s) for s in np.asarray(shape).reshape(-1)]  # two -1: fails at run time
        st = constant(np.asarray(shp, np.int32), name="shape")
        out = TensorShape([None if s == -1 else s for s in shp])
    return single("Reshape", [x, st], x.dtype, reshape_static_shape(x.shape, out), name=name)


@register("ReshapeLike")
def _reshape_like_kernel(g: np.ndarray, like: np.ndarray) -> np.ndarray:
    return np.reshape(g, like.shape)


def _transpose_grad(op: Any, g: Tensor) -> list[Any]:
    perm = op.attrs["perm"]
    inv = None if perm is None else list(np.argsort(perm))
    return [transpose(g, inv)]


@register("Transpose", grad=_transpose_grad)
def _transpose_kernel(x: np.ndarray, *, perm: Any) -> np.ndarray:
    return np.transpose(x, perm)


def transpose(a: Any, perm: Any = None, name: str = "transpose") -> Tensor:
    """Permutes dimensions (reverses them when ``perm`` is None), as ``tf.transpose``."""
    x = convert_to_tensor(a)
    dims = x.shape.dims
    if perm is not None:
        perm = [int(p) for p in perm]
        if dims is not None and sorted(perm) != list(range(len(dims))):
            raise CkptsyncValueError(f"transpose: perm {perm} is not a permutation of {x.shape}.")
    out_shape = None if dims is None else (
        dims[::-1] if perm is None else tuple(dims[p] for p in perm))
    return single("Transpose", [x], x.dtype, out_shape, name=name, attrs={"perm": perm})


def _concat_grad(op: Any, g: Tensor) -> list[Any]:
    xs = op.inputs[:-1]
    parts = op.graph.create_op("ConcatGrad", [g, op.inputs[-1], *xs], [t.dtype for t in xs],
                               [t.shape for t in xs], name="ConcatGrad").outputs
    return [*parts, None]


@register("ConcatV2", grad=_concat_grad)
def _concat_kernel(*xs: np.ndarray) -> np.ndarray:
    try:
        return np.concatenate(xs[:-1], axis=int(xs[-1]))
    except (ValueError, np.exceptions.AxisError) as e:
        raise InvalidArgumentError(None, None, f"ConcatV2: {e}") from None


@register("ConcatGrad")
def _concat_grad_kernel(g: np.ndarray, axis: np.ndarray, *xs: np.ndarray
                        ) -> np.ndarray | tuple[np.ndarray, ...]:
    ax = int(axis) % g.ndim
    parts = np.split(g, np.cumsum([x.shape[ax] for x in xs])[:-1], axis=ax)
    return parts[0] if len(parts) == 1 else tuple(parts)


def concat(values: Any, axis: Any, name: str = "concat") -> Tensor:
    """Concatenates along ``axis`` (an int or a scalar int tensor), as ``tf.concat``
    (op ``ConcatV2``; one input gives an ``Identity``). Inputs of unknown rank are fine.

    Raises:
        ValueError: ranks or the non-concat dims disagree (names the shapes), or the axis
            is out of range.
        TypeError: dtypes differ.
    """
    xs = [convert_to_tensor(v) for v in values]
    if not xs:
        raise CkptsyncValueError("concat: needs at least one tensor.")
    if len(xs) == 1:
        with _graph().name_scope(name):
            return identity(xs[0], name=name)
    if len({x.dtype for x in xs}) > 1:
        raise CkptsyncTypeError(f"concat: dtypes differ: {[x.dtype.name for x in xs]}.")
    ranks = {x.shape.ndims for x in xs if x.shape.ndims is not None}
    if len(ranks) > 1:
        raise CkptsyncValueError(f"concat: ranks differ: {[str(x.shape) for x in xs]}.")
    axis_t = convert_to_tensor(axis, name="axis")
    av = constant_value(axis_t)
    out: Any = None
    if ranks:
        rank = ranks.pop()
        out = [None] * rank
        if rank == 0:
            raise CkptsyncValueError("concat: can't concatenate scalars (use tf.stack instead).")
        if av is not None:
            ax = int(av)
            if not -max(rank, 1) <= ax < max(rank, 1):
                raise CkptsyncValueError(f"concat: axis {ax} is out of range for rank {rank}.")
            ax %= max(rank, 1)
            known = [x.shape.dims for x in xs if x.shape.dims is not None]
            for i in range(rank):
                col = [d[i] for d in known]
                if i == ax:
                    out[i] = None if len(known) < len(xs) or None in col else sum(c or 0 for c in col)
                    continue
                vals = {d for d in col if d is not None}
                if len(vals) > 1:
                    raise CkptsyncValueError(
                        f"concat: dimension {i} of shapes {[str(t.shape) for t in xs]} differ.")
                out[i] = vals.pop() if vals else None
    return single("ConcatV2", [*xs, axis_t], xs[0].dtype, out, name=name)


@register("ExpandDims", grad=lambda op, g: [_like("ReshapeLike", g, op.inputs[0]), None])
def _expand_dims_kernel(x: np.ndarray, dim: np.ndarray) -> np.ndarray:
    d = int(np.reshape(dim, -1)[0])
    if not -x.ndim - 1 <= d <= x.ndim:
        raise InvalidArgumentError(None, None, f"ExpandDims: dim {d} is not in the interval "
                                   f"[{-x.ndim - 1}, {x.ndim}].")
    return np.expand_dims(x, d)


def expand_dims(input: Any, axis: Any = None, name: str | None = None,  # noqa: A002
                dim: Any = None) -> Tensor:
    """Inserts a dim of 1 at ``axis`` (an int or scalar int tensor, ``-1`` = last), as
    ``tf.expand_dims``.

    Raises:
        ValueError: ``axis`` is out of ``[-rank-1, rank]``.
    """
    t = convert_to_tensor(input)
    axis = dim if axis is None else axis
    if axis is None:
        raise CkptsyncValueError("expand_dims: axis is required.")
    at = convert_to_tensor(axis, name="dim")
    av = constant_value(at)
    dims = t.shape.dims
    out: Any = None
    if av is not None and dims is not None:
        ax = int(np.reshape(av, -1)[0])
        if not -len(dims) - 1 <= ax <= len(dims):
            raise CkptsyncValueError(
                f"expand_dims: axis {ax} is out of range for shape {t.shape}.")
        ax = ax if ax >= 0 else len(dims) + 1 + ax
        out = [*dims[:ax], 1, *dims[ax:]]
    return single("ExpandDims", [t, at], t.dtype, out, name=name or "ExpandDims")


@register("Squeeze", grad=lambda op, g: [_like("ReshapeLike", g, op.inputs[0])])
def _squeeze_kernel(x: np.ndarray, *, squeeze_dims: Any) -> np.ndarray:
    if not squeeze_dims:
        return np.squeeze(x)
    axes = tuple(a % x.ndim for a in squeeze_dims)
    if any(x.shape[a] != 1 for a in axes):
        raise InvalidArgumentError(None, None, f"Squeeze: can not squeeze dims {list(axes)} of "
                                   f"shape {list(x.shape)}, expected a dimension of 1.")
    return np.squeeze(x, axis=axes)


def squeeze(input: Any, axis: Any = None, name: str | None = None,  # noqa: A002
            squeeze_dims: Any = None) -> Tensor:
    """Removes dims of size 1 (all of them, or those in ``axis``), as ``tf.squeeze``.

    With ``axis=None`` and a statically unknown dim the output's rank is unknown (as TF);
    with ``axis`` an unknown dim listed there is taken to be 1 (checked at run time).

    Raises:
        ValueError: a listed dim is known and not 1, or out of range.
    """
    t = convert_to_tensor(input)
    axis = squeeze_dims if axis is None else axis
    axes = [] if axis is None else [int(a) for a in np.atleast_1d(axis)]
    dims = t.shape.dims
    out: Any = None
    if dims is not None:
        n = len(dims)
        for a in axes:
            if not -n <= a < n:
                raise CkptsyncValueError(f"squeeze: axis {a} is out of range for {t.shape}.")
            if dims[a] not in (1, None):
                raise CkptsyncValueError(f"Can not squeeze dim[{a % n}], expected a dimension "
                                         f"of 1, got {dims[a]} (shape {t.shape}).")
        if axes:
            norm = {a % n for a in axes}
            out = [d for i, d in enumerate(dims) if i not in norm]
        elif None not in dims:
            out = [d for d in dims if d != 1]
    return single("Squeeze", [t], t.dtype, out, name=name or "Squeeze",
                  attrs={"squeeze_dims": axes})


# --------------------------------------------------------------------- filling
@register("Fill", grad=lambda op, g: [None, sum_to_shape_of(g, op.inputs[1])])
def _fill_kernel(dims: np.ndarray, value: np.ndarray) -> np.ndarray:
    return np.full(tuple(int(d) for d in dims), value, dtype=value.dtype)


def fill(dims: Any, value: Any, name: str | None = None) -> Tensor:
    """A tensor of shape ``dims`` (ints, a 1-D int tensor such as ``tf.shape(x)``, or a
    list mixing both) filled with scalar ``value``, as ``tf.fill``.

    Raises:
        ValueError: ``value`` is not a scalar.
    """
    d = convert_to_tensor(dims, name="dims")
    v = convert_to_tensor(value)
    if v.shape.ndims not in (0, None):
        raise CkptsyncValueError(f"Fill: value must be a scalar, got shape {v.shape}.")
    return single("Fill", [d, v], v.dtype, constant_value_as_shape(d), name=name or "Fill")


def _filled(shape: Any, dtype: Any, value: int, name: str) -> Tensor:
    """TF's zeros/ones: a constant when small (< 1000 elements), else a ``Fill``."""
    dt = _dtypes.as_dtype(dtype)
    if not isinstance(shape, Tensor) and not (isinstance(shape, (list, tuple))
                                              and has_tensor(shape)):
        dims = TensorShape(shape).as_list()
        if None in dims:
            raise CkptsyncTypeError(f"{name}: shape {shape} has unknown dimensions; pass "
                                    "a shape tensor (e.g. tf.shape(x)) instead.")
        if int(np.prod([d or 0 for d in dims])) < 1000:
            return constant(np.full(dims, value, dt.np), name=name)
        shape = np.asarray(dims, np.int32)
    with _graph().name_scope(name) as scope:
        d = convert_to_tensor(shape, name="shape")
        if d.shape.ndims == 0:
            d = reshape(d, [-1])
        return fill(d, constant(np.asarray(value, dt.np), name="Const"), name=scope)


def zeros(shape: Any, dtype: Any = _dtypes.float32, name: str = "zeros") -> Tensor:
    """All zeros of ``shape`` (ints, or a shape tensor: then a ``Fill``), as ``tf.zeros``."""
    return _filled(shape, dtype, 0, name)


def ones(shape: Any, dtype: Any = _dtypes.float32, name: str = "ones") -> Tensor:
    """All ones of ``shape`` (ints, or a shape tensor: then a ``Fill``), as ``tf.ones``."""
    return _filled(shape, dtype, 1, name)


@register("ZerosLike", not_differentiable=True)
def _zeros_like_kernel(x: np.ndarray, *, dtype: Any) -> np.ndarray:
    return np.zeros(x.shape, dtype.np)


@register("OnesLike", not_differentiable=True)
def _ones_like_kernel(x: np.ndarray, *, dtype: Any) -> np.ndarray:
    return np.ones(x.shape, dtype.np)


def zeros_like(tensor: Any, dtype: Any = None, name: str | None = None) -> Tensor:
    """Zeros with ``tensor``'s (runtime) shape, as ``tf.zeros_like``."""
    x = convert_to_tensor(tensor)
    dt = _dtypes.as_dtype(dtype) if dtype is not None else x.dtype
    return single("ZerosLike", [x], dt, x.shape, name=name, attrs={"dtype": dt})


def ones_like(tensor: Any, dtype: Any = None, name: str | None = None) -> Tensor:
    """Ones with ``tensor``'s (runtime) shape, as ``tf.ones_like``."""
    x = convert_to_tensor(tensor)
    dt = _dtypes.as_dtype(dtype) if dtype is not None else x.dtype
    return single("OnesLike", [x], dt, x.shape, name=name, attrs={"dtype": dt})


@register("Shape", not_differentiable=True)
def _shape_kernel(x: np.ndarray, *, out_type: Any) -> np.ndarray:
    return np.asarray(x.shape, dtype=out_type.np)


def shape(x: Any, name: str | None = None, out_type: Any = _dtypes.int32) -> Tensor:
    """The runtime shape as a 1-D integer tensor, as ``tf.shape`` (a constant when the
    static shape is fully known, as TF1's graph mode). Argument order as TF1's
    ``tf.compat.v1.shape(input, name, out_type)``."""
    t = convert_to_tensor(x)
    dt = _dtypes.as_dtype(out_type)
    if t.shape.is_fully_defined():  # TF1's optimize=True: a constant
        return constant(np.asarray(t.shape.as_list(), dt.np), name=name or "Shape")
    return single("Shape", [t], dt, [t.shape.ndims], name=name, attrs={"out_type": dt})


# --------------------------------------------------------------------- identity
@register("Identity", grad=lambda op, g: [g])
def _identity_kernel(x: np.ndarray) -> np.ndarray:
    return x


def identity(x: Any, name: str | None = None) -> Tensor:
    """Returns a tensor with the same value, as ``tf.identity``."""
    t = convert_to_tensor(x)
    return single("Identity", [t], t.dtype, t.shape, name=name)


@register("StopGradient", not_differentiable=True)
def _stop_gradient_kernel(x: np.ndarray) -> np.ndarray:
    return x


def stop_gradient(x: Any, name: str | None = None) -> Tensor:
    """Identity whose gradient is ``None``, as ``tf.stop_gradient``."""
    t = convert_to_tensor(x)
    return single("StopGradient", [t], t.dtype, t.shape, name=name)


# --------------------------------------------------------------------- gradient helpers
def _like(op_type: str, g: Tensor, like: Tensor) -> Tensor:
    return single(op_type, [g, like], g.dtype, like.shape)


@register("SumToShape", accepts_out=True)
def _sum_to_shape_kernel(g: np.ndarray, like: np.ndarray, out: np.ndarray | None = None
                         ) -> np.ndarray:
    if out is not None and (out.shape != like.shape or out.dtype != g.dtype):
        out = None
    if g.shape == like.shape:
        if out is not None:
            np.copyto(out, g)
            return out
        return g
    lead = g.ndim - like.ndim
    axes = tuple(range(lead)) + tuple(
        i + lead for i, d in enumerate(like.shape) if d == 1 and g.shape[i + lead] != 1)
    if out is None:
        return (g.sum(axis=axes, keepdims=True) if axes else g).reshape(like.shape)
    if axes:
        kept = tuple(1 if i in axes else d for i, d in enumerate(g.shape))
        g.sum(axis=axes, keepdims=True, out=out.reshape(kept))  # out is C-contiguous
    else:
        np.copyto(out, g.reshape(like.shape))
    return out


def sum_to_shape_of(g: Tensor | None, x: Tensor) -> Tensor | None:
    """Sums the broadcast dimensions of gradient ``g`` back to ``x``'s shape.

    The one helper every broadcasting op's gradient uses. Skipped when the static shapes
    show there is nothing to sum.
    """
    if g is None:
        return None
    if g.shape.is_fully_defined() and g.shape == x.shape:
        return g
    return _like("SumToShape", g, x)


def _graph() -> Any:
    return get_default_graph()
