"""Bounds on the server's connections: uvicorn's HTTP protocol with an idle (header-read)
timeout and a connection cap that still answers ``/healthz``.

uvicorn alone keeps a connection that never sends a byte open forever (its keep-alive
timeout starts only after a response), and its ``limit_concurrency`` answers 503 to every
request over the limit, health checks included. :func:`limited_protocol` returns the
protocol class ``infer serve`` gives to ``uvicorn.Config(http=...)``:

- **Idle timeout.** A connection waiting for a request's headers (just opened, between
  keep-alive requests, or sending its headers slowly) is closed ``idle_timeout_s`` after
  it began waiting; a request whose headers are in is never cut by it.
- **Lingering after an early answer.** A request answered before its body is in (a 413
  for a body over the cap) keeps being read and discarded, so a client that sends its
  whole body before reading gets the answer instead of a broken pipe, as nginx's
  lingering close; past ``LINGER_MAX_BYTES`` discarded the connection is closed.
- **Connection cap.** When a new connection makes more than ``max_connections`` open, the
  connection that has waited longest for a request is closed to make room, so idle
  connections can never exhaust the file descriptors. When every open connection is busy
  with a request, the new one is still served for ``/healthz`` and ``/readyz`` (so an
  orchestrator sees a busy server, not a dead one); other requests on it get 503
  ``{"error"}`` with ``Retry-After: 1``; either way it is closed after that answer.

Thread-safety: the protocol runs on the event loop thread only; :class:`ConnectionLimits`
is read and written there.

Example:
    >>> import uvicorn
    >>> from starlette.applications import Starlette
    >>> protocol = limited_protocol(idle_timeout_s=10.0, max_connections=2048)
    >>> config = uvicorn.Config(Starlette(), host="127.0.0.1", http=protocol)
    >>> protocol.limits.max_connections
    2048
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol

__all__ = ["LINGER_MAX_BYTES", "ConnectionLimits", "fit_to_fd_limit", "limited_protocol"]

logger = logging.getLogger("ckptsync.serving.connections")

# Answered on a connection over the cap (the others are busy).
_HEALTH_PATHS = ("/healthz", "/readyz")
# File descriptors kept for the process's own files (checkpoints, logs, helper sockets).
FD_HEADROOM = 64
# Bytes of an answered request's body read and discarded before its connection is closed
# (CKPTSYNC_LINGER_MAX_BYTES overrides it, for tests).
LINGER_MAX_BYTES = int(os.environ.get("CKPTSYNC_LINGER_MAX_BYTES", 256 * 2**20))


class ConnectionLimits:
    """The limits and the counters of one server (shared by its connections).

    Attributes:
        idle_timeout_s: seconds a connection may wait for a request's headers; None: no
            limit.
        max_connections: most open connections before the longest-waiting one is closed;
            None: no limit.
        open: connections open now.
        idle: connections waiting for a request, oldest first: connection -> the loop
            time it began waiting.
        closed_idle: connections closed by the idle timeout so far.
        evicted: idle connections closed to make room under the cap so far.
        overflowed: connections served over the cap (health checks or a 503) so far.

    One timer serves every connection: it fires when the oldest idle connection's time
    is up, closes each one whose time is up, and is set again for the next oldest. A
    request costs two dict operations, not a timer of its own (``call_later`` and
    ``cancel`` per request were ~2 % of a one-row predict's CPU).
    """

    def __init__(self, idle_timeout_s: float | None, max_connections: int | None):
        self.idle_timeout_s, self.max_connections = idle_timeout_s, max_connections
        self.open = 0
        self.idle: dict[Any, float] = {}
        self.closed_idle = self.evicted = self.overflowed = 0
        self._timer: asyncio.TimerHandle | None = None

    def waiting(self, conn: Any, loop: asyncio.AbstractEventLoop) -> None:
        """``conn`` begins waiting for a request (the newest idle one)."""
        idle = self.idle
        idle.pop(conn, None)
        idle[conn] = now = loop.time()
        if self._timer is None and self.idle_timeout_s is not None:
            self._timer = loop.call_at(now + self.idle_timeout_s, self._sweep, loop)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        """Closes the idle connections whose time is up; sets the timer for the next."""
        self._timer = None
        timeout = self.idle_timeout_s
        assert timeout is not None
        now = loop.time()
        for conn, since in list(self.idle.items()):
            if since + timeout > now:
                self._timer = loop.call_at(since + timeout, self._sweep, loop)
                return
            self.closed_idle += 1
            conn.close_idle()


def limited_protocol(idle_timeout_s: float | None,
                     max_connections: int | None) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (its ``auto`` choice) with the bounds of this module.

    Args:
        idle_timeout_s: seconds; > 0, or None for no idle timeout.
        max_connections: >= 1, or None for no cap.

    Returns:
        A protocol class for ``uvicorn.Config(http=...)``; its ``limits`` attribute is the
        :class:`ConnectionLimits` shared by its connections (one class per server).
    """
    limits = ConnectionLimits(idle_timeout_s, max_connections)
    base: Any = AutoHTTPProtocol

    class LimitedHttpProtocol(base):  # type: ignore[misc,valid-type]
        """One connection: uvicorn's protocol, plus the idle timer and the cap."""

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            limits.open += 1
            cap = limits.max_connections
            if cap is not None and limits.open > cap:
                victim = next(iter(limits.idle), None)
                if victim is not None:  # room: close the one waiting longest
                    limits.evicted += 1
                    victim.close_idle()
                else:  # every connection is busy: health checks only, then close
                    limits.overflowed += 1
                    self.app = _over_the_cap(self.app, cap)  # type: ignore[has-type]
            self._wait_for_request()

        def _wait_for_request(self) -> None:
            limits.waiting(self, self.loop)

        def _request_started(self) -> None:
            limits.idle.pop(self, None)

        def close_idle(self) -> None:
            """Closes this connection, which is waiting for a request (no answer owed)."""
            self._request_started()
            if not self.transport.is_closing():
                self.transport.close()

        def _busy(self) -> bool:
            cycle = self.cycle
            return cycle is not None and not cycle.response_complete

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._busy():  # a request's headers are in
                self._request_started()
            else:
                cycle = self.cycle
                if cycle is not None and cycle.response_complete and cycle.more_body:
                    # uvicorn discards the rest of an answered body; bound it.
                    self._lingered = getattr(self, "_lingered", 0) + len(data)
                    if self._lingered > LINGER_MAX_BYTES and not self.transport.is_closing():
                        self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and not self._busy():
                self._wait_for_request()

        def connection_lost(self, exc: Exception | None) -> None:
            self._request_started()
            limits.open -= 1
            super().connection_lost(exc)

    LimitedHttpProtocol.limits = limits  # type: ignore[attr-defined]
    return LimitedHttpProtocol


def _over_the_cap(app: Any, cap: int) -> Any:
    """The ASGI app of a connection over the cap: ``/healthz`` and ``/readyz`` as ``app``
    answers them, anything else 503; ``Connection: close`` on the answer."""
    body = json.dumps({"error": f"the server is at its connection limit "
                                f"(--max-connections {cap}) with every connection busy; "
                                "retry shortly"}).encode()

    async def over_the_cap(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def closing_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        if scope["path"] in _HEALTH_PATHS:
            await app(scope, receive, closing_send)
            return
        await closing_send({"type": "http.response.start", "status": 503, "headers": [
            (b"content-type", b"application/json"), (b"retry-after", b"1"),
            (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return over_the_cap


def fit_to_fd_limit(max_connections: int) -> int:
    """``max_connections``, after raising this process's soft open-file limit toward its
    hard limit if the connections would not fit (plus :data:`FD_HEADROOM`); lowered, with
    a warning, where even the hard limit is too low. Not thread-safe (process-wide)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = max_connections + FD_HEADROOM
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < need:
        fitted = max(1, soft - FD_HEADROOM)
        logger.warning("--max-connections %d does not fit the open-file limit %d; using %d",
                       max_connections, soft, fitted)
        return fitted
    return max_connections
