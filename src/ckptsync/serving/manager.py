"""The manager: picks a version by policy, loads it off the request path, swaps one
reference (TF Serving's ``AspiredVersionsManager`` + ``ServableHandle``).

Who calls what::

    CheckpointSource ──callback(AspiredVersions)──▶ ModelManager._on_aspired   (store, notify)
    load thread: policy.candidates() ─▶ load_snapshot() ─▶ self._current = snapshot (swap)
    request:     snap = manager.acquire()  ... servable.run(snap.params, ...)   (no lock)
    admin:       manager.pin(v) / manager.unpin()  (policy change; the load thread acts)

A request takes the snapshot once and finishes on it, so no response mixes two versions;
the old snapshot is freed when its last request drops it (its state goes UNLOADING -> END).
A version that fails to load or verify, or that the optional gate refuses, never replaces
the one being served: its status records the error (state END, TF error code and message)
and it is retried with exponential backoff, ``max_load_attempts`` times in all; after that
it is retried only once its file changes. With nothing served yet, the latest policy falls
back to the newest older checkpoint that loads. A checkpoint whose file vanished
(retention) makes the manager rescan and go to the newest one.

Memory: at most two snapshots are resident, old + new: before loading, the load thread
waits (up to ``unload_wait_s``) for the previous old snapshot's last request to end.
``free_before_load`` drops the served snapshot before loading the next one (half the peak,
a short unavailability; a refused version then brings the previous one back).

Watchdog: a load running longer than ``load_timeout_s`` (a damaged file can hang h5py)
marks that version failed with DEADLINE_EXCEEDED and the loader not alive (``/healthz``
answers 503 so an orchestrator restarts the process); the last good version keeps serving.

Thread-safety: every public method may be called from any thread. ``acquire`` takes no
lock (one attribute read).

The version records (states, status, retries, retirement, watchdog, health) are in
:mod:`._versions`, the base of :class:`ModelManager`.

Example:
    >>> with ModelManager(servable, "ckpts") as manager:  # doctest: +SKIP
    ...     snap = manager.wait_for_version(100, timeout_s=10)
    ...     inputs = validate_inputs(servable.signature, {"x": x})  # dtype, shape
    ...     outputs = servable.run(snap.params, inputs)
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref

from ..checkpoint._read_process import CheckpointReadProcess
from ..errors import (
    FAILED_PRECONDITION,
    UNKNOWN,
    DeadlineExceededError,
    FailedPreconditionError,
    NotFoundError,
    OpError,
    UnavailableError,
)
from ._source_process import ProcessCheckpointSource
from ._versions import ManagerStats, VersionState, _Record, _VersionBook
from .gate import Candidate, Gate, run_gate
from .loader import Snapshot, load_snapshot
from .policy import VersionPolicy
from .servable import Servable
from .source import AspiredVersion, AspiredVersions, CheckpointSource

__all__ = ["VersionState", "ManagerStats", "ModelManager"]

logger = logging.getLogger(__name__)


class ModelManager(_VersionBook):
    """Serves one model: the snapshot of the version its policy picks from ``source_dir``.

    Args:
        servable: the model; says which variables a checkpoint must provide.
        source_dir: the checkpoint directory (may not exist yet).
        policy: ``"latest"``, a pinned version (int), or a :class:`VersionPolicy`.
        poll: watch with polling (NFS, no inotify).
        rescan_interval_s: backstop rescan period of the source, seconds.
        allow_nonfinite: serve checkpoints holding NaN/Inf.
        retry_initial_s: first retry delay after a failed load, seconds; doubles per
            failure of the same version up to ``retry_max_s``.
        retry_max_s: longest retry delay, seconds.
        max_status_versions: how many finished versions status remembers.
        gate: ``gate(Candidate) -> bool | (bool, str)``, called before a version is served
            under the latest policy (see :mod:`.gate`); None accepts every verified version.
        max_load_attempts: loads of one version before it is given up (until its file
            changes); >= 1.
        load_timeout_s: a load running longer is reported stuck (None: never).
        free_before_load: drop the served snapshot before loading the next one.
        unload_wait_s: longest wait for an old snapshot's requests before loading anyway.
        read_in_subprocess: read and verify checkpoints in a worker process
            (:class:`~ckptsync.checkpoint._read_process.CheckpointReadProcess`) and map
            the result as shared memory, so that loading never holds this process's
            interpreter lock and a file that crashes HDF5 kills only the worker. False
            reads on the load thread.
        watch_in_subprocess: run the source (watchdog's observer and the rescans) in a
            child process (:class:`~._source_process.ProcessCheckpointSource`), so that
            its threads never take this process's interpreter lock from requests; False
            watches in this process.
    """

    def __init__(
        self,
        servable: Servable,
        source_dir: str | os.PathLike[str],
        policy: str | int | VersionPolicy = "latest",
        *,
        poll: bool = False,
        rescan_interval_s: float = 1.0,
        allow_nonfinite: bool = False,
        retry_initial_s: float = 1.0,
        retry_max_s: float = 60.0,
        max_status_versions: int = 16,
        gate: Gate | None = None,
        max_load_attempts: int = 5,
        load_timeout_s: float | None = 300.0,
        free_before_load: bool = False,
        unload_wait_s: float = 30.0,
        read_in_subprocess: bool = True,
        watch_in_subprocess: bool = True,
    ):
        if not 0 < retry_initial_s <= retry_max_s:
            raise ValueError(
                f"need 0 < retry_initial_s <= retry_max_s, got {retry_initial_s} and {retry_max_s}"
            )
        if max_load_attempts < 1:
            raise ValueError(f"max_load_attempts must be >= 1, got {max_load_attempts}")
        if load_timeout_s is not None and load_timeout_s <= 0:
            raise ValueError(f"load_timeout_s must be > 0 or None, got {load_timeout_s}")
        self.servable = servable
        self.source_dir = os.fspath(source_dir)
        self._policy = VersionPolicy.parse(policy)
        self._allow_nonfinite = allow_nonfinite
        self._retry_initial_s = retry_initial_s
        self._retry_max_s = retry_max_s
        self._max_status_versions = max_status_versions
        self._gate = gate
        self._max_load_attempts = max_load_attempts
        self._load_timeout_s = load_timeout_s
        self._close_timeout_s = 5.0
        self._free_before_load = free_before_load
        self._unload_wait_s = unload_wait_s
        self._poll = poll
        self._cond = threading.Condition(threading.RLock())
        self._current: Snapshot | None = None
        self._last_served: int | None = None  # kept by free_before_load, unlike _current
        self._listing = AspiredVersions(None, ())
        self._records: dict[int, _Record] = {}
        self._stats = ManagerStats()
        self._seq = 0  # loads finished, successful or not
        self._loading: tuple[_Record, float] | None = None  # (record, monotonic start)
        self._stuck = False  # the watchdog fired for the load in progress
        self._unloading: list[weakref.ref[Snapshot]] = []
        self._freed = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._read_in_subprocess = read_in_subprocess
        self._reader: CheckpointReadProcess | None = None
        source_cls = ProcessCheckpointSource if watch_in_subprocess else CheckpointSource
        self._source: CheckpointSource | ProcessCheckpointSource = source_cls(
            self.source_dir, self._on_aspired, poll=poll, rescan_interval_s=rescan_interval_s
        )

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> ModelManager:
        """Starts the load thread and the source. Idempotent; returns self."""
        if self._stop:
            raise RuntimeError("ModelManager was closed; create a new one")
        if self._thread is not None:
            return self
        if self._read_in_subprocess:
            try:
                self._reader = CheckpointReadProcess()
            except OSError as e:  # no processes here: read on the load thread
                logger.warning("cannot start the checkpoint reader process (%s); reading "
                               "checkpoints in this process", e)
        self._thread = threading.Thread(
            target=self._load_loop, name="ckptsync-manager-loader", daemon=True
        )
        self._thread.start()
        self._source.start()
        return self

    def close(self) -> None:
        """Stops the source and the load thread (waits for a load in progress). Idempotent."""
        self._source.close()
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._freed.set()
        if self._reader is not None:
            self._reader.close()  # bounded: a stuck read has its worker killed
        if self._thread is not None:
            # A load stuck in a user's gate or a hung read cannot be interrupted: give it a
            # moment, then leave the (daemon) thread behind so shutdown stays bounded.
            self._thread.join(timeout=self._close_timeout_s)
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
            UnavailableError: nothing is loaded yet (``version`` None).
            NotFoundError: ``version`` is not the one being served.
        """
        snap = self._current  # one read: the whole request uses this snapshot
        if version is None:
            if snap is None:
                pinned = self._policy.pinned
                waiting = ("a checkpoint" if pinned is None
                           else f"version {pinned} (the server is pinned to it)")
                raise UnavailableError(
                    None,
                    None,
                    f"no version of the model is loaded yet; waiting for {waiting} in "
                    f"{self.source_dir}",
                )
            return snap
        if snap is None or snap.version != version:
            serving = "nothing" if snap is None else f"version {snap.version}"
            raise NotFoundError(
                None, None, f"version {version} is not being served (serving {serving})"
            )
        return snap

    @property
    def current(self) -> Snapshot | None:
        """The snapshot being served, or None."""
        return self._current

    @property
    def version(self) -> int | None:
        """The version being served, or None."""
        snap = self._current
        return None if snap is None else snap.version

    def _serving(self) -> str:
        """For log lines: "still serving version N" or "nothing served yet"."""
        version = self.version
        return "nothing served yet" if version is None else f"still serving version {version}"

    @property
    def ready(self) -> bool:
        """True once a version is AVAILABLE (stays True during a swap)."""
        return self._current is not None

    @property
    def alive(self) -> bool:
        """True while the load thread runs (and is not stuck) and the source is alive."""
        self._check_watchdog()
        return bool(
            self._thread and self._thread.is_alive() and not self._stuck and self._source.alive
        )

    @property
    def stats(self) -> ManagerStats:
        """A copy of the reload counters."""
        with self._cond:
            return ManagerStats(**vars(self._stats))

    @property
    def policy(self) -> VersionPolicy:
        return self._policy

    def set_policy(self, policy: str | int | VersionPolicy) -> None:
        """Changes the version policy (pin to roll back; ``"latest"`` to unpin); returns at
        once, the load thread acts on it."""
        with self._cond:
            self._policy = VersionPolicy.parse(policy)
            self._cond.notify_all()

    def pin(self, version: int, timeout_s: float = 10.0) -> Snapshot:
        """Pins ``version`` and waits until it is served (a rollback).

        Args:
            version: the global step to serve; it must be named by the state file or be a
                finished ``*-<version>.h5`` in the directory.
            timeout_s: how long to wait for the load, seconds.

        Returns:
            The snapshot of ``version``, now being served.

        Raises:
            NotFoundError: no checkpoint of ``version`` exists; the policy is unchanged.
            FailedPreconditionError: ``version`` failed to load or verify; the previous
                policy is restored and the served version is unchanged.
            DeadlineExceededError: still loading after ``timeout_s``; it stays pinned.
        """
        policy = VersionPolicy.parse(version)
        deadline = time.monotonic() + timeout_s
        with self._cond:
            if not policy.candidates(self._listing, self.source_dir):
                raise NotFoundError(
                    None,
                    None,
                    f"version {version} not found: the state file in {self.source_dir} does "
                    f"not name it and there is no finished *-{version}.h5 there",
                )
            previous, self._policy = self._policy, policy
            rec = self._records.get(version)
            if rec is not None and rec.error_code:
                rec.failures, rec.retry_at_s = 0, 0.0  # an explicit request: try it now
            seq0 = self._seq
            self._cond.notify_all()
            while True:
                snap = self._current
                if snap is not None and snap.version == version:
                    return snap
                snap = None  # holding it while waiting would stop it being freed
                rec = self._records.get(version)
                if rec is not None and rec.finished_seq > seq0 and rec.error_code:
                    if self._policy == policy:
                        self._policy = previous
                        self._cond.notify_all()
                    raise FailedPreconditionError(
                        None,
                        None,
                        f"cannot pin version {version}: {rec.error_message}; the policy stays "
                        f"{_describe(previous)}",
                    )
                left = deadline - time.monotonic()
                if left <= 0 or self._stop:
                    raise DeadlineExceededError(
                        None,
                        None,
                        f"version {version} is pinned but was not loaded within {timeout_s} s; "
                        "it keeps loading (see the model's status)",
                    )
                self._cond.wait(left)

    def unpin(self) -> None:
        """Returns to the latest policy (the load thread moves to the newest version)."""
        self.set_policy("latest")

    def wait_for_version(self, step: int, timeout_s: float) -> Snapshot:
        """Blocks until a version >= ``step`` is served; returns its snapshot.

        Raises:
            DeadlineExceededError: not within ``timeout_s`` seconds (the message carries
                the last load error, if any).
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                snap = self._current
                if snap is not None and snap.version >= step:
                    return snap
                served = "nothing" if snap is None else f"version {snap.version}"
                snap = None  # holding it while waiting would stop it being freed
                left = deadline - time.monotonic()
                if left <= 0 or self._stop:
                    break
                self._cond.wait(left)
            errors = [r for r in self._records.values() if r.error_message]
        last = f"; last error: {errors[-1].error_message}" if errors else ""
        raise DeadlineExceededError(
            None,
            None,
            f"no version >= {step} was served within {timeout_s} s (serving {served}){last}",
        )

    def rescan(self) -> None:
        """Re-reads the state file now (normally the source does this on its own)."""
        self._source.rescan()

    # -- the load thread -----------------------------------------------------------------
    def _on_aspired(self, listing: AspiredVersions) -> None:
        with self._cond:
            self._listing = listing
            self._cond.notify_all()

    def _load_loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stop:
                        return
                    target, wait_s = self._next_target()
                    if target is not None:
                        break
                    self._cond.wait(wait_s)
                rec = self._records.get(target.version)
                if rec is None or rec.prefix != target.prefix:
                    rec = self._records[target.version] = _Record(
                        target.version, target.prefix, VersionState.LOADING
                    )
                rec.state = VersionState.LOADING
                following_latest = self._policy.pinned is None  # as the target was chosen
                gated = self._gate is not None and following_latest
            try:
                if self._free_before_load:
                    self._retire_current(keep=target)
                self._wait_for_old_snapshots()
                with self._cond:
                    self._loading = (rec, time.monotonic())
                self._load(target, rec, gated, following_latest)
            except Exception:  # a bug here must not kill the thread that does the swaps
                logger.exception("unexpected error loading %s", target.prefix)
                with self._cond:
                    rec.state, rec.retry_at_s = VersionState.END, time.monotonic() + 1.0
            finally:
                with self._cond:
                    self._loading, self._stuck = None, False

    def _load(self, target: AspiredVersion, rec: _Record, gated: bool,
              following_latest: bool) -> None:
        logger.info("loading version %d from %s", target.version, target.prefix)
        try:
            snap = load_snapshot(
                target.prefix, self.servable, self._allow_nonfinite, version=target.version,
                read=None if self._reader is None else self._reader.read,
            )
        except Exception as e:
            code = e.error_code if isinstance(e, OpError) else UNKNOWN
            vanished = isinstance(e, NotFoundError) and not os.path.exists(target.prefix + ".h5")
            self._failed(rec, code, str(e), vanished)
            if vanished:
                logger.warning("%s vanished before it was read; rescanning", target.prefix)
                self._source.rescan()
            else:
                logger.error("refusing version %d (%s): %s", target.version, self._serving(), e)
            return
        if gated and self._gate is not None:
            accepted, reason = run_gate(self._gate, Candidate(self.servable, snap, self._current))
            if not accepted:
                self._failed(rec, FAILED_PRECONDITION, reason, rejected=True)
                # Expected behaviour (the gate's job), not a fault: a warning.
                logger.warning("refusing version %d (%s): %s", target.version,
                               self._serving(), reason)
                return
        with self._cond:
            if self._stop:  # closed while loading: serve nothing new
                return
            old, self._current = self._current, snap  # the swap
            previous, self._last_served = self._last_served, snap.version
            went_back = (following_latest and self._policy.pinned is None
                         and previous is not None and snap.version < previous)
            rec.state, rec.error_code, rec.error_message = VersionState.AVAILABLE, 0, ""
            rec.failures, rec.retry_at_s = 0, 0.0
            self._seq += 1
            rec.finished_seq = self._seq
            self._stats.reloads_succeeded += 1
            self._stats.load_duration_s_sum += snap.load_duration_s
            self._stats.last_load_duration_s = snap.load_duration_s
            if old is not None and old is not snap:
                self._retire(old)
            self._prune()
            self._cond.notify_all()
        logger.info(
            "serving version %d (%.1f ms load, %d bytes)",
            snap.version,
            snap.load_duration_s * 1e3,
            snap.nbytes,
        )
        if went_back:
            # The state file is the source of truth (TF1's latest_checkpoint), so the
            # latest can go back: a trainer restarted without resuming, a restored backup.
            logger.warning(
                "serving version %d, older than version %d which it replaces: the state "
                "file now names it as the latest (a trainer started over without resuming, "
                "or the directory was rolled back); pin a version to serve another one",
                snap.version, previous)


def _describe(policy: VersionPolicy) -> str:
    return "latest" if policy.pinned is None else f"pinned to version {policy.pinned}"
