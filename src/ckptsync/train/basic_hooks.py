"""The standard hooks, as TF1's ``basic_session_run_hooks``: timers, checkpoint saving,
stopping at a step, logging, NaN checks, step counting and final ops.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from typing import Any

import numpy as np

from .. import summary as _summary
from ..errors import CkptsyncRuntimeError, CkptsyncValueError
from ..graph import GraphKeys, get_default_graph
from ..summary.writer import write_or_warn
from .session_run_hook import SessionRunArgs, SessionRunContext, SessionRunHook, SessionRunValues
from .training_util import get_global_step

__all__ = [
    "SecondOrStepTimer", "CheckpointSaverListener", "CheckpointSaverHook", "StopAtStepHook",
    "LoggingTensorHook", "NanTensorHook", "NanLossDuringTrainingError", "StepCounterHook",
    "FinalOpsHook",
]

log = logging.getLogger("ckptsync.train")
_not_increased_warnings = 0  # StepCounterHook's, process-wide as TF1's log_first_n


class SecondOrStepTimer:
    """Triggers every ``every_secs`` seconds or every ``every_steps`` steps (exactly one).

    Raises:
        ValueError: both or neither given.
    """

    def __init__(self, every_secs: float | None = None, every_steps: int | None = None):
        if (every_secs is None) == (every_steps is None):
            raise CkptsyncValueError("Either every_secs or every_steps should be provided.")
        self._every_secs, self._every_steps = every_secs, every_steps
        self.reset()

    def reset(self) -> None:
        self._last_time: float | None = None
        self._last_step: int | None = None

    def should_trigger_for_step(self, step: int) -> bool:
        if self._last_step is None:
            return True
        if self._last_step == step:
            return False
        if self._every_secs is not None and time.time() >= self._last_time + self._every_secs:  # type: ignore[operator]
            return True
        return self._every_steps is not None and step >= self._last_step + self._every_steps

    def update_last_triggered_step(self, step: int) -> tuple[float | None, int | None]:
        now = time.time()
        if self._last_time is None:
            elapsed: tuple[float | None, int | None] = (None, None)
        else:
            elapsed = (now - self._last_time, step - self._last_step)  # type: ignore[operator]
        self._last_time, self._last_step = now, step
        return elapsed

    def last_triggered_step(self) -> int | None:
        return self._last_step


class CheckpointSaverListener:
    """Called around each save of a :class:`CheckpointSaverHook`: ``before_save`` before
    the save starts, ``after_save`` once it is done (its data file and the state file
    on disk; with an async Saver that is a later step, or the session's end, in the
    training thread), as TF1's contract."""

    def begin(self) -> None:
        pass

    def before_save(self, session: Any, global_step_value: int) -> None:
        pass

    def after_save(self, session: Any, global_step_value: int) -> bool | None:
        """Return True to request that training stops."""
        return None

    def end(self, session: Any, global_step_value: int) -> None:
        pass


class CheckpointSaverHook(SessionRunHook):
    """Saves a checkpoint at session creation, every N steps/secs, and at the end.

    As ``tf.train.CheckpointSaverHook``: ``saver`` (or ``scaffold.saver``, or the sole item
    of the ``SAVERS`` collection) writes ``<checkpoint_dir>/<checkpoint_basename>-<step>``.
    ckptsync extension: ``metadata_fn()`` returns a JSON-serializable dict stored in each
    checkpoint (the trainer records its input pipeline position there). With a saver built
    as ``Saver(async_save=True)`` each save only copies the values and returns; the hook
    then reports it as queued (``queued_paths``) until the writer confirms it on disk
    (checked without blocking after each step, and at every save), and only then
    updates ``last_saved_step``, ``last_saved_path`` and ``saves`` and calls the
    listeners' ``after_save``. ``end`` waits for the last one. A failed background save
    is raised by the next step, save or ``end``; the saves the hook still had queued are
    then never reported as saved. The hook does not close the saver: its owner does.

    Attributes:
        last_saved_step, last_saved_path: the newest save on disk (None before one).
        saves: how many of this hook's saves are on disk.

    Raises:
        ValueError: both ``saver`` and ``scaffold``; both or neither of secs/steps.
        RuntimeError: at ``begin``, no global step ("Global step should be created...").
    """

    def __init__(self, checkpoint_dir: str, save_secs: float | None = None,
                 save_steps: int | None = None, saver: Any = None,
                 checkpoint_basename: str = "model.ckpt", scaffold: Any = None,
                 listeners: list[CheckpointSaverListener] | None = None,
                 save_graph_def: bool = True, metadata_fn: Any = None):
        if saver is not None and scaffold is not None:
            raise CkptsyncValueError("You cannot provide both saver and scaffold.")
        self._saver, self._scaffold = saver, scaffold
        self._checkpoint_dir = checkpoint_dir
        self._save_path = os.path.join(checkpoint_dir, checkpoint_basename)
        self._timer = SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)
        self._listeners = list(listeners or [])
        self._metadata_fn = metadata_fn
        self._steps_per_run = 1
        self.last_saved_step: int | None = None
        self.last_saved_path: str | None = None
        self.saves = 0
        self._queued: collections.deque[tuple[int, str | None]] = collections.deque()

    @property
    def queued_paths(self) -> list[str]:
        """Prefixes of this hook's saves started and not yet confirmed on disk, oldest
        first (always empty with a synchronous Saver)."""
        return [path for _, path in self._queued if path is not None]

    def begin(self) -> None:
        self._global_step_tensor = get_global_step()
        if self._global_step_tensor is None:
            raise CkptsyncRuntimeError("Global step should be created to use CheckpointSaverHook.")
        # As TF1, whose hook opens a summary writer on the directory here (creating it).
        try:
            os.makedirs(self._checkpoint_dir, exist_ok=True)
        except OSError as e:
            raise CkptsyncRuntimeError(
                f"CheckpointSaverHook cannot create its checkpoint_dir "
                f"{self._checkpoint_dir!r}: {e.strerror or e}.") from e
        for lst in self._listeners:
            lst.begin()

    def after_create_session(self, session: Any, coord: Any) -> None:
        step = int(session.run(self._global_step_tensor))
        self._save(session, step)
        self._timer.update_last_triggered_step(step)

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        return SessionRunArgs(self._global_step_tensor)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        if self._queued and self._confirm(run_context.session, poll=True):
            run_context.request_stop()
        stale = int(run_values.results)
        if self._timer.should_trigger_for_step(stale + self._steps_per_run):
            step = int(run_context.session.run(self._global_step_tensor))
            if self._timer.should_trigger_for_step(step):
                self._timer.update_last_triggered_step(step)
                if self._save(run_context.session, step):
                    run_context.request_stop()

    def end(self, session: Any) -> None:
        step = int(session.run(self._global_step_tensor))
        if step != self._timer.last_triggered_step():
            self._save(session, step)
        # An async saver (Saver(async_save=True)): the last checkpoint is durable and
        # published, or its failure raised, before the session ends.
        wait = getattr(self._get_saver(), "wait_until_finished", None)
        if wait is not None:
            self._forgetting_on_failure(wait)
        self._confirm(session)
        for lst in self._listeners:
            lst.end(session, step)

    def _get_saver(self) -> Any:
        if self._saver is not None:
            return self._saver
        if self._scaffold is not None:
            return self._scaffold.saver
        savers = get_default_graph().get_collection(GraphKeys.SAVERS)
        if len(savers) != 1:
            raise CkptsyncRuntimeError(
                f"More than one item in collection {GraphKeys.SAVERS}. Please indicate which one "
                "to use by passing it to the constructor." if savers else
                f"No items in collection {GraphKeys.SAVERS}. Please add a saver to the collection "
                "or provide a saver or scaffold.")
        return savers[0]

    def _save(self, session: Any, step: int) -> bool:
        log.info("Saving checkpoints for %d into %s.", step, self._save_path)
        for lst in self._listeners:
            lst.before_save(session, step)
        extra = {"metadata": self._metadata_fn()} if self._metadata_fn else {}
        saver = self._get_saver()
        path = self._forgetting_on_failure(
            lambda: saver.save(session, self._save_path, global_step=step, **extra))
        self._queued.append((step, path))
        return self._confirm(session)

    def _forgetting_on_failure(self, call: Any) -> Any:
        """``call()``; a failure (an async save's) forgets the queued saves, never
        reporting them as saved."""
        try:
            return call()
        except BaseException:
            self._queued.clear()
            raise

    def _confirm(self, session: Any, poll: bool = False) -> bool:
        """Reports the queued saves now on disk, oldest first: the saver's
        ``pending_saves`` are the newest saves it started, so all but the last that many
        of the hook's are done (a saver without it is synchronous). ``poll`` first takes
        the async writer's confirmations. Returns True when a listener asks to stop."""
        saver = self._get_saver()
        if poll and hasattr(saver, "poll_saves"):
            self._forgetting_on_failure(saver.poll_saves)
        pending = len(getattr(saver, "pending_saves", ()))
        stop = False
        while len(self._queued) > pending:
            step, path = self._queued.popleft()
            self.last_saved_step, self.last_saved_path = step, path
            self.saves += 1
            for lst in self._listeners:
                if lst.after_save(session, step):
                    log.info("A CheckpointSaverListener requested that training be stopped.")
                    stop = True
        return stop


class StopAtStepHook(SessionRunHook):
    """Requests stop at ``last_step``, or after ``num_steps`` more steps (exactly one)."""

    def __init__(self, num_steps: int | None = None, last_step: int | None = None):
        if (num_steps is None) == (last_step is None):
            raise CkptsyncValueError("One of num_steps or last_step must be specified.")
        if num_steps is not None and num_steps < 0:
            raise CkptsyncValueError("num_steps must be non-negative.")
        self._num_steps, self._last_step = num_steps, last_step

    def begin(self) -> None:
        self._global_step_tensor = get_global_step()
        if self._global_step_tensor is None:
            raise CkptsyncRuntimeError("Global step should be created to use StopAtStepHook.")

    def after_create_session(self, session: Any, coord: Any) -> None:
        if self._last_step is None:
            self._last_step = int(session.run(self._global_step_tensor)) + self._num_steps  # type: ignore[operator]

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        return SessionRunArgs(self._global_step_tensor)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        step = int(run_values.results) + 1
        if step >= self._last_step:  # type: ignore[operator]
            step = int(run_context.session.run(self._global_step_tensor))
            if step >= self._last_step:  # type: ignore[operator]
                run_context.request_stop()


class LoggingTensorHook(SessionRunHook):
    """Logs tensors every N local steps or seconds, and/or at the end, at INFO."""

    def __init__(self, tensors: Any, every_n_iter: int | None = None,
                 every_n_secs: float | None = None, at_end: bool = False, formatter: Any = None):
        only_end = at_end and every_n_iter is None and every_n_secs is None
        if not only_end and (every_n_iter is None) == (every_n_secs is None):
            raise CkptsyncValueError(
                "either at_end and/or exactly one of every_n_iter and every_n_secs must be "
                "provided.")
        if every_n_iter is not None and every_n_iter <= 0:
            raise CkptsyncValueError(f"invalid every_n_iter={every_n_iter}.")
        if not isinstance(tensors, dict):
            self._tag_order = [getattr(t, "name", t) for t in tensors]
            tensors = {getattr(t, "name", t): t for t in tensors}
        else:
            self._tag_order = sorted(tensors)
        self._tensors = tensors
        self._formatter = formatter
        self._log_at_end = at_end
        self._timer = None if only_end else SecondOrStepTimer(every_secs=every_n_secs,
                                                             every_steps=every_n_iter)
        self._iter = 0

    def begin(self) -> None:
        if self._timer:
            self._timer.reset()
        self._iter = 0

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        self._should = bool(self._timer and self._timer.should_trigger_for_step(self._iter))
        return SessionRunArgs(self._tensors) if self._should else None

    def _log(self, values: dict[str, Any]) -> None:
        if self._formatter:
            log.info(self._formatter(values))
            return
        msg = ", ".join(f"{tag} = {values[tag]}" for tag in self._tag_order)
        if self._timer:
            elapsed, _ = self._timer.update_last_triggered_step(self._iter)
            if elapsed is not None:
                msg += f" ({elapsed:.3f} sec)"
        log.info("%s", msg)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        if self._should:
            self._log(run_values.results)
        self._iter += 1

    def end(self, session: Any) -> None:
        if self._log_at_end:
            self._log(session.run(self._tensors))


class NanLossDuringTrainingError(RuntimeError):
    """Raised by :class:`NanTensorHook` ("NaN loss during training.")."""

    def __str__(self) -> str:
        return "NaN loss during training."


class NanTensorHook(SessionRunHook):
    """Raises (or requests stop) when ``loss_tensor`` is NaN or infinite."""

    def __init__(self, loss_tensor: Any, fail_on_nan_loss: bool = True):
        self._loss, self._fail = loss_tensor, fail_on_nan_loss

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        return SessionRunArgs(self._loss)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        if not np.all(np.isfinite(run_values.results)):
            if self._fail:
                log.error("Model diverged with loss = NaN.")
                raise NanLossDuringTrainingError
            log.warning("Model diverged with loss = NaN.")
            run_context.request_stop()


class StepCounterHook(SessionRunHook):
    """Measures global steps per second; ``steps_per_sec`` holds the last figure. With
    ``output_dir`` (its ``FileWriterCache`` writer, shared with the other hooks writing
    there, as TF1) or ``summary_writer`` (a ``cs.summary.FileWriter``), flushed in
    ``end``, each figure is also written as the scalar ``global_step/sec``, as TF1."""

    def __init__(self, every_n_steps: int | None = 100, every_n_secs: float | None = None,
                 output_dir: str | None = None, summary_writer: Any = None):
        if (every_n_steps is None) == (every_n_secs is None):
            raise CkptsyncValueError(
                "exactly one of every_n_steps and every_n_secs should be provided.")
        self._timer = SecondOrStepTimer(every_steps=every_n_steps, every_secs=every_n_secs)
        self.steps_per_sec: float | None = None
        self._output_dir, self._writer = output_dir, summary_writer
        self._last_global_step: int | None = None

    def begin(self) -> None:
        self._global_step_tensor = get_global_step()
        if self._global_step_tensor is None:
            raise CkptsyncRuntimeError("Global step should be created to use StepCounterHook.")
        if self._writer is None and self._output_dir:
            self._writer = _summary.FileWriterCache.get(self._output_dir)

    def end(self, session: Any) -> None:
        if self._writer is not None:
            write_or_warn(self._writer.flush)

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        return SessionRunArgs(self._global_step_tensor)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        stale = int(run_values.results)
        self._warn_if_not_increased(stale)
        if not self._timer.should_trigger_for_step(stale + 1):
            return
        # As TF1: the step after this run, read again (another hook may have moved it).
        step = int(run_context.session.run(self._global_step_tensor))
        if self._timer.should_trigger_for_step(step):
            secs, steps = self._timer.update_last_triggered_step(step)
            if secs is not None and steps is not None and secs > 0:
                self.steps_per_sec = steps / secs
                tag = f"{self._global_step_tensor.op.name}/sec"
                log.info("%s: %g", tag, self.steps_per_sec)
                if self._writer is not None:
                    cls = _summary.Summary
                    write_or_warn(self._writer.add_summary, cls(
                        value=[cls.Value(tag=tag, simple_value=self.steps_per_sec)]), step)

    def _warn_if_not_increased(self, stale: int) -> None:
        # As TF1: a warning, the first 5 times in the process, when the step read before
        # this run equals the one read before the previous run.
        global _not_increased_warnings
        if stale == self._last_global_step and _not_increased_warnings < 5:
            _not_increased_warnings += 1
            log.warning(
                "It seems that global step (tf.train.get_global_step) has not been increased. "
                "Current value (could be stable): %s vs previous value: %s. You could increase "
                "the global step by passing tf.train.get_global_step() to "
                "Optimizer.apply_gradients or Optimizer.minimize.", stale, self._last_global_step)
        self._last_global_step = stale


class FinalOpsHook(SessionRunHook):
    """Evaluates ``final_ops`` in ``end()``; the values are in ``final_ops_values``."""

    def __init__(self, final_ops: Any, final_ops_feed_dict: Any = None):
        self._final_ops, self._feed = final_ops, final_ops_feed_dict
        self._values: Any = None

    @property
    def final_ops_values(self) -> Any:
        return self._values

    def end(self, session: Any) -> None:
        if self._final_ops is not None:
            self._values = session.run(self._final_ops, feed_dict=self._feed)
