"""``cs.metrics``: TF1's ``tf.metrics`` (``tf.compat.v1.metrics``) on the runtime.

Every metric returns ``(value, update_op)`` over local variables (``GraphKeys.LOCAL_VARIABLES``
and ``METRIC_VARIABLES``, named as TF: ``accuracy/total``, ``auc/true_positives``, ...)
that ``local_variables_initializer()`` resets. Run ``update_op`` once per batch; ``value``
is then the metric over every batch since the reset.
"""

from .auc import auc  # noqa: F401
from .counts import (  # noqa: F401
    false_negatives,
    false_positives,
    precision,
    recall,
    true_negatives,
    true_positives,
)
from .means import (  # noqa: F401
    accuracy,
    mean,
    mean_absolute_error,
    mean_squared_error,
    metric_variable,
    root_mean_squared_error,
)
from .thresholds import (  # noqa: F401
    false_negatives_at_thresholds,
    false_positives_at_thresholds,
    precision_at_thresholds,
    recall_at_thresholds,
    true_negatives_at_thresholds,
    true_positives_at_thresholds,
)

__all__ = [
    "accuracy", "auc", "false_negatives", "false_positives", "mean", "mean_absolute_error",
    "mean_squared_error", "precision", "recall", "root_mean_squared_error", "true_negatives",
    "true_positives", "precision_at_thresholds", "recall_at_thresholds",
    "true_positives_at_thresholds", "false_positives_at_thresholds",
    "false_negatives_at_thresholds", "true_negatives_at_thresholds",
]
