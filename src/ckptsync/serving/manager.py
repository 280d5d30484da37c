"""The manager: picks a version by policy, loads it off the request path, swaps one
reference (TF Serving's ``AspiredVersionsManager`` + ``ServableHandle``).

Who calls what::

    CheckpointSource ──callback(AspiredVersions)──▶ ModelManager._on_aspired   (store, notify)
    load thread: book.next_target(policy.candidates()) ─▶ load_snapshot() [─▶ gate]
                 ─▶ book.swap(record, snapshot) | book.failed(record, ...)
    request:     snap = manager.acquire()  ... servable.run(snap.params, ...)   (no lock)
    admin:       manager.pin(v) / manager.unpin() / set_policy (the load thread acts)

A request takes the snapshot once and finishes on it, so no response mixes two versions;
the old snapshot is freed when its last request drops it (its state goes UNLOADING -> END).
A version that fails to load or verify, or that the optional gate refuses, never replaces
the one being served: its status records the error; it is retried with backoff,
``max_load_attempts`` times, then once its file changes. Only with nothing served does
latest fall back to an older checkpoint; a vanished file (retention) makes it rescan.

Memory: at most two snapshots are resident, old + new: before loading, the load thread
waits (up to ``unload_wait_s``) for the previous old snapshot's last request to end.
``free_before_load`` drops the served snapshot before loading (half the peak, a short
unavailability; a refused version then brings the previous one back).

Watchdog: a load running longer than ``load_timeout_s`` (a damaged file can hang h5py)
marks that version failed (DEADLINE_EXCEEDED) and the loader not alive (``/healthz`` 503,
so an orchestrator restarts the process); the last good version keeps serving.

Thread-safety: every public method, from any thread; ``acquire`` takes no lock.

Composition: a :class:`~.source.CheckpointSource` (or its process twin), a reader process,
a load thread calling :class:`~._cow.CopyOnWrite` (else :func:`~.loader.load_snapshot`),
a :class:`~._versions.VersionBook`, :mod:`._notices`, a :class:`~.options.ManagerOptions`.
A policy change while a version waits or loads makes the policy pick again.

Example:
    >>> from ckptsync.serving import GraphServable, ModelManager, validate_inputs
    >>> servable = GraphServable.from_model_file("model.py")
    >>> with ModelManager(servable, "ckpts") as manager:
    ...     snap = manager.wait_for_version(1200, timeout_s=30)
    ...     inputs = validate_inputs(servable.signature, {"x": x})  # dtype, shape
    ...     outputs = servable.run(snap.params, inputs)
    >>> snap.version, outputs["probabilities"].shape
    (1200, (2, 10))
"""

from __future__ import annotations

import logging
import os
import threading
import time
from functools import partial
from typing import Any

from ..errors import (
    FAILED_PRECONDITION,
    UNKNOWN,
    DeadlineExceededError,
    FailedPreconditionError,
    NotFoundError,
    OpError,
    UnavailableError,
)
from ..workers import CheckpointReadProcess
from . import _notices as notices
from ._cow import CopyOnWrite
from ._source_process import ProcessCheckpointSource
from ._versions import ManagerStats, VersionBook, VersionRecord, VersionState
from .gate import Candidate, run_gate
from .loader import Snapshot, is_model_mismatch, load_snapshot
from .options import ManagerOptions, apply_overrides
from .policy import VersionPolicy
from .servable import Servable
from .source import AspiredVersion, AspiredVersions, CheckpointSource

__all__ = ["VersionState", "ManagerStats", "ModelManager"]

logger = logging.getLogger(__name__)


class ModelManager:
    """Serves one model: the snapshot of the version its policy picks from ``source_dir``.

    Args:
        servable: the model; says which variables a checkpoint must provide.
        source_dir: the checkpoint directory (may not exist yet).
        policy: ``"latest"``, a pinned version (int), or a :class:`VersionPolicy`; the
            policy to start with (``set_policy``/``pin`` change it later).
        options: how to watch, load and retry; see :class:`~.options.ManagerOptions`
            (None: the defaults).
        **overrides: any :class:`~.options.ManagerOptions` field by name (``poll``,
            ``rescan_interval_s``, ``allow_nonfinite``, ``retry_initial_s``,
            ``retry_max_s``, ``max_status_versions``, ``gate``, ``max_load_attempts``,
            ``load_timeout_s``, ``free_before_load``, ``unload_wait_s``,
            ``read_in_subprocess``, ``watch_in_subprocess``, ``close_timeout_s``),
            applied over ``options``.

    Attributes:
        servable: the model. source_dir: the directory, as a str. options: the options.

    Raises:
        TypeError: an override that is not an option, or of the wrong type.
        ValueError: an option out of range (``CkptsyncValueError``).

    Who calls what: the source calls the manager back with each listing
    (``_on_aspired``); the load thread picks a target with the book, loads it, and has the
    book swap or record the failure; requests call :meth:`acquire`; operators call
    :meth:`pin`/:meth:`unpin`/:meth:`set_policy`; HTTP and metrics call :meth:`status`,
    :meth:`health`, :attr:`stats`. Thread-safety: all of them from any thread.
    """

    def __init__(
        self,
        servable: Servable,
        source_dir: str | os.PathLike[str],
        policy: str | int | VersionPolicy = "latest",
        *,
        options: ManagerOptions | None = None,
        **overrides: Any,
    ):
        options = apply_overrides(ManagerOptions, options, overrides, "ModelManager")
        self.options = options
        self.servable = servable
        self.source_dir = os.fspath(source_dir)
        self._policy = VersionPolicy.parse(policy)
        self._book = VersionBook(options)
        self._cond = self._book.cond  # guards _policy and _listing too; swaps notify it
        self._listing = AspiredVersions(None, ())
        self._pin_watch = notices.PinnedFileWatch()
        self.pinned_by_config = False  # a model config's specific version, not an admin pin
        self._thread: threading.Thread | None = None
        self._reader: CheckpointReadProcess | None = None
        self._cow = CopyOnWrite(servable, options.allow_nonfinite,  # the load thread's
                                load=lambda *a, **k: load_snapshot(*a, **k))
        source_cls = ProcessCheckpointSource if options.watch_in_subprocess else CheckpointSource
        self._source: CheckpointSource | ProcessCheckpointSource = source_cls(
            self.source_dir, self._on_aspired, poll=options.poll,
            rescan_interval_s=options.rescan_interval_s,
        )

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> ModelManager:
        """Starts the load thread and the source. Idempotent; returns self.

        Raises:
            RuntimeError: the manager was closed.
        """
        if self._book.closed:
            raise RuntimeError("ModelManager was closed; create a new one")
        if self._thread is not None:
            return self
        if self.options.read_in_subprocess:
            try:
                self._reader = CheckpointReadProcess(timeout_s=self.options.load_timeout_s)
            except OSError as e:  # no processes here: read on the load thread
                logger.warning("cannot start the checkpoint reader process (%s); reading "
                               "checkpoints in this process", e)
        self._cow.use_reader(self._reader, self.options.apply_in_subprocess)
        self._thread = threading.Thread(target=self._load_loop, name="ckptsync-manager-loader",
                                        daemon=True)
        self._thread.start()
        self._source.start()
        return self

    def close(self) -> None:
        """Stops the source and the load thread (waits up to ``close_timeout_s`` for a
        load in progress). Idempotent."""
        self._source.close()
        self._book.close()
        if self._reader is not None:
            self._reader.close()  # bounded: a stuck read has its worker killed
        if self._thread is not None:
            # A load stuck in a user's gate or a hung read cannot be interrupted: give it a
            # moment, then leave the (daemon) thread behind so shutdown stays bounded.
            self._thread.join(timeout=self.options.close_timeout_s)
            if self._thread.is_alive():
                logger.warning("the loader thread is still busy (a stuck load); not waiting")

    def __enter__(self) -> ModelManager:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the request path ----------------------------------------------------------------
    def acquire(self, version: int | None = None) -> Snapshot:
        """The snapshot to run one request on; use it to the request's end.

        Args:
            version: a specific version, or None for the one being served.

        Raises:
            UnavailableError: nothing is loaded yet (``version`` None); the message is
                :meth:`not_ready_reason`.
            NotFoundError: ``version`` is not the one being served.
        """
        snap = self._book.current  # one read: the whole request uses this snapshot
        if version is None:
            if snap is None:
                raise UnavailableError(None, None, self.not_ready_reason())
            return snap
        if snap is None or snap.version != version:
            serving, snap = "nothing" if snap is None else f"version {snap.version}", None
            # (snap dropped: a traceback kept in a reference cycle would keep it alive)
            raise NotFoundError(None, None, f"version {version} is not being served "
                                f"(serving {serving})")
        return snap

    @property
    def current(self) -> Snapshot | None:
        """The snapshot being served, or None."""
        return self._book.current

    @property
    def version(self) -> int | None:
        """The version being served, or None."""
        snap = self._book.current
        return None if snap is None else snap.version

    def _serving(self) -> str:
        """For log lines: "still serving version N" or "nothing served yet"."""
        version = self.version
        return "nothing served yet" if version is None else f"still serving version {version}"

    @property
    def ready(self) -> bool:
        """True once a version is AVAILABLE (stays True during a swap)."""
        return self._book.current is not None

    def not_ready_reason(self) -> str:
        """Why no version is served, one line (for the 503 of predict and ``/readyz``):
        the model does not match the checkpoints (the last load failed on missing or
        mismatched variables, naming both sides'), or what the server waits for."""
        mismatch = self._book.mismatch_error() if self._book.current is None else None
        return notices.not_loaded_message(self.source_dir, self._policy.pinned, mismatch)

    @property
    def alive(self) -> bool:
        """True while the load thread runs (and is not stuck) and the source is alive."""
        return bool(self._thread and self._thread.is_alive() and not self._book.stuck and
                    self._source.alive)

    @property
    def stats(self) -> ManagerStats:
        """A copy of the reload counters."""
        return self._book.stats

    def status(self, version: int | None = None) -> list[dict[str, Any]]:
        """TF Serving's ``model_version_status`` list, newest first.

        Each entry: ``{"version": "1200", "state": "AVAILABLE", "status": {"error_code":
        "OK", "error_message": ""}}``.

        A pinned version served from memory after its file was deleted says so in its
        ``error_message`` (code ``OK``; logged once).

        Raises:
            NotFoundError: ``version`` was given and the manager has no record of it.
        """
        entries = self._book.status(version)
        pinned = self._policy.pinned
        gone = self._pin_watch.check(self._book.current, pinned, self.pinned_by_config)
        for entry in entries:
            if gone and entry["state"] == "AVAILABLE" and not entry["status"]["error_message"]:
                entry["status"]["error_message"] = gone
        return entries

    def health(self) -> dict[str, Any]:
        """Liveness of the watcher and the loader, for ``/healthz`` and metrics.

        Returns:
            ``{"watcher": {"alive", "mode" ("events"|"poll"), "restarts", "state_error"},
            "loader": {"alive", "loading_version", "loading_for_s", "stuck",
            "reader_restarts", "served": None or {"version", "load_kind", "bytes_read"}},
            "pinned": None or {"version", "file_missing", "warning"}}`` (``reader_restarts``:
            reader processes replaced after dying; a dead idle one is replaced by this call;
            ``served``: how the served version was loaded, ``full`` or ``copy_on_write``).
        """
        loading_version, loading_for_s, stuck = self._book.loading()
        reader = self._reader
        if reader is not None:
            reader.check()
        thread_alive = bool(self._thread and self._thread.is_alive())
        pinned = self._policy.pinned
        gone = self._pin_watch.check(self._book.current, pinned, self.pinned_by_config)
        source = self._source
        return {
            "watcher": {"alive": source.alive, "mode": "poll" if self.options.poll else "events",
                        "restarts": source.observer_restarts, "state_error": source.state_error},
            "loader": {
                "alive": thread_alive and not stuck, "loading_version": loading_version,
                "loading_for_s": loading_for_s, "stuck": stuck,
                "reader_restarts": 0 if reader is None else reader.restarts,
                "served": None if (snap := self._book.current) is None else {
                    "version": snap.version, "load_kind": snap.load_kind,
                    "bytes_read": snap.bytes_read}},
            "pinned": None if pinned is None else {
                "version": pinned, "file_missing": gone is not None, "warning": gone},
        }

    @property
    def policy(self) -> VersionPolicy:
        """The version policy in force."""
        return self._policy

    def set_policy(self, policy: str | int | VersionPolicy,
                   requested_by: str | None = None) -> None:
        """Changes the version policy (pin to roll back; ``"latest"`` to unpin); returns at
        once, the load thread acts on it. ``requested_by`` (an admin route) is logged."""
        new = VersionPolicy.parse(policy)
        with self._cond:
            old, self._policy = self._policy, new
            self._cond.notify_all()
        notices.log_policy_change(old, new, requested_by, self.version)

    def pin(self, version: int, timeout_s: float = 10.0,
            requested_by: str | None = None) -> Snapshot:
        """Pins ``version`` and waits until it is served (a rollback).

        Args:
            version: the global step to serve; it must be named by the state file or be a
                finished ``*-<version>.h5`` in the directory.
            timeout_s: how long to wait for the load, seconds.
            requested_by: who asks (an admin route), for the log.

        Returns:
            The snapshot of ``version``, now being served.

        Raises:
            NotFoundError: no checkpoint of ``version`` exists; the policy is unchanged.
            FailedPreconditionError: ``version`` failed to load or verify; the previous
                policy is restored and the served version is unchanged; or a later
                ``pin``/``unpin``/``set_policy`` replaced this pin before it was served.
            DeadlineExceededError: still loading after ``timeout_s``; it stays pinned.
        """
        policy = VersionPolicy.parse(version)
        deadline = time.monotonic() + timeout_s
        book = self._book
        with self._cond:
            if not policy.candidates(self._listing, self.source_dir):
                raise NotFoundError(
                    None,
                    None,
                    f"version {version} not found: the state file in {self.source_dir} does "
                    f"not name it and there is no finished *-{version}.h5 there",
                )
            previous, self._policy = self._policy, policy
            notices.log_policy_change(previous, policy, requested_by, self.version)
            book.reset_retries(version)  # an explicit request: try it now
            seq0 = book.seq
            self._cond.notify_all()
            while True:
                snap = book.current
                if snap is not None and snap.version == version:
                    return snap
                snap = None  # holding it while waiting would stop it being freed
                error = book.load_error_since(version, seq0)
                if error is not None:
                    if self._policy == policy:
                        self._policy = previous
                        self._cond.notify_all()
                    raise FailedPreconditionError(
                        None,
                        None,
                        f"cannot pin version {version}: {error}; the policy stays "
                        f"{notices.describe(previous)}",
                    )
                if self._policy != policy:  # a later pin or unpin replaced this one
                    raise FailedPreconditionError(
                        None,
                        None,
                        f"the pin of version {version} was overtaken by a later change of "
                        f"policy; the policy is now {notices.describe(self._policy)}",
                    )
                left = deadline - time.monotonic()
                if left <= 0 or book.closed:
                    raise DeadlineExceededError(
                        None,
                        None,
                        f"version {version} is pinned but was not loaded within {timeout_s} s; "
                        "it keeps loading (see the model's status)",
                    )
                self._cond.wait(left)

    def unpin(self, requested_by: str | None = None) -> None:
        """Returns to the latest policy (the load thread moves to the newest version);
        ``requested_by`` (an admin route) is logged."""
        self.set_policy("latest", requested_by)

    def wait_for_version(self, step: int, timeout_s: float) -> Snapshot:
        """Blocks until a version >= ``step`` is served; returns its snapshot.

        Raises:
            DeadlineExceededError: not within ``timeout_s`` seconds (the message carries
                the last load error, if any).
        """
        deadline = time.monotonic() + timeout_s
        book = self._book
        with self._cond:
            while True:
                snap = book.current
                if snap is not None and snap.version >= step:
                    return snap
                served = "nothing" if snap is None else f"version {snap.version}"
                snap = None  # holding it while waiting would stop it being freed
                left = deadline - time.monotonic()
                if left <= 0 or book.closed:
                    break
                self._cond.wait(left)
            error = book.last_error()
        last = f"; last error: {error}" if error else ""
        raise DeadlineExceededError(
            None, None,
            f"no version >= {step} was served within {timeout_s} s (serving {served}){last}")

    def rescan(self) -> None:
        """Re-reads the state file now (normally the source does this on its own)."""
        self._source.rescan()

    def _on_aspired(self, listing: AspiredVersions) -> None:
        with self._cond:
            self._listing = listing
            self._cond.notify_all()
        self._pin_watch.check(self._book.current, self._policy.pinned, self.pinned_by_config)

    def _load_loop(self) -> None:
        book = self._book
        while True:
            with self._cond:
                while True:
                    if book.closed:
                        return
                    policy, where = self._policy, self.source_dir
                    target, wait_s = book.next_target(
                        policy.candidates(self._listing, where),
                        partial(policy.is_choice, checkpoint_dir=where))
                    if target is not None:
                        break
                    self._cond.wait(wait_s)
                rec = book.begin_load(target)
                gated = self.options.gate is not None and policy.pinned is None
            try:
                if self.options.free_before_load:
                    retired = book.retire_current(keep=target)
                    if retired is not None:
                        logger.info("free_before_load: stopped serving version %d to load %d",
                                    retired, target.version)
                book.wait_for_old_snapshots()
                if not self._policy.keeps(target.version, policy):  # changed meanwhile
                    book.abandon(rec, retry_s=0.0)
                    continue
                book.watch(rec)
                self._load(target, rec, gated, policy)
            except Exception:  # a bug here must not kill the thread that does the swaps
                logger.exception("unexpected error loading %s", target.prefix)
                book.abandon(rec)
            finally:
                book.unwatch()
            self._cow.served(book.current)  # digests after a full load: requests run on it

    def _load(self, target: AspiredVersion, rec: VersionRecord, gated: bool,
              chosen_under: VersionPolicy) -> None:
        logger.info("loading version %d from %s", target.version, target.prefix)
        book = self._book
        try:
            snap = self._cow.load(target, book.current)  # copy-on-write, else in full
        except Exception as e:
            code = e.error_code if isinstance(e, OpError) else UNKNOWN
            vanished = isinstance(e, NotFoundError) and not os.path.exists(target.prefix + ".h5")
            book.failed(rec, code, str(e), vanished, mismatch=is_model_mismatch(e))
            if vanished:
                logger.warning("%s vanished before it was read; rescanning", target.prefix)
                self._source.rescan()
            else:  # (closed meanwhile: the reader's end, no fault)
                (logger.info if book.closed else logger.error)(
                    "refusing version %d (%s): %s", target.version, self._serving(), e)
            return
        gate = self.options.gate
        if gated and gate is not None:
            accepted, reason = run_gate(gate, Candidate(self.servable, snap, book.current))
            if not accepted:
                book.failed(rec, FAILED_PRECONDITION, reason, rejected=True)
                # Expected behaviour (the gate's job), not a fault: a warning.
                logger.warning("refusing version %d (%s): %s", target.version,
                               self._serving(), reason)
                return
        with self._cond:
            if not self._policy.keeps(target.version, chosen_under):  # changed meanwhile
                book.abandon(rec, retry_s=0.0)
                return
            swapped, previous = book.swap(rec, snap)
            went_back = (swapped and chosen_under.pinned is None and self._policy.pinned is None
                         and previous is not None and snap.version < previous)
        if not swapped:
            return
        logger.info("serving version %d of %s (%s, %.1f ms load, %d bytes read)", snap.version,
                    self.source_dir, snap.load_kind, snap.load_duration_s * 1e3, snap.bytes_read)
        if went_back and previous is not None:
            logger.warning("%s", notices.went_back_message(snap.version, previous))

