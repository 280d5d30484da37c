"""Pin/unpin with an admin token, the gate, bounded retries, free-before-load, the load
watchdog, the watcher's liveness in /healthz and /metrics, every corrupt checkpoint."""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
from starlette.exceptions import StarletteDeprecationWarning

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

from ckptsync.errors import FailedPreconditionError, NotFoundError
from ckptsync.serving import Candidate, ModelManager, create_app, load_gate
from ckptsync.serving import manager as manager_module

from .conftest import MLPServable, mlp_params, publish, truncate, wait_until

X = [[0.5, -1.0, 2.0, 0.25]]
TOKEN = "s3cret-token"


def fast(mlp, directory, **kwargs) -> ModelManager:
    kwargs.setdefault("rescan_interval_s", 0.05)
    kwargs.setdefault("retry_initial_s", 0.02)
    kwargs.setdefault("retry_max_s", 0.1)
    return ModelManager(mlp, directory, **kwargs)


@pytest.fixture
def admin(tmp_path):
    for step in (1, 2, 3):
        publish(tmp_path, step)
    manager = fast(MLPServable(), tmp_path)
    app = create_app(manager, "mlp", own_manager=True, admin_token=TOKEN)
    with TestClient(app, raise_server_exceptions=False) as client:
        manager.wait_for_version(3, timeout_s=10)
        yield client, manager, tmp_path


def auth(token=TOKEN):
    return {"Authorization": f"Bearer {token}"}


def test_pin_unpin_with_token(admin):
    client, manager, directory = admin
    r = client.post("/v1/models/mlp:pin", json={"version": 1}, headers=auth())
    assert r.status_code == 200, r.text
    assert r.json() == {"policy": "pinned", "pinned_version": 1, "model_version": 1}
    assert client.post("/v1/models/mlp:predict", json={"instances": X}).json()["model_version"] == 1
    publish(directory, 4)
    manager.rescan()
    time.sleep(0.2)
    assert manager.version == 1  # newer checkpoints do not change what is served
    assert 'ckptsync_pinned_version{model="mlp"} 1.0' in client.get("/metrics").text
    r = client.post("/v1/models/mlp:unpin", headers=auth())
    assert r.status_code == 200 and r.json()["policy"] == "latest"
    assert manager.wait_for_version(4, timeout_s=10).version == 4


def test_admin_auth_errors(admin):
    client, manager, _ = admin
    r = client.post("/v1/models/mlp:pin", json={"version": 1})
    assert r.status_code == 401 and "Authorization: Bearer" in r.json()["error"]
    assert r.headers["www-authenticate"].startswith("Bearer")
    for headers in (auth("wrong"), {"Authorization": f"Basic {TOKEN}"}, auth("")):
        r = client.post("/v1/models/mlp:pin", json={"version": 1}, headers=headers)
        assert r.status_code == 403, r.text
    assert client.post("/v1/models/mlp:unpin", headers=auth("nope")).status_code == 403
    assert manager.version == 3 and manager.policy.pinned is None


@pytest.mark.parametrize(
    "body, status, match",
    [
        ({"version": 9}, 404, "version 9 not found"),
        ({}, 400, 'pin body must be an object {"version": N}, got {}'),
        ({"version": "x"}, 400, '"version" must be an integer >= 0 (a global step), got "x"'),
        ({"version": -1}, 400, "got -1"),
        ({"version": True}, 400, "got true"),
        ({"version": 1, "timeout_s": 0}, 400, '"timeout_s" must be a number in (0, 600]'),
    ],
)
def test_pin_bad_requests(admin, body, status, match):
    client, manager, _ = admin
    r = client.post("/v1/models/mlp:pin", json=body, headers=auth())
    assert r.status_code == status, r.text
    assert match in r.json()["error"]
    assert manager.policy.pinned is None


def test_pin_to_broken_version_is_409_and_keeps_policy(admin):
    client, manager, directory = admin
    truncate(str(directory / "model.ckpt-2.h5"))
    r = client.post("/v1/models/mlp:pin", json={"version": 2}, headers=auth())
    assert r.status_code == 409 and "cannot pin version 2" in r.json()["error"]
    assert manager.policy.pinned is None and manager.version == 3


def test_admin_disabled_is_404(serve_plain):
    client = serve_plain
    for path in ("/v1/models/mlp:pin", "/v1/models/mlp:unpin"):
        r = client.post(path, json={"version": 1}, headers=auth())
        assert r.status_code == 404 and "--admin-token" in r.json()["error"]


@pytest.fixture
def serve_plain(tmp_path):
    publish(tmp_path, 1)
    manager = fast(MLPServable(), tmp_path)
    with TestClient(create_app(manager, "mlp", own_manager=True)) as client:
        manager.wait_for_version(1, timeout_s=10)
        yield client


def test_manager_pin_errors(tmp_path, mlp):
    publish(tmp_path, 1)
    with fast(mlp, tmp_path) as manager:
        manager.wait_for_version(1, timeout_s=10)
        with pytest.raises(NotFoundError, match="version 5 not found"):
            manager.pin(5)
        publish(tmp_path, 2, damage=truncate)
        with pytest.raises(FailedPreconditionError, match="cannot pin version 2.*policy stays latest"):
            manager.pin(2, timeout_s=10)
        assert manager.pin(1).version == 1


# -- the gate -------------------------------------------------------------------------
def test_gate_rejects_and_previous_keeps_serving(tmp_path, mlp):
    seen: list[Candidate] = []
    x = np.ones((1, 4), np.float32)

    def gate(candidate):
        seen.append(candidate)
        out = candidate.predict({"x": x})["logits"]
        assert out.shape == (1, 3)
        if candidate.previous is not None:
            candidate.previous.predict({"x": x})
        return candidate.version != 2, f"version {candidate.version} scored low"

    publish(tmp_path, 1)
    with fast(mlp, tmp_path, gate=gate, max_load_attempts=2) as manager:
        manager.wait_for_version(1, timeout_s=10)
        publish(tmp_path, 2)
        wait_until(lambda: manager.stats.reloads_rejected >= 1)
        time.sleep(0.3)  # a gate's verdict is final for that file: no retries
        assert manager.stats.reloads_rejected == 1
        assert sum(c.version == 2 for c in seen) == 1
        assert manager.version == 1
        (entry,) = manager.status(2)
        assert entry["state"] == "END"
        assert entry["status"]["error_code"] == "FAILED_PRECONDITION"
        assert "rejected by the gate function gate: version 2 scored low" in entry["status"]["error_message"]
        publish(tmp_path, 3)
        assert manager.wait_for_version(3, timeout_s=10).version == 3
        assert seen[-1].previous is not None and seen[-1].previous.version == 1


def test_gate_that_raises_or_returns_junk_rejects(tmp_path, mlp):
    publish(tmp_path, 1)
    with fast(mlp, tmp_path, gate=lambda c: 1 / 0, max_load_attempts=1) as manager:
        wait_until(lambda: manager.stats.reloads_rejected == 1)
        msg = manager.status(1)[0]["status"]["error_message"]
        assert "raised ZeroDivisionError" in msg and manager.version is None
    with fast(mlp, tmp_path, gate=lambda c: "yes", max_load_attempts=1) as manager:
        wait_until(lambda: manager.stats.reloads_rejected == 1)
        assert "must return a bool" in manager.status(1)[0]["status"]["error_message"]


def test_load_gate(tmp_path):
    f = tmp_path / "gates.py"
    f.write_text("def ok(candidate):\n    return True\n")
    assert load_gate(f"{f}:ok")(None) is True
    for spec, match in [
        ("nocolon", "FILE:FUNC"),
        (f"{tmp_path}/missing.py:ok", "gate file not found"),
        (f"{f}:absent", "defines no function absent"),
    ]:
        with pytest.raises(ValueError, match=match):
            load_gate(spec)


# -- retries, memory, watchdog ------------------------------------------------------------
def test_retries_are_bounded_then_resume_when_file_changes(tmp_path, mlp):
    from ckptsync import checkpoint as ckpt

    publish(tmp_path, 1)
    prefix = publish(tmp_path, 2, damage=truncate)
    with fast(mlp, tmp_path, max_load_attempts=3) as manager:
        wait_until(lambda: manager.stats.reloads_failed == 3)
        time.sleep(0.3)
        assert manager.stats.reloads_failed == 3 and manager.version == 1
        assert "gave up after 3 attempts" in manager.status(2)[0]["status"]["error_message"]
        ckpt.write_checkpoint(prefix, mlp_params(2), global_step=2)  # fixed in place
        assert manager.wait_for_version(2, timeout_s=10).version == 2


def test_free_before_load(tmp_path, mlp):
    publish(tmp_path, 1)
    with fast(mlp, tmp_path, free_before_load=True) as manager:
        manager.wait_for_version(1, timeout_s=10)
        publish(tmp_path, 2)
        assert manager.wait_for_version(2, timeout_s=10).version == 2
        publish(tmp_path, 3, damage=truncate)  # refused: version 2 comes back
        wait_until(lambda: manager.stats.reloads_failed >= 1)
        wait_until(lambda: manager.version == 2)


def test_at_most_old_and_new_resident(tmp_path, mlp):
    """A request holding the old snapshot delays the next load: never three resident."""
    publish(tmp_path, 1)
    with fast(mlp, tmp_path) as manager:
        held = manager.wait_for_version(1, timeout_s=10)  # an in-flight request
        publish(tmp_path, 2)
        manager.wait_for_version(2, timeout_s=10)
        publish(tmp_path, 3)
        time.sleep(0.3)
        assert manager.version == 2 and manager.status(1)[0]["state"] == "UNLOADING"
        del held  # the request ends
        assert manager.wait_for_version(3, timeout_s=10).version == 3


def test_watchdog_reports_a_stuck_load(tmp_path, mlp, monkeypatch):
    release = threading.Event()
    real = manager_module.load_snapshot

    def hanging(prefix, *args, **kwargs):
        if prefix.endswith("-2"):
            assert release.wait(20)  # a damaged file hanging h5py
        return real(prefix, *args, **kwargs)

    monkeypatch.setattr(manager_module, "load_snapshot", hanging)
    publish(tmp_path, 1)
    manager = fast(mlp, tmp_path, load_timeout_s=0.2)
    app = create_app(manager, "mlp", own_manager=True)
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            manager.wait_for_version(1, timeout_s=10)
            publish(tmp_path, 2)
            wait_until(lambda: client.get("/healthz").status_code == 503)
            r = client.get("/healthz")
            assert "loading version 2" in r.json()["error"] and "stuck" in r.json()["error"]
            assert 'ckptsync_loader_alive{model="mlp"} 0.0' in client.get("/metrics").text
            status = manager.status(2)[0]["status"]
            assert status["error_code"] == "DEADLINE_EXCEEDED" and "restart" in status["error_message"]
            assert client.post("/v1/models/mlp:predict", json={"instances": X}).status_code == 200
            release.set()
            manager.wait_for_version(2, timeout_s=10)
            # the load thread clears its stuck flag right after the swap
            wait_until(lambda: client.get("/healthz").status_code == 200)
    finally:
        release.set()


@pytest.mark.parametrize("in_subprocess", [True, False], ids=["source-process", "in-process"])
def test_watcher_liveness_in_healthz_and_metrics_and_restart(tmp_path, mlp, in_subprocess):
    publish(tmp_path, 1)
    manager = fast(mlp, tmp_path, watch_in_subprocess=in_subprocess)
    with TestClient(create_app(manager, "mlp", own_manager=True)) as client:
        manager.wait_for_version(1, timeout_s=10)
        body = client.get("/healthz").json()
        assert body["watcher"] == {"alive": True, "mode": "events", "restarts": 0,
                                    "state_error": None}
        assert body["loader"]["alive"] is True
        assert 'ckptsync_watcher_alive{mode="events",model="mlp"} 1.0' in client.get("/metrics").text
        if in_subprocess:  # the source process is killed
            pid = manager._source.pid
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: manager._source.pid not in (None, pid))
        else:  # the observer thread dies
            manager._source._observer.stop()
            manager._source._observer.join(5)
        wait_until(lambda: manager.health()["watcher"]["restarts"] >= 1)
        wait_until(lambda: client.get("/healthz").status_code == 200)
        text = client.get("/metrics").text
        assert 'ckptsync_watcher_restarts_total{model="mlp"} 1.0' in text
        assert 'ckptsync_checkpoint_age_seconds{model="mlp"}' in text
        publish(tmp_path, 2)
        assert manager.wait_for_version(2, timeout_s=10).version == 2


def test_a_killed_reader_process_is_replaced_logged_and_counted(tmp_path, mlp, caplog):
    publish(tmp_path, 1)
    manager = fast(mlp, tmp_path)
    with TestClient(create_app(manager, "mlp", own_manager=True)) as client:
        manager.wait_for_version(1, timeout_s=10)
        assert client.get("/healthz").json()["loader"]["reader_restarts"] == 0
        pid = manager._reader.pid
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: client.get("/healthz").json()["loader"]["reader_restarts"] == 1)
        assert manager._reader.pid not in (None, pid)  # replaced now, not at the next load
        assert f"reader process (pid {pid}) was killed by SIGKILL" in caplog.text
        assert 'ckptsync_reader_restarts_total{model="mlp"} 1.0' in client.get("/metrics").text
        publish(tmp_path, 2)
        assert manager.wait_for_version(2, timeout_s=10).version == 2


# -- every corrupt checkpoint of RELIABILITY.md -------------------------------------------
def _flip(offset_fraction: float):
    def damage(path: str) -> None:
        raw = bytearray(Path(path).read_bytes())
        at = int(len(raw) * offset_fraction)
        for i in range(at, min(len(raw), at + 16)):
            raw[i] ^= 0xFF
        Path(path).write_bytes(bytes(raw))

    return damage


def _flip_data(path: str) -> None:
    raw = bytearray(Path(path).read_bytes())
    at = raw.find(mlp_params(2)["dense1/w"].tobytes())
    raw[at + 3] ^= 0x55
    Path(path).write_bytes(bytes(raw))


def _cut(n: int):
    def damage(path: str) -> None:
        data = Path(path).read_bytes()
        Path(path).write_bytes(data[:n] if n >= 0 else data[:n])

    return damage


def _superblock(path: str) -> None:
    with h5py.File(path, "r"):
        pass
    raw = bytearray(Path(path).read_bytes())
    raw[0:8] = b"NOTHDF5!"
    Path(path).write_bytes(bytes(raw))


CORRUPT = {
    "truncated-0": (None, _cut(0), "DATA_LOSS"),
    "truncated-100": (None, _cut(100), "DATA_LOSS"),
    "truncated-tail": (None, _cut(-64), "DATA_LOSS"),
    "superblock": (None, _superblock, "DATA_LOSS"),
    "metadata-flip-5%": (None, _flip(0.05), None),
    "metadata-flip-20%": (None, _flip(0.2), None),
    "data-flip": (None, _flip_data, "DATA_LOSS"),
    "wrong-shape": ({"dense0/w": np.zeros((4, 9), np.float32)}, None, "INVALID_ARGUMENT"),
    "wrong-dtype": ({"dense0/b": np.zeros(8, np.float64)}, None, "INVALID_ARGUMENT"),
    "missing-variable": ({"dense1/b": None}, None, "NOT_FOUND"),
    "nan": ({"dense1/w": np.full((8, 3), np.nan, np.float32)}, None, "INVALID_ARGUMENT"),
    "inf": ({"dense0/b": np.full(8, np.inf, np.float32)}, None, "INVALID_ARGUMENT"),
}


@pytest.mark.parametrize("case", list(CORRUPT))
def test_corrupt_refused_previous_serves_status_shows_next_loads(tmp_path, mlp, case):
    change, damage, code = CORRUPT[case]
    arrays = None
    if change is not None:
        arrays = {**mlp_params(2), **{k: v for k, v in change.items() if v is not None}}
        for k in [k for k, v in change.items() if v is None]:
            del arrays[k]
    publish(tmp_path, 1)
    manager = fast(mlp, tmp_path, max_load_attempts=1, load_timeout_s=10)
    with TestClient(create_app(manager, "mlp", own_manager=True)) as client:
        manager.wait_for_version(1, timeout_s=10)
        publish(tmp_path, 2, arrays, damage=damage)
        wait_until(lambda: manager.stats.reloads_failed >= 1)
        r = client.post("/v1/models/mlp:predict", json={"instances": X})
        assert r.status_code == 200 and r.json()["model_version"] == 1
        (entry,) = client.get("/v1/models/mlp/versions/2").json()["model_version_status"]
        assert entry["state"] == "END"
        if code is not None:
            assert entry["status"]["error_code"] == code
        assert "model.ckpt-2.h5" in entry["status"]["error_message"]
        if change is not None:
            assert next(iter(change)) in entry["status"]["error_message"]
        assert client.get("/readyz").status_code == 200
        publish(tmp_path, 3)
        assert manager.wait_for_version(3, timeout_s=10).version == 3


def test_state_file_problems_show_in_healthz_and_serving_goes_on(tmp_path):
    """A state file naming a path outside the directory is refused; /healthz says why."""
    from starlette.testclient import TestClient

    from ckptsync.serving import ModelManager, create_app

    d = tmp_path / "ckpts"
    publish(d, 1)
    manager = ModelManager(MLPServable(), str(d), rescan_interval_s=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client_cm = TestClient(create_app(manager, "mlp", own_manager=True))
    with client_cm as client:
        manager.wait_for_version(1, timeout_s=10)
        (d / "checkpoint").write_text('model_checkpoint_path: "../../etc/passwd"\n')
        deadline = time.monotonic() + 10
        while client.get("/healthz").json()["watcher"]["state_error"] is None:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert "outside the checkpoint directory" in \
            client.get("/healthz").json()["watcher"]["state_error"]
        assert client.get("/readyz").json()["model_version"] == 1
        assert client.get("/v1/models/mlp:predict").status_code == 405
        (d / "checkpoint").unlink()  # the trainer rewrites the state file from scratch
        publish(d, 2)
        manager.wait_for_version(2, timeout_s=10)
        assert client.get("/healthz").json()["watcher"]["state_error"] is None
