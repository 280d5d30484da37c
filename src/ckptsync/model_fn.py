"""What a ``model_fn`` returns: ``EstimatorSpec``, as TF1's ``tf.estimator.EstimatorSpec``;
and the export outputs it names (``PredictOutput``, ...), as TF's ``export_output``.

A ``model_fn(features, labels, mode, params)`` builds the graph for one ``mode``
(:class:`~ckptsync.model_spec.ModeKeys`) and returns an :class:`EstimatorSpec`. The
:mod:`ckptsync.estimator` package runs it as TF1's ``Estimator`` does; ``trainer run``
and ``infer serve`` accept a model file defining one (``ckptsync.model_spec``).

The checks and messages are TF 2.15's (``tensorflow_estimator/python/estimator/
model_fn.py``). This module sits in the runtime layer, below ``ckptsync.train``, so hooks
and scaffolds are checked by what they have (a ``SessionRunHook``'s methods, a
``Scaffold``'s ``finalize``) rather than by class.
"""

from __future__ import annotations

import collections
import functools
import inspect
from collections.abc import Mapping
from typing import Any

from .dtypes import string
from .errors import CkptsyncTypeError, CkptsyncValueError
from .graph import Operation, Tensor, get_default_graph
from .model_spec import ModeKeys
from .ops.array_ops import reshape
from .tensor_shape import TensorShape
from .variables import Variable

__all__ = ["EstimatorSpec", "ExportOutput", "PredictOutput", "ClassificationOutput",
           "RegressionOutput", "DEFAULT_SERVING_SIGNATURE_DEF_KEY", "MODE_NEEDS", "fn_args",
           "missing_for_mode"]

#: The signature a single export output is served under, as TF's ``signature_constants``.
DEFAULT_SERVING_SIGNATURE_DEF_KEY = "serving_default"

_HOOK_METHODS = ("begin", "after_create_session", "before_run", "after_run", "end")

_DEFAULT_GRAPH_ERROR = (
    '{0} with "{1}" must be from the default graph. Possible causes of this error include: '
    "\n\n1) {0} was created outside the context of the default graph.\n\n2) The object "
    'passed through to EstimatorSpec was not created in the most recent call to "model_fn".')


class EstimatorSpec(collections.namedtuple("EstimatorSpec", [
        "mode", "predictions", "loss", "train_op", "eval_metric_ops", "export_outputs",
        "training_chief_hooks", "training_hooks", "scaffold", "evaluation_hooks",
        "prediction_hooks"])):
    """The ops and objects a ``model_fn`` returns, as TF1's ``tf.estimator.EstimatorSpec``.

    Attributes:
        mode: a :class:`ModeKeys` value (not checked, as TF: the Estimator checks that
            the spec has what the mode it called ``model_fn`` in needs).
        predictions: a Tensor or a dict of name -> Tensor (required in PREDICT; ``{}``
            when not given), e.g. ``{"classes": [batch] int64, "probabilities": [batch,
            10] float32}``.
        loss: a scalar float Tensor (required in TRAIN and EVAL); one of shape ``[1]`` is
            reshaped to ``[]``, as TF.
        train_op: the Operation (or Tensor; a Variable becomes its op) that runs one
            training step (required in TRAIN).
        eval_metric_ops: dict of name -> ``(value_tensor, update_op)``, as ``tf.metrics``
            returns (``{}`` when not given).
        export_outputs: dict of signature name -> :class:`ExportOutput`; in PREDICT a
            missing one is ``{"serving_default": PredictOutput(predictions)}`` and a lone
            entry is also served as ``"serving_default"``, as TF.
        training_chief_hooks, training_hooks, evaluation_hooks, prediction_hooks: tuples
            of ``SessionRunHook`` run in that mode.
        scaffold: a ``tf.train.Scaffold`` or None (the Estimator then makes a default one;
            TF makes it here).

    Raises (on construction, TF's messages):
        ValueError: "Missing train_op." / "Missing loss." / "Missing
            predictions." where the mode needs it; "Loss must be scalar, given: ..."; a
            tensor from another graph than the default one; several export outputs and
            none named ``serving_default``.
        TypeError: ``train_op`` not an Operation or Tensor, ``loss`` / a prediction not a
            Tensor, ``eval_metric_ops`` not a dict of 2-tuples, a hook that is not a
            ``SessionRunHook``, a ``scaffold`` that is not a ``Scaffold``, export outputs
            that are not ``ExportOutput``.
    """

    def __new__(cls, mode: str, predictions: Any = None, loss: Tensor | None = None,
                train_op: Operation | Tensor | None = None,
                eval_metric_ops: Mapping[str, Any] | None = None,
                export_outputs: Mapping[str, Any] | None = None,
                training_chief_hooks: Any = None, training_hooks: Any = None,
                scaffold: Any = None, evaluation_hooks: Any = None,
                prediction_hooks: Any = None) -> EstimatorSpec:
        train_op = _validate_train_op(train_op, mode)
        loss = _validate_loss(loss, mode)
        predictions = _validate_predictions(predictions, mode)
        if mode == ModeKeys.PREDICT:
            export_outputs = _get_export_outputs(export_outputs, predictions)
        return super().__new__(
            cls, mode, predictions, loss, train_op, _validate_eval_metric_ops(eval_metric_ops),
            export_outputs, _validate_hooks(training_chief_hooks), _validate_hooks(training_hooks),
            _validate_scaffold(scaffold), _validate_hooks(evaluation_hooks),
            _validate_hooks(prediction_hooks))

    def _replace(self, **kwds: Any) -> EstimatorSpec:
        """A new spec with the given fields replaced (validated again), as TF.

        Raises:
            ValueError: a different ``mode`` ("mode of EstimatorSpec cannot be changed.").
        """
        if "mode" in kwds and self.mode != kwds["mode"]:
            raise CkptsyncValueError("mode of EstimatorSpec cannot be changed.")
        return EstimatorSpec(*[kwds.pop(f, v) for f, v in zip(self._fields, self)])


def _check_same_graph(x: Any, what: str, name: str) -> None:
    if x.graph is not get_default_graph():
        raise CkptsyncValueError(_DEFAULT_GRAPH_ERROR.format(what, name))


def _check_is_tensor(x: Any, name: str) -> Tensor:
    if isinstance(x, Variable):
        x = x._as_graph_element()
    if not isinstance(x, Tensor):
        raise CkptsyncTypeError(f"{name} must be Tensor, given: {x}")
    return x


def _validate_train_op(train_op: Any, mode: str) -> Any:
    if train_op is None:
        if mode == ModeKeys.TRAIN:
            raise CkptsyncValueError("Missing train_op.")
        return None
    if isinstance(train_op, Variable):
        train_op = train_op.op
    if not isinstance(train_op, (Operation, Tensor)):
        raise CkptsyncTypeError(f"train_op must be Operation or Tensor, given: {train_op}")
    _check_same_graph(train_op, "train_op", train_op.name)
    return train_op


def _validate_loss(loss: Any, mode: str) -> Tensor | None:
    if loss is None:
        if mode in (ModeKeys.TRAIN, ModeKeys.EVAL):
            raise CkptsyncValueError("Missing loss.")
        return None
    loss = _check_is_tensor(loss, "loss")
    shape = loss.get_shape()
    if shape.num_elements() not in (None, 1):
        raise CkptsyncValueError(f"Loss must be scalar, given: {loss}")
    _check_same_graph(loss, "loss", loss.name)
    if not shape.is_compatible_with(TensorShape([])):
        loss = reshape(loss, [])
    return loss


def _validate_predictions(predictions: Any, mode: str) -> Any:
    if predictions is None:
        if mode == ModeKeys.PREDICT:
            raise CkptsyncValueError("Missing predictions.")
        return {}
    if isinstance(predictions, dict):
        predictions = {k: _check_is_tensor(v, f"predictions[{k}]") for k, v in predictions.items()}
        for k, v in predictions.items():
            _check_same_graph(v, "prediction values", f"{k}: {v.name}")
        return predictions
    predictions = _check_is_tensor(predictions, "predictions")
    _check_same_graph(predictions, "prediction values", predictions.name)
    return predictions


def _validate_hooks(hooks: Any) -> tuple[Any, ...]:
    hooks = tuple(hooks or [])
    for hook in hooks:
        if not all(callable(getattr(hook, m, None)) for m in _HOOK_METHODS) or isinstance(hook, type):
            raise CkptsyncTypeError(f"All hooks must be SessionRunHook instances, given: {hook}")
    return hooks


def _validate_scaffold(scaffold: Any) -> Any:
    if scaffold is not None and not (callable(getattr(scaffold, "finalize", None))
                                     and hasattr(scaffold, "saver")):
        raise CkptsyncTypeError(f"scaffold must be tf.train.Scaffold. Given: {scaffold}")
    return scaffold


def _validate_eval_metric_ops(eval_metric_ops: Any) -> dict[str, Any]:
    if eval_metric_ops is None:
        return {}
    if not isinstance(eval_metric_ops, dict):
        raise CkptsyncTypeError(f"eval_metric_ops must be a dict, given: {eval_metric_ops}")
    for key, value in eval_metric_ops.items():
        if not isinstance(value, tuple) or len(value) != 2:
            raise CkptsyncTypeError(
                "Values of eval_metric_ops must be (metric_value, update_op) tuples, given: "
                f"{value} for key: {key}")
    for key, value in eval_metric_ops.items():
        for val in value:
            graph = getattr(val, "graph", None)
            if graph is not None and graph is not get_default_graph():
                raise CkptsyncValueError(_DEFAULT_GRAPH_ERROR.format(
                    "eval_metric_ops", f"{key}: {getattr(val, 'name', val)}"))
    return eval_metric_ops


def _get_export_outputs(export_outputs: Any, predictions: Any) -> dict[str, ExportOutput]:
    if export_outputs is None:
        export_outputs = {DEFAULT_SERVING_SIGNATURE_DEF_KEY: PredictOutput(predictions)}
    if not isinstance(export_outputs, dict):
        raise CkptsyncTypeError(f"`export_outputs` must be dict, received: {export_outputs}.")
    for v in export_outputs.values():
        if not isinstance(v, ExportOutput):
            raise CkptsyncTypeError(
                f"Values in `export_outputs` must be ExportOutput objects, received: "
                f"{export_outputs}.")
    if len(export_outputs) == 1:
        ((key, value),) = export_outputs.items()
        if key != DEFAULT_SERVING_SIGNATURE_DEF_KEY:
            export_outputs[DEFAULT_SERVING_SIGNATURE_DEF_KEY] = value
    if len(export_outputs) > 1 and DEFAULT_SERVING_SIGNATURE_DEF_KEY not in export_outputs:
        raise CkptsyncValueError(
            "Multiple `export_outputs` were provided, but none of them are specified as the "
            "default. Use`tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY` to specify a "
            "default.")
    return export_outputs


#: What the EstimatorSpec of each mode must hold, as TF's Estimator requires.
MODE_NEEDS: dict[str, tuple[str, ...]] = {
    ModeKeys.TRAIN: ("loss", "train_op"), ModeKeys.EVAL: ("loss",),
    ModeKeys.PREDICT: ("predictions",)}


def fn_args(fn: Any) -> tuple[str, ...]:
    """The argument names of ``fn``, as TF's ``function_utils.fn_args``: through
    ``functools.partial`` (less the arguments it binds) and a callable object's
    ``__call__`` (less ``self``); ``*args``/``**kwargs`` are not names.

    Raises:
        TypeError, ValueError: ``fn`` has no signature ``inspect`` can read (a builtin).
    """
    if isinstance(fn, functools.partial):
        bound = set(fn.keywords or {})
        return tuple(a for a in fn_args(fn.func)[len(fn.args):] if a not in bound)
    params = inspect.signature(fn).parameters.values()  # a bound method's less self
    return tuple(p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))


def missing_for_mode(spec: Any, mode: str) -> list[str]:
    """The fields of ``MODE_NEEDS[mode]`` that ``spec`` lacks (None, or empty
    ``predictions``), e.g. ``["train_op"]`` for an EVAL spec used in TRAIN."""
    return [f for f in MODE_NEEDS[mode] if getattr(spec, f) is None
            or (f == "predictions" and isinstance(spec.predictions, Mapping)
                and not spec.predictions)]


# ------------------------------------------------------------------ export outputs
class ExportOutput:
    """Base of what ``EstimatorSpec.export_outputs`` maps signature names to, as TF's
    ``tf.estimator.export.ExportOutput``."""

    _SEPARATOR_CHAR = "/"

    def _check_output_key(self, key: Any, error_label: str) -> str:
        if isinstance(key, tuple):
            key = self._SEPARATOR_CHAR.join(key)
        if not isinstance(key, str):
            raise CkptsyncValueError(f"{error_label} output key must be a string; got {key}.")
        return key

    def _wrap_and_check_outputs(self, outputs: Any, single_output_default_name: str,
                                error_label: str | None = None) -> dict[str, Tensor]:
        if not isinstance(outputs, dict):
            outputs = {single_output_default_name: outputs}
        output_dict = {}
        for key, value in outputs.items():
            error_name = error_label or single_output_default_name
            key = self._check_output_key(key, error_name)
            if not isinstance(value, Tensor):
                raise CkptsyncValueError(
                    f"{error_name} output value must be a Tensor; got {value}.")
            output_dict[key] = value
        return output_dict


class PredictOutput(ExportOutput):
    """A generic prediction head's outputs: ``outputs`` is a dict of name -> Tensor (a
    lone Tensor becomes ``{"output": tensor}``), as TF's ``PredictOutput``.

    Raises:
        ValueError: a key that is not a string or a value that is not a Tensor.
    """

    _SINGLE_OUTPUT_DEFAULT_NAME = "output"

    def __init__(self, outputs: Any):
        self._outputs = self._wrap_and_check_outputs(
            outputs, self._SINGLE_OUTPUT_DEFAULT_NAME, error_label="Prediction")

    @property
    def outputs(self) -> dict[str, Tensor]:
        return self._outputs


class ClassificationOutput(ExportOutput):
    """A classification head's ``scores`` (float Tensor) and/or ``classes`` (string
    Tensor), as TF's ``ClassificationOutput``.

    Raises:
        ValueError: neither given, or one of the wrong dtype (TF's messages).
    """

    def __init__(self, scores: Tensor | None = None, classes: Tensor | None = None):
        if scores is not None and not (isinstance(scores, Tensor) and scores.dtype.is_floating):
            raise CkptsyncValueError(
                f"Classification scores must be a float32 Tensor; got {scores}")
        if classes is not None and not (isinstance(classes, Tensor) and classes.dtype == string):
            raise CkptsyncValueError(
                f"Classification classes must be a string Tensor; got {classes}")
        if scores is None and classes is None:
            raise CkptsyncValueError(
                "Cannot create a ClassificationOutput with empty arguments. At least one of "
                "`scores` and `classes` must be defined.")
        self._scores, self._classes = scores, classes

    @property
    def scores(self) -> Tensor | None:
        return self._scores

    @property
    def classes(self) -> Tensor | None:
        return self._classes


class RegressionOutput(ExportOutput):
    """A regression head's ``value`` (float Tensor), as TF's ``RegressionOutput``.

    Raises:
        ValueError: ``value`` is not a float Tensor.
    """

    def __init__(self, value: Tensor):
        if not (isinstance(value, Tensor) and value.dtype.is_floating):
            raise CkptsyncValueError(
                f"Regression output value must be a float32 Tensor; got {value}")
        self._value = value

    @property
    def value(self) -> Tensor:
        return self._value
