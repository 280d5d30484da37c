"""`infer serve` as a real process: port file, 503 before a checkpoint, hot reload under
load, one-line errors with exit codes, SIGTERM -> drain -> exit 0."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from .conftest import publish

X = [[0.5, -1.0, 2.0, 0.25]]


def infer(*args: str) -> list[str]:
    return [sys.executable, "-m", "ckptsync.cli.infer", *args]


def run_infer(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(infer(*args), capture_output=True, text=True, timeout=timeout_s)


def wait_for_port(proc: subprocess.Popen, port_file, timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"infer serve exited with {proc.returncode}: {proc.stderr.read()}")
        if port_file.exists():
            return int(port_file.read_text())
        time.sleep(0.02)
    raise AssertionError("infer serve did not write its port file in time")


@pytest.mark.slow
def test_serve_hot_reloads_under_load_and_drains_on_sigterm(tmp_path, model_file):
    ckpts, port_file = tmp_path / "ckpts", tmp_path / "port"
    proc = subprocess.Popen(
        infer(
            "serve",
            "--grpc-port",
            "0",
            "--model",
            str(model_file),
            "--checkpoint-dir",
            str(ckpts),
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--rescan-interval-s",
            "0.2",
            "--log-level",
            "warning",
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = wait_for_port(proc, port_file)
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=10.0) as client:
            assert client.get("/healthz").status_code == 200
            assert client.get("/readyz").status_code == 503
            r = client.post("/v1/models/mlp:predict", json={"instances": X})
            assert r.status_code == 503 and "error" in r.json()

            publish(ckpts, 1)
            deadline = time.monotonic() + 30
            while client.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline, "first checkpoint never loaded"
                time.sleep(0.02)

            answers, stop = [], threading.Event()

            def load():
                with httpx.Client(base_url=base, timeout=10.0) as c:
                    while not stop.is_set():
                        r = c.post("/v1/models/mlp:predict", json={"instances": X})
                        answers.append((r.status_code, r.json().get("model_version")))

            threads = [threading.Thread(target=load) for _ in range(3)]
            for t in threads:
                t.start()
            try:
                for step in range(2, 11):
                    publish(ckpts, step)
                    time.sleep(0.1)
                deadline = time.monotonic() + 30
                while not answers or answers[-1][1] != 10:
                    assert time.monotonic() < deadline, f"never served version 10: {answers[-3:]}"
                    time.sleep(0.02)
            finally:
                stop.set()
                for t in threads:
                    t.join(30)
            assert answers and all(code == 200 for code, _ in answers), answers[:5]
            versions = {v for _, v in answers}
            assert 10 in versions and len(versions) >= 2
            status = client.get("/v1/models/mlp").json()["model_version_status"]
            assert status[0] == {
                "version": "10",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
            assert 'ckptsync_served_version{model="mlp"} 10.0' in client.get("/metrics").text

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stderr.close()


def test_port_in_use_is_one_line_exit_1(tmp_path, model_file):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = run_infer(
            "serve",
            "--grpc-port",
            "0",
            "--model",
            str(model_file),
            "--checkpoint-dir",
            str(tmp_path),
            "--port",
            str(port),
        )
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0]
    assert "Traceback" not in r.stderr


def test_missing_model_file_is_usage_error(tmp_path):
    r = run_infer("serve", "--grpc-port", "0", "--model", str(tmp_path / "nope.py"), "--checkpoint-dir", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"infer serve: error: Invalid value for '--model': {tmp_path / 'nope.py'} is not a file"
    ]


def test_missing_required_option_is_usage_error(tmp_path):
    r = run_infer("serve", "--checkpoint-dir", str(tmp_path))
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "--model" in r.stderr


def test_broken_model_file_is_one_line_exit_2_as_for_the_trainer(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("raise ImportError('no such thing')\n")
    r = run_infer("serve", "--grpc-port", "0", "--model", str(bad), "--checkpoint-dir", str(tmp_path))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and "cannot build the model from" in lines[0]
        and "no such thing" in lines[0]
    )


def test_help():
    r = run_infer("serve", "--help")
    assert r.returncode == 0 and "--port-file" in r.stdout


def start_server(tmp_path, model_file, *extra: str, env=None) -> tuple[subprocess.Popen, int]:
    ckpts, port_file = tmp_path / "ckpts", tmp_path / "port"
    proc = subprocess.Popen(
        infer("serve", "--grpc-port", "0", "--model", str(model_file), "--checkpoint-dir", str(ckpts), "--port", "0",
              "--port-file", str(port_file), "--rescan-interval-s", "0.05", "--log-level",
              "warning", *extra),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )
    return proc, wait_for_port(proc, port_file)


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
    proc.stderr.close()


def open_partial_request(port: int) -> tuple[socket.socket, bytes]:
    """Sends a predict's headers and half its body: a request in flight."""
    body = b'{"instances": [[0.5, -1.0, 2.0, 0.25]]}'
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    sock.sendall(
        b"POST /v1/models/mlp:predict HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(body) + body[:10]
    )
    return sock, body[10:]


@pytest.mark.slow
def test_sigterm_drains_a_real_in_flight_request_then_exits_0(tmp_path, model_file):
    publish(tmp_path / "ckpts", 3)
    proc, port = start_server(tmp_path, model_file)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            deadline = time.monotonic() + 30
            while client.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        sock, rest = open_partial_request(port)
        with sock:
            time.sleep(0.2)  # the server has the request and waits for its body
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            assert proc.poll() is None, "exited with a request in flight"
            with pytest.raises(OSError):  # no longer accepting
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
            sock.sendall(rest)
            answer = b""
            while b'"model_version"' not in answer:
                chunk = sock.recv(65536)
                assert chunk, f"connection closed before the answer: {answer!r}"
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200"), answer
        assert b'"model_version":3' in answer
        assert proc.wait(timeout=30) == 0
    finally:
        stop_server(proc)


@pytest.mark.slow
def test_sigterm_drain_is_bounded(tmp_path, model_file):
    publish(tmp_path / "ckpts", 3)
    proc, port = start_server(tmp_path, model_file, "--drain-timeout-s", "1")
    try:
        sock, _ = open_partial_request(port)  # never finished
        with sock:
            time.sleep(0.2)
            start = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            assert time.monotonic() - start < 15
    finally:
        stop_server(proc)


@pytest.mark.slow
def test_pin_version_flag_admin_token_env_and_gate(tmp_path, model_file):
    import os

    for step in (1, 2):
        publish(tmp_path / "ckpts", step)
    gate = tmp_path / "gates.py"
    gate.write_text("def below_5(candidate):\n    return candidate.version < 5\n")
    env = {**os.environ, "CKPTSYNC_ADMIN_TOKEN": "tok"}
    proc, port = start_server(tmp_path, model_file, "--pin-version", "1", "--gate",
                              f"{gate}:below_5", env=env)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            deadline = time.monotonic() + 30
            while client.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            assert client.get("/readyz").json()["model_version"] == 1  # pinned at start
            h = {"Authorization": "Bearer tok"}
            assert client.post("/v1/models/mlp:unpin", headers={"Authorization": "Bearer x"}
                               ).status_code == 403
            assert client.post("/v1/models/mlp:unpin", headers=h).status_code == 200
            publish(tmp_path / "ckpts", 7)  # refused by the gate
            while True:  # wait for the refusal before publishing the next version
                r = client.get("/v1/models/mlp/versions/7")
                if r.status_code == 200 and r.json()["model_version_status"][0]["status"][
                        "error_code"] != "OK":
                    break
                assert time.monotonic() < deadline + 30
                time.sleep(0.02)
            status = r.json()["model_version_status"][0]
            assert status["status"]["error_code"] == "FAILED_PRECONDITION"
            assert "rejected by the gate function below_5" in status["status"]["error_message"]
            publish(tmp_path / "ckpts", 4)
            while client.get("/readyz").json()["model_version"] != 4:
                assert time.monotonic() < deadline + 30
                time.sleep(0.02)
            r = client.post("/v1/models/mlp:pin", json={"version": 2}, headers=h)
            assert r.status_code == 200 and r.json()["model_version"] == 2
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    finally:
        stop_server(proc)


def test_bad_gate_is_usage_error(tmp_path, model_file):
    r = run_infer("serve", "--grpc-port", "0", "--model", str(model_file), "--checkpoint-dir", str(tmp_path),
                  "--gate", "nope")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "infer serve: error: Invalid value for '--gate': a gate must be given as FILE:FUNC "
        "(e.g. gates.py:accuracy), got 'nope'"
    ]


def test_listening_socket_is_tcp_so_answers_are_not_delayed():
    from ckptsync.cli.infer import _bind

    sock = _bind("127.0.0.1", 0)
    with sock:
        # asyncio sets TCP_NODELAY only on sockets whose proto is TCP.
        assert sock.proto == socket.IPPROTO_TCP
