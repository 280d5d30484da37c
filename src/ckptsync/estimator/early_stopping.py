"""``tf.estimator.experimental``'s early stopping, as TF 2.15's
``tensorflow_estimator/python/estimator/early_stopping.py``: hooks that stop training
once the evaluation metrics (the event files ``evaluate`` writes into
``estimator.eval_dir()``) stop improving or cross a threshold.

Example:
    >>> import ckptsync as tf
    >>> hook = tf.estimator.experimental.stop_if_no_decrease_hook(
    ...     estimator, "loss", max_steps_without_decrease=1000)  # doctest: +SKIP
    >>> tf.estimator.train_and_evaluate(estimator, tf.estimator.TrainSpec(
    ...     input_fn, hooks=[hook]), eval_spec)  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import glob
import logging
import operator
import os
from collections.abc import Callable, Iterator
from typing import Any

from .. import dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError, DataLossError
from ..graph import GraphKeys
from ..initializers import constant_initializer
from ..ops.state_ops import assign
from ..summary.summary_iterator import summary_iterator
from ..train.basic_hooks import SecondOrStepTimer
from ..train.session_run_hook import SessionRunArgs, SessionRunHook
from ..train.training_util import get_global_step
from ..variable_scope import AUTO_REUSE, get_variable, variable_scope
from .estimator import Estimator

__all__ = ["make_early_stopping_hook", "read_eval_metrics", "stop_if_higher_hook",
           "stop_if_lower_hook", "stop_if_no_increase_hook", "stop_if_no_decrease_hook"]

log = logging.getLogger("tensorflow")


def make_early_stopping_hook(estimator: Estimator, should_stop_fn: Callable[[], bool],
                             run_every_secs: float | None = 60,
                             run_every_steps: int | None = None) -> SessionRunHook:
    """A hook that calls ``should_stop_fn()`` every ``run_every_secs`` (or
    ``run_every_steps``) and stops training once it returns True; on a non-chief, one
    that stops once the chief's ``signal_early_stopping/STOP`` variable is set.

    Raises:
        TypeError: ``estimator`` is not an ``Estimator``.
        ValueError: both ``run_every_secs`` and ``run_every_steps`` are set.
    """
    if not isinstance(estimator, Estimator):
        raise CkptsyncTypeError("`estimator` must have type `tf.estimator.Estimator`. "
                                f"Got: {type(estimator)}")
    if run_every_secs is not None and run_every_steps is not None:
        raise CkptsyncValueError("Only one of `run_every_secs` and `run_every_steps` must "
                                 "be set.")
    if estimator.config.is_chief:
        return _StopOnPredicateHook(should_stop_fn, run_every_secs, run_every_steps)
    return _CheckForStoppingHook()


def stop_if_higher_hook(estimator: Estimator, metric_name: str, threshold: float,
                        eval_dir: str | None = None, min_steps: int = 0,
                        run_every_secs: float | None = 60,
                        run_every_steps: int | None = None) -> SessionRunHook:
    """Stops once ``metric_name`` is above ``threshold`` (at a step >= ``min_steps``)."""
    return _threshold_hook(estimator, metric_name, threshold, True, eval_dir, min_steps,
                           run_every_secs, run_every_steps)


def stop_if_lower_hook(estimator: Estimator, metric_name: str, threshold: float,
                       eval_dir: str | None = None, min_steps: int = 0,
                       run_every_secs: float | None = 60,
                       run_every_steps: int | None = None) -> SessionRunHook:
    """Stops once ``metric_name`` is below ``threshold`` (at a step >= ``min_steps``)."""
    return _threshold_hook(estimator, metric_name, threshold, False, eval_dir, min_steps,
                           run_every_secs, run_every_steps)


def stop_if_no_increase_hook(estimator: Estimator, metric_name: str,
                             max_steps_without_increase: int, eval_dir: str | None = None,
                             min_steps: int = 0, run_every_secs: float | None = 60,
                             run_every_steps: int | None = None) -> SessionRunHook:
    """Stops once ``metric_name`` has not increased for ``max_steps_without_increase``
    global steps of evaluations."""
    return _no_improvement_hook(estimator, metric_name, max_steps_without_increase, True,
                                eval_dir, min_steps, run_every_secs, run_every_steps)


def stop_if_no_decrease_hook(estimator: Estimator, metric_name: str,
                             max_steps_without_decrease: int, eval_dir: str | None = None,
                             min_steps: int = 0, run_every_secs: float | None = 60,
                             run_every_steps: int | None = None) -> SessionRunHook:
    """Stops once ``metric_name`` has not decreased for ``max_steps_without_decrease``
    global steps of evaluations."""
    return _no_improvement_hook(estimator, metric_name, max_steps_without_decrease, False,
                                eval_dir, min_steps, run_every_secs, run_every_steps)


def read_eval_metrics(eval_dir: str) -> dict[int, dict[str, float]]:
    """``{global_step: {tag: simple_value}}`` of every event file in ``eval_dir``, by
    step (a file that turns out corrupt is read up to the damage, with a warning)."""
    metrics: dict[int, dict[str, float]] = collections.defaultdict(dict)
    for event in _summaries(eval_dir):
        if not event.HasField("summary"):
            continue
        values = {v.tag: v.simple_value for v in event.summary.value
                  if v.HasField("simple_value")}
        if values:
            metrics[event.step].update(values)
    return collections.OrderedDict(sorted(metrics.items()))


def _summaries(eval_dir: str) -> Iterator[Any]:
    if not os.path.isdir(eval_dir):
        return
    for path in glob.glob(os.path.join(eval_dir, "*.tfevents.*")):
        try:
            yield from summary_iterator(path)
        except DataLossError as e:
            log.warning("Skipping rest of the file due to encountering data corruption "
                        "error; file path: %s; original error raised by "
                        "`tf.train.summary_iterator`: %s", path, e)


def _threshold_hook(estimator: Estimator, metric_name: str, threshold: float, higher: bool,
                    eval_dir: str | None, min_steps: int, run_every_secs: float | None,
                    run_every_steps: int | None) -> SessionRunHook:
    where = estimator.eval_dir() if eval_dir is None else eval_dir
    better = operator.gt if higher else operator.lt

    def should_stop() -> bool:
        for step, metrics in read_eval_metrics(where).items():
            if step >= min_steps and better(metrics[metric_name], threshold):
                log.info('At step %s, metric "%s" has value %s which is %s the configured '
                         "threshold (%s) for early stopping.", step, metric_name,
                         metrics[metric_name], "greater than" if higher else "less than",
                         threshold)
                return True
        return False

    return make_early_stopping_hook(estimator, should_stop, run_every_secs, run_every_steps)


def _no_improvement_hook(estimator: Estimator, metric_name: str, max_steps: int,
                         higher: bool, eval_dir: str | None, min_steps: int,
                         run_every_secs: float | None,
                         run_every_steps: int | None) -> SessionRunHook:
    where = estimator.eval_dir() if eval_dir is None else eval_dir
    better = operator.gt if higher else operator.lt

    def should_stop() -> bool:
        best_val: float | None = None
        best_step = 0
        for step, metrics in read_eval_metrics(where).items():
            if step < min_steps:
                continue
            val = metrics[metric_name]
            if best_val is None or better(val, best_val):
                best_val, best_step = val, step
            if step - best_step >= max_steps:
                log.info('No %s in metric "%s" for %s steps, which is greater than or equal '
                         "to max steps (%s) configured for early stopping.",
                         "increase" if higher else "decrease", metric_name, step - best_step,
                         max_steps)
                return True
        return False

    return make_early_stopping_hook(estimator, should_stop, run_every_secs, run_every_steps)


def _get_or_create_stop_var() -> Any:
    with variable_scope("signal_early_stopping", reuse=AUTO_REUSE):
        return get_variable("STOP", shape=[], dtype=dtypes.bool,
                            initializer=constant_initializer(False),
                            collections=[GraphKeys.GLOBAL_VARIABLES], trainable=False)


class _StopOnPredicateHook(SessionRunHook):
    def __init__(self, should_stop_fn: Callable[[], bool], run_every_secs: float | None = 60,
                 run_every_steps: int | None = None):
        if not callable(should_stop_fn):
            raise CkptsyncTypeError("`should_stop_fn` must be callable.")
        self._should_stop_fn = should_stop_fn
        self._timer = SecondOrStepTimer(every_secs=run_every_secs, every_steps=run_every_steps)

    def begin(self) -> None:
        self._global_step_tensor = get_global_step()
        self._stop_var = _get_or_create_stop_var()
        self._stop_op = assign(self._stop_var, True)

    def before_run(self, run_context: Any) -> SessionRunArgs:
        return SessionRunArgs(self._global_step_tensor)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        global_step = int(run_values.results)
        if self._timer.should_trigger_for_step(global_step):
            self._timer.update_last_triggered_step(global_step)
            if self._should_stop_fn():
                log.info("Requesting early stopping at global step %d", global_step)
                run_context.session.run(self._stop_op)
                run_context.request_stop()


class _CheckForStoppingHook(SessionRunHook):
    def begin(self) -> None:
        self._stop_var = _get_or_create_stop_var()

    def before_run(self, run_context: Any) -> SessionRunArgs:
        return SessionRunArgs(self._stop_var)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if run_values.results:
            log.info("Early stopping requested, suspending run.")
            run_context.request_stop()
