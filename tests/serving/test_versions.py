"""VersionBook, the manager's record keeping, on its own: no thread, no source, no file
reads (the manager's tests cover it driven by the load thread)."""

from __future__ import annotations

import gc
import math
import time

import pytest

from ckptsync.errors import DEADLINE_EXCEEDED, INVALID_ARGUMENT, NotFoundError
from ckptsync.serving import ManagerOptions, Snapshot, VersionState
from ckptsync.serving._versions import VersionBook
from ckptsync.serving.source import AspiredVersion


def snapshot(version: int, prefix: str | None = None) -> Snapshot:
    return Snapshot(version, prefix or f"ckpts/model.ckpt-{version}", {}, time.time(), 0.01)


def aspired(version: int, prefix: str | None = None) -> AspiredVersion:
    return AspiredVersion(version, prefix or f"ckpts/model.ckpt-{version}")


def book(**options) -> VersionBook:
    return VersionBook(ManagerOptions(**options))


def test_backoff_doubles_up_to_the_max_then_gives_up():
    b = book(retry_initial_s=0.1, retry_max_s=0.4, max_load_attempts=5)
    rec = b.begin_load(aspired(3))
    delays = []
    for _ in range(4):
        before = time.monotonic()
        b.failed(rec, INVALID_ARGUMENT, "bad")
        delays.append(round(rec.retry_at_s - before, 1))
    assert delays == [0.1, 0.2, 0.4, 0.4]
    b.failed(rec, INVALID_ARGUMENT, "bad")
    assert rec.retry_at_s == math.inf
    assert rec.error_message == "bad (gave up after 5 attempts; retried when the file changes)"
    assert b.stats.reloads_failed == 5 and b.seq == 5 and rec.finished_seq == 5


def test_next_target_skips_a_version_waiting_for_its_retry():
    b = book(retry_initial_s=5.0, retry_max_s=10.0)
    b.failed(b.begin_load(aspired(2)), INVALID_ARGUMENT, "bad")
    target, wait_s = b.next_target([aspired(2), aspired(1)])
    assert target == aspired(1) and wait_s is None
    target, wait_s = b.next_target([aspired(2)])
    assert target is None and wait_s is not None and 4.0 < wait_s <= 5.0
    b.reset_retries(2)  # a pin: try it now
    assert b.next_target([aspired(2)]) == (aspired(2), None)


def test_a_given_up_version_is_retried_when_its_file_changes(tmp_path):
    prefix = str(tmp_path / "model.ckpt-4")
    with open(prefix + ".h5", "wb") as f:
        f.write(b"broken")
    b = book(max_load_attempts=1)
    rec = b.begin_load(aspired(4, prefix))
    b.failed(rec, INVALID_ARGUMENT, "bad")
    assert b.next_target([aspired(4, prefix)]) == (None, 60.0)
    with open(prefix + ".h5", "wb") as f:
        f.write(b"fixed, and longer")
    assert b.next_target([aspired(4, prefix)]) == (aspired(4, prefix), None)
    assert rec.failures == 0


def test_rejected_and_vanished_versions():
    b = book(retry_max_s=30.0)
    rec = b.begin_load(aspired(5))
    b.failed(rec, INVALID_ARGUMENT, "the gate said no", rejected=True)
    assert rec.retry_at_s == math.inf and b.stats.reloads_rejected == 1
    rec = b.begin_load(aspired(6))
    b.failed(rec, INVALID_ARGUMENT, "gone", vanished=True)
    assert 29.0 < rec.retry_at_s - time.monotonic() <= 30.0


def test_swap_retires_the_old_snapshot_until_its_last_request_drops_it():
    b = book()
    snap1 = snapshot(1)
    assert b.swap(b.begin_load(aspired(1)), snap1) == (True, None)
    assert b.current is snap1 and b.last_served == 1
    held = snap1
    del snap1
    assert b.swap(b.begin_load(aspired(2)), snapshot(2)) == (True, 1)
    assert [s["state"] for s in b.status()] == ["AVAILABLE", "UNLOADING"]
    del held
    gc.collect()
    assert b.status(1)[0]["state"] == "END"
    b.wait_for_old_snapshots()  # nothing held: returns at once
    assert b.stats.reloads_succeeded == 2


def test_retire_current_for_free_before_load():
    b = book()
    b.swap(b.begin_load(aspired(1)), snapshot(1))
    assert b.retire_current(keep=aspired(1)) is None  # the one to load is the one served
    assert b.retire_current(keep=aspired(2)) == 1
    assert b.current is None and b.last_served == 1


def test_status_is_newest_first_and_pruned():
    b = book(max_status_versions=2)
    for v in (1, 2, 3, 4):
        b.failed(b.begin_load(aspired(v)), INVALID_ARGUMENT, f"bad {v}")
    assert [s["version"] for s in b.status()] == ["4", "3"]
    assert b.status(4)[0]["status"] == {"error_code": "INVALID_ARGUMENT",
                                        "error_message": "bad 4"}
    assert b.last_error() == "bad 4" and b.load_error_since(4, 0) == "bad 4"
    assert b.load_error_since(4, b.seq) is None
    with pytest.raises(NotFoundError, match="version 1 of the model is not known"):
        b.status(1)


def test_watchdog_reports_a_stuck_load_once():
    b = book(load_timeout_s=0.01)
    rec = b.begin_load(aspired(9))
    b.watch(rec)
    time.sleep(0.05)
    version, for_s, stuck = b.loading()
    assert (version, stuck) == (9, True) and for_s >= 0.01
    assert rec.state == VersionState.END and rec.error_code == DEADLINE_EXCEEDED
    assert "load_timeout_s=0.01" in rec.error_message and b.stats.reloads_failed == 1
    b.failed(rec, INVALID_ARGUMENT, "finally failed")  # counted once, not twice
    b.unwatch()
    assert b.stats.reloads_failed == 1 and b.loading() == (None, 0.0, False)


def test_closed_book_swaps_nothing():
    b = book()
    b.close()
    assert b.swap(b.begin_load(aspired(1)), snapshot(1)) == (False, None)
    assert b.current is None and b.closed


def test_a_failed_version_reports_end_with_its_error_and_a_retry_loading_with_ok():
    """TF Serving's get_model_status.proto: an error status belongs to END; a retry of a
    refused version is LOADING with OK, never LOADING with the last load's error."""
    b = book()
    rec = b.begin_load(aspired(30))
    b.failed(rec, INVALID_ARGUMENT, "variable 'dense/kernel' has shape [64, 10]")
    assert b.status(30) == [{"version": "30", "state": "END", "status": {
        "error_code": "INVALID_ARGUMENT",
        "error_message": "variable 'dense/kernel' has shape [64, 10]"}}]
    assert b.begin_load(aspired(30)) is rec  # the retry
    assert b.status(30) == [{"version": "30", "state": "LOADING",
                             "status": {"error_code": "OK", "error_message": ""}}]
    assert b.last_error() == "variable 'dense/kernel' has shape [64, 10]"  # still known
    b.failed(rec, INVALID_ARGUMENT, "again")
    assert b.status(30)[0]["state"] == "END"
    assert b.status(30)[0]["status"]["error_code"] == "INVALID_ARGUMENT"


def test_a_version_is_available_before_its_snapshot_is_served():
    """The request path reads ``current`` without the lock: the record must say AVAILABLE
    by the time a request can see the snapshot (else status lags an answered :predict)."""
    seen = []

    class Spy(VersionBook):
        @property
        def current(self):
            return self.__dict__.get("_spied_current")

        @current.setter
        def current(self, snap):
            if snap is not None:
                seen.append(self.status(snap.version)[0]["state"])
            self.__dict__["_spied_current"] = snap

    b = Spy(ManagerOptions())
    assert b.swap(b.begin_load(aspired(30)), snapshot(30)) == (True, None)
    assert seen == ["AVAILABLE"]
