"""Streaming counts and the ratios built on them: ``true_positives``,
``false_positives``, ``false_negatives``, ``true_negatives``, ``precision`` and ``recall``,
as TF1's ``tf.metrics`` (bool predictions/labels; other dtypes are cast to bool).

Each count is one local variable ``<name>/count`` (float32); ``precision`` holds
``precision/true_positives/count`` and ``precision/false_positives/count``. Values and
update ops are as in :mod:`ckptsync.metrics.means` (a run reads variables as at its
start).
"""

from __future__ import annotations

from typing import Any

from .. import dtypes as _dtypes
from ..errors import CkptsyncValueError
from ..graph import Tensor
from ..ops.array_ops import identity, zeros_like
from ..ops.elementwise_ops import logical_and, logical_not
from ..ops.math_ops import add, cast, divide, greater, multiply, reduce_sum
from ..ops.selection_ops import where
from ..ops.state_ops import assign_add
from ..variable_scope import variable_scope
from .means import collect, metric_variable, prepare

__all__ = ["false_negatives", "false_positives", "precision", "recall", "true_negatives",
           "true_positives"]


def _count_condition(values: Tensor, weights: Any, metrics_collections: Any,
                     updates_collections: Any) -> tuple[Tensor, Tensor]:
    if values.dtype != _dtypes.bool:
        raise CkptsyncValueError(f"_count_condition: values must be bool, got {values.dtype}.")
    count = metric_variable([], _dtypes.float32, name="count")
    values = cast(values, _dtypes.float32)
    if weights is not None:
        wr, vr = weights.get_shape().ndims, values.get_shape().ndims
        if wr is not None and vr is not None and wr not in (0, vr):
            raise CkptsyncValueError(f"weights of rank {wr} for values of rank {vr}: "
                                     "expected rank 0 or the values' rank.")
        values = multiply(values, cast(weights, _dtypes.float32))
    value = identity(count)
    collect(metrics_collections, value)
    update_op = assign_add(count, reduce_sum(values))
    collect(updates_collections, update_op)
    return value, update_op


def _bools(labels: Any, predictions: Any, weights: Any) -> tuple[Tensor, Tensor, Any]:
    p, lb, w = prepare(cast(predictions, _dtypes.bool), cast(labels, _dtypes.bool), weights)
    assert lb is not None
    return lb, p, w


def _counter(default: str, want_label: bool, want_pred: bool):  # type: ignore[no-untyped-def]
    def metric(labels: Any, predictions: Any, weights: Any = None,
               metrics_collections: Any = None, updates_collections: Any = None,
               name: str | None = None) -> tuple[Tensor, Tensor]:
        with variable_scope(name, default, [predictions, labels, weights]):
            lb, p, w = _bools(labels, predictions, weights)
            cond = logical_and(lb if want_label else logical_not(lb),
                               p if want_pred else logical_not(p))
            return _count_condition(cond, w, metrics_collections, updates_collections)
    metric.__name__ = metric.__qualname__ = default
    metric.__doc__ = (f"The weighted count of {default.replace('_', ' ')} over every batch "
                      f"(labels {'true' if want_label else 'false'}, predictions "
                      f"{'true' if want_pred else 'false'}; both cast to bool), as "
                      f"``tf.metrics.{default}``: ``(value, update_op)``, float32 scalars.")
    return metric


true_positives = _counter("true_positives", True, True)
false_positives = _counter("false_positives", False, True)
false_negatives = _counter("false_negatives", True, False)
true_negatives = _counter("true_negatives", False, False)


def _ratio(tp: Tensor, other: Tensor, name: str) -> Tensor:
    denom = add(tp, other)
    return where(greater(denom, 0.0), divide(tp, denom), zeros_like(tp), name=name)


def _ratio_pair(tp: tuple[Tensor, Tensor], other: tuple[Tensor, Tensor],
                metrics_collections: Any, updates_collections: Any) -> tuple[Tensor, Tensor]:
    """``(value, update_op)``: ``tp / (tp + other)`` of two counters' (value, update)
    pairs (0 where the sum is 0), each added to its collections."""
    value = _ratio(tp[0], other[0], "value")
    collect(metrics_collections, value)
    update_op = _ratio(tp[1], other[1], "update_op")
    collect(updates_collections, update_op)
    return value, update_op


def precision(labels: Any, predictions: Any, weights: Any = None,
              metrics_collections: Any = None, updates_collections: Any = None,
              name: str | None = None) -> tuple[Tensor, Tensor]:
    """``tp / (tp + fp)`` over every batch (0 while nothing is predicted true), bool
    ``labels`` and ``predictions`` of one shape, as ``tf.metrics.precision``."""
    with variable_scope(name, "precision", [predictions, labels, weights]):
        lb, p, w = _bools(labels, predictions, weights)
        tp = true_positives(lb, p, w)
        return _ratio_pair(tp, false_positives(lb, p, w),
                           metrics_collections, updates_collections)


def recall(labels: Any, predictions: Any, weights: Any = None,
           metrics_collections: Any = None, updates_collections: Any = None,
           name: str | None = None) -> tuple[Tensor, Tensor]:
    """``tp / (tp + fn)`` over every batch (0 while no label is true), as
    ``tf.metrics.recall``."""
    with variable_scope(name, "recall", [predictions, labels, weights]):
        lb, p, w = _bools(labels, predictions, weights)
        tp = true_positives(lb, p, w)
        return _ratio_pair(tp, false_negatives(lb, p, w),
                           metrics_collections, updates_collections)
