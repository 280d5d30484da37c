"""ProcessCheckpointSource: the source in its own process, same listings, never orphaned."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from ckptsync.serving import _source_process as sp
from ckptsync.serving._source_process import ProcessCheckpointSource

from .conftest import publish, wait_until
from .test_source import Recorder


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie still answers kill(0); it is gone for our purpose once reaped or dead
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_listings_arrive_from_another_process(tmp_path):
    publish(tmp_path, 1)
    rec = Recorder()
    with ProcessCheckpointSource(tmp_path, rec, rescan_interval_s=30) as source:
        assert rec.latest_version() == 1  # the first listing, before start() returned
        assert source.pid not in (None, os.getpid()) and source.alive
        assert source.observer_restarts == 0 and source.state_error is None
        publish(tmp_path, 2)  # seen through the child's watchdog observer
        assert rec.latest_version(want=2) == 2
        assert [a.version for a in source.last.available] == [1, 2]
        pid = source.pid
    assert not source.alive
    wait_until(lambda: _gone(pid), timeout_s=10)


def test_rescan_is_asked_of_the_child(tmp_path):
    publish(tmp_path, 1)
    rec = Recorder()
    # polling every 30 s: nothing but rescan() can see the next checkpoint soon
    with ProcessCheckpointSource(tmp_path, rec, poll=True, rescan_interval_s=30) as source:
        assert rec.latest_version() == 1
        publish(tmp_path, 2)
        # returns at once: the last listing received (the new one may be back already)
        assert source.rescan().latest.version in (1, 2)
        assert rec.latest_version(want=2) == 2


def test_a_killed_child_is_replaced_and_counted(tmp_path, caplog):
    publish(tmp_path, 1)
    rec = Recorder()
    with ProcessCheckpointSource(tmp_path, rec, rescan_interval_s=30) as source:
        assert rec.latest_version() == 1
        pid = source.pid
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: source.pid not in (None, pid) and source.alive, timeout_s=20)
        assert source.observer_restarts == 1
        assert f"checkpoint source process (pid {pid}) was killed by SIGKILL" in caplog.text
        publish(tmp_path, 2)
        assert rec.latest_version(want=2) == 2


def test_child_logs_reach_this_process_and_state_errors_show(tmp_path, caplog):
    publish(tmp_path, 1)
    rec = Recorder()
    with caplog.at_level(logging.WARNING), \
            ProcessCheckpointSource(tmp_path, rec, rescan_interval_s=0.05) as source:
        assert rec.latest_version() == 1
        (tmp_path / "checkpoint").write_text('model_checkpoint_path: "../../etc/passwd"\n')
        wait_until(lambda: "outside the checkpoint directory" in (source.state_error or ""),
                   timeout_s=10)
        wait_until(lambda: "cannot read checkpoint state" in caplog.text, timeout_s=10)
        assert any(r.name == "ckptsync.serving.source" for r in caplog.records)
        publish(tmp_path / "fresh", 2)  # a trainer writes a good state file again
        os.replace(tmp_path / "fresh" / "model.ckpt-2.h5", tmp_path / "model.ckpt-2.h5")
        (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-2"\n')
        assert rec.latest_version(want=2) == 2
        wait_until(lambda: source.state_error is None, timeout_s=10)


def test_no_child_possible_means_watching_here(tmp_path, monkeypatch, caplog):
    publish(tmp_path, 1)
    monkeypatch.setattr(sp, "SOURCE_COMMAND", [sys.executable, "-c", "raise SystemExit(3)"])
    rec = Recorder()
    with ProcessCheckpointSource(tmp_path, rec, rescan_interval_s=30) as source:
        assert rec.latest_version() == 1
        assert source.pid is None and source.alive  # the in-process source
        assert "watching" in caplog.text and "in this process" in caplog.text
        publish(tmp_path, 2)
        assert rec.latest_version(want=2) == 2


def test_the_child_ends_with_a_killed_server(tmp_path):
    publish(tmp_path, 1)
    code = textwrap.dedent(f"""
        import sys, time
        from ckptsync.serving._source_process import ProcessCheckpointSource
        s = ProcessCheckpointSource({str(tmp_path)!r}, lambda listing: None).start()
        print(s.pid, flush=True)
        time.sleep(60)
    """)
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child = int(server.stdout.readline())
        assert not _gone(child)
        server.kill()
        server.wait(timeout=10)
        wait_until(lambda: _gone(child), timeout_s=10)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=10)
        server.stdout.close()


def test_bad_interval_is_refused(tmp_path):
    with pytest.raises(ValueError, match="rescan_interval_s"):
        ProcessCheckpointSource(tmp_path, lambda listing: None, rescan_interval_s=0)
    with pytest.raises(RuntimeError, match="closed"):
        source = ProcessCheckpointSource(tmp_path, lambda listing: None)
        source.close()
        source.start()


def test_close_while_starting_leaves_nothing_watching(tmp_path, monkeypatch):
    publish(tmp_path, 1)
    # A child that takes its configuration and never answers: start() waits for its
    # first listing until close() (on the event "the child runs") ends it.
    child = ("import socket, sys\n"
             "s = socket.socket(fileno=int(sys.argv[-1]))\n"
             "while s.recv(1 << 16):\n"
             "    pass\n")
    monkeypatch.setattr(sp, "SOURCE_COMMAND", [sys.executable, "-c", child])
    calls = []
    source = ProcessCheckpointSource(tmp_path, calls.append, rescan_interval_s=0.05)

    def close_once_the_child_runs():
        wait_until(lambda: source.pid is not None, timeout_s=30)
        source.close()

    closer = threading.Thread(target=close_once_the_child_runs)
    closer.start()
    source.start()  # the child is stopped under it: no in-process fallback after close
    closer.join(30)
    assert not closer.is_alive()
    assert not source.alive and source.pid is None and source._local is None
    # Nothing is left that could call back: no child, no receiving thread, no local
    # source (so no clock needs to pass to show that no listing arrives).
    assert source._thread is None
    publish(tmp_path, 2)
    assert calls == []


def test_a_stopped_child_is_killed_and_replaced_and_close_stays_bounded(tmp_path, monkeypatch,
                                                                        caplog):
    monkeypatch.setattr(sp, "_HEARTBEAT_TIMEOUT_S", 1.5)
    monkeypatch.setattr(sp, "_HANG_TIMEOUT_S", 1.5)
    monkeypatch.setattr(sp, "_CLOSE_TIMEOUT_S", 1.0)
    publish(tmp_path, 1)
    rec = Recorder()
    source = ProcessCheckpointSource(tmp_path, rec, rescan_interval_s=0.2).start()
    try:
        assert rec.latest_version() == 1
        pid = source.pid
        os.kill(pid, signal.SIGSTOP)
        for _ in range(2000):  # more rescans than the socket holds: none may block
            source.rescan()
        # Silent for _HANG_TIMEOUT_S: killed (and reaped), a fresh child follows
        # the directory again.
        wait_until(lambda: _gone(pid), timeout_s=10)
        assert f"checkpoint source process (pid {pid}) did not answer within 1.5 s" in caplog.text
        wait_until(lambda: source.pid not in (None, pid) and source.alive, timeout_s=20)
        assert source.observer_restarts >= 1
        publish(tmp_path, 2)
        wait_until(lambda: rec.latest_version() == 2, timeout_s=10)
        os.kill(source.pid, signal.SIGSTOP)  # close is bounded with a stopped child too
    finally:
        start = time.monotonic()
        source.close()
        assert time.monotonic() - start < sp._CLOSE_TIMEOUT_S + 5


def test_restarts_never_go_down_when_the_child_is_replaced(tmp_path):
    publish(tmp_path, 1)
    rec = Recorder()
    with ProcessCheckpointSource(tmp_path, rec, rescan_interval_s=0.05) as source:
        assert rec.latest_version() == 1
        for _ in range(2):  # the directory replaced: the child's observer restarts
            seen = source.observer_restarts  # before the change, or its restart may be missed
            moved = tmp_path.with_name(tmp_path.name + "-old")
            os.rename(tmp_path, moved)
            os.mkdir(tmp_path)
            publish(tmp_path, 1)
            shutil.rmtree(moved)
            wait_until(lambda seen=seen: source.observer_restarts > seen, timeout_s=10)
        counted = source.observer_restarts
        pid = source.pid
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: source.pid not in (None, pid) and source.alive, timeout_s=20)
        assert source.observer_restarts == counted + 1
