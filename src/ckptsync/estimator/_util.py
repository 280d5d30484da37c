"""The Estimator's calls into user code and its small hooks, as TF 2.15's
``estimator.py`` / ``util.py`` / ``training/evaluation.py``: arguments passed by name,
``input_fn`` results parsed, ``model_fn`` results checked, eval counting, and the eval
dict written as a summary."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import summary as _summary
from ..data import Dataset, make_initializable_iterator
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..model_fn import EstimatorSpec, fn_args, missing_for_mode
from ..summary.writer import write_or_warn
from ..train import CheckpointSaverListener, SessionRunHook

log = logging.getLogger("ckptsync.estimator")

#: ``model_fn`` arguments the Estimator knows, as TF's ``_VALID_MODEL_FN_ARGS``.
VALID_MODEL_FN_ARGS = frozenset(["features", "labels", "mode", "params", "self", "config"])
LOSS_METRIC_KEY = "loss"


def describe(fn: Any) -> str:
    """How messages name a user function: its qualified name and file:line."""
    name = getattr(fn, "__qualname__", None) or repr(fn)
    code = getattr(getattr(fn, "func", fn), "__code__", None)
    return f"{name} ({code.co_filename}:{code.co_firstlineno})" if code else name


def call_with_note(fn: Callable[..., Any], what: str, **kwargs: Any) -> Any:
    """``fn(**kwargs)``; an exception it raises keeps its type (as TF, which lets it
    through) and gets a note (Python >= 3.11) naming ``what`` and the function."""
    try:
        return fn(**kwargs)
    except Exception as e:
        add_note = getattr(e, "add_note", None)
        if add_note is not None:
            add_note(f"(raised by the Estimator's {what} {describe(fn)})")
        raise


def call_input_fn(input_fn: Callable[..., Any], mode: str, params: Any, config: Any) -> Any:
    """``input_fn`` called with the ``mode``/``params``/``config`` it takes by name,
    as TF (which also places it on the CPU)."""
    if not callable(input_fn):
        raise CkptsyncTypeError(f"`input_fn` must be callable, given: {input_fn}")
    names = fn_args(input_fn)
    kwargs = {k: v for k, v in (("mode", mode), ("params", params), ("config", config))
              if k in names}
    return call_with_note(input_fn, "input_fn", **kwargs)


class DatasetInitializerHook(SessionRunHook):
    """Initializes the iterator of the ``tf.data.Dataset`` an ``input_fn`` returned, after
    each session creation (so every ``train``/``evaluate`` call starts the dataset from
    its beginning, as TF's ``_DatasetInitializerHook``)."""

    def __init__(self, iterator: Any):
        self._iterator = iterator

    def begin(self) -> None:
        self._initializer = self._iterator.initializer

    def after_create_session(self, session: Any, coord: Any) -> None:
        session.run(self._initializer)


def parse_input_fn_result(result: Any, input_fn: Any) -> tuple[Any, Any, list[SessionRunHook]]:
    """``(features, labels, input_hooks)`` from what ``input_fn`` returned, as TF's
    ``parse_input_fn_result``: a ``Dataset`` of ``(features, labels)`` or of features
    (read through an initializable iterator), a ``(features, labels)`` pair, or features.

    Raises:
        ValueError: a list or tuple whose length is not 2 (TF's message, then what came).
    """
    hooks: list[SessionRunHook] = []
    if isinstance(result, Dataset):
        iterator = make_initializable_iterator(result)
        hooks.append(DatasetInitializerHook(iterator))
        result = iterator.get_next()
    if isinstance(result, (list, tuple)):
        if len(result) != 2:
            raise CkptsyncValueError(
                "input_fn should return (features, labels) as a len 2 tuple. "
                f"{describe(input_fn)} returned a {type(result).__name__} of {len(result)}.")
        return result[0], result[1], hooks
    if result is None:
        raise CkptsyncValueError(
            f"input_fn {describe(input_fn)} returned None; expected a tf.data.Dataset of "
            "(features, labels), a (features, labels) tuple, or features.")
    return result, None, hooks


def verify_model_fn_args(model_fn: Any, params: Any) -> None:
    """As TF's ``verify_model_fn_args``.

    Raises:
        ValueError: no ``features`` argument, ``params`` given to a model_fn that takes
            none, or an argument the Estimator does not pass.
    """
    args = set(fn_args(model_fn))
    if "features" not in args:
        raise CkptsyncValueError(f"model_fn ({model_fn}) must include features argument.")
    if params is not None and "params" not in args:
        raise CkptsyncValueError(
            f"model_fn ({model_fn}) does not include params argument, but params ({params}) "
            "is passed to Estimator.")
    if params is None and "params" in args:
        log.warning("Estimator's model_fn (%s) includes params argument, but params are "
                    "not passed to Estimator.", model_fn)
    unexpected = list(args - VALID_MODEL_FN_ARGS)
    if unexpected:
        raise CkptsyncValueError(
            f"model_fn ({model_fn}) has following not expected args: {unexpected}")


def call_model_fn(model_fn: Any, features: Any, labels: Any, mode: str, params: Any,
                  config: Any) -> EstimatorSpec:
    """``model_fn`` called with what it takes by name, as TF's ``_call_model_fn``.

    Raises:
        ValueError: labels from input_fn for a model_fn without ``labels`` (TF's
            message); a result that is not an ``EstimatorSpec`` ("model_fn should return
            an EstimatorSpec.", then the function and what it returned); a spec missing
            what ``mode`` needs (a spec built for another mode).
    """
    names = fn_args(model_fn)
    kwargs: dict[str, Any] = {}
    if "labels" in names:
        kwargs["labels"] = labels
    elif labels is not None:
        raise CkptsyncValueError("model_fn does not take labels, but input_fn returns labels.")
    for key, value in (("mode", mode), ("params", params), ("config", config)):
        if key in names:
            kwargs[key] = value
    spec = call_with_note(model_fn, "model_fn", features=features, **kwargs)
    if not isinstance(spec, EstimatorSpec):
        raise CkptsyncValueError(
            f"model_fn should return an EstimatorSpec. {describe(model_fn)} returned "
            f"{type(spec).__name__}: {spec!r:.200}")
    missing = missing_for_mode(spec, mode)
    if missing:
        raise CkptsyncValueError(
            f"model_fn {describe(model_fn)} was called with mode={mode!r} and returned an "
            f"EstimatorSpec(mode={spec.mode!r}) without {' and '.join(missing)}, which "
            f"{mode!r} needs.")
    return spec


def check_hooks(hooks: Any) -> list[Any]:
    hooks = list(hooks or [])
    for h in hooks:
        if not isinstance(h, SessionRunHook):
            raise CkptsyncTypeError(f"Hooks must be a SessionRunHook, given: {h}")
    return hooks


def check_listeners(listeners: Any) -> list[Any]:
    listeners = list(listeners or [])
    for lst in listeners:
        if not isinstance(lst, CheckpointSaverListener):
            raise CkptsyncTypeError(
                f"saving_listeners must be a list of CheckpointSaverListener, given: {lst}")
    return listeners


class StopAfterNEvalsHook(SessionRunHook):
    """Stops an evaluation after ``num_evals`` runs (None: at the end of the input), as
    TF's ``_StopAfterNEvalsHook``; counted here rather than in an ``eval_step`` variable."""

    def __init__(self, num_evals: int | None):
        self._num_evals = num_evals
        self.evals_completed = 0

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.evals_completed += 1
        if self._num_evals is not None and self.evals_completed >= self._num_evals:
            run_context.request_stop()


def write_dict_to_summary(output_dir: str, dictionary: dict[str, Any], global_step: int,
                          checkpoint_path: str | None) -> None:
    """Writes an evaluation's numbers (each a scalar; ``global_step`` left out) and the
    checkpoint evaluated (tag ``checkpoint_path``, a string tensor) at ``global_step``
    to ``output_dir``'s cached writer (``tf.summary.FileWriterCache``: one event file
    per directory and process), as TF's ``_write_dict_to_summary`` and
    ``_write_checkpoint_path_to_summary``. A failed write is a warning (``write_or_warn``):
    the evaluation's result is returned all the same."""
    log.info("Saving dict for global step %d: %s", global_step, ", ".join(
        f"{k} = {v}" for k, v in sorted(dictionary.items()) if not isinstance(v, bytes)))
    writer = _summary.FileWriterCache.get(output_dir)
    proto = _summary.Summary()
    for key, value in dictionary.items():
        if value is None or key == "global_step":
            continue
        if isinstance(value, (float, np.floating, int, np.integer)) and not isinstance(value, bool):
            proto.value.add(tag=key, simple_value=float(value))
        elif isinstance(value, bytes):
            try:
                inner = _summary.Summary.FromString(value)
            except Exception:  # noqa: BLE001 - protobuf's DecodeError, as TF skips it
                log.warning("Skipping summary for %s, cannot parse string to Summary.", key)
                continue
            for i, v in enumerate(inner.value):
                v.tag = f"{key}/{i}"
            proto.value.extend(inner.value)
        else:
            log.warning("Skipping summary for %s, must be a float, np.float32, np.int64, "
                        "np.int32 or int or a serialized string of Summary.", key)
    write_or_warn(writer.add_summary, proto, global_step)
    if checkpoint_path:
        path_proto = _summary.Summary()
        value = path_proto.value.add(tag="checkpoint_path")
        value.tensor.dtype = 7  # DT_STRING, a scalar: TF's make_tensor_proto(path)
        value.tensor.tensor_shape.SetInParent()
        value.tensor.string_val.append(checkpoint_path.encode())
        write_or_warn(writer.add_summary, path_proto, global_step)
    write_or_warn(writer.flush)
