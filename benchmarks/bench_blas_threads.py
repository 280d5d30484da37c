"""The session's default BLAS thread count against one thread, idle and on a busy machine.

``ConfigProto(intra_op_parallelism_threads=0)`` (TF's "let the system pick", and what a
plain ``Session()`` gets) caps numpy's BLAS pool at one thread, lowering only. This measures a
784->1024->1024->10 MLP training step (batch 256, SGD) and the 64->128->128->10 digits MLP
step (batch 64) with that default and with one thread, first on an idle machine, then with
one busy process per core competing (a trainer and a server sharing a machine). Target:
the default is never more than 1.5x slower than one thread. ``--threads N`` measures a
pool of N threads (what OpenBLAS uses unasked: one per core) against one instead. Each setting runs in its own
process (BLAS pools are per process), alternating, medians of ``--repeats``.

    python benchmarks/bench_blas_threads.py [--repeats 5] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys

STEP = r"""
import json, sys, time
import numpy as np
import ckptsync as cs
sizes, batch, steps, threads = json.loads(sys.argv[1])
g = cs.Graph()
with g.as_default():
    x = cs.placeholder(cs.float32, [None, sizes[0]])
    y = cs.placeholder(cs.int64, [None])
    h = x
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        with cs.variable_scope(f"dense{i}"):
            w = cs.get_variable("w", [a, b])
            bias = cs.get_variable("b", [b], initializer=cs.zeros_initializer())
        h = cs.matmul(h, w) + bias
        if i < len(sizes) - 2:
            h = cs.nn.relu(h)
    loss = cs.reduce_mean(cs.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
    train = cs.train.GradientDescentOptimizer(0.01).minimize(loss)
    init = cs.global_variables_initializer()
config = cs.ConfigProto(intra_op_parallelism_threads=threads)
rng = np.random.default_rng(0)
xs = rng.normal(size=(batch, sizes[0])).astype(np.float32)
ys = rng.integers(0, sizes[-1], batch)
with cs.Session(graph=g, config=config) as sess:
    sess.run(init)
    for _ in range(3):
        sess.run(train, {x: xs, y: ys})
    t = time.perf_counter()
    for _ in range(steps):
        sess.run(train, {x: xs, y: ys})
    print((time.perf_counter() - t) / steps)
"""

MODELS = {"mlp 784-1024-1024-10 b256": ([784, 1024, 1024, 10], 256),
          "digits mlp 64-128-128-10 b64": ([64, 128, 128, 10], 64)}


def _busy(stop: mp.Event) -> None:  # type: ignore[valid-type]
    while not stop.is_set():  # type: ignore[attr-defined]
        sum(i * i for i in range(10_000))


def step_s(sizes: list[int], batch: int, steps: int, threads: int) -> float:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    r = subprocess.run([sys.executable, "-c", STEP, json.dumps([sizes, batch, steps, threads])],
                       capture_output=True, text=True, timeout=600, env=env, check=True)
    return float(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0, help="0: the session's default")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    print(f"{cores} cores; compared: {args.threads or 'the default'} threads vs one")
    worst = 0.0
    for load in ("idle", "busy"):
        stop = mp.Event()
        hogs = [mp.Process(target=_busy, args=(stop,), daemon=True)
                for _ in range(cores if load == "busy" else 0)]
        for p in hogs:
            p.start()
        try:
            for name, (sizes, batch) in MODELS.items():
                samples: dict[int, list[float]] = {args.threads: [], 1: []}
                for _ in range(args.repeats):
                    for threads in samples:
                        samples[threads].append(step_s(sizes, batch, args.steps, threads))
                d, one = statistics.median(samples[args.threads]), statistics.median(samples[1])
                worst = max(worst, d / one)
                print(f"{load:<5} {name:<30} tested {d * 1e3:8.2f} ms  one thread "
                      f"{one * 1e3:8.2f} ms  tested/one {d / one:5.2f}x")
        finally:
            stop.set()
            for p in hogs:
                p.join(timeout=10)
    print(f"worst tested/one-thread ratio: {worst:.2f}x (target for the default: <= 1.5x)")


if __name__ == "__main__":
    main()
