"""The HTTP app: TF Serving's REST API over a :class:`ModelManager` (starlette, ASGI).

Routes (TF Serving's, so its clients work unchanged)::

    POST /v1/models/{name}[/versions/{v}]:predict    {"instances"|"inputs": ...}
    GET  /v1/models/{name}[/versions/{v}]            {"model_version_status": [...]}
    GET  /v1/models/{name}[/versions/{v}]/metadata   the signature
    POST /v1/models/{name}:pin     {"version": N}    roll back (needs the admin token)
    POST /v1/models/{name}:unpin                     back to the latest (admin token)
    GET  /healthz   200 while the watcher and loader run     GET /readyz  200 once loaded
    GET  /metrics   Prometheus text (a per-app registry)

Every error is ``{"error": "<one sentence>"}``: bad input 400 (naming the field, what was
expected and what was given), unknown model or version 404, body over
``max_request_bytes`` 413 (checked on Content-Length and while streaming), nothing loaded
yet 503. Admin endpoints: 404 when the app has no admin token, 401 without an
``Authorization: Bearer`` header, 403 with a wrong token (compared in constant time), 409
when the version to pin fails to load. Anything unexpected (a bug in a model) is logged and
answered 500, and the server keeps running.

Where the forward runs: for bodies up to ``inline_max_body_bytes`` (256 KiB: up to a few
hundred rows, ~12 ms of work at most) decoding, the forward and encoding run inline on
the event loop, which is faster than a thread hop; bigger requests run in a pool thread
so they do not stall other connections, one at a time (``_predict.BIG_REQUEST_THREADS``: decoding and
encoding hold the interpreter lock, so more threads only take it from each other and from
the event loop); meanwhile the switch interval is at least ``pool_switch_interval_s``
(5 ms), so the event loop takes the lock from it that often at most, not every 0.1 ms. A
body over 1 MiB is decoded row by row and refused at the first row past
``max_batch_size``. Either way the request acquires one snapshot and finishes on it.

One path per request: ``:predict`` is answered only by :class:`._predict.PredictHandler`
(plain ASGI, ahead of starlette's middleware and routing: the hot path); every other route
is a starlette route below. The Prometheus collector of the manager's state is in
:mod:`._metrics`, the JSON and error helpers in :mod:`._responses`, and the caps and the
admin token in :class:`~.options.HttpOptions`.

Example:
    >>> from starlette.testclient import TestClient
    >>> from ckptsync.serving import GraphServable, ModelManager, create_app
    >>> manager = ModelManager(GraphServable.from_model_file("model.py"), "ckpts")
    >>> app = create_app(manager, "digits", own_manager=True)  # uvicorn.run(app, port=8501)
    >>> with TestClient(app) as client:
    ...     _ = manager.wait_for_version(1200, timeout_s=30)
    ...     r = client.post("/v1/models/digits:predict", json={"instances": x.tolist()})
    >>> r.status_code, r.headers["X-Model-Version"], len(r.json()["predictions"])
    (200, '1200', 2)
"""

from __future__ import annotations

import asyncio
import contextlib
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
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from .. import errors
from ._metrics import ManagerCollector
from ._predict import PredictHandler
from ._responses import (
    DRAIN_CUT_BODY,
    INT64_MAX,
    ClientGone,
    HttpError,
    bearer_matches,
    decode_json,
    dumps,
    error_response,
    json_response,
    map_error,
    parse_version,
    read_capped_body,
    short,
    url_version,
)
from .batching import BatchingOptions, BatchScheduler
from .kserve_v2 import OpenInferenceApi
from .manager import ModelManager
from .options import HttpOptions, apply_overrides
from .rest_codec import format_predict_response, parse_predict_body

__all__ = ["create_app", "health_problems"]




class RestApi:
    """The handlers of the REST routes over one manager, and the app's metrics.

    Args:
        manager: the model manager.
        model_name: the ``{name}`` in URLs.
        options: body and batch caps, the inline threshold, the admin token.

    Who calls what: :func:`create_app` wraps each handler with :meth:`endpoint` into a
    starlette route; :class:`~._predict.PredictHandler` calls :meth:`check_name`,
    :meth:`parse_predict`, :meth:`answer_predict` and :meth:`count`. Thread-safety:
    handlers hold no per-request state; the parse and answer may run on the event loop
    or a pool thread at once.
    """

    def __init__(self, manager: ModelManager, model_name: str, options: HttpOptions):
        self.manager, self.model_name, self.options = manager, model_name, options
        self.max_request_bytes = options.max_request_bytes
        self.max_batch_size = options.max_batch_size
        self.inline_max_body_bytes = options.inline_max_body_bytes
        # The servable's signatures are fixed for its life: their names once, not a dict
        # built per request.
        self._signature_names = tuple(manager.servable.signatures)
        token = options.admin_token
        self._admin_token = None if token is None else token.encode()
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
        self.registry.register(ManagerCollector(manager, model_name))
        self._counters: dict[tuple[str, int], Any] = {}  # labels() children, cached
        self.v2 = OpenInferenceApi(self)  # the Open Inference Protocol's routes
        self.batcher: BatchScheduler | None = None  # set by create_app with batching
        #: ``(version | None) -> model_version_status`` list and ``() -> versions served,
        #: newest first``: the manager's, or a many-version model's over all its versions.
        self.version_status: Callable[[int | None], list[dict[str, Any]]] = manager.status
        self.served_versions: Callable[[], list[int]] = lambda: (
            [] if manager.version is None else [manager.version])

    def count(self, route: str, status: int) -> None:
        """Counts one answer of ``route`` with HTTP ``status``."""
        child = self._counters.get((route, status))
        if child is None:
            child = self._counters[(route, status)] = self.requests.labels(route, str(status))
        child.inc()

    def endpoint(
        self, route: str, fn: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """Wraps a handler: maps errors to JSON answers and records metrics."""
        observe = self.latency.labels(route).observe
        perf_counter = time.perf_counter

        async def handler(request: Request) -> Response:
            start = perf_counter()
            try:
                response = await fn(request)
            except Exception as e:
                status, message, headers = map_error(e, request.method, request.url.path)
                response = error_response(status, message, headers)
            self.count(route, response.status_code)
            observe(perf_counter() - start)
            return response

        return handler

    def _check_model(self, request: Request) -> int | None:
        self.check_name(request.path_params["name"])
        text: str | None = request.path_params.get("version")  # digits (_VersionDigits)
        return None if text is None else url_version(text)

    def check_name(self, name: str) -> None:
        """Raises HttpError 404 unless ``name`` is the model (405 for ``name:verb``)."""
        base, sep, verb = name.rpartition(":")
        if sep and base == self.model_name and verb in ("predict", "pin", "unpin"):
            raise HttpError(405, f"method not allowed: ':{verb}' takes POST")
        if name != self.model_name:
            raise HttpError(
                404, f'model "{name}" not found; this server serves "{self.model_name}"'
            )

    async def _read_body(self, request: Request) -> bytes:
        try:
            return await read_capped_body(request.scope["headers"], request.receive,
                                           self.max_request_bytes)
        except ClientGone:
            raise ClientDisconnect() from None

    def parse_predict(self, body: bytes, headers: Any = None) -> tuple[str, Any, Any]:
        """A ``:predict`` body -> (signature name, validated inputs, what
        :meth:`answer_predict` needs). ``headers`` is unused (the v2 route's take them).

        Raises:
            HttpError: 400, the body is not JSON or its inputs cannot be read.
            OpError: InvalidArgumentError (inputs against the signature).
        """
        try:  # never decodes more than max_batch_size rows of a bigger batch
            inputs, row_format, batch, signature_name = parse_predict_body(
                body, self.manager.servable.signature, self.max_batch_size,
                self._signature_names)
        except (RecursionError, ValueError, TypeError, OverflowError) as e:
            if isinstance(e, errors.OpError):
                raise
            raise HttpError(400, f"cannot read the request's inputs: {e}") from None
        return signature_name, inputs, (row_format, batch)

    def answer_predict(self, outputs: dict[str, Any], served: int,
                       ctx: Any) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        """The ``:predict`` answer body and its headers, for outputs of version ``served``."""
        row_format, batch = ctx
        answer = format_predict_response(outputs, row_format, batch)
        answer["model_version"] = served
        return dumps(answer).encode(), [(b"x-model-version", str(served).encode())]

    async def unknown_verb(self, request: Request) -> Response:
        """POST to ``/v1/models/{name}[:verb]`` other than :predict/:pin/:unpin."""
        name = request.path_params["name"]
        base, sep, verb = name.rpartition(":")
        if sep and base == self.model_name:
            raise HttpError(
                404, f"':{verb}' is not supported by this server (TF Serving's :classify and "
                ":regress are not implemented); use ':predict'"
            )
        self.check_name(name)
        raise HttpError(405, "method not allowed: POST to a model needs a verb, e.g. ':predict'")

    async def status(self, request: Request) -> Response:
        """TF Serving's GetModelStatus: 404 with its messages while no version is known
        (before the first checkpoint) or for a version it has no record of."""
        version = self._check_model(request)
        try:
            listing = self.version_status(version)
        except errors.NotFoundError:
            raise HttpError(404, f"Could not find version {version} of model "
                                 f"{self.model_name}") from None
        if not listing:
            raise HttpError(404, f"Could not find any versions of model {self.model_name}")
        return json_response({"model_version_status": listing})

    async def metadata(self, request: Request) -> Response:
        version = self._check_model(request)
        served: int | None
        if version is not None:
            served = self.manager.acquire(version).version
        else:
            served = self.manager.version
        return json_response(
            {
                "model_spec": {
                    "name": self.model_name,
                    "signature_name": "",
                    "version": "" if served is None else str(served),
                },
                "metadata": {
                    "signature_def": {
                        "signature_def": {
                            name: sig.to_json()
                            for name, sig in self.manager.servable.signatures.items()
                        }
                    }
                },
            }
        )

    def _authorize(self, request: Request) -> None:
        if self._admin_token is None:
            raise HttpError(
                404,
                f"{request.url.path}: admin endpoints are disabled; start the server with "
                "--admin-token to enable :pin and :unpin",
            )
        auth = request.headers.get("authorization")
        if not auth:
            raise HttpError(
                401,
                'admin endpoint needs an "Authorization: Bearer <token>" header, got none',
                {"WWW-Authenticate": 'Bearer realm="ckptsync"'},
            )
        if not bearer_matches(auth, self._admin_token):
            raise HttpError(403, "the admin token in the Authorization header is not valid")

    async def pin(self, request: Request) -> Response:
        self._authorize(request)
        self._check_model(request)
        payload = decode_json(await self._read_body(request))
        if not isinstance(payload, dict) or "version" not in payload:
            raise HttpError(
                400, f'pin body must be an object {{"version": N}}, got {short(payload)}'
            )
        version = payload["version"]
        if isinstance(version, str):
            version = parse_version(version)  # None unless ASCII digits that fit int64
        if isinstance(version, bool) or not isinstance(version, int) or not (
            0 <= version <= INT64_MAX
        ):
            raise HttpError(
                400, f'"version" must be an integer >= 0 (a global step), got '
                f"{short(payload['version'])}; versions are int64 (at most 2**63 - 1)"
            )
        timeout_s = payload.get("timeout_s", 30.0)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not (
            0 < timeout_s <= 600
        ):
            raise HttpError(
                400, f'"timeout_s" must be a number in (0, 600], got {short(timeout_s)}'
            )
        try:
            snap = await run_in_threadpool(self.manager.pin, version, float(timeout_s),
                                           _requested_by(request))
        except errors.FailedPreconditionError as e:
            raise HttpError(409, e.message) from None
        return json_response({"policy": "pinned", "pinned_version": version, "model_version": snap.version})

    async def unpin(self, request: Request) -> Response:
        self._authorize(request)
        self._check_model(request)
        self.manager.unpin(_requested_by(request))
        return json_response({"policy": "latest", "model_version": self.manager.version})

    async def healthz(self, request: Request) -> Response:
        health = self.manager.health()
        problems = health_problems(health)
        if not problems:
            return json_response({"status": "alive", **health})
        return error_response(503, "; ".join(problems))

    async def readyz(self, request: Request) -> Response:
        version = self.manager.version
        if version is not None:
            return json_response({"status": "ready", "model_version": version})
        return error_response(503, self.manager.not_ready_reason())

    async def metrics(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


class ServingApp(Starlette):
    """The starlette app of :func:`create_app`: a predict goes to its
    :class:`~._predict.PredictHandler` (the only predict path); every other call to
    starlette's middleware and routes.

    Thread-safety: as a Starlette app; any number of concurrent requests.
    """

    def __init__(self, predict: PredictHandler, **kw: Any):
        super().__init__(**kw)
        self._predict = predict

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if await self._predict.handle(scope, receive, send):
            return
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await super().__call__(scope, receive, tracking_send)
        except asyncio.CancelledError:  # the drain timeout cut it: JSON 503, not a text 500
            if started:
                raise
            headers = [(b"content-type", b"application/json"), (b"connection", b"close"),
                       (b"content-length", str(len(DRAIN_CUT_BODY)).encode())]
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": DRAIN_CUT_BODY})


def health_problems(health: dict[str, Any]) -> list[str]:
    """What ``/healthz`` reports from a manager's ``health()``: [] while its watcher and
    loader run, else one sentence per problem."""
    watcher, loader = health["watcher"], health["loader"]
    problems = []
    if not watcher["alive"]:
        problems.append(
            f"the checkpoint watcher ({watcher['mode']}) is not running "
            f"(restarts so far: {watcher['restarts']})"
        )
    if loader["stuck"]:
        problems.append(
            f"the loader has been loading version {loader['loading_version']} for "
            f"{loader['loading_for_s']:.0f} s and is stuck"
        )
    elif not loader["alive"]:
        problems.append("the loader thread is not running")
    return problems


def _requested_by(request: Request) -> str:
    """Who asked for an admin action, for the log: the route and the client's address."""
    client = request.client.host if request.client else "an unknown client"
    return f"{request.method} {request.url.path} from {client}"


def create_app(
    manager: ModelManager,
    model_name: str,
    max_request_bytes: int | None = None,
    max_batch_size: int | None = None,
    *,
    options: HttpOptions | None = None,
    inline_max_body_bytes: int | None = None,
    own_manager: bool = False,
    admin_token: str | None = None,
    batching: BatchingOptions | None = None,
) -> Starlette:
    """Builds the ASGI app serving ``manager`` as model ``model_name``.

    Args:
        manager: the model manager (started by the caller unless ``own_manager``).
        model_name: the ``{name}`` in URLs.
        max_request_bytes, max_batch_size, inline_max_body_bytes, admin_token: the
            :class:`~.options.HttpOptions` fields of those names, applied over
            ``options`` (None: as ``options`` says; defaults 64 MiB, 4096 rows, 256 KiB,
            no admin endpoints).
        options: the app's options (None: the defaults).
        own_manager: start the manager at app startup and close it at shutdown (lifespan).
        batching: batch concurrent predicts (:mod:`.batching`); None: each runs alone.

    Returns:
        A Starlette app (a :class:`ServingApp`); ``app.state.registry`` is its Prometheus
        registry, ``app.state.manager`` the manager, ``app.state.options`` the options,
        ``app.state.batcher`` the batch scheduler (or None), ``app.state.api`` its
        :class:`RestApi`.

    Raises:
        TypeError, ValueError: an option of the wrong type or out of range.

    Thread-safety: the app may serve any number of concurrent requests.
    """
    given = {"max_request_bytes": max_request_bytes, "max_batch_size": max_batch_size,
             "inline_max_body_bytes": inline_max_body_bytes, "admin_token": admin_token}
    options = apply_overrides(HttpOptions, options,
                              {k: v for k, v in given.items() if v is not None}, "create_app")
    api = RestApi(manager, model_name, options)
    if batching is not None:
        api.batcher = BatchScheduler(manager, batching, api.registry,
                                     options.inline_max_body_bytes)
    ep = api.endpoint
    model, version = "/v1/models/{name}", "/v1/models/{name}/versions/{version:digits}"
    # POST .../{name}[/versions/{v}]:predict never reaches these: PredictHandler answers it.
    routes = [
        Route(model + ":pin", ep("pin", api.pin), methods=["POST"]),
        Route(model + ":unpin", ep("unpin", api.unpin), methods=["POST"]),
        Route(model + "/metadata", ep("metadata", api.metadata), methods=["GET"]),
        Route(version + "/metadata", ep("metadata", api.metadata), methods=["GET"]),
        Route(model, ep("status", api.status), methods=["GET"]),
        Route(model, ep("verb", api.unknown_verb), methods=["POST"]),
        Route(version, ep("status", api.status), methods=["GET"]),
        Route("/healthz", ep("healthz", api.healthz), methods=["GET"]),
        Route("/readyz", ep("readyz", api.readyz), methods=["GET"]),
        Route("/metrics", ep("metrics", api.metrics), methods=["GET"]),
        *api.v2.routes(),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        api.count("unmatched", exc.status_code)
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return error_response(exc.status_code, message)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if own_manager:
            manager.start()
        try:
            yield
        finally:
            if api.batcher is not None:
                await run_in_threadpool(api.batcher.close)
            if own_manager:
                await run_in_threadpool(manager.close)

    app = ServingApp(
        PredictHandler(api),
        routes=routes,
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.registry = api.registry
    app.state.manager = manager
    app.state.options = options
    app.state.batcher = api.batcher
    app.state.api = api
    return app
