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


def _oversized(path: str, body_bytes: int, chunked: bool) -> bytes:
    body = b'{"instances": [' + b"0," * (body_bytes // 2) + b"0]}"
    head = f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    if not chunked:
        return (head + f"content-length: {len(body)}\r\n\r\n").encode() + body
    step = 1 << 16
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + step]), body[i:i + step])
                      for i in range(0, len(body), step))
    return (head + "transfer-encoding: chunked\r\n\r\n").encode() + chunks + b"0\r\n\r\n"


@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("path", ["/v1/models/mlp:predict", "/v2/models/mlp/infer"])
def test_a_client_that_sends_its_whole_oversized_body_first_gets_the_413(
        tmp_path, model_file, chunked, path):
    """20 MB at a 1 MB cap, sent whole before reading (as curl or requests do): the
    answer is the 413 JSON, never a broken pipe or a reset."""
    proc, port = start_server(tmp_path, model_file, "--max-request-bytes", "1000000")
    try:
        with connect(port) as s:
            s.sendall(_oversized(path, 20_000_000, chunked))  # raises on a broken pipe
            data = b""
            while b"\r\n\r\n" not in data or not data.endswith(b"}"):
                chunk = s.recv(65536)
                assert chunk, f"closed before the whole answer: {data!r}"
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413")
        assert "exceeds the limit of 1000000 bytes" in json.loads(body)["error"]
    finally:
        stop(proc)


@pytest.mark.slow
def test_lingering_after_an_early_answer_is_bounded(tmp_path, model_file, monkeypatch):
    """A client that keeps streaming after its 413 is cut off once LINGER_MAX_BYTES are
    discarded (here 4 MiB, set for the server process)."""
    monkeypatch.setenv("CKPTSYNC_LINGER_MAX_BYTES", str(4 << 20))
    proc, port = start_server(tmp_path, model_file, "--max-request-bytes", "1000000")
    try:
        with connect(port) as s:
            s.sendall(b"POST /v1/models/mlp:predict HTTP/1.1\r\nhost: x\r\n"
                      b"content-length: 100000000000\r\n\r\n")
            assert s.recv(65536).startswith(b"HTTP/1.1 413")
            sent, cut = 0, False
            try:
                while sent < 200 << 20:
                    s.sendall(b"0" * (1 << 16))
                    sent += 1 << 16
            except (BrokenPipeError, ConnectionResetError):
                cut = True
        assert cut and sent < 64 << 20, sent
    finally:
        stop(proc)
