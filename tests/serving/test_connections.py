"""Issue 16 item 4 against a real `infer serve` process and raw sockets: a connection that
never sends a byte (or sends its headers too slowly) is closed after --idle-timeout-s;
past --max-connections the longest-idle connection is closed to make room, and when every
connection is busy /healthz is still answered (other requests 503 JSON)."""

from __future__ import annotations

import json
import socket

import pytest

from ckptsync.serving import HttpOptions

from .conftest import wait_until
from .test_request_path import start_server, stop


def closed_by_server(sock: socket.socket, timeout_s: float = 30.0) -> bool:
    """True once the server closes ``sock`` (EOF or reset); False if it sends bytes or
    stays open for ``timeout_s`` (a bound, not the expected wait)."""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def request(port: int, raw: bytes) -> tuple[bytes, bytes]:
    """Sends ``raw`` on a new connection and reads the answer until the server closes."""
    with connect(port) as s:
        s.sendall(raw)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode()


PREDICT = (b'POST /v1/models/mlp:predict HTTP/1.1\r\nhost: x\r\nconnection: close\r\n'
           b'content-type: application/json\r\ncontent-length: 31\r\n\r\n'
           b'{"instances": [[1, 2, 3, 4]]}  ')


@pytest.mark.slow
def test_silent_and_slow_connections_are_closed_after_the_idle_timeout(tmp_path, model_file):
    proc, port = start_server(tmp_path, model_file, "--idle-timeout-s", "0.5")
    try:
        silent = connect(port)
        slow = connect(port)
        slow.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")  # headers never finished
        assert closed_by_server(silent)
        assert closed_by_server(slow)
        silent.close()
        slow.close()
        head, body = request(port, get("/healthz"))  # the server still answers
        assert head.startswith(b"HTTP/1.1 200")
    finally:
        stop(proc)


@pytest.mark.slow
def test_a_keep_alive_connection_is_closed_once_idle_after_its_answers(tmp_path, model_file):
    # One timer serves every connection: it is set again for each one that waits anew.
    proc, port = start_server(tmp_path, model_file, "--idle-timeout-s", "0.5")
    try:
        with connect(port) as s:
            for _ in range(3):  # answered on one connection, each time waiting anew
                s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
                data = b""
                while b"\r\n\r\n" not in data:
                    data += s.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                while len(body) < length:
                    body += s.recv(65536)
                assert head.startswith(b"HTTP/1.1 200")
            assert closed_by_server(s)
        head, _ = request(port, get("/healthz"))
        assert head.startswith(b"HTTP/1.1 200")
    finally:
        stop(proc)


@pytest.mark.slow
def test_past_the_cap_the_longest_idle_connection_makes_room(tmp_path, model_file):
    proc, port = start_server(tmp_path, model_file, "--idle-timeout-s", "300",
                              "--max-connections", "8")
    idle: list[socket.socket] = []
    try:
        wait_until(lambda: request(port, get("/readyz"))[0].startswith(b"HTTP/1.1 200"),
                   timeout_s=30)
        for _ in range(8):
            idle.append(connect(port))
        head, _ = request(port, get("/healthz"))  # one more: the oldest idle one is closed
        assert head.startswith(b"HTTP/1.1 200")
        assert closed_by_server(idle[0])
        for _ in range(12):  # 12 more idle ones: the last 11 each close the next oldest
            idle.append(connect(port))
        for s in idle[1:12]:
            assert closed_by_server(s)
        head, body = request(port, PREDICT)
        assert head.startswith(b"HTTP/1.1 200"), head
    finally:
        for s in idle:
            s.close()
        stop(proc)


@pytest.mark.slow
def test_at_the_cap_with_every_connection_busy_healthz_is_answered(tmp_path, model_file):
    proc, port = start_server(tmp_path, model_file, "--idle-timeout-s", "300",
                              "--max-connections", "4")
    busy: list[socket.socket] = []
    try:
        wait_until(lambda: request(port, get("/readyz"))[0].startswith(b"HTTP/1.1 200"),
                   timeout_s=30)
        for _ in range(4):  # requests in flight: their bodies never complete
            s = connect(port)
            s.sendall(b"POST /v1/models/mlp:predict HTTP/1.1\r\nhost: x\r\n"
                      b"expect: 100-continue\r\ncontent-length: 1000\r\n\r\n")
            # The app is reading this body: the server's "100 Continue" says so.
            assert s.recv(100).startswith(b"HTTP/1.1 100")
            s.sendall(b"{")
            busy.append(s)
        head, body = request(port, get("/healthz"))
        assert head.startswith(b"HTTP/1.1 200"), head
        assert b"connection: close" in head.lower()
        head, body = request(port, get("/readyz"))
        assert head.startswith(b"HTTP/1.1 200"), head
        head, body = request(port, PREDICT)
        assert head.startswith(b"HTTP/1.1 503"), head
        assert b"retry-after: 1" in head.lower()
        assert "connection limit" in json.loads(body)["error"]
        for s in busy:  # none of the busy ones was closed to make room
            s.settimeout(0.0)
            with pytest.raises(BlockingIOError):
                s.recv(1)
    finally:
        for s in busy:
            s.close()
        stop(proc)


def test_http_options_connection_bounds():
    assert HttpOptions().idle_timeout_s == 10.0 and HttpOptions().max_connections == 2048
    assert HttpOptions(idle_timeout_s=None, max_connections=None).max_connections is None
    with pytest.raises(ValueError, match="idle_timeout_s must be > 0"):
        HttpOptions(idle_timeout_s=0)
    with pytest.raises(ValueError, match="max_connections must be >= 1"):
        HttpOptions(max_connections=0)
    with pytest.raises(TypeError, match="max_connections must be an int"):
        HttpOptions(max_connections=2.5)  # type: ignore[arg-type]
