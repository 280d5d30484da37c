"""Arithmetic, reductions, comparisons and casts, each kernel beside its gradient.

Broadcasting follows numpy. Dtype rules: both operands of a binary op must have the same
dtype (``TypeError`` naming the op and both dtypes, as TF1); a Python number or list is
converted to the tensor operand's dtype. ``divide`` of integers returns float64
(``tf.divide`` / ``truediv``). Shape errors are raised while the graph is built, naming
the op and both shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Tensor
from ..tensor_shape import TensorShape, broadcast_static_shape
from .array_ops import convert_to_tensor, sum_to_shape_of
from .registry import register, single

__all__ = [
    "add", "subtract", "multiply", "divide", "negative", "square", "sqrt", "exp", "log", "abs",
    "maximum", "minimum", "pow", "reduce_sum", "reduce_mean", "reduce_max", "argmax", "equal",
    "not_equal", "less", "less_equal", "greater", "greater_equal", "cast", "round", "matmul",
    "add_n", "sign",
]


# --------------------------------------------------------------------- operands
def _operands(op_name: str, x: Any, y: Any) -> tuple[Tensor, Tensor]:
    if isinstance(x, Tensor) or hasattr(x, "_as_graph_element"):
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
            f"{op_name}: input 'y' of dtype {y.dtype.name} does not match dtype "
            f"{x.dtype.name} of argument 'x' ({x.name} vs {y.name}).")
    return x, y


def _is_tensorish(v: Any) -> bool:
    return isinstance(v, Tensor) or hasattr(v, "_as_graph_element")


def _binary(op_type: str, x: Any, y: Any, name: str | None,
            out_dtype: _dtypes.DType | None = None) -> Tensor:
    a, b = _operands(op_type, x, y)
    shp = broadcast_static_shape(a.shape, b.shape)
    if shp is None:
        raise CkptsyncValueError(
            f"{op_type}: dimensions must be equal or broadcastable, but got shapes {a.shape} "
            f"and {b.shape} for '{a.name}' and '{b.name}'.")
    return single(op_type, [a, b], out_dtype or a.dtype, shp, name=name)


def unary(op_type: str, x: Any, name: str | None, float_only: bool = False) -> Tensor:
    """A one-input op of ``x``'s dtype and shape (float only: raises TypeError otherwise)."""
    t = convert_to_tensor(x)
    if float_only and not (t.dtype.is_floating or t.dtype.is_complex):
        raise CkptsyncTypeError(f"{op_type}: expected a floating-point tensor, got {t.dtype.name} "
                                f"for {t.name}.")
    return single(op_type, [t], t.dtype, t.shape, name=name)


# --------------------------------------------------------------------- binary, with gradients
def _grad_add(op: Any, g: Tensor) -> list[Any]:
    x, y = op.inputs
    return [sum_to_shape_of(g, x), sum_to_shape_of(g, y)]


def _grad_sub(op: Any, g: Tensor) -> list[Any]:
    x, y = op.inputs
    return [sum_to_shape_of(g, x), sum_to_shape_of(negative(g), y)]


def _grad_mul(op: Any, g: Tensor) -> list[Any]:
    x, y = op.inputs
    return [sum_to_shape_of(multiply(g, y), x), sum_to_shape_of(multiply(g, x), y)]


def _grad_div(op: Any, g: Tensor) -> list[Any]:
    x, y = op.inputs
    if not x.dtype.is_floating:
        return [None, None]
    return [sum_to_shape_of(divide(g, y), x),
            sum_to_shape_of(negative(multiply(g, divide(op.outputs[0], y))), y)]


def _grad_minmax(op: Any, g: Tensor) -> list[Any]:
    x, y = op.inputs
    gx, gy = op.graph.create_op("MinMaxGrad", [g, x, y], [g.dtype, g.dtype],
                                [g.shape, g.shape], name=op.type + "Grad",
                                attrs={"is_max": op.type == "Maximum"}).outputs
    return [sum_to_shape_of(gx, x), sum_to_shape_of(gy, y)]


def _grad_pow(op: Any, g: Tensor) -> list[Any]:
    x, y = op.inputs
    z = op.outputs[0]
    gx = multiply(g, multiply(y, pow(x, subtract(y, 1))))
    gy = multiply(g, multiply(z, log(maximum(x, 1e-30))))
    return [sum_to_shape_of(gx, x), sum_to_shape_of(gy, y)]


register("AddV2", grad=_grad_add)(np.add)
register("Sub", grad=_grad_sub)(np.subtract)
register("Mul", grad=_grad_mul)(np.multiply)
register("RealDiv", grad=_grad_div)(np.true_divide)
register("Maximum", grad=_grad_minmax)(np.maximum)
register("Minimum", grad=_grad_minmax)(np.minimum)
register("Pow", grad=_grad_pow)(np.power)


@register("MinMaxGrad")
def _minmax_grad_kernel(g: np.ndarray, x: np.ndarray, y: np.ndarray, *, is_max: bool
                        ) -> tuple[np.ndarray, np.ndarray]:
    mask = (x >= y) if is_max else (x <= y)
    zero = np.zeros((), g.dtype)
    gb = np.broadcast_to(g, np.broadcast_shapes(g.shape, x.shape, y.shape))
    return np.where(mask, gb, zero), np.where(mask, zero, gb)


def add(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x + y`` with broadcasting, as ``tf.add``."""
    return _binary("AddV2", x, y, name or "Add")  # TF1's default name, not the type


def subtract(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x - y`` with broadcasting, as ``tf.subtract``."""
    return _binary("Sub", x, y, name)


def multiply(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x * y`` elementwise with broadcasting, as ``tf.multiply``."""
    return _binary("Mul", x, y, name)


def divide(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x / y`` (true division; integers give float64), as ``tf.divide``."""
    a, b = _operands("RealDiv", x, y)
    if a.dtype.is_integer:
        a = cast(a, _dtypes.float64)
        b = cast(b, _dtypes.float64)
    return _binary("RealDiv", a, b, name or "truediv")


def maximum(x: Any, y: Any, name: str | None = None) -> Tensor:
    """Elementwise max (gradient to ``x`` on ties), as ``tf.maximum``."""
    return _binary("Maximum", x, y, name)


def minimum(x: Any, y: Any, name: str | None = None) -> Tensor:
    """Elementwise min (gradient to ``x`` on ties), as ``tf.minimum``."""
    return _binary("Minimum", x, y, name)


def pow(x: Any, y: Any, name: str | None = None) -> Tensor:  # noqa: A001 - TF's name
    """``x ** y`` elementwise, as ``tf.pow``."""
    return _binary("Pow", x, y, name)


# --------------------------------------------------------------------- unary
register("Neg", grad=lambda op, g: [negative(g)])(np.negative)
register("Square", grad=lambda op, g: [multiply(g, multiply(op.inputs[0], 2))])(np.square)
register("Sqrt", grad=lambda op, g: [divide(multiply(g, 0.5), op.outputs[0])])(np.sqrt)
register("Exp", grad=lambda op, g: [multiply(g, op.outputs[0])])(np.exp)
register("Log", grad=lambda op, g: [divide(g, op.inputs[0])])(np.log)
register("Abs", grad=lambda op, g: [multiply(g, sign(op.inputs[0]))])(np.abs)
register("Sign", not_differentiable=True)(np.sign)
register("Round", not_differentiable=True)(np.round)


def negative(x: Any, name: str | None = None) -> Tensor:
    """``-x``, as ``tf.negative``."""
    return unary("Neg", x, name)


def square(x: Any, name: str | None = None) -> Tensor:
    """``x * x``, as ``tf.square``."""
    return unary("Square", x, name)


def sqrt(x: Any, name: str | None = None) -> Tensor:
    """Elementwise square root of a float tensor, as ``tf.sqrt``."""
    return unary("Sqrt", x, name, float_only=True)


def exp(x: Any, name: str | None = None) -> Tensor:
    """Elementwise ``e ** x`` of a float tensor, as ``tf.exp``."""
    return unary("Exp", x, name, float_only=True)


def log(x: Any, name: str | None = None) -> Tensor:
    """Elementwise natural log of a float tensor, as ``tf.log``."""
    return unary("Log", x, name, float_only=True)


def abs(x: Any, name: str | None = None) -> Tensor:  # noqa: A001 - TF's name
    """Elementwise absolute value, as ``tf.abs``; gradient ``sign(x)``."""
    return unary("Abs", x, name)


def sign(x: Any, name: str | None = None) -> Tensor:
    """Elementwise sign (-1, 0, 1), as ``tf.sign``; no gradient."""
    return unary("Sign", x, name)


def round(x: Any, name: str | None = None) -> Tensor:  # noqa: A001 - TF's name
    """Round half to even, as ``tf.round``; no gradient."""
    return unary("Round", x, name)


# --------------------------------------------------------------------- add_n
def _grad_add_n(op: Any, g: Tensor) -> list[Any]:
    return [sum_to_shape_of(g, x) for x in op.inputs]


@register("AddN", grad=_grad_add_n, accepts_out=True)
def _add_n_kernel(*xs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    if out is not None and all(x.shape == out.shape and x.dtype == out.dtype for x in xs):
        if len(xs) > 1:
            np.add(xs[0], xs[1], out=out)
        else:
            np.copyto(out, xs[0])
    else:
        out = xs[0] + xs[1] if len(xs) > 1 else xs[0].copy()
    for x in xs[2:]:
        out += x
    return out


def add_n(inputs: Any, name: str | None = None) -> Tensor:
    """Sums a list of same-shaped tensors, as ``tf.add_n``."""
    xs = [convert_to_tensor(x) for x in inputs]
    if not xs:
        raise CkptsyncValueError("add_n: inputs must be a non-empty list of tensors.")
    if len(xs) == 1:
        return xs[0]
    shp = xs[0].shape
    for x in xs[1:]:
        if x.dtype != xs[0].dtype:
            raise CkptsyncTypeError(f"add_n: dtypes differ: {xs[0].dtype.name} vs {x.dtype.name}.")
        shp = broadcast_static_shape(shp, x.shape) or shp
    return single("AddN", xs, xs[0].dtype, shp, name=name)


# --------------------------------------------------------------------- matmul
def _grad_matmul(op: Any, g: Tensor) -> list[Any]:
    a, b = op.inputs
    ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
    if not ta and not tb:
        return [matmul(g, b, transpose_b=True), matmul(a, g, transpose_a=True)]
    if not ta and tb:
        return [matmul(g, b), matmul(g, a, transpose_a=True)]
    if ta and not tb:
        return [matmul(b, g, transpose_b=True), matmul(a, g)]
    return [matmul(b, g, transpose_a=True, transpose_b=True),
            matmul(g, a, transpose_a=True, transpose_b=True)]


@register("MatMul", grad=_grad_matmul, accepts_out=True)
def _matmul_kernel(a: np.ndarray, b: np.ndarray, *, transpose_a: bool, transpose_b: bool,
                   out: np.ndarray | None = None) -> np.ndarray:
    x, y = a.T if transpose_a else a, b.T if transpose_b else b
    if out is not None and (out.shape != (x.shape[0], y.shape[-1]) or x.dtype != out.dtype
                            or y.dtype != out.dtype):
        out = None
    return np.matmul(x, y, out=out)


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False,
           name: str | None = None) -> Tensor:
    """Matrix product of rank-2 tensors, ``[m, k] x [k, n] -> [m, n]``, as ``tf.matmul``.

    Raises:
        ValueError: ranks are not 2 or inner dimensions differ (names both shapes).
        TypeError: the dtypes differ.
    """
    x, y = _operands("MatMul", a, b)
    sa, sb = x.shape, y.shape
    for s, t in ((sa, x), (sb, y)):
        if s.ndims is not None and s.ndims != 2:
            raise CkptsyncValueError(f"MatMul: shape must be rank 2 but is rank {s.ndims} for "
                                     f"'{t.name}' with shape {s}.")
    da = list(sa.dims) if sa.dims is not None else [None, None]
    db = list(sb.dims) if sb.dims is not None else [None, None]
    m, k1 = (da[1], da[0]) if transpose_a else (da[0], da[1])
    k2, n = (db[1], db[0]) if transpose_b else (db[0], db[1])
    if k1 is not None and k2 is not None and k1 != k2:
        raise CkptsyncValueError(
            f"MatMul: dimensions must be equal, but are {k1} and {k2} for inputs with shapes "
            f"{sa} and {sb} (transpose_a={transpose_a}, transpose_b={transpose_b}).")
    return single("MatMul", [x, y], x.dtype, [m, n], name=name,
                  attrs={"transpose_a": transpose_a, "transpose_b": transpose_b})


# --------------------------------------------------------------------- reductions
def _norm_axis(axis: Any, ndims: int | None) -> tuple[int, ...] | None:
    if axis is None:
        return None
    axes = [int(a) for a in np.atleast_1d(np.asarray(axis))]
    if ndims is None:
        if any(a < 0 for a in axes):
            raise CkptsyncValueError("Negative reduction axes need a tensor of known rank.")
        return tuple(sorted(set(axes)))
    for a in axes:
        if not -ndims <= a < max(ndims, 1):
            raise CkptsyncValueError(f"Invalid reduction axis {a} for a tensor of rank {ndims}.")
    return tuple(sorted({a % ndims if ndims else 0 for a in axes}))


def _reduced_shape(s: TensorShape, axes: tuple[int, ...] | None, keepdims: bool) -> Any:
    if s.dims is None:
        return None
    if axes is None:
        return [1] * len(s.dims) if keepdims else []
    return [1 if i in axes else d for i, d in enumerate(s.dims) if keepdims or i not in axes]


def _reduce(op_type: str, x: Any, axis: Any, keepdims: bool, name: str | None) -> Tensor:
    t = convert_to_tensor(x)
    axes = _norm_axis(axis, t.shape.ndims)
    return single(op_type, [t], t.dtype, _reduced_shape(t.shape, axes, keepdims), name=name,
                  attrs={"axis": axes, "keepdims": bool(keepdims)})


def _grad_reduce(op: Any, g: Tensor) -> list[Any]:
    x = op.inputs[0]
    return [single("ReduceGrad", [g, x], g.dtype, x.shape,
                   attrs={"axis": op.attrs["axis"], "keepdims": op.attrs["keepdims"],
                          "mean": op.type == "Mean"})]


def _grad_max(op: Any, g: Tensor) -> list[Any]:
    x = op.inputs[0]
    return [single("MaxGrad", [g, x, op.outputs[0]], g.dtype, x.shape,
                   attrs={"axis": op.attrs["axis"], "keepdims": op.attrs["keepdims"]})]


@register("Sum", grad=_grad_reduce)
def _sum_kernel(x: np.ndarray, *, axis: Any, keepdims: bool) -> np.ndarray:
    # In the input's dtype, as TF (numpy would widen int32 to int64).
    return np.asarray(np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype))


@register("Mean", grad=_grad_reduce)
def _mean_kernel(x: np.ndarray, *, axis: Any, keepdims: bool) -> np.ndarray:
    out = np.mean(x, axis=axis, keepdims=keepdims)
    return np.asarray(out, dtype=x.dtype)


@register("Max", grad=_grad_max)
def _max_kernel(x: np.ndarray, *, axis: Any, keepdims: bool) -> np.ndarray:
    return np.asarray(np.max(x, axis=axis, keepdims=keepdims))


def _keep(g: np.ndarray, x: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    if keepdims or axis is None:
        return g.reshape([1] * x.ndim) if axis is None else g
    return np.expand_dims(g, axis)


@register("ReduceGrad")
def _reduce_grad_kernel(g: np.ndarray, x: np.ndarray, *, axis: Any, keepdims: bool,
                        mean: bool) -> np.ndarray:
    gk = _keep(g, x, axis, keepdims)
    if mean:
        count = x.size if axis is None else int(np.prod([x.shape[a] for a in axis]))
        gk = gk / np.asarray(max(count, 1), dtype=g.dtype)
    return np.broadcast_to(gk, x.shape).astype(g.dtype, copy=True)


@register("MaxGrad")
def _max_grad_kernel(g: np.ndarray, x: np.ndarray, y: np.ndarray, *, axis: Any,
                     keepdims: bool) -> np.ndarray:
    yk, gk = _keep(y, x, axis, keepdims), _keep(g, x, axis, keepdims)
    mask = (x == yk).astype(g.dtype)
    count = mask.sum(axis=axis, keepdims=True)
    return (mask / count * gk).astype(g.dtype)


def reduce_sum(input_tensor: Any, axis: Any = None, keepdims: bool = False,
               name: str | None = None) -> Tensor:
    """Sum over ``axis`` (all axes when None), as ``tf.reduce_sum``."""
    return _reduce("Sum", input_tensor, axis, keepdims, name)


def reduce_mean(input_tensor: Any, axis: Any = None, keepdims: bool = False,
                name: str | None = None) -> Tensor:
    """Mean over ``axis`` (all axes when None), in the input's dtype, as ``tf.reduce_mean``."""
    return _reduce("Mean", input_tensor, axis, keepdims, name)


def reduce_max(input_tensor: Any, axis: Any = None, keepdims: bool = False,
               name: str | None = None) -> Tensor:
    """Max over ``axis``; the gradient is split among ties, as ``tf.reduce_max``."""
    return _reduce("Max", input_tensor, axis, keepdims, name)


@register("ArgMax", not_differentiable=True)
def _argmax_kernel(x: np.ndarray, *, axis: int, output_type: Any) -> np.ndarray:
    return x.argmax(axis=axis).astype(output_type.np, copy=False)


def argmax(input: Any, axis: int | None = None, output_type: Any = _dtypes.int64,  # noqa: A002
           name: str | None = None) -> Tensor:
    """Index of the max along ``axis`` (default 0), int64 by default, as ``tf.argmax``."""
    t = convert_to_tensor(input)
    ax = _norm_axis(0 if axis is None else axis, t.shape.ndims)
    assert ax is not None
    dt = _dtypes.as_dtype(output_type)
    return single("ArgMax", [t], dt, _reduced_shape(t.shape, ax, False), name=name,
                  attrs={"axis": ax[0], "output_type": dt})


# --------------------------------------------------------------------- comparisons
for _t, _f in (("Equal", np.equal), ("NotEqual", np.not_equal), ("Less", np.less),
               ("LessEqual", np.less_equal), ("Greater", np.greater),
               ("GreaterEqual", np.greater_equal)):
    register(_t, not_differentiable=True)(_f)


def equal(x: Any, y: Any, name: str | None = None) -> Tensor:
    """Elementwise ``x == y`` as bool, as ``tf.equal``."""
    return _binary("Equal", x, y, name, _dtypes.bool)


def not_equal(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _binary("NotEqual", x, y, name, _dtypes.bool)


def less(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _binary("Less", x, y, name, _dtypes.bool)


def less_equal(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _binary("LessEqual", x, y, name, _dtypes.bool)


def greater(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _binary("Greater", x, y, name, _dtypes.bool)


def greater_equal(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _binary("GreaterEqual", x, y, name, _dtypes.bool)


# --------------------------------------------------------------------- cast
def _grad_cast(op: Any, g: Tensor) -> list[Any]:
    src = op.inputs[0].dtype
    if (src.is_floating or src.is_complex) and (g.dtype.is_floating or g.dtype.is_complex):
        return [cast(g, src)]
    return [None]


@register("Cast", grad=_grad_cast)
def _cast_kernel(x: np.ndarray, *, dtype: Any) -> np.ndarray:
    return x.astype(dtype.np)


def cast(x: Any, dtype: Any, name: str | None = None) -> Tensor:
    """Converts to ``dtype``, as ``tf.cast`` (floats to ints truncate toward zero)."""
    t = convert_to_tensor(x)
    dt = _dtypes.as_dtype(dtype)
    if t.dtype == dt:
        return t
    return single("Cast", [t], dt, t.shape, name=name, attrs={"dtype": dt})


# --------------------------------------------------------------------- Tensor operators
def _install_operators() -> None:
    """``a + b`` on tensors adds an ``AddV2`` op named ``add``, and so on (TF's math_ops
    does the same: an operator's op is named after the operator, ``add``, ``sub``, ``mul``,
    ``truediv``, ``pow``; ``tf.add`` names its op ``Add``)."""
    binary: dict[str, Callable[..., Tensor]] = {
        "add": add, "sub": subtract, "mul": multiply, "truediv": divide, "matmul": matmul,
        "pow": pow}
    for name, fn in binary.items():
        default = None if name == "matmul" else name
        Tensor.override_operator(
            f"__{name}__", lambda x, y, fn=fn, default=default: fn(x, y, name=default))
        Tensor.override_operator(
            f"__r{name}__", lambda y, x, fn=fn, default=default: fn(x, y, name=default))
    plain: dict[str, Callable[..., Tensor]] = {
        "lt": less, "le": less_equal, "gt": greater, "ge": greater_equal, "neg": negative,
        "abs": abs}
    for name, fn in plain.items():
        Tensor.override_operator(f"__{name}__", fn)


_install_operators()
