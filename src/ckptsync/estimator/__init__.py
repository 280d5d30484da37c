"""``cs.estimator``: TF1's ``tf.estimator`` over ckptsync's monitored sessions, as TF
2.15's ``tensorflow_estimator``.

``Estimator`` (train / evaluate / predict a ``model_fn``), ``RunConfig``,
``EstimatorSpec`` and ``ModeKeys`` (what a ``model_fn`` returns and is called for),
``train_and_evaluate`` with ``TrainSpec``/``EvalSpec`` (local, or a trainer and an
``evaluator`` task following its checkpoints), ``WarmStartSettings``, and ``export``
(serving input receivers, export outputs) and ``inputs.numpy_input_fn``. See ``docs/estimator.md``.

Example:
    >>> import ckptsync as tf
    >>> def model_fn(features, labels, mode):
    ...     w = tf.get_variable("w", [1], initializer=tf.zeros_initializer())
    ...     loss = tf.reduce_mean(tf.square(features * w - labels))
    ...     step = tf.train.get_global_step()
    ...     train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    ...     return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
    >>> est = tf.estimator.Estimator(model_fn, config=tf.estimator.RunConfig(
    ...     log_step_count_steps=1000))  # doctest: +SKIP
"""

from typing import TYPE_CHECKING, Any

from ..model_fn import EstimatorSpec  # noqa: F401
from ..model_spec import ModeKeys  # noqa: F401
from ..not_implemented import missing as _missing
from ..train import (  # noqa: F401 - TF 1.15's tf.estimator has the hooks too
    CheckpointSaverHook,
    CheckpointSaverListener,
    FeedFnHook,
    FinalOpsHook,
    GlobalStepWaiterHook,
    LoggingTensorHook,
    NanTensorHook,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
    StepCounterHook,
    StopAtStepHook,
    SummarySaverHook,
)
from . import (  # noqa: F401
    experimental,
    export,
    inputs,
)
from .estimator import Estimator, WarmStartSettings  # noqa: F401
from .run_config import RunConfig  # noqa: F401
from .training import EvalSpec, Exporter, TrainSpec, train_and_evaluate  # noqa: F401

__all__ = ["Estimator", "EstimatorSpec", "EvalSpec", "Exporter", "ModeKeys", "RunConfig",
           "TrainSpec", "WarmStartSettings", "export", "inputs", "train_and_evaluate",
           "CheckpointSaverHook", "CheckpointSaverListener", "FeedFnHook", "FinalOpsHook",
           "GlobalStepWaiterHook", "LoggingTensorHook", "NanTensorHook", "SessionRunArgs",
           "SessionRunContext", "SessionRunHook", "SessionRunValues", "StepCounterHook",
           "StopAtStepHook", "SummarySaverHook", "experimental"]


if not TYPE_CHECKING:  # (for type checkers the module has only the names above)
    def __getattr__(name: str) -> Any:
        """A TF1 name not implemented here: an AttributeError that says so."""
        raise _missing(__name__, name)
