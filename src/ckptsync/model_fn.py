"""What a ``model_fn`` returns: ``EstimatorSpec``, as TF1's ``tf.estimator.EstimatorSpec``.

A ``model_fn(features, labels, mode, params)`` builds the graph for one ``mode``
(:class:`~ckptsync.model_spec.ModeKeys`) and returns an :class:`EstimatorSpec`. The
:mod:`ckptsync.estimator` package runs it as TF1's ``Estimator`` does; ``trainer run``
and ``infer serve`` accept a model file defining one (``ckptsync.model_spec``).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

from .errors import CkptsyncTypeError, CkptsyncValueError
from .graph import Operation, Tensor
from .model_spec import ModeKeys

__all__ = ["EstimatorSpec"]

_MODES = (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT)


_SpecTuple = collections.namedtuple("_SpecTuple", [
    "mode", "predictions", "loss", "train_op", "eval_metric_ops", "export_outputs",
    "training_chief_hooks", "training_hooks", "scaffold", "evaluation_hooks",
    "prediction_hooks"])


class EstimatorSpec(_SpecTuple):
    """The ops and objects a ``model_fn`` returns, as TF1's ``tf.estimator.EstimatorSpec``.

    Attributes:
        mode: a :class:`ModeKeys` value.
        predictions: a Tensor or a dict of name -> Tensor (required in PREDICT), e.g.
            ``{"classes": [batch] int64, "probabilities": [batch, 10] float32}``.
        loss: a scalar float Tensor (required in TRAIN and EVAL).
        train_op: the Operation (or Tensor) that runs one training step (required in TRAIN).
        eval_metric_ops: dict of name -> ``(value_tensor, update_op)``, as ``tf.metrics``.
        export_outputs: dict of signature name -> export output (PREDICT), or None.
        training_chief_hooks, training_hooks, evaluation_hooks, prediction_hooks:
            ``SessionRunHook`` lists run in that mode.
        scaffold: a ``tf.train.Scaffold`` or None.

    Raises (on construction, as TF1):
        ValueError: an unknown ``mode``, or a missing ``loss`` / ``train_op`` /
            ``predictions`` that the mode needs, or a loss that is not a scalar.
        TypeError: a field of the wrong type.
    """

    def __new__(cls, mode: str, predictions: Any = None, loss: Tensor | None = None,
                train_op: Operation | Tensor | None = None,
                eval_metric_ops: Mapping[str, Any] | None = None,
                export_outputs: Mapping[str, Any] | None = None,
                training_chief_hooks: Any = None, training_hooks: Any = None,
                scaffold: Any = None, evaluation_hooks: Any = None,
                prediction_hooks: Any = None) -> EstimatorSpec:
        if mode not in _MODES:
            raise CkptsyncValueError(
                f"EstimatorSpec: mode must be one of {_MODES} (tf.estimator.ModeKeys), "
                f"got {mode!r}.")
        if train_op is None and mode == ModeKeys.TRAIN:
            raise CkptsyncValueError("EstimatorSpec: missing train_op (required in TRAIN mode).")
        if train_op is not None and not isinstance(train_op, (Operation, Tensor)):
            raise CkptsyncTypeError(
                f"EstimatorSpec: train_op must be an Operation or Tensor, given: {train_op!r}")
        if loss is None and mode in (ModeKeys.TRAIN, ModeKeys.EVAL):
            raise CkptsyncValueError(f"EstimatorSpec: missing loss (required in {mode} mode).")
        if loss is not None:
            if not isinstance(loss, Tensor):
                raise CkptsyncTypeError(f"EstimatorSpec: loss must be a Tensor, given: {loss!r}")
            dims = loss.shape.as_list() if loss.shape.ndims is not None else None
            if dims is not None and dims not in ([], [1]):
                raise CkptsyncValueError(
                    f"EstimatorSpec: loss must be scalar, given: {loss.name} of shape {dims}")
        if predictions is None and mode == ModeKeys.PREDICT:
            raise CkptsyncValueError("EstimatorSpec: missing predictions (required in PREDICT mode).")
        if isinstance(predictions, Mapping):
            for k, v in predictions.items():
                if not isinstance(v, Tensor):
                    raise CkptsyncTypeError(
                        f"EstimatorSpec: predictions[{k!r}] must be a Tensor, given: {v!r}")
        elif predictions is not None and not isinstance(predictions, Tensor):
            raise CkptsyncTypeError(
                f"EstimatorSpec: predictions must be a Tensor or dict of Tensors, given: "
                f"{predictions!r}")
        if eval_metric_ops is not None:
            if not isinstance(eval_metric_ops, Mapping):
                raise CkptsyncTypeError(
                    f"EstimatorSpec: eval_metric_ops must be a dict, given: {eval_metric_ops!r}")
            for k, v in eval_metric_ops.items():
                if not (isinstance(v, tuple) and len(v) == 2):
                    raise CkptsyncTypeError(
                        "EstimatorSpec: values of eval_metric_ops must be (metric_value, "
                        f"update_op) tuples, given: {v!r} for key: {k}")
        return super().__new__(
            cls, mode, predictions, loss, train_op, eval_metric_ops, export_outputs,
            tuple(training_chief_hooks or ()), tuple(training_hooks or ()), scaffold,
            tuple(evaluation_hooks or ()), tuple(prediction_hooks or ()))
