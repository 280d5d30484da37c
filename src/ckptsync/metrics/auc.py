"""``tf.metrics.auc``: the area under the ROC or PR curve, streamed over batches, from
confusion counts at ``num_thresholds`` thresholds, as TF1's ``metrics_impl.auc``.

The thresholds are TF's: ``-1e-7``, ``i / (num_thresholds - 1)`` for ``i`` in
``1 .. num_thresholds - 2`` and ``1 + 1e-7``. The local variables
``auc/true_positives``, ``auc/false_negatives``, ``auc/true_negatives`` and
``auc/false_positives`` (float32 ``[num_thresholds]``) count, per threshold, the
predictions above it. The area is a Riemann sum over the thresholds
(``summation_method``: ``trapezoidal``, TF's default, ``careful_interpolation``,
``minoring`` or ``majoring``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncValueError, InvalidArgumentError
from ..graph import Tensor
from ..losses.weights_broadcast import broadcast_weights
from ..ops.array_ops import constant, ones_like, reshape
from ..ops.const_fold import constant_value
from ..ops.elementwise_ops import div_no_nan, logical_and, logical_not
from ..ops.math_ops import (
    add,
    cast,
    divide,
    greater,
    log,
    maximum,
    minimum,
    multiply,
    reduce_sum,
    subtract,
)
from ..ops.selection_ops import where
from ..ops.state_ops import assign_add
from ..variable_scope import variable_scope
from .means import collect, metric_variable, prepare

__all__ = ["auc"]

_KEPSILON = 1e-7
_EPSILON = 1.0e-6
_METHODS = ("trapezoidal", "careful_interpolation", "minoring", "majoring")


def _check_range(predictions: Tensor) -> None:
    """TF checks ``0 <= predictions <= 1`` only where the values are known when the graph
    is built (its run-time assertion is not attached to float32 predictions): as here."""
    known = constant_value(predictions)
    if known is not None and known.size and not ((known >= 0) & (known <= 1)).all():
        raise InvalidArgumentError(None, None, "predictions must be in [0, 1]: "
                                   f"{predictions.name} = {known}")


def confusion_at_thresholds(labels: Any, predictions: Any, thresholds: list[float],
                            weights: Any = None,
                            includes: tuple[str, ...] = ("tp", "fn", "tn", "fp")
                            ) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Per-threshold ``tp``/``fn``/``tn``/``fp`` variables (those in ``includes``) and
    their update ops, as TF1's ``_confusion_matrix_at_thresholds`` (predictions
    ``> threshold`` count as positive; labels cast to bool; weights broadcast to the
    predictions).

    Raises:
        ValueError: a key of ``includes`` that is none of the four.
    """
    for key in includes:
        if key not in ("tp", "fn", "tn", "fp"):
            raise CkptsyncValueError(f"Invalid key: {key}")
    predictions, labels, weights = prepare(cast(predictions, _dtypes.float32),
                                           cast(labels, _dtypes.bool), weights)
    _check_range(predictions)
    n = len(thresholds)
    preds_row = reshape(predictions, [1, -1])  # [1, N]
    labels_row = reshape(labels, [1, -1])
    thresh_col = constant(np.asarray(thresholds, np.float32).reshape(n, 1))
    pred_is_pos = greater(preds_row, thresh_col)  # [n, N]
    pred_is_neg = logical_not(pred_is_pos)
    label_is_pos = logical_and(labels_row, greater(ones_like(thresh_col), 0.0))
    label_is_neg = logical_not(label_is_pos)
    w_row = None
    if weights is not None:
        w = broadcast_weights(cast(weights, _dtypes.float32), predictions)
        w_row = reshape(w, [1, -1])
    cases = {"tp": ("true_positives", label_is_pos, pred_is_pos),
             "fn": ("false_negatives", label_is_pos, pred_is_neg),
             "tn": ("true_negatives", label_is_neg, pred_is_neg),
             "fp": ("false_positives", label_is_neg, pred_is_pos)}
    values: dict[str, Tensor] = {}
    updates: dict[str, Tensor] = {}
    for key, (name, lab, pred) in cases.items():
        if key not in includes:
            continue
        var = metric_variable([n], _dtypes.float32, name=name)
        hit = cast(logical_and(lab, pred), _dtypes.float32)
        if w_row is not None:
            hit = multiply(hit, w_row)
        updates[key] = assign_add(var, reduce_sum(hit, 1))
        values[key] = var.value()
    return values, updates


def _interpolate_pr_auc(tp: Tensor, fp: Tensor, fn: Tensor, n: int) -> Tensor:
    dtp = subtract(tp[: n - 1], tp[1:])
    p = add(tp, fp)
    prec_slope = div_no_nan(dtp, maximum(subtract(p[: n - 1], p[1:]), 0.0), name="prec_slope")
    intercept = subtract(tp[1:], multiply(prec_slope, p[1:]))
    safe_p_ratio = where(logical_and(greater(p[: n - 1], 0.0), greater(p[1:], 0.0)),
                         div_no_nan(p[: n - 1], maximum(p[1:], 0.0),
                                    name="recall_relative_ratio"),
                         ones_like(p[1:]))
    return reduce_sum(div_no_nan(multiply(prec_slope, add(dtp, multiply(intercept,
                                                                         log(safe_p_ratio)))),
                                 maximum(add(tp[1:], fn[1:]), 0.0), name="pr_auc_increment"),
                      name="interpolate_pr_auc")


def _area(c: dict[str, Tensor], n: int, curve: str, method: str, name: str) -> Tensor:
    tp, fn, tn, fp = c["tp"], c["fn"], c["tn"], c["fp"]
    if curve == "PR" and method == "careful_interpolation":
        return _interpolate_pr_auc(tp, fp, fn, n)
    rec = divide(add(tp, _EPSILON), add(add(tp, fn), _EPSILON))
    if curve == "ROC":
        x, y = divide(fp, add(add(fp, tn), _EPSILON)), rec
    else:
        x, y = rec, divide(add(tp, _EPSILON), add(add(tp, fp), _EPSILON))
    dx = subtract(x[: n - 1], x[1:])
    y0, y1 = y[: n - 1], y[1:]
    if method == "minoring":
        height = minimum(y0, y1)
    elif method == "majoring":
        height = maximum(y0, y1)
    else:
        height = divide(add(y0, y1), 2.0)
    return reduce_sum(multiply(dx, height), name=name)


def auc(labels: Any, predictions: Any, weights: Any = None, num_thresholds: int = 200,
        metrics_collections: Any = None, updates_collections: Any = None,
        curve: str = "ROC", name: str | None = None,
        summation_method: str = "trapezoidal", thresholds: Any = None
        ) -> tuple[Tensor, Tensor]:
    """The streamed area under the ROC (``curve="ROC"``) or precision-recall (``"PR"``)
    curve, as ``tf.metrics.auc``.

    Args:
        labels: bool-like ``[batch]`` (or the predictions' shape).
        predictions: float probabilities in [0, 1], e.g. ``[batch]``.
        weights: None, a scalar, or broadcastable to ``predictions``.
        num_thresholds: how many thresholds (ignored where ``thresholds`` is given: its
            sorted values, plus the two end points).
        summation_method: ``trapezoidal`` (default), ``careful_interpolation``
            (PR only; ROC sums trapezoids), ``minoring`` or ``majoring``.

    Returns:
        ``(value, update_op)``, float32 scalars ``auc/value`` and ``auc/update_op``.

    Raises:
        ValueError: an unknown ``curve`` or ``summation_method``, shapes that differ.
    """
    with variable_scope(name, "auc", [labels, predictions, weights]):
        if curve not in ("ROC", "PR"):
            raise CkptsyncValueError(f"Curve must be either ROC or PR. Curve {curve} is "
                                     "unknown.")
        if summation_method not in _METHODS:
            raise CkptsyncValueError(f"Invalid summation_method: {summation_method} "
                                     f"summation_method should be one of {_METHODS}.")
        if thresholds is not None:
            inner = sorted(float(t) for t in thresholds)
            num_thresholds = len(inner) + 2
        else:
            inner = [(i + 1) * 1.0 / (num_thresholds - 1) for i in range(num_thresholds - 2)]
        ths = [0.0 - _KEPSILON] + inner + [1.0 + _KEPSILON]
        values, updates = confusion_at_thresholds(labels, predictions, ths, weights)
        value = _area(values, num_thresholds, curve, summation_method, "value")
        collect(metrics_collections, value)
        update_op = _area(updates, num_thresholds, curve, summation_method, "update_op")
        collect(updates_collections, update_op)
        return value, update_op
