"""``SummarySaverHook``, as TF1's ``tf.train.SummarySaverHook``: runs the summary op
every N steps or seconds and writes it, at the global step, to an event file."""

from __future__ import annotations

from typing import Any

from .. import summary as _summary
from ..errors import CkptsyncRuntimeError, CkptsyncValueError
from ..summary.writer import write_or_warn
from .basic_hooks import SecondOrStepTimer
from .session_run_hook import SessionRunArgs, SessionRunContext, SessionRunHook, SessionRunValues
from .training_util import get_global_step

__all__ = ["SummarySaverHook"]


class SummarySaverHook(SessionRunHook):
    """Saves summaries every ``save_steps`` steps or ``save_secs`` seconds (exactly one).

    The first ``run`` writes a ``SessionLog(START)`` and a summary; later ones when the
    timer triggers for the next step. The step written is the global step after the run
    (read again, as TF1). ``summary_op`` is a tensor or a list of them, or ``scaffold``'s
    ``summary_op`` (by default ``merge_all`` of ``GraphKeys.SUMMARIES``) is used.

    Args:
        output_dir: the event file's directory: the hook writes to its
            ``FileWriterCache`` writer (one event file per directory, shared with the
            other hooks writing there, as TF1); or ``summary_writer``: a ``FileWriter``.
            Either is flushed, not closed, in ``end``.

    Raises:
        ValueError: not exactly one of ``scaffold`` and ``summary_op``, or not exactly one
            of ``save_steps`` and ``save_secs``.
        RuntimeError (in ``begin``): the graph has no global step.
    """

    def __init__(self, save_steps: int | None = None, save_secs: float | None = None,
                 output_dir: str | None = None, summary_writer: Any = None,
                 scaffold: Any = None, summary_op: Any = None):
        if (scaffold is None) == (summary_op is None):
            raise CkptsyncValueError("Exactly one of scaffold or summary_op must be provided.")
        self._summary_op, self._scaffold = summary_op, scaffold
        self._output_dir, self._summary_writer = output_dir, summary_writer
        self._timer = SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)

    def begin(self) -> None:
        if self._summary_writer is None and self._output_dir:
            self._summary_writer = _summary.FileWriterCache.get(self._output_dir)
        self._next_step: int | None = None
        self._global_step_tensor = get_global_step()
        if self._global_step_tensor is None:
            raise CkptsyncRuntimeError("Global step should be created to use SummarySaverHook.")

    def _get_summary_op(self) -> list[Any] | None:
        op = self._scaffold.summary_op if self._scaffold is not None else self._summary_op
        if op is None:
            return None
        return list(op) if isinstance(op, (list, tuple)) else [op]

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        self._request_summary = (self._next_step is None
                                 or self._timer.should_trigger_for_step(self._next_step))
        requests: dict[str, Any] = {"global_step": self._global_step_tensor}
        ops = self._get_summary_op() if self._request_summary else None
        if ops is not None:
            requests["summary"] = ops
        return SessionRunArgs(requests)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        writer = self._summary_writer
        if writer is None:
            return
        global_step = int(run_values.results["global_step"]) + 1
        if self._next_step is None or self._request_summary:
            global_step = int(run_context.session.run(self._global_step_tensor))
        if self._next_step is None:
            log_cls = _summary.SessionLog
            write_or_warn(writer.add_session_log, log_cls(status=log_cls.START), global_step)
        if self._request_summary:
            self._timer.update_last_triggered_step(global_step)
            for value in run_values.results.get("summary", ()):
                write_or_warn(writer.add_summary, value, global_step)
        self._next_step = global_step + 1

    def end(self, session: Any) -> None:
        if self._summary_writer is not None:
            write_or_warn(self._summary_writer.flush)

