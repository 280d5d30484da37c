"""The predict fast path of the HTTP app: answers
``POST /v1/models/{name}[/versions/{v}]:predict`` before starlette's middleware and
routing. :func:`.http.create_app` returns a starlette app that tries it first; it runs
the request through the app's ``_Api`` (same checks, errors and metrics as the routes).
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool

from ._responses import _ClientGone, _dumps, _map_error, _read_capped_body

if TYPE_CHECKING:
    from .http import _Api


_PREDICT_PATH = re.compile(r"^/v1/models/([^/]+)(?:/versions/([0-9]+))?:predict$")


class _PredictFastPath:
    """Answers ``POST /v1/models/{name}[/versions/{v}]:predict`` as plain ASGI.

    The hot path skips starlette's middleware, routing table and Request/Response
    objects; the rest (errors, metrics, the body cap, the thread pool for big bodies) is
    the same as for every other route.
    """

    def __init__(self, api: _Api):
        self.api = api
        self._observe = api.latency.labels("predict").observe

    async def handle(self, scope: Any, receive: Any, send: Any) -> bool:
        """Answers the request if it is a predict; False (nothing sent) otherwise."""
        if scope["type"] != "http" or scope["method"] != "POST":
            return False
        m = _PREDICT_PATH.match(scope["path"])
        if m is None:
            return False
        start = time.perf_counter()
        api = self.api
        headers = [(b"content-type", b"application/json")]
        try:
            name, v = m.groups()
            if name != api.model_name:
                api.check_name(name)  # raises the 404 (or 405 for a misplaced verb)
            version = None if v is None else int(v)
            body = await _read_capped_body(scope["headers"], receive, self.api.max_request_bytes)
            if len(body) <= api.inline_max_body_bytes:
                data, served = api.predict_bytes(body, version)
            else:
                data, served = await run_in_threadpool(api.predict_bytes, body, version)
            status = 200
            headers.append((b"x-model-version", served.encode()))
        except _ClientGone:
            return True
        except Exception as e:
            status, message, extra = _map_error(e, "POST", scope["path"])
            data = _dumps({"error": message}).encode()
            headers += [(k.lower().encode(), val.encode()) for k, val in (extra or {}).items()]
        headers.append((b"content-length", str(len(data)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})
        api.count("predict", status)
        self._observe(time.perf_counter() - start)
        return True

