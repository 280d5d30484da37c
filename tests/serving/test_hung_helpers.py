"""A server whose helper processes stop answering (SIGSTOP) does not freeze on an old
version: the stopped reader is killed within ``load_timeout_s`` and replaced, the stopped
source within its heartbeat timeout, and the newer checkpoints load."""

from __future__ import annotations

import gc
import os
import signal

import pytest

from ckptsync.serving import ModelManager
from ckptsync.serving import _source_process as sp
from tests.helpers import pid_gone as _gone

from .conftest import publish, wait_until


@pytest.fixture(autouse=True)
def _collect_snapshots():
    yield
    gc.collect()  # the managers' snapshots (and their shared memory) go now


def test_a_stopped_reader_is_replaced_within_the_load_timeout(tmp_path, mlp):
    publish(tmp_path, 1)
    with ModelManager(mlp, tmp_path, rescan_interval_s=0.05, retry_initial_s=0.05,
                      retry_max_s=0.1, load_timeout_s=1.0) as manager:
        manager.wait_for_version(1, timeout_s=30)
        reader = manager._reader
        assert reader is not None and reader.pid is not None
        stopped = reader.pid
        os.kill(stopped, signal.SIGSTOP)
        publish(tmp_path, 2)
        manager.wait_for_version(2, timeout_s=30)
        assert _gone(stopped) and reader.worker.hangs == 1
        assert manager.health()["loader"]["reader_restarts"] >= 1
        wait_until(lambda: manager.alive, timeout_s=10)


def test_a_stopped_source_is_replaced_and_new_versions_load(tmp_path, mlp, monkeypatch):
    monkeypatch.setattr(sp, "_HANG_TIMEOUT_S", 1.5)
    publish(tmp_path, 1)
    with ModelManager(mlp, tmp_path, rescan_interval_s=0.05) as manager:
        manager.wait_for_version(1, timeout_s=30)
        source = manager._source
        stopped = source.pid
        os.kill(stopped, signal.SIGSTOP)
        publish(tmp_path, 2)
        manager.wait_for_version(2, timeout_s=30)
        assert _gone(stopped)
        wait_until(lambda: manager.alive, timeout_s=20)
