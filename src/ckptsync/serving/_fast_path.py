"""The predict fast path of the HTTP app: an ASGI middleware that answers
``POST /v1/models/{name}[/versions/{v}]:predict`` without starlette's routing. Installed
by :func:`.http.create_app` around the starlette app; it runs the request through the
app's ``_Api`` (same checks, errors and metrics as the routes).
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool

from ._responses import _dumps, _HttpError, _map_error

if TYPE_CHECKING:
    from .http import _Api


_PREDICT_PATH = re.compile(r"^/v1/models/([^/]+)(?:/versions/([0-9]+))?:predict$")


class _ClientGone(Exception):
    pass


class _PredictFastPath:
    """Answers ``POST /v1/models/{name}[/versions/{v}]:predict`` as plain ASGI.

    The hot path skips starlette's routing table and its Request/Response objects; the
    rest (errors, metrics, the body cap, the thread pool for big bodies) is the same as for
    every other route. Everything else goes to the starlette app.
    """

    def __init__(self, app: Any, api: _Api):
        self.app, self.api = app, api
        self._observe = api.latency.labels("predict").observe

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        m = _PREDICT_PATH.match(scope["path"])
        if m is None:
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        api = self.api
        headers = [(b"content-type", b"application/json")]
        try:
            name, v = m.groups()
            api.check_name(name)
            version = None if v is None else int(v)
            body = await self._body(scope, receive)
            if len(body) <= api.inline_max_body_bytes:
                data, served = api.predict_bytes(body, version)
            else:
                data, served = await run_in_threadpool(api.predict_bytes, body, version)
            status = 200
            headers.append((b"x-model-version", served.encode()))
        except _ClientGone:
            return
        except Exception as e:
            status, message, extra = _map_error(e, "POST", scope["path"])
            data = _dumps({"error": message}).encode()
            headers += [(k.lower().encode(), val.encode()) for k, val in (extra or {}).items()]
        headers.append((b"content-length", str(len(data)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})
        api.count("predict", status)
        self._observe(time.perf_counter() - start)

    async def _body(self, scope: Any, receive: Any) -> bytes:
        cap = self.api.max_request_bytes
        for key, value in scope["headers"]:
            if key == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise _HttpError(
                        400, f"Content-Length must be an integer, got {value.decode('latin-1')!r}"
                    ) from None
                if declared > cap:
                    raise _HttpError(
                        413, f"request body of {declared} bytes exceeds the limit of {cap} bytes"
                    )
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > cap:
                raise _HttpError(413, f"request body exceeds the limit of {cap} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
