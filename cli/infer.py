"""``infer``: serve a model whose parameters follow a training run's checkpoints.

    infer serve --model model.py --checkpoint-dir ckpts [--port 8501] [--port-file F]
                [--poll] [--pin-version N] [--gate gates.py:accuracy] [--admin-token T]
                [--free-before-load] [--load-timeout-s S] [--max-load-attempts N]

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

__all__ = ["main"]

logger = logging.getLogger("ckptsync.cli.infer")
# sys.setswitchinterval for the server (see serve): how long a background thread may
# hold the GIL while the event loop waits for it.
SWITCH_INTERVAL_S = 0.0001


@click.group(name="infer", cls=OneLineErrorGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(package_name="ckptsync")
def main() -> None:
    """Serve ckptsync models over TF Serving's REST API."""


@main.command()
@option("--model", "model_file", required=True, type=click.Path(dir_okay=False),
        help="Model file defining build_net(graph, device, mode), or TF1's model_fn with a "
        "serving_input_receiver_fn.")
@option("--checkpoint-dir", required=True, type=click.Path(file_okay=False),
        help="Directory the trainer saves into (may not exist yet).")
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
    model_file: str,
    checkpoint_dir: str,
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
    """Serve --model with the parameters of the newest checkpoint in --checkpoint-dir."""
    limit_blas_threads(intra_op_threads)
    if not os.path.isfile(model_file):
        raise click.BadParameter(f"{model_file} is not a file", param_hint="'--model'")
    if port_file is not None and not os.path.isdir(os.path.dirname(os.path.abspath(port_file))):
        raise click.BadParameter(
            f"the directory of {port_file} does not exist", param_hint="'--port-file'"
        )
    if os.path.exists(checkpoint_dir) and not os.path.isdir(checkpoint_dir):
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
    batching = _batching_options(enable_batching, batching_parameters_file)
    tls = _tls_files(ssl_certfile, ssl_keyfile)
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
    if admin_token is not None and tls is None and not _is_loopback(host):
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

    try:
        servable = GraphServable.from_model_file(model_file, device)
    except ModelFileError as e:  # the user's file: a usage error, as for `trainer run`
        fail(f"cannot build the model from {model_file}: {e}", EXIT_USAGE)
    except Exception as e:
        _fail(f"cannot build the model from {model_file}: {e}")
    try:
        sock = _bind(host, port)
    except OSError as e:
        _fail(f"cannot listen on {host}:{port}: {e.strerror or e}")
    manager = ModelManager(
        servable,
        checkpoint_dir,
        "latest" if pinned_version is None else pinned_version,
        options=manager_options,
    )
    name = model_name or os.path.splitext(os.path.basename(model_file))[0]
    app = create_app(manager, name, options=http_options, own_manager=True, batching=batching)
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
    summaries = None
    if summary_dir is not None:
        from ckptsync.serving.summaries import ServingSummaries  # here for a fast --help

        try:
            summaries = ServingSummaries(manager, summary_dir, app.state.registry).start()
        except (ImportError, OSError) as e:  # no tensorboard package; an unwritable dir
            sock.close()
            _fail(f"cannot write summaries to --summary-dir {summary_dir}: {e}")
    try:
        asyncio.run(_serve(server, sock, port_file, bound_port, host, name,
                           grpc=None if grpc_port == 0 else (grpc_port, manager, http_options,
                                                             app.state.registry,
                                                             drain_timeout_s,
                                                             app.state.batcher, tls)))
    finally:
        sock.close()
        if summaries is not None:
            summaries.close()
    if not server.started:
        _fail("the server failed to start (see the log above)")


async def _serve(
    server: Any, sock: socket.socket, port_file: str | None, port: int, host: str, name: str,
    grpc: tuple[int, Any, Any, Any, float, Any, tuple[bytes, bytes] | None] | None = None,
) -> None:
    """uvicorn's ``server`` on ``sock`` and, when ``grpc`` is (port, manager, options,
    registry, drain timeout, batcher, TLS (key, certificate) or None), TF Serving's gRPC
    API on the same event loop; both stop on the same signal."""
    grpc_server = health_task = None
    drain_s = 0.0
    if grpc is not None:
        from ckptsync.serving.grpc_api import start_grpc_server  # here for a fast --help

        grpc_port, manager, options, registry, drain_s, batcher, tls = grpc
        import grpc as grpcio  # here so `infer --help` stays fast

        credentials = None if tls is None else grpcio.ssl_server_credentials([tls])
        try:
            grpc_server, _, health_task = await start_grpc_server(
                manager, name, options, host, grpc_port, registry=registry, batcher=batcher,
                credentials=credentials)
        except OSError as e:
            sock.close()
            _fail(f"{e} (--grpc-port {grpc_port}; 0 turns gRPC off)")
        logger.info("serving model %r over gRPC on %s:%d", name, host, grpc_port)

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
            logger.info("serving model %r on http://%s:%d", name, host, port)

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


def _tls_files(certfile: str | None, keyfile: str | None) -> tuple[bytes, bytes] | None:
    """(key, certificate chain) read from the TLS flags, or None when TLS is off."""
    if (certfile is None) != (keyfile is None):
        raise click.UsageError("--ssl-certfile and --ssl-keyfile go together (TLS needs "
                               "both the certificate and its key)")
    if certfile is None or keyfile is None:
        return None
    pems = []
    for path, flag, marker in ((keyfile, "--ssl-keyfile", b"PRIVATE KEY-----"),
                               (certfile, "--ssl-certfile", b"BEGIN CERTIFICATE-----")):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise click.BadParameter(f"cannot read {path}: {e.strerror or e}",
                                     param_hint=f"'{flag}'") from None
        if marker not in data:
            raise click.BadParameter(f"{path} is not a PEM file holding a "
                                     f"{'private key' if flag == '--ssl-keyfile' else 'certificate'}",
                                     param_hint=f"'{flag}'")
        pems.append(data)
    return pems[0], pems[1]


def _is_loopback(host: str) -> bool:
    import ipaddress  # here: only with --admin-token

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _batching_options(enabled: bool, path: str | None) -> Any:
    """The BatchingOptions of --enable-batching (and its file), or None when off."""
    if path is not None and not enabled:
        raise click.UsageError("--batching-parameters-file takes effect only with "
                               "--enable-batching")
    if not enabled:
        return None
    from ckptsync.errors import InvalidArgumentError  # here so `infer --help` stays fast
    from ckptsync.serving.batching import BatchingOptions  # the same

    if path is None:
        return BatchingOptions()
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        return BatchingOptions.from_text(text, path)
    except (OSError, UnicodeDecodeError) as e:
        raise click.BadParameter(f"cannot read {path}: {e}",
                                 param_hint="'--batching-parameters-file'") from None
    except InvalidArgumentError as e:
        raise click.BadParameter(e.message, param_hint="'--batching-parameters-file'") from None


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
