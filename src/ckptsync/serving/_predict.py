"""The predict endpoints of the HTTP app: the one handler of
``POST /v1/models/{name}[/versions/{v}]:predict`` (TF Serving's) and of
``POST /v2/models/{name}[/versions/{v}]/infer`` (the Open Inference Protocol's,
:mod:`.kserve_v2`).

:class:`~.http.ServingApp` hands every ASGI call to :meth:`PredictHandler.handle` first;
a predict is answered there, as plain ASGI, before starlette's middleware, routing table
and Request/Response objects (the hot path: the one route that must keep up with a bare
starlette app); anything else goes on to the starlette routes. The checks, errors, metrics,
body cap and thread pool for big bodies are those of every other route (through
:class:`~.http.RestApi`). A private module: its names are for this package only.
"""

from __future__ import annotations

import asyncio
import re
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from starlette.datastructures import URL
from starlette.responses import RedirectResponse

from ._responses import (
    DRAIN_CUT_BODY,
    ClientGone,
    HttpError,
    dumps,
    map_error,
    read_capped_body,
    url_version,
)
from .batching import run_unbatched
from .kserve_v2 import INFER_PATH

if TYPE_CHECKING:  # http imports this module
    from .http import RestApi

__all__ = ["PREDICT_PATH", "PredictHandler", "raised_switch_interval"]


# Pool threads that may run big predicts at once (the rest queue for them).
BIG_REQUEST_THREADS = 1
PREDICT_PATH = re.compile(r"^/v1/models/([^/]+)(?:/versions/([0-9]+))?:predict$")


class _SwitchInterval:
    """The process's interpreter switch interval, raised while any big predict runs.

    :meth:`enter` raises ``sys.setswitchinterval`` to at least its argument (the first
    of nested entries keeps the value it found); :meth:`exit` of the last restores that
    value. Thread-safety: any thread (a lock orders entries and exits).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._saved = 0.0

    def enter(self, interval_s: float) -> None:
        with self._lock:
            if self._depth == 0:
                self._saved = sys.getswitchinterval()
            self._depth += 1
            if sys.getswitchinterval() < interval_s:
                sys.setswitchinterval(interval_s)

    def exit(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                # CPython keeps whole microseconds and truncates (get gives 100 us as
                # 9.999...e-05): half a microsecond more restores exactly what was found.
                sys.setswitchinterval(self._saved + 0.5e-6)


raised_switch_interval = _SwitchInterval()  # process-wide, as the interval is


def _error_answer(e: Exception, path: str) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    status, message, extra = map_error(e, "POST", path)
    return status, dumps({"error": message}).encode(), [
        (k.lower().encode(), val.encode()) for k, val in (extra or {}).items()]


class PredictHandler:
    """Answers ``POST /v1/models/{name}[/versions/{v}]:predict`` as plain ASGI.

    Args:
        api: the app's :class:`~.http.RestApi` (model name, caps, metrics, the
            protocols' parse and answer, the batch scheduler).

    It also answers what starlette's router answered for these URLs when they were
    routes: 405 for another method on ``.../versions/{v}:predict`` and a 307 redirect for
    its trailing-slash form (the unversioned URL's are answered by the router's
    ``/v1/models/{name}`` routes).

    Who calls what: :class:`~.http.ServingApp` awaits :meth:`handle` for every ASGI
    call; the handler parses, runs (:func:`~.batching.run_unbatched`, or through
    ``api.batcher`` with batching on) and answers, inline for bodies up to
    ``inline_max_body_bytes``, else in a pool thread, ``BIG_REQUEST_THREADS`` at a time,
    under :data:`raised_switch_interval`; then ``api.count`` and the latency histogram.
    Thread-safety: holds no per-request state; any number of concurrent requests.
    """

    def __init__(self, api: RestApi):
        self.api = api
        # Big requests run in the thread pool, at most BIG_REQUEST_THREADS at once: their
        # decoding, validation and encoding hold the interpreter lock, so more threads only
        # take it from each other and from the event loop (throughput fell to 0.5x a bare
        # app with 64 connections at 256 rows). Made on the event loop at first use.
        self._limiter: anyio.CapacityLimiter | None = None
        self._observe = api.latency.labels("predict").observe
        self._switch_interval_s = api.options.pool_switch_interval_s

    def _protocol(self, v2_headers: Any) -> tuple[Any, Any]:
        """(parse, answer) of the request's protocol: TF Serving's or the v2 one's."""
        api = self.api
        if v2_headers is None:
            return api.parse_predict, api.answer_predict
        return api.v2.parse, api.v2.answer

    def _answer(self, body: bytes, version: int | None, path: str,
                v2_headers: Any = None) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        """One predict, unbatched, as (status, body, headers), an error mapped to its
        answer here: no exception leaves the call. Raised out of the pool thread, it held
        the body and its decoded text in its traceback's frames, in a reference cycle
        through anyio's future that only a full garbage collection frees (a refused 21 MB
        body kept ~25 MB per request until then)."""
        parse, answer = self._protocol(v2_headers)
        try:
            signature_name, inputs, ctx = parse(body, v2_headers)
            outputs, served = run_unbatched(self.api.manager, signature_name, version, inputs)
            data, headers = answer(outputs, served, ctx)
        except Exception as e:
            return _error_answer(e, path)
        return 200, data, headers

    def _parse_in_pool(self, body: bytes, path: str, v2_headers: Any) -> Any:
        """The request's (signature name, inputs, ctx), or its error answer (a tuple of
        three whose first is an int status), on the pool thread."""
        try:
            return self._protocol(v2_headers)[0](body, v2_headers)
        except Exception as e:
            return _error_answer(e, path)

    async def _answer_batched(self, body: bytes, version: int | None, path: str,
                              v2_headers: Any) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        """One predict through the batch scheduler: parsed here (a big body in the pool
        thread), run in a batch, answered here."""
        batcher = self.api.batcher
        assert batcher is not None
        parse, answer = self._protocol(v2_headers)
        try:
            if len(body) <= self.api.inline_max_body_bytes:
                parsed = parse(body, v2_headers)
            else:
                parsed = await self._in_pool(self._parse_in_pool, body, path, v2_headers)
                if isinstance(parsed[0], int):
                    return parsed  # type: ignore[no-any-return]
            signature_name, inputs, ctx = parsed
            outputs, served = await batcher.run(signature_name, version, inputs)
            data, headers = answer(outputs, served, ctx)
        except Exception as e:
            return _error_answer(e, path)
        return 200, data, headers

    async def _in_pool(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` on the pool thread, ``BIG_REQUEST_THREADS`` at a time (see
        ``__init__``), the switch interval raised to ``pool_switch_interval_s`` meanwhile
        (see :class:`~.options.HttpOptions`)."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(BIG_REQUEST_THREADS)
        interval_s = self._switch_interval_s

        def call() -> Any:
            if interval_s is None:
                return fn(*args)
            raised_switch_interval.enter(interval_s)
            try:
                return fn(*args)
            finally:
                raised_switch_interval.exit()

        return await anyio.to_thread.run_sync(call, limiter=self._limiter)

    async def handle(self, scope: Any, receive: Any, send: Any) -> bool:
        """Answers the request if it is a predict (True); False (nothing received or sent)
        otherwise. Never raises for a bad request: errors are answered as JSON, and a
        request cancelled by the server's drain timeout (``--drain-timeout-s``) is answered
        503 ``{"error"}`` instead of uvicorn's plain-text 500."""
        if scope["type"] != "http":
            return False
        v2_headers = None
        m = PREDICT_PATH.match(scope["path"])
        if m is None:
            m = INFER_PATH.match(scope["path"])
            if m is None:
                if scope["path"].endswith("/"):
                    return await self._redirect_slashes(scope, receive, send)
                return False
            v2_headers = scope["headers"]
            if scope["method"] != "POST":
                await self._method_not_allowed(scope, send)
                return True
        elif scope["method"] != "POST":
            if m.group(2) is None:  # the status route answers it (405, ':predict' takes POST)
                return False
            await self._method_not_allowed(scope, send)
            return True
        start = time.perf_counter()
        api = self.api
        headers = [(b"content-type", b"application/json")]
        try:
            name, v = m.groups()
            if name != api.model_name:
                if v2_headers is not None:
                    raise HttpError(404, f"unknown model: '{name}' (this server serves "
                                         f"'{api.model_name}')")
                api.check_name(name)  # raises the 404 (or 405 for a misplaced verb)
            version = None if v is None else url_version(v)
            if version is not None and version != api.manager.version:
                api.manager.acquire(version)  # its 404, before the body (TF Serving's lookup)
            body = await read_capped_body(scope["headers"], receive, self.api.max_request_bytes)
            if api.batcher is not None:
                status, data, extra_headers = await self._answer_batched(
                    body, version, scope["path"], v2_headers)
            elif len(body) <= api.inline_max_body_bytes:
                status, data, extra_headers = self._answer(body, version, scope["path"],
                                                           v2_headers)
            else:  # BIG_REQUEST_THREADS at a time (see __init__)
                status, data, extra_headers = await self._in_pool(
                    self._answer, body, version, scope["path"], v2_headers)
            del body  # a big body is not kept while the answer is sent
            if extra_headers and extra_headers[-1][0] == b"inference-header-content-length":
                headers = [(b"content-type", b"application/octet-stream")]
            headers += extra_headers
        except ClientGone:
            return True
        except asyncio.CancelledError:  # the server's drain timeout cut this request
            status, data = 503, DRAIN_CUT_BODY
        except Exception as e:
            status, message, extra = map_error(e, "POST", scope["path"])
            data = dumps({"error": message}).encode()
            headers += [(k.lower().encode(), val.encode()) for k, val in (extra or {}).items()]
        headers.append((b"content-length", str(len(data)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})
        api.count("predict" if v2_headers is None else "v2_infer", status)
        self._observe(time.perf_counter() - start)
        return True

    async def _method_not_allowed(self, scope: Any, send: Any) -> None:
        """405 for ``GET`` (or any verb but POST) on ``.../versions/{v}:predict``, as
        starlette answers a route's wrong method (counted as ``unmatched``)."""
        data = dumps({"error": f"{scope['method']} {scope['path']}: Method Not Allowed"}).encode()
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(data)).encode())]
        await send({"type": "http.response.start", "status": 405, "headers": headers})
        await send({"type": "http.response.body", "body": data})
        self.api.count("unmatched", 405)

    async def _redirect_slashes(self, scope: Any, receive: Any, send: Any) -> bool:
        """``.../versions/{v}:predict/`` -> 307 to the path without its trailing slashes, as
        starlette's router does for its routes (the unversioned form still reaches the
        router, whose ``/v1/models/{name}`` routes redirect it); False for other paths."""
        m = PREDICT_PATH.match(scope["path"].rstrip("/"))
        if m is None or m.group(2) is None:
            return False
        url = URL(scope={**scope, "path": scope["path"].rstrip("/")})
        await RedirectResponse(url=str(url))(scope, receive, send)
        return True
