"""The ``SessionRunHook`` protocol, as TF1's ``tf.train.SessionRunHook``.

Call order in a :class:`~ckptsync.train.MonitoredSession`: ``begin`` (graph still
mutable) -> graph finalized -> session created and restored/initialized ->
``after_create_session`` -> per ``run``: every ``before_run``, one merged ``Session.run``,
every ``after_run`` -> ``end`` on a clean close.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["SessionRunHook", "SessionRunArgs", "SessionRunContext", "SessionRunValues"]


class SessionRunHook:
    """Extends ``MonitoredSession.run``; every method is a no-op by default."""

    def begin(self) -> None:
        """Called once before the graph is finalized; may add ops."""

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Called after every session creation (also after recovery from an error)."""

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        """Returns extra fetches/feeds to merge into the coming run, or None."""
        return None

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """``run_values.results`` mirrors the fetches this hook asked for."""

    def end(self, session: Any) -> None:
        """Called on a clean close (not after an exception)."""


class SessionRunArgs(NamedTuple):
    """What a hook adds to a run: ``fetches`` (any structure), ``feed_dict``, ``options``."""

    fetches: Any
    feed_dict: Any = None
    options: Any = None


class SessionRunValues(NamedTuple):
    """What a hook gets back: ``results`` in the structure of its fetches."""

    results: Any
    options: Any = None
    run_metadata: Any = None


class SessionRunContext:
    """One per ``run``, shared by all hooks: the user's args and a stop flag."""

    def __init__(self, original_args: SessionRunArgs, session: Any):
        self._original_args = original_args
        self._session = session
        self._stop_requested = False

    @property
    def original_args(self) -> SessionRunArgs:
        return self._original_args

    @property
    def session(self) -> Any:
        return self._session

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested

    def request_stop(self) -> None:
        """Stops the loop after this run (``should_stop()`` becomes True)."""
        self._stop_requested = True
