"""The allreduce buckets and buffers without MPI: kernels writing into ``out=``, the
session handing a fused allreduce's buffers to the gradient kernels, buffer ownership
across runs, and ``DistributedOptimizer``'s predivided seed.

Two ranks are faked in one process: ``size()`` answers 2 and the communicator's
in-place SUM doubles the buffer, as if the other rank held the same values. So a MEAN
must give back exactly the inputs, and a SUM exactly twice them. The real two-rank runs
are in ``mpi_worker.py``.
"""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

import ckptsync as cs
from ckptsync import distributed as dist
from ckptsync.distributed import _allreduce_buffers
from ckptsync.distributed import optimizer as dist_optimizer
from ckptsync.ops.registry import get_op_def


class _FakeMPI:
    SUM, MAX, MIN = "sum", "max", "min"
    IN_PLACE = object()


class _FakeComm:
    """Two ranks with the same values: SUM doubles, MAX and MIN keep."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []

    def Allreduce(self, sendbuf: object, buf: np.ndarray, op: str) -> None:  # noqa: N802
        assert sendbuf is _FakeMPI.IN_PLACE
        self.calls.append((buf.nbytes, op))
        if op == "sum":
            buf += buf


@pytest.fixture
def two_ranks(monkeypatch: pytest.MonkeyPatch) -> _FakeComm:
    comm = _FakeComm()
    monkeypatch.setattr(_allreduce_buffers, "size", lambda: 2)
    monkeypatch.setattr(_allreduce_buffers, "world_comm", lambda: comm)
    monkeypatch.setattr(_allreduce_buffers, "mpi_module", lambda: _FakeMPI)
    monkeypatch.setattr(dist_optimizer, "size", lambda: 2)
    return comm


class _Spy:
    """Records what each BucketedAllreduce handed out and got back, per run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.prepared: list[tuple[list[int], list[np.ndarray]]] = []
        self.received: list[tuple[np.ndarray, ...]] = []
        prepare, run = _allreduce_buffers.BucketedAllreduce.prepare, _allreduce_buffers.BucketedAllreduce.run

        def spy_prepare(fused, ctx):
            out = prepare(fused, ctx)
            self.prepared.append((list(fused.direct), list(out)))
            return out

        def spy_run(fused, ctx, op, *arrays):
            self.received.append(arrays)
            return run(fused, ctx, op, *arrays)

        monkeypatch.setattr(_allreduce_buffers.BucketedAllreduce, "prepare", spy_prepare)
        monkeypatch.setattr(_allreduce_buffers.BucketedAllreduce, "run", spy_run)

    def landed(self) -> list[int]:
        """Indices of the last run's inputs that its producers wrote in place."""
        direct, outs = self.prepared[-1]
        arrays = self.received[-1]
        return sorted(i for i, o in zip(direct, outs) if arrays[i] is o)


# ------------------------------------------------------------------ out= kernels
def _kernel(op_type):
    return get_op_def(op_type).kernel


@pytest.mark.parametrize("op_type, args, attrs", [
    ("MatMul", [(5, 3), (3, 4)], {"transpose_a": False, "transpose_b": False}),
    ("MatMul", [(3, 5), (3, 4)], {"transpose_a": True, "transpose_b": False}),
    ("MatMul", [(5, 3), (4, 3)], {"transpose_a": False, "transpose_b": True}),
    ("MatMul", [(3, 5), (4, 3)], {"transpose_a": True, "transpose_b": True}),
    ("BiasAddGrad", [(6, 2, 4)], {}),
    ("AddN", [(3, 4)], {}),
    ("AddN", [(3, 4), (3, 4)], {}),
    ("AddN", [(3, 4), (3, 4), (3, 4)], {}),
    ("SumToShape", [(5, 3, 4), (3, 4)], {}),
    ("SumToShape", [(5, 3, 4), (1, 4)], {}),
    ("SumToShape", [(3, 4), (3, 4)], {}),
])
def test_out_kernels_fill_out_with_the_same_bits_and_return_new_arrays_on_a_misfit(
        op_type, args, attrs):
    assert get_op_def(op_type).accepts_out
    rng = np.random.default_rng(0)
    inputs = [rng.normal(size=s).astype(np.float32) for s in args]
    want = np.array(_kernel(op_type)(*inputs, **attrs))
    out = np.full(want.shape, np.nan, np.float32)
    got = _kernel(op_type)(*inputs, out=out, **attrs)
    assert got is out and np.array_equal(out, want)
    for misfit in (np.zeros(want.size + 1, np.float32), np.zeros(want.shape, np.float64)):
        got = _kernel(op_type)(*inputs, out=misfit, **attrs)
        assert got is not misfit and np.array_equal(got, want) and not misfit.any()


# ------------------------------------------------------------------ session + fusion
def _dense_grads(op: dist.ReduceOp = dist.ReduceOp.MEAN):
    """A two-layer net's gradients (MatMul, BiasAddGrad, AddN, SumToShape producers),
    allreduced by one fused op built with ``allreduce_gradients`` (no predivide)."""
    g = cs.Graph()
    with g.as_default():
        cs.set_random_seed(3)
        x = cs.placeholder(cs.float32, [None, 3], name="x")
        w = cs.get_variable("w", [3, 4])
        b = cs.get_variable("b", [4], initializer=cs.random_normal_initializer())
        c = cs.get_variable("c", [4], initializer=cs.random_normal_initializer())
        h = cs.nn.relu(cs.nn.bias_add(cs.matmul(x, w), b)) + c  # c: SumToShape
        y = cs.matmul(h, cs.transpose(w))  # w used twice: AddN
        loss = cs.reduce_mean(cs.square(y))
        variables = [w, b, c]
        local = cs.gradients(loss, variables)
        reduced = dist.allreduce_tensors(local, op)
        init = cs.global_variables_initializer()
    sess = cs.Session(graph=g)
    sess.run(init)
    return sess, x, local, reduced


def _feed(x, seed: int):
    return {x: np.random.default_rng(seed).normal(size=(5, 3)).astype(np.float32)}


def test_gradient_kernels_write_into_the_fusion_buffer_and_mean_is_exact(two_ranks, monkeypatch):
    spy = _Spy(monkeypatch)
    sess, x, local, reduced = _dense_grads()
    want = sess.run(local, _feed(x, 1))
    got = sess.run(reduced, _feed(x, 1))
    assert spy.landed() == [0, 1, 2], "every gradient kernel wrote in place"
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(got, want))
    assert got[0].base is got[1].base is got[2].base is not None, "views of one buffer"
    assert two_ranks.calls == [(sum(a.nbytes for a in want), "sum")]


def test_inputs_that_are_fetched_fed_or_read_elsewhere_are_copied_not_overwritten(
        two_ranks, monkeypatch):
    spy = _Spy(monkeypatch)
    sess, x, local, reduced = _dense_grads()
    want = sess.run(local, _feed(x, 1))
    # Fetching a gradient alongside: its kernel must not write into the buffer, and the
    # fetched value stays the local gradient (the reduction is in place).
    both = sess.run([reduced, local[0]], _feed(x, 1))
    assert spy.landed() == [1, 2]
    assert np.array_equal(both[1], want[0]) and both[1] is not both[0][0]
    assert all(np.array_equal(a, b) for a, b in zip(both[0], want))
    # A fed gradient is copied in.
    fed = np.ones((3, 4), np.float32)
    got = sess.run(reduced, {**_feed(x, 1), local[0]: fed})
    assert spy.landed() == [1, 2] and np.array_equal(got[0], fed) and not np.shares_memory(
        got[0], fed)
    # A gradient another op of the run reads is copied in too.
    with sess.graph.as_default():
        norm = cs.reduce_sum(cs.square(local[1]))
    got, _ = sess.run([reduced, norm], _feed(x, 1))
    assert spy.landed() == [0, 2]
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


def test_outputs_held_by_the_caller_are_never_overwritten_by_a_later_run(two_ranks):
    sess, x, local, reduced = _dense_grads()
    want1, want2 = sess.run(local, _feed(x, 1)), sess.run(local, _feed(x, 2))
    held = sess.run(reduced, _feed(x, 1))
    base = held[0].base
    for _ in range(3):
        sess.run(reduced, _feed(x, 2))
    assert all(np.array_equal(a, b) for a, b in zip(held, want1))
    # A slice of an output (its base is the buffer) also keeps the buffer.
    part = held[0][1:]
    del held
    again = sess.run(reduced, _feed(x, 2))
    assert again[0].base is not base and np.array_equal(part, want1[0][1:])
    assert all(np.array_equal(a, b) for a, b in zip(again, want2))
    # Once nothing is held any more, the buffers are reused.
    del part, again
    reused = {id(sess.run(reduced, _feed(x, 2))[0].base) for _ in range(3)}
    assert len(reused) == 1


def test_the_pool_keeps_at_most_its_limit_and_hands_out_fresh_buffers_beyond(two_ranks):
    sess, x, local, reduced = _dense_grads()
    want = sess.run(local, _feed(x, 1))
    held = [sess.run(reduced, _feed(x, 1)) for _ in range(_allreduce_buffers.BUFFERS_PER_BUCKET + 2)]
    assert len({id(h[0].base) for h in held}) == len(held)
    assert all(np.array_equal(a, b) for h in held for a, b in zip(h, want))


def test_concurrent_runs_each_get_their_own_buffers(two_ranks):
    sess, x, local, reduced = _dense_grads(dist.ReduceOp.SUM)
    wants = {seed: sess.run(local, _feed(x, seed)) for seed in range(4)}
    errors: list[str] = []

    def worker(seed: int) -> None:
        for _ in range(30):
            got = sess.run(reduced, _feed(x, seed))
            if not all(np.array_equal(a, 2 * b) for a, b in zip(got, wants[seed])):
                errors.append(f"seed {seed}")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_an_op_of_one_tensor_gives_the_array_itself_fused_or_not(two_ranks):
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [2, 3], name="x")
        unknown = cs.placeholder(cs.float32, [None, 3], name="u")  # not fusable
        fused = dist.allreduce_tensors([cs.matmul(x, cs.ones([3, 3]))], dist.ReduceOp.SUM)
        plain = dist.allreduce_tensors([unknown], dist.ReduceOp.SUM)
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    with cs.Session(graph=g) as sess:
        got_fused, got_plain = sess.run([fused[0], plain[0]], {x: value, unknown: value})
    assert isinstance(got_fused, np.ndarray) and got_fused.shape == (2, 3)
    assert np.array_equal(got_fused, 2 * value @ np.ones((3, 3), np.float32))
    # The kernel path runs dist.allreduce, which sees the one real process.
    assert isinstance(got_plain, np.ndarray) and np.array_equal(got_plain, value)


@pytest.mark.parametrize(("dtype", "op"), [
    (cs.complex64, dist.ReduceOp.MAX), (cs.complex128, dist.ReduceOp.MIN),
    (cs.bool, dist.ReduceOp.SUM), (cs.bool, dist.ReduceOp.MEAN),
])
def test_a_dtype_the_op_cannot_reduce_is_refused_when_the_graph_is_built(dtype, op):
    with cs.Graph().as_default():
        t = cs.placeholder(dtype, [2], name="t")
        with pytest.raises(TypeError, match=f"t:0 of dtype {dtype.name} cannot be reduced "
                                            f"with {op.name}"):
            dist.allreduce_tensors([t], op)


def test_distributed_optimizer_trains_a_model_of_one_variable(two_ranks):
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, 4], name="x")
        w = cs.get_variable("w", [4, 2])
        loss = cs.reduce_mean(cs.square(cs.matmul(x, w)))
        train_op = dist.DistributedOptimizer(cs.train.AdamOptimizer(0.1)).minimize(loss)
        init = cs.global_variables_initializer()
    with cs.Session(graph=g) as sess:
        sess.run(init)
        before = sess.run(w)
        for _ in range(3):
            sess.run(train_op, {x: np.ones((5, 4), np.float32)})
        assert not np.array_equal(sess.run(w), before)


def test_mixed_dtypes_and_integer_mean_and_max(two_ranks):
    g = cs.Graph()
    with g.as_default():
        a = cs.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
        i = cs.constant(np.array([3, -3, 7], np.int64))
        d = cs.constant(np.array([0.25, 1.5]))
        mean = dist.allreduce_tensors([a, i, d], dist.ReduceOp.MEAN)
        top = dist.allreduce_tensors([i, a], dist.ReduceOp.MAX)
    with cs.Session(graph=g) as sess:
        got = sess.run(mean)
        assert [x.dtype for x in got] == [np.float32, np.int64, np.float64]
        assert np.array_equal(got[0], np.arange(6).reshape(2, 3))
        assert got[1].tolist() == [3, -3, 7] and got[2].tolist() == [0.25, 1.5]
        got = sess.run(top)
        assert got[0].tolist() == [3, -3, 7] and np.array_equal(got[1], sess.run(a))
    assert sorted(op for _, op in two_ranks.calls) == ["max", "max", "sum", "sum", "sum"]


def test_a_misfit_at_run_time_takes_the_general_path(two_ranks):
    g = cs.Graph()
    with g.as_default():
        t = cs.placeholder(cs.float32, [2, 3])
        op = dist.allreduce_tensors([t], dist.ReduceOp.SUM)[0].op
    fused = _allreduce_buffers.plan_bucketed_allreduce(op, [])
    assert fused is not None

    class Ctx:
        scratch: dict = {}

    got = fused.run(Ctx(), op, np.ones((3, 2), np.float32))
    assert got.shape == (3, 2)  # the general path (one real rank here: a copy)


def test_no_fusion_with_one_rank_or_unknown_shapes(two_ranks, monkeypatch):
    g = cs.Graph()
    with g.as_default():
        t = cs.placeholder(cs.float32, [None, 3])
        op = dist.allreduce_tensors([t, cs.constant([1.0])], dist.ReduceOp.SUM)[0].op
        ok = dist.allreduce_tensors([cs.constant([1.0])], dist.ReduceOp.SUM)[0].op
    assert _allreduce_buffers.plan_bucketed_allreduce(op, []) is None
    assert _allreduce_buffers.plan_bucketed_allreduce(ok, []) is not None
    monkeypatch.setattr(_allreduce_buffers, "size", lambda: 1)
    assert _allreduce_buffers.plan_bucketed_allreduce(ok, []) is None


# ------------------------------------------------------------------ predivided seed
def _mlp_loss():
    g = cs.Graph()
    with g.as_default():
        cs.set_random_seed(5)
        x = cs.constant(np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32))
        w = cs.get_variable("w", [4, 3])
        b = cs.get_variable("b", [3], initializer=cs.random_normal_initializer())
        loss = cs.reduce_mean(cs.square(cs.nn.bias_add(cs.matmul(x, w), b)))
    return g, loss, [w, b]


def _grads(g, loss, variables, opt, **kwargs):
    with g.as_default():
        gv = opt.compute_gradients(loss, **kwargs)
        local = cs.gradients(loss, variables, grad_ys=kwargs.get("grad_loss"))
        init = cs.global_variables_initializer()
    with cs.Session(graph=g) as sess:
        sess.run(init)
        return [gr for gr, _ in gv], sess.run([gr for gr, _ in gv]), sess.run(local)


def test_distributed_optimizer_folds_the_mean_into_the_loss_seed(two_ranks):
    g, loss, variables = _mlp_loss()
    opt = dist.DistributedOptimizer(cs.train.GradientDescentOptimizer(0.1))
    tensors, got, want = _grads(g, loss, variables, opt)
    (op,) = [o for o in g.get_operations() if o.type == "MpiAllreduce"]
    assert op.attrs["op"] == "sum" and tensors[0].op is op
    # Two equal ranks: the sum of the halves is exactly the local gradient.
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


def test_a_given_grad_loss_is_scaled_too_and_wrapping_twice_reduces_once(two_ranks):
    g, loss, variables = _mlp_loss()
    inner = dist.DistributedOptimizer(cs.train.GradientDescentOptimizer(0.1))
    opt = dist.DistributedOptimizer(inner)
    _, got, want = _grads(g, loss, variables, opt, grad_loss=np.float32(3.0))
    assert sum(o.type == "MpiAllreduce" for o in g.get_operations()) == 1
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


def test_an_optimizer_with_its_own_compute_gradients_is_averaged_after(two_ranks):
    class Custom(cs.train.GradientDescentOptimizer):
        def compute_gradients(self, loss, var_list=None, **kwargs):
            return super().compute_gradients(loss, var_list)  # drops grad_loss

    g, loss, variables = _mlp_loss()
    _, got, want = _grads(g, loss, variables, dist.DistributedOptimizer(Custom(0.1)))
    (op,) = [o for o in g.get_operations() if o.type == "MpiAllreduce"]
    assert op.attrs["op"] == "mean"
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


def test_every_plan_of_an_op_shares_its_pools_which_go_with_the_graph(two_ranks):
    sess, x, local, reduced = _dense_grads()
    with sess.graph.as_default():
        norm = cs.reduce_sum(cs.square(local[1]))
    bases = {id(sess.run(reduced, _feed(x, 1))[0].base) for _ in range(2)}
    bases |= {id(sess.run([reduced, norm], _feed(x, 1))[0][0].base) for _ in range(2)}
    bases |= {id(sess.run(tuple(reduced), _feed(x, 1))[0].base) for _ in range(2)}
    assert len(bases) == 1, "three plans, one buffer"
    assert reduced[0].op in _allreduce_buffers._layouts
    op = weakref.ref(reduced[0].op)
    sess.close()
    del sess, x, local, reduced, norm
    gc.collect()
    assert op() is None, "the pools must not keep the graph alive"


def test_trainers_averaging_block_predivides_once_with_or_without_the_wrapper(two_ranks):
    from ckptsync.app import DataParallel

    par = DataParallel(threading.Event())
    par.size = 2  # as under mpiexec -n 2 (two_ranks fakes the communicator)
    for wrap in (False, True):
        g, loss, variables = _mlp_loss()
        opt = cs.train.AdamOptimizer(0.1)
        if wrap:
            opt = dist.DistributedOptimizer(opt)
        with par.building(g):
            _, got, want = _grads(g, loss, variables, opt)
        ops = [o for o in g.get_operations() if o.type == "MpiAllreduce"]
        assert [o.attrs["op"] for o in ops] == ["sum"], wrap
        assert all(np.array_equal(a, b) for a, b in zip(got, want)), wrap
