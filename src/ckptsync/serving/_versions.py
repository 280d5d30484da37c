"""The version book of a :class:`~.manager.ModelManager`: which versions it has tried, in
which state, and the one it serves.

Holds :class:`VersionState` and :class:`ManagerStats` (re-exported by :mod:`.manager` and
the package), :class:`VersionRecord` (one per version tried) and :class:`VersionBook`,
the record keeping the manager owns and calls: the ``status`` list, failure and retry
bookkeeping (backoff, give up after ``max_load_attempts`` until the file changes), which
candidate to load next, the swap, retiring an old snapshot (UNLOADING -> END when its last
request drops it), the stuck-load watchdog. No thread, source, reader or HTTP here.
"""

from __future__ import annotations

import enum
import gc
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import DEADLINE_EXCEEDED, NotFoundError, error_code_name
from .loader import Snapshot
from .options import ManagerOptions
from .source import AspiredVersion

__all__ = ["ManagerStats", "VersionBook", "VersionRecord", "VersionState"]

# The manager's logger, so logging configuration of ckptsync.serving.manager applies.
logger = logging.getLogger("ckptsync.serving.manager")


class VersionState(enum.IntEnum):
    """A version's life, ordered; values are TF Serving's ``ModelVersionStatus.State``."""

    LOADING = 20
    AVAILABLE = 30
    UNLOADING = 40
    END = 50


@dataclass
class ManagerStats:
    """Counters for metrics (a copy; read with :attr:`ModelManager.stats`).

    Attributes:
        reloads_succeeded / reloads_failed / reloads_rejected: loads by result (rejected:
            refused by the gate).
        load_duration_s_sum: read+verify time of the successful loads, seconds.
        last_load_duration_s: that of the last successful load, seconds.
        copy_on_write_loads: successful loads made from the served version plus a
            checkpoint's changes (the rest were full loads).
        bytes_read_sum / last_bytes_read: parameter bytes the successful loads read.
    """

    reloads_succeeded: int = 0
    reloads_failed: int = 0
    reloads_rejected: int = 0
    load_duration_s_sum: float = 0.0
    last_load_duration_s: float = 0.0
    copy_on_write_loads: int = 0
    bytes_read_sum: int = 0
    last_bytes_read: int = 0


@dataclass
class VersionRecord:
    """What the book knows of one version (mutable; changed only under the book's lock,
    except the UNLOADING -> END step of a finalizer, one atomic attribute store).

    Attributes:
        version: the global step.
        prefix: the checkpoint prefix (``ckpts/model.ckpt-1200``).
        state: where it is in its life.
        error_code / error_message: TF error code and message of its last failure (0, "").
        failures: failed loads since its last success or file change.
        retry_at_s: ``time.monotonic()`` after which a failed version is retried (inf:
            given up until its file changes).
        file_sig: (inode, size, mtime_ns) of the file that failed, or None.
        finished_seq: the book's load counter when its last load ended.
        mismatch: its last failure was variables not matching the model's.
        load_kind / bytes_read: how its last successful load went (``"full"`` or
            ``"copy_on_write"``; ``""`` before one) and the parameter bytes it read.
    """

    version: int
    prefix: str
    state: VersionState
    error_code: int = 0
    error_message: str = ""
    failures: int = 0
    retry_at_s: float = 0.0
    file_sig: tuple[int, int, int] | None = None
    finished_seq: int = 0
    mismatch: bool = False
    load_kind: str = ""
    bytes_read: int = 0


class VersionBook:
    """The version records of one manager, and the snapshot it serves.

    Who calls what (the manager is the only caller)::

        load thread:  next_target(candidates) -> begin_load(target) -> watch(rec)
                      -> [read + verify + gate] -> swap(rec, snap) | failed(rec, ...)
                      -> unwatch()
        before loads: retire_current(keep) (free_before_load), wait_for_old_snapshots()
        any thread:   current (the request path), status(), loading(), stats,
                      reset_retries(v), load_error_since(v, seq), last_error()
        finalizers:   a retired snapshot's last drop marks its record END

    The manager waits on :attr:`cond` (and guards its own policy and listing with it), so a
    swap or a failure wakes ``pin`` and ``wait_for_version``.

    Args:
        options: the manager's options (retry delays, attempts, status size, load
            timeout, unload wait).

    Thread-safety: every method may be called from any thread; each takes :attr:`cond`
    (re-entrant) itself. :attr:`current` is one attribute, read without the lock.
    """

    def __init__(self, options: ManagerOptions):
        self._options = options
        self.cond = threading.Condition(threading.RLock())
        #: The snapshot being served, or None; replaced (never mutated) by :meth:`swap`.
        self.current: Snapshot | None = None
        #: The last version swapped in; kept by free_before_load, unlike ``current``.
        self.last_served: int | None = None
        self._last_prefix: str | None = None  # the prefix of ``last_served``
        #: Loads finished, successful or not.
        self.seq = 0
        #: True once :meth:`close` ran: waits end and nothing new is swapped in.
        self.closed = False
        self._records: dict[int, VersionRecord] = {}
        self._stats = ManagerStats()
        self._loading: tuple[VersionRecord, float] | None = None  # (record, monotonic start)
        self._stuck = False  # the watchdog fired for the load in progress
        self._unloading: list[weakref.ref[Snapshot]] = []
        self._freed = threading.Event()

    def close(self) -> None:
        """Ends every wait (``cond``, old snapshots); :meth:`swap` refuses from now on."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self._freed.set()

    # -- reading -----------------------------------------------------------------------
    @property
    def stats(self) -> ManagerStats:
        """A copy of the reload counters."""
        with self.cond:
            return ManagerStats(**vars(self._stats))

    def status(self, version: int | None = None) -> list[dict[str, Any]]:
        """TF Serving's ``model_version_status`` list, newest first.

        Each entry: ``{"version": "1200", "state": "AVAILABLE", "status": {"error_code":
        "OK", "error_message": ""}}``. As TF Serving's ``get_model_status.proto``, an
        error status comes only with ``END`` (a failed or refused load); a retry in progress
        is ``LOADING`` with ``OK`` (its last error is kept for :meth:`last_error`).

        Raises:
            NotFoundError: ``version`` was given and the book has no record of it.
        """
        self.check_watchdog()
        with self.cond:
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
                        "error_code": error_code_name(r.error_code if ended else 0),
                        "error_message": r.error_message if ended else "",
                    },
                }
                for r, ended in ((r, r.state == VersionState.END) for r in records)
            ]

    def loading(self) -> tuple[int | None, float, bool]:
        """(version being loaded or None, for how long in seconds, stuck) — after running
        the watchdog."""
        self.check_watchdog()
        with self.cond:
            loading, stuck = self._loading, self._stuck
        if loading is None:
            return None, 0.0, stuck
        return loading[0].version, time.monotonic() - loading[1], stuck

    @property
    def stuck(self) -> bool:
        """True when the watchdog fired for the load in progress (after running it)."""
        self.check_watchdog()
        return self._stuck

    def load_error_since(self, version: int, seq: int) -> str | None:
        """The error of ``version``'s load if one finished after ``seq`` and failed."""
        with self.cond:
            rec = self._records.get(version)
            if rec is not None and rec.finished_seq > seq and rec.error_code:
                return rec.error_message
            return None

    def mismatch_error(self) -> str | None:
        """The error of the last load to fail if it failed because the checkpoint's
        variables do not match the model's, else None."""
        with self.cond:
            failed = [r for r in self._records.values() if r.error_code]
            last = max(failed, key=lambda r: r.finished_seq, default=None)
            return last.error_message if last is not None and last.mismatch else None

    def last_error(self) -> str | None:
        """The error message of the most recently created record that has one, or None."""
        with self.cond:
            errors = [r for r in self._records.values() if r.error_message]
            return errors[-1].error_message if errors else None

    # -- the load thread ---------------------------------------------------------------
    def next_target(
        self, candidates: Sequence[AspiredVersion],
        is_choice: Callable[[AspiredVersion], bool] | None = None,
    ) -> tuple[AspiredVersion | None, float | None]:
        """Which of the policy's ``candidates`` (most wanted first) to load now.

        The first candidate is the policy's choice (the state file's latest, which may be
        older than the served one: a trainer started over). The others are fallbacks for
        while it fails: while a version is served (or was, before ``free_before_load``
        retired it) only fallbacks at least as new as that one are tried, plus the
        retired one itself, so a failing latest never takes the server back to an older
        checkpoint; with nothing served yet, any of them, newest first. ``is_choice``
        (called only for a first candidate older than the served one) says whether it is
        the policy's choice (the state file names it) or a stand-in for a latest whose
        file is missing, which is then a fallback too.

        Returns:
            ``(version to load, None)``, or ``(None, seconds until a retry is due or None)``
            when the best loadable one is served or every one waits for a retry.
        """
        now = time.monotonic()
        wait_s: float | None = None
        with self.cond:
            current = self.current
            kept = self._no_step_back(candidates, is_choice)
            if candidates and (not kept or kept[0] != candidates[0]):
                # A stand-in for a missing latest was dropped: look at the state file again
                # (the listing may not change when it comes to name this very version).
                wait_s = self._options.rescan_interval_s
            candidates = kept
            for cand in candidates:
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
                        left = self._options.retry_max_s
                    else:
                        left = rec.retry_at_s - now
                    wait_s = left if wait_s is None else min(wait_s, left)
                    continue
                return cand, None
            return None, wait_s

    def _no_step_back(self, candidates: Sequence[AspiredVersion],
                      is_choice: Callable[[AspiredVersion], bool] | None,
                      ) -> list[AspiredVersion]:
        """``candidates`` without the fallbacks older than the served version (holds the
        lock); with free_before_load, the retired version is offered back after them."""
        served = self.last_served if self.current is None else self.current.version
        if served is None or not candidates:
            return list(candidates)
        first = candidates[0]
        chosen = first.version >= served or is_choice is None or is_choice(first)
        kept = [first] if chosen else []
        kept += [c for c in candidates[1:] if c.version >= served]
        back = self._last_prefix
        if (self.current is None and back is not None and
                all(c.prefix != back for c in kept) and os.path.exists(back + ".h5")):
            kept.append(AspiredVersion(served, back))
        return kept

    def begin_load(self, target: AspiredVersion) -> VersionRecord:
        """The record of ``target`` (a new one if its prefix changed), now LOADING."""
        with self.cond:
            rec = self._records.get(target.version)
            if rec is None or rec.prefix != target.prefix:
                rec = self._records[target.version] = VersionRecord(
                    target.version, target.prefix, VersionState.LOADING
                )
            rec.state = VersionState.LOADING
            return rec

    def watch(self, rec: VersionRecord) -> None:
        """Starts the watchdog's clock on ``rec``'s load."""
        with self.cond:
            self._loading = (rec, time.monotonic())

    def unwatch(self) -> None:
        """Stops the watchdog's clock (the load ended, one way or another)."""
        with self.cond:
            self._loading, self._stuck = None, False

    def swap(self, rec: VersionRecord, snap: Snapshot) -> tuple[bool, int | None]:
        """Serves ``snap`` (the version of ``rec``) and retires the old snapshot.

        Returns:
            ``(swapped, the version served before)``; not swapped once closed.
        """
        with self.cond:
            if self.closed:  # closed while loading: serve nothing new
                return False, self.last_served
            # The record says AVAILABLE before the snapshot is visible to the lock-free
            # request path, so no answer of a version ever precedes its AVAILABLE.
            rec.state, rec.error_code, rec.error_message = VersionState.AVAILABLE, 0, ""
            rec.load_kind, rec.bytes_read = snap.load_kind, snap.bytes_read
            self._records[rec.version] = rec
            old, self.current = self.current, snap  # the swap
            previous, self.last_served = self.last_served, snap.version
            self._last_prefix = snap.prefix
            rec.failures, rec.retry_at_s = 0, 0.0
            self.seq += 1
            rec.finished_seq = self.seq
            self._stats.reloads_succeeded += 1
            self._stats.load_duration_s_sum += snap.load_duration_s
            self._stats.last_load_duration_s = snap.load_duration_s
            self._stats.copy_on_write_loads += snap.load_kind == "copy_on_write"
            self._stats.bytes_read_sum += snap.bytes_read
            self._stats.last_bytes_read = snap.bytes_read
            if old is not None and old is not snap:
                self._retire(old)
            self._prune()
            self.cond.notify_all()
            return True, previous

    def failed(
        self,
        rec: VersionRecord,
        code: int,
        message: str,
        vanished: bool = False,
        rejected: bool = False,
        mismatch: bool = False,
    ) -> None:
        """Records a failed (or, ``rejected``, gate-refused) load of ``rec`` and when to
        retry it: soon if its file ``vanished``, when the file changes if rejected or after
        ``max_load_attempts``, else after an exponential backoff. ``mismatch``: it failed
        because its variables do not match the model's (see :meth:`mismatch_error`)."""
        opts = self._options
        with self.cond:
            rec.mismatch = mismatch
            if self._stuck:  # the watchdog already reported this load and counted it
                self._stats.reloads_failed -= 1
            rec.state, rec.error_code, rec.error_message = VersionState.END, code, message
            rec.failures += 1
            rec.file_sig = _file_sig(rec.prefix)
            if vanished:
                rec.retry_at_s = time.monotonic() + opts.retry_max_s
            elif rejected:  # a gate's verdict is deterministic: retried when the file changes
                rec.retry_at_s = math.inf
            elif rec.failures >= opts.max_load_attempts:
                rec.retry_at_s = math.inf
                rec.error_message += (
                    f" (gave up after {rec.failures} attempts; retried when the file changes)"
                )
            else:
                delay = min(opts.retry_max_s, opts.retry_initial_s * 2 ** (rec.failures - 1))
                rec.retry_at_s = time.monotonic() + delay
            self.seq += 1
            rec.finished_seq = self.seq
            if rejected:
                self._stats.reloads_rejected += 1
            else:
                self._stats.reloads_failed += 1
            self._prune()
            self.cond.notify_all()

    def abandon(self, rec: VersionRecord, retry_s: float = 1.0) -> None:
        """Ends ``rec`` (an unexpected error in the manager, or a policy change while it
        waited to load: ``retry_s`` 0); it may be tried again after ``retry_s``."""
        with self.cond:
            rec.state, rec.retry_at_s = VersionState.END, time.monotonic() + retry_s

    def reset_retries(self, version: int) -> None:
        """An explicit request (a pin): a failed ``version`` is tried again at once."""
        with self.cond:
            rec = self._records.get(version)
            if rec is not None and rec.error_code:
                rec.failures, rec.retry_at_s = 0, 0.0

    # -- memory: retiring old snapshots --------------------------------------------------
    def retire_current(self, keep: AspiredVersion) -> int | None:
        """free_before_load: stops serving the current snapshot before ``keep`` is loaded.

        Returns:
            The version no longer served, or None (nothing served, or it is ``keep``).
        """
        with self.cond:
            old = self.current
            if old is None or (old.version, old.prefix) == (keep.version, keep.prefix):
                return None
            self.current = None
            self._retire(old)
            return old.version

    def wait_for_old_snapshots(self) -> None:
        """Waits until no retired snapshot is still held by a request (old + new at most),
        up to ``unload_wait_s`` (then logs a warning and returns). After 0.2 s it runs one
        garbage collection: a snapshot kept only by a reference cycle (an error's frames)
        is freed then, not whenever the collector would next run."""
        wait_s, start, collected = self._options.unload_wait_s, time.monotonic(), False
        while True:
            with self.cond:
                self._unloading = [r for r in self._unloading if r() is not None]
                if not self._unloading or self.closed:
                    return
            waited = time.monotonic() - start
            if waited > wait_s:
                logger.warning("a request has held an old snapshot for over %.0f s; loading "
                               "anyway", wait_s)
                return
            if waited > 0.2 and not collected:
                collected = True
                gc.collect()
            self._freed.wait(0.01)
            self._freed.clear()

    def _retire(self, old: Snapshot) -> None:
        """Marks ``old`` UNLOADING until its last request drops it (then END). Holds the lock."""
        old_rec = self._records.get(old.version)
        if old_rec is not None and old_rec.prefix == old.prefix:
            old_rec.state = VersionState.UNLOADING
            weakref.finalize(old, _mark_end, old_rec, self._freed)
        else:
            weakref.finalize(old, self._freed.set)
        self._unloading.append(weakref.ref(old))

    # -- the watchdog --------------------------------------------------------------------
    def check_watchdog(self) -> None:
        """Reports a load running past ``load_timeout_s`` (lazily: from status, health)."""
        timeout_s = self._options.load_timeout_s
        if timeout_s is None:
            return
        with self.cond:
            if self._loading is None or self._stuck:
                return
            rec, started = self._loading
            elapsed = time.monotonic() - started
            if elapsed <= timeout_s:
                return
            self._stuck = True
            serving = "nothing" if self.current is None else f"version {self.current.version}"
            rec.state, rec.error_code = VersionState.END, DEADLINE_EXCEEDED
            rec.error_message = (
                f"loading {rec.prefix}.h5 has taken {elapsed:.0f} s, more than "
                f"load_timeout_s={timeout_s:g}; the loader thread is stuck (a "
                f"damaged file can hang the HDF5 library) and no newer version can load; "
                f"still serving {serving}; restart the server"
            )
            self._stats.reloads_failed += 1
        logger.error("%s", rec.error_message)

    def _prune(self) -> None:
        """Forgets all but the newest ``max_status_versions`` finished versions."""
        done = sorted((r for r in self._records.values() if r.state == VersionState.END),
                      key=lambda r: r.version)
        for r in done[: max(0, len(done) - self._options.max_status_versions)]:
            del self._records[r.version]


def _file_sig(prefix: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(prefix + ".h5")
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _mark_end(rec: VersionRecord, freed: threading.Event) -> None:
    # Runs when the last request holding the old snapshot drops it; an attribute store is
    # atomic, so no lock (the finalizer may run on any thread, even one holding the lock).
    if rec.state == VersionState.UNLOADING:
        rec.state = VersionState.END
    freed.set()
