"""MPI data parallelism: gradient allreduce and 2-rank training throughput.

1. The ``DistributedOptimizer`` path for a 10 MB gradient set: what averaging the
   gradients adds to a training step. The graph holds 96 towers of the digits MLP
   (64 -> 128 -> 128 -> 10) on one shared batch: 576 float32 gradient tensors, 10.0 MB,
   produced by the gradient kernels and averaged by ``DistributedOptimizer`` with one
   fused ``MpiAllreduce`` op (both ranks on this host: the kernels write into an MPI
   shared-memory window and every rank sums the ranks' segments; see
   ``ckptsync.distributed._shm``). Its cost is ``sess.run(averaged gradients)`` minus
   ``sess.run(the same gradients, not averaged)`` followed by a barrier (so both wait for
   the slower rank, and only the allreduce path differs; "the same gradients" are the
   op's inputs, computed with the loss's seed already divided by the number of ranks,
   which costs nothing). The limit: one raw mpi4py ``Allreduce`` of one 10 MB buffer
   (``MPI.IN_PLACE``) in a loop, alternating, same ranks.
   For reference, the op's reduction alone in the same kind of loop (its segments
   cache-hot, like the raw buffer), and the same raw ``Allreduce`` added to the
   un-averaged step (its buffer
   and MPI's are then no longer cache-hot, as in any real step) is printed too.
   Until the fusion buffer took the gradient kernels' outputs directly, this row
   measured 576 variable *reads* fed to the fused op, whose values must be copied into
   the buffer; that measurement is still printed ("576 variable reads") for comparison.
2. Training throughput (rows/s) of the digits MLP, batch 64 per rank, Adam: 2 ranks
   (``trainer``'s data-parallel graph: averaged gradients) against 1 rank (rank 1 idle).

Launches itself under the venv's ``mpiexec -n 2`` when not already under MPI. The last
line is the headline ratio: raw ``Allreduce`` time / the time the ckptsync path adds
(target >= 0.9). On a shared 2-core VM the raw ``Allreduce`` of 10 MB drifts between
runs (1.3 to 2.5 ms, idle machine); compare figures from the same run.

    python benchmarks/bench_mpi.py [--mbytes 10] [--repeats 9] [--steps 200]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

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
GRAD_BATCH = 16  # rows per rank for the gradient towers
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
    comm = dist._runtime.world_comm()
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.0005)


def copies_for(mbytes: float) -> int:
    """How many copies of the MLP's six gradient shapes make ``mbytes``."""
    per_copy = sum(int(np.prod(s)) for s in MLP_SHAPES) * 4
    return max(1, round(mbytes * 1e6 / per_copy))


class Towers(NamedTuple):
    graph: cs.Graph
    averaged: list  # DistributedOptimizer's gradients (one fused allreduce op)
    plain: list  # the allreduce op's inputs: the same gradients, not averaged
    local: list  # this rank's own gradients (cs.gradients, for checking)
    variables: list
    x: object
    y: object


def gradient_towers(mbytes: float) -> Towers:
    """``copies_for(mbytes)`` towers of the digits MLP on one input batch; the loss is
    their sum. With one rank ``averaged`` and ``plain`` are the local gradients."""
    g = cs.Graph()
    with g.as_default():
        cs.set_random_seed(0)
        x = cs.placeholder(cs.float32, [None, 64], name="x")
        y = cs.placeholder(cs.int64, [None], name="y")
        losses = []
        for k in range(copies_for(mbytes)):
            h = x
            for i, units in enumerate((128, 128, 10)):
                with cs.variable_scope(f"tower{k}/dense{i}"):
                    w = cs.get_variable("w", [h.get_shape().as_list()[-1], units])
                    b = cs.get_variable("b", [units], initializer=cs.zeros_initializer())
                    h = cs.nn.bias_add(cs.matmul(h, w), b)
                    if i < 2:
                        h = cs.nn.relu(h)
            losses.append(cs.reduce_mean(
                cs.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h)))
        loss = cs.add_n(losses)
        opt = dist.DistributedOptimizer(cs.train.GradientDescentOptimizer(0.1))
        gv = opt.compute_gradients(loss)
        variables = [v for _, v in gv]
        local = cs.gradients(loss, variables)
    averaged = [gr for gr, _ in gv]
    op = averaged[0].op
    plain = list(op.inputs) if op.type == "MpiAllreduce" else averaged
    return Towers(g, averaged, plain, local, variables, x, y)


def gradient_set(mbytes: float) -> tuple[cs.Graph, list, object]:
    """Variables shaped like the MLP's gradients, repeated to ``mbytes``; the fused
    allreduce of their values (the reads must be copied into the fusion buffer)."""
    copies = copies_for(mbytes)
    g = cs.Graph()
    with g.as_default():
        variables = [cs.get_variable(f"g{i}_{j}", list(s), initializer=cs.ones_initializer())
                     for i in range(copies) for j, s in enumerate(MLP_SHAPES)]
        grads = [(v.value() if hasattr(v, "value") else v._variable, v) for v in variables]
        reduced = [r for r, _ in dist.allreduce_gradients(grads)]
    return g, reduced, variables


def build_trainer_graph(data_parallel: bool) -> tuple[cs.Graph, object, object, object, object]:
    from ckptsync.app import DataParallel
    from ckptsync.model_spec import load_build_net

    build_net = load_build_net(str(EXAMPLE))
    g = cs.Graph()
    with g.as_default():
        cs.set_random_seed(0)
        if data_parallel:
            with DataParallel(threading.Event()).building(g):
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
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--number", type=int, default=10, help="allreduces per sample")
    ap.add_argument("--steps", type=int, default=200, help="training steps per sample")
    args = ap.parse_args()
    if not dist.launched_under_mpi():
        return relaunch(sys.argv[1:])
    rank, size = dist.rank(), dist.size()
    from mpi4py import MPI

    comm = dist._runtime.world_comm()
    chief = rank == 0

    # ---------------------------------------------------------------- 1. allreduce
    digits = load_digits().train
    towers = gradient_towers(args.mbytes)
    averaged, plain, variables = towers.averaged, towers.plain, towers.variables
    sess = cs.Session(graph=towers.graph)
    with towers.graph.as_default():
        sess.run(cs.global_variables_initializer())
    rows = slice(rank * GRAD_BATCH, (rank + 1) * GRAD_BATCH)
    gfeed = {towers.x: digits["x"][rows], towers.y: digits["y"][rows]}
    nbytes = sum(v.shape.num_elements() * 4 for v in variables)
    raw = np.ones(nbytes // 4, np.float32)
    g2, reduced, reads = gradient_set(args.mbytes)
    sess2 = cs.Session(graph=g2)
    with g2.as_default():
        sess2.run(cs.global_variables_initializer())

    def plain_step() -> None:
        sess.run(plain, gfeed)
        comm.Barrier()

    def ours() -> float:
        dist.barrier()
        t_avg = timed(lambda: sess.run(averaged, gfeed), args.number)
        dist.barrier()
        return t_avg - timed(plain_step, args.number)

    def limit() -> float:
        dist.barrier()
        return timed(lambda: comm.Allreduce(MPI.IN_PLACE, raw, op=MPI.SUM), args.number)

    def raw_step() -> None:
        sess.run(plain, gfeed)
        comm.Allreduce(MPI.IN_PLACE, raw, op=MPI.SUM)

    def limit_in_step() -> float:
        dist.barrier()
        t_raw = timed(raw_step, args.number)
        dist.barrier()
        return t_raw - timed(plain_step, args.number)

    from ckptsync.distributed import _allreduce_buffers

    sess.run(averaged, gfeed)  # the first run decides the op's shared window
    layouts = _allreduce_buffers._layouts[averaged[0].op]
    exchange = next(iter(layouts.values())).buckets[0].exchange

    def reduction_only() -> float:
        out = np.empty_like(exchange.flat)
        dist.barrier()
        return timed(lambda: exchange.reduce("sum", None if exchange.begin() else out),
                     args.number)

    def from_reads() -> float:
        dist.barrier()
        return timed(lambda: sess2.run(reduced), args.number)

    cases = {"ckptsync": ours, "raw": limit, "raw in a step": limit_in_step,
             "reads": from_reads}
    if exchange is not None:
        cases["reduction only"] = reduction_only
    for f in cases.values():
        f()  # warm up every path
    ar = alternate(cases, args.repeats)
    every = dist.allgather_object(sess.run(towers.local, gfeed))
    want = [np.sum(gs, axis=0) / np.float32(size) for gs in zip(*every)]
    got = sess.run(averaged, gfeed)
    same = np.array_equal if size & (size - 1) == 0 else np.allclose  # exact for 2**k
    assert all(same(a, b) for a, b in zip(got, want)), "not the ranks' average"
    out = sess2.run(reduced)
    assert all(np.all(o == 1.0) for o in out), "the average of ones must be ones"
    sess.close()
    sess2.close()

    # ---------------------------------------------------------------- 2. training
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
        ratio_reads = [r / o for r, o in zip(ar["raw"], ar["reads"])]
        scale = [b / a for a, b in zip(tp["1 rank"], tp["2 ranks"])]
        n_tensors = len(variables)
        print(f"MPI, {size} ranks (mpi4py {__import__('mpi4py').__version__}, "
              f"{MPI.Get_library_version().splitlines()[0].strip()}); medians of "
              f"{args.repeats} (min, max)")
        print(f"allreduce of {nbytes / 1e6:.1f} MB in {n_tensors} float32 gradients, "
              f"x{args.number} per sample:")
        print(fmt_row("  DistributedOptimizer path (added)", ar["ckptsync"], "ms", 1e3))
        print(fmt_row("  raw mpi4py Allreduce, 1 buffer", ar["raw"], "ms", 1e3))
        if "reduction only" in ar:
            print(fmt_row("  its shared-memory reduction alone", ar["reduction only"], "ms",
                          1e3))
        print(fmt_row("  raw Allreduce added to a step", ar["raw in a step"], "ms", 1e3))
        med, lo, hi = summary([r / o for r, o in zip(ar["raw in a step"], ar["ckptsync"])])
        print(f"  raw added to a step / DistributedOptimizer path: {med:.2f}x "
              f"(min {lo:.2f}, max {hi:.2f})")
        bw = [nbytes / t / 1e9 for t in ar["ckptsync"]]
        print(fmt_row("  DistributedOptimizer path", bw, "GB/s"))
        print(fmt_row(f"  {len(reads)} variable reads, fused op", ar["reads"], "ms", 1e3))
        med, lo, hi = summary(ratio_reads)
        print(f"  raw / variable reads path: {med:.2f}x (min {lo:.2f}, max {hi:.2f})")
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
