"""``FeedFnHook`` and ``GlobalStepWaiterHook``: two of TF1's basic session-run hooks
(``basic_session_run_hooks.py``), with TF's behaviour and messages."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..errors import CkptsyncRuntimeError
from .session_run_hook import SessionRunArgs, SessionRunContext, SessionRunHook
from .training_util import get_global_step

__all__ = ["FeedFnHook", "GlobalStepWaiterHook"]

log = logging.getLogger("ckptsync.train")


class FeedFnHook(SessionRunHook):
    """Feeds ``feed_fn()`` (a dict ``tensor -> value``) into every run, as TF1's
    ``tf.train.FeedFnHook``. ``feed_fn`` is called once per run, on the run's thread."""

    def __init__(self, feed_fn: Callable[[], dict[Any, Any]]):
        self.feed_fn = feed_fn

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        return SessionRunArgs(fetches=None, feed_dict=self.feed_fn())


class GlobalStepWaiterHook(SessionRunHook):
    """Holds the first run until the global step reaches ``wait_until_step``, as TF1's
    ``tf.train.GlobalStepWaiterHook`` (a non-chief worker that starts late): it reads the
    step every 0.5 s, as TF's (the step moves in another process, so there is nothing
    to wait on but the variable). ``wait_until_step <= 0`` never waits.

    Raises:
        RuntimeError: (from ``begin``) the graph has no global step.
    """

    POLL_S = 0.5

    def __init__(self, wait_until_step: int):
        self._wait_until_step = int(wait_until_step)

    def begin(self) -> None:
        self._worker_is_started = False
        self._global_step_tensor = get_global_step()
        if self._global_step_tensor is None:
            raise CkptsyncRuntimeError(
                "Global step should be created to use _GlobalStepWaiterHook.")

    def before_run(self, run_context: SessionRunContext) -> None:
        if self._worker_is_started:
            return None
        if self._wait_until_step <= 0:
            self._worker_is_started = True
            return None
        log.info("Waiting for global step %d before starting training.", self._wait_until_step)
        last_logged_step = 0
        while True:
            current_step = int(run_context.session.run(self._global_step_tensor))
            if current_step >= self._wait_until_step:
                self._worker_is_started = True
                return None
            if current_step - last_logged_step > 1000:
                log.info("Waiting for global step %d before starting training. Current step "
                         "is %d.", self._wait_until_step, current_step)
                last_logged_step = current_step
            time.sleep(self.POLL_S)
