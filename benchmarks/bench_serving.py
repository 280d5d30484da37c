"""Serving: freshness, predict throughput against a bare starlette app, reloads under load,
memory across swaps. Loopback only; every server and load generator is its own process.

What runs (digits MLP 64->128->128->10, ``examples/digits_mlp.py``, batch 1):

- ``infer serve`` (ckptsync) and a bare starlette+uvicorn app doing the same numpy forward
  and the same JSON in and out (the limit of the HTTP stack), both with uvicorn's defaults.
- A load generator process: asyncio streams with keep-alive, 16 connections, one
  request in flight per connection, a pre-encoded request; it counts status codes and
  records latency per request. (httpx costs more CPU per request than the server does on
  2 cores, so it would measure itself.)
- Freshness: publish a checkpoint (``write_checkpoint`` then ``update_checkpoint_state``),
  then predict back to back on one connection until an answer carries the new version;
  timed from the start of the state-file update (the moment a reader may see it) to that
  answer. Retention keeps the last 5 checkpoints, as a Saver does.
- Throughput: ckptsync, bare, and ckptsync while a checkpoint lands every 100 ms,
  alternating, ``--repeats`` rounds of ``--duration-s`` each.
- Memory (MNIST MLP 784->256->256->10, 1 MiB of parameters): anonymous + shared-memory
  PSS (``/proc/PID/smaps_rollup``) of the server and its checkpoint reader process,
  summed (heaps and snapshots; a snapshot's pages, shared by both, count once; library
  pages left out): after warm-up (base), its peak (sampled every 2 ms during the swaps)
  and after ``--swaps`` swaps under load.

    python benchmarks/bench_serving.py [--duration-s 2] [--repeats 5] [--publishes 200]
        [--swaps 1000]
    python benchmarks/bench_serving.py --batch 1,64,256 [--connections-list 1,16,64]
        (throughput only, by rows per request)
    python benchmarks/bench_serving.py --v2 [--batch 1,64] [--connections-list 1,16,64]
        (the Open Inference Protocol's /v2/models/digits/infer, JSON and binary tensors,
        against TF Serving's :predict on the same server)
    python benchmarks/bench_serving.py --batching [--connections 64]
        (the digits CNN, batch-1 clients over REST and gRPC: --enable-batching against
        batching off, and p99 against batch_timeout + 2x one forward of a full batch)
    python benchmarks/bench_serving.py --grpc [--batch 1,64] [--connections-list 1,16,64]
        (gRPC Predict throughput: infer serve --grpc-port against a bare grpcio server
        doing the same forward with the same messages, benchmarks/_grpc_load.py)

The last line is the headline: ckptsync's throughput / the bare app's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODEL_FILE = os.path.join(ROOT, "examples", "digits_mlp.py")
SIZES = (64, 128, 128, 10)
MNIST_MODEL_FILE = os.path.join(ROOT, "examples", "mnist_mlp.py")
MNIST_SIZES = (784, 256, 256, 10)
KEEP = 5

try:
    import _grpc_load
    from _common import summary
except ImportError:  # run as a module
    from benchmarks import _grpc_load
    from benchmarks._common import summary


# --------------------------------------------------------------------------- checkpoints
def make_params(step: int, sizes: tuple[int, ...] = SIZES) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(step)
    out = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        out[f"dense{i}/w"] = (rng.standard_normal((a, b)) * 0.1).astype(np.float32)
        out[f"dense{i}/b"] = np.full((b,), step * 1e-3, np.float32)
    return out


class Publisher:
    """Publishes model.ckpt-<step> as a Saver does, keeping the last ``KEEP``."""

    def __init__(self, directory: str, sizes: tuple[int, ...] = SIZES):
        from ckptsync import checkpoint as ckpt

        self.ckpt, self.directory, self.kept = ckpt, directory, []
        self.step = 0
        self.sizes = sizes
        self.base = make_params(0, sizes)

    def write(self) -> str:
        self.step += 1
        prefix = os.path.join(self.directory, f"model.ckpt-{self.step}")
        arrays = dict(self.base)
        arrays["dense2/b"] = np.full((self.sizes[-1],), self.step * 1e-3, np.float32)
        self.ckpt.write_checkpoint(prefix, arrays, global_step=self.step)
        return prefix

    def name(self, prefix: str) -> None:
        self.kept.append(prefix)
        self.ckpt.update_checkpoint_state(self.directory, prefix, self.kept[-KEEP:])

    def evict(self) -> None:
        while len(self.kept) > KEEP:
            self.ckpt.remove_checkpoint(self.kept.pop(0))

    def publish(self) -> int:
        self.name(self.write())
        self.evict()
        return self.step


# --------------------------------------------------------------------------- HTTP bits
def request_bytes(path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


def parse_head(head: bytes) -> tuple[int, int, int | None]:
    """(status, content-length, x-model-version or None) of a response head."""
    status = int(head[9:12])
    length, version = 0, None
    for line in head.lower().split(b"\r\n")[1:]:
        if line.startswith(b"content-length:"):
            length = int(line[15:])
        elif line.startswith(b"x-model-version:"):
            version = int(line[16:])
    return status, length, version


class Probe:
    """One keep-alive connection that predicts back to back (blocking)."""

    def __init__(self, port: int, req: bytes):
        self.port, self.req = port, req
        self.connect()

    def connect(self) -> None:
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def predict(self) -> tuple[int, int | None]:
        try:
            return self._predict()
        except (ConnectionError, OSError):  # the server closed an idle keep-alive connection
            self.sock.close()
            self.connect()
            return self._predict()

    def _predict(self) -> tuple[int, int | None]:
        self.sock.sendall(self.req)
        while b"\r\n\r\n" not in self.buf:
            self.buf += self._recv()
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        status, length, version = parse_head(head)
        while len(rest) < length:
            rest += self._recv()
        self.buf = rest[length:]
        return status, version

    def _recv(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("server closed the connection")
        return data

    def close(self) -> None:
        self.sock.close()


# --------------------------------------------------------------------------- load generator
async def _connection(port: int, req: bytes, t_start: float, t_end: float, out: dict) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    lat, codes = out["lat"], out["codes"]
    perf = time.perf_counter
    try:
        while True:
            t0 = perf()
            if t0 >= t_end:
                break
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            status, length, _ = parse_head(head)
            if length:
                await reader.readexactly(length)
            if t0 >= t_start:
                lat.append(perf() - t0)
                codes[status] += 1
    finally:
        writer.close()


async def _load(port: int, req: bytes, connections: int, warmup_s: float, duration_s: float):
    out: dict[str, Any] = {"lat": [], "codes": Counter()}
    t_start = time.perf_counter() + warmup_s
    t_end = t_start + duration_s
    await asyncio.gather(
        *(_connection(port, req, t_start, t_end, out) for _ in range(connections))
    )
    return out


def load_main(argv: list[str]) -> None:
    port, connections, warmup_s, duration_s = (
        int(argv[0]), int(argv[1]), float(argv[2]), float(argv[3])
    )
    req = sys.stdin.buffer.read()
    out = asyncio.run(_load(port, req, connections, warmup_s, duration_s))
    lat = sorted(out["lat"])
    n = len(lat)
    print(
        json.dumps(
            {
                "requests": n,
                "rps": n / duration_s,
                "p50_ms": lat[n // 2] * 1e3 if n else None,
                "p99_ms": lat[min(n - 1, int(n * 0.99))] * 1e3 if n else None,
                "codes": {str(k): v for k, v in out["codes"].items()},
            }
        )
    )


def run_load(port: int, req: bytes, connections: int, duration_s: float, warmup_s: float = 0.3):
    r = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "_load", str(port), str(connections),
         str(warmup_s), str(duration_s)],
        input=req, capture_output=True, timeout=duration_s + 60,
    )
    if r.returncode != 0:
        raise RuntimeError(f"load generator failed: {r.stderr.decode()[-2000:]}")
    return json.loads(r.stdout)


# --------------------------------------------------------------------------- the bare app
def bare_main(argv: list[str]) -> None:
    """A bare starlette+uvicorn app doing the same numpy forward and JSON as ckptsync."""
    port_file, prefix = argv
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from ckptsync import checkpoint as ckpt

    p = ckpt.read_checkpoint(prefix)
    w0, b0, w1, b1, w2, b2 = (p[k] for k in
                              ("dense0/w", "dense0/b", "dense1/w", "dense1/b", "dense2/w",
                               "dense2/b"))

    async def predict(request: Request) -> Response:
        payload = json.loads(await request.body())
        x = np.asarray(payload["instances"], np.float32)
        h = np.maximum(x @ w0 + b0, 0)
        h = np.maximum(h @ w1 + b1, 0)
        logits = h @ w2 + b2
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs = e / e.sum(axis=1, keepdims=True)
        classes = logits.argmax(axis=1)
        preds = [{"classes": c, "probabilities": q}
                 for c, q in zip(classes.tolist(), probs.tolist())]
        body = json.dumps({"predictions": preds, "model_version": 1}).encode()
        return Response(body, media_type="application/json")

    app = Starlette(routes=[Route("/v1/models/digits:predict", predict, methods=["POST"])])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # NODELAY
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(sock.getsockname()[1]))
    os.replace(port_file + ".tmp", port_file)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


# --------------------------------------------------------------------------- processes
def start(cmd: list[str], port_file: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{cmd[:4]} did not start: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.02)
    return proc, int(open(port_file).read())


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    if proc.stderr is not None:
        proc.stderr.close()


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the server's checkpoint reader process)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def tree_pss_kib(pid: int) -> int:
    """Anonymous and shared-memory proportional set size (``Pss_Anon + Pss_Shmem``)
    summed over the server and its children: heaps and snapshots, where a snapshot's
    pages (written by the reader process, mapped by the server) count once. Library
    pages are left out: their PSS changes whenever another process maps or unmaps the
    same library."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith(("Pss_Anon:", "Pss_Shmem:")):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


class PeakSampler(threading.Thread):
    """Samples :func:`tree_pss_kib` every ``interval_s`` until stopped; keeps the max."""

    def __init__(self, pid: int, interval_s: float = 0.002):
        super().__init__(daemon=True)
        self.pid, self.interval_s, self.peak = pid, interval_s, 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.interval_s):
            self.peak = max(self.peak, tree_pss_kib(self.pid))


def wait_version(probe: Probe, version: int, timeout_s: float = 30.0) -> float:
    deadline = time.monotonic() + timeout_s
    while True:
        status, v = probe.predict()
        if status == 200 and v is not None and v >= version:
            return time.perf_counter()
        if time.monotonic() > deadline:
            raise RuntimeError(f"version {version} not served within {timeout_s} s (last {v})")


def freshness(pub: Publisher, probe: Probe, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        prefix = pub.write()
        t0 = time.perf_counter()
        pub.name(prefix)
        samples.append(wait_version(probe, pub.step) - t0)
        pub.evict()
        time.sleep(0.005)
    return samples


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * q))]


# --------------------------------------------------------------------------- batches
def cpu_ticks(pid: int) -> int:
    """User + system CPU of process ``pid`` (all its threads), clock ticks. On a shared
    machine CPU per request is steadier than requests per second."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def batch_main(args: argparse.Namespace) -> None:
    """Throughput by batch size and connections: ckptsync / bare, alternating rounds."""
    batches = [int(b) for b in args.batch.split(",")]
    conns = [int(c) for c in args.connections_list.split(",")]
    work = tempfile.mkdtemp(prefix="bench-serving-")
    procs: list[subprocess.Popen] = []
    rows = []
    try:
        ckpts = os.path.join(work, "ckpts")
        os.makedirs(ckpts)
        pub = Publisher(ckpts)
        first = pub.write()
        pub.name(first)
        ck, ck_port = start(
            [sys.executable, "-m", "ckptsync.cli.infer", "serve", "--grpc-port", "0", "--model", MODEL_FILE,
             "--checkpoint-dir", ckpts, "--port", "0", "--log-level", "warning",
             "--model-name", "digits", "--port-file", os.path.join(work, "ck.port")],
            os.path.join(work, "ck.port"))
        procs.append(ck)
        bare, bare_port = start([sys.executable, os.path.abspath(__file__), "_bare",
                                 os.path.join(work, "bare.port"), first],
                                os.path.join(work, "bare.port"))
        procs.append(bare)
        bare_ticks = cpu_ticks(bare.pid)
        for batch in batches:
            x = np.random.default_rng(0).random((batch, 64)).round(4).tolist()
            req = request_bytes("/v1/models/digits:predict",
                                json.dumps({"instances": x}).encode())
            probe = Probe(ck_port, req)
            wait_version(probe, 1)
            probe.close()
            for c in conns:
                ck_rps, bare_rps, ck_p50, bare_p50, errs = [], [], [], [], 0
                cpu_ratios = []
                for _ in range(args.repeats):
                    t0 = cpu_ticks(ck.pid)
                    r = run_load(ck_port, req, c, args.duration_s)
                    t1 = cpu_ticks(ck.pid)
                    b = run_load(bare_port, req, c, args.duration_s)
                    t2 = cpu_ticks(bare.pid)
                    t1b = t2 - bare_ticks
                    bare_ticks = t2
                    ck_cpu = (t1 - t0) / max(1, r["requests"])
                    bare_cpu = t1b / max(1, b["requests"])
                    cpu_ratios.append(bare_cpu / ck_cpu if ck_cpu else float("nan"))
                    ck_rps.append(r["rps"])
                    bare_rps.append(b["rps"])
                    ck_p50.append(r["p50_ms"] or float("nan"))  # None: nothing finished
                    bare_p50.append(b["p50_ms"] or float("nan"))
                    errs += sum(n for code, n in r["codes"].items() if code != "200")
                ratios = [a / b if b else float("nan") for a, b in zip(ck_rps, bare_rps)]
                rows.append((batch, c, statistics.median(ck_rps), statistics.median(bare_rps),
                             statistics.median(ck_p50), statistics.median(bare_p50),
                             summary(ratios), errs, statistics.median(cpu_ratios)))
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(work, ignore_errors=True)
    print(f"digits MLP, predict throughput by batch, loopback, {args.repeats} x "
          f"{args.duration_s:g} s alternating; {os.cpu_count()} CPUs")
    print("| batch | conns | infer serve req/s | bare req/s | p50 ms (ck / bare) "
          "| ratio median (min-max) | CPU per request, bare / ck | errors |")
    for batch, c, ck, ba, p50, bp50, (med, lo, hi), errs, cpu in rows:
        print(f"| {batch:5d} | {c:5d} | {ck:17.0f} | {ba:10.0f} | {p50:7.2f} / {bp50:7.2f} "
              f"| {med:.2f}x ({lo:.2f}-{hi:.2f}) | {cpu:.2f}x | {errs} |")
    worst = min(r[6][0] for r in rows)
    print(f"headline: worst infer serve / bare starlette throughput over batches "
          f"{args.batch} = {worst:.2f}x (target >= 0.9x)")


CNN_MODEL_FILE = os.path.join(ROOT, "examples", "digits_cnn.py")


def batching_main(args: argparse.Namespace) -> None:
    """The digits CNN served with and without --enable-batching (max_batch_size 64),
    ``--connections`` batch-1 clients over REST and over gRPC, alternating rounds."""
    from ckptsync import checkpoint as ckpt
    from ckptsync.serving.servable import GraphServable

    servable = GraphServable.from_model_file(CNN_MODEL_FILE)
    rng = np.random.default_rng(0)
    params = {k: (rng.standard_normal([d or 1 for d in v.shape]) * 0.1).astype(v.dtype)
              for k, v in servable.variable_specs.items()}
    x1 = rng.random((1, 64)).astype(np.float32)
    full = np.repeat(x1, 64, axis=0)
    servable.run(params, {"x": full})
    forward_s = min(timeit_once(lambda: servable.run(params, {"x": full})) for _ in range(50))
    work = tempfile.mkdtemp(prefix="bench-batching-")
    procs: list[subprocess.Popen] = []
    rows = []
    try:
        ckpts = os.path.join(work, "ckpts")
        os.makedirs(ckpts)
        prefix = os.path.join(ckpts, "model.ckpt-1")
        ckpt.write_checkpoint(prefix, params, global_step=1)
        ckpt.update_checkpoint_state(ckpts, prefix, [prefix])
        params_file = os.path.join(work, "batching.txt")
        with open(params_file, "w") as f:
            f.write(f"max_batch_size {{ value: 64 }}\nbatch_timeout_micros {{ value: "
                    f"{args.batch_timeout_micros} }}\nmax_enqueued_batches {{ value: 100 }}\n"
                    "num_batch_threads { value: 1 }\n")
        servers = {}
        for label, extra in (("off", []), ("on", ["--enable-batching",
                                                  "--batching-parameters-file", params_file])):
            grpc_port = _grpc_load.free_port()
            proc, port = start(
                [sys.executable, "-m", "ckptsync.cli.infer", "serve", "--model", CNN_MODEL_FILE,
                 "--checkpoint-dir", ckpts, "--port", "0", "--grpc-port", str(grpc_port),
                 "--log-level", "warning", "--model-name", "digits", *extra,
                 "--port-file", os.path.join(work, f"{label}.port")],
                os.path.join(work, f"{label}.port"))
            procs.append(proc)
            servers[label] = (port, grpc_port)
        rest_req = request_bytes("/v1/models/digits:predict",
                                 json.dumps({"instances": x1.round(4).tolist()}).encode())
        grpc_req = _grpc_load.predict_request_bytes(x1)
        for label in servers:
            probe = Probe(servers[label][0], rest_req)
            wait_version(probe, 1)
            probe.close()
        c = args.connections
        before = batch_latency_buckets(servers["on"][0])
        for proto in ("REST", "gRPC"):
            res: dict[str, list[dict]] = {"off": [], "on": []}
            for _ in range(args.repeats):
                for label, (port, grpc_port) in servers.items():
                    res[label].append(run_load(port, rest_req, c, args.duration_s)
                                      if proto == "REST" else
                                      run_grpc_load(grpc_port, grpc_req, c, args.duration_s))
            ratios = [a["rps"] / b["rps"] for a, b in zip(res["on"], res["off"])]
            rows.append((proto, statistics.median(r["rps"] for r in res["off"]),
                         statistics.median(r["rps"] for r in res["on"]), summary(ratios),
                         statistics.median(r["p99_ms"] for r in res["on"]),
                         statistics.median(r["p99_ms"] for r in res["off"]),
                         sum(n for rr in res["on"] + res["off"]
                             for code, n in rr["codes"].items() if code not in ("200", "OK")),
                         bucket_p99_ms(before, after := batch_latency_buckets(servers["on"][0]))))
            before = after
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(work, ignore_errors=True)
    bound_ms = args.batch_timeout_micros / 1e3 + 2 * forward_s * 1e3
    print(f"digits CNN, {args.connections} batch-1 clients, --enable-batching (max_batch_size "
          f"64, batch_timeout_micros {args.batch_timeout_micros}, 1 batch thread) against "
          f"off, {args.repeats} x {args.duration_s:g} s alternating; {os.cpu_count()} CPUs; "
          f"one forward of 64 rows {forward_s * 1e3:.2f} ms")
    print("| protocol | off req/s | on req/s | on / off | client p99 ms on (off) "
          "| p99 in the scheduler ms (histogram bucket) | bound ms | errors |")
    for proto, off, on, (med, lo, hi), p99, p99_off, errs, sched in rows:
        print(f"| {proto} | {off:.0f} | {on:.0f} | {med:.2f}x ({lo:.2f}-{hi:.2f}) "
              f"| {p99:.2f} ({p99_off:.2f}) | <= {sched:g} | {bound_ms:.2f} | {errs} |")
    worst = min(r[3][0] for r in rows)
    print(f"headline: batching on / off throughput = {worst:.2f}x (target >= 3x); p99 in "
          f"the scheduler <= {max(r[7] for r in rows):g} ms against batch_timeout + 2 "
          f"forwards {bound_ms:.2f} ms")


def batch_latency_buckets(port: int) -> dict[float, float]:
    """``ckptsync_batch_latency_seconds``'s cumulative buckets from /metrics."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    out = {}
    for line in data.decode().splitlines():
        if line.startswith("ckptsync_batch_latency_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            out[float(le)] = float(line.rsplit(" ", 1)[1])
    return out


def bucket_p99_ms(before: dict[float, float], after: dict[float, float]) -> float:
    """The upper bound, in ms, of the bucket holding the 99th percentile of what was
    observed between two readings."""
    counts = {le: after[le] - before.get(le, 0.0) for le in sorted(after)}
    total = counts[max(counts)]
    for le, n in counts.items():
        if total and n >= 0.99 * total:
            return le * 1e3
    return float("inf")


def timeit_once(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def v2_main(args: argparse.Namespace) -> None:
    """/v2/models/digits/infer (JSON tensors; binary tensors) / :predict, same server."""
    batches = [int(b) for b in (args.batch or "1").split(",")]
    conns = [int(c) for c in args.connections_list.split(",")]
    work = tempfile.mkdtemp(prefix="bench-v2-")
    rows = []
    ck = None
    try:
        ckpts = os.path.join(work, "ckpts")
        os.makedirs(ckpts)
        pub = Publisher(ckpts)
        pub.name(pub.write())
        ck, port = start(
            [sys.executable, "-m", "ckptsync.cli.infer", "serve", "--grpc-port", "0",
             "--model", MODEL_FILE, "--checkpoint-dir", ckpts, "--port", "0",
             "--log-level", "warning", "--model-name", "digits",
             "--port-file", os.path.join(work, "ck.port")], os.path.join(work, "ck.port"))
        for batch in batches:
            x = np.random.default_rng(0).random((batch, 64)).round(4)
            tfs = request_bytes("/v1/models/digits:predict",
                                json.dumps({"instances": x.tolist()}).encode())
            v2_json = request_bytes("/v2/models/digits/infer", json.dumps({"inputs": [
                {"name": "x", "shape": [batch, 64], "datatype": "FP32",
                 "data": x.reshape(-1).tolist()}]}).encode())
            head = json.dumps({"inputs": [{"name": "x", "shape": [batch, 64], "datatype": "FP32",
                                           "parameters": {"binary_data_size": batch * 256}}],
                               "parameters": {"binary_data_output": True}}).encode()
            body = head + x.astype("<f4").tobytes()
            v2_bin = (f"POST /v2/models/digits/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      f"Content-Type: application/octet-stream\r\n"
                      f"Inference-Header-Content-Length: {len(head)}\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n").encode() + body
            probe = Probe(port, tfs)
            wait_version(probe, 1)
            probe.close()
            for c in conns:
                rps: dict[str, list[float]] = {"tfs": [], "json": [], "bin": []}
                errs = 0
                for _ in range(args.repeats):
                    for key, req in (("tfs", tfs), ("json", v2_json), ("bin", v2_bin)):
                        r = run_load(port, req, c, args.duration_s)
                        rps[key].append(r["rps"])
                        errs += sum(n for code, n in r["codes"].items() if code != "200")
                rows.append((batch, c, {k: statistics.median(v) for k, v in rps.items()},
                             summary([a / b for a, b in zip(rps["json"], rps["tfs"])]),
                             summary([a / b for a, b in zip(rps["bin"], rps["tfs"])]), errs))
    finally:
        if ck is not None:
            stop(ck)
        shutil.rmtree(work, ignore_errors=True)
    print(f"digits MLP, Open Inference Protocol infer vs TF Serving predict, one server, "
          f"loopback, {args.repeats} x {args.duration_s:g} s alternating; {os.cpu_count()} CPUs")
    print("| batch | conns | :predict req/s | v2 JSON req/s | v2 binary req/s "
          "| v2 JSON / :predict | v2 binary / :predict | errors |")
    for batch, c, med, (jm, jlo, jhi), (bm, blo, bhi), errs in rows:
        print(f"| {batch} | {c} | {med['tfs']:.0f} | {med['json']:.0f} | {med['bin']:.0f} "
              f"| {jm:.2f}x ({jlo:.2f}-{jhi:.2f}) | {bm:.2f}x ({blo:.2f}-{bhi:.2f}) | {errs} |")
    worst = min(min(r[3][0], r[4][0]) for r in rows)
    print(f"headline: worst v2 infer / TF Serving predict throughput = {worst:.2f}x "
          "(target >= 0.9x)")


def run_grpc_load(port: int, req: bytes, concurrency: int, duration_s: float,
                  warmup_s: float = 0.3) -> dict:
    r = subprocess.run(
        [sys.executable, os.path.join(HERE, "_grpc_load.py"), "load", str(port),
         str(concurrency), str(warmup_s), str(duration_s)],
        input=req, capture_output=True, timeout=duration_s + 60)
    if r.returncode != 0:
        raise RuntimeError(f"gRPC load generator failed: {r.stderr.decode()[-2000:]}")
    return json.loads(r.stdout)


def grpc_main(args: argparse.Namespace) -> None:
    """gRPC Predict throughput: infer serve / a bare grpcio server, alternating rounds."""
    batches = [int(b) for b in (args.batch or "1").split(",")]
    conns = [int(c) for c in args.connections_list.split(",")]
    work = tempfile.mkdtemp(prefix="bench-grpc-")
    procs: list[subprocess.Popen] = []
    rows = []
    try:
        ckpts = os.path.join(work, "ckpts")
        os.makedirs(ckpts)
        pub = Publisher(ckpts)
        first = pub.write()
        pub.name(first)
        grpc_port = _grpc_load.free_port()
        ck, ck_port = start(
            [sys.executable, "-m", "ckptsync.cli.infer", "serve", "--model", MODEL_FILE,
             "--checkpoint-dir", ckpts, "--port", "0", "--grpc-port", str(grpc_port),
             "--log-level", "warning", "--model-name", "digits",
             "--port-file", os.path.join(work, "ck.port")], os.path.join(work, "ck.port"))
        procs.append(ck)
        probe = Probe(ck_port, request_bytes("/v1/models/digits:predict", json.dumps(
            {"instances": [[0.0] * 64]}).encode()))
        wait_version(probe, 1)
        probe.close()
        bare, bare_port = start([sys.executable, os.path.join(HERE, "_grpc_load.py"), "bare",
                                 os.path.join(work, "bare.port"), first],
                                os.path.join(work, "bare.port"))
        procs.append(bare)
        for batch in batches:
            x = np.random.default_rng(0).random((batch, 64)).astype(np.float32)
            req = _grpc_load.predict_request_bytes(x)
            for c in conns:
                ck_rps, bare_rps, ck_p50, bare_p50, errs = [], [], [], [], 0
                for _ in range(args.repeats):
                    r = run_grpc_load(grpc_port, req, c, args.duration_s)
                    b = run_grpc_load(bare_port, req, c, args.duration_s)
                    ck_rps.append(r["rps"])
                    bare_rps.append(b["rps"])
                    ck_p50.append(r["p50_ms"] or float("nan"))
                    bare_p50.append(b["p50_ms"] or float("nan"))
                    errs += sum(n for code, n in r["codes"].items() if code != "OK")
                ratios = [a / b if b else float("nan") for a, b in zip(ck_rps, bare_rps)]
                rows.append((batch, c, statistics.median(ck_rps), statistics.median(bare_rps),
                             statistics.median(ck_p50), statistics.median(bare_p50),
                             summary(ratios), errs))
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(work, ignore_errors=True)
    print(f"digits MLP, gRPC Predict throughput, loopback, {args.repeats} x "
          f"{args.duration_s:g} s alternating; {os.cpu_count()} CPUs")
    print("| batch | calls in flight | infer serve calls/s | bare grpcio calls/s "
          "| p50 ms (ck / bare) | ratio median (min-max) | errors |")
    for batch, c, ck_r, ba, p50, bp50, (med, lo, hi), errs in rows:
        print(f"| {batch:5d} | {c:5d} | {ck_r:10.0f} | {ba:10.0f} | {p50:7.2f} / {bp50:7.2f} "
              f"| {med:.2f}x ({lo:.2f}-{hi:.2f}) | {errs} |")
    worst = min(r[6][0] for r in rows)
    print(f"headline: worst infer serve / bare grpcio gRPC throughput = {worst:.2f}x "
          "(target >= 0.9x)")


# --------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration-s", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--publishes", type=int, default=200)
    ap.add_argument("--swaps", type=int, default=1000)
    ap.add_argument("--batch", default=None, metavar="N[,N...]",
                    help="throughput only: rows per request (e.g. 1,64,256), each at every "
                    "--connections-list count, ckptsync and bare alternating")
    ap.add_argument("--connections-list", default="1,16,64", metavar="N[,N...]",
                    help="with --batch: the connection counts")
    ap.add_argument("--grpc", action="store_true",
                    help="gRPC Predict throughput against a bare grpcio server (with --batch, "
                    "default 1, and --connections-list: calls in flight)")
    ap.add_argument("--v2", action="store_true",
                    help="the Open Inference Protocol's infer route against TF Serving's "
                    ":predict on the same server (with --batch, default 1)")
    ap.add_argument("--batching", action="store_true",
                    help="the digits CNN with --enable-batching against batching off")
    ap.add_argument("--batch-timeout-micros", type=int, default=2000)
    args = ap.parse_args()
    if args.batching:
        batching_main(args)
        return
    if args.v2:
        v2_main(args)
        return
    if args.grpc:
        grpc_main(args)
        return
    if args.batch is not None:
        batch_main(args)
        return

    work = tempfile.mkdtemp(prefix="bench-serving-")
    procs: list[subprocess.Popen] = []
    try:
        ckpts = os.path.join(work, "ckpts")
        os.makedirs(ckpts)
        pub = Publisher(ckpts)
        first = pub.write()
        pub.name(first)
        env_cmd = [sys.executable, "-m", "ckptsync.cli.infer", "serve", "--grpc-port", "0", "--model", MODEL_FILE,
                   "--checkpoint-dir", ckpts, "--port", "0", "--log-level", "warning",
                   "--model-name", "digits"]
        ck, ck_port = start(env_cmd + ["--port-file", os.path.join(work, "ck.port")],
                            os.path.join(work, "ck.port"))
        procs.append(ck)
        bare, bare_port = start([sys.executable, os.path.abspath(__file__), "_bare",
                                 os.path.join(work, "bare.port"), first],
                                os.path.join(work, "bare.port"))
        procs.append(bare)

        x = np.random.default_rng(0).random((1, 64)).round(4).tolist()
        body = json.dumps({"instances": x}).encode()
        req = request_bytes("/v1/models/digits:predict", body)
        probe = Probe(ck_port, req)
        wait_version(probe, 1)
        bare_probe = Probe(bare_port, req)
        assert bare_probe.predict()[0] == 200
        bare_probe.close()

        # Freshness, idle server.
        fresh = freshness(pub, probe, args.publishes)

        # Throughput: ckptsync, bare, ckptsync + a checkpoint every 100 ms; alternating.
        runs: dict[str, list[dict]] = {"ckptsync": [], "bare": [], "reload": []}
        published: list[int] = []
        for _ in range(args.repeats):
            runs["ckptsync"].append(run_load(ck_port, req, args.connections, args.duration_s))
            runs["bare"].append(run_load(bare_port, req, args.connections, args.duration_s))
            stop_pub = threading.Event()

            def publisher(stop_pub: threading.Event = stop_pub) -> None:
                while not stop_pub.wait(0.1):
                    published.append(pub.publish())

            t = threading.Thread(target=publisher)
            t.start()
            try:
                runs["reload"].append(run_load(ck_port, req, args.connections, args.duration_s))
            finally:
                stop_pub.set()
                t.join(30)

        probe.close()
        stop(ck)

        # Memory across swaps, on the 784-256-256-10 MNIST MLP (1 MiB of parameters, so
        # that "2x params" is well above the interpreter's own noise), under a light
        # load (4 connections) so that requests hold old snapshots while new ones land.
        mem_dir = os.path.join(work, "mem")
        os.makedirs(mem_dir)
        mpub = Publisher(mem_dir, MNIST_SIZES)
        mpub.name(mpub.write())
        mem, mem_port = start(
            [*env_cmd[:5], MNIST_MODEL_FILE, "--checkpoint-dir", mem_dir, *env_cmd[8:],
             "--port-file", os.path.join(work, "mem.port")], os.path.join(work, "mem.port"))
        procs.append(mem)
        mx = np.random.default_rng(0).random((1, MNIST_SIZES[0])).round(4).tolist()
        mreq = request_bytes("/v1/models/digits:predict", json.dumps({"instances": mx}).encode())
        mprobe = Probe(mem_port, mreq)
        wait_version(mprobe, 1)
        for _ in range(50):
            mprobe.predict()
        base = tree_pss_kib(mem.pid)
        sampler = PeakSampler(mem.pid)
        sampler.start()
        load = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "_load", str(mem_port), "4", "0",
             "600"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
        )
        procs.append(load)
        assert load.stdin is not None
        load.stdin.write(mreq)
        load.stdin.close()
        loaded_fresh = []
        for _ in range(args.swaps):
            prefix = mpub.write()
            t0 = time.perf_counter()
            mpub.name(prefix)
            loaded_fresh.append(wait_version(mprobe, mpub.step) - t0)
            mpub.evict()
        stop(load)
        for _ in range(50):
            mprobe.predict()
        sampler.halt.set()
        sampler.join(10)
        end = tree_pss_kib(mem.pid)
        peak = max(sampler.peak, base, end)
        mprobe.close()
        params_kib = sum(a.nbytes for a in make_params(0, MNIST_SIZES).values()) / 1024
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(work, ignore_errors=True)

    def col(name: str, key: str) -> list[float]:
        return [r[key] for r in runs[name]]

    errors = {name: sum(v for k, v in Counter().items()) for name in runs}
    for name, rs in runs.items():
        errors[name] = sum(n for r in rs for code, n in r["codes"].items() if code != "200")
    ck_rps, bare_rps, rl_rps = (statistics.median(col(n, "rps")) for n in runs)
    ck_p99, rl_p99 = statistics.median(col("ckptsync", "p99_ms")), statistics.median(
        col("reload", "p99_ms"))
    ratio = ck_rps / bare_rps

    def rps_row(name: str, label: str) -> str:
        med, lo, hi = summary(col(name, "rps"))
        p50 = statistics.median(col(name, "p50_ms"))
        p99 = statistics.median(col(name, "p99_ms"))
        return (f"| {label:<40} | {med:8.0f} req/s (min {lo:.0f}, max {hi:.0f}) | p50 {p50:.2f} ms,"
                f" p99 {p99:.2f} ms | errors {errors[name]} |")

    print(f"digits MLP, batch 1, {args.connections} connections, loopback, "
          f"{args.repeats} x {args.duration_s:g} s alternating; {os.cpu_count()} CPUs")
    print(f"| freshness, idle, {len(fresh)} publishes            | p50 "
          f"{percentile(fresh, 0.5) * 1e3:.2f} ms, p99 {percentile(fresh, 0.99) * 1e3:.2f} ms, "
          f"max {max(fresh) * 1e3:.2f} ms | target p50 <= 5 ms, p99 <= 25 ms |")
    print(f"| freshness, MNIST MLP under load, {len(loaded_fresh)} publishes | p50 "
          f"{percentile(loaded_fresh, 0.5) * 1e3:.2f} ms, p99 "
          f"{percentile(loaded_fresh, 0.99) * 1e3:.2f} ms | (information) |")
    print(rps_row("bare", "bare starlette+uvicorn (the limit)"))
    print(rps_row("ckptsync", "infer serve"))
    print(rps_row("reload", "infer serve, a checkpoint every 100 ms"))
    print(f"| reload / no reload                        | throughput {rl_rps / ck_rps:.2f}x, "
          f"p99 {rl_p99 / ck_p99:.2f}x, {len(published)} reloads, errors {errors['reload']} "
          f"| target >= 0.85x, <= 1.5x, 0 |")
    print(f"| memory (anon+shmem PSS) over {args.swaps} swaps (params {params_kib:.0f} KiB) | base {base} KiB, "
          f"peak {peak} KiB (base + {peak - base} KiB = {(peak - base) / params_kib:.2f}x params),"
          f" end {end} KiB ({(end / base - 1) * 100:+.2f} %) | target peak <= base + 2x params, "
          f"growth <= 5 % |")
    print(f"headline: infer serve / bare starlette throughput = {ratio:.2f}x (target >= 0.9x)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_load":
        load_main(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "_bare":
        bare_main(sys.argv[2:])
    else:
        main()
