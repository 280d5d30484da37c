"""Shared fixtures: a fresh default graph per test, leaked-thread detection."""

from __future__ import annotations

import threading

import pytest

import ckptsync as cs


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
