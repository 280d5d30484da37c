"""Neural-network ops (``cs.nn``): activations, softmax, bias_add and the cross-entropies.

Each kernel sits beside its gradient. Softmax-family ops work on the last axis.
The cross-entropy ops return a per-example loss ``[batch]``; as TF1, their gradient with
respect to the labels is ``None`` (sparse) and with respect to the logits is
``softmax(logits) - labels`` scaled by the incoming gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError, InvalidArgumentError
from ..graph import Tensor
from .array_ops import convert_to_tensor, stop_gradient, transpose
from .math_ops import exp, multiply, negative, reduce_sum, subtract, unary
from .registry import register, single

__all__ = [
    "relu", "sigmoid", "tanh", "softmax", "log_softmax", "bias_add",
    "sparse_softmax_cross_entropy_with_logits", "softmax_cross_entropy_with_logits",
    "softmax_cross_entropy_with_logits_v2",
]


def _float(op: str, t: Tensor) -> None:
    if not t.dtype.is_floating:
        raise CkptsyncTypeError(f"{op}: expected a floating-point tensor, got {t.dtype.name} for "
                                f"{t.name}.")


# --------------------------------------------------------------------- activations
@register("Relu", grad=lambda op, g: [single("ReluGrad", [g, op.outputs[0]], g.dtype, g.shape)])
def _relu_kernel(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), x.dtype))


@register("ReluGrad")
def _relu_grad_kernel(g: np.ndarray, y: np.ndarray) -> np.ndarray:
    return g * (y > 0)


@register("Sigmoid", grad=lambda op, g: [multiply(g, multiply(op.outputs[0],
                                                              subtract(1.0, op.outputs[0])))])
def _sigmoid_kernel(x: np.ndarray) -> np.ndarray:
    # Numerically stable for large |x|.
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    out[~pos] = e / (1.0 + e)
    return out


@register("Tanh", grad=lambda op, g: [multiply(g, subtract(1.0, multiply(op.outputs[0],
                                                                         op.outputs[0])))])
def _tanh_kernel(x: np.ndarray) -> np.ndarray:
    return np.tanh(x)


def relu(features: Any, name: str | None = None) -> Tensor:
    """``max(x, 0)``, as ``tf.nn.relu``; gradient 0 at 0."""
    return unary("Relu", features, name)


def sigmoid(x: Any, name: str | None = None) -> Tensor:
    """``1 / (1 + exp(-x))``, as ``tf.sigmoid``."""
    return unary("Sigmoid", x, name, float_only=True)


def tanh(x: Any, name: str | None = None) -> Tensor:
    """Hyperbolic tangent, as ``tf.tanh``."""
    return unary("Tanh", x, name, float_only=True)


# --------------------------------------------------------------------- softmax
def _softmax_np(x: np.ndarray) -> np.ndarray:
    e = x - x.max(axis=-1, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=-1, keepdims=True)
    return e


def _log_softmax_np(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _grad_softmax(op: Any, g: Tensor) -> list[Any]:
    y = op.outputs[0]
    return [multiply(subtract(g, reduce_sum(multiply(g, y), -1, keepdims=True)), y)]


def _grad_log_softmax(op: Any, g: Tensor) -> list[Any]:
    return [subtract(g, multiply(reduce_sum(g, -1, keepdims=True), exp(op.outputs[0])))]


register("Softmax", grad=_grad_softmax)(_softmax_np)
register("LogSoftmax", grad=_grad_log_softmax)(_log_softmax_np)


def _on_axis(op_type: str, logits: Any, axis: Any, dim: Any, name: str | None) -> Tensor:
    # As TF: another axis is swapped with the last one around the op.
    if axis is not None and dim is not None:
        raise CkptsyncValueError(f"{op_type}: cannot specify both 'axis' and 'dim'.")
    axis = dim if axis is None else axis
    t = convert_to_tensor(logits)
    rank = t.shape.ndims
    if axis is None or axis == -1 or (rank is not None and axis == rank - 1):
        return unary(op_type, t, name, float_only=True)
    if rank is None:
        raise CkptsyncValueError(f"{op_type}: axis={axis} needs logits of known rank.")
    if not -rank <= axis < rank:
        raise CkptsyncValueError(f"{op_type}: axis {axis} is out of range for logits of shape "
                                 f"{t.shape}.")
    perm = list(range(rank))
    perm[axis % rank], perm[-1] = perm[-1], perm[axis % rank]
    inner = unary(op_type, transpose(t, perm), None, float_only=True)
    return transpose(inner, perm, name=name or "transpose")


def softmax(logits: Any, axis: Any = None, name: str | None = None, dim: Any = None) -> Tensor:
    """``exp(x) / sum(exp(x), axis)`` (the last axis by default; ``dim`` is TF1's
    spelling), as ``tf.nn.softmax``; float dtypes, the shape of ``logits``.

    Raises:
        ValueError: both ``axis`` and ``dim``, or an axis out of range.
        TypeError: non-float logits.
    """
    return _on_axis("Softmax", logits, axis, dim, name)


def log_softmax(logits: Any, axis: Any = None, name: str | None = None,
                dim: Any = None) -> Tensor:
    """``x - log(sum(exp(x), axis))`` (the last axis by default), as
    ``tf.nn.log_softmax``; float dtypes, the shape of ``logits``.

    Raises:
        ValueError: both ``axis`` and ``dim``, or an axis out of range.
        TypeError: non-float logits.
    """
    return _on_axis("LogSoftmax", logits, axis, dim, name)


# --------------------------------------------------------------------- bias_add
@register("BiasAdd", grad=lambda op, g: [g, single("BiasAddGrad", [g], g.dtype,
                                                   op.inputs[1].shape)])
def _bias_add_kernel(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    return x + b


@register("BiasAddGrad", accepts_out=True)
def _bias_add_grad_kernel(g: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    if out is not None and (out.shape != g.shape[-1:] or out.dtype != g.dtype):
        out = None
    return g.reshape(-1, g.shape[-1]).sum(axis=0, out=out)


def bias_add(value: Any, bias: Any, data_format: str | None = None,
             name: str | None = None) -> Tensor:
    """``value + bias`` where ``bias`` is ``[C]`` and ``value`` is ``[..., C]``, as
    ``tf.nn.bias_add``; ``data_format="NCHW"`` (``NC...``) adds along axis 1 instead.

    Raises:
        ValueError: ``bias`` is not rank 1 or its size differs from the channel dim of
            ``value``; a ``data_format`` other than ``N...C`` / ``NC...``.
    """
    if data_format is not None and data_format.startswith("NC"):
        return _bias_add_nc(value, bias, name)
    if data_format is not None and not (data_format.startswith("N")
                                        and data_format.endswith("C")):
        raise CkptsyncValueError(f"BiasAdd: data_format must be NHWC or NCHW (or N...C / "
                                 f"NC...), got {data_format!r}.")
    x = convert_to_tensor(value)
    b = convert_to_tensor(bias, dtype=x.dtype)
    if b.shape.ndims is not None and b.shape.ndims != 1:
        raise CkptsyncValueError(f"BiasAdd: bias must be 1-D, got shape {b.shape}.")
    if x.shape.ndims is not None and x.shape.ndims < 2:
        raise CkptsyncValueError(f"BiasAdd: value must be at least 2-D, got shape {x.shape}.")
    last, n = (x.shape.dims or [None])[-1], (b.shape.dims or [None])[0]
    if last is not None and n is not None and last != n:
        raise CkptsyncValueError(
            f"BiasAdd: the last dimension of value {x.shape} must equal the size of bias {b.shape}.")
    return single("BiasAdd", [x, b], x.dtype, x.shape, name=name)


def _bias_add_nc(value: Any, bias: Any, name: str | None) -> Tensor:
    # NC...: the channels on axis 1, as [N, H, W, C] -> [N, C, H, W] around an NHWC add.
    x = convert_to_tensor(value)
    rank = x.shape.ndims
    if rank is None or rank < 2:
        raise CkptsyncValueError(f"BiasAdd: NCHW value must have a known rank >= 2, got shape "
                                 f"{x.shape}.")
    to_last = [0, *range(2, rank), 1]
    back = [0, rank - 1, *range(1, rank - 1)]
    return transpose(bias_add(transpose(x, to_last), bias), back, name=name or "BiasAdd")


# --------------------------------------------------------------------- cross-entropy
def _grad_xent(op: Any, g: Tensor, _g_backprop: Any = None) -> list[Any]:
    # d loss_i / d logits_i = backprop_i (= softmax(logits_i) - labels_i), scaled by g_i.
    backprop = op.outputs[1]
    grad_logits = single("XentGrad", [g, backprop], backprop.dtype, backprop.shape)
    if op.type == "SparseSoftmaxCrossEntropyWithLogits":
        return [grad_logits, None]
    log_p = single("LogSoftmax", [op.inputs[0]], op.inputs[0].dtype, op.inputs[0].shape)
    return [grad_logits, single("XentGrad", [g, negative(log_p)], backprop.dtype, backprop.shape)]


@register("XentGrad")
def _xent_grad_kernel(g: np.ndarray, backprop: np.ndarray) -> np.ndarray:
    return g[..., None] * backprop


@register("SparseSoftmaxCrossEntropyWithLogits", grad=_grad_xent)
def _sparse_xent_kernel(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n_classes = logits.shape[-1]
    if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
        bad = labels[(labels < 0) | (labels >= n_classes)].reshape(-1)[0]
        raise InvalidArgumentError(
            None, None, f"Received a label value of {bad} which is outside the valid range of "
            f"[0, {n_classes}).")
    logp = _log_softmax_np(logits)
    rows = np.arange(labels.size)
    flat = logp.reshape(-1, n_classes)
    loss = -flat[rows, labels.reshape(-1)].reshape(labels.shape)
    backprop = np.exp(logp)
    backprop.reshape(-1, n_classes)[rows, labels.reshape(-1)] -= 1
    return loss, backprop


@register("SoftmaxCrossEntropyWithLogits", grad=_grad_xent)
def _xent_kernel(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    logp = _log_softmax_np(logits)
    loss = -(labels * logp).sum(axis=-1)
    return loss, np.exp(logp) - labels


def sparse_softmax_cross_entropy_with_logits(_sentinel: Any = None, labels: Any = None,
                                             logits: Any = None, name: str | None = None
                                             ) -> Tensor:
    """Per-example cross-entropy of ``logits [batch, C]`` against int ``labels [batch]``.

    As ``tf.nn.sparse_softmax_cross_entropy_with_logits``; arguments must be named.

    Raises:
        ValueError: unnamed arguments, or shapes that do not fit (names both shapes).
        InvalidArgumentError: at run time, a label outside ``[0, C)``.
    """
    if _sentinel is not None:
        raise CkptsyncValueError("Only call `sparse_softmax_cross_entropy_with_logits` with named "
                                 "arguments (labels=..., logits=..., ...).")
    lg = convert_to_tensor(logits)
    lb = convert_to_tensor(labels)
    _float("SparseSoftmaxCrossEntropyWithLogits", lg)
    if not lb.dtype.is_integer:
        raise CkptsyncTypeError(f"labels must be int32 or int64, got {lb.dtype.name}.")
    ls, lbs = lg.shape, lb.shape
    if ls.ndims is not None and lbs.ndims is not None:
        if lbs.ndims != ls.ndims - 1 or not lbs.is_compatible_with(ls[:-1]):
            raise CkptsyncValueError(
                f"Shape mismatch: The shape of labels (received {lbs}) should equal the shape of "
                f"logits except for the last dimension (received {ls}).")
    return lg.graph.create_op("SparseSoftmaxCrossEntropyWithLogits", [lg, lb],
                              [lg.dtype, lg.dtype], [lbs, ls], name=name).outputs[0]


def _class_axis_last(op: str, axis: Any, lg: Tensor, lb: Tensor) -> tuple[Tensor, Tensor]:
    """``logits`` and ``labels`` with the class axis moved last (as TF's transpose)."""
    rank = lg.shape.ndims
    if axis is None or axis == -1 or (rank is not None and axis == rank - 1):
        return lg, lb
    if rank is None or not -rank <= axis < rank:
        raise CkptsyncValueError(f"{op}: class axis {axis} does not fit logits of shape "
                                 f"{lg.shape}.")
    perm = [i for i in range(rank) if i != axis % rank] + [axis % rank]
    return transpose(lg, perm), transpose(lb, perm)


def softmax_cross_entropy_with_logits_v2(labels: Any = None, logits: Any = None,
                                         axis: Any = None, name: str | None = None,
                                         dim: Any = None) -> Tensor:
    """Per-example cross-entropy of ``logits [batch, C]`` against distributions ``labels``
    (``[batch, C]``, the logits' dtype) -> ``[batch]``, as
    ``tf.nn.softmax_cross_entropy_with_logits_v2``: gradients flow into both. ``axis``
    (TF1's ``dim``) names the class axis, the last by default.

    Raises:
        ValueError: shapes that do not fit, or a class axis out of range.
        TypeError: non-float logits.
    """
    lg = convert_to_tensor(logits)
    lb = convert_to_tensor(labels, dtype=lg.dtype)
    _float("SoftmaxCrossEntropyWithLogits", lg)
    if not lg.shape.is_compatible_with(lb.shape):
        raise CkptsyncValueError(f"logits and labels must be broadcastable: logits_size={lg.shape} "
                                 f"labels_size={lb.shape}")
    lg, lb = _class_axis_last("softmax_cross_entropy_with_logits",
                              dim if axis is None else axis, lg, lb)
    out_shape = None if lg.shape.dims is None else lg.shape.dims[:-1]
    return lg.graph.create_op("SoftmaxCrossEntropyWithLogits", [lg, lb], [lg.dtype, lg.dtype],
                              [out_shape, lg.shape], name=name).outputs[0]


def softmax_cross_entropy_with_logits(_sentinel: Any = None, labels: Any = None,
                                      logits: Any = None, dim: Any = -1, name: str | None = None,
                                      axis: Any = None) -> Tensor:
    """Per-example cross-entropy of ``logits [batch, C]`` against distributions ``labels``
    -> ``[batch]``, as TF1's (v1) ``tf.nn.softmax_cross_entropy_with_logits``: the labels
    pass through ``stop_gradient`` (``labels_stop_gradient``), so no gradient flows into
    them (use ``softmax_cross_entropy_with_logits_v2`` for that). Arguments must be named.

    Raises:
        ValueError: positional arguments, shapes that do not fit, or a class axis out of
            range.
        TypeError: non-float logits.
    """
    if _sentinel is not None:
        raise CkptsyncValueError("Only call `softmax_cross_entropy_with_logits` with named "
                                 "arguments (labels=..., logits=..., ...).")
    if labels is None or logits is None:
        raise CkptsyncValueError("Both labels and logits must be provided.")
    lg = convert_to_tensor(logits)
    lb = stop_gradient(convert_to_tensor(labels, dtype=lg.dtype), name="labels_stop_gradient")
    return softmax_cross_entropy_with_logits_v2(labels=lb, logits=lg, axis=axis,
                                                name=name, dim=dim)


_ = _dtypes
