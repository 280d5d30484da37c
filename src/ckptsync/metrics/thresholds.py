"""Metrics at given thresholds: ``precision_at_thresholds``, ``recall_at_thresholds`` and
``true_positives/false_positives/false_negatives/true_negatives_at_thresholds``, as TF1's
``tf.metrics``: predictions (float probabilities ``[batch]``) above each threshold count
as positive; each value is a float32 ``[len(thresholds)]``, over local variables
``<name>/true_positives`` etc. (see :mod:`ckptsync.metrics.auc`).
"""

from __future__ import annotations

from typing import Any

from ..graph import Tensor
from ..ops.array_ops import identity
from ..ops.math_ops import add, divide
from ..variable_scope import variable_scope
from .auc import confusion_at_thresholds
from .means import collect

__all__ = ["false_negatives_at_thresholds", "false_positives_at_thresholds",
           "precision_at_thresholds", "recall_at_thresholds", "true_negatives_at_thresholds",
           "true_positives_at_thresholds"]

_EPSILON = 1e-7


def _ratio_metric(default: str, other: str, prefix: str):  # type: ignore[no-untyped-def]
    def metric(labels: Any, predictions: Any, thresholds: Any, weights: Any = None,
               metrics_collections: Any = None, updates_collections: Any = None,
               name: str | None = None) -> tuple[Tensor, Tensor]:
        with variable_scope(name, default, [predictions, labels, weights]):
            values, updates = confusion_at_thresholds(labels, predictions, list(thresholds),
                                                      weights, includes=("tp", other))

            def ratio(c: dict[str, Tensor], tag: str) -> Tensor:
                return divide(c["tp"], add(add(_EPSILON, c["tp"]), c[other]),
                              name=f"{prefix}_{tag}")
            value = ratio(values, "value")
            collect(metrics_collections, value)
            update_op = ratio(updates, "update_op")
            collect(updates_collections, update_op)
            return value, update_op
    metric.__name__ = metric.__qualname__ = default
    metric.__doc__ = (f"``tp / (1e-7 + tp + {other})`` at each threshold over every batch, "
                      f"as ``tf.metrics.{default}``: ``(value, update_op)``, float32 "
                      "``[len(thresholds)]``.")
    return metric


precision_at_thresholds = _ratio_metric("precision_at_thresholds", "fp", "precision")
recall_at_thresholds = _ratio_metric("recall_at_thresholds", "fn", "recall")


def _count_metric(fn_name: str, scope: str, key: str):  # type: ignore[no-untyped-def]
    def metric(labels: Any, predictions: Any, thresholds: Any, weights: Any = None,
               metrics_collections: Any = None, updates_collections: Any = None,
               name: str | None = None) -> tuple[Tensor, Tensor]:
        with variable_scope(name, scope, [predictions, labels, weights]):
            values, updates = confusion_at_thresholds(labels, predictions, list(thresholds),
                                                      weights, includes=(key,))
            value = identity(values[key])
            collect(metrics_collections, value)
            collect(updates_collections, updates[key])
            return value, updates[key]
    metric.__name__ = metric.__qualname__ = fn_name
    metric.__doc__ = (f"The weighted count of {scope.replace('_', ' ')} at each threshold "
                      f"over every batch, as ``tf.metrics.{fn_name}``: ``(value, "
                      "update_op)``, float32 ``[len(thresholds)]``.")
    return metric


true_positives_at_thresholds = _count_metric("true_positives_at_thresholds",
                                             "true_positives", "tp")
false_positives_at_thresholds = _count_metric("false_positives_at_thresholds",
                                              "false_positives", "fp")
false_negatives_at_thresholds = _count_metric("false_negatives_at_thresholds",
                                              "false_negatives", "fn")
true_negatives_at_thresholds = _count_metric("true_negatives_at_thresholds",
                                             "true_negatives", "tn")
