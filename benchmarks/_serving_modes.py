"""bench_serving.py's side-by-side modes: ``--batch`` (rows per request), ``--batching``,
``--v2`` and ``--grpc``; each prints its table and ends with its headline."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # as a script or a module

import _grpc_load  # noqa: E402
from _common import summary  # noqa: E402
from _serving_tools import (  # noqa: E402
    HERE,
    MODEL_FILE,
    ROOT,
    TOOLS_SCRIPT,
    Probe,
    Publisher,
    cpu_ticks,
    request_bytes,
    run_load,
    start,
    stop,
    wait_version,
)


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
        bare, bare_port = start([sys.executable, TOOLS_SCRIPT, "_bare",
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


