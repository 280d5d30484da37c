"""``infer``: serve a model whose parameters follow a training run's checkpoints.

    infer serve --model model.py --checkpoint-dir ckpts [--port 8501] [--port-file F]
                [--poll] [--pin-version N] [--gate gates.py:accuracy] [--admin-token T]
                [--free-before-load] [--load-timeout-s S] [--max-load-attempts N]
    infer serve --model-config-file models.config [--model-config-file-poll-wait-s S] ...

Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT drain in-flight requests first),
1 for runtime failures (``build_net`` raises, port in use), 2 for usage errors (a model
file that is missing, does not import or lacks ``build_net``, as for ``trainer run``; a
``model_fn`` file that fails or has no ``serving_input_receiver_fn``). An
expected error prints one line on stderr, no traceback.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import tempfile
from typing import Any, NoReturn

import click

from ._common import (
    CONTEXT_SETTINGS,
    EXIT_USAGE,
    Int,
    OneLineErrorGroup,
    Real,
    fail,
    limit_blas_threads,
    option,
)
from ._serve_flags import batching_options, is_loopback, model_config_entries, tls_files
from ._serve_models import model_server

__all__ = ["main"]

logger = logging.getLogger("ckptsync.cli.infer")
# sys.setswitchinterval for the server (see serve): how long a background thread may
# hold the GIL while the event loop waits for it.
SWITCH_INTERVAL_S = 0.0001


@click.group(name="infer", cls=OneLineErrorGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(package_name="ckptsync")
def main() -> None:
    """Serve ckptsync models over TF Serving's REST and gRPC APIs and the Open Inference
    Protocol (KServe v2)."""


@main.command()
@option("--model", "model_file", default=None, type=click.Path(dir_okay=False),
        help="Model file defining build_net(graph, device, mode), or TF1's model_fn with a "
        "serving_input_receiver_fn.  [required unless --model-config-file]")
@option("--checkpoint-dir", default=None, type=click.Path(file_okay=False),
        help="Directory the trainer saves into (may not exist yet).  [required unless "
        "--model-config-file]")
@option("--model-config-file", type=click.Path(dir_okay=False), default=None,
        help="Serve the models of this TF Serving model_config_list text file (name, "
        "base_path, model_file, model_version_policy, version_labels) instead of "
        "--model/--checkpoint-dir; applied again, all or nothing, when it changes.")
@option("--model-config-file-poll-wait-s", type=Real(min=0), default=1.0, show_default=True,
        help="How often to look for changes of --model-config-file, seconds; 0: never (TF "
        "Serving's --model_config_file_poll_wait_seconds).")
@option(
    "--device", default="cpu:0", show_default=True, help="Device for the graph.")
@option(
    "--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@option(
    "--port", type=Int(0, 65535), default=8501, show_default=True, help="0: any free."
)
@option(
    "--port-file", default=None, help="Write the bound port here once listening.")
@option(
    "--grpc-port", type=Int(0, 65535), default=8500, show_default=True,
    help="TF Serving's gRPC API (PredictionService, ModelService, grpc.health.v1) on this "
    "port of --host; 0: off.")
@option(
    "--model-name", default=None, help="Name in URLs [default: model file's stem].")
@option(
    "--ssl-certfile", type=click.Path(dir_okay=False), default=None,
    help="TLS certificate chain (PEM) for REST and gRPC; needs --ssl-keyfile.")
@option(
    "--ssl-keyfile", type=click.Path(dir_okay=False), default=None,
    help="TLS private key (PEM) of --ssl-certfile.")
@option(
    "--enable-batching", is_flag=True,
    help="Run concurrent predicts (REST, v2, gRPC) as one forward pass, as TF Serving's "
    "--enable_batching.")
@option(
    "--batching-parameters-file", type=click.Path(dir_okay=False), default=None,
    help="With --enable-batching: TF Serving's BatchingParameters text (max_batch_size, "
    "batch_timeout_micros, max_enqueued_batches, num_batch_threads, allowed_batch_sizes).")
@option(
    "--poll", is_flag=True, help="Poll the directory (NFS, no inotify).")
@option(
    "--rescan-interval-s",
    type=Real(min=0.001),
    default=1.0,
    show_default=True,
    help="Backstop rescan period, seconds.",
)
@option(
    "--max-request-bytes",
    type=Int(min=1),
    default=64 * 2**20,
    show_default=True,
    help="Request body cap; larger bodies get 413.",
)
@option(
    "--max-batch-size", type=Int(min=1), default=4096, show_default=True,
              help="Most rows in one predict; more get 400.")
@option(
    "--allow-nonfinite", is_flag=True, help="Serve checkpoints holding NaN/Inf.")
@option(
    "--pin-version", "pinned_version", type=Int(min=0), default=None,
    help="Serve only this version (global step) instead of the latest; "
    "POST :unpin returns to the latest.")
@click.option(  # the old name of --pin-version, for one release: `infer --version` differs
    "--version", "version", type=Int(min=0), default=None, hidden=True,
    envvar="CKPTSYNC_VERSION",
    deprecated="It is now --pin-version (infer --version prints the program's version); "
    "--version N will be removed in the next release.")
@option(
    "--gate", default=None, metavar="FILE:FUNC",
    help="FUNC(candidate) -> bool or (ok, reason) from FILE, called before a new version "
    "is served; a refused version never replaces the one being served.")
@option(
    "--admin-token", default=None,
    help="Enables POST /v1/models/{name}:pin and :unpin for requests with "
    "'Authorization: Bearer <token>' (prefer the env var).")
@option(
    "--free-before-load", is_flag=True,
    help="Drop the served version before loading the next: half the peak memory, "
    "a short unavailability per reload.")
@option(
    "--load-timeout-s", type=Real(min=0.001), default=300.0, show_default=True,
    help="A load running longer marks the loader stuck (/healthz 503).")
@option(
    "--max-load-attempts", type=Int(min=1), default=5, show_default=True,
    help="Loads of a failing version (with backoff) before it is given up until its file "
    "changes.")
@option(
    "--drain-timeout-s",
    type=Int(min=0),
    default=30,
    show_default=True,
    help="On SIGTERM, wait this long for in-flight requests.",
)
@option(
    "--idle-timeout-s", type=Real(min=0, min_open=True), default=10.0,
    show_default=True,
    help="Close a connection that has waited this long for a request's headers (never "
    "sent a byte, idle between requests, or sending its headers slowly).")
@option(
    "--max-connections", type=Int(min=1), default=2048, show_default=True,
    help="Most open connections: one more closes the longest-idle one; when all are busy "
    "it is answered only for /healthz and /readyz (503 otherwise).")
@option(
    "--summary-dir", type=click.Path(file_okay=False), default=None,
    help="Write TensorBoard event files here each second: served version, load time, "
    "publish-to-served delay, requests and errors per second.")
@option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
    help="Log level of the server and its loader.",
)
@option(
    "--intra-op-threads", default=1, show_default=True, type=Int(min=1),
              help="BLAS threads for numpy.")
def serve(
    model_file: str | None,
    checkpoint_dir: str | None,
    model_config_file: str | None,
    model_config_file_poll_wait_s: float,
    device: str,
    host: str,
    port: int,
    port_file: str | None,
    grpc_port: int,
    model_name: str | None,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
    enable_batching: bool,
    batching_parameters_file: str | None,
    poll: bool,
    rescan_interval_s: float,
    max_request_bytes: int,
    max_batch_size: int,
    allow_nonfinite: bool,
    pinned_version: int | None,
    version: int | None,
    gate: str | None,
    admin_token: str | None,
    free_before_load: bool,
    load_timeout_s: float,
    max_load_attempts: int,
    drain_timeout_s: int,
    idle_timeout_s: float,
    max_connections: int,
    summary_dir: str | None,
    log_level: str,
    intra_op_threads: int,
) -> None:
    """Serve --model with the parameters of the newest checkpoint in --checkpoint-dir (or
    the models of --model-config-file)."""
    limit_blas_threads(intra_op_threads)
    entries = None
    if model_config_file is not None:
        entries = model_config_entries(model_config_file, {
            "--model": model_file, "--checkpoint-dir": checkpoint_dir,
            "--model-name": model_name, "--pin-version": pinned_version, "--version": version})
    elif model_file is None or checkpoint_dir is None:
        raise click.UsageError(f"Missing option '{'--model' if model_file is None else '--checkpoint-dir'}'"
                               " (or serve a --model-config-file)")
    elif not os.path.isfile(model_file):
        raise click.BadParameter(f"{model_file} is not a file", param_hint="'--model'")
    if port_file is not None and not os.path.isdir(os.path.dirname(os.path.abspath(port_file))):
        raise click.BadParameter(
            f"the directory of {port_file} does not exist", param_hint="'--port-file'"
        )
    if checkpoint_dir and os.path.exists(checkpoint_dir) and not os.path.isdir(checkpoint_dir):
        raise click.BadParameter(
            f"{checkpoint_dir} exists and is not a directory", param_hint="'--checkpoint-dir'"
        )
    if version is not None:
        if pinned_version is not None and pinned_version != version:
            raise click.UsageError(f"--version {version} (the deprecated name of "
                                   f"--pin-version) contradicts --pin-version {pinned_version}")
        pinned_version = version
    if admin_token is not None and not admin_token.strip():
        raise click.BadParameter("must not be empty", param_hint="'--admin-token'")
    batching = batching_options(enable_batching, batching_parameters_file)
    tls = tls_files(ssl_certfile, ssl_keyfile)
    # Imported here so `infer --help` stays fast.
    from ckptsync.serving import (
        GraphServable,
        HttpOptions,
        ManagerOptions,
        ModelManager,
        create_app,
        load_gate,
    )

    gate_fn = None
    if gate is not None:
        try:
            gate_fn = load_gate(gate)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="'--gate'") from None
    try:
        manager_options = ManagerOptions(
            poll=poll,
            rescan_interval_s=rescan_interval_s,
            allow_nonfinite=allow_nonfinite,
            gate=gate_fn,
            max_load_attempts=max_load_attempts,
            load_timeout_s=load_timeout_s,
            free_before_load=free_before_load,
        )
        http_options = HttpOptions(
            max_request_bytes=max_request_bytes,
            max_batch_size=max_batch_size,
            admin_token=admin_token,
            idle_timeout_s=idle_timeout_s,
            max_connections=max_connections,
        )
    except (TypeError, ValueError) as e:  # the flags' types and ranges make this rare
        raise click.UsageError(str(e)) from None
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if batching is not None:
        logger.info("request batching on: %s", batching)
    if admin_token is not None and tls is None and not is_loopback(host):
        logger.warning("--admin-token is sent in the clear: --host %s is not a loopback "
                       "address and TLS is off (--ssl-certfile/--ssl-keyfile)", host)
    # The event loop answers requests while the loader and metrics threads run Python
    # now and then; CPython lets a thread keep the GIL for the switch interval (5 ms by
    # default) before the other gets it. 0.1 ms bounds both waits: a reload's work adds
    # at most ~0.1 ms at a time to requests in flight, and the load thread, which gives
    # the GIL up at each of its system calls, gets it back within ~0.1 ms each time
    # (with 0.5 ms a publish reached the first request ~0.5 ms later).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    import uvicorn  # here so `infer --help` stays fast

    from ckptsync.model_spec import ModelFileError  # here so `infer --help` stays fast
    from ckptsync.serving.connections import (  # imports uvicorn: here for a fast --help
        fit_to_fd_limit,
        limited_protocol,
    )

    credentials = None
    if tls is not None and grpc_port:
        import grpc as grpcio  # here so `infer --help` stays fast

        credentials = grpcio.ssl_server_credentials([tls])
    closers: list[Any] = []  # run after the server stops
    if entries is None:
        assert model_file is not None and checkpoint_dir is not None
        try:
            servable = GraphServable.from_model_file(model_file, device)
        except ModelFileError as e:  # the user's file: a usage error, as for `trainer run`
            fail(f"cannot build the model from {model_file}: {e}", EXIT_USAGE)
        except Exception as e:
            _fail(f"cannot build the model from {model_file}: {e}")
        manager = ModelManager(
            servable,
            checkpoint_dir,
            "latest" if pinned_version is None else pinned_version,
            options=manager_options,
        )
        name = model_name or os.path.splitext(os.path.basename(model_file))[0]
        what = f"model {name!r}"
        app: Any = create_app(manager, name, options=http_options, own_manager=True,
                              batching=batching)

        async def start_grpc() -> tuple[Any, Any]:
            from ckptsync.serving.grpc_api import start_grpc_server  # here for a fast --help

            grpc_server, _, task = await start_grpc_server(
                manager, name, http_options, host, grpc_port, registry=app.state.registry,
                batcher=app.state.batcher, credentials=credentials)
            return grpc_server, task

        if summary_dir is not None:
            from ckptsync.serving.summaries import ServingSummaries  # here for a fast --help

            try:
                closers.append(ServingSummaries(manager, summary_dir,
                                                app.state.registry).start().close)
            except (ImportError, OSError) as e:  # no tensorboard package; an unwritable dir
                _fail(f"cannot write summaries to --summary-dir {summary_dir}: {e}")
    else:
        assert model_config_file is not None
        app, what, start_grpc = model_server(
            entries, model_config_file, model_config_file_poll_wait_s, device,
            manager_options, http_options, batching, grpc_port != 0, summary_dir,
            admin_token, host, grpc_port, credentials)
    try:
        sock = _bind(host, port)
    except OSError as e:
        _shutdown(app, closers)
        _fail(f"cannot listen on {host}:{port}: {e.strerror or e}")
    config = uvicorn.Config(
        app,
        ssl_certfile=None if tls is None else ssl_certfile,
        ssl_keyfile=None if tls is None else ssl_keyfile,
        log_level=log_level.lower(),
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=drain_timeout_s,
        # The idle timeout and the connection cap (uvicorn's limit_concurrency would
        # answer 503 to /healthz too).
        http=limited_protocol(http_options.idle_timeout_s,
                              fit_to_fd_limit(max_connections)),
    )
    server = uvicorn.Server(config)
    bound_port = sock.getsockname()[1]
    # uvicorn re-raises a caught SIGTERM/SIGINT after draining; with these no-op handlers
    # installed that ends in a normal exit 0 instead of death by signal.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    try:
        asyncio.run(_serve(server, sock, port_file, bound_port, host, what,
                           grpc=None if grpc_port == 0 else (grpc_port, float(drain_timeout_s),
                                                             start_grpc)))
    finally:
        sock.close()
        for close in closers:
            close()
        if not server.started:
            _shutdown(app, [])
    if not server.started:
        _fail("the server failed to start (see the log above)")


def _shutdown(app: Any, closers: list[Any]) -> None:
    """Closes what a server that never started holds: its models (a many-model app)."""
    server = getattr(app, "server", None)
    if server is not None:
        server.close()
    for close in closers:
        close()


async def _serve(
    server: Any, sock: socket.socket, port_file: str | None, port: int, host: str, what: str,
    grpc: tuple[int, float, Any] | None = None,
) -> None:
    """uvicorn's ``server`` on ``sock`` and, when ``grpc`` is (port, drain timeout,
    coroutine function starting the gRPC server -> (server, health task)), TF Serving's
    gRPC API on the same event loop; both stop on the same signal."""
    grpc_server = health_task = None
    drain_s = 0.0
    if grpc is not None:
        grpc_port, drain_s, start_grpc = grpc
        try:
            grpc_server, health_task = await start_grpc()
        except OSError as e:
            sock.close()
            _fail(f"{e} (--grpc-port {grpc_port}; 0 turns gRPC off)")
        logger.info("serving %s over gRPC on %s:%d", what, host, grpc_port)

    async def announce() -> None:
        while not server.started and not server.should_exit:
            await asyncio.sleep(0.005)
        if server.started:
            if port_file:
                try:
                    _write_atomically(port_file, f"{port}\n")
                except OSError as e:
                    logger.error("cannot write --port-file %s: %s; shutting down", port_file, e)
                    server.should_exit = True
                    return
            logger.info("serving %s on http://%s:%d", what, host, port)

    async def stop_grpc_with_http() -> None:
        # uvicorn drains its connections and then closes the manager (lifespan): gRPC
        # drains alongside, so its calls in flight finish before the manager is closed.
        while not server.should_exit:
            await asyncio.sleep(0.05)
        if health_task is not None:
            health_task.cancel()
        if grpc_server is not None:
            await grpc_server.stop(grace=drain_s)

    tasks = [asyncio.create_task(announce()), asyncio.create_task(stop_grpc_with_http())]
    try:
        await server.serve(sockets=[sock])
    finally:
        server.should_exit = True
        await tasks[1]
        tasks[0].cancel()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say they are TCP;
    # without it a keep-alive client waits ~40 ms (Nagle + delayed ACK) for every answer
    # after the first.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


def _write_atomically(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _fail(message: str) -> NoReturn:
    fail(message)  # exit 1, one line


if __name__ == "__main__":
    main(prog_name="infer")
