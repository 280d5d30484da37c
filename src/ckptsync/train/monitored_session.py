"""Monitored sessions, as TF1's ``tf.train.MonitoredSession`` family.

A monitored session finalizes the graph, creates a session (restoring the latest
checkpoint of ``checkpoint_dir`` if there is one, else running the initializers), calls
the hooks around every ``run``, recovers from ``AbortedError``/``UnavailableError`` by
re-creating the session from the latest checkpoint and retrying the run, and treats
``OutOfRangeError``/``StopIteration`` as a clean end of input inside ``with``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from .. import checkpoint as ckpt
from .. import summary as _summary
from ..checkpoint.state import NotRegularFileError, StateFileError, read_checkpoint_state
from ..errors import (
    AbortedError,
    CkptsyncRuntimeError,
    DataLossError,
    OutOfRangeError,
    UnavailableError,
)
from ..graph import Graph, GraphKeys, get_default_graph
from ..ops.state_ops import group
from ..session import Session
from ..variables import (
    global_variables_initializer,
    local_variables_initializer,
    report_uninitialized_variables,
)
from .basic_hooks import CheckpointSaverHook, StepCounterHook
from .saver import Saver
from .session_run_hook import SessionRunArgs, SessionRunContext, SessionRunHook, SessionRunValues
from .summary_hooks import SummarySaverHook

__all__ = [
    "Scaffold", "ChiefSessionCreator", "WorkerSessionCreator", "MonitoredSession",
    "SingularMonitoredSession", "MonitoredTrainingSession",
]

log = logging.getLogger("ckptsync.train")
USE_DEFAULT = object()


class Scaffold:
    """Ops and the saver a monitored session needs; defaults filled in by ``finalize``."""

    def __init__(self, init_op: Any = None, init_feed_dict: Any = None, init_fn: Any = None,
                 ready_op: Any = None, ready_for_local_init_op: Any = None,
                 local_init_op: Any = None, summary_op: Any = None, saver: Any = None,
                 copy_from_scaffold: Any = None):
        self._init_op, self._init_feed_dict, self._user_init_fn = init_op, init_feed_dict, init_fn
        self._local_init_op, self._saver = local_init_op, saver
        self._summary_op = summary_op
        self._finalized = False

    @property
    def init_op(self) -> Any:
        return self._init_op

    @property
    def local_init_op(self) -> Any:
        return self._local_init_op

    @property
    def summary_op(self) -> Any:
        """The summary op (default: ``merge_all`` of ``SUMMARIES``, kept in
        ``SUMMARY_OP``); ``None`` when the graph has no summaries."""
        return self._summary_op

    @property
    def saver(self) -> Any:
        return self._saver

    @property
    def init_fn(self) -> Any:
        return self._user_init_fn

    def finalize(self) -> Scaffold:
        """Creates missing defaults, then finalizes the graph.

        Raises:
            RuntimeError: more than one item in the ``SAVERS`` collection.
        """
        if self._finalized:
            return self
        g = get_default_graph()
        if self._init_op is None:  # kept in INIT_OP, as TF1's: a finalized graph reuses it
            self._init_op = _get_or_default(g, GraphKeys.INIT_OP, global_variables_initializer)
        if self._local_init_op is None:
            self._local_init_op = _get_or_default(g, GraphKeys.LOCAL_INIT_OP,
                                                  local_variables_initializer)
        if self._summary_op is None:
            found = g.get_collection(GraphKeys.SUMMARY_OP)
            if len(found) > 1:
                raise CkptsyncRuntimeError(f"More than one item in the collection "
                                           f"\"{GraphKeys.SUMMARY_OP}\".")
            self._summary_op = found[0] if found else _summary.merge_all()
            if self._summary_op is not None and not found:
                g.add_to_collection(GraphKeys.SUMMARY_OP, self._summary_op)
        if self._saver is None:
            savers = g.get_collection(GraphKeys.SAVERS)
            if len(savers) > 1:
                raise CkptsyncRuntimeError(
                    f"More than one item in the collection \"{GraphKeys.SAVERS}\". Please "
                    "indicate which one to use by passing it to the scaffold.")
            if savers:
                self._saver = savers[0]
            else:
                self._saver = Saver(sharded=True, allow_empty=True)
                g.add_to_collection(GraphKeys.SAVERS, self._saver)
        if hasattr(self._saver, "build"):  # as TF1: a Saver(defer_build=True) is built here
            self._saver.build()
        g.finalize()
        self._finalized = True
        return self


def _get_or_default(g: Any, key: str, default: Callable[[], Any]) -> Any:
    """The one op in collection ``key``, else ``default()`` added there (TF1's
    ``Scaffold.get_or_default``), so a second session on the finalized graph makes none.

    Raises:
        RuntimeError: more than one item in the collection.
    """
    found = g.get_collection(key)
    if len(found) > 1:
        raise CkptsyncRuntimeError(f"More than one item in the collection \"{key}\".")
    if found:
        return found[0]
    op = default()
    g.add_to_collection(key, op)
    return op


def _refuse_broken_state(checkpoint_dir: str) -> None:
    """Unlike TF1 (whose ``latest_checkpoint`` is None for a broken state file, so training
    starts over at step 0 and overwrites it): raises DataLossError naming the file."""
    try:
        read_checkpoint_state(checkpoint_dir)
    except NotRegularFileError:
        raise
    except StateFileError as e:
        raise DataLossError(None, None, (
            f"{e}. Refusing to train in {checkpoint_dir}: starting over at step 0 would "
            "overwrite the state file and take its checkpoint version backwards. Repair the "
            "state file (its model_checkpoint_path naming the newest checkpoint), or remove "
            "it to start over deliberately.")) from e
    except ValueError:
        pass  # the other refusals are latest_checkpoint's own


class ChiefSessionCreator:
    """Restores from ``checkpoint_dir``'s latest checkpoint, else initializes.

    Raises (from ``create_session``):
        DataLossError: ``checkpoint_dir``'s ``checkpoint`` state file exists but cannot be
            read or parsed (TF1 logs it and starts over at step 0; see docs/estimator.md).
    """

    def __init__(self, scaffold: Scaffold | None = None, master: str = "", config: Any = None,
                 checkpoint_dir: str | None = None,
                 checkpoint_filename_with_path: str | None = None):
        self._scaffold = scaffold or Scaffold()
        self._checkpoint_dir = checkpoint_dir
        self._checkpoint_path = checkpoint_filename_with_path
        self.restored_from: str | None = None

    def create_session(self) -> Session:
        self._scaffold.finalize()
        sess = Session(graph=get_default_graph())
        path = self._checkpoint_path
        if path is None and self._checkpoint_dir:
            _refuse_broken_state(self._checkpoint_dir)
            path = ckpt.latest_checkpoint(self._checkpoint_dir)
        saver = self._scaffold.saver
        if path:
            saver.restore(sess, path)
            try:
                state = ckpt.get_checkpoint_state(self._checkpoint_dir) \
                    if self._checkpoint_dir else None
            except ValueError as e:  # a broken state file: keep going with what we restored
                log.warning("Not adopting older checkpoints: %s", e)
                state = None
            if state is not None and hasattr(saver, "recover_last_checkpoints"):
                saver.recover_last_checkpoints(state.all_model_checkpoint_paths)
            self.restored_from = path
            log.info("Restored from checkpoint %s.", path)
        else:
            sess.run(self._scaffold.init_op, feed_dict=self._scaffold._init_feed_dict)
            if self._scaffold.init_fn is not None:
                self._scaffold.init_fn(self._scaffold, sess)
            self.restored_from = None
        if self._scaffold.local_init_op is not None:
            sess.run(self._scaffold.local_init_op)
        missing = report_uninitialized_variables(session=sess)
        if missing:
            raise CkptsyncRuntimeError(
                f"Init operations did not make model ready. Init op: {self._scaffold.init_op}, "
                f"init fn: {self._scaffold.init_fn}, error: Variables not initialized: "
                f"{', '.join(missing)}")
        return sess


class WorkerSessionCreator(ChiefSessionCreator):
    """A non-chief worker: never restores; initializes its own copy (no parameter server
    here, so ranks are made equal by ``BroadcastGlobalVariablesHook``)."""

    def __init__(self, scaffold: Scaffold | None = None, master: str = "", config: Any = None,
                 max_wait_secs: float = 30 * 60):
        super().__init__(scaffold=scaffold)


class _MonitoredSessionBase:
    def __init__(self, session_creator: Any, hooks: list[SessionRunHook] | None,
                 should_recover: bool):
        self._graph: Graph = get_default_graph()
        self._hooks = list(hooks or [])
        self._creator = session_creator or ChiefSessionCreator()
        self._recover = should_recover
        self._stop = False
        self._closed = False
        for h in self._hooks:
            h.begin()
        self._sess: Session | None = None
        self._create()

    def _create(self) -> None:
        while True:
            try:
                self._sess = self._creator.create_session()
                for h in self._hooks:
                    h.after_create_session(self._sess, None)
                return
            except (AbortedError, UnavailableError) as e:
                if not self._recover:
                    raise
                log.info("Recovering from %s while creating the session.", type(e).__name__)

    @property
    def graph(self) -> Graph:
        return self._graph

    def should_stop(self) -> bool:
        return self._stop or self._closed

    def run(self, fetches: Any, feed_dict: Any = None, options: Any = None,
            run_metadata: Any = None) -> Any:
        """Runs ``fetches`` with every hook's additions merged into one ``Session.run``.

        Raises:
            RuntimeError: called after a stop was requested ("Run called even after
                should_stop requested."), or two feeds of one tensor.
        """
        if self.should_stop():
            raise CkptsyncRuntimeError("Run called even after should_stop requested.")
        while True:
            try:
                return self._run_once(fetches, feed_dict)
            except (AbortedError, UnavailableError) as e:
                if not self._recover:
                    raise
                log.info("Recovering from %s: re-creating the session from the latest "
                         "checkpoint and retrying the run.", type(e).__name__)
                self._close_raw()
                self._create()

    def run_step_fn(self, step_fn: Any) -> Any:
        class _Ctx:
            def __init__(ctx, s: Any):
                ctx.session = s

            def run_with_hooks(ctx, *a: Any, **k: Any) -> Any:
                return self.run(*a, **k)

            def request_stop(ctx) -> None:
                self._stop = True

        return step_fn(_Ctx(self._sess))

    def _run_once(self, fetches: Any, feed_dict: Any) -> Any:
        assert self._sess is not None
        ctx = SessionRunContext(SessionRunArgs(fetches, feed_dict), self._sess)
        hook_fetches: dict[int, Any] = {}
        merged_feed = dict(feed_dict) if feed_dict else {}
        user_keys = set(merged_feed)
        hook_fed: set[Any] = set()
        for i, h in enumerate(self._hooks):
            args = h.before_run(ctx)
            if args is None:
                continue
            if args.fetches is not None:
                hook_fetches[i] = args.fetches
            if args.feed_dict:
                for k, v in args.feed_dict.items():
                    if k in hook_fed:
                        raise CkptsyncRuntimeError(f"Same tensor is fed by two hooks: {k}")
                    if k in user_keys:
                        raise CkptsyncRuntimeError(
                            f"Same tensor is fed by a SessionRunHook and user: {k}")
                    hook_fed.add(k)
                    merged_feed[k] = v
        all_fetches = {"caller": fetches, "hooks": hook_fetches} if fetches is not None else \
            {"hooks": hook_fetches}
        results = self._sess.run(all_fetches, feed_dict=merged_feed or None)
        for i, h in enumerate(self._hooks):
            h.after_run(ctx, SessionRunValues(results["hooks"].get(i)))
        if ctx.stop_requested:
            self._stop = True
        return results.get("caller")

    def _close_raw(self) -> None:
        if self._sess is not None:
            self._sess.close()
            self._sess = None

    def close(self) -> None:
        self._close_internal(None)

    def _close_internal(self, exc_type: Any) -> None:
        if self._closed:
            return
        try:
            if exc_type is None and self._sess is not None:
                for h in self._hooks:
                    h.end(self._sess)
        finally:
            self._close_raw()
            self._closed = True  # the graph stays finalized, as TF1's

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        clean = exc_type in (None, OutOfRangeError, StopIteration) or (
            exc_type is not None and issubclass(exc_type, (OutOfRangeError, StopIteration)))
        self._close_internal(None if clean else exc_type)
        return clean and exc_type is not None


class MonitoredSession(_MonitoredSessionBase):
    """Session with hooks and recovery, as ``tf.train.MonitoredSession``."""

    def __init__(self, session_creator: Any = None, hooks: list[SessionRunHook] | None = None,
                 stop_grace_period_secs: float = 120):
        super().__init__(session_creator, hooks, should_recover=True)


class SingularMonitoredSession(_MonitoredSessionBase):
    """Chief-only, no recovery, with ``raw_session()``, as TF1."""

    def __init__(self, hooks: list[SessionRunHook] | None = None, scaffold: Scaffold | None = None,
                 master: str = "", config: Any = None, checkpoint_dir: str | None = None,
                 stop_grace_period_secs: float = 120,
                 checkpoint_filename_with_path: str | None = None):
        creator = ChiefSessionCreator(scaffold=scaffold, checkpoint_dir=checkpoint_dir,
                                      checkpoint_filename_with_path=checkpoint_filename_with_path)
        super().__init__(creator, hooks, should_recover=False)

    def raw_session(self) -> Session:
        assert self._sess is not None
        return self._sess


def MonitoredTrainingSession(  # noqa: N802 - TF's name
        master: str = "", is_chief: bool = True, checkpoint_dir: str | None = None,
        scaffold: Scaffold | None = None, hooks: list[SessionRunHook] | None = None,
        chief_only_hooks: list[SessionRunHook] | None = None,
        save_checkpoint_secs: Any = USE_DEFAULT, save_summaries_steps: Any = USE_DEFAULT,
        save_summaries_secs: Any = USE_DEFAULT, config: Any = None,
        stop_grace_period_secs: float = 120, log_step_count_steps: int = 100,
        max_wait_secs: float = 7200, save_checkpoint_steps: Any = USE_DEFAULT,
        summary_dir: str | None = None) -> MonitoredSession:
    """A ``MonitoredSession`` set up for training, as ``tf.train.MonitoredTrainingSession``.

    The chief restores from / saves to ``checkpoint_dir``. Hook order on the chief:
    ``chief_only_hooks``, a ``StepCounterHook``, a ``SummarySaverHook`` (when
    ``summary_dir`` and a positive summary frequency), a ``CheckpointSaverHook`` (when
    ``checkpoint_dir`` and a positive save frequency), then ``hooks``. Checkpoint frequency
    defaults to 600 s only when neither ``save_checkpoint_secs`` nor
    ``save_checkpoint_steps`` is given; summaries to every 100 steps likewise. Summaries
    and ``global_step/sec`` go to ``summary_dir``, or to ``checkpoint_dir`` when
    ``summary_dir`` is None, as TF1's (the server's checkpoint source ignores the
    ``events.out.tfevents.*`` files there).

    Raises:
        ValueError: both ``save_checkpoint_secs`` and ``save_checkpoint_steps`` given.
    """
    if save_checkpoint_secs is USE_DEFAULT and save_checkpoint_steps is USE_DEFAULT:
        save_checkpoint_secs, save_checkpoint_steps = 600, None
    elif save_checkpoint_secs is USE_DEFAULT:
        save_checkpoint_secs = None
    elif save_checkpoint_steps is USE_DEFAULT:
        save_checkpoint_steps = None
    if save_summaries_steps is USE_DEFAULT and save_summaries_secs is USE_DEFAULT:
        save_summaries_steps, save_summaries_secs = 100, None
    elif save_summaries_secs is USE_DEFAULT:
        save_summaries_secs = None
    elif save_summaries_steps is USE_DEFAULT:
        save_summaries_steps = None
    scaffold = scaffold or Scaffold()
    all_hooks: list[SessionRunHook] = []
    if not is_chief:
        creator: Any = WorkerSessionCreator(scaffold=scaffold, max_wait_secs=max_wait_secs)
        return MonitoredSession(creator, hooks=list(hooks or []),
                                stop_grace_period_secs=stop_grace_period_secs)
    all_hooks.extend(chief_only_hooks or [])
    summary_dir = summary_dir or checkpoint_dir  # as TF1's
    if log_step_count_steps and log_step_count_steps > 0 and summary_dir:
        all_hooks.append(StepCounterHook(every_n_steps=log_step_count_steps,
                                         output_dir=summary_dir))
    if summary_dir and ((save_summaries_steps and save_summaries_steps > 0)
                        or (save_summaries_secs and save_summaries_secs > 0)):
        all_hooks.append(SummarySaverHook(save_steps=save_summaries_steps,
                                          save_secs=save_summaries_secs,
                                          output_dir=summary_dir, scaffold=scaffold))
    if checkpoint_dir and ((save_checkpoint_secs and save_checkpoint_secs > 0)
                           or (save_checkpoint_steps and save_checkpoint_steps > 0)):
        os.makedirs(checkpoint_dir, exist_ok=True)
        all_hooks.append(CheckpointSaverHook(checkpoint_dir, save_steps=save_checkpoint_steps,
                                             save_secs=save_checkpoint_secs, scaffold=scaffold))
    all_hooks.extend(hooks or [])
    creator = ChiefSessionCreator(scaffold=scaffold, checkpoint_dir=checkpoint_dir)
    return MonitoredSession(creator, hooks=all_hooks,
                            stop_grace_period_secs=stop_grace_period_secs)


_ = group
