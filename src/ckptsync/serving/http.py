"""The HTTP app: TF Serving's REST API over a :class:`ModelManager` (starlette, ASGI).

Routes (TF Serving's, so its clients work unchanged)::

    POST /v1/models/{name}[/versions/{v}]:predict    {"instances"|"inputs": ...}
    GET  /v1/models/{name}[/versions/{v}]            {"model_version_status": [...]}
    GET  /v1/models/{name}[/versions/{v}]/metadata   the signature
    GET  /healthz   200 while the watcher and loader run     GET /readyz  200 once loaded
    GET  /metrics   Prometheus text (a per-app registry)

Every error is ``{"error": "<one sentence>"}``: bad input 400, unknown model or version
404, body over ``max_request_bytes`` 413 (checked on Content-Length and while streaming),
nothing loaded yet 503; anything unexpected is logged and answered 500, and the server
keeps running.

Where the forward runs: for bodies up to ``inline_max_body_bytes`` (small batches, a few
microseconds of numpy) decoding, the forward and encoding run inline on the event loop,
which is faster than a thread hop; bigger requests run in starlette's thread pool so they
do not stall other connections. Either way the request acquires one snapshot and finishes
on it.

Example:
    >>> app = create_app(manager, "mlp")  # doctest: +SKIP
    >>> uvicorn.run(app, host="127.0.0.1", port=8501)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import errors
from .manager import ModelManager
from .rest_codec import format_predict_response, parse_predict_request

__all__ = ["create_app"]

logger = logging.getLogger(__name__)

_HTTP_STATUS = {
    errors.INVALID_ARGUMENT: 400,
    errors.FAILED_PRECONDITION: 400,
    errors.OUT_OF_RANGE: 400,
    errors.NOT_FOUND: 404,
    errors.RESOURCE_EXHAUSTED: 413,
    errors.UNAVAILABLE: 503,
    errors.DEADLINE_EXCEEDED: 504,
}


class _HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    # allow_nan: TF Serving writes NaN/Infinity for non-finite outputs too.
    data = json.dumps(body, allow_nan=True, separators=(",", ":")).encode()
    return Response(data, status, headers, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return _json({"error": message}, status)


class _ManagerCollector(Collector):
    """Exports the manager's state at scrape time."""

    def __init__(self, manager: ModelManager, model_name: str):
        self._manager, self._model = manager, model_name

    def collect(self) -> Any:
        labels, model = ["model"], [self._model]
        version = self._manager.version
        g = GaugeMetricFamily(
            "ckptsync_served_version",
            "Version (global step) being served; -1 if none",
            labels=labels,
        )
        g.add_metric(model, -1 if version is None else version)
        yield g
        stats = self._manager.stats
        c = CounterMetricFamily(
            "ckptsync_reloads", "Checkpoint loads by result", labels=["model", "result"]
        )
        c.add_metric([self._model, "success"], stats.reloads_succeeded)
        c.add_metric([self._model, "failure"], stats.reloads_failed)
        yield c
        s = SummaryMetricFamily(
            "ckptsync_load_duration_seconds", "Read+verify time of successful loads", labels=labels
        )
        s.add_metric(
            model, count_value=stats.reloads_succeeded, sum_value=stats.load_duration_s_sum
        )
        yield s
        last = GaugeMetricFamily(
            "ckptsync_last_load_duration_seconds",
            "Duration of the last successful load",
            labels=labels,
        )
        last.add_metric(model, stats.last_load_duration_s)
        yield last


class _Api:
    def __init__(
        self,
        manager: ModelManager,
        model_name: str,
        max_request_bytes: int,
        max_batch_size: int,
        inline_max_body_bytes: int,
    ):
        self.manager, self.model_name = manager, model_name
        self.max_request_bytes, self.max_batch_size = max_request_bytes, max_batch_size
        self.inline_max_body_bytes = inline_max_body_bytes
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "ckptsync_http_requests",
            "HTTP requests by route and status code",
            ["route", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "ckptsync_http_request_duration_seconds",
            "Time from routing to response, seconds",
            ["route"],
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
        )
        self.registry.register(_ManagerCollector(manager, model_name))

    def endpoint(
        self, route: str, fn: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """Wraps a handler: maps errors to JSON answers and records metrics."""

        async def handler(request: Request) -> Response:
            start = time.perf_counter()
            try:
                response = await fn(request)
            except _HttpError as e:
                response = _error(e.status, e.message)
            except errors.OpError as e:
                response = _error(_HTTP_STATUS.get(e.error_code, 500), e.message)
            except Exception as e:
                logger.exception(
                    "unexpected error answering %s %s", request.method, request.url.path
                )
                response = _error(500, f"internal error: {type(e).__name__}: {e}")
            self.requests.labels(route, str(response.status_code)).inc()
            self.latency.labels(route).observe(time.perf_counter() - start)
            return response

        return handler

    def _check_model(self, request: Request) -> int | None:
        name = request.path_params["name"]
        if name != self.model_name:
            raise _HttpError(
                404, f'model "{name}" not found; this server serves "{self.model_name}"'
            )
        version: int | None = request.path_params.get("version")
        return version

    async def _read_body(self, request: Request) -> bytes:
        cap = self.max_request_bytes
        length = request.headers.get("content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                raise _HttpError(
                    400, f"Content-Length must be an integer, got {length!r}"
                ) from None
            if declared > cap:
                raise _HttpError(
                    413, f"request body of {declared} bytes exceeds the limit of {cap} bytes"
                )
        chunks, total = [], 0
        async for chunk in request.stream():
            total += len(chunk)
            if total > cap:
                raise _HttpError(413, f"request body exceeds the limit of {cap} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def predict(self, request: Request) -> Response:
        version = self._check_model(request)
        body = await self._read_body(request)
        if len(body) <= self.inline_max_body_bytes:
            return self._predict(body, version)
        return await run_in_threadpool(self._predict, body, version)

    def _predict(self, body: bytes, version: int | None) -> Response:
        try:
            payload = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise _HttpError(400, f"request body is not valid JSON: {e}") from None
        servable = self.manager.servable
        inputs, row_format = parse_predict_request(payload, servable.signature, self.max_batch_size)
        snap = self.manager.acquire(version)  # the one snapshot this request runs on
        outputs = servable.run(snap.params, inputs)
        batch = len(payload["instances"]) if row_format else None
        answer = format_predict_response(outputs, row_format, batch)
        answer["model_version"] = snap.version
        return _json(answer, headers={"X-Model-Version": str(snap.version)})

    async def status(self, request: Request) -> Response:
        version = self._check_model(request)
        return _json({"model_version_status": self.manager.status(version)})

    async def metadata(self, request: Request) -> Response:
        version = self._check_model(request)
        served: int | None
        if version is not None:
            served = self.manager.acquire(version).version
        else:
            served = self.manager.version
        return _json(
            {
                "model_spec": {
                    "name": self.model_name,
                    "signature_name": "",
                    "version": "" if served is None else str(served),
                },
                "metadata": {
                    "signature_def": {
                        "signature_def": {
                            "serving_default": self.manager.servable.signature.to_json()
                        }
                    }
                },
            }
        )

    async def healthz(self, request: Request) -> Response:
        if self.manager.alive:
            return _json({"status": "alive"})
        return _error(503, "the checkpoint watcher or loader thread is not running")

    async def readyz(self, request: Request) -> Response:
        version = self.manager.version
        if version is not None:
            return _json({"status": "ready", "model_version": version})
        return _error(503, f"no version loaded yet from {self.manager.source_dir}")

    async def metrics(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


def create_app(
    manager: ModelManager,
    model_name: str,
    max_request_bytes: int = 64 * 2**20,
    max_batch_size: int = 4096,
    *,
    inline_max_body_bytes: int = 64 * 2**10,
    own_manager: bool = False,
) -> Starlette:
    """Builds the ASGI app serving ``manager`` as model ``model_name``.

    Args:
        manager: the model manager (started by the caller unless ``own_manager``).
        model_name: the ``{name}`` in URLs.
        max_request_bytes: request body cap, bytes; larger bodies get 413.
        max_batch_size: most rows per predict request; more get 400.
        inline_max_body_bytes: bodies up to this size are answered on the event loop;
            larger ones in the thread pool.
        own_manager: start the manager at app startup and close it at shutdown (lifespan).

    Returns:
        A Starlette app; ``app.state.registry`` is its Prometheus registry.

    Thread-safety: the app may serve any number of concurrent requests.
    """
    if max_request_bytes <= 0 or max_batch_size <= 0:
        raise ValueError(
            f"max_request_bytes and max_batch_size must be > 0, got {max_request_bytes} "
            f"and {max_batch_size}"
        )
    api = _Api(manager, model_name, max_request_bytes, max_batch_size, inline_max_body_bytes)
    ep = api.endpoint
    model, version = "/v1/models/{name}", "/v1/models/{name}/versions/{version:int}"
    routes = [
        Route(model + ":predict", ep("predict", api.predict), methods=["POST"]),
        Route(version + ":predict", ep("predict", api.predict), methods=["POST"]),
        Route(model + "/metadata", ep("metadata", api.metadata), methods=["GET"]),
        Route(version + "/metadata", ep("metadata", api.metadata), methods=["GET"]),
        Route(model, ep("status", api.status), methods=["GET"]),
        Route(version, ep("status", api.status), methods=["GET"]),
        Route("/healthz", ep("healthz", api.healthz), methods=["GET"]),
        Route("/readyz", ep("readyz", api.readyz), methods=["GET"]),
        Route("/metrics", ep("metrics", api.metrics), methods=["GET"]),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        api.requests.labels("unmatched", str(exc.status_code)).inc()
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return _error(exc.status_code, message)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if own_manager:
            manager.start()
        try:
            yield
        finally:
            if own_manager:
                await run_in_threadpool(manager.close)

    app = Starlette(
        routes=routes, exception_handlers={HTTPException: http_error}, lifespan=lifespan
    )
    app.state.registry = api.registry
    app.state.manager = manager
    return app
