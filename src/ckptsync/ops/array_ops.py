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
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Tensor, get_default_graph
from ..tensor_shape import TensorShape
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
    if arr.dtype.kind not in "biufc":
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
    return constant(value, dtype=dtype, name=name or "Const")


# --------------------------------------------------------------------- reshaping
def _reshape_grad(op: Any, g: Tensor) -> list[Any]:
    return [_like("ReshapeLike", g, op.inputs[0]), None]


@register("Reshape", grad=_reshape_grad)
def _reshape_kernel(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    return np.reshape(x, tuple(int(s) for s in shape))


def reshape(tensor: Any, shape: Any, name: str | None = None) -> Tensor:
    """Reshapes to ``shape`` (one ``-1`` allowed), as ``tf.reshape``.

    Raises:
        ValueError: the static element counts differ (names the op and both shapes).
    """
    x = convert_to_tensor(tensor)
    shp = [int(s) for s in np.asarray(shape).reshape(-1)]
    n_in = x.shape.num_elements()
    static: list[int | None] = [None if s == -1 else s for s in shp]
    if shp.count(-1) > 1:
        raise CkptsyncValueError(f"Reshape: at most one -1 allowed in shape {shp}.")
    known = int(np.prod([s for s in shp if s != -1])) if shp else 1
    if n_in is not None:
        if -1 in shp:
            if known == 0 or n_in % known:
                raise CkptsyncValueError(
                    f"Reshape: cannot reshape a tensor with {n_in} elements ({x.shape}) to {shp}.")
            static[shp.index(-1)] = n_in // known
        elif n_in != known:
            raise CkptsyncValueError(
                f"Reshape: cannot reshape a tensor with {n_in} elements ({x.shape}) to shape "
                f"{shp} ({known} elements).")
    return single("Reshape", [x, constant(np.asarray(shp, np.int32), name="shape")], x.dtype,
                  static, name=name)


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
    parts = op.graph.create_op("ConcatGrad", [g, *op.inputs], [t.dtype for t in op.inputs],
                               [t.shape for t in op.inputs], name="ConcatGrad",
                               attrs={"axis": op.attrs["axis"]}).outputs
    return list(parts)


@register("ConcatV2", grad=_concat_grad)
def _concat_kernel(*xs: np.ndarray, axis: int) -> np.ndarray:
    return np.concatenate(xs, axis=axis)


@register("ConcatGrad")
def _concat_grad_kernel(g: np.ndarray, *xs: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    cuts = np.cumsum([x.shape[axis] for x in xs])[:-1]
    return tuple(np.split(g, cuts, axis=axis))


def concat(values: Any, axis: int, name: str = "concat") -> Tensor:
    """Concatenates along ``axis``, as ``tf.concat``.

    Raises:
        ValueError: ranks, dtypes or the non-concat dims disagree (names the shapes).
    """
    xs = [convert_to_tensor(v) for v in values]
    if not xs:
        raise CkptsyncValueError("concat: needs at least one tensor.")
    if len({x.dtype for x in xs}) > 1:
        raise CkptsyncTypeError(f"concat: dtypes differ: {[x.dtype.name for x in xs]}.")
    ranks = {x.shape.ndims for x in xs if x.shape.ndims is not None}
    if len(ranks) > 1:
        raise CkptsyncValueError(f"concat: ranks differ: {[str(x.shape) for x in xs]}.")
    out_shape: Any = None
    if ranks:
        rank = ranks.pop()
        ax = axis % rank if rank else 0
        out = list(xs[0].shape.dims or [])
        for x in xs[1:]:
            for i, d in enumerate(x.shape.dims or []):
                if i == ax:
                    prev = out[i]
                    out[i] = None if prev is None or d is None else prev + d
                elif out[i] is not None and d is not None and out[i] != d:
                    raise CkptsyncValueError(
                        f"concat: dimension {i} of shapes {[str(t.shape) for t in xs]} differ.")
        out_shape = out
        axis = ax
    return single("ConcatV2", xs, xs[0].dtype, out_shape, name=name, attrs={"axis": axis})


def expand_dims(x: Any, axis: int, name: str = "ExpandDims") -> Tensor:
    t = convert_to_tensor(x)
    dims = t.shape.dims
    shp = [-1 if d is None else d for d in (dims or [])]
    if dims is None:
        raise CkptsyncValueError("expand_dims: needs a known rank.")
    ax = axis if axis >= 0 else len(shp) + 1 + axis
    shp.insert(ax, 1)
    if shp.count(-1) > 1:
        raise CkptsyncValueError("expand_dims: at most one unknown dimension supported.")
    return reshape(t, shp, name=name)


def squeeze(x: Any, axis: Any = None, name: str = "Squeeze") -> Tensor:
    t = convert_to_tensor(x)
    dims = t.shape.dims
    if dims is None:
        raise CkptsyncValueError("squeeze: needs a known rank.")
    axes = range(len(dims)) if axis is None else [a % len(dims) for a in np.atleast_1d(axis)]
    keep = [(-1 if d is None else d) for i, d in enumerate(dims) if not (i in axes and d == 1)]
    return reshape(t, keep, name=name)


# --------------------------------------------------------------------- filling
@register("Fill", grad=lambda op, g: [None, sum_to_shape_of(g, op.inputs[1])])
def _fill_kernel(dims: np.ndarray, value: np.ndarray) -> np.ndarray:
    return np.full(tuple(int(d) for d in dims), value, dtype=value.dtype)


def fill(dims: Any, value: Any, name: str | None = None) -> Tensor:
    """A tensor of shape ``dims`` filled with scalar ``value``, as ``tf.fill``."""
    d = [int(x) for x in np.asarray(dims).reshape(-1)]
    v = convert_to_tensor(value)
    return single("Fill", [constant(np.asarray(d, np.int32), name="dims"), v], v.dtype, d,
                  name=name or "Fill")


def zeros(shape: Any, dtype: Any = _dtypes.float32, name: str = "zeros") -> Tensor:
    """All zeros of ``shape``, as ``tf.zeros``."""
    dt = _dtypes.as_dtype(dtype)
    return constant(np.zeros(TensorShape(shape).as_list(), dt.np), name=name)


def ones(shape: Any, dtype: Any = _dtypes.float32, name: str = "ones") -> Tensor:
    """All ones of ``shape``, as ``tf.ones``."""
    dt = _dtypes.as_dtype(dtype)
    return constant(np.ones(TensorShape(shape).as_list(), dt.np), name=name)


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


def shape(x: Any, out_type: Any = _dtypes.int32, name: str | None = None) -> Tensor:
    """The runtime shape as a 1-D integer tensor, as ``tf.shape``."""
    t = convert_to_tensor(x)
    dt = _dtypes.as_dtype(out_type)
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
