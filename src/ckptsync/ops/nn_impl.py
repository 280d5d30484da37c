"""tf.nn activations beyond relu/sigmoid/tanh, ``l2_loss`` and ``xw_plus_b``, as TF1.

Each activation is one op of TF's type (``Relu6``, ``Elu``, ``Selu``, ``LeakyRelu``,
``Softplus``, ``Softsign``) whose gradient is a ``<Type>Grad`` op with TF's values at
the kinks: ``relu6``'s gradient is 1 only strictly inside ``(0, 6)``; ``leaky_relu``'s is
``alpha`` at 0; ``elu``'s and ``selu``'s switch on the sign of the output (the positive
branch at 0). ``swish`` and ``log_sigmoid`` are built from those ops as TF builds them.
Outputs have the input's shape and dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Tensor, name_scope
from .array_ops import concat, convert_to_tensor, identity, zeros_like
from .math_ops import (
    cast,
    equal,
    less,
    matmul,
    maximum,
    multiply,
    negative,
    reduce_mean,
    subtract,
    unary,
)
from .nn_ops import bias_add, relu, sigmoid
from .registry import register, single
from .selection_ops import where

__all__ = ["log_sigmoid"]
NN_EXPORTS: tuple[str, ...] = (
    "relu6", "elu", "selu", "leaky_relu", "softplus", "softsign", "swish", "log_sigmoid",
    "l2_loss", "xw_plus_b", "relu_layer", "crelu", "zero_fraction",
)

# TF's Selu constants (from "Self-Normalizing Neural Networks").
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _grad_op(op_type: str, g: Tensor, t: Tensor, attrs: dict[str, Any] | None = None) -> Tensor:
    return single(op_type, [g, t], g.dtype, g.shape, attrs=attrs)


# Second order, as TF: a <Type>Grad op is linear in its incoming gradient.
def _grad_of_grad_linear(op: Any, gg: Tensor) -> list[Any]:
    g, t = op.inputs
    return [_grad_op(op.type, gg, t, dict(op.attrs) or None), zeros_like(t)]


def _grad_of_exp_grad(op: Any, gg: Tensor) -> list[Any]:
    # EluGrad / SeluGrad(g, y): d/dg as the op; d/dy = gg * g where y < 0 (TF's).
    g, y = op.inputs
    neg = less(y, zeros_like(y))
    return [_grad_op(op.type, gg, y), where(neg, multiply(gg, g), zeros_like(y))]


def _grad_of_softplus_grad(op: Any, gg: Tensor) -> list[Any]:
    g, x = op.inputs
    s = sigmoid(x)
    return [multiply(gg, s), multiply(multiply(gg, g), multiply(s, subtract(1.0, s)))]


# --------------------------------------------------------------------- relu6
@register("Relu6", grad=lambda op, g: [_grad_op("Relu6Grad", g, op.inputs[0])])
def _relu6_kernel(x: np.ndarray) -> np.ndarray:
    return np.clip(x, np.zeros((), x.dtype), np.asarray(6, x.dtype))


@register("Relu6Grad", grad=_grad_of_grad_linear)
def _relu6_grad_kernel(g: np.ndarray, x: np.ndarray) -> np.ndarray:
    return g * ((x > 0) & (x < 6)).astype(g.dtype)


def relu6(features: Any, name: str | None = None) -> Tensor:
    """``min(max(x, 0), 6)``, as ``tf.nn.relu6``; any real dtype, gradient 1 on ``(0, 6)``.

    Raises:
        TypeError: a bool or string tensor.
    """
    t = convert_to_tensor(features)
    if not (t.dtype.is_floating or t.dtype.is_integer):
        raise CkptsyncTypeError(f"Relu6: expected a real-valued tensor, got {t.dtype.name}.")
    return single("Relu6", [t], t.dtype, t.shape, name=name)


# --------------------------------------------------------------------- elu / selu
@register("Elu", grad=lambda op, g: [_grad_op("EluGrad", g, op.outputs[0])])
def _elu_kernel(x: np.ndarray) -> np.ndarray:
    return np.where(x < 0, np.expm1(np.minimum(x, 0)), x).astype(x.dtype, copy=False)


@register("EluGrad", grad=_grad_of_exp_grad)
def _elu_grad_kernel(g: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(y < 0, g * (y + 1), g).astype(g.dtype, copy=False)


@register("Selu", grad=lambda op, g: [_grad_op("SeluGrad", g, op.outputs[0])])
def _selu_kernel(x: np.ndarray) -> np.ndarray:
    neg = SELU_SCALE * SELU_ALPHA * np.expm1(np.minimum(x, 0))
    return np.where(x < 0, neg, SELU_SCALE * x).astype(x.dtype, copy=False)


@register("SeluGrad", grad=_grad_of_exp_grad)
def _selu_grad_kernel(g: np.ndarray, y: np.ndarray) -> np.ndarray:
    out = np.where(y < 0, g * (y + SELU_SCALE * SELU_ALPHA), g * SELU_SCALE)
    return out.astype(g.dtype, copy=False)


def elu(features: Any, name: str | None = None) -> Tensor:
    """``exp(x) - 1`` for ``x < 0``, else ``x``, as ``tf.nn.elu`` (float dtypes).

    Raises:
        TypeError: a non-float tensor.
    """
    return unary("Elu", features, name, float_only=True)


def selu(features: Any, name: str | None = None) -> Tensor:
    """``scale * (alpha * (exp(x) - 1))`` for ``x < 0``, else ``scale * x``, as ``tf.nn.selu``.

    ``alpha = 1.6732632...`` and ``scale = 1.0507009...`` (TF's constants). Float dtypes.

    Raises:
        TypeError: a non-float tensor.
    """
    return unary("Selu", features, name, float_only=True)


# --------------------------------------------------------------------- leaky_relu
@register("LeakyRelu", grad=lambda op, g: [_grad_op("LeakyReluGrad", g, op.inputs[0],
                                                    {"alpha": op.attrs["alpha"]})])
def _leaky_relu_kernel(x: np.ndarray, *, alpha: float) -> np.ndarray:
    return np.where(x > 0, x, x * np.asarray(alpha, x.dtype)).astype(x.dtype, copy=False)


@register("LeakyReluGrad", grad=_grad_of_grad_linear)
def _leaky_relu_grad_kernel(g: np.ndarray, x: np.ndarray, *, alpha: float) -> np.ndarray:
    return np.where(x > 0, g, g * np.asarray(alpha, g.dtype)).astype(g.dtype, copy=False)


def leaky_relu(features: Any, alpha: float = 0.2, name: str | None = None) -> Tensor:
    """``x`` for ``x > 0``, else ``alpha * x``, as ``tf.nn.leaky_relu``.

    Integer ``features`` are cast to float32 first (as TF). A tensor ``alpha`` gives
    ``maximum(alpha * x, x)`` (as TF). The gradient at 0 is ``alpha``.

    Raises:
        TypeError: a bool or string tensor.
    """
    with name_scope(name, "LeakyRelu", [features]) as scope:
        t = convert_to_tensor(features)
        if t.dtype.is_integer:
            t = cast(t, _dtypes.float32)
        if not t.dtype.is_floating:
            raise CkptsyncTypeError(f"LeakyRelu: expected a real tensor, got {t.dtype.name}.")
        if isinstance(alpha, Tensor) or hasattr(alpha, "_as_graph_element"):
            return maximum(multiply(convert_to_tensor(alpha, dtype=t.dtype), t), t, name=scope)
        return single("LeakyRelu", [t], t.dtype, t.shape, name=scope,
                      attrs={"alpha": float(alpha)})


# --------------------------------------------------------------------- softplus / softsign
def _softplus_np(x: np.ndarray) -> np.ndarray:
    # log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|)).
    return (np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))).astype(x.dtype, copy=False)


def _sigmoid_np(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


register("Softplus", grad=lambda op, g: [_grad_op("SoftplusGrad", g, op.inputs[0])])(
    _softplus_np)


@register("SoftplusGrad", grad=_grad_of_softplus_grad)
def _softplus_grad_kernel(g: np.ndarray, x: np.ndarray) -> np.ndarray:
    return g * _sigmoid_np(x)


@register("Softsign", grad=lambda op, g: [_grad_op("SoftsignGrad", g, op.inputs[0])])
def _softsign_kernel(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.abs(x))


@register("SoftsignGrad")
def _softsign_grad_kernel(g: np.ndarray, x: np.ndarray) -> np.ndarray:
    return g / np.square(1 + np.abs(x))


def softplus(features: Any, name: str | None = None) -> Tensor:
    """``log(exp(x) + 1)``, computed without overflow, as ``tf.nn.softplus`` (float dtypes).

    Raises:
        TypeError: a non-float tensor.
    """
    return unary("Softplus", features, name, float_only=True)


def softsign(features: Any, name: str | None = None) -> Tensor:
    """``x / (|x| + 1)``, as ``tf.nn.softsign`` (float dtypes).

    Raises:
        TypeError: a non-float tensor.
    """
    return unary("Softsign", features, name, float_only=True)


def swish(features: Any, beta: Any = 1.0) -> Tensor:
    """``x * sigmoid(beta * x)``, as ``tf.nn.swish`` (float dtypes; ``beta`` may be a tensor).

    TF wraps the product in a custom gradient (its output is an ``IdentityN`` op); here it
    is an ordinary ``Mul`` whose gradient has the same values, ``beta``'s included.

    Raises:
        TypeError: a non-float tensor.
    """
    t = convert_to_tensor(features)
    if not t.dtype.is_floating:
        raise CkptsyncTypeError(f"swish: expected a floating-point tensor, got {t.dtype.name}.")
    b = convert_to_tensor(beta, dtype=t.dtype, name="beta")
    return multiply(t, sigmoid(multiply(b, t)))


def log_sigmoid(x: Any, name: str | None = None) -> Tensor:
    """``log(1 / (1 + exp(-x)))`` as ``-softplus(-x)``, as ``tf.math.log_sigmoid``.

    Float dtypes; the output op is ``LogSigmoid`` (a ``Neg``), as TF names it.

    Raises:
        TypeError: a non-float tensor.
    """
    with name_scope(name, "LogSigmoid", [x]) as scope:
        t = convert_to_tensor(x)
        if not t.dtype.is_floating:
            raise CkptsyncTypeError(f"LogSigmoid: expected a floating-point tensor, got "
                                    f"{t.dtype.name}.")
        return negative(softplus(negative(t)), name=scope)


# --------------------------------------------------------------------- l2_loss
@register("L2Loss", grad=lambda op, g: [multiply(op.inputs[0], g)])
def _l2_loss_kernel(x: np.ndarray) -> np.ndarray:
    flat = x.reshape(-1)
    return np.asarray(np.dot(flat, flat) / 2, dtype=x.dtype)


def l2_loss(t: Any, name: str | None = None) -> Tensor:
    """``sum(t ** 2) / 2``, a scalar of ``t``'s dtype, as ``tf.nn.l2_loss`` (float dtypes).

    Raises:
        TypeError: a non-float tensor.
    """
    x = convert_to_tensor(t)
    if not x.dtype.is_floating:
        raise CkptsyncTypeError(f"L2Loss: expected a floating-point tensor, got {x.dtype.name}.")
    return single("L2Loss", [x], x.dtype, [], name=name)


# --------------------------------------------------------------------- xw_plus_b
def xw_plus_b(x: Any, weights: Any, biases: Any, name: str | None = None) -> Tensor:
    """``matmul(x, weights) + biases``: ``x [batch, in]``, ``weights [in, out]``,
    ``biases [out]`` -> ``[batch, out]``, as ``tf.nn.xw_plus_b`` (a ``MatMul`` and a
    ``BiasAdd`` named ``xw_plus_b``).

    Raises:
        ValueError: shapes that do not fit (from ``matmul`` / ``bias_add``).
        TypeError: mixed dtypes.
    """
    with name_scope(name, "xw_plus_b", [x, weights, biases]) as scope:
        x = convert_to_tensor(x)
        w = convert_to_tensor(weights, dtype=x.dtype)
        b = convert_to_tensor(biases, dtype=x.dtype)
        if w.shape.ndims is not None and w.shape.ndims != 2:
            raise CkptsyncValueError(f"xw_plus_b: weights must be 2-D, got shape {w.shape}.")
        return bias_add(matmul(x, w), b, name=scope)


def relu_layer(x: Any, weights: Any, biases: Any, name: str | None = None) -> Tensor:
    """``relu(matmul(x, weights) + biases)``, as ``tf.nn.relu_layer`` (the output op is
    ``relu_layer``): ``[batch, in]``, ``[in, out]``, ``[out]`` -> ``[batch, out]``.

    Raises:
        ValueError / TypeError: as :func:`xw_plus_b`.
    """
    with name_scope(name, "relu_layer", [x, weights, biases]) as scope:
        x = convert_to_tensor(x)
        w = convert_to_tensor(weights, dtype=x.dtype)
        b = convert_to_tensor(biases, dtype=x.dtype)
        return relu(bias_add(matmul(x, w), b), name=scope)


def crelu(features: Any, name: str | None = None, axis: int = -1) -> Tensor:
    """``relu(concat([x, -x], axis))``, as ``tf.nn.crelu``: ``axis`` doubles in size.

    Raises:
        ValueError: an axis out of range (from ``concat``).
    """
    with name_scope(name, "CRelu", [features]) as scope:
        t = convert_to_tensor(features, name="features")
        return relu(concat([t, negative(t)], axis, name=scope))


def zero_fraction(value: Any, name: str | None = None) -> Tensor:
    """The fraction of zeros in ``value``, a float32 scalar (NaN when empty), as
    ``tf.nn.zero_fraction`` (the output op is ``zero_fraction/fraction``)."""
    with name_scope(name, "zero_fraction", [value]):
        t = convert_to_tensor(value, name="value")
        zeros = cast(equal(t, zeros_like(t)), _dtypes.float32)
        return identity(reduce_mean(zeros), name="fraction")
