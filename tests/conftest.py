"""Shared fixtures: a fresh default graph per test, leaked-thread detection."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator

import pytest

import ckptsync as cs


@pytest.fixture(autouse=True)
def _no_ckptsync_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see no ``CKPTSYNC_*`` settings from the shell that runs them (a test that
    wants one sets it)."""
    import os

    for name in [n for n in os.environ if n.startswith("CKPTSYNC_")]:
        monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def _fresh_default_graph():
    cs.reset_default_graph()
    yield
    cs.reset_default_graph()


@pytest.fixture(autouse=True)
def _no_leaked_threads():
    before = set(threading.enumerate())
    yield
    leaked = [t for t in threading.enumerate()
              if t not in before and t.is_alive() and not t.daemon]
    for t in leaked:
        t.join(timeout=5)
    leaked = [t for t in leaked if t.is_alive()]
    assert not leaked, f"test leaked threads: {leaked}"


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
