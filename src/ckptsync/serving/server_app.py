"""The HTTP app of a many-model server: routes each request to its model's REST app.

Routes::

    /v1/models/{name}...                    the model's TF Serving REST routes
    /v1/models/{name}/labels/{label}...     the same at the version the label names
    /v2/models/{name}...                    the model's Open Inference Protocol routes
    GET /healthz    200 while every model's watcher and loader run (503 names the others)
    GET /readyz     200 once every model serves a version (503 names those that do not)
                    (``model_version`` the newest served, ``model_versions`` all)
    GET /v2/health/live   200     GET /v2/health/ready   200 when /readyz is, else 400
    GET /v2         server metadata
    GET /metrics    Prometheus text: every model's metrics, labelled ``model``, and the
                    server's ``ckptsync_config_reloads_total{result}`` and
                    ``ckptsync_unrouted_requests_total{code}`` (unknown models, labels
                    and routes); a model serving several versions labels each
                    version's samples ``specific_version``

An unknown model is 404 ``{"error"}`` naming the models served; an unknown label is 400
(TF Serving's "Unrecognized servable version label"), a label whose version has not been
AVAILABLE yet 503. A request naming a version (``/versions/{v}``, or a label's) goes to
that version's app (a version none of a model's managers has is 404 naming those served), one naming none to the newest version's (:mod:`.served_model`); a
model whose policy is ``specific`` answers ``:pin`` and ``:unpin`` 409 (its config names
its versions; without ``--admin-token`` they are 404, as everywhere). Each version's app is :func:`.http.create_app`'s, so a model's routes,
limits and errors are exactly those of a one-model server; the table of models is read
once per request, so a config reload never sends a request to half of a model.

Thread-safety: an ASGI app; any number of concurrent requests.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric
from starlette.concurrency import run_in_threadpool

from .. import errors
from ._responses import dumps, map_error
from .http import health_problems
from .kserve_v2 import server_metadata
from .model_server import ModelServer

__all__ = ["create_server_app"]

_MODEL_PATH = re.compile(r"^/(v1|v2)/models/([A-Za-z0-9][A-Za-z0-9_.\-]*)([/:].*)?$")
_LABEL_PATH = re.compile(r"^/labels/([^/:]*)((?::[a-z]+|/metadata)?)$")
_VERSION_PATH = re.compile(r"^/versions/([0-9]{1,19})(?:[/:]|$)")


class _Answer(Exception):
    def __init__(self, status: int, body: Any):
        self.status, self.body = status, body


class ServerApp:
    """The dispatcher over a :class:`~.model_server.ModelServer` (see the module).

    Args:
        server: the models.
        on_shutdown: called (in a thread) at the app's lifespan shutdown, after the
            connections are drained: closes the models (default ``server.close``).
    """

    def __init__(self, server: ModelServer, on_shutdown: Any = None):
        self.server = server
        self._on_shutdown = on_shutdown or server.close
        #: Answers no model's app gave (an unknown model or label, an unknown route), by
        #: HTTP status; ``/metrics`` exports them.
        self.unrouted: dict[int, int] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        path = scope.get("path", "")
        m = _MODEL_PATH.match(path)
        try:
            if m is not None:
                app, scope = self._route(m, scope)
                await app(scope, receive, send)
                return
            if scope["type"] != "http":
                return
            status, body, content_type = await self._server_route(scope)
        except _Answer as a:
            status, body, content_type = a.status, a.body, "application/json"
        except errors.OpError as e:
            code, message, _ = map_error(e, scope.get("method", "GET"), path)
            status, body, content_type = code, {"error": message}, "application/json"
        if status >= 400:
            self.unrouted[status] = self.unrouted.get(status, 0) + 1
        data = body if isinstance(body, bytes) else dumps(body).encode()
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", content_type.encode()),
            (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})

    def _route(self, m: re.Match[str], scope: Any) -> tuple[Any, Any]:
        protocol, name, rest = m.group(1), m.group(2), m.group(3) or ""
        model = self.server.model(name)
        if model is None:
            served = ", ".join(f'"{n}"' for n in self.server.models) or "none"
            raise _Answer(404, {"error": f'model "{name}" not found; this server serves '
                                         f"{served}"})
        if protocol == "v1" and rest.startswith("/labels/"):
            lm = _LABEL_PATH.match(rest)
            if lm is None:
                raise _Answer(404, {"error": f"{scope.get('method')} {scope['path']}: Not "
                                             "Found (a label route is /v1/models/{name}/"
                                             "labels/{label}[:predict|/metadata])"})
            version: int | None = model.resolve_label(lm.group(1))  # OpError: 400/503
            path = f"/v1/models/{name}/versions/{version}{lm.group(2)}"
            scope = {**scope, "path": path, "raw_path": path.encode()}
        else:
            vm = _VERSION_PATH.match(rest)
            version = None if vm is None else int(vm.group(1))
        if model.entry.versions and protocol == "v1" and rest in (":pin", ":unpin") and \
                model.slots[0].app.state.options.admin_token is not None:
            raise _Answer(409, {"error": f'model "{name}" serves the versions its '
                                         "model_version_policy names "
                                         f"({', '.join(map(str, model.entry.versions))}): "
                                         "change them in the model config; :pin and :unpin "
                                         "are for a model under latest"})
        # A version no slot has: 404 naming those served, before the body is read (as
        # TF Serving's servable lookup); status and readiness answer for themselves.
        status_route = (rest.endswith("/ready") if protocol == "v2"
                        else rest == f"/versions/{version}")
        if version is not None and not status_route:
            missing = model.not_served(version)
            if missing is not None:
                raise _Answer(404, {"error": missing})
        return model.slot_for(version).app, scope

    async def _server_route(self, scope: Any) -> tuple[int, Any, str]:
        path, method = scope["path"], scope["method"]
        routes = {"/healthz": self._healthz, "/readyz": self._readyz,
                  "/v2/health/live": self._live, "/v2/health/ready": self._v2_ready,
                  "/v2": self._v2, "/metrics": self._metrics}
        handler = routes.get(path)
        if handler is None:
            raise _Answer(404, {"error": f"{method} {path}: Not Found"})
        if method not in ("GET", "HEAD"):
            raise _Answer(405, {"error": f"{method} {path}: Method Not Allowed"})
        return handler()

    def _healthz(self) -> tuple[int, Any, str]:
        health: dict[str, Any] = {}
        problems: list[str] = []
        for name, m in self.server.models.items():
            if len(m.slots) == 1:  # as a one-model server's /healthz
                health[name] = h = m.slots[0].manager.health()
                problems += [f'model "{name}": {p}' for p in health_problems(h)]
                continue
            health[name] = {"versions": {}}
            for slot in m.slots:
                health[name]["versions"][str(slot.policy)] = h = slot.manager.health()
                problems += [f'model "{name}" version {slot.policy}: {p}'
                             for p in health_problems(h)]
        if problems:
            return 503, {"error": "; ".join(problems)}, "application/json"
        return 200, {"status": "alive", "models": health}, "application/json"

    def _not_ready(self) -> list[str]:
        return [f'model "{name}": {m.manager.not_ready_reason()}'
                for name, m in self.server.models.items() if not m.served_versions()]

    def _readyz(self) -> tuple[int, Any, str]:
        waiting = self._not_ready()
        if waiting or not self.server.models:
            return 503, {"error": "; ".join(waiting) or "no model is configured"}, \
                "application/json"
        return 200, {"status": "ready", "models": {
            name: {"model_version": m.manager.version, "model_versions": m.served_versions(),
                   "version_labels": m.labels(),
                   "pending_version_labels": m.pending_labels()}
            for name, m in self.server.models.items()}}, "application/json"

    def _live(self) -> tuple[int, Any, str]:
        return 200, b"", "application/json"

    def _v2_ready(self) -> tuple[int, Any, str]:
        ready = bool(self.server.models) and not self._not_ready()
        return (200 if ready else 400), b"", "application/json"

    def _v2(self) -> tuple[int, Any, str]:
        return 200, server_metadata(), "application/json"

    def _metrics(self) -> tuple[int, Any, str]:
        return 200, generate_latest(_MergedMetrics(self.server, self.unrouted)), \
            CONTENT_TYPE_LATEST

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await run_in_threadpool(self._on_shutdown)
                await send({"type": "lifespan.shutdown.complete"})
                return


class _MergedMetrics:
    """Every model's registry as one, each sample labelled with its ``model`` (for
    ``generate_latest``), plus the server's config reload counter."""

    def __init__(self, server: ModelServer, unrouted: dict[int, int]):
        self._server, self._unrouted = server, unrouted

    def collect(self) -> Iterable[Metric]:
        families: dict[str, Metric] = {}
        for name, model in self._server.models.items():
            for slot in model.slots:
                extra = {"model": name}
                if len(model.slots) > 1:
                    extra["specific_version"] = str(slot.policy)
                for family in slot.app.state.registry.collect():
                    merged = families.get(family.name)
                    if merged is None:
                        merged = families[family.name] = Metric(
                            family.name, family.documentation, family.type, family.unit)
                    merged.samples.extend(s._replace(labels={**s.labels, **extra})
                                          for s in family.samples)
        reloads = Metric("ckptsync_config_reloads", "Model config reloads by result", "counter")
        for result, count in self._server.reloads.items():
            reloads.add_sample("ckptsync_config_reloads_total", {"result": result}, count)
        families[reloads.name] = reloads
        unrouted = Metric("ckptsync_unrouted_requests", "HTTP requests no model answered (an "
                          "unknown model, label or route), by status code", "counter")
        for code, count in sorted(self._unrouted.items()):
            unrouted.add_sample("ckptsync_unrouted_requests_total", {"code": str(code)}, count)
        families[unrouted.name] = unrouted
        yield from families.values()


def create_server_app(server: ModelServer, on_shutdown: Any = None) -> ServerApp:
    """The ASGI app serving every model of ``server`` (see the module).

    Args:
        server: the models (already loaded by ``server.reload``).
        on_shutdown: what the lifespan shutdown runs in a thread (default
            ``server.close``).

    Thread-safety: any number of concurrent requests; reloads may run meanwhile.
    """
    return ServerApp(server, on_shutdown)
