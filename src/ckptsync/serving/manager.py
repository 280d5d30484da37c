"""The manager: picks a version by policy, loads it off the request path, swaps one
reference (TF Serving's ``AspiredVersionsManager`` + ``ServableHandle``).

Who calls what::

    CheckpointSource ──callback(AspiredVersions)──▶ ModelManager._on_aspired   (store, notify)
    load thread: policy.candidates() ─▶ load_snapshot() ─▶ self._current = snapshot (swap)
    request:     snap = manager.acquire()  ... servable.run(snap.params, ...)   (no lock)

A request takes the snapshot once and finishes on it, so no response mixes two versions;
the old snapshot is freed when its last request drops it (its state goes UNLOADING -> END).
A version that fails to load or verify never replaces the one being served: its status
records the error (state END, TF error code and message) and it is retried with bounded
exponential backoff. With nothing served yet, the latest policy falls back to the newest
older checkpoint that loads. A checkpoint whose file vanished (retention) makes the manager
rescan and go to the newest one.

Thread-safety: every public method may be called from any thread. ``acquire`` takes no
lock (one attribute read).

Example:
    >>> with ModelManager(servable, "ckpts") as manager:  # doctest: +SKIP
    ...     snap = manager.wait_for_version(100, timeout_s=10)
    ...     outputs = servable.run(snap.params, {"x": x})
"""

from __future__ import annotations

import enum
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

from ..errors import (
    UNKNOWN,
    DeadlineExceededError,
    NotFoundError,
    OpError,
    UnavailableError,
    error_code_name,
)
from .loader import Snapshot, load_snapshot
from .policy import VersionPolicy
from .servable import Servable
from .source import AspiredVersion, AspiredVersions, CheckpointSource

__all__ = ["VersionState", "ManagerStats", "ModelManager"]

logger = logging.getLogger(__name__)


class VersionState(enum.IntEnum):
    """A version's life, ordered; values are TF Serving's ``ModelVersionStatus.State``."""

    LOADING = 20
    AVAILABLE = 30
    UNLOADING = 40
    END = 50


@dataclass
class ManagerStats:
    """Counters for metrics (a copy; read with :attr:`ModelManager.stats`)."""

    reloads_succeeded: int = 0
    reloads_failed: int = 0
    load_duration_s_sum: float = 0.0
    last_load_duration_s: float = 0.0


@dataclass
class _Record:
    version: int
    prefix: str
    state: VersionState
    error_code: int = 0
    error_message: str = ""
    failures: int = 0
    retry_at_s: float = 0.0  # time.monotonic() after which a failed version is retried


class ModelManager:
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
    ):
        if not 0 < retry_initial_s <= retry_max_s:
            raise ValueError(
                f"need 0 < retry_initial_s <= retry_max_s, got {retry_initial_s} and {retry_max_s}"
            )
        self.servable = servable
        self.source_dir = os.fspath(source_dir)
        self._policy = VersionPolicy.parse(policy)
        self._allow_nonfinite = allow_nonfinite
        self._retry_initial_s = retry_initial_s
        self._retry_max_s = retry_max_s
        self._max_status_versions = max_status_versions
        self._cond = threading.Condition(threading.RLock())
        self._current: Snapshot | None = None
        self._listing = AspiredVersions(None, ())
        self._records: dict[int, _Record] = {}
        self._stats = ManagerStats()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._source = CheckpointSource(
            self.source_dir, self._on_aspired, poll=poll, rescan_interval_s=rescan_interval_s
        )

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> ModelManager:
        """Starts the load thread and the source. Idempotent; returns self."""
        if self._stop:
            raise RuntimeError("ModelManager was closed; create a new one")
        if self._thread is not None:
            return self
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
        if self._thread is not None:
            self._thread.join(timeout=60.0)

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
                raise UnavailableError(
                    None,
                    None,
                    f"no version of the model is loaded yet; waiting for a checkpoint in "
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

    @property
    def ready(self) -> bool:
        """True once a version is AVAILABLE (stays True during a swap)."""
        return self._current is not None

    @property
    def alive(self) -> bool:
        """True while the load thread and the source are running."""
        return bool(self._thread and self._thread.is_alive() and self._source.alive)

    @property
    def stats(self) -> ManagerStats:
        """A copy of the reload counters."""
        with self._cond:
            return ManagerStats(**vars(self._stats))

    @property
    def policy(self) -> VersionPolicy:
        return self._policy

    def set_policy(self, policy: str | int | VersionPolicy) -> None:
        """Changes the version policy (pin to roll back; ``"latest"`` to unpin)."""
        with self._cond:
            self._policy = VersionPolicy.parse(policy)
            self._cond.notify_all()

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
                left = deadline - time.monotonic()
                if left <= 0 or self._stop:
                    break
                self._cond.wait(left)
            errors = [r for r in self._records.values() if r.error_message]
        last = f"; last error: {errors[-1].error_message}" if errors else ""
        served = "nothing" if snap is None else f"version {snap.version}"
        raise DeadlineExceededError(
            None,
            None,
            f"no version >= {step} was served within {timeout_s} s (serving {served}){last}",
        )

    def status(self, version: int | None = None) -> list[dict[str, Any]]:
        """TF Serving's ``model_version_status`` list, newest first.

        Each entry: ``{"version": "1200", "state": "AVAILABLE", "status": {"error_code":
        "OK", "error_message": ""}}``.

        Raises:
            NotFoundError: ``version`` was given and the manager has no record of it.
        """
        with self._cond:
            records = sorted(self._records.values(), key=lambda r: -r.version)
            if version is not None:
                records = [r for r in records if r.version == version]
                if not records:
                    raise NotFoundError(None, None, f"version {version} of the model is not known")
            return [
                {
                    "version": str(r.version),
                    "state": r.state.name,
                    "status": {
                        "error_code": error_code_name(r.error_code),
                        "error_message": r.error_message,
                    },
                }
                for r in records
            ]

    def rescan(self) -> None:
        """Re-reads the state file now (normally the source does this on its own)."""
        self._source.rescan()

    # -- the load thread -----------------------------------------------------------------
    def _on_aspired(self, listing: AspiredVersions) -> None:
        with self._cond:
            self._listing = listing
            self._cond.notify_all()

    def _next_target(self) -> tuple[AspiredVersion | None, float | None]:
        """(version to load, None) or (None, seconds until a retry is due or None)."""
        now = time.monotonic()
        wait_s: float | None = None
        current = self._current
        for cand in self._policy.candidates(self._listing, self.source_dir):
            if current is not None and (cand.version, cand.prefix) == (
                current.version,
                current.prefix,
            ):
                return None, wait_s
            rec = self._records.get(cand.version)
            if rec is not None and rec.prefix == cand.prefix and rec.retry_at_s > now:
                left = rec.retry_at_s - now
                wait_s = left if wait_s is None else min(wait_s, left)
                continue
            return cand, None
        return None, wait_s

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
            try:
                self._load(target, rec)
            except Exception:  # a bug here must not kill the thread that does the swaps
                logger.exception("unexpected error loading %s", target.prefix)
                with self._cond:
                    rec.state, rec.retry_at_s = VersionState.END, time.monotonic() + 1.0

    def _load(self, target: AspiredVersion, rec: _Record) -> None:
        logger.info("loading version %d from %s", target.version, target.prefix)
        try:
            snap = load_snapshot(
                target.prefix, self.servable, self._allow_nonfinite, version=target.version
            )
        except Exception as e:
            code = e.error_code if isinstance(e, OpError) else UNKNOWN
            vanished = isinstance(e, NotFoundError) and not os.path.exists(target.prefix + ".h5")
            with self._cond:
                rec.state, rec.error_code, rec.error_message = VersionState.END, code, str(e)
                rec.failures += 1
                delay = min(self._retry_max_s, self._retry_initial_s * 2 ** (rec.failures - 1))
                rec.retry_at_s = time.monotonic() + (self._retry_max_s if vanished else delay)
                self._stats.reloads_failed += 1
                self._prune()
            if vanished:
                logger.warning("%s vanished before it was read; rescanning", target.prefix)
                self._source.rescan()
            else:
                serving = self.version
                logger.error(
                    "refusing version %d (still serving %s): %s", target.version, serving, e
                )
            return
        with self._cond:
            old, self._current = self._current, snap  # the swap
            rec.state, rec.error_code, rec.error_message = VersionState.AVAILABLE, 0, ""
            rec.failures, rec.retry_at_s = 0, 0.0
            self._stats.reloads_succeeded += 1
            self._stats.load_duration_s_sum += snap.load_duration_s
            self._stats.last_load_duration_s = snap.load_duration_s
            if old is not None:
                old_rec = self._records.get(old.version)
                if old_rec is not None and old_rec.prefix == old.prefix and old is not snap:
                    old_rec.state = VersionState.UNLOADING
                    weakref.finalize(old, _mark_end, old_rec)
            self._prune()
            self._cond.notify_all()
        logger.info(
            "serving version %d (%.1f ms load, %d bytes)",
            snap.version,
            snap.load_duration_s * 1e3,
            snap.nbytes,
        )

    def _prune(self) -> None:
        """Forgets all but the newest ``max_status_versions`` finished versions."""
        done = sorted(
            (r for r in self._records.values() if r.state == VersionState.END),
            key=lambda r: r.version,
        )
        for r in done[: max(0, len(done) - self._max_status_versions)]:
            del self._records[r.version]


def _mark_end(rec: _Record) -> None:
    # Runs when the last request holding the old snapshot drops it; an attribute store is
    # atomic, so no lock (the finalizer may run on any thread, even one holding the lock).
    if rec.state == VersionState.UNLOADING:
        rec.state = VersionState.END
