"""WorkerProcess: its own session, stop by closing the socket, restart, liveness."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from ckptsync.workers import WorkerProcess
from ckptsync.workers.process import how_it_ended, python_command

# Echoes what it reads until its socket closes, then exits 0.
_ECHO = ("import socket, sys\n"
         "s = socket.socket(fileno=int(sys.argv[-1]))\n"
         "while True:\n"
         "    b = s.recv(100)\n"
         "    if not b:\n"
         "        break\n"
         "    s.sendall(b)\n")


def test_a_worker_runs_in_its_own_session_and_ends_when_its_socket_closes() -> None:
    w = WorkerProcess(lambda: [sys.executable, "-c", _ECHO], "echo", close_timeout_s=10)
    sock = w.start()
    try:
        assert w.running and not w.exited() and w.pid is not None
        assert os.getsid(w.pid) == w.pid != os.getsid(0)  # a session of its own
        sock.sendall(b"hi")
        assert sock.recv(2) == b"hi"
    finally:
        w.stop()
    assert not w.running and w.pid is None and w.sock is None
    assert w.last_returncode == 0  # it ended by itself, not killed
    w.stop()  # idempotent


def test_a_dead_worker_is_seen_and_restarted() -> None:
    w = WorkerProcess(lambda: [sys.executable, "-c", _ECHO], "echo")
    w.start()
    try:
        first = w.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        assert w.wait(timeout_s=10) == -signal.SIGKILL  # waits on the death, no clock
        assert w.exited() and w.how_it_ended() == "was killed by SIGKILL"
        assert w.running  # the owner has not stopped it: it decides what happens next
        sock = w.restart()
        assert w.restarts == 1 and w.pid not in (None, first) and not w.exited()
        sock.sendall(b"x")
        assert sock.recv(1) == b"x"
    finally:
        w.stop()


def test_a_worker_that_ignores_its_socket_is_killed_after_the_timeout() -> None:
    code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)\n"
    w = WorkerProcess(lambda: [sys.executable, "-c", code], "sleeper", close_timeout_s=0.5)
    w.start()
    w.stop()
    assert w.last_returncode == -signal.SIGKILL


def test_a_command_that_cannot_start_raises_and_leaves_nothing() -> None:
    w = WorkerProcess(lambda: ["/nonexistent/python"], "nothing")
    with pytest.raises(OSError):
        w.start()
    assert not w.running and w.pid is None and w.sock is None


def test_commands_and_endings_read_well() -> None:
    assert python_command("m.n", "main") == [sys.executable, "-c", "from m.n import main; main()"]
    assert how_it_ended(3) == "exited with code 3"
    assert how_it_ended(-9) == "was killed by SIGKILL"
    assert how_it_ended(-200) == "was killed by signal 200"
