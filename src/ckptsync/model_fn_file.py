"""The second model-file contract: ``model_fn(features, labels, mode, params)``, TF1's
Estimator contract, turned into the ``build_net`` of :mod:`ckptsync.model_spec`.

A model file that defines ``model_fn`` (and no ``build_net``) is loaded by
:func:`ckptsync.model_spec.load_build_net` as a :class:`ModelFnNet`: a
``build_net(graph, device, mode) -> ModelSpec`` like any other, so ``trainer run``
(checkpoints, MPI, hooks) and ``infer serve`` run it unchanged. In each mode it does what
TF1's ``Estimator`` does before calling ``model_fn``: creates the global step, then

* **TRAIN / EVAL**: ``features`` is a dict of placeholders named and shaped after the
  training data's feature arrays (``{"x": [None, 64] float32}`` for ``--data digits``);
  with one feature array and a ``serving_input_receiver_fn``, in the structure that
  function gives (a lone Tensor, or a one-key dict under the receiver's name);
  ``labels`` one placeholder for a single label array (``[None] int64``), a dict for
  several. These are what the trainer feeds; an ``input_fn`` in the file is not used.
  The ``EstimatorSpec``'s ``loss`` and ``train_op`` become the ModelSpec's;
  ``predictions`` its outputs (``{"loss": loss}`` when there are none).
* **PREDICT**: the file's ``serving_input_receiver_fn()`` (as
  ``Estimator.export_saved_model`` takes) returns a
  ``tf.estimator.export.ServingInputReceiver(features, receiver_tensors)``; ``model_fn``
  gets its ``features``; the serving signature is ``receiver_tensors`` ->
  ``predictions`` (a single Tensor is served as ``"output"``, as TF's ``PredictOutput``;
  what ``export_outputs["serving_default"]`` names is served instead: a
  ``PredictOutput``'s outputs, a ``ClassificationOutput``'s ``classes``/``scores``, a
  ``RegressionOutput``'s ``outputs``); every other entry of ``export_outputs`` is served
  too, by its name (``{"signature_name": "pred", ...}``, as TF Serving).

``params`` is the file's module-level ``PARAMS`` dict if it has one, else ``{}`` (TF
passes ``Estimator(params=...)``); ``trainer run --learning-rate`` sets
``params["learning_rate"]``. ``model_fn``'s arguments are matched by name as TF's
``Estimator`` does: ``features`` is required; ``labels``, ``mode``, ``params`` and
``config`` are passed only to a function that names them (``config`` is None unless the
caller gives one).

A file defining both ``build_net`` and ``model_fn`` is run through ``build_net``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import dtypes as _dtypes
from .errors import CkptsyncError
from .graph import Graph, GraphKeys, Tensor
from .initializers import zeros_initializer
from .model_fn import MODE_NEEDS, EstimatorSpec, fn_args, missing_for_mode
from .model_spec import (
    MODEL_FN_SIGNATURE,
    ModeKeys,
    ModelFileError,
    ModelSpec,
    directory_on_path,
)
from .ops.array_ops import placeholder
from .variable_scope import get_variable

_log = logging.getLogger("ckptsync.model_fn_file")

__all__ = ["MODEL_FN_SIGNATURE", "SERVING_FN_SIGNATURE", "DataSignature", "ModelFnNet",
           "model_fn_net"]

SERVING_FN_SIGNATURE = ("serving_input_receiver_fn() -> "
                        "tf.estimator.export.ServingInputReceiver(features, receiver_tensors)")
#: The arguments TF1's Estimator passes by name (``_VALID_MODEL_FN_ARGS``, less ``self``).
VALID_ARGS = ("features", "labels", "mode", "params", "config")
_MODE_NAMES = {ModeKeys.TRAIN: "TRAIN", ModeKeys.EVAL: "EVAL", ModeKeys.PREDICT: "PREDICT"}


@dataclass(frozen=True)
class DataSignature:
    """What the training data gives ``model_fn`` in TRAIN and EVAL: name -> ``(dtype,
    row shape)`` of each feature and label array, e.g. ``features={"x": (float32, (64,))}``,
    ``labels={"y": (int64, ())}``; ``source`` names the data (``"digits"``) in messages."""

    features: Mapping[str, tuple[np.dtype[Any], tuple[int, ...]]]
    labels: Mapping[str, tuple[np.dtype[Any], tuple[int, ...]]]
    source: str

    @classmethod
    def of_arrays(cls, arrays: Mapping[str, np.ndarray], feature_names: tuple[str, ...],
                  label_names: tuple[str, ...], source: str) -> DataSignature:
        """From name -> array ``[rows, ...]`` (the training split)."""
        def sig(names: tuple[str, ...]) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
            return {n: (arrays[n].dtype, tuple(arrays[n].shape[1:])) for n in names}
        return cls(sig(feature_names), sig(label_names), source)

    def describe(self) -> str:
        """E.g. ``digits: features {'x': [None, 64] float32}, labels {'y': [None] int64}``."""
        def one(m: Mapping[str, tuple[np.dtype[Any], tuple[int, ...]]]) -> str:
            return "{" + ", ".join(f"{k!r}: {[None, *s]} {np.dtype(d).name}"
                                   for k, (d, s) in m.items()) + "}"
        return f"{self.source}: features {one(self.features)}, labels {one(self.labels)}"


class ModelFnNet:
    """``build_net(graph, device, mode) -> ModelSpec`` over a file's ``model_fn`` (see the
    module docstring). Built by :func:`model_fn_net`; called as every ``build_net``.

    Args (of a call):
        graph, device, mode: as ``build_net``.
        learning_rate: sets ``params["learning_rate"]`` (``trainer run --learning-rate``).
        data: a :class:`DataSignature`, required in TRAIN and EVAL (the trainer passes the
            one of its ``--data``); unused in PREDICT.
        config: what ``model_fn``'s ``config`` argument gets (None by default).

    Raises (from a call):
        ModelFileError: one line naming the file, the function and what was expected:
            ``model_fn`` raises, returns no ``EstimatorSpec`` or one without the mode's
            ``loss``/``train_op``/``predictions``; PREDICT without a
            ``serving_input_receiver_fn`` or with one returning no ``ServingInputReceiver``;
            TRAIN/EVAL without ``data``.

    Thread-safety: a call builds into ``graph`` (as ``build_net`` does); do not call it
    concurrently on one graph.
    """

    def __init__(self, path: str, model_fn: Callable[..., Any], params: Mapping[str, Any],
                 serving_input_receiver_fn: Callable[[], Any] | None):
        self.path = path
        self.model_fn = model_fn
        self.params = dict(params)
        self.serving_input_receiver_fn = serving_input_receiver_fn
        self.args = fn_args(model_fn)

    def __repr__(self) -> str:
        return f"ModelFnNet({self.path!r})"

    def __call__(self, graph: Any, device: str, mode: str, learning_rate: float | None = None,
                 *, data: DataSignature | None = None, config: Any = None) -> ModelSpec:
        if mode not in _MODE_NAMES:
            raise ModelFileError(f"Model file {self.path}: unknown mode {mode!r}; expected one "
                                 f"of {sorted(_MODE_NAMES)} (tf.estimator.ModeKeys).")
        name = _MODE_NAMES[mode]
        params = dict(self.params)
        label_feeds: dict[str, Any] = {}
        if learning_rate is not None:
            if "params" not in self.args:
                raise ModelFileError(
                    f"--learning-rate was given but model_fn in {self.path} takes no params "
                    "argument (it would be params['learning_rate']); add `params` to its "
                    "arguments.")
            params["learning_rate"] = learning_rate
        with graph.as_default(), graph.device(device), directory_on_path(self.path):
            _get_or_create_global_step(graph)
            if mode == ModeKeys.PREDICT:
                receiver = self._receiver()
                inputs, features, labels = dict(receiver.receiver_tensors), receiver.features, None
                given = f"the features of serving_input_receiver_fn: {_describe(features)}"
            else:
                if data is None:
                    raise ModelFileError(
                        f"Model file {self.path}: model_fn in {name} mode needs the training "
                        "data's signature (trainer run passes it).")
                inputs = {k: placeholder(_dtypes.as_dtype(d), [None, *s], name=k)
                          for k, (d, s) in data.features.items()}
                label_feeds = {k: placeholder(_dtypes.as_dtype(d), [None, *s], name=k)
                               for k, (d, s) in data.labels.items()}
                features = self._shaped_as_served(inputs)
                labels = next(iter(label_feeds.values())) if len(label_feeds) == 1 \
                    else (label_feeds or None)
                given = f"the data {data.describe()}"
            spec = self._call(features, labels, mode, params, config, name, given)
        return self._model_spec(spec, mode, name, inputs,
                                None if mode == ModeKeys.PREDICT else label_feeds)

    def _shaped_as_served(self, inputs: dict[str, Any]) -> Any:
        """The training ``features`` in the structure ``serving_input_receiver_fn`` gives
        ``model_fn`` when the data has one feature array: a lone Tensor for a
        ``TensorServingInputReceiver`` (or a Tensor ``features``), or a one-key dict named as
        the receiver names it (``{"image": ...}`` fed from ``--data``'s ``x``). Otherwise,
        and without a receiver, a dict named after the data's arrays."""
        if self.serving_input_receiver_fn is None or len(inputs) != 1:
            return dict(inputs)
        with Graph().as_default():  # a scratch graph: only the structure is kept
            try:
                served = self._receiver().features
            except ModelFileError:
                return dict(inputs)
        (fed,) = inputs.values()
        if isinstance(served, Tensor):
            return fed
        if isinstance(served, Mapping) and len(served) == 1:
            return {next(iter(served)): fed}
        return dict(inputs)

    def _receiver(self) -> Any:
        fn = self.serving_input_receiver_fn
        if fn is None:
            raise ModelFileError(
                f"Model file {self.path} defines model_fn but no serving_input_receiver_fn; "
                f"infer serve needs {SERVING_FN_SIGNATURE}, e.g. serving_input_receiver_fn = "
                "tf.estimator.export.build_raw_serving_input_receiver_fn("
                "{'x': tf.placeholder(tf.float32, [None, 64])}).")
        try:
            receiver = fn()
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a user's function may raise anything
            raise ModelFileError(f"serving_input_receiver_fn in {self.path} failed: "
                                 f"{type(e).__name__}: {e}") from e
        if not (hasattr(receiver, "features") and hasattr(receiver, "receiver_tensors")):
            raise ModelFileError(
                f"serving_input_receiver_fn in {self.path} returned {_short(receiver)}; "
                f"expected {SERVING_FN_SIGNATURE}.")
        tensors = receiver.receiver_tensors
        if isinstance(tensors, Tensor):  # as TF's ServingInputReceiver wraps a sole tensor
            tensors = {"input": tensors}
        if not isinstance(tensors, Mapping) or not tensors \
                or not all(isinstance(t, Tensor) for t in tensors.values()):
            raise ModelFileError(
                f"serving_input_receiver_fn in {self.path} returned receiver_tensors "
                f"{_short(tensors)}; expected a dict of name -> Tensor ({SERVING_FN_SIGNATURE}).")
        return _Receiver(receiver.features, dict(tensors))

    def _call(self, features: Any, labels: Any, mode: str, params: dict[str, Any],
              config: Any, name: str, given: str) -> EstimatorSpec:
        kwargs: dict[str, Any] = {}
        if "labels" in self.args:
            kwargs["labels"] = labels
        elif labels is not None:
            raise ModelFileError(
                f"model_fn in {self.path} does not take labels, but the data has labels "
                f"({given}); expected {MODEL_FN_SIGNATURE}.")
        if "mode" in self.args:
            kwargs["mode"] = mode
        if "params" in self.args:
            kwargs["params"] = params
        if "config" in self.args:
            kwargs["config"] = config
        try:
            spec = self.model_fn(features=features, **kwargs)
        except ModelFileError:
            raise
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a user's model_fn may raise anything
            raise ModelFileError(
                f"model_fn in {self.path} failed in {name} mode: {type(e).__name__}: {e} "
                f"(given {given})") from e
        if not isinstance(spec, EstimatorSpec):
            raise ModelFileError(
                f"model_fn in {self.path} returned {_short(spec)} in {name} mode; expected a "
                f"tf.estimator.EstimatorSpec ({MODEL_FN_SIGNATURE}).")
        missing = missing_for_mode(spec, mode)
        if missing:
            raise ModelFileError(
                f"model_fn in {self.path} returned an EstimatorSpec without "
                f"{' and '.join(missing)} in {name} mode; expected EstimatorSpec(mode, "
                f"{', '.join(f'{n}=...' for n in MODE_NEEDS[mode])}).")
        return spec

    def _model_spec(self, spec: EstimatorSpec, mode: str, name: str, inputs: dict[str, Any],
                    labels: dict[str, Any] | None) -> ModelSpec:
        outputs = _outputs(spec, mode)
        if outputs is None:
            outputs = {"loss": spec.loss}
        extra = {"estimator_spec": spec, "model_fn_net": self}
        if mode == ModeKeys.PREDICT and spec.export_outputs:  # every one is served by name
            extra["signature_outputs"] = {name: _export_output_tensors(out) for name, out
                                          in spec.export_outputs.items()}
            for key, out in spec.export_outputs.items():
                if not hasattr(out, "outputs"):  # a ClassificationOutput, RegressionOutput
                    _log.warning(
                        'model_fn in %s: export_outputs["%s"] is a %s, which TF exports '
                        "only over one string input (serialized tf.Example; it leaves the "
                        "signature out otherwise, and ckptsync has no strings): served here "
                        "as a predict signature of its tensors, which TF Serving would not "
                        "serve", self.path, key, type(out).__name__)
        try:
            return ModelSpec(inputs=inputs, outputs=outputs, labels=labels, loss=spec.loss,
                             train_op=spec.train_op if mode == ModeKeys.TRAIN else None,
                             extra=extra)
        except CkptsyncError as e:
            raise ModelFileError(f"model_fn in {self.path} in {name} mode: {e}") from e


@dataclass(frozen=True)
class _Receiver:
    features: Any
    receiver_tensors: dict[str, Tensor]


def _outputs(spec: EstimatorSpec, mode: str) -> dict[str, Any] | None:
    """The served outputs: those of ``export_outputs["serving_default"]`` in PREDICT if
    given, else ``predictions`` (a single Tensor as ``"output"``, as TF's PredictOutput)."""
    if mode == ModeKeys.PREDICT and spec.export_outputs:
        outs = _export_output_tensors(spec.export_outputs.get("serving_default"))
        if outs:
            return outs
    if isinstance(spec.predictions, Tensor):
        return {"output": spec.predictions}
    return dict(spec.predictions) if spec.predictions else None  # TF keeps none as {}


def _export_output_tensors(out: Any) -> dict[str, Tensor]:
    """An export output's tensors by output key, as TF's signature_def names them: a
    ``PredictOutput``'s outputs, a ``ClassificationOutput``'s ``classes``/``scores``, a
    ``RegressionOutput``'s ``outputs``."""
    outs = getattr(out, "outputs", None)
    if not isinstance(outs, Mapping):  # ClassificationOutput, RegressionOutput
        outs = {k: getattr(out, a) for k, a in
                (("classes", "classes"), ("scores", "scores"), ("outputs", "value"))
                if isinstance(getattr(out, a, None), Tensor)}
    return dict(outs)


def _get_or_create_global_step(graph: Any) -> None:
    """The global step, created as ``tf.train.get_or_create_global_step`` does (TF1's
    Estimator creates it before calling ``model_fn`` in every mode). ``train/`` sits
    above this layer, so this is the few lines of ``training_util.create_global_step``."""
    if graph.get_collection(GraphKeys.GLOBAL_STEP):
        return
    with graph.name_scope(None):
        get_variable("global_step", shape=[], dtype=_dtypes.int64,
                     initializer=zeros_initializer(), trainable=False,
                     collections=[GraphKeys.GLOBAL_VARIABLES, GraphKeys.GLOBAL_STEP])


def _describe(x: Any) -> str:
    if isinstance(x, Tensor):
        return f"{x.get_shape()} {x.dtype.name}"
    if isinstance(x, Mapping):
        return "{" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in x.items()) + "}"
    return type(x).__name__


def _short(x: Any) -> str:
    text = repr(x)
    return f"{type(x).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


def model_fn_net(module: Any, path: str) -> ModelFnNet:
    """The :class:`ModelFnNet` of an imported model file defining ``model_fn``.

    Raises:
        ModelFileError: ``model_fn`` is not callable, takes no ``features`` or an argument
            TF's Estimator does not pass (as ``_verify_model_fn_args``); ``PARAMS`` is not a
            dict, or is given to a ``model_fn`` that takes no ``params``;
            ``serving_input_receiver_fn`` is defined but not callable.
    """
    p = os.fspath(path)
    fn = getattr(module, "model_fn", None)
    if not callable(fn):
        raise ModelFileError(f"Model file {p} defines no callable {MODEL_FN_SIGNATURE}.")
    try:
        args = fn_args(fn)
    except (TypeError, ValueError):  # a builtin or C callable: no signature to check
        raise ModelFileError(f"model_fn in {p} has no inspectable signature; expected "
                             f"{MODEL_FN_SIGNATURE}.") from None
    if "features" not in args:
        raise ModelFileError(f"model_fn in {p} takes ({', '.join(args)}): it must include a "
                             f"features argument ({MODEL_FN_SIGNATURE}).")
    unknown = [a for a in args if a not in VALID_ARGS]
    if unknown:
        raise ModelFileError(f"model_fn in {p} has arguments {unknown} that TF's Estimator "
                             f"does not pass; expected only {list(VALID_ARGS)}.")
    params = getattr(module, "PARAMS", None)
    if params is not None and not isinstance(params, Mapping):
        raise ModelFileError(f"PARAMS in model file {p} must be a dict (model_fn's params), "
                             f"got {type(params).__name__}.")
    if params and "params" not in args:
        raise ModelFileError(f"Model file {p} defines PARAMS but model_fn takes no params "
                             f"argument; add it ({MODEL_FN_SIGNATURE}).")
    serving = getattr(module, "serving_input_receiver_fn", None)
    if serving is not None and not callable(serving):
        raise ModelFileError(f"serving_input_receiver_fn in {p} must be a function "
                             f"({SERVING_FN_SIGNATURE}), got {type(serving).__name__}.")
    return ModelFnNet(p, fn, params or {}, serving)
