"""The frame protocol between an owner and its worker process: JSON frames over a Unix
socket, file descriptors beside them, and errors sent back by name.

A frame is a one-byte tag (may be empty), a 4-byte big-endian length and a UTF-8 JSON
document. File descriptors (shared buffers, see :mod:`.shared_arrays`) travel with a
frame as ``SCM_RIGHTS``.

Thread-safety: the functions are safe to call from several threads on different
sockets; one socket needs one sender and one receiver at a time.
"""

from __future__ import annotations

import json
import select
import socket
import struct
from collections.abc import Callable, Mapping
from typing import Any

from .. import errors
from ..errors import CkptsyncError, OpError, UnknownError

__all__ = [
    "NOT_READY", "FrameReader", "encode_frame", "error_from_reply", "error_reply",
    "readable_waiter", "recv_frame", "recv_frame_with_fds", "send_frame",
    "send_frame_with_fds",
]

_HEADER = struct.Struct(">I")


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def readable_waiter(sock: socket.socket) -> Callable[[], None]:
    """A function that blocks until ``sock`` has something to read (data, end of stream
    or an error), for a worker's idle wait before its blocking ``recv``.

    A process asleep in ``recv`` on a Unix socket is also woken each time its peer reads
    a message it sent (the kernel's "write space" wake-up; the wait queue is shared):
    the peer then pays an inter-processor interrupt (~20 us in a VM) in that ``recv``,
    and the worker wakes for nothing. ``poll`` for POLLIN filters those wake-ups out.
    """
    poller = select.poll()
    poller.register(sock, select.POLLIN)

    def wait() -> None:
        poller.poll()  # retried after EINTR (PEP 475); POLLHUP/POLLERR also return

    return wait


def encode_frame(tag: bytes, doc: Any) -> bytes:
    """``tag`` and ``doc`` as the bytes of one frame."""
    data = json.dumps(doc, allow_nan=False).encode("utf-8")
    return tag + _HEADER.pack(len(data)) + data


def send_frame(sock: socket.socket, tag: bytes, doc: Any) -> None:
    """Sends ``tag`` and ``doc`` as one frame. Raises OSError."""
    sock.sendall(encode_frame(tag, doc))


def send_frame_with_fds(sock: socket.socket, tag: bytes, doc: Any, fds: list[int]) -> None:
    """Sends a one-byte ``tag``, ``doc`` and ``fds`` in one message where it fits (one
    wake-up of the receiver, see :func:`recv_frame_with_fds`). Raises OSError."""
    data = encode_frame(tag, doc)
    sent = socket.send_fds(sock, [data], fds) if fds else sock.send(data)
    if sent < len(data):
        sock.sendall(data[sent:])


def recv_frame_with_fds(sock: socket.socket, max_fds: int) -> tuple[bytes, Any | None, list[int]]:
    """Receives what :func:`send_frame_with_fds` sent: (tag, doc, fds); ``(b"", None,
    fds)`` at end of stream. The caller owns (closes) the fds. Raises OSError."""
    chunk, fds, _, _ = socket.recv_fds(sock, 1 << 16, max_fds)
    if not chunk:
        return b"", None, fds
    buf = bytearray(chunk)
    if len(buf) < 1 + _HEADER.size:
        more = _recv_exact(sock, 1 + _HEADER.size - len(buf))
        if more is None:
            return b"", None, fds
        buf += more
    end = 1 + _HEADER.size + _HEADER.unpack_from(buf, 1)[0]
    if len(buf) < end:
        more = _recv_exact(sock, end - len(buf))
        if more is None:
            return b"", None, fds
        buf += more
    return bytes(buf[:1]), json.loads(bytes(buf[1 + _HEADER.size:end]).decode("utf-8")), fds


def recv_frame(sock: socket.socket) -> Any | None:
    """Receives one frame's document (its tag already read); None at end of stream."""
    header = _recv_exact(sock, _HEADER.size)
    if header is None:
        return None
    body = _recv_exact(sock, _HEADER.unpack(header)[0])
    return None if body is None else json.loads(body.decode("utf-8"))


NOT_READY = object()  # FrameReader.next(block=False): no whole frame has arrived yet


class FrameReader:
    """Reads untagged frames (as :func:`send_frame` with ``tag=b""``) from ``sock``
    through a buffer, so that a check for a reply is one non-blocking ``recv``.

    Not thread-safe; the only reader of ``sock``.
    """

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._buf = bytearray()

    def next(self, block: bool = True, timeout_s: float | None = None) -> Any:
        """The next frame's document; None at end of stream (or a dead peer);
        ``NOT_READY`` when not ``block`` and no whole frame is there yet.

        Raises:
            TimeoutError: ``block`` and ``timeout_s`` passed first.
        """
        buf = self._buf
        while True:
            if len(buf) >= _HEADER.size:
                end = _HEADER.size + _HEADER.unpack_from(buf)[0]
                if len(buf) >= end:
                    body = bytes(buf[_HEADER.size:end])
                    del buf[:end]
                    return json.loads(body.decode("utf-8"))
            try:
                if block:
                    self._sock.settimeout(timeout_s)
                    try:
                        data = self._sock.recv(4096)
                    finally:
                        self._sock.settimeout(None)
                else:
                    data = self._sock.recv(4096, socket.MSG_DONTWAIT)
            except BlockingIOError:  # nothing there (a timeout of 0 when blocking)
                if block:
                    raise TimeoutError("no frame within the timeout") from None
                return NOT_READY
            except TimeoutError:
                raise
            except OSError:
                return None
            if not data:
                return None
            buf += data


def error_reply(e: BaseException) -> dict[str, Any]:
    """A failed job's reply: the error's class name and message."""
    return {"ok": False, "type": type(e).__name__, "message": getattr(e, "message", str(e))}


def error_from_reply(reply: Mapping[str, Any]) -> CkptsyncError:
    """The error an :func:`error_reply` describes (ckptsync's class of that name, else
    UnknownError)."""
    name, message = str(reply.get("type")), str(reply.get("message"))
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, OpError):
        return cls(None, None, message)
    if isinstance(cls, type) and issubclass(cls, CkptsyncError):
        return cls(message)
    return UnknownError(None, None, f"{name}: {message}")
