"""bench_serving.py's tools: checkpoints published as a Saver does, a raw-socket probe and
load generator (its own process: ``python _serving_tools.py _load``), the bare
starlette+uvicorn app (``_bare``), server processes and their memory."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS_SCRIPT = os.path.abspath(__file__)  # run with _load or _bare
ROOT = os.path.dirname(HERE)
MODEL_FILE = os.path.join(ROOT, "examples", "digits_mlp.py")
SIZES = (64, 128, 128, 10)
MNIST_MODEL_FILE = os.path.join(ROOT, "examples", "mnist_mlp.py")
MNIST_SIZES = (784, 256, 256, 10)
KEEP = 5


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
        [sys.executable, TOOLS_SCRIPT, "_load", str(port), str(connections),
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

    def finish(self) -> int:
        """Stops sampling; the peak, one last sample included."""
        self.halt.set()
        self.join(10)
        return max(self.peak, tree_pss_kib(self.pid))


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


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_load":
        load_main(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "_bare":
        bare_main(sys.argv[2:])
