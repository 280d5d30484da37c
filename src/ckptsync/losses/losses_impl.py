"""The loss functions of ``tf.losses``, as TF1's ``losses_impl``.

Each computes elementwise losses under its own name scope (``mean_squared_error``,
``softmax_cross_entropy_loss``, ...), in float32 (inputs are cast, as TF), and hands them
to :func:`~ckptsync.losses.reduction.compute_weighted_loss` with ``weights`` (a scalar,
``[batch]`` where the losses are ``[batch]``, or a tensor of the losses' rank whose dims
are 1 or theirs) and ``reduction`` (default ``SUM_BY_NONZERO_WEIGHTS``); the result is
added to ``loss_collection`` (``GraphKeys.LOSSES``). Gradients are those of the ops they
are built from, so they are TF's.

Example:
    >>> import ckptsync as cs
    >>> with cs.Graph().as_default():
    ...     loss = cs.losses.mean_squared_error([[1.0], [2.0]], [[1.5], [2.0]])
    ...     print(loss.op.name, float(cs.Session().run(loss)))
    mean_squared_error/value 0.125
"""

from __future__ import annotations

from typing import Any

from .. import dtypes as _dtypes
from ..errors import CkptsyncValueError
from ..graph import GraphKeys, Tensor, name_scope
from ..ops.array_ops import convert_to_tensor, ones_like, shape, stop_gradient
from ..ops.elementwise_ops import squared_difference
from ..ops.math_ops import abs, add, cast, log, minimum, multiply, negative, reduce_sum, subtract
from ..ops.nn_losses import sigmoid_cross_entropy_with_logits
from ..ops.nn_ops import (
    relu,
    softmax_cross_entropy_with_logits_v2,
    sparse_softmax_cross_entropy_with_logits,
)
from .reduction import Reduction, compute_weighted_loss
from .weights_broadcast import match_weights_rank, remove_squeezable_dimensions

__all__ = ["absolute_difference", "cosine_distance", "hinge_loss", "huber_loss", "log_loss",
           "mean_squared_error", "sigmoid_cross_entropy", "softmax_cross_entropy",
           "sparse_softmax_cross_entropy"]

_SUM_NZ = Reduction.SUM_BY_NONZERO_WEIGHTS
_LOSSES = GraphKeys.LOSSES


def _required(fn: str, **args: Any) -> None:
    for k, v in args.items():
        if v is None:
            raise CkptsyncValueError(f"{fn}: argument `{k}` must not be None.")


def _pair(fn: str, labels: Any, predictions: Any) -> tuple[Tensor, Tensor]:
    """Both cast to float32, their static shapes checked compatible (``ValueError``)."""
    p = cast(predictions, _dtypes.float32)
    lb = cast(labels, _dtypes.float32)
    if not p.get_shape().is_compatible_with(lb.get_shape()):
        raise CkptsyncValueError(f"{fn}: predictions {p.get_shape()} and labels "
                                 f"{lb.get_shape()} must have compatible shapes.")
    return lb, p


def absolute_difference(labels: Any, predictions: Any, weights: Any = 1.0,
                        scope: str | None = None, loss_collection: str | None = _LOSSES,
                        reduction: str = _SUM_NZ) -> Tensor:
    """``|predictions - labels|`` (any matching shapes, e.g. ``[batch, d]``), weighted and
    reduced, as ``tf.losses.absolute_difference``. Raises ``ValueError`` on None or
    incompatible shapes."""
    _required("absolute_difference", labels=labels, predictions=predictions)
    with name_scope(scope, "absolute_difference", [predictions, labels, weights]) as sc:
        lb, p = _pair("absolute_difference", labels, predictions)
        return compute_weighted_loss(abs(subtract(p, lb)), weights, sc, loss_collection,
                                     reduction=reduction)


def mean_squared_error(labels: Any, predictions: Any, weights: Any = 1.0,
                       scope: str | None = None, loss_collection: str | None = _LOSSES,
                       reduction: str = _SUM_NZ) -> Tensor:
    """``(predictions - labels)^2`` (``SquaredDifference``), weighted and reduced, as
    ``tf.losses.mean_squared_error``. Raises ``ValueError`` on None or incompatible
    shapes."""
    _required("mean_squared_error", labels=labels, predictions=predictions)
    with name_scope(scope, "mean_squared_error", [predictions, labels, weights]) as sc:
        lb, p = _pair("mean_squared_error", labels, predictions)
        return compute_weighted_loss(squared_difference(p, lb), weights, sc,
                                     loss_collection, reduction=reduction)


def huber_loss(labels: Any, predictions: Any, weights: Any = 1.0, delta: float = 1.0,
               scope: str | None = None, loss_collection: str | None = _LOSSES,
               reduction: str = _SUM_NZ) -> Tensor:
    """``0.5 * x^2`` for ``|x| <= delta``, ``0.5 * delta^2 + delta * (|x| - delta)``
    beyond, ``x = predictions - labels``, as ``tf.losses.huber_loss``."""
    _required("huber_loss", labels=labels, predictions=predictions)
    with name_scope(scope, "huber_loss", [predictions, labels, weights]) as sc:
        lb, p = _pair("huber_loss", labels, predictions)
        abs_error = abs(subtract(p, lb))
        quadratic = minimum(abs_error, delta)
        linear = subtract(abs_error, quadratic)
        losses = add(multiply(convert_to_tensor(0.5, dtype=quadratic.dtype),
                              multiply(quadratic, quadratic)), multiply(delta, linear))
        return compute_weighted_loss(losses, weights, sc, loss_collection,
                                     reduction=reduction)


def log_loss(labels: Any, predictions: Any, weights: Any = 1.0, epsilon: float = 1e-7,
             scope: str | None = None, loss_collection: str | None = _LOSSES,
             reduction: str = _SUM_NZ) -> Tensor:
    """``-y log(p + eps) - (1 - y) log(1 - p + eps)`` for probabilities ``p`` in [0, 1],
    as ``tf.losses.log_loss``."""
    _required("log_loss", labels=labels, predictions=predictions)
    with name_scope(scope, "log_loss", [predictions, labels, weights]) as sc:
        lb, p = _pair("log_loss", labels, predictions)
        losses = subtract(negative(multiply(lb, log(add(p, epsilon)))),
                          multiply(subtract(1.0, lb), log(add(subtract(1.0, p), epsilon))))
        return compute_weighted_loss(losses, weights, sc, loss_collection,
                                     reduction=reduction)


def hinge_loss(labels: Any, logits: Any, weights: Any = 1.0, scope: str | None = None,
               loss_collection: str | None = _LOSSES, reduction: str = _SUM_NZ) -> Tensor:
    """``max(0, 1 - (2 y - 1) * logits)`` for labels ``y`` in {0, 1}, as
    ``tf.losses.hinge_loss``."""
    _required("hinge_loss", labels=labels, logits=logits)
    with name_scope(scope, "hinge_loss", [logits, labels, weights]) as sc:
        lb, lg = _pair("hinge_loss", labels, logits)
        all_ones = ones_like(lb)
        signed = subtract(multiply(2.0, lb), all_ones)
        losses = relu(subtract(all_ones, multiply(signed, lg)))
        return compute_weighted_loss(losses, weights, sc, loss_collection,
                                     reduction=reduction)


def cosine_distance(labels: Any, predictions: Any, axis: int | None = None,
                    weights: Any = 1.0, scope: str | None = None,
                    loss_collection: str | None = _LOSSES, reduction: str = _SUM_NZ,
                    dim: int | None = None) -> Tensor:
    """``1 - sum(labels * predictions, axis, keepdims=True)`` for unit-normalised inputs,
    as ``tf.losses.cosine_distance`` (``dim``: TF1's deprecated spelling of ``axis``).

    Raises:
        ValueError: no ``axis``, both ``axis`` and ``dim``, None inputs or shapes that
            differ.
    """
    if axis is not None and dim is not None:
        raise CkptsyncValueError("Cannot specify both 'axis' and 'dim'")
    axis = dim if axis is None else axis
    if axis is None:
        raise CkptsyncValueError("You must specify argument `axis`.")
    _required("cosine_distance", labels=labels, predictions=predictions)
    with name_scope(scope, "cosine_distance_loss", [predictions, labels, weights]) as sc:
        lb, p = _pair("cosine_distance", labels, predictions)
        losses = subtract(1.0, reduce_sum(multiply(p, lb), axis=(axis,), keepdims=True))
        return compute_weighted_loss(losses, weights, sc, loss_collection,
                                     reduction=reduction)


def sigmoid_cross_entropy(multi_class_labels: Any, logits: Any, weights: Any = 1.0,
                          label_smoothing: float = 0, scope: str | None = None,
                          loss_collection: str | None = _LOSSES,
                          reduction: str = _SUM_NZ) -> Tensor:
    """``tf.nn.sigmoid_cross_entropy_with_logits`` (op ``xentropy``) of labels
    ``[batch, classes]`` in [0, 1] (smoothed toward 0.5 by ``label_smoothing``), weighted
    and reduced, as ``tf.losses.sigmoid_cross_entropy``. The loss keeps ``logits``' dtype."""
    _required("sigmoid_cross_entropy", multi_class_labels=multi_class_labels, logits=logits)
    with name_scope(scope, "sigmoid_cross_entropy_loss",
                    [logits, multi_class_labels, weights]) as sc:
        lg = convert_to_tensor(logits)
        lb = cast(multi_class_labels, lg.dtype)
        if not lg.get_shape().is_compatible_with(lb.get_shape()):
            raise CkptsyncValueError(f"sigmoid_cross_entropy: logits {lg.get_shape()} and "
                                     f"multi_class_labels {lb.get_shape()} differ.")
        if label_smoothing > 0:
            lb = add(multiply(lb, 1 - label_smoothing), 0.5 * label_smoothing)
        losses = sigmoid_cross_entropy_with_logits(labels=lb, logits=lg, name="xentropy")
        return compute_weighted_loss(losses, weights, sc, loss_collection,
                                     reduction=reduction)


def softmax_cross_entropy(onehot_labels: Any, logits: Any, weights: Any = 1.0,
                          label_smoothing: float = 0, scope: str | None = None,
                          loss_collection: str | None = _LOSSES,
                          reduction: str = _SUM_NZ) -> Tensor:
    """``tf.nn.softmax_cross_entropy_with_logits_v2`` (op ``xentropy``) of one-hot labels
    and logits ``[batch, classes]`` (the loss is ``[batch]`` before reduction; labels get
    no gradient), with ``label_smoothing`` (labels ``* (1 - s) + s / classes``), as
    ``tf.losses.softmax_cross_entropy``. The loss keeps ``logits``' dtype."""
    _required("softmax_cross_entropy", onehot_labels=onehot_labels, logits=logits)
    with name_scope(scope, "softmax_cross_entropy_loss",
                    [logits, onehot_labels, weights]) as sc:
        lg = convert_to_tensor(logits)
        lb = cast(onehot_labels, lg.dtype)
        if not lg.get_shape().is_compatible_with(lb.get_shape()):
            raise CkptsyncValueError(f"softmax_cross_entropy: logits {lg.get_shape()} and "
                                     f"onehot_labels {lb.get_shape()} differ.")
        if label_smoothing > 0:
            num_classes = cast(shape(lb)[-1], lg.dtype)
            lb = add(multiply(lb, 1.0 - label_smoothing), label_smoothing / num_classes)
        lb = stop_gradient(lb, name="labels_stop_gradient")
        losses = softmax_cross_entropy_with_logits_v2(labels=lb, logits=lg, name="xentropy")
        return compute_weighted_loss(losses, weights, sc, loss_collection,
                                     reduction=reduction)


def sparse_softmax_cross_entropy(labels: Any, logits: Any, weights: Any = 1.0,
                                 scope: str | None = None,
                                 loss_collection: str | None = _LOSSES,
                                 reduction: str = _SUM_NZ) -> Tensor:
    """``tf.nn.sparse_softmax_cross_entropy_with_logits`` (op ``xentropy``) of int class
    ids ``[batch]`` (or ``[batch, 1]``, squeezed) and logits ``[batch, classes]``, weighted
    (``[batch]`` or ``[batch, 1]``) and reduced, as ``tf.losses.sparse_softmax_cross_entropy``.
    """
    _required("sparse_softmax_cross_entropy", labels=labels, logits=logits)
    with name_scope(scope, "sparse_softmax_cross_entropy_loss",
                    [logits, labels, weights]) as sc:
        lb, lg = remove_squeezable_dimensions(labels, logits, expected_rank_diff=1)
        w = convert_to_tensor(weights)
        wr, lr = w.get_shape().ndims, lb.get_shape().ndims
        if wr is not None and lr is not None and wr - lr == 1:  # [batch, 1] weights
            w = match_weights_rank(w, lb)
        losses = sparse_softmax_cross_entropy_with_logits(labels=lb, logits=lg,
                                                          name="xentropy")
        return compute_weighted_loss(losses, w, sc, loss_collection, reduction=reduction)
