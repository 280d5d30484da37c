"""CheckpointSource: events are hints, the state file is the truth, the watcher survives."""

from __future__ import annotations

import logging
import os
import queue
import shutil
import time

import pytest

from ckptsync.serving import source as source_module
from ckptsync.serving.source import AspiredVersion, CheckpointSource, parse_version

from .conftest import mlp_params, publish, wait_until


class Recorder:
    def __init__(self):
        self.calls = queue.Queue()

    def __call__(self, listing):
        self.calls.put(listing)

    def next(self, timeout_s=5.0):
        return self.calls.get(timeout=timeout_s)

    def latest_version(self, timeout_s=5.0, want=None):
        while True:
            listing = self.next(timeout_s)
            v = listing.latest.version if listing.latest else None
            if want is None or v == want:
                return v


def test_parse_version():
    assert parse_version("ckpts/model.ckpt-1200") == 1200
    assert parse_version("/a/b-3/model.ckpt") is None


def test_events_trigger_callback_on_publish(tmp_path):
    rec = Recorder()
    # A long rescan interval: only file events can deliver this quickly.
    with CheckpointSource(tmp_path, rec, rescan_interval_s=60.0) as source:
        assert rec.next().latest is None  # initial scan: nothing yet
        publish(tmp_path, 10)
        assert rec.latest_version(want=10) == 10
        publish(tmp_path, 20)
        assert rec.latest_version(want=20) == 20
        listing = source.last
        assert listing.latest == AspiredVersion(20, str(tmp_path / "model.ckpt-20"))
        assert [a.version for a in listing.available] == [10, 20]
        assert source.alive


def test_reading_the_directory_does_not_wake_the_watcher(tmp_path, monkeypatch):
    """Opens and read-only closes (every rescan and every load make them) are not
    watched; a publish still is."""
    publish(tmp_path, 1)
    events = []
    monkeypatch.setattr(source_module._Handler, "on_any_event",
                        lambda self, event: events.append(event.event_type))
    with CheckpointSource(tmp_path, Recorder(), rescan_interval_s=60.0):
        for _ in range(20):
            for name in os.listdir(tmp_path):
                with open(tmp_path / name, "rb") as f:
                    f.read()
        publish(tmp_path, 2)
        wait_until(lambda: "moved" in events, timeout_s=5.0)
    assert "opened" not in events and "closed_no_write" not in events


@pytest.mark.parametrize("poll", [False, True], ids=["inotify", "polling"])
def test_a_state_file_rewritten_in_place_is_seen(tmp_path, poll):
    rec = Recorder()
    publish(tmp_path, 1)
    publish(tmp_path, 2)
    state = (tmp_path / "checkpoint").read_text()
    older = state.replace('model_checkpoint_path: "model.ckpt-2"',
                          'model_checkpoint_path: "model.ckpt-1"')
    assert older != state
    # Events alone (inotify: a 60 s timer) or the poll every 0.1 s.
    with CheckpointSource(tmp_path, rec, poll=poll, rescan_interval_s=0.1 if poll else 60.0):
        assert rec.next().latest.version == 2
        with open(tmp_path / "checkpoint", "w") as f:  # not atomic: write, then close
            f.write(older)
        assert rec.latest_version(want=1) == 1


def test_a_state_file_moved_in_from_another_directory_is_seen(tmp_path):
    """An unpaired IN_MOVED_TO, which watchdog reports as a created event."""
    rec = Recorder()
    ckpts, elsewhere = tmp_path / "ckpts", tmp_path / "elsewhere"
    ckpts.mkdir()
    elsewhere.mkdir()
    publish(ckpts, 1)
    publish(ckpts, 2)
    state = (ckpts / "checkpoint").read_text()
    (elsewhere / "checkpoint").write_text(
        state.replace('model_checkpoint_path: "model.ckpt-2"', 'model_checkpoint_path: "model.ckpt-1"'))
    with CheckpointSource(ckpts, rec, rescan_interval_s=60.0):
        assert rec.next().latest.version == 2
        os.replace(elsewhere / "checkpoint", ckpts / "checkpoint")
        assert rec.latest_version(want=1, timeout_s=5.0) == 1


def test_callback_only_when_listing_changes(tmp_path):
    rec = Recorder()
    publish(tmp_path, 1)
    with CheckpointSource(tmp_path, rec, rescan_interval_s=0.05) as source:
        assert rec.next().latest.version == 1
        for _ in range(3):
            source.rescan()
        (tmp_path / "unrelated.txt").write_text("x")
        with pytest.raises(queue.Empty):
            rec.next(timeout_s=0.3)


def test_polling_mode_without_events(tmp_path):
    rec = Recorder()
    with CheckpointSource(tmp_path, rec, poll=True, rescan_interval_s=0.05) as source:
        rec.next()
        publish(tmp_path, 5)
        assert rec.latest_version(want=5) == 5
        assert source.alive


def test_unnamed_and_temp_files_are_not_versions(tmp_path):
    from ckptsync import checkpoint as ckpt

    rec = Recorder()
    with CheckpointSource(tmp_path, rec, rescan_interval_s=0.05) as source:
        rec.next()
        # A complete file the state file does not name, and a temp file: neither counts.
        ckpt.write_checkpoint(str(tmp_path / "model.ckpt-7"), mlp_params(7), global_step=7)
        (tmp_path / ".model.ckpt-8.h5.tmp-123-0").write_bytes(b"partial")
        with pytest.raises(queue.Empty):
            rec.next(timeout_s=0.3)
        assert source.last.latest is None


def test_missing_state_target_falls_back_to_newest_existing(tmp_path):
    rec = Recorder()
    publish(tmp_path, 1)
    publish(tmp_path, 2)
    os.unlink(tmp_path / "model.ckpt-2.h5")  # retention or a hand deletion
    with CheckpointSource(tmp_path, rec, rescan_interval_s=60.0):
        listing = rec.next()
        assert listing.latest.version == 1
        assert [a.version for a in listing.available] == [1]


def test_deleting_an_offered_file_is_seen_and_an_unlisted_one_costs_no_rescan(
        tmp_path, monkeypatch):
    rec = Recorder()
    for v in (1, 2, 3):
        publish(tmp_path, v)
    (tmp_path / "model.ckpt-9.h5").write_bytes(b"not listed")
    with CheckpointSource(tmp_path, rec, rescan_interval_s=60.0) as source:
        assert rec.next().latest.version == 3
        scans = []
        real_scan = source._scan
        monkeypatch.setattr(source, "_scan", lambda: scans.append(1) or real_scan())
        os.unlink(tmp_path / "model.ckpt-9.h5")  # not offered: nothing to rescan
        os.unlink(tmp_path / "model.ckpt-3.h5")  # the latest: back to version 2 at once
        assert rec.latest_version(want=2) == 2
        assert [a.version for a in source.last.available] == [1, 2]
        assert len(scans) == 1


def test_waits_for_directory_that_does_not_exist_yet(tmp_path):
    rec = Recorder()
    directory = tmp_path / "later" / "ckpts"
    with CheckpointSource(directory, rec, rescan_interval_s=0.05) as source:
        assert rec.next().latest is None
        assert source.alive
        publish(directory, 3)
        assert rec.latest_version(want=3) == 3
        # Now watched by events: a publish arrives well before a long rescan would.
        wait_until(lambda: source._observer_alive())
        assert source.alive


def test_observer_restarted_when_directory_replaced(tmp_path):
    rec = Recorder()
    directory = tmp_path / "ckpts"
    publish(directory, 1)
    with CheckpointSource(directory, rec, rescan_interval_s=0.05) as source:
        assert rec.next().latest.version == 1
        shutil.rmtree(directory)
        assert rec.latest_version(want=None) is None
        publish(directory, 2)
        assert rec.latest_version(want=2) == 2
        wait_until(lambda: source.observer_restarts >= 1 and source._observer_alive())
        assert source.alive


def test_callback_errors_are_logged_and_watching_continues(tmp_path, caplog):
    seen = []

    def flaky(listing):
        seen.append(listing)
        if len(seen) == 2:
            raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="ckptsync.serving.source"):
        with CheckpointSource(tmp_path, flaky, rescan_interval_s=0.05) as source:
            publish(tmp_path, 1)
            wait_until(lambda: len(seen) >= 2)
            publish(tmp_path, 2)
            wait_until(lambda: seen[-1].latest is not None and seen[-1].latest.version == 2)
            assert source.alive
    assert "boom" in caplog.text


def test_close_is_idempotent_and_stops_threads(tmp_path):
    source = CheckpointSource(tmp_path, lambda listing: None).start()
    assert source.alive
    source.close()
    source.close()
    assert not source.alive
    with pytest.raises(RuntimeError, match="closed"):
        source.start()


def test_rejects_bad_interval(tmp_path):
    with pytest.raises(ValueError, match="rescan_interval_s"):
        CheckpointSource(tmp_path, print, rescan_interval_s=0)


def test_a_broken_state_file_is_reported_once_not_every_rescan(tmp_path, caplog):
    publish(tmp_path, 1)
    rec = Recorder()
    with caplog.at_level(logging.WARNING), \
            CheckpointSource(tmp_path, rec, rescan_interval_s=0.02) as source:
        assert rec.latest_version() == 1
        (tmp_path / "tmp").write_bytes(b"\x00garbage\xff")  # replaced whole, as a
        os.replace(tmp_path / "tmp", tmp_path / "checkpoint")  # writer does
        wait_until(lambda: source.state_error is not None)
        assert "Unparsable checkpoint state" in source.state_error
        time.sleep(0.3)  # ~15 rescans
        assert caplog.text.count("Unparsable checkpoint state") == 1
        (tmp_path / "tmp").write_text(
            'model_checkpoint_path: "model.ckpt-1"\nall_model_checkpoint_paths: "nostep"\n'
            'all_model_checkpoint_paths: "model.ckpt-1"\n')
        os.replace(tmp_path / "tmp", tmp_path / "checkpoint")
        wait_until(lambda: source.state_error is None)
        time.sleep(0.3)
        assert source.last.latest.version == 1  # "nostep" has no file: not offered
        assert "nostep" not in caplog.text


def test_tensorboard_event_files_are_never_versions_and_cost_no_rescan(tmp_path, monkeypatch):
    """MonitoredTrainingSession without ``summary_dir`` writes its event files into the
    checkpoint directory (as TF1's): the source neither offers them nor rescans for them;
    a publish after them is still seen."""
    rec = Recorder()
    publish(tmp_path, 1)
    with CheckpointSource(tmp_path, rec, rescan_interval_s=60.0) as source:
        assert rec.next().latest.version == 1
        scans = []
        real_scan = source._scan
        monkeypatch.setattr(source, "_scan", lambda: scans.append(1) or real_scan())
        for i in range(3):
            (tmp_path / f"events.out.tfevents.{i}.host").write_bytes(b"event")
        publish(tmp_path, 2)
        assert rec.latest_version(want=2) == 2
        assert [a.version for a in source.last.available] == [1, 2]
        assert len(scans) == 1
