"""``infer serve --model-config-file``: the many-model server's app and gRPC server."""

from __future__ import annotations

from typing import Any

from ._common import EXIT_USAGE, fail

__all__ = ["model_server"]


def model_server(entries: Any, path: str, poll_wait_s: float, device: str,
                  manager_options: Any, http_options: Any, batching: Any, grpc_on: bool,
                  summary_dir: str | None, admin_token: str | None, host: str,
                  grpc_port: int, credentials: Any) -> tuple[Any, str, Any]:
    """The app of --model-config-file's models (built and started), what the log calls
    it and the coroutine function starting its gRPC server; exits (one line) when a model
    cannot be built."""
    from ckptsync.model_spec import ModelFileError  # here so `infer --help` stays fast
    from ckptsync.serving.model_server import (  # here so `infer --help` stays fast
        ModelBuildError,
        ModelServer,
        ServerOptions,
    )
    from ckptsync.serving.server_app import create_server_app  # the same

    models = ModelServer(ServerOptions(device, manager_options, http_options, batching,
                                       grpc_on, summary_dir))
    try:
        models.reload(entries)
    except ModelBuildError as e:
        fail(f"--model-config-file {path}: {e}",
             EXIT_USAGE if isinstance(e.cause, ModelFileError) else 1)
    if poll_wait_s > 0:
        models.watch_config_file(path, poll_wait_s)

    async def start_grpc() -> tuple[Any, Any]:
        from ckptsync.serving.grpc_api import serve_grpc  # here for a fast --help
        from ckptsync.serving.grpc_dispatch import ModelServerGrpc  # the same

        api = ModelServerGrpc(models, admin_token)
        grpc_server, _, task = await serve_grpc(api.handlers(), api.statuses, http_options,
                                                host, grpc_port, credentials)
        return grpc_server, task

    return create_server_app(models), "models " + ", ".join(repr(n) for n in models.models), \
        start_grpc
