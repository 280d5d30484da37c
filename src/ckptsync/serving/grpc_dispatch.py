"""TF Serving's gRPC API for a many-model server: each call goes to its model's servicer.

``PredictionService.Predict``/``GetModelMetadata`` and ``ModelService.GetModelStatus``
look ``model_spec.name`` up in the :class:`~.model_server.ModelServer` and run on that
model's :class:`~.grpc_api.TfServingGrpc` (so each model answers exactly as a one-model
server; ``version_label`` resolves through the model's ``version_labels``; a model serving
several versions answers each call on the version it names, or its newest). An unknown
name is ``NOT_FOUND`` with TF Serving's message. ``ModelService.HandleReloadConfigRequest``
applies a ``ModelServerConfig`` as TF Serving's does, all or nothing, but only for a
caller holding the admin token (``authorization: Bearer <token>`` metadata): a config
names model files, which are code. Without ``--admin-token`` it is ``PERMISSION_DENIED``.
The health service reports each model's name (``SERVING`` once it serves a version) and
``""`` (every model serves).

Thread-safety: calls run on the server's event loop; a reload runs in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import grpc

from .. import errors
from . import tfs_protos as pb
from ._responses import bearer_matches
from .grpc_api import tf_serving_handlers
from .model_config import entries_from_proto
from .model_server import ModelBuildError, ModelServer, ServedModel

__all__ = ["RELOAD_WAIT_S", "ModelServerGrpc"]

#: How long HandleReloadConfigRequest waits for a reload in progress before UNAVAILABLE.
RELOAD_WAIT_S = 10.0


class ModelServerGrpc:
    """The gRPC handlers of a :class:`~.model_server.ModelServer`.

    Args:
        server: the models (each built with gRPC on).
        admin_token: the token ``HandleReloadConfigRequest`` needs (None: refused).
    """

    def __init__(self, server: ModelServer, admin_token: str | None = None):
        self.server = server
        self._token = None if admin_token is None else admin_token.encode()

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        """grpcio handlers of ``PredictionService`` and ``ModelService``."""
        return tf_serving_handlers(self.predict, self.get_model_metadata,
                                   self.get_model_status, self.reload_config)

    def statuses(self) -> dict[str, bool]:
        """The health service's view: each model's name -> serving; ``""`` -> all serve."""
        now = {name: bool(m.served_versions()) for name, m in self.server.models.items()}
        return {"": bool(now) and all(now.values()), **now}

    async def _servicer(self, spec: Any, context: Any, status_call: bool = False) -> Any:
        """The servicer of the version ``spec`` names (by number or label; the newest
        served for neither), as :meth:`.served_model.ServedModel.slot_for`."""
        model = await self._model(spec, context, status_call)
        which = spec.WhichOneof("version_choice")
        version: int | None = None
        if which == "version":
            version = spec.version.value
            missing = None if status_call else model.not_served(version)
            if missing is not None:
                await context.abort(grpc.StatusCode.NOT_FOUND, missing)
        elif which == "version_label" and len(model.slots) > 1:
            try:
                version = model.resolve_label(spec.version_label)
            except errors.OpError:
                pass  # the servicer resolves it again and answers its status
        return model.slot_for(version).grpc

    async def _model(self, spec: Any, context: Any, status_call: bool = False) -> ServedModel:
        model = self.server.model(spec.name)
        if model is None:
            if status_call:
                message = f"Could not find any versions of model {spec.name}"
            elif spec.WhichOneof("version_choice") == "version":
                message = (f"Servable not found for request: Specific({spec.name}, "
                           f"{spec.version.value})")
            else:
                message = f"Servable not found for request: Latest({spec.name})"
            await context.abort(grpc.StatusCode.NOT_FOUND, message)
        assert model is not None and model.slots[0].grpc is not None
        return model

    async def predict(self, request: Any, context: Any) -> Any:
        """``PredictionService.Predict`` on the named model."""
        servicer = await self._servicer(request.model_spec, context)
        return await servicer.predict(request, context)

    async def get_model_metadata(self, request: Any, context: Any) -> Any:
        """``PredictionService.GetModelMetadata`` on the named model."""
        servicer = await self._servicer(request.model_spec, context)
        return await servicer.get_model_metadata(request, context)

    async def get_model_status(self, request: Any, context: Any) -> Any:
        """``ModelService.GetModelStatus`` of the named model."""
        servicer = await self._servicer(request.model_spec, context, status_call=True)
        return await servicer.get_model_status(request, context)

    async def reload_config(self, request: Any, context: Any) -> Any:
        """``ModelService.HandleReloadConfigRequest``: serve exactly ``request.config``."""
        await self._authorize(context)
        try:
            entries = entries_from_proto(request.config, "ReloadConfigRequest.config")
        except errors.InvalidArgumentError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, e.message)
        try:
            warnings = await _in_daemon_thread(self.server.reload, entries, RELOAD_WAIT_S)
        except ModelBuildError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        except errors.UnavailableError as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, e.message)
        except errors.OpError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, e.message)
        response = pb.ReloadConfigResponse()
        response.status.error_code = 0
        response.status.error_message = "; ".join(warnings)
        return response

    async def _authorize(self, context: Any) -> None:
        if self._token is None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                "HandleReloadConfigRequest is disabled: start the server with "
                                "--admin-token (a model config names model files, which run "
                                "as code)")
        given = dict(context.invocation_metadata() or ()).get("authorization")
        if not given:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                'HandleReloadConfigRequest needs "authorization: Bearer '
                                '<token>" metadata, got none')
        if not bearer_matches(str(given), self._token or b""):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                "the admin token in the authorization metadata is not valid")


async def _in_daemon_thread(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` in a daemon thread, awaited: a reload stuck in a model file's import
    never holds up the process's exit (``asyncio.to_thread``'s pool threads are joined
    at exit)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(result)

    def run() -> None:
        try:
            result, error = fn(*args), None
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting call
            result, error = None, e
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="ckptsync-reload-config", daemon=True).start()
    return await future
