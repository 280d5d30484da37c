"""Logistic losses: ``sigmoid_cross_entropy_with_logits`` and
``weighted_cross_entropy_with_logits``, as TF1's tf.nn.

Both are elementwise (the loss has the shape of ``logits``, nothing is reduced), built
from elementwise ops under TF's name scope ``logistic_loss`` (the output op is
``logistic_loss``) with TF's numerically stable forms, so their gradients, into the
labels too, are TF's, also at ``logits == 0``.
"""

from __future__ import annotations

from typing import Any

from ..errors import CkptsyncValueError
from ..graph import Tensor, name_scope
from .array_ops import convert_to_tensor, zeros_like
from .elementwise_ops import log1p
from .math_ops import abs, add, exp, greater_equal, multiply, negative, subtract
from .nn_ops import _float, relu
from .selection_ops import where

__all__: list[str] = []
NN_EXPORTS: tuple[str, ...] = ("sigmoid_cross_entropy_with_logits",
                               "weighted_cross_entropy_with_logits")


def _is_tensor(v: Any) -> bool:
    return isinstance(v, Tensor) or hasattr(v, "_as_graph_element")


def _logits_labels(op: str, logits: Any, labels: Any) -> tuple[Tensor, Tensor]:
    lg = convert_to_tensor(logits, name="logits")
    _float(op, lg)
    lb = convert_to_tensor(labels, dtype=None if _is_tensor(labels) else lg.dtype, name="labels")
    if not lb.shape.is_compatible_with(lg.shape):
        raise CkptsyncValueError(f"`logits` and `labels` must have the same shape, received "
                                 f"({lg.shape} vs {lb.shape}).")
    return lg, lb


def sigmoid_cross_entropy_with_logits(labels: Any = None, logits: Any = None,
                                      name: str | None = None) -> Tensor:
    """Elementwise ``-z * log(sigmoid(x)) - (1 - z) * log(1 - sigmoid(x))`` for ``labels``
    ``z`` and ``logits`` ``x`` of one shape (``[batch, classes]``), as
    ``tf.nn.sigmoid_cross_entropy_with_logits``: computed as
    ``max(x, 0) - x * z + log(1 + exp(-|x|))``.

    Raises:
        ValueError: a missing ``labels``/``logits``, or shapes that differ.
        TypeError: non-float logits, or labels of another dtype.
    """
    if labels is None or logits is None:
        raise CkptsyncValueError("Both labels and logits must be provided.")
    with name_scope(name, "logistic_loss", [logits, labels]) as scope:
        x, z = _logits_labels("logistic_loss", logits, labels)
        zeros = zeros_like(x)
        cond = greater_equal(x, zeros)
        relu_logits = where(cond, x, zeros)
        neg_abs_logits = where(cond, negative(x), x)
        return add(subtract(relu_logits, multiply(x, z)), log1p(exp(neg_abs_logits)),
                   name=scope)


def weighted_cross_entropy_with_logits(labels: Any = None, logits: Any = None,
                                       pos_weight: Any = None, name: str | None = None,
                                       targets: Any = None) -> Tensor:
    """The sigmoid cross-entropy with the positive term weighted by ``pos_weight``, as
    ``tf.nn.weighted_cross_entropy_with_logits`` (TF1's: ``targets`` is the deprecated
    spelling of ``labels``): ``(1 - z) * x + (1 + (pos_weight - 1) * z) *
    (log(1 + exp(-|x|)) + max(-x, 0))``, elementwise, the shape of ``logits``.

    Raises:
        ValueError: both ``labels`` and ``targets``, a missing argument, or shapes that
            differ.
        TypeError: non-float logits, or labels of another dtype.
    """
    if labels is not None and targets is not None:
        raise CkptsyncValueError("Cannot specify both 'labels' and 'targets'.")
    labels = targets if labels is None else labels
    if labels is None or logits is None or pos_weight is None:
        raise CkptsyncValueError("weighted_cross_entropy_with_logits: labels, logits and "
                                 "pos_weight must be provided.")
    with name_scope(name, "logistic_loss", [logits, labels]) as scope:
        x, z = _logits_labels("logistic_loss", logits, labels)
        if _is_tensor(pos_weight):
            log_weight = add(multiply(subtract(pos_weight, 1.0), z), 1.0)
        else:
            log_weight = add(multiply(float(pos_weight) - 1.0, z), 1.0)
        stable = add(log1p(exp(negative(abs(x)))), relu(negative(x)))
        return add(multiply(subtract(1.0, z), x), multiply(log_weight, stable), name=scope)
