"""Shared fixtures: a fresh default graph per test, leaked thread and process detection."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import ckptsync as cs


@pytest.fixture(autouse=True)
def _no_ckptsync_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see no ``CKPTSYNC_*`` settings from the shell that runs them (a test that
    wants one sets it)."""
    for name in [n for n in os.environ if n.startswith("CKPTSYNC_")]:
        monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def _fresh_default_graph():
    cs.reset_default_graph()
    yield
    cs.reset_default_graph()


def _children() -> set[int]:
    """This process's live (not zombie) child processes, from /proc."""
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces
        if int(fields[1]) == me and fields[0] not in ("Z", "X"):
            found.add(int(entry))
    return found


def _wait_until(check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check() and time.monotonic() < deadline:
        time.sleep(0.05)


# Pool threads of an event loop (a module-scoped TestClient's) live while that loop does:
# the per-module check below sees them end; the per-test one lets them be.
_POOL_THREAD_NAMES = ("AnyIO worker thread",)


def _check_nothing_left(threads_before: set[threading.Thread], children_before: set[int],
                        ignore_pool_threads: bool) -> None:
    def leaked_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate()
                if t not in threads_before and t.is_alive()
                and not (ignore_pool_threads and t.name in _POOL_THREAD_NAMES)]

    def leaked_children() -> set[int]:
        return _children() - children_before

    _wait_until(lambda: not leaked_threads() and not leaked_children(), 5.0)
    threads, children = leaked_threads(), leaked_children()
    for pid in children:  # never leave them to the next test
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not threads, f"leaked threads: {threads}"
    assert not children, f"leaked child processes: {sorted(children)}"


@pytest.fixture(autouse=True, scope="module")
def _module_leaves_no_threads_or_processes():
    """Fails a module whose tests or fixtures leave any thread (daemon or not) or child
    process running once all of them are done (5 s grace)."""
    threads_before, children_before = set(threading.enumerate()), _children()
    yield
    _check_nothing_left(threads_before, children_before, ignore_pool_threads=False)


@pytest.fixture(autouse=True)
def _test_leaves_no_threads_or_processes():
    """Fails a test that leaves a thread (daemon or not) or a child process running; each
    gets 5 s to end on its own first (a closed server's threads and children exit
    asynchronously). Hooks and the Estimator write through ``tf.summary.FileWriterCache``
    (one writer per directory and process, kept open, as TF1): those are closed first."""
    threads_before, children_before = set(threading.enumerate()), _children()
    yield
    writer = sys.modules.get("ckptsync.summary.writer")
    if writer is not None:
        writer.FileWriterCache.clear()
    _check_nothing_left(threads_before, children_before, ignore_pool_threads=True)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen]]:
    """Processes started by a test; all are ended (SIGTERM, then SIGKILL) afterwards."""
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in started:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
        for stream in (p.stdin, p.stdout, p.stderr):
            if stream is not None:
                stream.close()
