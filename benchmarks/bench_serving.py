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
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # as a script or a module

from _common import summary  # noqa: E402
from _serving_modes import batch_main, batching_main, grpc_main, v2_main  # noqa: E402
from _serving_tools import (  # noqa: E402
    MNIST_MODEL_FILE,
    MNIST_SIZES,
    MODEL_FILE,
    TOOLS_SCRIPT,
    PeakSampler,
    Probe,
    Publisher,
    freshness,
    make_params,
    percentile,
    request_bytes,
    run_load,
    start,
    stop,
    tree_pss_kib,
    wait_version,
)


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
        bare, bare_port = start([sys.executable, TOOLS_SCRIPT, "_bare",
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
            [sys.executable, TOOLS_SCRIPT, "_load", str(mem_port), "4", "0",
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
    main()
