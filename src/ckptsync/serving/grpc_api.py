"""TF Serving's gRPC API over one :class:`~.manager.ModelManager`, served by grpcio.

``tensorflow.serving.PredictionService``'s ``Predict`` and ``GetModelMetadata`` and
``tensorflow.serving.ModelService``'s ``GetModelStatus``, wire-compatible with TF
Serving's (its messages, :mod:`.tfs_protos`), so the ``tensorflow-serving-api`` client
(``PredictRequest``, ``make_tensor_proto``, ``PredictionServiceStub``) works unchanged,
plus grpcio's standard health service (``grpc.health.v1.Health``: ``SERVING`` for ``""``
and the model's name once a version is served). What TF Serving does, this does:

- ``model_spec.name`` must be the model's name, else ``NOT_FOUND`` ("Servable not found
  for request: Latest(name)"); ``model_spec.version`` picks a version (``NOT_FOUND``
  unless it is the one served); ``version_label`` picks the version a many-model
  server's ``version_labels`` name (:attr:`TfServingGrpc.resolve_label`), else it is
  ``INVALID_ARGUMENT`` (no labels configured); ``signature_name`` "" means ``serving_default``, an unknown one is
  ``FAILED_PRECONDITION``.
- The answer's ``model_spec`` names the model, the version that answered and the
  signature; its outputs are in the typed fields (``float_val``...), as TF Serving's.
  ``output_filter`` picks outputs (an unknown alias is ``INVALID_ARGUMENT``).
- Inputs are read as TensorFlow reads a ``TensorProto`` (:mod:`.tensor_proto`) and
  checked against the signature as the REST API checks them (``INVALID_ARGUMENT``, the
  input named); more rows than ``max_batch_size`` is ``INVALID_ARGUMENT``.
- Nothing served yet is ``UNAVAILABLE`` with the reason; a message over
  ``max_request_bytes`` is ``RESOURCE_EXHAUSTED`` (grpcio's own limit).
- A request runs on one snapshot: one version from its inputs to its answer.

Requests whose inputs hold at most ``inline_max_body_bytes`` run on the event loop (as
the REST API's small bodies); bigger ones in one pool thread at a time.

Thread-safety: the servicer runs on the server's event loop; any number of concurrent
calls.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry, Counter

from ckptsync import errors

from . import tfs_protos as pb
from ._responses import first_line
from .batching import BatchScheduler, run_unbatched
from .manager import ModelManager
from .options import HttpOptions
from .servable import DEFAULT_SIGNATURE, Signature, validate_inputs
from .tensor_proto import fill_tensor_proto, make_ndarray, tf_dtype

__all__ = ["TfServingGrpc", "serve_grpc", "start_grpc_server", "tf_serving_handlers",
           "track_health"]

logger = logging.getLogger("ckptsync.serving.grpc")

# TF's canonical codes are gRPC's, number for number.
_STATUS = {code.value[0]: code for code in grpc.StatusCode}
_HEALTH_POLL_S = 0.25  # how often the health service looks at the manager


def tf_serving_handlers(predict: Callable[..., Any], get_model_metadata: Callable[..., Any],
                        get_model_status: Callable[..., Any],
                        reload_config: Callable[..., Any] | None = None
                        ) -> list[grpc.GenericRpcHandler]:
    """grpcio handlers of ``PredictionService`` (``Predict``, ``GetModelMetadata``) and
    ``ModelService`` (``GetModelStatus`` and, when given, ``HandleReloadConfigRequest``)
    calling these coroutine functions ``(request, context) -> response``."""
    def unary(fn: Callable[..., Any], request: Any, response: Any) -> Any:
        def parse(data: bytes) -> Any:
            try:
                return request.FromString(data)
            except DecodeError as e:  # answered INVALID_ARGUMENT (grpcio: UNKNOWN, logged)
                return _Unparsable(f"the request is not a valid "
                                   f"{request.DESCRIPTOR.full_name} message: {e}")

        async def call(message: Any, context: Any) -> Any:
            if type(message) is _Unparsable:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message.reason)
            return await fn(message, context)

        return grpc.unary_unary_rpc_method_handler(
            call, request_deserializer=parse, response_serializer=response.SerializeToString)

    model_service = {"GetModelStatus": unary(get_model_status, pb.GetModelStatusRequest,
                                             pb.GetModelStatusResponse)}
    if reload_config is not None:
        model_service["HandleReloadConfigRequest"] = unary(
            reload_config, pb.ReloadConfigRequest, pb.ReloadConfigResponse)
    return [
        grpc.method_handlers_generic_handler("tensorflow.serving.PredictionService", {
            "Predict": unary(predict, pb.PredictRequest, pb.PredictResponse),
            "GetModelMetadata": unary(get_model_metadata, pb.GetModelMetadataRequest,
                                      pb.GetModelMetadataResponse),
        }),
        grpc.method_handlers_generic_handler("tensorflow.serving.ModelService", model_service),
    ]


class _Unparsable:
    """A request whose bytes are not its protobuf message (why, in ``reason``)."""

    def __init__(self, reason: str):
        self.reason = reason


class _Abort(Exception):
    """A call's answer is this status and message."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def _abort_for(e: errors.OpError) -> _Abort:
    code = _STATUS.get(e.error_code, grpc.StatusCode.UNKNOWN)
    if "\n" in e.message and code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
        logger.error("a gRPC call failed: %s", e.message)  # a model's traceback: the log's
        return _Abort(code, first_line(e.message))
    return _Abort(code, e.message)


class TfServingGrpc:
    """The handlers of TF Serving's gRPC services over one manager.

    Args:
        manager: the model manager (started by the caller).
        model_name: the name requests must give in ``model_spec.name``.
        options: the caps (``max_request_bytes``, ``max_batch_size``,
            ``inline_max_body_bytes``); the HTTP server's, so both protocols take the same.
        registry: a Prometheus registry for ``ckptsync_grpc_requests_total{method,code}``
            (None: a registry of its own).
        batcher: the batch scheduler the REST API shares (None: each call runs alone).

    Thread-safety: calls run on the event loop (a big request's forward on a pool thread).
    """

    def __init__(self, manager: ModelManager, model_name: str, options: HttpOptions,
                 registry: CollectorRegistry | None = None,
                 batcher: BatchScheduler | None = None):
        self.manager, self.model_name, self.options = manager, model_name, options
        self.batcher = batcher
        self.requests = Counter("ckptsync_grpc_requests", "gRPC calls by method and status code",
                                ["method", "code"],
                                registry=registry if registry is not None else CollectorRegistry())
        self._pool_slot: asyncio.Semaphore | None = None
        # The servable's signatures are fixed for its life: built once, not per call.
        self._signatures = dict(manager.servable.signatures)
        self._counted: dict[tuple[str, str], Any] = {}  # labels() children, cached
        #: label -> version (a many-model server's version_labels); None: no labels, a
        #: label is INVALID_ARGUMENT.
        self.resolve_label: Callable[[str], int] | None = None
        #: ``(version | None) -> model_version_status`` list: the manager's, or a
        #: many-version model's over all its versions.
        self.version_status: Callable[[int | None], list[dict[str, Any]]] = manager.status

    def _count(self, method: str, code: str) -> None:
        child = self._counted.get((method, code))
        if child is None:
            child = self._counted[(method, code)] = self.requests.labels(method, code)
        child.inc()

    # ------------------------------------------------------------------ services
    def handlers(self) -> list[grpc.GenericRpcHandler]:
        """grpcio handlers of ``PredictionService`` and ``ModelService``."""
        return tf_serving_handlers(self.predict, self.get_model_metadata,
                                   self.get_model_status)

    async def _call(self, method: str, context: Any, fn: Callable[[], Any]) -> Any:
        """Runs ``fn`` (a coroutine function) and answers its result or its error."""
        try:
            result = await fn()
        except (_Abort, errors.OpError) as e:
            abort = e if isinstance(e, _Abort) else _abort_for(e)
            self._count(method, abort.code.name)
            await context.abort(abort.code, abort.message)
        except Exception as e:  # a bug here, not the request's fault: INTERNAL, logged
            logger.exception("gRPC %s failed", method)
            self._count(method, "INTERNAL")
            await context.abort(grpc.StatusCode.INTERNAL, f"{method} failed: {e}")
        self._count(method, "OK")
        return result

    async def predict(self, request: Any, context: Any) -> Any:
        """``PredictionService.Predict``."""
        return await self._call("Predict", context, lambda: self._predict(request))

    async def get_model_metadata(self, request: Any, context: Any) -> Any:
        """``PredictionService.GetModelMetadata`` (``metadata_field: "signature_def"``)."""
        return await self._call("GetModelMetadata", context, lambda: self._metadata(request))

    async def get_model_status(self, request: Any, context: Any) -> Any:
        """``ModelService.GetModelStatus``."""
        return await self._call("GetModelStatus", context, lambda: self._status(request))

    # ------------------------------------------------------------------ the calls
    def _version(self, spec: Any) -> int | None:
        """The version ``spec`` asks for (None: the served one), its name checked."""
        which = spec.WhichOneof("version_choice")
        if spec.name != self.model_name:
            asked = (f"Specific({spec.name}, {spec.version.value})" if which == "version"
                     else f"Latest({spec.name})")
            raise _Abort(grpc.StatusCode.NOT_FOUND, f"Servable not found for request: {asked}")
        if which == "version_label":
            if self.resolve_label is None:
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                             f"Unrecognized servable version label: {spec.version_label}")
            return self.resolve_label(spec.version_label)  # OpError: its status
        return spec.version.value if which == "version" else None

    def _signature(self, name: str) -> tuple[str, Signature]:
        name = name or DEFAULT_SIGNATURE
        signature = self._signatures.get(name)
        if signature is None:
            raise _Abort(grpc.StatusCode.FAILED_PRECONDITION,
                         f'Serving signature key "{name}" not found.')
        return name, signature

    async def _predict(self, request: Any) -> Any:
        version = self._version(request.model_spec)
        name, signature = self._signature(request.model_spec.signature_name)
        wanted = list(request.output_filter) or list(signature.outputs)
        unknown = [k for k in wanted if k not in signature.outputs]
        if unknown:
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                         f"output tensor alias not found in signature: {unknown[0]} Outputs "
                         f"expected to be in the set {{{','.join(signature.outputs)}}}.")
        seen: set[str] = set()
        for k in wanted:
            if k in seen:
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                             f"duplicate output tensor alias: {k}")  # TF Serving's words
            seen.add(k)
        limit, cap = self.options.max_batch_size, self.options.max_request_bytes
        for key, proto in request.inputs.items():  # the batch limit before any decoding
            spec = signature.inputs.get(key)
            dims = [d.size for d in proto.tensor_shape.dim]
            # (a shape past the byte cap is make_ndarray's RESOURCE_EXHAUSTED)
            if spec is not None and spec.shape and spec.shape[0] is None and dims and \
                    math.prod(dims) <= cap:
                _check_rows(key, dims[0], limit)
        arrays = {k: make_ndarray(v, f"input '{k}'", cap) for k, v in request.inputs.items()}
        inputs = validate_inputs(signature, arrays)
        for key, arr in inputs.items():
            if arr.ndim and signature.inputs[key].shape and \
                    signature.inputs[key].shape[0] is None:
                _check_rows(key, arr.shape[0], limit)
        if self.batcher is not None:
            outputs, served = await self.batcher.run(name, version, inputs)
        elif sum(a.nbytes for a in inputs.values()) <= self.options.inline_max_body_bytes:
            outputs, served = run_unbatched(self.manager, name, version, inputs)
        else:
            if self._pool_slot is None:
                self._pool_slot = asyncio.Semaphore(1)
            async with self._pool_slot:
                outputs, served = await asyncio.to_thread(
                    run_unbatched, self.manager, name, version, inputs)
        response = pb.PredictResponse()
        response.model_spec.name = self.model_name
        response.model_spec.version.value = served
        response.model_spec.signature_name = name
        out = response.outputs
        for k in wanted:
            fill_tensor_proto(out[k], outputs[k])
        return response

    async def _metadata(self, request: Any) -> Any:
        version = self._version(request.model_spec)
        fields = list(request.metadata_field)
        if not fields:
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                         "GetModelMetadataRequest must specify at least one metadata_field")
        for field in fields:
            if field != "signature_def":
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                             f"Metadata field {field} is not supported")
        served = self.manager.acquire(version).version
        sigs = pb.SignatureDefMap()
        for sig_name, sig in self._signatures.items():
            _signature_def(sigs.signature_def[sig_name], sig)
        response = pb.GetModelMetadataResponse()
        response.model_spec.name = self.model_name
        response.model_spec.version.value = served
        response.metadata["signature_def"].Pack(sigs)
        return response

    async def _status(self, request: Any) -> Any:
        spec = request.model_spec
        if spec.name != self.model_name:
            raise _Abort(grpc.StatusCode.NOT_FOUND,
                         f"Could not find any versions of model {spec.name}")
        version = self._version(spec)
        try:
            listing = self.version_status(version)
        except errors.NotFoundError:
            raise _Abort(grpc.StatusCode.NOT_FOUND, f"Could not find version {version} of "
                                                    f"model {self.model_name}") from None
        if not listing:
            raise _Abort(grpc.StatusCode.NOT_FOUND,
                         f"Could not find any versions of model {self.model_name}")
        response = pb.GetModelStatusResponse()
        for entry in listing:
            status = response.model_version_status.add(
                version=int(entry["version"]), state=pb.MODEL_STATES[entry["state"]])
            status.status.error_code = pb.ERROR_CODES.get(entry["status"]["error_code"], 2)
            status.status.error_message = entry["status"]["error_message"]
        return response


def _signature_def(out: Any, sig: Signature) -> None:
    out.method_name = pb.PREDICT_METHOD_NAME
    for infos, specs in ((out.inputs, sig.inputs), (out.outputs, sig.outputs)):
        for key, spec in specs.items():
            info = infos[key]
            info.name = sig.tensor_names.get(key, key)
            info.dtype = tf_dtype(spec.dtype)
            for d in spec.shape:
                info.tensor_shape.dim.add(size=-1 if d is None else d)


async def track_health(servicer: Any, statuses: Callable[[], dict[str, bool]]) -> None:
    """Sets the health service's status of each name ``statuses()`` gives (True:
    ``SERVING``) as it changes; a name that disappears becomes ``NOT_SERVING``."""
    known: dict[str, bool] = {}
    while True:
        now = statuses()
        for name in set(known) - set(now):
            now[name] = False
        for name, serving in now.items():
            if known.get(name) is not serving:
                await servicer.set(name, health_pb2.HealthCheckResponse.SERVING if serving
                                   else health_pb2.HealthCheckResponse.NOT_SERVING)
        known = now
        await asyncio.sleep(_HEALTH_POLL_S)


async def start_grpc_server(manager: ModelManager, model_name: str, options: HttpOptions,
                            host: str, port: int, *, registry: CollectorRegistry | None = None,
                            batcher: BatchScheduler | None = None,
                            credentials: grpc.ServerCredentials | None = None
                            ) -> tuple[grpc.aio.Server, int, asyncio.Task[None]]:
    """Starts a grpcio server on the running event loop with TF Serving's services and
    the health service.

    Args:
        manager, model_name, options, registry, batcher: as :class:`TfServingGrpc`.
        host, port: where to listen (port >= 1).
        credentials: TLS credentials (``grpc.ssl_server_credentials``), or None for plain.

    Returns:
        (the started server, the bound port, the health-tracking task; cancel it and
        ``await server.stop(grace)`` to shut down).

    Raises:
        OSError: the address cannot be bound (the message names it).
    """
    api = TfServingGrpc(manager, model_name, options, registry, batcher)

    def statuses() -> dict[str, bool]:
        serving = manager.version is not None
        return {"": serving, model_name: serving}

    return await serve_grpc(api.handlers(), statuses, options, host, port, credentials)


async def serve_grpc(handlers: list[grpc.GenericRpcHandler],
                     statuses: Callable[[], dict[str, bool]], options: HttpOptions,
                     host: str, port: int, credentials: grpc.ServerCredentials | None = None
                     ) -> tuple[grpc.aio.Server, int, asyncio.Task[None]]:
    """Starts a grpcio server with ``handlers`` and the health service (fed by
    ``statuses``, see :func:`track_health`); the rest as :func:`start_grpc_server`."""
    limit = options.max_request_bytes
    server = grpc.aio.server(options=[
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", -1),
        ("grpc.so_reuseport", 0),
    ])
    server.add_generic_rpc_handlers(handlers)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = (server.add_secure_port(address, credentials) if credentials is not None
                 else server.add_insecure_port(address))
    except RuntimeError as e:  # grpcio raises RuntimeError for a port it cannot bind
        raise OSError(f"cannot listen for gRPC on {address}: {e}") from None
    if not bound:
        raise OSError(f"cannot listen for gRPC on {address} (in use?)")
    await server.start()
    task = asyncio.create_task(track_health(health_servicer, statuses))
    return server, bound, task


def _check_rows(key: str, rows: int, limit: int) -> None:
    """INVALID_ARGUMENT for an input of more than ``limit`` rows (--max-batch-size)."""
    if rows > limit:
        raise _Abort(grpc.StatusCode.INVALID_ARGUMENT,
                     f"input '{key}' has a batch of {rows} rows, more than the server's "
                     f"max_batch_size of {limit}; split the request")
