"""The version records of a :class:`~.manager.ModelManager` and their bookkeeping.

Holds :class:`VersionState` and :class:`ManagerStats` (re-exported by :mod:`.manager`),
one ``_Record`` per version the manager has tried, and :class:`_VersionBook`, the base of
``ModelManager`` with the methods over those records: the ``status`` list, failure and
retry bookkeeping (exponential backoff, give up after ``max_load_attempts`` until the file
changes), which candidate to load next, retiring an old snapshot (UNLOADING -> END when
its last request drops it), the stuck-load watchdog and ``health``. ``ModelManager`` sets
every attribute ``_VersionBook`` declares; nothing else uses this module.
"""

from __future__ import annotations

import enum
import logging
import math
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

from ..checkpoint._read_process import CheckpointReadProcess
from ..errors import DEADLINE_EXCEEDED, NotFoundError, error_code_name
from ._source_process import ProcessCheckpointSource
from .loader import Snapshot
from .policy import VersionPolicy
from .source import AspiredVersion, AspiredVersions, CheckpointSource

# The logger of the module this code came from, so logging configuration keeps applying.
logger = logging.getLogger("ckptsync.serving.manager")


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
    reloads_rejected: int = 0
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
    file_sig: tuple[int, int, int] | None = None  # the file that failed (inode, size, mtime)
    finished_seq: int = 0  # the manager's load counter when its last load ended



class _VersionBook:
    """The version-record half of ``ModelManager``: status, retries, retirement, watchdog."""

    source_dir: str
    _policy: VersionPolicy
    _retry_initial_s: float
    _retry_max_s: float
    _max_status_versions: int
    _max_load_attempts: int
    _load_timeout_s: float | None
    _unload_wait_s: float
    _poll: bool
    _cond: threading.Condition
    _current: Snapshot | None
    _listing: AspiredVersions
    _records: dict[int, _Record]
    _stats: ManagerStats
    _seq: int
    _loading: tuple[_Record, float] | None
    _stuck: bool
    _unloading: list[weakref.ref[Snapshot]]
    _freed: threading.Event
    _stop: bool
    _thread: threading.Thread | None
    _source: CheckpointSource | ProcessCheckpointSource
    _reader: CheckpointReadProcess | None

    def health(self) -> dict[str, Any]:
        """Liveness of the watcher and the loader, for ``/healthz`` and metrics.

        Returns:
            ``{"watcher": {"alive", "mode" ("events"|"poll"), "restarts", "state_error"},
            "loader": {"alive", "loading_version", "loading_for_s", "stuck",
            "reader_restarts"}}`` (``reader_restarts``: checkpoint reader processes
            replaced after dying; a dead idle one is replaced by this call).
        """
        self._check_watchdog()
        reader = self._reader
        if reader is not None:
            reader.check()
        with self._cond:
            loading = self._loading
            thread_alive = bool(self._thread and self._thread.is_alive())
            stuck = self._stuck
        return {
            "watcher": {
                "alive": self._source.alive,
                "mode": "poll" if self._poll else "events",
                "restarts": self._source.observer_restarts,
                "state_error": self._source.state_error,
            },
            "loader": {
                "alive": thread_alive and not stuck,
                "loading_version": None if loading is None else loading[0].version,
                "loading_for_s": 0.0 if loading is None else time.monotonic() - loading[1],
                "stuck": stuck,
                "reader_restarts": 0 if reader is None else reader.restarts,
            },
        }

    def status(self, version: int | None = None) -> list[dict[str, Any]]:
        """TF Serving's ``model_version_status`` list, newest first.

        Each entry: ``{"version": "1200", "state": "AVAILABLE", "status": {"error_code":
        "OK", "error_message": ""}}``.

        Raises:
            NotFoundError: ``version`` was given and the manager has no record of it.
        """
        self._check_watchdog()
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
                if rec.retry_at_s == math.inf:  # given up: only a changed file is retried
                    sig = _file_sig(cand.prefix)
                    if sig is not None and sig != rec.file_sig:
                        rec.failures, rec.retry_at_s = 0, 0.0
                        return cand, None
                    left = self._retry_max_s
                else:
                    left = rec.retry_at_s - now
                wait_s = left if wait_s is None else min(wait_s, left)
                continue
            return cand, None
        return None, wait_s

    def _failed(
        self,
        rec: _Record,
        code: int,
        message: str,
        vanished: bool = False,
        rejected: bool = False,
    ) -> None:
        with self._cond:
            if self._stuck:  # the watchdog already reported this load and counted it
                self._stats.reloads_failed -= 1
            rec.state, rec.error_code, rec.error_message = VersionState.END, code, message
            rec.failures += 1
            rec.file_sig = _file_sig(rec.prefix)
            if vanished:
                rec.retry_at_s = time.monotonic() + self._retry_max_s
            elif rejected:  # a gate's verdict is deterministic: retried when the file changes
                rec.retry_at_s = math.inf
            elif rec.failures >= self._max_load_attempts:
                rec.retry_at_s = math.inf
                rec.error_message += (
                    f" (gave up after {rec.failures} attempts; retried when the file changes)"
                )
            else:
                delay = min(self._retry_max_s, self._retry_initial_s * 2 ** (rec.failures - 1))
                rec.retry_at_s = time.monotonic() + delay
            self._seq += 1
            rec.finished_seq = self._seq
            if rejected:
                self._stats.reloads_rejected += 1
            else:
                self._stats.reloads_failed += 1
            self._prune()
            self._cond.notify_all()

    def _retire(self, old: Snapshot) -> None:
        """Marks ``old`` UNLOADING until its last request drops it (then END). Holds the lock."""
        old_rec = self._records.get(old.version)
        if old_rec is not None and old_rec.prefix == old.prefix:
            old_rec.state = VersionState.UNLOADING
            weakref.finalize(old, _mark_end, old_rec, self._freed)
        else:
            weakref.finalize(old, self._freed.set)
        self._unloading.append(weakref.ref(old))

    def _retire_current(self, keep: AspiredVersion) -> None:
        """free_before_load: stop serving the current snapshot before loading ``keep``."""
        with self._cond:
            old = self._current
            if old is None or (old.version, old.prefix) == (keep.version, keep.prefix):
                return
            self._current = None
            self._retire(old)
        logger.info("free_before_load: stopped serving version %d to load %d", old.version,
                    keep.version)
        del old

    def _wait_for_old_snapshots(self) -> None:
        """Waits until no retired snapshot is still held by a request (old + new at most)."""
        deadline = time.monotonic() + self._unload_wait_s
        while True:
            with self._cond:
                self._unloading = [r for r in self._unloading if r() is not None]
                if not self._unloading or self._stop:
                    return
            if time.monotonic() > deadline:
                logger.warning(
                    "a request has held an old snapshot for over %.0f s; loading anyway",
                    self._unload_wait_s,
                )
                return
            self._freed.wait(0.01)
            self._freed.clear()

    def _check_watchdog(self) -> None:
        """Reports a load running past ``load_timeout_s`` (lazily: from status, health)."""
        if self._load_timeout_s is None:
            return
        with self._cond:
            if self._loading is None or self._stuck:
                return
            rec, started = self._loading
            elapsed = time.monotonic() - started
            if elapsed <= self._load_timeout_s:
                return
            self._stuck = True
            serving = "nothing" if self._current is None else f"version {self._current.version}"
            rec.state, rec.error_code = VersionState.END, DEADLINE_EXCEEDED
            rec.error_message = (
                f"loading {rec.prefix}.h5 has taken {elapsed:.0f} s, more than "
                f"load_timeout_s={self._load_timeout_s:g}; the loader thread is stuck (a "
                f"damaged file can hang the HDF5 library) and no newer version can load; "
                f"still serving {serving}; restart the server"
            )
            self._stats.reloads_failed += 1
        logger.error("%s", rec.error_message)

    def _prune(self) -> None:
        """Forgets all but the newest ``max_status_versions`` finished versions."""
        done = sorted(
            (r for r in self._records.values() if r.state == VersionState.END),
            key=lambda r: r.version,
        )
        for r in done[: max(0, len(done) - self._max_status_versions)]:
            del self._records[r.version]


def _file_sig(prefix: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(prefix + ".h5")
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _mark_end(rec: _Record, freed: threading.Event) -> None:
    # Runs when the last request holding the old snapshot drops it; an attribute store is
    # atomic, so no lock (the finalizer may run on any thread, even one holding the lock).
    if rec.state == VersionState.UNLOADING:
        rec.state = VersionState.END
    freed.set()
