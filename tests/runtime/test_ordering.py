"""Reads ordered after writes within one ``Session.run`` (``session/ordering.py``): what
TensorFlow answers is in the ``ordering`` goldens; these pin what is ckptsync's own (reads
not ordered after a write, fresh reads only where needed, sparse updates still in place,
snapshots never written)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import ckptsync as cs
from ckptsync.errors import FailedPreconditionError
from ckptsync.session.ordering import plan_fresh_reads, variables_written
from ckptsync.session.plan import needed_ops


def _session(g: cs.Graph) -> cs.Session:
    sess = cs.Session(graph=g)
    with g.as_default():
        sess.run(cs.global_variables_initializer())
    return sess


def test_a_read_ordered_after_an_assign_sees_it_an_unordered_one_the_value_before():
    g = cs.Graph()
    with g.as_default():
        v = cs.Variable(1.0, name="v")
        a = cs.assign(v, 5.0)
        with cs.control_dependencies([a]):
            after = v * 1.0
        unordered = v * 1.0
    sess = _session(g)
    got_unordered, got_after, _ = sess.run([unordered, after, a])
    assert (float(got_unordered), float(got_after)) == (1.0, 5.0)
    assert float(sess.run(v)) == 5.0


def test_a_training_step_plans_no_fresh_read():
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, 3])
        h = cs.layers.dense(x, 4, activation=cs.nn.relu)
        loss = cs.reduce_mean(cs.square(cs.layers.dense(h, 1)))
        step = cs.train.AdamOptimizer(0.01).minimize(
            loss, global_step=cs.train.get_or_create_global_step())
        ordered = needed_ops([step, loss], {id(x)})
        with cs.control_dependencies([step]):
            read_after = cs.identity(cs.trainable_variables()[0])
        assert plan_fresh_reads(ordered, {id(x)}) == {}
        ordered = needed_ops([read_after], {id(x)})
        fresh = plan_fresh_reads(ordered, {id(x)})
        assert [[name for _, name in reads] for reads in fresh.values()] == [["dense/kernel"]]


def test_what_ops_write():
    g = cs.Graph()
    with g.as_default():
        v = cs.Variable([1.0, 2.0], name="v")
        w = cs.Variable([[1.0], [2.0]], name="w")
        gather = cs.nn.embedding_lookup(w, [1])
        p = cs.placeholder(cs.bool, [])
        c = cs.cond(p, lambda: cs.assign_add(v, [1.0, 1.0]), lambda: cs.identity(v))
        loop = cs.while_loop(lambda i: i < 3, lambda i: i + cs.cast(
            cs.reduce_sum(cs.scatter_add(w, [0], [[1.0]])), cs.int32) * 0 + 1, [0])
        ema = cs.train.ExponentialMovingAverage(0.9)
        average = ema.apply([v])
    assert variables_written(gather.op) == frozenset()
    assert variables_written(c.op.inputs[0].op) == {"v"}
    assert variables_written(loop.op.inputs[0].op) == {"w"}
    ma = [op for op in g.get_operations() if op.type == "AssignMovingAverage"][0]
    assert variables_written(ma) == {"v/ExponentialMovingAverage"}
    assert average.type == "NoOp"


def test_a_read_after_a_sparse_step_keeps_the_step_in_place():
    vocab, dim, batch = 200_000, 16, 64
    g = cs.Graph()
    with g.as_default():
        w = cs.get_variable("emb", [vocab, dim], initializer=cs.zeros_initializer())
        ids = cs.placeholder(cs.int32, [batch])
        loss = cs.reduce_sum(cs.square(cs.nn.embedding_lookup(w, ids) - 1.0))
        step = cs.train.GradientDescentOptimizer(0.1).minimize(loss)
        with cs.control_dependencies([step]):
            row = cs.identity(w)[3]  # the updated row, read after the step
    sess = _session(g)
    feed = {ids: np.arange(batch, dtype=np.int32) * 3}
    sess.run(row, feed)  # compiles the plan
    tracemalloc.start()
    try:
        for _ in range(3):
            got = sess.run(row, feed)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < vocab * dim * 4 // 10, peak  # a copy of the table would be 12.8 MB
    np.testing.assert_allclose(got, 1 - 0.8 ** 4, rtol=1e-6)


def test_a_params_run_reads_its_own_writes_and_never_writes_the_snapshot():
    g = cs.Graph()
    with g.as_default():
        v = cs.Variable([1.0, 2.0], name="v")
        a = cs.assign_add(v, [10.0, 10.0])
        with cs.control_dependencies([a]):
            r = cs.identity(v)
    sess = _session(g)
    snap = {"v": np.array([5.0, 6.0], np.float32)}
    snap["v"].setflags(write=False)
    np.testing.assert_array_equal(sess.run(r, params=snap), [15.0, 16.0])
    np.testing.assert_array_equal(snap["v"], [5.0, 6.0])


def test_a_fresh_read_of_an_uninitialized_variable_names_it():
    g = cs.Graph()
    with g.as_default():
        v = cs.Variable(1.0, name="v")
        u = cs.Variable(2.0, name="never_initialized")
        a = cs.assign(v, 3.0)
        with cs.control_dependencies([a]):
            r = u + v
    sess = cs.Session(graph=g)
    sess.run(v.initializer)
    with pytest.raises(FailedPreconditionError, match="never_initialized"):
        sess.run(r)


def test_a_loop_body_sees_the_last_iterations_scatter():
    g = cs.Graph()
    with g.as_default():
        v = cs.Variable([0.0, 0.0, 0.0], name="v")

        def body(i, acc):
            s = cs.scatter_add(v, [0], [1.0])
            with cs.control_dependencies([s]):
                return i + 1, acc + v[0]

        _, acc = cs.while_loop(lambda i, acc: i < 4, body, [0, 0.0])
    sess = _session(g)
    assert float(sess.run(acc)) == 1.0 + 2.0 + 3.0 + 4.0
    np.testing.assert_array_equal(sess.run(v), [4.0, 0.0, 0.0])


def test_an_update_output_read_after_a_later_update_has_it():
    g = cs.Graph()
    with g.as_default():
        v = cs.Variable(1.0, name="v")
        a = cs.assign(v, 5.0)
        with cs.control_dependencies([a]):
            b = cs.assign_add(v, 1.0)
        with cs.control_dependencies([b]):
            later = a + 0.0  # `a` is the variable (TF1's ref output): it has `b` by now
    sess = _session(g)
    assert [float(x) for x in sess.run([later, b])] == [6.0, 6.0]
