"""MPI data parallelism: gradient allreduce and 2-rank training throughput.

1. A 10 MB gradient set (the digits MLP's six gradient tensors, repeated until 10 MB:
   ~600 float32 tensors) averaged through ``DistributedOptimizer``'s path (one fused
   ``MpiAllreduce`` graph op run by ``Session.run``) against one raw mpi4py
   ``Allreduce`` of one 10 MB buffer (the limit), alternating, same ranks.
2. Training throughput (rows/s) of the digits MLP, batch 64 per rank, Adam: 2 ranks
   (``trainer``'s data-parallel graph: averaged gradients) against 1 rank (rank 1 idle).

Launches itself under the venv's ``mpiexec -n 2`` when not already under MPI. The last
line is the headline ratio: raw ``Allreduce`` time / ckptsync path time (target >= 0.9).

    python benchmarks/bench_mpi.py [--mbytes 10] [--repeats 7] [--steps 200]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

import ckptsync as cs
from ckptsync import distributed as dist
from ckptsync.data import load_digits

try:
    from benchmarks._common import alternate, fmt_row, summary, timed
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from _common import alternate, fmt_row, summary, timed  # type: ignore[no-redef]

MLP_SHAPES = [(64, 128), (128,), (128, 128), (128,), (128, 10), (10,)]
BATCH = 64
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "digits_mlp.py"


def relaunch(argv: list[str]) -> int:
    mpiexec = Path(sys.executable).parent / "mpiexec"
    exe = str(mpiexec) if mpiexec.exists() else shutil.which("mpiexec")
    if exe is None:
        print("bench_mpi: no mpiexec; install the MPI extra: pip install -e '.[mpi]'",
              file=sys.stderr)
        return 2
    return subprocess.run([exe, "-n", "2", sys.executable, __file__, *argv]).returncode


def idle_barrier() -> None:
    """A barrier that sleeps instead of spinning (an idle rank leaves its core free)."""
    comm = dist._runtime._comm()
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.0005)


def gradient_set(mbytes: float) -> tuple[cs.Graph, list, object]:
    """Variables shaped like the MLP's gradients, repeated to ``mbytes``; the fused
    allreduce of their values as ``DistributedOptimizer.compute_gradients`` builds it."""
    per_copy = sum(int(np.prod(s)) for s in MLP_SHAPES) * 4
    copies = max(1, round(mbytes * 1e6 / per_copy))
    g = cs.Graph()
    with g.as_default():
        variables = [cs.get_variable(f"g{i}_{j}", list(s), initializer=cs.ones_initializer())
                     for i in range(copies) for j, s in enumerate(MLP_SHAPES)]
        grads = [(v.value() if hasattr(v, "value") else v._variable, v) for v in variables]
        reduced = [r for r, _ in dist.allreduce_gradients(grads)]
    return g, reduced, variables


def build_trainer_graph(data_parallel: bool) -> tuple[cs.Graph, object, object, object, object]:
    from ckptsync.distributed._trainer import averaging_gradients
    from ckptsync.model_spec import load_build_net

    build_net = load_build_net(str(EXAMPLE))
    g = cs.Graph()
    with g.as_default():
        cs.set_random_seed(0)
        if data_parallel:
            with averaging_gradients(g):
                spec = build_net(g, "cpu:0", cs.ModeKeys.TRAIN)
            bcast = dist.broadcast_global_variables(0)
        else:
            spec = build_net(g, "cpu:0", cs.ModeKeys.TRAIN)
            bcast = None
        init = cs.global_variables_initializer()
    (x,), (y,) = spec.inputs.values(), spec.labels.values()
    sess = cs.Session(graph=g)
    sess.run(init)
    if bcast is not None:
        sess.run(bcast)
    return g, sess, spec.train_op, x, y


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mbytes", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--number", type=int, default=10, help="allreduces per sample")
    ap.add_argument("--steps", type=int, default=200, help="training steps per sample")
    args = ap.parse_args()
    if not dist.launched_under_mpi():
        return relaunch(sys.argv[1:])
    rank, size = dist.rank(), dist.size()
    from mpi4py import MPI

    comm = dist._runtime._comm()
    chief = rank == 0

    # ---------------------------------------------------------------- 1. allreduce
    g, reduced, variables = gradient_set(args.mbytes)
    sess = cs.Session(graph=g)
    with g.as_default():
        sess.run(cs.global_variables_initializer())
    nbytes = sum(v.shape.num_elements() * 4 for v in variables)
    raw = np.ones(nbytes // 4, np.float32)

    def ours() -> float:
        dist.barrier()
        return timed(lambda: sess.run(reduced), args.number)

    def limit() -> float:
        dist.barrier()
        return timed(lambda: comm.Allreduce(MPI.IN_PLACE, raw, op=MPI.SUM), args.number)

    ours()
    limit()  # warm up both paths
    ar = alternate({"ckptsync": ours, "raw": limit}, args.repeats)
    out = sess.run(reduced)
    assert all(np.all(o == 1.0) for o in out), "the average of ones must be ones"
    sess.close()

    # ---------------------------------------------------------------- 2. training
    digits = load_digits().train
    rng = np.random.default_rng(rank)
    batches = [rng.choice(len(digits["x"]), BATCH, replace=False) for _ in range(16)]
    feeds = [(digits["x"][i], digits["y"][i]) for i in batches]
    with threadpool_limits(1):
        _, s1, op1, x1, y1 = build_trainer_graph(False)
        _, s2, op2, x2, y2 = build_trainer_graph(True)

        def run_steps(sess: cs.Session, op: object, x: object, y: object) -> float:
            t = time.perf_counter()
            for i in range(args.steps):
                xb, yb = feeds[i % len(feeds)]
                sess.run(op, {x: xb, y: yb})
            return time.perf_counter() - t

        def one_rank() -> float:
            idle_barrier()
            t = run_steps(s1, op1, x1, y1) if chief else 0.0
            idle_barrier()
            t = dist.broadcast_object(t, 0)
            return args.steps * BATCH / t

        def two_ranks() -> float:
            dist.barrier()
            t = run_steps(s2, op2, x2, y2)
            t = max(dist.allgather_object(t))
            return args.steps * BATCH * size / t

        one_rank()
        two_ranks()
        tp = alternate({"1 rank": one_rank, "2 ranks": two_ranks}, args.repeats)
    s1.close()
    s2.close()

    if chief:
        ratio = [r / o for r, o in zip(ar["raw"], ar["ckptsync"])]
        scale = [b / a for a, b in zip(tp["1 rank"], tp["2 ranks"])]
        n_tensors = len(variables)
        print(f"MPI, {size} ranks (mpi4py {__import__('mpi4py').__version__}, "
              f"{MPI.Get_library_version().splitlines()[0].strip()}); medians of "
              f"{args.repeats} (min, max)")
        print(f"allreduce of {nbytes / 1e6:.1f} MB in {n_tensors} float32 tensors, "
              f"x{args.number} per sample:")
        print(fmt_row("  DistributedOptimizer path", ar["ckptsync"], "ms", 1e3))
        print(fmt_row("  raw mpi4py Allreduce, 1 buffer", ar["raw"], "ms", 1e3))
        bw = [nbytes / t / 1e9 for t in ar["ckptsync"]]
        print(fmt_row("  DistributedOptimizer path", bw, "GB/s"))
        print(f"training, digits MLP, batch {BATCH} per rank, Adam, {args.steps} steps/sample:")
        print(fmt_row("  1 rank", tp["1 rank"], "rows/s"))
        print(fmt_row("  2 ranks", tp["2 ranks"], "rows/s"))
        med, lo, hi = summary(scale)
        print(f"  2 ranks / 1 rank throughput: {med:.2f}x (min {lo:.2f}, max {hi:.2f})")
        med, lo, hi = summary(ratio)
        print(f"allreduce: raw Allreduce time / DistributedOptimizer path time: {med:.2f}x "
              f"(min {lo:.2f}, max {hi:.2f}; target >= 0.9)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
