"""Arithmetic, comparisons and casts, each kernel beside its gradient.

Broadcasting follows numpy. Dtype rules, as TF1: both operands of a binary op must have
the same dtype (``TypeError`` naming the op and both dtypes); a Python number or list is
converted to the tensor operand's dtype, except that a Python float never becomes an
integer or bool tensor and a Python number never a bool one (``TypeError``, where a
silent conversion would truncate); numpy scalars are cast, as TF. Arithmetic on bool
tensors raises ``TypeError`` (``multiply`` and the comparisons ``equal``/``not_equal``
excepted, as TF). ``divide`` of integers returns float32 for 8/16-bit and float64 for
32/64-bit ones (``tf.truediv``). Shape errors are raised while the graph is built,
naming the op and both shapes. Reductions live in :mod:`.reduction_ops`, ``matmul`` in
:mod:`.linalg_ops` (both re-exported here).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Tensor
from ..tensor_shape import TensorShape, broadcast_static_shape
from .array_ops import convert_to_tensor, identity, sum_to_shape_of, zeros_like
from .registry import register, single

__all__ = [
    "add", "subtract", "multiply", "divide", "negative", "square", "sqrt", "exp", "log", "abs",
    "maximum", "minimum", "pow", "reduce_sum", "reduce_mean", "reduce_max", "argmax", "equal",
    "not_equal", "less", "less_equal", "greater", "greater_equal", "cast", "round", "matmul",
    "add_n", "sign",
]


# --------------------------------------------------------------------- operands
def _is_tensorish(v: Any) -> bool:
    return isinstance(v, Tensor) or hasattr(v, "_as_graph_element")


def check_python_value(op_name: str, value: Any, dtype: _dtypes.DType) -> None:
    """Raises TypeError where TF1 refuses to convert a Python value to ``dtype``: a float
    (or complex) to an integer or bool tensor, a number to a bool one, a complex to a
    float one. numpy values are converted (cast) as TF does."""
    if isinstance(value, (np.ndarray, np.generic)) or _is_tensorish(value):
        return
    try:
        kind = np.asarray(value).dtype.kind
    except (TypeError, ValueError):
        return
    bad = ((dtype.is_integer and kind in "fc") or (dtype.is_bool and kind in "iufc")
           or (dtype.is_floating and kind == "c"))
    if bad:
        raise CkptsyncTypeError(
            f"{op_name}: expected {dtype.name}, but got {value!r} of type "
            f"'{type(value).__name__}' (a Python value is never truncated to {dtype.name}).")


def _convert_other(op_name: str, value: Any, dtype: _dtypes.DType) -> Tensor:
    check_python_value(op_name, value, dtype)
    return convert_to_tensor(value, dtype=dtype)


def _operands(op_name: str, x: Any, y: Any) -> tuple[Tensor, Tensor]:
    if _is_tensorish(x):
        x = convert_to_tensor(x)
        y = convert_to_tensor(y) if _is_tensorish(y) else _convert_other(op_name, y, x.dtype)
    elif _is_tensorish(y):
        y = convert_to_tensor(y)
        x = _convert_other(op_name, x, y.dtype)
    else:
        x = convert_to_tensor(x)
        y = _convert_other(op_name, y, x.dtype)
    if x.dtype != y.dtype:
        raise CkptsyncTypeError(
            f"{op_name}: input 'y' of dtype {y.dtype.name} does not match dtype "
            f"{x.dtype.name} of argument 'x' ({x.name} vs {y.name}).")
    return x, y


def check_not_bool(op_name: str, t: Tensor) -> None:
    """TypeError for a bool tensor given to an arithmetic op, as TF1's op type checks."""
    if t.dtype.is_bool:
        raise CkptsyncTypeError(
            f"{op_name}: value passed to parameter 'x' has DataType bool not in the list of "
            f"allowed values (numeric types), for {t.name}.")


def _binary(op_type: str, x: Any, y: Any, name: str | None,
            out_dtype: _dtypes.DType | None = None, allow_bool: bool = False) -> Tensor:
    a, b = _operands(op_type, x, y)
    if not allow_bool:
        check_not_bool(op_type, a)
    shp = broadcast_static_shape(a.shape, b.shape)
    if shp is None:
        raise CkptsyncValueError(
            f"{op_type}: dimensions must be equal or broadcastable, but got shapes {a.shape} "
            f"and {b.shape} for '{a.name}' and '{b.name}'.")
    return single(op_type, [a, b], out_dtype or a.dtype, shp, name=name)


binary = _binary


def unary(op_type: str, x: Any, name: str | None, float_only: bool = False,
          allow_bool: bool = False) -> Tensor:
    """A one-input op of ``x``'s dtype and shape (float only: raises TypeError otherwise;
    bool raises TypeError unless ``allow_bool``)."""
    t = convert_to_tensor(x)
    if float_only and not (t.dtype.is_floating or t.dtype.is_complex):
        raise CkptsyncTypeError(f"{op_type}: expected a floating-point tensor, got {t.dtype.name} "
                                f"for {t.name}.")
    if not allow_bool:
        check_not_bool(op_type, t)
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
    # As TF: d/dy = z * log(x) where x > 0, else 0 (no NaN or -inf for bases <= 0).
    x, y = op.inputs
    z = op.outputs[0]
    gx = multiply(g, multiply(y, pow(x, subtract(y, 1))))
    if not (x.dtype.is_floating or x.dtype.is_complex):
        return [sum_to_shape_of(gx, x), None]
    safe_log = single("PowLogBase", [x], x.dtype, x.shape)
    gy = multiply(g, multiply(z, safe_log))
    return [sum_to_shape_of(gx, x), sum_to_shape_of(gy, y)]


@register("PowLogBase")
def _pow_log_base_kernel(x: np.ndarray) -> np.ndarray:
    pos = x > 0
    return np.where(pos, np.log(np.where(pos, x, 1)), np.zeros((), x.dtype)).astype(x.dtype)


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
    """``x * y`` elementwise with broadcasting (bools: logical and), as ``tf.multiply``."""
    return _binary("Mul", x, y, name, allow_bool=True)


def divide(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x / y``, true division, as ``tf.divide`` / ``tf.truediv``: 8- and 16-bit integers
    give float32, 32- and 64-bit ones float64 (both operands are cast first).

    Raises:
        TypeError: the dtypes differ, or bool operands.
    """
    a, b = _operands("RealDiv", x, y)
    check_not_bool("truediv", a)
    if a.dtype.is_integer:
        to = _dtypes.float32 if a.dtype.size <= 2 else _dtypes.float64
        a, b = cast(a, to), cast(b, to)
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
register("Sign", grad=lambda op, g: [zeros_like(op.inputs[0])])(np.sign)  # as TF: zeros
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
    """Elementwise sign (-1, 0, 1), as ``tf.sign``; its gradient is zeros, as TF's."""
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
    """Sums a list of same-shaped tensors, as ``tf.add_n`` (``AddN``). One input is
    returned as it is, or, with a ``name``, through an ``Identity`` of that name, as TF.

    Raises:
        ValueError: no inputs; shapes differ. TypeError: dtypes differ; bool inputs.
    """
    xs = [convert_to_tensor(x) for x in inputs]
    if not xs:
        raise CkptsyncValueError("Inputs must be an iterable of at least one "
                                 "Tensor/IndexedSlices with the same dtype and shape.")
    if len(xs) == 1:
        return xs[0] if name is None else identity(xs[0], name=name)
    check_not_bool("AddN", xs[0])
    shp = TensorShape(None)
    for x in xs:
        if x.dtype != xs[0].dtype:
            raise CkptsyncTypeError(f"add_n: dtypes differ: {xs[0].dtype.name} vs {x.dtype.name}.")
        try:  # all the same shape, as TF's AddN (an unknown rank merges with any shape)
            shp = shp.merge_with(x.shape)
        except ValueError:
            raise CkptsyncValueError(
                f"add_n: shapes must be equal, got {[str(t.shape) for t in xs]}.") from None
    return single("AddN", xs, xs[0].dtype, shp, name=name)


# --------------------------------------------------------------------- comparisons
for _t, _f in (("Equal", np.equal), ("NotEqual", np.not_equal), ("Less", np.less),
               ("LessEqual", np.less_equal), ("Greater", np.greater),
               ("GreaterEqual", np.greater_equal)):
    register(_t, not_differentiable=True)(_f)


def equal(x: Any, y: Any, name: str | None = None) -> Tensor:
    """Elementwise ``x == y`` as bool, as ``tf.equal``."""
    return _binary("Equal", x, y, name, _dtypes.bool, allow_bool=True)


def not_equal(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _binary("NotEqual", x, y, name, _dtypes.bool, allow_bool=True)


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




# Re-exported: they lived here before the split (reductions, matmul).
from .linalg_ops import matmul  # noqa: E402
from .reduction_ops import argmax, reduce_max, reduce_mean, reduce_sum  # noqa: E402
