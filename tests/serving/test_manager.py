"""ModelManager: off-path loads, atomic swaps, refusing bad versions, policies, status."""

from __future__ import annotations

import gc
import os
import threading
import time

import numpy as np
import pytest

from ckptsync.errors import DeadlineExceededError, NotFoundError, UnavailableError
from ckptsync.serving import ModelManager, VersionPolicy, VersionState
from ckptsync.serving import manager as manager_module

from .conftest import mlp_params, publish, truncate, wait_until


def reference(step: int, x: np.ndarray) -> np.ndarray:
    p = mlp_params(step)
    h = np.maximum(x @ p["dense0/w"] + p["dense0/b"], 0)
    return h @ p["dense1/w"] + p["dense1/b"]


def fast_manager(mlp, directory, **kwargs) -> ModelManager:
    kwargs.setdefault("rescan_interval_s", 0.05)
    kwargs.setdefault("retry_initial_s", 0.05)
    kwargs.setdefault("retry_max_s", 0.2)
    return ModelManager(mlp, directory, **kwargs)


def end_status(manager, version: int) -> dict:
    """``version``'s status entry once it reads END (a retry in between is LOADING + OK)."""
    seen: list[dict] = []
    wait_until(lambda: seen.append(manager.status(version)[0]) or seen[-1]["state"] == "END")
    return seen[-1]


def test_nothing_loaded_yet(tmp_path, mlp):
    with fast_manager(mlp, tmp_path / "none") as manager:
        assert not manager.ready and manager.version is None and manager.alive
        with pytest.raises(UnavailableError, match="no version of the model is loaded yet"):
            manager.acquire()
        with pytest.raises(NotFoundError, match="version 3 is not being served"):
            manager.acquire(3)
        assert manager.status() == []
        with pytest.raises(DeadlineExceededError, match="no version >= 1 was served"):
            manager.wait_for_version(1, timeout_s=0.1)


def test_follows_latest_and_reports_status(tmp_path, mlp):
    publish(tmp_path, 100)
    with fast_manager(mlp, tmp_path) as manager:
        assert manager.wait_for_version(100, timeout_s=10).version == 100
        publish(tmp_path, 200)
        snap = manager.wait_for_version(200, timeout_s=10)
        assert manager.acquire() is snap and manager.acquire(200) is snap
        x = np.ones((2, 4), np.float32)
        np.testing.assert_allclose(
            mlp.run(snap.params, {"x": x})["logits"], reference(200, x), rtol=1e-5
        )
        gc.collect()
        wait_until(lambda: manager.status(100)[0]["state"] == "END")
        assert manager.status() == [
            {
                "version": "200",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            },
            {"version": "100", "state": "END", "status": {"error_code": "OK", "error_message": ""}},
        ]
        with pytest.raises(NotFoundError, match="version 7"):
            manager.status(7)
        stats = manager.stats
        assert stats.reloads_succeeded == 2 and stats.reloads_failed == 0
        assert stats.load_duration_s_sum >= stats.last_load_duration_s > 0


def test_swap_keeps_a_requests_snapshot(tmp_path, mlp):
    """A request blocked mid-forward while v2 loads still finishes entirely on v1."""
    publish(tmp_path, 1)
    in_forward, release = threading.Event(), threading.Event()

    def hook():
        in_forward.set()
        assert release.wait(10)

    x = np.ones((3, 4), np.float32)
    result = {}
    with fast_manager(mlp, tmp_path) as manager:
        manager.wait_for_version(1, timeout_s=10)

        def request():
            snap = manager.acquire()
            result["version"] = snap.version
            result["logits"] = mlp.run(snap.params, {"x": x})["logits"]

        mlp.run_hook = hook
        t = threading.Thread(target=request)
        t.start()
        assert in_forward.wait(10)
        mlp.run_hook = None
        publish(tmp_path, 2)
        manager.wait_for_version(2, timeout_s=10)
        assert manager.status(1)[0]["state"] == "UNLOADING"  # still held by the request
        release.set()
        t.join(10)
        assert result["version"] == 1
        np.testing.assert_allclose(result["logits"], reference(1, x), rtol=1e-5)
        gc.collect()
        wait_until(lambda: manager.status(1)[0]["state"] == "END")


def test_corrupt_version_refused_previous_keeps_serving_next_loads(tmp_path, mlp):
    publish(tmp_path, 1)
    with fast_manager(mlp, tmp_path) as manager:
        manager.wait_for_version(1, timeout_s=10)
        publish(tmp_path, 2, damage=truncate)
        wait_until(lambda: manager.stats.reloads_failed >= 1)
        assert manager.version == 1
        entry = end_status(manager, 2)
        assert entry["status"]["error_code"] == "DATA_LOSS"
        assert "model.ckpt-2.h5" in entry["status"]["error_message"]
        failures = manager.stats.reloads_failed
        wait_until(lambda: manager.stats.reloads_failed > failures)  # retried with backoff
        assert manager.version == 1
        publish(tmp_path, 3)
        assert manager.wait_for_version(3, timeout_s=10).version == 3


def test_bad_shape_refused_with_error_in_status(tmp_path, mlp):
    publish(tmp_path, 1)
    with fast_manager(mlp, tmp_path) as manager:
        manager.wait_for_version(1, timeout_s=10)
        publish(tmp_path, 2, {**mlp_params(2), "dense0/w": np.zeros((4, 9), np.float32)})
        wait_until(lambda: manager.stats.reloads_failed >= 1)
        assert manager.version == 1
        status = end_status(manager, 2)["status"]
        assert status["error_code"] == "INVALID_ARGUMENT"
        assert "'dense0/w' has shape [4, 9]" in status["error_message"]
        with pytest.raises(DeadlineExceededError, match="dense0/w"):
            manager.wait_for_version(2, timeout_s=0.1)


def test_fixed_file_loads_on_retry(tmp_path, mlp):
    prefix = publish(tmp_path, 1, {**mlp_params(1), "dense0/b": np.full(8, np.nan, np.float32)})
    with fast_manager(mlp, tmp_path) as manager:
        wait_until(lambda: manager.stats.reloads_failed >= 1)
        from ckptsync import checkpoint as ckpt

        ckpt.write_checkpoint(prefix, mlp_params(1), global_step=1)
        assert manager.wait_for_version(1, timeout_s=10).version == 1


def test_startup_falls_back_to_older_good_version(tmp_path, mlp):
    publish(tmp_path, 1)
    publish(tmp_path, 2, damage=truncate)
    with fast_manager(mlp, tmp_path) as manager:
        wait_until(lambda: manager.version == 1)
        assert end_status(manager, 2)["status"]["error_code"] == "DATA_LOSS"


def test_vanished_file_goes_to_newest(tmp_path, mlp, monkeypatch):
    publish(tmp_path, 1)
    publish(tmp_path, 2)
    real = manager_module.load_snapshot

    def racing(prefix, *args, **kwargs):
        if prefix.endswith("-2") and os.path.exists(prefix + ".h5"):
            os.unlink(prefix + ".h5")  # retention deleted it after the state file was read
        return real(prefix, *args, **kwargs)

    monkeypatch.setattr(manager_module, "load_snapshot", racing)
    with fast_manager(mlp, tmp_path, retry_max_s=60.0) as manager:
        wait_until(lambda: manager.version == 1)
        assert manager.status(2)[0]["status"]["error_code"] == "NOT_FOUND"
        publish(tmp_path, 3)
        assert manager.wait_for_version(3, timeout_s=10).version == 3


def test_pinned_version_then_unpin(tmp_path, mlp):
    for step in (1, 2, 3):
        publish(tmp_path, step)
    with fast_manager(mlp, tmp_path, policy=2) as manager:
        wait_until(lambda: manager.version == 2)
        publish(tmp_path, 4)
        manager.rescan()
        with pytest.raises(DeadlineExceededError):
            manager.wait_for_version(4, timeout_s=0.3)
        assert manager.version == 2 and manager.policy == VersionPolicy(2)
        manager.set_policy(1)  # roll back further
        wait_until(lambda: manager.version == 1)
        manager.set_policy("latest")
        assert manager.wait_for_version(4, timeout_s=10).version == 4


def test_pinned_version_kept_on_disk_but_not_in_state(tmp_path, mlp):
    from ckptsync import checkpoint as ckpt

    ckpt.write_checkpoint(str(tmp_path / "model.ckpt-5"), mlp_params(5), global_step=5)
    publish(tmp_path, 9)
    with fast_manager(mlp, tmp_path, policy="5") as manager:
        wait_until(lambda: manager.version == 5)


def test_policy_validation():
    assert VersionPolicy.parse("latest") == VersionPolicy(None)
    assert VersionPolicy.parse("12") == VersionPolicy(12)
    with pytest.raises(ValueError, match="'latest' or a version number"):
        VersionPolicy.parse("newest")
    with pytest.raises(ValueError, match=">= 0"):
        VersionPolicy(-1)


def test_states_are_ordered():
    assert VersionState.LOADING < VersionState.AVAILABLE < VersionState.UNLOADING < VersionState.END


def test_lifecycle(tmp_path, mlp):
    manager = fast_manager(mlp, tmp_path)
    manager.start()
    manager.start()
    assert manager.alive
    manager.close()
    manager.close()
    assert not manager.alive
    with pytest.raises(RuntimeError, match="closed"):
        manager.start()
    with pytest.raises(ValueError, match="retry_initial_s"):
        ModelManager(mlp, tmp_path, retry_initial_s=5, retry_max_s=1)


def test_many_reloads_free_old_snapshots(tmp_path, mlp):
    import weakref

    with fast_manager(mlp, tmp_path, max_status_versions=4) as manager:
        refs = []
        for step in range(1, 31):
            publish(tmp_path, step)
            refs.append(weakref.ref(manager.wait_for_version(step, timeout_s=10)))
        gc.collect()
        assert sum(r() is not None for r in refs) == 1  # only the one being served
        assert len(manager.status()) <= 4 + 2  # finished versions pruned to 4


@pytest.mark.parametrize("free_before_load", [False, True])
def test_a_latest_older_than_the_served_version_is_served_with_a_warning(
        tmp_path, mlp, caplog, free_before_load):
    # TF1's state file decides what "latest" is: a trainer that starts over in the same
    # directory (no resume) publishes lower steps, and they are served, but never quietly.
    publish(tmp_path, 200)
    with fast_manager(mlp, tmp_path, free_before_load=free_before_load) as manager:
        wait_until(lambda: manager.version == 200)
        with caplog.at_level("WARNING", logger="ckptsync.serving.manager"):
            publish(tmp_path, 50)
            manager.rescan()
            wait_until(lambda: manager.version == 50)
            wait_until(lambda: any("older than version 200" in r.getMessage()
                                   for r in caplog.records))
            publish(tmp_path, 60)
            wait_until(lambda: manager.version == 60)
            caplog.clear()
            manager.set_policy(50)  # a rollback the operator asked for: no warning
            wait_until(lambda: manager.version == 50)
        assert not any("older than" in r.getMessage() for r in caplog.records)


def test_the_going_back_warning_follows_the_policy_the_load_was_chosen_under(
        tmp_path, mlp, caplog, monkeypatch):
    publish(tmp_path, 50)
    publish(tmp_path, 200)
    slow = threading.Event()
    real = manager_module.load_snapshot

    def load(prefix, *a, **k):
        if slow.is_set() and prefix.endswith("-50"):
            time.sleep(1.0)  # the operator unpins while the pinned load runs
        return real(prefix, *a, **k)

    monkeypatch.setattr(manager_module, "load_snapshot", load)
    with fast_manager(mlp, tmp_path) as manager:
        wait_until(lambda: manager.version == 200)
        slow.set()
        with caplog.at_level("WARNING", logger="ckptsync.serving.manager"):
            manager.set_policy(50)
            time.sleep(0.3)
            manager.set_policy("latest")
            time.sleep(1.0)  # the pinned load ends, and is swapped in, or not
            wait_until(lambda: manager.version == 200)
            wait_until(lambda: manager.status(50)[0]["state"] != "LOADING")
        assert not any("older than" in r.getMessage() for r in caplog.records)



@pytest.mark.parametrize("free_before_load", [False, True])
def test_a_failing_latest_never_takes_the_server_back_to_an_older_checkpoint(
        tmp_path, mlp, caplog, free_before_load):
    # Issue 16, item 17: 100 served; the state file then names a corrupt 102 as the
    # latest and lists only 98 besides. The server keeps 100 (free_before_load: brings
    # 100 back) and never loads 98.
    from ckptsync import checkpoint as ckpt

    p98, p100 = publish(tmp_path, 98), publish(tmp_path, 100)
    with fast_manager(mlp, tmp_path, free_before_load=free_before_load) as manager:
        wait_until(lambda: manager.version == 100)
        with caplog.at_level("WARNING", logger="ckptsync.serving.manager"):
            p102 = os.path.join(tmp_path, "model.ckpt-102")
            ckpt.write_checkpoint(p102, mlp_params(102), global_step=102)
            truncate(p102 + ".h5")
            ckpt.update_checkpoint_state(str(tmp_path), p102, [p98, p102])
            manager.rescan()
            wait_until(lambda: manager.stats.reloads_failed >= 3)  # 102, retried
            wait_until(lambda: manager.version == 100)
        assert end_status(manager, 102)["status"]["error_code"] == "DATA_LOSS"
        with pytest.raises(NotFoundError):
            manager.status(98)  # never tried
        assert not any("older than" in r.getMessage() for r in caplog.records)
        assert os.path.exists(p100 + ".h5")


def test_with_nothing_served_a_failing_latest_falls_back_to_an_older_one(tmp_path, mlp):
    publish(tmp_path, 98)
    publish(tmp_path, 102, damage=truncate)
    with fast_manager(mlp, tmp_path) as manager:
        wait_until(lambda: manager.version == 98)


def test_a_latest_whose_file_is_missing_never_takes_the_server_back(tmp_path, mlp, caplog):
    # The state file names 102, whose file is missing (the source then offers the newest
    # existing one, 98): 100 stays; a latest the state file does name still goes back.
    from ckptsync import checkpoint as ckpt

    p98, p100 = publish(tmp_path, 98), publish(tmp_path, 100)
    with fast_manager(mlp, tmp_path) as manager:
        wait_until(lambda: manager.version == 100)
        with caplog.at_level("WARNING", logger="ckptsync.serving.manager"):
            p102 = os.path.join(tmp_path, "model.ckpt-102")
            ckpt.update_checkpoint_state(str(tmp_path), p102, [p98, p102])
            manager.rescan()
            wait_until(lambda: manager._listing.latest is not None
                       and manager._listing.latest.version == 98)
            time.sleep(0.3)  # several load-loop turns (retry timers of 0.05 s)
            assert manager.version == 100
            with pytest.raises(NotFoundError):
                manager.status(98)
            assert not any("older than" in r.getMessage() for r in caplog.records)
            ckpt.update_checkpoint_state(str(tmp_path), p98, [p98])  # named: served
            manager.rescan()
            wait_until(lambda: manager.version == 98)
            wait_until(lambda: any("older than version 100" in r.getMessage()
                                   for r in caplog.records))
        assert os.path.exists(p100 + ".h5")


def test_a_policy_change_while_a_version_waits_to_load_makes_the_policy_pick_again(
        tmp_path, mlp):
    publish(tmp_path, 1)
    with fast_manager(mlp, tmp_path, unload_wait_s=60) as m:
        m.wait_for_version(1, timeout_s=30)
        held = m.acquire()  # a request on version 1, to its end below
        publish(tmp_path, 2)
        m.wait_for_version(2, timeout_s=30)  # 1 is retired, still held
        publish(tmp_path, 3)
        # 3 is chosen under latest and waits for version 1's last request.
        wait_until(lambda: [e["state"] for e in m.status() if e["version"] == "3"] == [
            "LOADING"], timeout_s=30)
        loads = m.stats.reloads_succeeded
        m.set_policy(2)  # a pin to what is served: nothing to load
        del held
        end_status(m, 3)
        # 3 was never served: the wait's end found the policy changed, so it picked again.
        assert m.version == 2 and m.stats.reloads_succeeded == loads


def test_an_old_snapshot_kept_only_by_a_reference_cycle_does_not_hold_up_the_next_load(
        tmp_path, mlp):
    class Request:  # e.g. an error whose traceback's frames hold the snapshot
        pass

    publish(tmp_path, 1)
    gc.disable()  # only the load thread's own collection may free the cycle
    try:
        with fast_manager(mlp, tmp_path, unload_wait_s=60) as m:
            m.wait_for_version(1, timeout_s=30)
            r = Request()
            r.cycle, r.snapshot = r, m.acquire()
            del r
            publish(tmp_path, 2)
            m.wait_for_version(2, timeout_s=30)  # retires 1, kept by the cycle
            publish(tmp_path, 3)
            # Not 60 s: after 0.2 s of waiting the load thread collects the cycle.
            m.wait_for_version(3, timeout_s=20)
    finally:
        gc.enable()
