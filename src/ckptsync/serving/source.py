"""The source: watches a checkpoint directory and says which versions exist (TF Serving's
``Source`` / ``FileSystemStoragePathSource``).

What it watches::

    ckpts/
      checkpoint                          the state file: the only truth
      model.ckpt-1200.h5                  version 1200 (named by the state file)
      model.ckpt-1100.h5                  version 1100
      .model.ckpt-1300.h5.tmp-<pid>-<n>   being written: never read, its events ignored
      events.out.tfevents.*               TensorBoard's (summaries): its events ignored

File events are hints, never truth: each event (created, closed after writing, moved —
by its destination path — or deleted) only triggers a rescan of the state file; a timer
rescans every ``rescan_interval_s`` anyway (inotify queues overflow, NFS delivers no
events). With inotify, modified events are not asked for: they only ever show a file
still being written, whose close follows (created events are: a file moved in from
another directory arrives as one); the polling observer, which sees no closes, acts on
modified too. Opens and read-only closes are never watched (the server's own reads
would wake it). A
checkpoint counts once the state file names it and its ``.h5`` exists. The version is the
``-<step>`` suffix of the prefix; for a prefix without one (``saver.save(sess,
"ckpts/model.ckpt")``, rewritten in place), the step recorded in the file, else a number
that grows with each file published there (:mod:`._stepless`).

Thread-safety: the callback runs on the watchdog thread or the rescan thread, one call at a
time and in order; it must be quick (store and signal). :meth:`rescan` may be called from
any thread.

Example:
    >>> import queue
    >>> listings = queue.Queue()
    >>> with CheckpointSource("ckpts", listings.put) as source:
    ...     listing = listings.get(timeout=10)
    >>> listing.latest.version, [v.version for v in listing.available]
    (1200, [1200])
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from watchdog.events import (
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.polling import PollingObserver

from ..checkpoint.state import read_checkpoint_state
from ._stepless import StepLessVersions

__all__ = ["AspiredVersion", "AspiredVersions", "CheckpointSource", "parse_version"]

logger = logging.getLogger(__name__)

_STEP_RE = re.compile(r"-(\d+)$")
_TEMP_RE = re.compile(r"^\..*\.tmp-\d+-\d+$")
_EVENTS_PREFIX = "events.out.tfevents."


def parse_version(prefix: str) -> int | None:
    """The global step in a prefix's ``-<step>`` suffix (``ckpts/model.ckpt-1200 -> 1200``)."""
    m = _STEP_RE.search(os.path.basename(prefix))
    if not m or len(m.group(1)) > 18:  # no suffix, or not a plausible int64 step
        return None
    return int(m.group(1))


@dataclass(frozen=True)
class AspiredVersion:
    """One checkpoint a source offers: its ``prefix`` (identity) and ``version`` (step)."""

    version: int
    prefix: str


@dataclass(frozen=True)
class AspiredVersions:
    """What a rescan found.

    Attributes:
        latest: the state file's ``model_checkpoint_path`` if its file exists, else the
            newest existing one it lists; None when there is none.
        available: every checkpoint the state file names whose file exists, by version.
    """

    latest: AspiredVersion | None
    available: tuple[AspiredVersion, ...]


class CheckpointSource:
    """Watches ``checkpoint_dir`` and calls ``callback(AspiredVersions)`` when it changes.

    Args:
        checkpoint_dir: the directory; it may not exist yet (watched once it appears).
        callback: called with the new listing whenever it differs from the last one sent.
        poll: use watchdog's ``PollingObserver`` (for NFS, bind mounts, no inotify).
        rescan_interval_s: period of the backstop rescan, seconds (> 0).

    The observer is recreated when it dies or when the directory is replaced (a new
    inode). ``alive`` is False once the rescan thread or (while the directory exists) the
    observer is dead and not yet restarted.
    """

    def __init__(
        self,
        checkpoint_dir: str | os.PathLike[str],
        callback: Callable[[AspiredVersions], None],
        poll: bool = False,
        rescan_interval_s: float = 1.0,
    ):
        if rescan_interval_s <= 0:
            raise ValueError(f"rescan_interval_s must be > 0, got {rescan_interval_s}")
        self.checkpoint_dir = os.fspath(checkpoint_dir)
        self._callback = callback
        self._poll = poll
        self._rescan_interval_s = float(rescan_interval_s)
        self._lock = threading.Lock()  # serializes rescans and callbacks
        self._observer_lock = threading.Lock()
        self._observer: Any = None
        self._watched_inode: tuple[int, int] | None = None
        self._last: AspiredVersions | None = None
        #: The last state-file problem (unreadable, unparsable, an entry outside the
        #: directory), or None once the state file reads again. Shown in ``/healthz``.
        self.state_error: str | None = None
        self._stepless = StepLessVersions()  # versions of prefixes without -<step>
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.observer_restarts = 0

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> CheckpointSource:
        """Starts watching: one synchronous rescan, then the observer and the timer."""
        if self._closed:
            raise RuntimeError("CheckpointSource was closed; create a new one")
        if self._thread is not None:
            return self
        self._ensure_observer()
        self.rescan()
        self._thread = threading.Thread(
            target=self._rescan_loop, name="ckptsync-source-rescan", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stops the timer and the observer and joins their threads. Idempotent."""
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
        with self._observer_lock:
            self._stop_observer()

    def __enter__(self) -> CheckpointSource:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        """True while the rescan thread runs and the observer (if the dir exists) is alive."""
        if self._thread is None or not self._thread.is_alive() or self._stop.is_set():
            return False
        if not os.path.isdir(self.checkpoint_dir):
            return True  # waiting for the directory; the timer will start the observer
        return self._observer_alive()

    @property
    def last(self) -> AspiredVersions | None:
        """The last listing sent to the callback."""
        return self._last

    # -- scanning ----------------------------------------------------------------------
    def rescan(self) -> AspiredVersions:
        """Reads the state file now; calls the callback if the listing changed.

        Never raises for a missing or unreadable directory or state file (logs instead);
        an exception from the callback is logged too.
        """
        with self._lock:
            listing = self._scan()
            if listing != self._last:
                self._last = listing
                try:
                    self._callback(listing)
                except Exception:
                    logger.exception("checkpoint source callback failed for %s", listing)
            return listing

    def _scan(self) -> AspiredVersions:
        try:  # an unreadable or unparsable state file raises: logged once, in status
            state = read_checkpoint_state(self.checkpoint_dir)
        except Exception as e:
            message = f"cannot read checkpoint state in {self.checkpoint_dir}: {e}"
            if message != self.state_error:  # log each distinct problem once, not per rescan
                logger.warning("%s", message)
            self.state_error = message
            return self._last or AspiredVersions(None, ())
        if self.state_error is not None:
            logger.info("checkpoint state in %s is readable again", self.checkpoint_dir)
        self.state_error = None
        if state is None:
            return AspiredVersions(None, ())
        paths = list(state.all_model_checkpoint_paths or [])
        if state.model_checkpoint_path and state.model_checkpoint_path not in paths:
            paths.append(state.model_checkpoint_path)
        by_version: dict[int, AspiredVersion] = {}
        for prefix in paths:
            version = parse_version(prefix)
            if version is None:  # saved without a step: its recorded step, or a new number
                version = self._stepless.version(prefix)  # per file (see _stepless)
                if version is not None:
                    by_version[version] = AspiredVersion(version, prefix)
                continue
            if os.path.isfile(prefix + ".h5"):  # a regular file (a FIFO is never offered)
                by_version[version] = AspiredVersion(version, prefix)
        available = tuple(by_version[v] for v in sorted(by_version))
        latest = next(
            (a for a in available if a.prefix == state.model_checkpoint_path),
            available[-1] if available else None,
        )
        return AspiredVersions(latest, available)

    def _rescan_loop(self) -> None:
        while not self._stop.wait(self._rescan_interval_s):
            try:
                self._ensure_observer()
                self.rescan()
            except Exception:  # never let the backstop die
                logger.exception("checkpoint source rescan failed for %s", self.checkpoint_dir)

    # -- the watchdog observer ---------------------------------------------------------
    def _on_event(self, event: FileSystemEvent) -> None:
        if self._stop.is_set():
            return
        path = getattr(event, "dest_path", "") or event.src_path
        name = os.path.basename(os.fsdecode(path))
        if _TEMP_RE.match(name):
            return  # a temp file being written: its rename (by dest path) will tell us
        if name.startswith(_EVENTS_PREFIX):
            return  # TensorBoard's (MonitoredTrainingSession's summaries): never a version
        if name.endswith(".h5"):
            if event.event_type != "deleted":
                return  # a new data file counts once the state file names it (its rename)
            last = self._last
            if last is not None and all(
                    os.path.basename(a.prefix) + ".h5" != name for a in last.available):
                return  # not offered (e.g. evicted after a newer state file): no change
        try:
            self.rescan()
        except Exception:
            logger.exception("checkpoint source failed handling %s", event)

    def _observer_alive(self) -> bool:
        obs = self._observer
        return bool(obs is not None and obs.is_alive() and all(e.is_alive() for e in obs.emitters))

    def _ensure_observer(self) -> None:
        with self._observer_lock:
            if self._stop.is_set():
                return
            try:
                st = os.stat(self.checkpoint_dir)
            except OSError:
                self._stop_observer()  # directory gone: wait for it to come back
                return
            inode = (st.st_dev, st.st_ino)
            if self._observer_alive() and inode == self._watched_inode:
                return
            if self._observer is not None:
                logger.warning("restarting the watcher on %s", self.checkpoint_dir)
                self.observer_restarts += 1
            self._stop_observer()
            observer = (
                PollingObserver(timeout=self._rescan_interval_s) if self._poll else Observer()
            )
            observer.name = "ckptsync-source-observer"
            try:
                observer.schedule(_Handler(self._on_event), self.checkpoint_dir, recursive=False,
                                  event_filter=_POLLED_EVENTS if self._poll else _INOTIFY_EVENTS)
                observer.start()
            except Exception as e:
                logger.warning("cannot watch %s yet: %s", self.checkpoint_dir, e)
                _stop_and_join(observer)
                return
            self._observer, self._watched_inode = observer, inode
        # Events may have been missed while no observer ran.
        if self._thread is not None:
            self.rescan()

    def _stop_observer(self) -> None:
        if self._observer is not None:
            _stop_and_join(self._observer)
            self._observer, self._watched_inode = None, None


# The inotify events that end a change of the state file or remove a data file (see the
# module docstring); each one costs the server's threads ~80 us of watchdog's Python.
_INOTIFY_EVENTS = [FileCreatedEvent, FileClosedEvent, FileMovedEvent, FileDeletedEvent]
# What polling reports that can change the state file (it has no close events).
_POLLED_EVENTS = [FileCreatedEvent, FileModifiedEvent, FileMovedEvent, FileDeletedEvent]


class _Handler(FileSystemEventHandler):
    def __init__(self, fn: Callable[[FileSystemEvent], None]):
        self._fn = fn

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        try:
            self._fn(event)
        except Exception:  # an exception here would kill watchdog's thread silently
            logger.exception("checkpoint source event handler failed for %s", event)


def _stop_and_join(observer: Any) -> None:
    try:
        observer.stop()
        if observer.is_alive():
            observer.join(timeout=10.0)
    except Exception:
        logger.exception("stopping the watchdog observer failed")
