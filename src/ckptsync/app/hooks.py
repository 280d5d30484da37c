"""The hooks and the Saver ``trainer run`` adds to TF1's monitored session.

* :class:`FiniteSaver`: a ``Saver`` that never publishes a NaN checkpoint.
* :class:`LoopHook`: fetches the loss, measures speed, evaluates, throttles, reports
  :class:`~.trainer.Progress` and stops on the stop event.
* :class:`PreflightHook`: runs the loss over the training set once before step 1.
* :func:`make_evaluator`: held-out loss (and accuracy for a classifier, AUC for a binary
  model) from a model spec.

Thread-safety: as every hook, these run in the training loop's thread; only the stop
event given to :class:`LoopHook` may be set from another thread.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import checkpoint as ckpt
from ..checkpoint.retention import checkpoint_base
from ..data import DataError, roc_auc
from ..errors import InvalidArgumentError
from ..ops.math_ops import argmax
from ..train.basic_hooks import CheckpointSaverHook, NanLossDuringTrainingError
from ..train.saver import Saver
from ..train.session_run_hook import (
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
)
from ..train.training_util import get_global_step
from .options import CheckpointWritten, Progress, TrainerOptions

__all__ = ["EVAL_BATCH", "Evaluation", "FiniteSaver", "LoopHook", "PreflightHook", "StepPace",
           "binary_output", "classes_output", "describe_checkpoint", "is_classifier",
           "make_evaluator", "nan_refusal"]

#: Rows per ``session.run`` when the whole training or test set is evaluated.
EVAL_BATCH = 4096


class FiniteSaver(Saver):
    """A Saver that refuses to publish non-finite parameters (never a NaN checkpoint):
    ``Saver(require_finite=True)``, its refusal raised as NanLossDuringTrainingError
    (with ``async_save`` the writer process checks, and the refusal surfaces at the next
    save or wait).

    With ``async_save``, the first save (at session creation) is waited for: training
    starts only once one checkpoint is durable and the writer process is up, so an
    unwritable directory stops the trainer before its first step.
    """

    _saved_once = False

    def __init__(self, **kw: Any):
        super().__init__(require_finite=True, **kw)

    def save(self, sess: Any, save_path: str, global_step: Any = None,  # type: ignore[override]
             **kw: Any) -> str | None:
        try:  # not ``with nan_refusal()``: this runs every few steps, keep it short
            prefix = super().save(sess, save_path, global_step, **kw)
        except InvalidArgumentError as e:
            raise NanLossDuringTrainingError(e.message) from e
        if not self._saved_once:
            self._saved_once = True
            self.wait_until_finished()
        return prefix

    def wait_until_finished(self, timeout_s: float | None = None) -> None:
        with nan_refusal():
            super().wait_until_finished(timeout_s)

    def poll_saves(self) -> int:
        with nan_refusal():
            return super().poll_saves()


@contextlib.contextmanager
def nan_refusal() -> Iterator[None]:
    """Raises a ``require_finite`` refusal as NanLossDuringTrainingError."""
    try:
        yield
    except InvalidArgumentError as e:
        raise NanLossDuringTrainingError(e.message) from e


class LoopHook(SessionRunHook):
    """Fetches the loss, measures speed, evaluates, throttles and reports progress.

    Args:
        opts: the run's options (``steps``, ``eval_every``, ``max_steps_per_s``).
        loss: the scalar loss tensor fetched each step.
        evaluate: ``evaluate(session)`` -> :class:`Evaluation` (held-out loss, accuracy).
        saver_hook: whose ``last_saved_path`` (the newest checkpoint on disk) and
            ``queued_paths`` (async saves not yet on disk) each :class:`Progress` reports.
        on_progress: called after every step (in the loop's thread), or None.
        stop_event: once set (from any thread), the session stops after this step; the
            throttle waits on it, so a stop is never delayed by a throttle.

    After the run, ``loss`` (the last step's), ``steps_run``, ``accuracy`` (None unless
    a classifier), ``eval_loss`` (held-out), ``eval_metrics`` (a model_fn's) and
    ``start_step`` (the global step the session started at) describe it;
    ``evaluated_at_end`` says whether ``end`` evaluated (not when the last step's
    ``--eval-every`` evaluation already had these figures).
    """

    def __init__(self, opts: TrainerOptions, loss: Any, evaluate: Callable[[Any], Evaluation],
                 saver_hook: CheckpointSaverHook, on_progress: Callable[[Progress], None] | None,
                 stop_event: threading.Event):
        self._opts, self._loss, self._evaluate = opts, loss, evaluate
        self._saver_hook, self._on_progress, self._stop = saver_hook, on_progress, stop_event
        self.loss: float | None = None
        self.steps_run = 0
        self.accuracy: float | None = None
        self.eval_loss: float | None = None
        self.eval_metrics: Mapping[str, Any] = {}
        self.evaluated_at_end = False
        self._step: int | None = None  # the global step after the last run
        self._eval_step: int | None = None  # the global step of the last evaluation
        self._pace = StepPace(opts.max_steps_per_s, time.perf_counter()) \
            if opts.max_steps_per_s else None
        self._window: list[float] = []
        self._reported: str | None = None  # the last checkpoint a Progress described

    def begin(self) -> None:
        self._gs = get_global_step()
        self.start_step = 0

    def after_create_session(self, session: Any, coord: Any) -> None:
        self.start_step = int(session.run(self._gs))

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        return SessionRunArgs({"loss": self._loss, "step": self._gs})

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        self.loss = float(run_values.results["loss"])
        step = int(run_values.results["step"]) + 1
        self._step = step
        self.steps_run += 1
        now = time.perf_counter()
        self._window.append(now)
        if len(self._window) > 50:
            self._window.pop(0)
        sps = (len(self._window) - 1) / (self._window[-1] - self._window[0]) \
            if len(self._window) > 1 and self._window[-1] > self._window[0] else None
        ev = None
        if self._opts.eval_every and step % self._opts.eval_every == 0:
            ev = self._record(self._evaluate(run_context.session))
            self._eval_step = step
        if self._on_progress:
            hook = self._saver_hook
            written = None
            if self._opts.incremental and hook.last_saved_path is not None and \
                    hook.last_saved_path != self._reported:
                self._reported = hook.last_saved_path
                written = describe_checkpoint(hook.last_saved_path)
            self._on_progress(Progress(
                step, self._opts.steps, self.loss, sps, hook.last_saved_path,
                None if ev is None else ev.accuracy, None if ev is None else ev.loss,
                tuple(hook.queued_paths), None if ev is None else dict(ev.metrics), written))
        if self._pace is not None:
            wait = self._pace.wait_s(time.perf_counter())
            if wait > 0:
                self._stop.wait(wait)
        if self._stop.is_set():
            run_context.request_stop()

    def _record(self, ev: Evaluation) -> Evaluation:
        self.accuracy, self.eval_loss, self.eval_metrics = ev.accuracy, ev.loss, ev.metrics
        return ev

    def end(self, session: Any) -> None:
        if self._step is not None and self._eval_step == self._step:
            return  # the last step was evaluated (--eval-every divides it): same figures
        self._record(self._evaluate(session))
        self.evaluated_at_end = True


def describe_checkpoint(path: str) -> CheckpointWritten:
    """``path``'s kind (``"delta"`` when it composes from a base, else ``"full"``), data
    file size in bytes (0 when it is gone) and the predecessor it names (None: none, or
    the file is gone)."""
    try:
        nbytes = os.path.getsize(ckpt.data_path(path))
    except OSError:
        nbytes = 0
    parent = checkpoint_base(path)
    if parent is not None:
        return CheckpointWritten(path, "delta", nbytes, parent)
    try:  # a full checkpoint: its parent, from its changes table (no values read)
        parent = ckpt.read_changes(path, names=[], verify=False, values=False).parent
    except Exception:  # noqa: BLE001 - gone or unreadable: reported as a plain full one
        parent = None
    return CheckpointWritten(path, "full", nbytes, parent)


class StepPace:
    """``--max-steps-per-s``: how long to wait after each step so that steps start at most
    ``steps_per_s`` a second. A stall (a busy machine, a stopped process, a long save) is
    not made up by running faster afterwards: the pace starts again from the step that
    was late. Not thread-safe (the loop's thread)."""

    def __init__(self, steps_per_s: float, now_s: float):
        self.steps_per_s, self._t0, self._steps = float(steps_per_s), now_s, 0

    def wait_s(self, now_s: float) -> float:
        """Seconds to wait after a step that ended at ``now_s`` (0: none)."""
        self._steps += 1
        due = self._t0 + self._steps / self.steps_per_s
        if due <= now_s:  # late: no debt to pay back in a burst
            self._t0, self._steps = now_s, 0
            return 0.0
        return due - now_s


class PreflightHook(SessionRunHook):
    """Runs the loss over the whole training set once before step 1, so bad labels or
    shapes fail with a clear error before any training or checkpoint.

    Args:
        spec: the model's ``cs.ModelSpec`` (``inputs``, ``labels``, ``loss``).
        train: name -> array ``[rows, ...]`` of the training set.
        source: the data set's name, for the message.

    Raises:
        DataError: (from ``after_create_session``) the data does not fit the model.
    """

    def __init__(self, spec: Any, train: Any, source: str):
        self._spec, self._train, self._source, self._done = spec, train, source, False

    def after_create_session(self, session: Any, coord: Any) -> None:
        if self._done:
            return
        self._done = True
        feeds = {**self._spec.inputs, **self._spec.labels}
        n = len(next(iter(self._train.values())))
        try:
            for i in range(0, n, EVAL_BATCH):
                session.run(self._spec.loss,
                            {feeds[k]: v[i:i + EVAL_BATCH] for k, v in self._train.items()})
        except (InvalidArgumentError, ValueError) as e:  # a kernel's, or a feed's (as TF1)
            raise DataError(f"The training data from {self._source} does not fit the model: "
                            f"{getattr(e, 'message', e)}") from None


@dataclass(frozen=True)
class Evaluation:
    """Held-out figures of one evaluation.

    Attributes:
        loss: the model's ``loss`` over the held-out rows (row-weighted mean of its
            per-batch values; the loss's own units), or None.
        accuracy: the fraction in [0, 1] of rows whose predicted class is the label; None
            for a model that is not a classifier.
        metrics: a ``model_fn``'s ``eval_metric_ops`` values over the held-out rows, name
            -> float (a non-scalar metric as a list), e.g. ``{"accuracy": 0.97}``; for a
            ``build_net`` model ``{"auc": 0.63}`` if it is binary (:func:`binary_output`),
            else empty.
    """

    loss: float | None
    accuracy: float | None
    metrics: Mapping[str, Any] = field(default_factory=dict)


def is_classifier(spec: Any) -> bool:
    """True for a classifier: one input, one integer label ``[batch]`` (or
    ``[batch, 1]``), and a ``classes`` output or a sole ``[batch, classes]`` output
    with more than one class. A regression model (float labels) is not one."""
    if len(spec.labels or {}) != 1 or len(spec.inputs) != 1:
        return False
    (label,) = spec.labels.values()
    if not label.dtype.is_integer:
        return False
    if "classes" in spec.outputs:
        return True
    if len(spec.outputs) != 1:
        return False
    (only,) = spec.outputs.values()
    shape = only.get_shape()
    return shape.ndims == 2 and (shape[1] is None or shape[1] > 1)


def classes_output(spec: Any) -> Any:
    """A classifier's (:func:`is_classifier`) predicted classes ``[batch]``: its
    ``classes`` output, or the argmax of its sole ``[batch, classes]`` output; None for a
    model that is not a classifier."""
    if not is_classifier(spec):
        return None
    out = spec.outputs.get("classes")
    if out is None:
        (only,) = spec.outputs.values()
        with only.graph.as_default():
            out = argmax(only, axis=1)
    return out


def binary_output(spec: Any) -> Any:
    """The click/positive probability ``[batch]`` (or ``[batch, 1]``) of a binary model:
    its ``logistic`` output (the name of TF's binary classification head's sigmoid
    prediction) when it has exactly one label; None otherwise."""
    if len(spec.labels or {}) != 1:
        return None
    out = spec.outputs.get("logistic")
    if out is None:
        return None
    shape = out.get_shape()
    if shape.ndims not in (None, 1, 2) or (shape.ndims == 2 and shape[1] not in (None, 1)):
        return None
    return out


def make_evaluator(spec: Any, test: Any) -> Callable[[Any], Evaluation]:
    """``evaluate(session)`` -> :class:`Evaluation` over ``test`` (name -> array): the
    held-out loss (when ``test`` holds every input and label), for a classifier
    (:func:`is_classifier`) the accuracy of the ``classes`` output (or of the argmax of
    the sole ``[batch, classes]`` output), and for a binary model (:func:`binary_output`)
    ``metrics["auc"]``, the ROC AUC of its ``logistic`` output against the 0/1 label
    (left out when the held-out labels hold one class only). All None/empty for an
    empty ``test``.

    Raises:
        OpError: (from ``evaluate``) the model's graph fails on the held-out rows.
    """
    feeds = {**spec.inputs, **(spec.labels or {})}
    has_all = bool(test) and all(k in test for k in feeds)
    out = classes_output(spec)
    prob = binary_output(spec)
    rows = len(next(iter(test.values()))) if has_all else 0
    y_name = next(iter(spec.labels)) if out is not None or prob is not None else None

    def evaluate(sess: Any) -> Evaluation:
        if not rows or spec.loss is None:
            return Evaluation(None, None)
        loss_sum, correct = 0.0, 0
        scores: list[np.ndarray] = []
        fetches = {"loss": spec.loss, **({"classes": out} if out is not None else {}),
                   **({"prob": prob} if prob is not None else {})}
        for i in range(0, rows, EVAL_BATCH):
            chunk = {feeds[k]: test[k][i:i + EVAL_BATCH] for k in feeds}
            n = len(next(iter(chunk.values())))
            values = sess.run(fetches, chunk)
            loss_sum += float(values["loss"]) * n
            if out is not None:
                labels = test[y_name][i:i + EVAL_BATCH]
                correct += int(np.sum(values["classes"].reshape(-1) == labels.reshape(-1)))
            if prob is not None:
                scores.append(np.asarray(values["prob"]).reshape(-1))
        metrics: dict[str, Any] = {}
        if prob is not None:
            y = np.asarray(test[y_name]).reshape(-1)
            if np.all((y == 0) | (y == 1)) and 0 < int(y.sum()) < len(y):
                metrics["auc"] = roc_auc(y, np.concatenate(scores))
        return Evaluation(loss_sum / rows, None if out is None else correct / rows, metrics)

    return evaluate
