"""WorkerProcess: one helper process that holds one end of a Unix socket pair.

Every worker of ckptsync (the async checkpoint writer, the checkpoint read process, the
serving source process) is started, watched and stopped by this class::

    owner (any thread holding it)             worker process
    -----------------------------             --------------
    start()   socketpair, spawn          -->  command + [socket fd], own session
              a finalizer (stop at GC           (a terminal's Ctrl-C never reaches it)
              or interpreter exit)
    sock      frames both ways (.frames) <->  serves until its socket closes
    exited()  poll: has it died?
    await_answer(timeout_s)                   answers within timeout_s, or is
              SIGKILLed (stopped, frozen,       declared hung (``hangs`` += 1); the
              stuck in a read)                  caller's recv then sees the end
    restart() stop, start, restarts += 1
    stop()    shutdown + close the socket --> sees the end, exits
              reap; SIGKILL after close_timeout_s

The worker ends when its socket closes, i.e. when the owner stops it or dies (even by
SIGKILL), so it never outlives its owner. A worker that stops answering (SIGSTOPped, or
stuck in a read of a hung file) is found by :meth:`WorkerProcess.await_answer` and
killed, so that its owner treats it exactly as one that died: replaced, and its job
failed.

Thread-safety: not thread-safe; the owner serializes calls (its own lock), except
:attr:`pid`, :attr:`running` and :meth:`exited`, which only read.
"""

from __future__ import annotations

import contextlib
import logging
import select
import signal
import socket
import subprocess
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["WorkerProcess", "how_it_ended", "python_command"]

logger = logging.getLogger(__name__)


def python_command(module: str, function: str) -> list[str]:
    """The command line of a worker whose entry point is ``module.function()``, run by
    this interpreter: ``[sys.executable, "-c", "from M import F; F()"]`` (the socket's
    fd number is appended at start)."""
    return [sys.executable, "-c", f"from {module} import {function}; {function}()"]


def how_it_ended(returncode: int | None) -> str:
    """How a worker process ended, for a log line: ``"was killed by SIGKILL"``,
    ``"exited with code 3"``."""
    if returncode is not None and returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


def _stop(proc: subprocess.Popen[bytes], sock: socket.socket, timeout_s: float,
          what: str) -> None:
    """Closes ``sock`` (the worker exits when it sees the end) and reaps ``proc``,
    killing it after ``timeout_s``. A plain function: a finalizer must not hold the
    WorkerProcess."""
    try:
        # shutdown first: it wakes a thread of ours blocked in recv on ``sock`` (a plain
        # close would leave the socket open under that recv: the worker would never see
        # the end).
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
    finally:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            logger.error("the %s process (pid %d) did not exit; killing it", what, proc.pid)
            proc.kill()
            proc.wait()


class WorkerProcess:
    """A helper process started as ``command() + [socket fd]``.

    Args:
        command: returns the worker's command line (called at each start, so that a
            module attribute holding it can be replaced by tests).
        name: names the worker in log lines, e.g. ``"checkpoint writer"``.
        close_timeout_s: how long :meth:`stop` waits for the worker to exit before it
            kills it, in seconds.

    Example:
        >>> import socket, sys
        >>> ECHO = ("import socket, sys; s = socket.socket(fileno=int(sys.argv[1])); "
        ...         "s.sendall(s.recv(5).upper())")  # the worker gets its socket's fd
        >>> w = WorkerProcess(lambda: [sys.executable, "-c", ECHO], "echo")
        >>> sock = w.start()
        >>> sock.sendall(b"hello"); sock.recv(5)
        b'HELLO'
        >>> w.stop(); w.running
        False
    """

    def __init__(self, command: Callable[[], Sequence[str]], name: str,
                 close_timeout_s: float = 10.0):
        self._command = command
        self.name = name
        self._close_timeout_s = close_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        #: Workers replaced by :meth:`restart` (after dying, or on the owner's request).
        self.restarts = 0
        #: The exit status of the worker :meth:`stop` last reaped (negative: the signal).
        self.last_returncode: int | None = None
        #: Workers killed by :meth:`await_answer` for not answering in time.
        self.hangs = 0

    def start(self) -> socket.socket:
        """Starts a worker (stopping the one running, if any) and returns this side's
        end of its socket.

        The worker gets a session (and process group) of its own, so that a terminal's
        Ctrl-C, sent to the whole foreground group, never reaches it, not even while it
        is still importing: the owner decides when it ends, by closing the socket.

        Raises:
            OSError: the process could not be started (the socket is closed then).
        """
        self.stop()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            proc = subprocess.Popen([*self._command(), str(child.fileno())],
                                    pass_fds=[child.fileno()], stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self._proc, self._sock = proc, parent
        self._finalizer = weakref.finalize(self, _stop, proc, parent,
                                           self._close_timeout_s, self.name)
        return parent

    def restart(self) -> socket.socket:
        """:meth:`stop`, then :meth:`start`; counts one restart. Raises OSError."""
        self.stop()
        self.restarts += 1
        return self.start()

    def stop(self) -> None:
        """Closes the socket and reaps the worker (killed after ``close_timeout_s``).
        Idempotent; also run at garbage collection and interpreter exit."""
        if self._finalizer is not None:
            self._finalizer()  # closes the socket and reaps the worker, once
        if self._proc is not None:
            self.last_returncode = self._proc.returncode
        self._proc = self._sock = self._finalizer = None

    def kill(self) -> None:
        """Sends SIGKILL (e.g. to end a read stuck on a hung file system); a blocked
        exchange on the socket then sees the end. :meth:`stop` still reaps it."""
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()

    def await_answer(self, timeout_s: float | None, doing: str = "") -> bool:
        """Waits until the worker's socket has something to read (a frame, the end of
        stream or an error), at most ``timeout_s`` seconds (None: forever).

        A worker that sends nothing in that time is hung (SIGSTOPped, frozen, or stuck
        in a read of a hung file system): it is logged (naming ``doing``, e.g.
        ``"reading m-5.h5"``), counted in :attr:`hangs` and killed with SIGKILL (which
        ends a stopped process too), so the caller's next ``recv`` sees the end of
        stream and its usual death handling (replace the worker, fail the job) runs.

        Returns:
            True when something arrived; False when the worker was killed as hung (or
            none runs).

        Thread-safety: safe beside one receiving thread of the same socket; it only
        polls the socket and signals the process.
        """
        if self._sock is None:
            return False
        if self.readable(timeout_s):
            return True
        self.hangs += 1
        logger.error("the %s process (pid %s) did not answer within %g s%s (stopped, or "
                     "stuck); killing it", self.name, self.pid, timeout_s,
                     f" while {doing}" if doing else "")
        self.kill()
        return False

    def readable(self, timeout_s: float | None) -> bool:
        """True once the worker's socket has something to read (or is closed), False
        when ``timeout_s`` seconds pass first (None: waits forever). Kills nothing."""
        sock = self._sock
        if sock is None:
            return True  # nothing to wait for: the caller's recv sees the end
        poller = select.poll()
        try:
            poller.register(sock, select.POLLIN)
            ms = None if timeout_s is None else max(0, int(timeout_s * 1000))
            return bool(poller.poll(ms))  # retried after EINTR (PEP 475)
        except (OSError, ValueError):  # closed meanwhile
            return True

    @property
    def sock(self) -> socket.socket | None:
        """This side's end of the running worker's socket, or None."""
        return self._sock

    @property
    def pid(self) -> int | None:
        """The running worker's pid, or None while none was started (or it was stopped)."""
        proc = self._proc
        return None if proc is None else proc.pid

    @property
    def running(self) -> bool:
        """True from :meth:`start` until :meth:`stop` (or the finalizer at interpreter
        exit), whether or not the process has died meanwhile (see :meth:`exited`)."""
        finalizer = self._finalizer
        return finalizer is not None and finalizer.alive

    def exited(self) -> bool:
        """True when a started worker has ended (it is reaped by this check)."""
        proc = self._proc
        return proc is not None and proc.poll() is not None

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Blocks until a started worker ends by itself (it is not stopped); returns its
        exit status, or None when none was started.

        Raises:
            subprocess.TimeoutExpired: still running after ``timeout_s`` seconds.
        """
        proc = self._proc
        return None if proc is None else proc.wait(timeout=timeout_s)

    @property
    def returncode(self) -> int | None:
        """The ended worker's exit status (negative: the signal), or None."""
        proc = self._proc
        return None if proc is None else proc.returncode

    def how_it_ended(self) -> str:
        """:func:`how_it_ended` of the worker, for a log line."""
        return how_it_ended(self.returncode)
