"""Issue 16, the request path against a real `infer serve` process on 127.0.0.1: versions
that do not fit int64 (URLs, :pin bodies) are 4xx ``{"error"}``, a request cut by the
drain timeout is a JSON 503, a pin overtaken by a later one answers at once."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading

import httpx
import pytest

from ckptsync.errors import FailedPreconditionError
from ckptsync.serving import ModelManager

from .conftest import MLPServable, publish, wait_until
from .test_cli import infer, wait_for_port

TOKEN = "s3cret-token"
X = [[0.5, -1.0, 2.0, 0.25]]


def start_server(tmp_path, model_file, *extra: str) -> tuple[subprocess.Popen, int]:
    ckpts, port_file = tmp_path / "ckpts", tmp_path / "port"
    publish(ckpts, 7)
    proc = subprocess.Popen(
        infer("serve", "--grpc-port", "0", "--model", str(model_file), "--checkpoint-dir", str(ckpts),
              "--port", "0", "--port-file", str(port_file), "--log-level", "warning",
              "--rescan-interval-s", "0.05", *extra),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        return proc, wait_for_port(proc, port_file)
    except BaseException:
        stop(proc)
        raise


def stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate(timeout=10)
    return err or ""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("req")
    model = tmp / "mlp.py"
    from .conftest import MODEL_SOURCE

    model.write_text(MODEL_SOURCE)
    proc, port = start_server(tmp, model, "--admin-token", TOKEN)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0) as client:
            wait_until(lambda: client.get("/readyz").status_code == 200, timeout_s=30)
            yield client
    finally:
        stop(proc)


HUGE = "9" * 5000


@pytest.mark.slow
@pytest.mark.parametrize("method,path", [
    ("GET", f"/v1/models/mlp/versions/{HUGE}"),
    ("GET", f"/v1/models/mlp/versions/{HUGE}/metadata"),
    ("POST", f"/v1/models/mlp/versions/{HUGE}:predict"),
    ("GET", "/v1/models/mlp/versions/9223372036854775808"),  # 2**63
    ("POST", "/v1/models/mlp/versions/99999999999999999999:predict"),
])
def test_versions_beyond_int64_in_urls_are_404_json(server, method, path):
    r = server.request(method, path, json={"instances": X})
    assert r.status_code == 404, (r.status_code, r.text)
    assert set(r.json()) == {"error"} and "not found" in r.json()["error"]


@pytest.mark.slow
@pytest.mark.parametrize("version", ["²", "٣", HUGE, "9223372036854775808", 2**63, 10**30,
                                     "-1", " 7"])
def test_pin_versions_that_are_not_int64_are_400_json(server, version):
    r = server.post("/v1/models/mlp:pin", json={"version": version},
                    headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 400, (r.status_code, r.text)
    assert set(r.json()) == {"error"} and '"version" must be an integer' in r.json()["error"]


@pytest.mark.slow
def test_pin_body_with_5000_digit_number_is_400(server):
    r = server.post("/v1/models/mlp:pin", content=b'{"version": ' + HUGE.encode() + b"}",
                    headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 400 and set(r.json()) == {"error"}


def _recv_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/v1/models/mlp:predict", "/v1/models/mlp:pin"])
def test_request_cut_by_drain_timeout_is_json_503(tmp_path, model_file, path):
    proc, port = start_server(tmp_path, model_file, "--drain-timeout-s", "1",
                              "--admin-token", TOKEN)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0) as client:
            wait_until(lambda: client.get("/readyz").status_code == 200, timeout_s=30)
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            # Headers and part of a body that never completes: in flight at SIGTERM.
            sock.sendall(f"POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\n"
                         "content-type: application/json\r\ncontent-length: 100\r\n\r\n"
                         '{"instances"'.encode())
            assert client.get("/healthz").status_code == 200  # the server has read it
        proc.send_signal(signal.SIGTERM)
        answer = _recv_all(sock)
        sock.close()
    finally:
        err = stop(proc)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503"), (answer, err[-2000:])
    assert b"application/json" in head.lower()
    assert "drain timeout" in json.loads(body)["error"]
    assert proc.returncode == 0, err[-2000:]


def test_pin_overtaken_by_a_later_pin_answers_at_once(tmp_path):
    """A pin waiting for its load is replaced by a later unpin/pin: it raises
    FailedPreconditionError (HTTP 409) now, not DeadlineExceeded after its timeout."""
    in_gate, release = threading.Event(), threading.Event()

    def gate(candidate):
        if candidate.version == 3:  # holds the load thread until the test is done
            in_gate.set()
            release.wait(30)
        return True

    for step in (1, 2):
        publish(tmp_path, step)
    manager = ModelManager(MLPServable(), tmp_path, rescan_interval_s=0.05, gate=gate)
    outcome: list[BaseException | object] = []
    try:
        manager.start()
        manager.wait_for_version(2, timeout_s=10)
        publish(tmp_path, 3)
        assert in_gate.wait(10)  # the load thread is busy: a pin of 1 cannot load yet

        def pin() -> None:
            try:
                outcome.append(manager.pin(1, timeout_s=60))
            except BaseException as e:  # noqa: BLE001 - the test inspects it
                outcome.append(e)

        t = threading.Thread(target=pin)
        t.start()
        wait_until(lambda: manager.policy.pinned == 1)
        manager.set_policy(2)  # a later pin overtakes it
        t.join(10)
        assert not t.is_alive(), "the overtaken pin kept waiting for its timeout"
        assert isinstance(outcome[0], FailedPreconditionError), outcome
        assert "overtaken" in str(outcome[0]) and "pinned to version 2" in str(outcome[0])
    finally:
        release.set()
        manager.close()
