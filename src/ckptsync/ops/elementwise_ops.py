"""Elementwise math beyond the basics, logical ops, TF1's deprecated cast helpers, and
the Python operators of :class:`~ckptsync.tensor.Tensor`, as TF1.

Float-only ops (``floor``, ``rsqrt``, ``sin``, ``erf``, ...) raise ``TypeError`` for other
dtypes; ``floor``/``ceil`` have no gradient (as TF). ``floordiv``/``floormod`` round toward
negative infinity (Python's ``//`` and ``%``), and integer division by zero raises
``InvalidArgumentError`` at run time. TF1's ``div`` floor-divides integers and
true-divides floats. Logical ops take bool tensors only (``TypeError``).

Operators: ``+ - * / ** @``, ``//`` (``floordiv``), ``%`` (``floormod``, op named
``mod``), ``& | ^ ~`` (logical for bools, bitwise for integers), ``-x``, ``abs(x)`` and
the comparisons ``< <= > >=``; each also reflected (``2 // x``). Op names are TF's:
``add``, ``sub``, ``mul``, ``truediv``, ``floordiv``, ``mod``, ``and``, ``or``, ``xor``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Tensor, get_default_graph
from .array_ops import convert_to_tensor, sum_to_shape_of
from .linalg_ops import matmul
from .math_ops import (
    _operands,
    abs,
    add,
    binary,
    cast,
    check_not_bool,
    divide,
    exp,
    greater,
    greater_equal,
    less,
    less_equal,
    multiply,
    negative,
    pow,
    square,
    subtract,
    unary,
)
from .reduction_ops import argmax, argmin
from .registry import register, single

__all__ = [
    "floor", "ceil", "rsqrt", "reciprocal", "log1p", "expm1", "sin", "cos", "erf",
    "squared_difference", "truediv", "div", "floordiv", "floormod", "mod", "logical_and",
    "logical_or", "logical_not", "logical_xor", "is_nan", "is_finite", "is_inf", "to_float",
    "to_int32", "to_int64", "to_double", "tan", "atan", "asin", "acos", "sinh", "cosh",
    "erfc", "rint", "atan2", "floor_div", "truncatediv", "truncatemod", "realdiv",
    "div_no_nan", "scalar_mul", "arg_max", "arg_min",
]
# Names also (or only) exported as ``cs.nn.<name>``.
NN_EXPORTS: tuple[str, ...] = ()

_erf_impl: Any = None


def _erf_np(x: np.ndarray) -> np.ndarray:
    """erf elementwise: scipy's when installed (looked up at the first Erf run, so that
    importing ckptsync never loads scipy), else ``math.erf`` per element (numpy has no
    erf; exact, but slower)."""
    global _erf_impl
    if _erf_impl is None:
        try:  # scipy is optional (not a dependency): imported here, on first use
            from scipy.special import erf  # type: ignore[import-untyped]
        except ImportError:  # pragma: no cover - depends on the environment
            erf = np.vectorize(math.erf, otypes=[np.float64])
        _erf_impl = erf
    return _erf_impl(x)


# --------------------------------------------------------------------- float unary
def _y(op: Any) -> Tensor:
    return op.outputs[0]


register("Floor", grad=lambda op, g: [None])(np.floor)
register("Ceil", grad=lambda op, g: [None])(np.ceil)
register("Rsqrt", grad=lambda op, g: [multiply(g, multiply(pow(_y(op), 3), -0.5))])(
    lambda x: np.asarray(1 / np.sqrt(x), x.dtype))
register("Reciprocal", grad=lambda op, g: [negative(multiply(g, square(_y(op))))])(
    lambda x: np.asarray(np.reciprocal(x), x.dtype))
register("Log1p", grad=lambda op, g: [divide(g, add(op.inputs[0], 1))])(np.log1p)
register("Expm1", grad=lambda op, g: [multiply(g, exp(op.inputs[0]))])(np.expm1)
register("Sin", grad=lambda op, g: [multiply(g, cos(op.inputs[0]))])(np.sin)
register("Cos", grad=lambda op, g: [negative(multiply(g, sin(op.inputs[0])))])(np.cos)
register("Erf", grad=lambda op, g: [multiply(
    g, multiply(exp(negative(square(op.inputs[0]))), 2 / math.sqrt(math.pi)))])(
    lambda x: np.asarray(_erf_np(x), x.dtype))


def _float_unary(op_type: str, tf_name: str) -> Callable[..., Tensor]:
    def fn(x: Any, name: str | None = None) -> Tensor:
        return unary(op_type, x, name, float_only=True)
    fn.__name__ = tf_name
    fn.__doc__ = f"Elementwise ``{tf_name}`` of a float tensor, as ``tf.{tf_name}``."
    return fn


tan = _float_unary("Tan", "tan")
atan = _float_unary("Atan", "atan")
asin = _float_unary("Asin", "asin")
acos = _float_unary("Acos", "acos")
sinh = _float_unary("Sinh", "sinh")
cosh = _float_unary("Cosh", "cosh")
rint = _float_unary("Rint", "rint")  # round half to even; no gradient


register("Tan", grad=lambda op, g: [multiply(g, add(square(_y(op)), 1))])(np.tan)
register("Atan", grad=lambda op, g: [divide(g, add(square(op.inputs[0]), 1))])(np.arctan)
register("Asin", grad=lambda op, g: [multiply(g, rsqrt(subtract(1, square(op.inputs[0]))))])(
    np.arcsin)
register("Acos", grad=lambda op, g: [negative(multiply(
    g, rsqrt(subtract(1, square(op.inputs[0])))))])(np.arccos)
register("Sinh", grad=lambda op, g: [multiply(g, cosh(op.inputs[0]))])(np.sinh)
register("Cosh", grad=lambda op, g: [multiply(g, sinh(op.inputs[0]))])(np.cosh)
register("Erfc", grad=lambda op, g: [multiply(
    g, multiply(exp(negative(square(op.inputs[0]))), -2 / math.sqrt(math.pi)))])(
    lambda x: np.asarray(1 - _erf_np(x), x.dtype))
register("Rint", grad=lambda op, g: [None])(np.rint)


def erfc(x: Any, name: str | None = None) -> Tensor:
    """``1 - erf(x)`` of a real float tensor, as ``tf.erfc``."""
    t = convert_to_tensor(x)
    if not t.dtype.is_floating:
        raise CkptsyncTypeError(f"Erfc: expected a real floating-point tensor, got "
                                f"{t.dtype.name} for {t.name}.")
    return unary("Erfc", t, name)


def floor(x: Any, name: str | None = None) -> Tensor:
    """Largest integer not above ``x``, of a float tensor, as ``tf.floor``; no gradient."""
    return unary("Floor", x, name, float_only=True)


def ceil(x: Any, name: str | None = None) -> Tensor:
    """Smallest integer not below ``x``, of a float tensor, as ``tf.ceil``; no gradient."""
    return unary("Ceil", x, name, float_only=True)


def rsqrt(x: Any, name: str | None = None) -> Tensor:
    """``1 / sqrt(x)`` of a float tensor, as ``tf.rsqrt``."""
    return unary("Rsqrt", x, name, float_only=True)


def reciprocal(x: Any, name: str | None = None) -> Tensor:
    """``1 / x`` of a float tensor, as ``tf.reciprocal``."""
    return unary("Reciprocal", x, name, float_only=True)


def log1p(x: Any, name: str | None = None) -> Tensor:
    """``log(1 + x)``, accurate near 0, as ``tf.log1p``."""
    return unary("Log1p", x, name, float_only=True)


def expm1(x: Any, name: str | None = None) -> Tensor:
    """``exp(x) - 1``, accurate near 0, as ``tf.expm1``."""
    return unary("Expm1", x, name, float_only=True)


def sin(x: Any, name: str | None = None) -> Tensor:
    """Elementwise sine of a float tensor, as ``tf.sin``."""
    return unary("Sin", x, name, float_only=True)


def cos(x: Any, name: str | None = None) -> Tensor:
    """Elementwise cosine of a float tensor, as ``tf.cos``."""
    return unary("Cos", x, name, float_only=True)


def erf(x: Any, name: str | None = None) -> Tensor:
    """The Gauss error function of a real float tensor, as ``tf.erf``."""
    t = convert_to_tensor(x)
    if not t.dtype.is_floating:
        raise CkptsyncTypeError(f"Erf: expected a real floating-point tensor, got "
                                f"{t.dtype.name} for {t.name}.")
    return unary("Erf", t, name)


# --------------------------------------------------------------------- binary
def _grad_sqdiff(op: Any, g: Tensor) -> list[Any]:
    x, y = op.inputs
    gx = multiply(multiply(g, 2), subtract(x, y))
    return [sum_to_shape_of(gx, x), sum_to_shape_of(negative(gx), y)]


def _check_int_divisor(y: np.ndarray) -> None:
    if y.dtype.kind in "iu" and not np.all(y):
        raise ZeroDivisionError("Integer division by zero")


def _floordiv_kernel(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    _check_int_divisor(y)
    return np.floor_divide(x, y)


def _floormod_kernel(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    _check_int_divisor(y)
    return np.mod(x, y)


def _grad_floormod(op: Any, g: Tensor) -> list[Any]:
    # As TF: d/dx = 1, d/dy = -floor(x / y).
    x, y = op.inputs
    return [sum_to_shape_of(g, x),
            sum_to_shape_of(multiply(g, negative(floordiv(x, y))), y)]


register("SquaredDifference", grad=_grad_sqdiff)(lambda x, y: np.square(x - y))
register("FloorDiv", grad=lambda op, g: [None, None])(_floordiv_kernel)
register("FloorMod", grad=_grad_floormod)(_floormod_kernel)


def squared_difference(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``(x - y) ** 2`` with broadcasting, as ``tf.squared_difference``."""
    return binary("SquaredDifference", x, y, name)


def truediv(x: Any, y: Any, name: str | None = None) -> Tensor:
    """True division (integers become float32 or float64 first), as ``tf.truediv``."""
    return divide(x, y, name=name)


def floordiv(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``floor(x / y)`` in the operands' dtype, as ``tf.floordiv``; no gradient.
    Integer division by zero raises ``InvalidArgumentError`` at run time."""
    return binary("FloorDiv", x, y, name or "floordiv")


def floormod(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x - floor(x / y) * y`` (the sign of ``y``, as Python's ``%``), as ``tf.floormod``."""
    return binary("FloorMod", x, y, name)


mod = floormod


def div(x: Any, y: Any, name: str | None = None) -> Tensor:
    """TF1's deprecated ``tf.div``: floor division for integers, true division for
    floats (named ``div``)."""
    a, b = _operands("div", x, y)
    check_not_bool("div", a)
    if a.dtype.is_integer:
        return binary("FloorDiv", a, b, name or "div")
    return binary("RealDiv", a, b, name or "div")


def _grad_atan2(op: Any, g: Tensor) -> list[Any]:
    y, x = op.inputs
    gd = divide(g, add(square(x), square(y)))
    return [sum_to_shape_of(multiply(gd, x), y), sum_to_shape_of(negative(multiply(gd, y)), x)]


def _truncatediv_kernel(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    _check_int_divisor(y)
    if x.dtype.kind in "iu":
        q = np.abs(x) // np.abs(y)
        return np.where((x < 0) != (y < 0), -q, q).astype(x.dtype)
    return np.trunc(x / y).astype(x.dtype)


def _truncatemod_kernel(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    _check_int_divisor(y)
    return np.fmod(x, y)


def _div_no_nan_kernel(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    zero = y == 0
    return np.where(zero, np.zeros((), x.dtype), x / np.where(zero, 1, y)).astype(x.dtype)


def _grad_div_no_nan(op: Any, g: Tensor) -> list[Any]:
    x, y = op.inputs
    return [sum_to_shape_of(div_no_nan(g, y), x),
            sum_to_shape_of(multiply(g, div_no_nan(div_no_nan(negative(x), y), y)), y)]


register("Atan2", grad=_grad_atan2)(np.arctan2)
register("TruncateDiv", not_differentiable=True)(_truncatediv_kernel)
# No gradient at all, as TF: tf.gradients through it raises LookupError.
register("TruncateMod")(_truncatemod_kernel)
register("DivNoNan", grad=_grad_div_no_nan)(_div_no_nan_kernel)


def atan2(y: Any, x: Any, name: str | None = None) -> Tensor:
    """``atan(y / x)`` in the right quadrant, of float tensors, as ``tf.atan2``."""
    a, b = _operands("Atan2", y, x)
    if not a.dtype.is_floating:
        raise CkptsyncTypeError(f"Atan2: expected floating-point tensors, got {a.dtype.name}.")
    return binary("Atan2", a, b, name)


def floor_div(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``floor(x / y)``, as TF1's ``tf.floor_div`` (the raw op, named ``FloorDiv``)."""
    return binary("FloorDiv", x, y, name)


def truncatediv(x: Any, y: Any, name: str | None = None) -> Tensor:
    """Division rounded toward zero (C's ``/``), as ``tf.truncatediv``; no gradient."""
    return binary("TruncateDiv", x, y, name)


def truncatemod(x: Any, y: Any, name: str | None = None) -> Tensor:
    """Remainder with the sign of ``x`` (C's ``fmod``), as ``tf.truncatemod``;
    differentiating it raises ``LookupError``, as TF."""
    return binary("TruncateMod", x, y, name)


def realdiv(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x / y`` for float tensors (the raw ``RealDiv`` op), as ``tf.realdiv``."""
    return binary("RealDiv", x, y, name)


def div_no_nan(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x / y``, 0 where ``y`` is 0, of float tensors, as ``tf.div_no_nan``."""
    a, b = _operands("DivNoNan", x, y)
    if not (a.dtype.is_floating or a.dtype.is_complex):
        raise CkptsyncTypeError(f"div_no_nan: expected floating-point tensors, got "
                                f"{a.dtype.name}.")
    with get_default_graph().name_scope(name or "div_no_nan") as exact:
        return binary("DivNoNan", a, b, exact)


def scalar_mul(scalar: Any, x: Any, name: str | None = None) -> Tensor:
    """``scalar * x`` for a 0-d ``scalar``, as ``tf.scalar_mul``.

    Raises:
        ValueError: ``scalar`` is not 0-d.
    """
    s: Any = scalar
    rank = s.shape.ndims if isinstance(s, Tensor) else np.ndim(s)
    if rank not in (0, None):
        raise CkptsyncValueError(f"scalar_mul: 'scalar' must be 0-d, got {s!r}.")
    with get_default_graph().name_scope(name or "scalar_mul") as exact:
        return multiply(s, x, name=exact)


def arg_max(input: Any, dimension: Any, output_type: Any = _dtypes.int64,  # noqa: A002
            name: str | None = None) -> Tensor:
    """TF1's deprecated ``tf.arg_max(input, dimension)`` (the raw ``ArgMax`` op)."""
    return argmax(input, dimension, name=name, output_type=output_type)


def arg_min(input: Any, dimension: Any, output_type: Any = _dtypes.int64,  # noqa: A002
            name: str | None = None) -> Tensor:
    """TF1's deprecated ``tf.arg_min(input, dimension)`` (the raw ``ArgMin`` op)."""
    return argmin(input, dimension, name=name, output_type=output_type)


# --------------------------------------------------------------------- logical
for _t, _f in (("LogicalAnd", np.logical_and), ("LogicalOr", np.logical_or),
               ("LogicalNot", np.logical_not), ("IsNan", np.isnan), ("IsFinite", np.isfinite),
               ("IsInf", np.isinf), ("BitwiseAnd", np.bitwise_and),
               ("BitwiseOr", np.bitwise_or), ("BitwiseXor", np.bitwise_xor),
               ("Invert", np.invert)):
    register(_t, not_differentiable=True)(_f)


def _bool_operands(op_type: str, x: Any, y: Any) -> tuple[Tensor, Tensor]:
    a, b = _operands(op_type, x, y)
    if not a.dtype.is_bool:
        raise CkptsyncTypeError(f"{op_type}: input 'x' has type {a.dtype.name} that does not "
                                f"match the expected type bool ({a.name}).")
    return a, b


def logical_and(x: Any, y: Any, name: str | None = None) -> Tensor:
    """Elementwise ``x and y`` of bool tensors, as ``tf.logical_and``."""
    return binary("LogicalAnd", *_bool_operands("LogicalAnd", x, y), name, allow_bool=True)


def logical_or(x: Any, y: Any, name: str | None = None) -> Tensor:
    """Elementwise ``x or y`` of bool tensors, as ``tf.logical_or``."""
    return binary("LogicalOr", *_bool_operands("LogicalOr", x, y), name, allow_bool=True)


def logical_not(x: Any, name: str | None = None) -> Tensor:
    """Elementwise ``not x`` of a bool tensor, as ``tf.logical_not``."""
    t = convert_to_tensor(x, dtype=None if isinstance(x, Tensor) else _dtypes.bool)
    if not t.dtype.is_bool:
        raise CkptsyncTypeError(f"LogicalNot: expected a bool tensor, got {t.dtype.name}.")
    return single("LogicalNot", [t], t.dtype, t.shape, name=name)


def logical_xor(x: Any, y: Any, name: str = "LogicalXor") -> Tensor:
    """Elementwise ``x != y`` of bool tensors, as ``tf.logical_xor`` (composed as TF:
    ``(x or y) and not (x and y)``, the last op named ``name``)."""
    a, b = _bool_operands("LogicalXor", x, y)
    return logical_and(logical_or(a, b), logical_not(logical_and(a, b)), name=name)


def _float_pred(op_type: str, x: Any, name: str | None) -> Tensor:
    t = convert_to_tensor(x)
    if not t.dtype.is_floating:
        raise CkptsyncTypeError(f"{op_type}: expected a floating-point tensor, got "
                                f"{t.dtype.name} for {t.name}.")
    return single(op_type, [t], _dtypes.bool, t.shape, name=name)


def is_nan(x: Any, name: str | None = None) -> Tensor:
    """Elementwise NaN test of a float tensor (bool), as ``tf.is_nan``."""
    return _float_pred("IsNan", x, name)


def is_finite(x: Any, name: str | None = None) -> Tensor:
    """Elementwise finiteness test of a float tensor (bool), as ``tf.is_finite``."""
    return _float_pred("IsFinite", x, name)


def is_inf(x: Any, name: str | None = None) -> Tensor:
    """Elementwise ``+-inf`` test of a float tensor (bool), as ``tf.is_inf``."""
    return _float_pred("IsInf", x, name)


# --------------------------------------------------------------------- cast helpers
def to_float(x: Any, name: str = "ToFloat") -> Tensor:
    """TF1's deprecated ``tf.to_float``: ``cast(x, float32)`` named ``ToFloat`` (``x``
    itself when already float32)."""
    return cast(x, _dtypes.float32, name=name)


def to_double(x: Any, name: str = "ToDouble") -> Tensor:
    """TF1's deprecated ``tf.to_double``: ``cast(x, float64)``."""
    return cast(x, _dtypes.float64, name=name)


def to_int32(x: Any, name: str = "ToInt32") -> Tensor:
    """TF1's deprecated ``tf.to_int32``: ``cast(x, int32)`` (floats truncate toward 0)."""
    return cast(x, _dtypes.int32, name=name)


def to_int64(x: Any, name: str = "ToInt64") -> Tensor:
    """TF1's deprecated ``tf.to_int64``: ``cast(x, int64)``."""
    return cast(x, _dtypes.int64, name=name)


# --------------------------------------------------------------------- Tensor operators
def _bitwise(logical: Callable[..., Tensor], bit_type: str, scope: str
             ) -> Callable[[Any, Any], Tensor]:
    """``&``/``|``/``^``: logical for bool tensors, bitwise for integers (as TF: the
    bitwise op inside a name scope named after the operator)."""
    def op(x: Any, y: Any) -> Tensor:
        with get_default_graph().name_scope(scope) as exact:
            a, b = _operands(bit_type, x, y)
            if a.dtype.is_bool:
                return logical(a, b, name=exact)
            if not a.dtype.is_integer:
                raise CkptsyncTypeError(f"{scope}: operands must be bool or integer, got "
                                        f"{a.dtype.name}.")
            return binary(bit_type, a, b, None)
    return op


def _invert(x: Any) -> Tensor:
    t = convert_to_tensor(x)
    if t.dtype.is_bool:
        return logical_not(t)
    if not t.dtype.is_integer:
        raise CkptsyncTypeError(f"Invert: operand must be bool or integer, got {t.dtype.name}.")
    return single("Invert", [t], t.dtype, t.shape)


def _install_operators() -> None:
    """``a + b`` on tensors adds an ``AddV2`` op named ``add``, and so on (as TF's
    math_ops: an operator's op is named after the operator, ``add``, ``sub``, ``mul``,
    ``truediv``, ``floordiv``, ``mod``, ``pow``; ``tf.add`` names its op ``Add``)."""
    named: dict[str, Callable[..., Tensor]] = {
        "add": add, "sub": subtract, "mul": multiply, "truediv": divide, "pow": pow,
        "floordiv": floordiv, "mod": floormod}
    pairs: dict[str, Callable[..., Tensor]] = {
        name: (lambda x, y, fn=fn, n=name: fn(x, y, name=n)) for name, fn in named.items()}
    pairs["matmul"] = lambda x, y: matmul(x, y, name="matmul")
    pairs["and"] = _bitwise(logical_and, "BitwiseAnd", "and")
    pairs["or"] = _bitwise(logical_or, "BitwiseOr", "or")
    pairs["xor"] = _bitwise(logical_xor, "BitwiseXor", "xor")
    for name, fn in pairs.items():
        Tensor.override_operator(f"__{name}__", fn)
        Tensor.override_operator(f"__r{name}__", lambda y, x, fn=fn: fn(x, y))
    plain: dict[str, Callable[..., Tensor]] = {
        "lt": less, "le": less_equal, "gt": greater, "ge": greater_equal, "neg": negative,
        "abs": abs, "invert": _invert}
    for name, fn in plain.items():
        Tensor.override_operator(f"__{name}__", fn)


_install_operators()
