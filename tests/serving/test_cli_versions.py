"""`infer serve` as a real process, on which version it serves: a gate that raises
anything, a model that does not match the checkpoints, pins, checkpoints without a step
(issue 16, items 2, 13, 16)."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest

from .conftest import publish
from .test_cli import X, start_server, stop_server


def until(predicate, what: str, timeout_s: float = 30.0):
    """Polls ``predicate`` (an HTTP look) until it returns a truthy value, bounded."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.02)


def version_error(client: httpx.Client, version: int) -> str | None:
    r = client.get(f"/v1/models/mlp/versions/{version}")
    if r.status_code != 200:
        return None
    status = r.json()["model_version_status"][0]["status"]
    return None if status["error_code"] == "OK" else status["error_code"] + ": " + status[
        "error_message"]


GATE = '''
class Fatal(BaseException):
    pass


def nervous(candidate):
    if candidate.version == 1:
        raise SystemExit(3)
    if candidate.version == 2:
        raise KeyboardInterrupt()
    if candidate.version == 3:
        raise Fatal("not this one")
    return True
'''


@pytest.mark.slow
def test_a_gate_raising_systemexit_or_any_baseexception_refuses_only_that_version(
        tmp_path, model_file):
    gate = tmp_path / "gates.py"
    gate.write_text(GATE)
    proc, port = start_server(tmp_path, model_file, "--gate", f"{gate}:nervous")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            for step, raised in ((1, "SystemExit: 3"), (2, "KeyboardInterrupt"),
                                 (3, "Fatal: not this one")):
                publish(tmp_path / "ckpts", step)
                error = until(lambda s=step: version_error(client, s), f"version {step} refused")
                assert error == f"FAILED_PRECONDITION: the gate nervous raised {raised}"
                assert client.get("/readyz").status_code == 503
            publish(tmp_path / "ckpts", 4)
            until(lambda: client.get("/readyz").status_code == 200, "version 4 served")
            assert client.get("/readyz").json()["model_version"] == 4
            assert client.get("/healthz").status_code == 200  # the loader still runs
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        log = proc.stderr.read()
        assert "refusing version 1 (nothing served yet): the gate nervous raised SystemExit" in log
    finally:
        stop_server(proc)


@pytest.mark.slow
def test_a_model_that_does_not_match_the_checkpoints_says_so_naming_both_sides(
        tmp_path, model_file):
    from .conftest import mlp_params

    arrays = mlp_params(100)
    del arrays["dense1/b"]
    arrays["dense1/bias"] = np.zeros(3, np.float32)  # renamed in the trainer's model
    prefix = publish(tmp_path / "ckpts", 100, arrays)
    proc, port = start_server(tmp_path, model_file)
    expected = (f"checkpoint {prefix}.h5 has variables [dense0/b, dense0/w, dense1/bias, "
                "dense1/w] but the model needs [dense0/b, dense0/w, dense1/b, dense1/w]: "
                "missing dense1/b")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            until(lambda: version_error(client, 100), "version 100 refused")
            for r in (client.post("/v1/models/mlp:predict", json={"instances": X}),
                      client.get("/readyz")):
                assert r.status_code == 503
                error = r.json()["error"]
                assert "waiting for a checkpoint" not in error
                assert "the model does not match the checkpoints" in error
                assert error.endswith(expected), error
            arrays = mlp_params(200)
            arrays["dense0/w"] = np.zeros((4, 9), np.float32)
            publish(tmp_path / "ckpts", 200, arrays)
            until(lambda: version_error(client, 200), "version 200 refused")
            error = client.get("/readyz").json()["error"]
            assert error.endswith("does not match the model: variable 'dense0/w' has shape "
                                  "[4, 9], the graph expects [4, 8]"), error
            publish(tmp_path / "ckpts", 300)  # the trainer's model fixed
            until(lambda: client.get("/readyz").status_code == 200, "version 300 served")
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        log = proc.stderr.read()
        assert f"refusing version 100 (nothing served yet): {expected}\n" in log
    finally:
        stop_server(proc)


def served(client: httpx.Client) -> tuple[int, float] | None:
    """(model_version, the first logit) of one predict, or None while nothing is served."""
    r = client.post("/v1/models/mlp:predict", json={"instances": X})
    if r.status_code != 200:
        return None
    return r.json()["model_version"], r.json()["predictions"][0]["logits"][0]


@pytest.mark.slow
def test_checkpoints_saved_without_a_step_are_served_each_file_a_newer_version(
        tmp_path, model_file):
    # Issue 16, item 16: saver.save(sess, "ckpts/model.ckpt") every N steps, one path.
    from ckptsync import checkpoint as ckpt

    from .conftest import mlp_params

    ckpts = tmp_path / "ckpts"
    ckpts.mkdir()
    prefix = str(ckpts / "model.ckpt")

    def save(step: int, record_step: bool) -> None:
        ckpt.write_checkpoint(prefix, mlp_params(step),
                              global_step=step if record_step else None)
        ckpt.update_checkpoint_state(str(ckpts), prefix, [prefix])

    save(300, record_step=True)  # the graph had a global step: the file records it
    proc, port = start_server(tmp_path, model_file)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            first = until(lambda: served(client), "the step-less checkpoint served")
            assert first[0] == 300
            seen = [first]
            for step in (400, 500):  # no global step in the graph: nothing recorded
                save(step, record_step=False)
                seen.append(until(lambda: (s := served(client)) and s[1] != seen[-1][1] and s,
                                  f"the file of step {step} served"))
            versions = [v for v, _ in seen]
            assert versions == sorted(set(versions)), versions  # each file a newer version
            assert versions[1] >= 1_000_000_000_000  # from the file's time, in ms
            status = client.get("/v1/models/mlp").json()["model_version_status"]
            assert status[0]["version"] == str(versions[-1])
            assert status[0]["state"] == "AVAILABLE"
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        stop_server(proc)


@pytest.mark.slow
def test_a_pinned_version_deleted_by_retention_is_shown_and_admin_actions_are_logged(
        tmp_path, model_file):
    import os

    ckpts = tmp_path / "ckpts"
    for step in (1, 2, 3):
        publish(ckpts, step)
    env = {**os.environ, "CKPTSYNC_ADMIN_TOKEN": "tok"}
    # --version is the deprecated name of --pin-version: it still pins, with a warning.
    proc, port = start_server(tmp_path, model_file, "--version", "2", env=env)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            until(lambda: client.get("/readyz").status_code == 200, "version 2 served")
            assert client.get("/readyz").json()["model_version"] == 2
            assert client.get("/healthz").json()["pinned"] == {
                "version": 2, "file_missing": False, "warning": None}
            # The trainer's retention deletes version 2 while it is pinned and served.
            from ckptsync import checkpoint as ckpt

            ckpt.update_checkpoint_state(str(ckpts), str(ckpts / "model.ckpt-3"),
                                         [str(ckpts / "model.ckpt-3")])
            os.unlink(ckpts / "model.ckpt-2.h5")
            entry = until(lambda: (e := client.get("/v1/models/mlp/versions/2").json()[
                "model_version_status"][0])["status"]["error_message"] and e,
                "the deleted file shown in status")
            assert entry["state"] == "AVAILABLE" and entry["status"]["error_code"] == "OK"
            assert f"its file {ckpts}/model.ckpt-2.h5 was deleted" in entry["status"][
                "error_message"]
            health = client.get("/healthz")
            assert health.status_code == 200 and health.json()["pinned"]["file_missing"]
            assert "was deleted" in health.json()["pinned"]["warning"]
            h = {"Authorization": "Bearer tok"}
            assert client.post("/v1/models/mlp:unpin", headers=h).status_code == 200
            until(lambda: client.get("/readyz").json()["model_version"] == 3, "unpinned")
            r = client.post("/v1/models/mlp:pin", json={"version": 1}, headers=h)
            assert r.status_code == 200 and r.json()["model_version"] == 1
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        log = proc.stderr.read()
        assert "The option 'version' is deprecated. It is now --pin-version" in log
        assert log.count("was deleted (the trainer's retention?)") == 1  # warned once
        assert ("admin: version policy pinned to version 2 -> latest, requested by POST "
                "/v1/models/mlp:unpin from 127.0.0.1 (serving version 2)") in log
        assert ("admin: version policy latest -> pinned to version 1, requested by POST "
                "/v1/models/mlp:pin from 127.0.0.1 (serving version 3)") in log
    finally:
        stop_server(proc)
