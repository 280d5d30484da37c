"""Run under ``mpiexec -n N python mpi_worker.py OUT_DIR STEPS``: checks the library's
collectives, broadcast and training on every rank; writes ``OUT_DIR/rank<r>.json``."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # for benchmarks/

import ckptsync as cs  # noqa: E402
from ckptsync import distributed as dist  # noqa: E402


def checksum(values: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for k in sorted(values):
        h.update(k.encode())
        h.update(np.ascontiguousarray(values[k]).tobytes())
    return h.hexdigest()


def rank_arrays(r: int) -> list[np.ndarray]:
    """Many tensors of mixed dtypes whose values depend on the rank."""
    rng = np.random.default_rng(r)
    out: list[np.ndarray] = []
    for i in range(40):
        out.append(rng.normal(size=(i % 7 + 1, 5)).astype(np.float32))
        if i % 5 == 0:
            out.append(rng.integers(-50, 50, size=(i + 1,)).astype(np.int64))
            out.append(rng.normal(size=(3,)))  # float64
    return out


def check_collectives(r: int, n: int) -> dict[str, bool]:
    mine = rank_arrays(r)
    every = [rank_arrays(k) for k in range(n)]
    ok = {}
    for op, fn in [(dist.ReduceOp.SUM, lambda xs: np.sum(xs, axis=0)),
                   (dist.ReduceOp.MAX, lambda xs: np.max(xs, axis=0)),
                   (dist.ReduceOp.MIN, lambda xs: np.min(xs, axis=0))]:
        got = dist.allreduce(mine, op, fusion_threshold_bytes=256)  # forces many buffers
        ok[op.name] = all(
            g.dtype == m.dtype and g.shape == m.shape
            and np.allclose(g, fn([e[i] for e in every]), rtol=1e-6)
            for i, (g, m) in enumerate(zip(got, mine)))
    got = dist.allreduce(mine)  # MEAN, default fusion: one buffer per dtype
    ok["MEAN"] = all(
        np.allclose(g, np.mean([e[i] for e in every], axis=0), rtol=1e-6) if m.dtype.kind == "f"
        else np.array_equal(g, np.sum([e[i] for e in every], axis=0) // n)
        for i, (g, m) in enumerate(zip(got, mine)))
    if n & (n - 1) == 0:  # MEAN prescales by 1/n: exact for a power of two
        ok["MEAN_exact"] = all(
            np.array_equal(g, np.sum([e[i] for e in every], axis=0) / m.dtype.type(n))
            for i, (g, m) in enumerate(zip(got, mine)) if m.dtype.kind == "f")
    ok["inputs_untouched"] = all(np.array_equal(a, b) for a, b in zip(mine, rank_arrays(r)))
    flags = [np.array([r % 2 == 0, True, False, r == 1]), np.arange(4) % (r + 2) == 0]
    every_flags = [[np.array([k % 2 == 0, True, False, k == 1]), np.arange(4) % (k + 2) == 0]
                   for k in range(n)]
    ok["bool_MAX_is_or"] = all(np.array_equal(g, np.logical_or.reduce([e[i] for e in every_flags]))
                               for i, g in enumerate(dist.allreduce(flags, dist.ReduceOp.MAX)))
    ok["bool_MIN_is_and"] = all(
        np.array_equal(g, np.logical_and.reduce([e[i] for e in every_flags]))
        for i, g in enumerate(dist.allreduce(flags, dist.ReduceOp.MIN)))
    got = dist.broadcast(mine, 1 % n)
    ok["broadcast"] = all(np.array_equal(g, e) for g, e in zip(got, every[1 % n]))
    ok["broadcast_object"] = dist.broadcast_object({"r": r}, 0) == {"r": 0}
    ok["allgather_object"] = dist.allgather_object(r) == list(range(n))
    return ok


def check_fused_gradients(r: int, n: int) -> dict[str, bool]:
    """The benchmark's DistributedOptimizer path (gradient kernels writing into the
    fusion buffer): the ranks' exact average, the single-process gradient of the whole
    batch, outputs that survive the next run, the same bits on every rank."""
    from benchmarks.bench_mpi import gradient_towers

    towers = gradient_towers(0.4)
    rows = np.random.default_rng(7).normal(size=(8 * n, 64)).astype(np.float32)
    labels = np.arange(8 * n) % 10
    mine = {towers.x: rows[8 * r:8 * (r + 1)], towers.y: labels[8 * r:8 * (r + 1)]}
    ok = {}
    with cs.Session(graph=towers.graph) as sess:
        with towers.graph.as_default():
            sess.run(cs.global_variables_initializer())
        local = sess.run(towers.local, mine)
        every = dist.allgather_object(local)
        got = sess.run(towers.averaged, mine)
        ok["fused"] = all(op.type == "MpiAllreduce" for op in {t.op for t in towers.averaged})
        ok["exact_average"] = all(
            np.array_equal(a, np.sum(gs, axis=0) / np.float32(n)) for a, gs in zip(got, zip(*every)))
        whole = sess.run(towers.local, {towers.x: rows, towers.y: labels})
        ok["single_process"] = all(np.allclose(a, w, rtol=1e-5, atol=1e-7)
                                   for a, w in zip(got, whole))
        kept = [a.copy() for a in got]
        plain, again = sess.run([towers.plain, towers.averaged], {
            towers.x: rows[:8], towers.y: labels[:8]})
        ok["not_clobbered"] = all(np.array_equal(a, k) for a, k in zip(got, kept))
        ok["plain_is_predivided"] = all(
            np.array_equal(p, w / np.float32(n)) for p, w in zip(
                plain, sess.run(towers.local, {towers.x: rows[:8], towers.y: labels[:8]})))
        ok["same_bits_on_every_rank"] = len(set(dist.allgather_object(
            checksum({str(i): a for i, a in enumerate(got + again)})))) == 1
    return ok


def check_exchange(r: int, n: int) -> dict[str, bool]:
    """The fused op's reduction (through the shared window when every rank is on this
    host and CKPTSYNC_SHM_ALLREDUCE is not 0) against ``dist.allreduce`` (always
    ``MPI_Allreduce``), for every ReduceOp and float32/float64/int64 buckets: the same
    bits with 2 ranks; outputs that survive the next run (the result then goes to a
    private buffer, not the shared one)."""
    from ckptsync.distributed import _allreduce_buffers

    want_shared = os.environ.get("CKPTSYNC_SHM_ALLREDUCE", "1") != "0"
    ok = {}
    for op in dist.ReduceOp:
        dtypes = [np.float32, np.float64, np.int64]
        g = cs.Graph()
        with g.as_default():
            # Buckets of 40-200 KB: above _shm.MIN_BUCKET_BYTES.
            feeds = [cs.placeholder(cs.as_dtype(d), [2 + i, 1500], name=f"x{i}")
                     for i, d in enumerate(dtypes * 3)]
            # Doubling op (a kernel the session could hand the window to) then the reduce.
            reduced = dist.allreduce_tensors([x + x for x in feeds], op)
        rng = np.random.default_rng(100 + r)
        held: list[np.ndarray] = []  # the previous run's outputs, still held
        copies: list[np.ndarray] = []
        with cs.Session(graph=g) as sess:
            for step in range(3):
                values = [(rng.normal(size=x.shape.as_list()) * 50).astype(x.dtype.np)
                          for x in feeds]
                got = sess.run(reduced, dict(zip(feeds, values)))
                kept = [a.copy() for a in got]
                want = dist.allreduce([v + v for v in values], op)
                name = f"{op.name}_{step}"
                ok[name] = all(a.dtype == w.dtype and np.array_equal(a, w)
                               for a, w in zip(got, want))
                # Outputs are read-only: shared memory must not be changed by one rank.
                ok[f"{name}_read_only"] = not any(a.flags.writeable for a in got)
                if step:
                    ok[f"{name}_kept"] = all(np.array_equal(a, k) for a, k in zip(held, copies))
                exchange = _allreduce_buffers._layouts[reduced[0].op][
                    _allreduce_buffers.bucket_limit_bytes()].buckets[0].exchange
                if exchange is not None:  # the shared result unless a rank holds the last
                    ok[f"{name}_where"] = (got[0].base is exchange.out_flat) == (step != 1)
                held, copies = got, kept
        layout = _allreduce_buffers._layouts[reduced[0].op]
        used = [b.exchange is not None for lay in layout.values() for b in lay.buckets]
        ok[f"{op.name}_exchange_as_configured"] = used and all(u == want_shared for u in used)
    # A model of one variable: the op has one output (the array, not a tuple).
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, 4], name="x")
        w = cs.get_variable("w", [4, 2], initializer=cs.ones_initializer())
        loss = cs.reduce_mean(cs.square(cs.matmul(x, w)))
        train_op = dist.DistributedOptimizer(cs.train.AdamOptimizer(0.1)).minimize(loss)
        init = cs.global_variables_initializer()
    with cs.Session(graph=g) as sess:
        sess.run(init)
        for _ in range(3):
            sess.run(train_op, {x: np.full((5, 4), r + 1.0, np.float32)})
        values = sess.run(w)
    ok["one_variable_trains"] = not np.array_equal(values, np.ones((4, 2), np.float32))
    ok["one_variable_same_bits"] = len(set(dist.allgather_object(
        checksum({"w": values})))) == 1
    return ok


def check_windows(r: int, n: int) -> dict[str, bool]:
    """Shared windows: a small bucket stays on MPI_Allreduce; a big one (24 MiB) uses a
    window only when /dev/shm has room (the test runs this under a 64 MiB tmpfs too);
    the windows of dropped graphs are freed."""
    import gc

    from ckptsync.distributed import _allreduce_buffers, _shm

    def one(shape: list[int]) -> tuple[bool, bool]:
        g = cs.Graph()
        with g.as_default():
            x = cs.placeholder(cs.float32, shape, name="x")
            reduced = dist.allreduce_tensors([x + x], dist.ReduceOp.SUM)
        value = np.full(shape, r + 1.0, np.float32)
        with cs.Session(graph=g) as sess:
            right = all(np.array_equal(sess.run(reduced[0], {x: value}), 2.0 * n * (n + 1) / 2
                                       * np.ones(shape, np.float32)) for _ in range(2))
        layout = _allreduce_buffers._layouts[reduced[0].op][_allreduce_buffers.bucket_limit_bytes()]
        return right, layout.buckets[0].exchange is not None

    ok = {}
    right, used = one([4, 100])
    ok["small_right"], ok["small_not_shared"] = right, not used
    right, used = one([1024, 6144])
    ok["big_right"] = right
    ok["big_shared_iff_room"] = used == (os.environ.get("EXPECT_BIG_SHARED") == "1")
    live = []
    for _ in range(6):
        gc.collect()  # graphs are reference cycles; the next create() frees their windows
        one([64, 1024])
        live.append(len(_shm._live))
    ok["dropped_graphs_windows_freed"] = max(live) <= 2

    # A single derived view of a shared result keeps it; so does a memoryview of the
    # buffer under it, past its graph's end and later graphs' window frees.
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [100, 100], name="x")
        reduced = dist.allreduce_tensors([x + x], dist.ReduceOp.SUM)[0]
    with cs.Session(graph=g) as sess:
        out = sess.run(reduced, {x: np.ones((100, 100), np.float32)})
        exchange = _allreduce_buffers._layouts[reduced.op][_allreduce_buffers.bucket_limit_bytes()].buckets[0].exchange
        shared = exchange is not None and out.base is exchange.out_flat
        part, buffer = out.reshape(-1)[:10], out.base.base
        del out
        sess.run(reduced, {x: np.full((100, 100), 50, np.float32)})
    want_shared = os.environ.get("CKPTSYNC_SHM_ALLREDUCE", "1") != "0"
    ok["derived_view_kept"] = shared == want_shared and bool(np.all(part == 2.0 * n))
    del g, x, reduced, sess, part, exchange
    for _ in range(3):
        gc.collect()
        one([64, 1024])
    if shared:
        ok["memoryview_kept"] = bool(np.all(np.frombuffer(buffer, np.float32)[:3] == 2.0 * n))
    return ok


def build(seed: int) -> tuple[cs.Graph, object, object, object]:
    g = cs.Graph()
    with g.as_default():
        cs.set_random_seed(seed)
        x = cs.placeholder(cs.float32, [None, 8], name="x")
        y = cs.placeholder(cs.int64, [None], name="y")
        h = x
        for i, units in enumerate((16, 4)):
            with cs.variable_scope(f"dense{i}"):
                w = cs.get_variable("w", [h.get_shape().as_list()[-1], units])
                b = cs.get_variable("b", [units], initializer=cs.random_normal_initializer())
                h = cs.nn.bias_add(cs.matmul(h, w), b)
                if i == 0:
                    h = cs.nn.relu(h)
        loss = cs.reduce_mean(cs.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
        opt = dist.DistributedOptimizer(cs.train.AdamOptimizer(0.01))
        train_op = opt.minimize(loss, global_step=cs.train.get_or_create_global_step())
    return g, x, y, train_op


def main() -> None:
    out_dir, steps = Path(sys.argv[1]), int(sys.argv[2])
    r, n = dist.rank(), dist.size()
    if steps == 0:  # only the reduction paths
        report = {"rank": r, "exchange": check_exchange(r, n), "windows": check_windows(r, n)}
        (out_dir / f"rank{r}.json").write_text(json.dumps(report))
        return
    report: dict[str, object] = {"rank": r, "size": n, "collectives": check_collectives(r, n),
                                 "fused_gradients": check_fused_gradients(r, n),
                                 "exchange": check_exchange(r, n)}

    # Broadcast: ranks initialize with different seeds; after the hook all hold rank 0's.
    g, x, y, train_op = build(seed=100 + r)
    hook = dist.BroadcastGlobalVariablesHook(0)
    with g.as_default():
        names = [v.op.name for v in cs.global_variables()]
        hook.begin()
        with cs.Session(graph=g) as sess:
            sess.run(cs.global_variables_initializer())
            report["before"] = checksum(sess.read_variables(names))
            hook.after_create_session(sess, None)
            report["after_broadcast"] = checksum(sess.read_variables(names))
            # N steps on this rank's own data: gradients are averaged, so all stay equal.
            rng = np.random.default_rng(1000 + r)
            for _ in range(steps):
                sess.run(train_op, {x: rng.normal(size=(16, 8)), y: rng.integers(0, 4, 16)})
            values = sess.read_variables(names)
            report["after_training"] = checksum(values)
            report["global_step"] = int(values["global_step"])
            report["allreduce_ops"] = sum(op.type == "MpiAllreduce" for op in g.get_operations())
    # A file per rank: the ranks' stdout lines may interleave.
    (out_dir / f"rank{r}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
