"""`infer serve` as a real process, on which version it serves: a gate that raises
anything, a model that does not match the checkpoints, pins, checkpoints without a step
(issue 16, items 2, 13, 16)."""

from __future__ import annotations

import time

import httpx
import pytest

from .conftest import publish
from .test_cli import start_server, stop_server


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
