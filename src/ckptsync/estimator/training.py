"""``train_and_evaluate``, ``TrainSpec`` and ``EvalSpec``, as TF 2.15's
``tensorflow_estimator/python/estimator/training.py``.

Which task runs comes from ``TF_CONFIG`` (read by :class:`RunConfig`), as TF:

- no cluster (local): trains, evaluating after each new checkpoint (at most once per
  ``throttle_secs``) and after the last; returns ``(metrics, export_results)``;
- task ``chief`` (of a one-chief cluster): trains only;
- task ``evaluator``: waits ``start_delay_secs``, then evaluates each new checkpoint of
  ``model_dir`` as it appears (looking again every ``throttle_secs``), until it has
  evaluated one at the training's ``max_steps``.

A trainer and an evaluator are two processes on one ``model_dir``: the evaluator reads
only checkpoints the state file names, which a trainer's save publishes last.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any

from ..errors import CkptsyncRuntimeError, CkptsyncTypeError, CkptsyncValueError
from ..train import CheckpointSaverListener, SecondOrStepTimer, SessionRunHook
from .estimator import Estimator
from .run_config import TaskType

__all__ = ["TrainSpec", "EvalSpec", "Exporter", "train_and_evaluate"]

log = logging.getLogger("ckptsync.estimator")

#: How long an evaluator with ``throttle_secs=0`` waits before looking again for a
#: checkpoint (TF loops without waiting).
_IDLE_POLL_SECS = 0.05


def _validate_input_fn(input_fn: Any) -> None:
    if not callable(input_fn):
        raise CkptsyncTypeError(f"`input_fn` must be callable, given: {input_fn}")


def _validate_hooks(hooks: Any) -> tuple[Any, ...]:
    hooks = tuple(hooks or [])
    for hook in hooks:
        if not isinstance(hook, SessionRunHook):
            raise CkptsyncTypeError(
                f"All hooks must be `SessionRunHook` instances, given: {hook}")
    return hooks


class TrainSpec(collections.namedtuple(
        "TrainSpec", ["input_fn", "max_steps", "hooks", "saving_listeners"])):
    """What ``train_and_evaluate`` trains: ``input_fn``, ``max_steps`` (None: until the
    input ends), ``hooks``, ``saving_listeners``; as TF's ``tf.estimator.TrainSpec``.

    Raises:
        TypeError: ``input_fn`` not callable, a hook or listener of the wrong type.
        ValueError: ``max_steps`` <= 0.
    """

    def __new__(cls, input_fn: Any, max_steps: int | None = None, hooks: Any = None,
                saving_listeners: Any = None) -> TrainSpec:
        _validate_input_fn(input_fn)
        if max_steps is not None and max_steps <= 0:
            raise CkptsyncValueError(f"Must specify max_steps > 0, given: {max_steps}")
        hooks = _validate_hooks(hooks)
        listeners = tuple(saving_listeners or [])
        for lst in listeners:
            if not isinstance(lst, CheckpointSaverListener):
                raise CkptsyncTypeError(
                    "All saving_listeners must be `CheckpointSaverListener` instances, "
                    f"given: {lst}")
        return super().__new__(cls, input_fn, max_steps, hooks, listeners)


class EvalSpec(collections.namedtuple("EvalSpec", [
        "input_fn", "steps", "name", "hooks", "exporters", "start_delay_secs",
        "throttle_secs"])):
    """How ``train_and_evaluate`` evaluates, as TF's ``tf.estimator.EvalSpec``.

    Attributes:
        input_fn: as ``Estimator.evaluate``'s. steps: batches per evaluation (100; None:
            until the input ends). name: ``eval_<name>`` directory. hooks: eval hooks.
        exporters: objects with ``name`` and ``export(estimator, export_path,
            checkpoint_path, eval_result, is_the_final_export)``, called after each
            evaluation (their results are ``train_and_evaluate``'s second value).
        start_delay_secs: the evaluator task's wait before its first look (120).
        throttle_secs: the least seconds between evaluations (600).

    Raises:
        TypeError: ``input_fn`` not callable, a non-string ``name``, a hook that is not.
        ValueError: ``steps`` <= 0, a negative delay or throttle (TF's messages).
    """

    def __new__(cls, input_fn: Any, steps: int | None = 100, name: str | None = None,
                hooks: Any = None, exporters: Any = None, start_delay_secs: float = 120,
                throttle_secs: float = 600) -> EvalSpec:
        _validate_input_fn(input_fn)
        if steps is not None and steps <= 0:
            raise CkptsyncValueError(f"Must specify steps > 0, given: {steps}")
        if name is not None and not isinstance(name, str):
            raise CkptsyncTypeError(f"`name` must be string, given: {name}")
        hooks = _validate_hooks(hooks)
        exporters = _validate_exporters(exporters)
        if start_delay_secs < 0:
            raise CkptsyncValueError(
                f"Must specify start_delay_secs >= 0, given: {start_delay_secs}")
        if throttle_secs < 0:
            raise CkptsyncValueError(f"Must specify throttle_secs >= 0, given: {throttle_secs}")
        return super().__new__(cls, input_fn, steps, name, hooks, exporters,
                               start_delay_secs, throttle_secs)


class Exporter:
    """Called by ``train_and_evaluate`` after each evaluation, as TF's
    ``tf.estimator.Exporter`` (an ``EvalSpec``'s ``exporters``). TF's subclasses write
    SavedModels, which ckptsync has not: subclass this one (``infer serve`` serves the
    checkpoints themselves)."""

    @property
    def name(self) -> str:
        """The exporter's name, unique in an ``EvalSpec``; exports go under
        ``model_dir/export/<name>``."""
        raise NotImplementedError

    def export(self, estimator: Any, export_path: str, checkpoint_path: str,
               eval_result: dict[str, Any], is_the_final_export: bool) -> Any:
        """Exports ``checkpoint_path`` (just evaluated: ``eval_result``); the value is
        one of ``train_and_evaluate``'s export results. ``is_the_final_export``: the
        checkpoint is at the training's ``max_steps``."""
        raise NotImplementedError


def _validate_exporters(exporters: Any) -> tuple[Any, ...]:
    if not exporters:
        return ()
    if isinstance(exporters, Exporter):
        exporters = [exporters]
    names: list[str] = []
    for e in exporters if isinstance(exporters, (list, tuple)) else [exporters]:
        if not isinstance(e, Exporter):
            raise CkptsyncTypeError(
                f"`exporters` must be an Exporter, an iterable of Exporter, or `None`, "
                f"found {exporters}.")
        if not e.name:
            raise CkptsyncValueError(
                "An Exporter cannot have a name that is `None` or empty. All exporter "
                f"names: {[x.name for x in exporters]}")
        if e.name in names:
            raise CkptsyncValueError(
                "`exporters` must have unique names. Such a name cannot be `None`. All "
                f"exporter names: {[x.name for x in exporters]}")
        names.append(e.name)
    return tuple(exporters)


class _EvalStatus:
    EVALUATED = "evaluated"
    MISSING_CHECKPOINT = "missing checkpoint"
    NO_NEW_CHECKPOINT = "no new checkpoint"


_EvalResult = collections.namedtuple("_EvalResult", ["status", "metrics", "checkpoint_path"])


class _Evaluator:
    """Evaluates the latest checkpoint unless it was the last one evaluated."""

    def __init__(self, estimator: Estimator, eval_spec: EvalSpec, max_steps: int | None):
        self._estimator, self._spec, self._max_steps = estimator, eval_spec, max_steps
        self._previous: str | None = None

    def evaluate_and_export(self) -> tuple[_EvalResult, list[Any]]:
        latest = self._estimator.latest_checkpoint()
        if not latest:
            log.info("Estimator is not trained yet. Will start an evaluation when a "
                     "checkpoint is ready.")
            return _EvalResult(_EvalStatus.MISSING_CHECKPOINT, None, None), []
        if latest == self._previous:
            log.info("No new checkpoint ready for evaluation.")
            return _EvalResult(_EvalStatus.NO_NEW_CHECKPOINT, None, None), []
        metrics = self._estimator.evaluate(self._spec.input_fn, steps=self._spec.steps,
                                           name=self._spec.name, checkpoint_path=latest,
                                           hooks=self._spec.hooks)
        final = bool(self._max_steps and metrics["global_step"] >= self._max_steps)
        exports = [e.export(estimator=self._estimator,
                            export_path=f"{self._estimator.model_dir}/export/{e.name}",
                            checkpoint_path=latest, eval_result=metrics,
                            is_the_final_export=final)
                   for e in self._spec.exporters]
        self._previous = latest
        return _EvalResult(_EvalStatus.EVALUATED, metrics, latest), exports


class _NewCheckpointListenerForEvaluate(CheckpointSaverListener):
    """Evaluates after each save but the first, at most once per ``throttle_secs``, and
    after the last save, as TF's listener of that name."""

    def __init__(self, evaluator: _Evaluator, throttle_secs: float):
        self._evaluator, self._throttle = evaluator, throttle_secs
        self.eval_result: _EvalResult | None = None
        self.export_results: list[Any] | None = None

    def begin(self) -> None:
        self._timer = SecondOrStepTimer(every_secs=self._throttle)
        self._is_first_run = True

    def after_save(self, session: Any, global_step_value: int) -> None:
        if self._is_first_run:
            self._is_first_run = False
            return
        if self._timer.should_trigger_for_step(global_step_value):
            self._evaluate(global_step_value)
        else:
            log.info("Skip the current checkpoint eval due to throttle secs (%s secs).",
                     self._throttle)

    def end(self, session: Any, global_step_value: int) -> None:
        if global_step_value != self._timer.last_triggered_step():
            self._evaluate(global_step_value)

    def _evaluate(self, step: int) -> None:
        self._timer.update_last_triggered_step(step)
        self.eval_result, self.export_results = self._evaluator.evaluate_and_export()
        if self.eval_result.status != _EvalStatus.EVALUATED:
            raise CkptsyncRuntimeError(
                "There was no new checkpoint after the training. Eval status: "
                f"{self.eval_result.status}")


def _assert_eval_spec(eval_spec: Any) -> None:
    if not isinstance(eval_spec, EvalSpec):
        raise CkptsyncTypeError(
            f"`eval_spec` must have type `tf.estimator.EvalSpec`. Got: {type(eval_spec)}")


def train_and_evaluate(estimator: Estimator, train_spec: TrainSpec,
                       eval_spec: EvalSpec) -> tuple[dict[str, Any] | None, list[Any] | None] | None:
    """Trains and evaluates as ``TF_CONFIG``'s task says (see the module docstring), as
    TF's ``tf.estimator.train_and_evaluate``.

    Returns:
        Locally, ``(metrics of the last evaluation, export results)`` (None, None
        without one); None in the ``chief`` and ``evaluator`` tasks.

    Raises:
        TypeError: arguments of the wrong types (TF's messages).
        ValueError: an evaluator task id > 0, a task type ckptsync does not run.
        RuntimeError: locally, no new checkpoint to evaluate after training.
    """
    _assert_eval_spec(eval_spec)
    if not isinstance(estimator, Estimator):
        raise CkptsyncTypeError(
            f"`estimator` must have type `tf.estimator.Estimator`. Got: {type(estimator)}")
    if not isinstance(train_spec, TrainSpec):
        raise CkptsyncTypeError(
            f"`train_spec` must have type `tf.estimator.TrainSpec`. Got: {type(train_spec)}")
    config = estimator.config
    if config.task_type == TaskType.EVALUATOR and config.task_id > 0:
        raise CkptsyncValueError(
            "For distributed training, there can only be one `evaluator` task (with task id "
            f"0).  Given task id {config.task_id}")
    if not config.cluster_spec and config.task_type != TaskType.EVALUATOR:
        return _run_local(estimator, train_spec, eval_spec)
    if config.task_type == TaskType.EVALUATOR:
        _run_evaluator(estimator, train_spec, eval_spec)
        return None
    if config.task_type == TaskType.CHIEF:
        estimator.train(train_spec.input_fn, max_steps=train_spec.max_steps,
                        hooks=list(train_spec.hooks),
                        saving_listeners=list(train_spec.saving_listeners))
        return None
    raise CkptsyncValueError(  # RunConfig refuses the others already
        f"Task type {config.task_type} is not supported. Supported task types are "
        "['chief', 'evaluator']")


def _run_local(estimator: Estimator, train_spec: TrainSpec,
               eval_spec: EvalSpec) -> tuple[dict[str, Any] | None, list[Any] | None]:
    evaluator = _Evaluator(estimator, eval_spec, train_spec.max_steps)
    listener = _NewCheckpointListenerForEvaluate(evaluator, eval_spec.throttle_secs)
    estimator.train(train_spec.input_fn, max_steps=train_spec.max_steps,
                    hooks=list(train_spec.hooks),
                    saving_listeners=list(train_spec.saving_listeners) + [listener])
    result = listener.eval_result
    return (result.metrics if result else None), listener.export_results


def _run_evaluator(estimator: Estimator, train_spec: TrainSpec, eval_spec: EvalSpec) -> None:
    """TF's ``_start_continuous_evaluation``: evaluate each new checkpoint, until one at
    ``train_spec.max_steps`` (forever without it)."""
    if eval_spec.start_delay_secs:
        log.info("Waiting %f secs before starting eval.", eval_spec.start_delay_secs)
        time.sleep(eval_spec.start_delay_secs)
    evaluator = _Evaluator(estimator, eval_spec, train_spec.max_steps)
    while True:
        start = time.time()
        result, _ = evaluator.evaluate_and_export()
        if result.status == _EvalStatus.EVALUATED:
            step = result.metrics.get("global_step")
            if step and train_spec.max_steps and step >= train_spec.max_steps:
                log.info("Exiting evaluation, global_step=%s >= train max_steps=%s", step,
                         train_spec.max_steps)
                return
        wait = eval_spec.throttle_secs - (time.time() - start)
        if wait > 0:
            time.sleep(wait)
        elif result.status != _EvalStatus.EVALUATED:
            time.sleep(_IDLE_POLL_SECS)
