"""The source in a process of its own: :class:`ProcessCheckpointSource` runs a
:class:`~.source.CheckpointSource` (watchdog's observer and the backstop rescan) in a
child process and hands its listings to the callback here.

Why a process: watchdog spends ~1.5 ms of Python per published checkpoint (about seven
directory events, each through its three threads); in the serving process those threads
take the interpreter lock from requests in flight, which shows as tail latency while a
trainer publishes. In the child they run on another core. The server sees one message
per changed listing. This is the role of TF Serving's source thread, which needs no
process of its own in C++.

Protocol (frames of :mod:`ckptsync.workers.frames` over the socket of a
:class:`~ckptsync.workers.WorkerProcess`)::

    server                                    source process
    ------                                    --------------
    {"dir", "poll", "rescan_interval_s",  --> CheckpointSource(...).start()
     "log_level"}
                                          <-- {"listing", "alive", "restarts", "state_error"}
                                              (on start, on every change of the listing)
                                          <-- {"alive", "restarts", "state_error"}
                                              (when the watcher's health changes)
                                          <-- {"log": {"level", "name", "message"}}
    {"cmd": "rescan"}                     --> source.rescan()
    (socket closed)                       --> source.close(), exit

The child ignores SIGINT and SIGTERM: it ends when its socket closes, i.e. when the
server closes the source or dies (even by SIGKILL), so it never outlives the server. If
the child dies, the server starts another (counted in ``observer_restarts``); so it does
when the child stops answering (it reports at least every second; silent for 5 s it is
not alive, for ``_HANG_TIMEOUT_S`` = 15 s, e.g. SIGSTOPped, it is killed and replaced:
:meth:`~ckptsync.workers.WorkerProcess.await_answer`; a fresh child gets 30 s more for
its first report, its imports); where no process can be started,
the source runs in this process instead.

Thread-safety: as :class:`~.source.CheckpointSource`.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..workers import WorkerProcess
from ..workers.frames import NOT_READY, FrameReader, encode_frame, send_frame
from ..workers.process import how_it_ended, python_command
from .source import AspiredVersion, AspiredVersions, CheckpointSource

__all__ = ["ProcessCheckpointSource", "source_main"]

logger = logging.getLogger(__name__)

# The child's command line; the socket's fd number is appended. A module attribute so
# tests can replace the child (e.g. by one that exits at once).
SOURCE_COMMAND: list[str] = python_command("ckptsync.serving._source_process", "source_main")
_START_TIMEOUT_S = 60.0  # the child imports ckptsync and does one rescan first
_CLOSE_TIMEOUT_S = 10.0
_RESTART_DELAY_S = 0.5
_HEALTH_CHECK_S = 0.25
_HEARTBEAT_S = 1.0  # the child reports its health at least this often
_HEARTBEAT_TIMEOUT_S = 5.0  # silent longer (e.g. SIGSTOPped): not alive
_HANG_TIMEOUT_S = 15.0  # silent longer: killed and replaced (a loaded host is no hang)
_START_GRACE_S = 30.0  # more for a fresh child's first report (its imports)
_RESCAN = encode_frame(b"", {"cmd": "rescan"})


def _listing_doc(listing: AspiredVersions) -> dict[str, Any]:
    latest = listing.latest
    return {
        "latest": None if latest is None else [latest.version, latest.prefix],
        "available": [[a.version, a.prefix] for a in listing.available],
    }


def _listing_from(doc: dict[str, Any]) -> AspiredVersions:
    latest = doc["latest"]
    return AspiredVersions(
        None if latest is None else AspiredVersion(int(latest[0]), str(latest[1])),
        tuple(AspiredVersion(int(v), str(p)) for v, p in doc["available"]),
    )


# ------------------------------------------------------------------------- the child
class _ForwardLogs(logging.Handler):
    """Sends the child's log records to the server, which logs them as its own."""

    def __init__(self, send: Callable[[dict[str, Any]], None]):
        super().__init__()
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._send({"log": {"level": record.levelno, "name": record.name,
                                "message": self.format(record)}})
        except Exception:  # the server is gone: nobody to tell
            pass


def source_main() -> None:
    """Entry point of the source process: ``SOURCE_COMMAND + [socket fd]``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=int(sys.argv[-1]))
    reader = FrameReader(sock)
    config = reader.next()
    if config is None:
        return
    send_lock = threading.Lock()

    def send(doc: dict[str, Any]) -> None:
        with send_lock:
            send_frame(sock, b"", doc)

    # ckptsync's records at the server's level; other libraries' (watchdog's debug
    # chatter) only from WARNING: each forwarded record costs the server a message.
    root = logging.getLogger()
    root.handlers[:] = [_ForwardLogs(send)]
    root.setLevel(logging.WARNING)
    logging.getLogger("ckptsync").setLevel(int(config.get("log_level", logging.WARNING)))
    source: CheckpointSource | None = None

    def health() -> dict[str, Any]:
        assert source is not None
        return {"alive": source.alive, "restarts": source.observer_restarts,
                "state_error": source.state_error}

    started = False  # the first listing goes out once start() is done (health is right)
    start_lock = threading.Lock()

    def on_listing(listing: AspiredVersions) -> None:
        with start_lock:
            if not started:
                return  # sent below, as ``source.last``
            try:
                send({"listing": _listing_doc(listing), **health()})
            except OSError:  # the server is gone; the main loop sees the socket close
                pass

    source = CheckpointSource(config["dir"], on_listing, poll=bool(config["poll"]),
                              rescan_interval_s=float(config["rescan_interval_s"]))
    try:
        source.start()  # one rescan now: the server's first listing
        with start_lock:
            started = True
            last = health()
            assert source.last is not None
            send({"listing": _listing_doc(source.last), **last})
            sent_at = time.monotonic()
        while True:
            try:
                cmd = reader.next(True, _HEALTH_CHECK_S)
            except TimeoutError:
                cmd = NOT_READY
            if cmd is None:
                break  # the server closed the source, or died
            if isinstance(cmd, dict) and cmd.get("cmd") == "rescan":
                source.rescan()
            now = health()
            if now != last or time.monotonic() - sent_at >= _HEARTBEAT_S:
                send(now)  # a change, or the heartbeat that says this process runs
                last, sent_at = now, time.monotonic()
    except OSError:
        pass  # the server is gone
    finally:
        source.close()
        sock.close()


# ------------------------------------------------------------------------ the server
class ProcessCheckpointSource:
    """A :class:`~.source.CheckpointSource` run in a child process (see the module
    docstring), with the same interface: ``start``, ``close``, ``rescan``, ``alive``,
    ``last``, ``state_error``, ``observer_restarts``.

    ``callback`` runs on this object's receiving thread, one call at a time, in order.
    ``rescan()`` asks the child to rescan and returns at once (the listing, if it
    changed, arrives through the callback); it returns the last listing received.
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
        self._lock = threading.Lock()  # the child's process and socket
        self._worker = WorkerProcess(lambda: SOURCE_COMMAND, "checkpoint source",
                                     _CLOSE_TIMEOUT_S)
        self._thread: threading.Thread | None = None
        self._closed = False
        self._local: CheckpointSource | None = None  # where no process could be started
        self._last: AspiredVersions | None = None
        self._child_alive = False
        # (earlier children's observer restarts + child restarts, the running child's
        # observer restarts): one tuple, so that a reader never sees half an update
        self._restart_counts = (0, 0)
        self._heard_at = 0.0  # time.monotonic() of the child's last frame
        self._spawned_at = 0.0  # time.monotonic() when the current child was started
        self.state_error: str | None = None

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> ProcessCheckpointSource:
        """Starts the child and waits for its first listing (bounded); where no child
        can be started, starts the source in this process instead."""
        if self._closed:
            raise RuntimeError("ProcessCheckpointSource was closed; create a new one")
        if self._thread is not None or self._local is not None:
            return self
        for attempt in range(2):  # a child that dies while starting gets one successor
            try:
                reader = self._spawn()
                deadline = time.monotonic() + _START_TIMEOUT_S
                while True:  # log records may come first
                    first = reader.next(True, max(0.0, deadline - time.monotonic()))
                    if not isinstance(first, dict):
                        raise OSError("the source process ended before its first listing")
                    if "listing" in first:
                        break
                    self._handle(first)
                break
            except (OSError, TimeoutError) as e:
                with self._lock:
                    self._stop_child()
                    if self._closed:  # closed while starting: nothing to fall back to
                        return self
                    if attempt == 0:
                        continue
                    logger.warning("cannot start the checkpoint source process (%s); "
                                   "watching %s in this process", e, self.checkpoint_dir)
                    self._local = CheckpointSource(self.checkpoint_dir, self._callback,
                                                   poll=self._poll,
                                                   rescan_interval_s=self._rescan_interval_s)
                    self._local.start()
                return self
        self._handle(first)
        self._thread = threading.Thread(target=self._receive_loop, args=(reader,),
                                        name="ckptsync-source-receiver", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Ends the child (closing its socket) and joins the receiving thread."""
        self._closed = True
        if self._local is not None:
            self._local.close()
        with self._lock:
            self._stop_child()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=_CLOSE_TIMEOUT_S)

    def __enter__(self) -> ProcessCheckpointSource:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what the manager reads ---------------------------------------------------------
    @property
    def alive(self) -> bool:
        """True while the child runs, its watcher is alive and this side receives."""
        if self._local is not None:
            return self._local.alive
        worker, thread = self._worker, self._thread
        recent = time.monotonic() - self._heard_at < _HEARTBEAT_TIMEOUT_S  # not stopped
        return bool(not self._closed and thread is not None and thread.is_alive()
                    and worker.running and not worker.exited() and self._child_alive
                    and recent)

    @property
    def observer_restarts(self) -> int:
        """Watcher restarts: the child's observer restarts plus child restarts."""
        if self._local is not None:
            return self._local.observer_restarts
        base, child = self._restart_counts
        return base + child

    @property
    def last(self) -> AspiredVersions | None:
        """The last listing received."""
        return self._local.last if self._local is not None else self._last

    @property
    def pid(self) -> int | None:
        """The child's pid, or None while none runs (or the source runs in this process)."""
        return self._worker.pid

    def rescan(self) -> AspiredVersions | None:
        """Asks for a rescan now; returns the last listing received (a changed one
        follows through the callback)."""
        if self._local is not None:
            return self._local.rescan()
        with self._lock:
            sock = self._worker.sock
            if sock is not None:
                # Never waits: with a full socket (a stopped child) a rescan is pending
                # anyway. A Unix stream socket takes a message this small whole or not
                # at all, so no partial frame can follow.
                try:
                    sock.send(_RESCAN, socket.MSG_DONTWAIT)
                except OSError:  # full, or dying: the receiving thread restarts it
                    pass
        return self._last

    # -- the child -----------------------------------------------------------------------
    def _spawn(self) -> FrameReader:
        with self._lock:
            if self._closed:
                raise OSError("the source was closed")
            parent = self._worker.start()
            self._spawned_at = time.monotonic()
        send_frame(parent, b"", {
            "dir": self.checkpoint_dir, "poll": self._poll,
            "rescan_interval_s": self._rescan_interval_s,
            "log_level": logging.getLogger("ckptsync").getEffectiveLevel(),
        })
        return FrameReader(parent)

    def _stop_child(self) -> None:
        self._worker.stop()  # closes the socket and reaps the child, once

    def _handle(self, doc: Any) -> None:
        self._heard_at = time.monotonic()
        if not isinstance(doc, dict):
            return
        log = doc.get("log")
        if log is not None:
            logging.getLogger(str(log["name"])).log(int(log["level"]), "%s", log["message"])
            return
        self._child_alive = bool(doc.get("alive"))
        self._restart_counts = (self._restart_counts[0], int(doc.get("restarts", 0)))
        self.state_error = doc.get("state_error")
        if "listing" in doc:
            listing = _listing_from(doc["listing"])
            if listing != self._last:
                self._last = listing
                try:
                    self._callback(listing)
                except Exception:
                    logger.exception("checkpoint source callback failed for %s", listing)

    def _receive_loop(self, reader: FrameReader) -> None:
        while True:
            doc = reader.next(block=False)
            if doc is NOT_READY:
                # The child reports every _HEARTBEAT_S; a silent one (stopped, frozen) is
                # killed here, and replaced below like one that died. Its first report
                # also waits for its imports (a loaded host is no hang).
                fresh = self._heard_at < self._spawned_at  # no report yet: still importing?
                silence_s = _HANG_TIMEOUT_S + (_START_GRACE_S if fresh else 0.0)
                if not self._worker.await_answer(silence_s, f"watching {self.checkpoint_dir}"):
                    if self._closed or not self._worker.running:
                        return
                continue
            if doc is not None:
                self._handle(doc)
                continue
            if self._closed or not self._worker.running:
                return  # closed here (or at interpreter exit), not a death
            with self._lock:
                pid = self._worker.pid
                self._stop_child()  # reaps it
            self._child_alive = False
            logger.warning("the checkpoint source process (pid %s) %s; starting another",
                           pid, "died" if pid is None
                           else how_it_ended(self._worker.last_returncode))
            while not self._closed:
                time.sleep(_RESTART_DELAY_S)
                if self._closed:
                    return
                try:
                    reader = self._spawn()
                except OSError as e:
                    logger.warning("cannot start the checkpoint source process: %s", e)
                    continue
                # The new child counts its own observer restarts from 0.
                base, child = self._restart_counts
                self._restart_counts = (base + child + 1, 0)
                break


