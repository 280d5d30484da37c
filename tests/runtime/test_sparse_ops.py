"""gather, embedding_lookup, IndexedSlices and scatter ops: central-difference gradients,
sparse aggregation, stop_gradients, and the memory of an embedding's SGD step."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest

import ckptsync as cs
from tests.gradcheck import check_case, numeric_gradient

RNG = np.random.default_rng(7)


def _any(shape):
    return RNG.normal(size=shape)


def _big(shape):  # rows of norm well above 1 (max_norm clips them)
    return RNG.uniform(1.0, 2.0, shape) * RNG.choice([-1.0, 1.0], shape)


def _i(*v):
    return cs.constant(np.array(v, np.int32))


# name -> (builder(*float64 placeholders) -> tensor, input generators); the guard of
# test_op_gradients.py reads this table.
GRAD_CASES = {
    "gather_axis0": (lambda p: cs.gather(p, cs.constant([[0, 3], [3, 1]])), [(_any, (4, 3))]),
    "gather_axis1": (lambda p: cs.gather(p, [2, 0, 2], axis=1), [(_any, (2, 3, 2))]),
    "gather_batch_dims": (lambda p: cs.gather(p, cs.constant([[1, 1], [0, 2]]), axis=2,
                                              batch_dims=1), [(_any, (2, 2, 3))]),
    "embedding_lookup": (lambda p: cs.nn.embedding_lookup(p, _i(2, 2, 0)), [(_any, (3, 2))]),
    "embedding_lookup_mod": (lambda a, b: cs.nn.embedding_lookup([a, b], _i(3, 0, 1, 3, 2)),
                             [(_any, (2, 2)), (_any, (2, 2))]),
    "embedding_lookup_div_max_norm": (
        lambda a, b: cs.nn.embedding_lookup([a, b], cs.constant([[4, 0], [2, 4]]),
                                            partition_strategy="div", max_norm=1.2),
        [(_big, (3, 2)), (_big, (2, 2))]),
    "indexed_slices_to_dense": (
        lambda v: cs.convert_to_tensor(cs.IndexedSlices(v, _i(1, 3, 1), _i(4, 2))),
        [(_any, (3, 2))]),
}
INTERNAL_GRAD_OPS = {"GatherGradValues", "FlattenIndices", "GatherGradDense", "ResourceGather",
                "EmbeddingClipByNormGrad", "SumDuplicateIndices", "VariableShape"}


def _dense(sess, g, feed):
    if isinstance(g, cs.IndexedSlices):
        g = cs.convert_to_tensor(g)
    return sess.run(g, feed)


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradient_matches_central_differences(name):
    build, gens = GRAD_CASES[name]
    check_case(build, gens, RNG, rtol=1e-5, atol=1e-5, name=name)  # IndexedSlices made dense


def test_embedding_gradient_is_indexed_slices_of_the_rows_looked_up():
    g = cs.Graph()
    with g.as_default():
        w = cs.Variable(np.arange(12, dtype=np.float32).reshape(4, 3), name="w")
        ids = cs.placeholder(cs.int64, [None, 2])
        e = cs.nn.embedding_lookup(w, ids)
        assert e.shape.as_list() == [None, 2, 3] and e.op.name == "embedding_lookup/Identity"
        gr = cs.gradients(cs.reduce_sum(e * e), w)[0]
        assert isinstance(gr, cs.IndexedSlices)
        assert gr.values.shape.as_list() == [None, 3] and gr.shape.as_list() == [4, 3]
        sess = cs.Session()
        sess.run(cs.global_variables_initializer())
        feed = {ids: np.array([[0, 2], [2, 2]])}
        np.testing.assert_array_equal(sess.run(gr.indices, feed), [0, 2, 2, 2])
        want = np.zeros((4, 3), np.float32)
        np.add.at(want, [0, 2, 2, 2], 2 * np.arange(12, dtype=np.float32).reshape(4, 3)[[0, 2, 2, 2]])
        np.testing.assert_allclose(_dense(sess, gr, feed), want)


def test_variable_gradient_numerically():
    g = cs.Graph()
    with g.as_default():
        init = RNG.normal(size=(5, 2))
        w = cs.Variable(init, dtype=cs.float64)
        out = cs.nn.embedding_lookup(w, _i(4, 1, 4), max_norm=0.8)
        loss = cs.reduce_sum(out * cs.constant(RNG.normal(size=(3, 2))))
        gr = cs.gradients(loss, w)[0]
        sess = cs.Session()
        sess.run(cs.global_variables_initializer())
        got = _dense(sess, gr, {})

        def f():
            w.load(x, sess)
            return float(sess.run(loss))
        x = init.copy()
        want = numeric_gradient(f, x)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_aggregation_sparse_concatenates_and_mixed_is_dense():
    g = cs.Graph()
    with g.as_default():
        p = cs.placeholder(cs.float32, [4, 2])
        a = cs.gather(p, [1, 1])
        b = cs.gather(p, [3])
        sparse = cs.gradients(cs.reduce_sum(a) + cs.reduce_sum(b * 2.0), p)[0]
        assert isinstance(sparse, cs.IndexedSlices)
        mixed = cs.gradients(cs.reduce_sum(a) + cs.reduce_sum(p * 3.0), p)[0]
        assert isinstance(mixed, cs.Tensor)
        sess = cs.Session()
        feed = {p: np.ones((4, 2), np.float32)}
        assert sorted(sess.run(sparse.indices, feed)) == [1, 1, 3]
        np.testing.assert_allclose(_dense(sess, sparse, feed), [[0, 0], [2, 2], [0, 0], [2, 2]])
        np.testing.assert_allclose(sess.run(mixed, feed), [[3, 3], [5, 5], [3, 3], [3, 3]])


def test_stop_gradients_as_tf():
    g = cs.Graph()
    with g.as_default():
        a, b = cs.constant(2.0), cs.constant(3.0)
        ab = a * b
        y = ab + a
        ga, gb, gab = cs.gradients(y, [a, b, ab], stop_gradients=[ab])
        assert gb is None
        sess = cs.Session()
        assert sess.run([ga, gab]) == [1.0, 1.0]
        # A stop tensor in xs still gets its gradient; it blocks only its op.
        (ga2,) = cs.gradients(y, [a], stop_gradients=[a])
        assert sess.run(ga2) == 4.0
        c = ab * ab
        ga3, gab3 = cs.gradients(c, [a, ab], stop_gradients=[ab])
        assert ga3 is None and sess.run(gab3) == 12.0


def test_convert_to_tensor_of_indexed_slices_and_its_warning():
    g = cs.Graph()
    with g.as_default():
        s = cs.IndexedSlices(cs.constant([[1.0, 2.0], [3.0, 4.0]]), _i(2, 0), _i(3, 2))
        d = cs.convert_to_tensor(s)
        assert d is cs.convert_to_tensor(s) and d.shape.as_list() == [3, 2]
        np.testing.assert_array_equal(cs.Session().run(d), [[3, 4], [0, 0], [1, 2]])
        with pytest.raises(ValueError, match="without dense_shape"):
            cs.convert_to_tensor(cs.IndexedSlices(s.values, s.indices))
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            cs.convert_to_tensor(cs.IndexedSlices(s.values, s.indices, _i(200_000_000, 1)))
        assert any("200000000 elements" in str(r.message) for r in rec)


def test_scatter_ops_and_errors():
    g = cs.Graph()
    with g.as_default():
        w = cs.Variable(np.zeros((4, 2), np.float32))
        up = cs.scatter_update(w, [3], [[1.0, 1.0]])
        add = cs.scatter_add(w, [0, 0], np.ones((2, 2), np.float32))
        sub = cs.scatter_sub(w, cs.constant([[1]]), np.full((1, 1, 2), 2.0, np.float32))
        assert up.shape.as_list() == [4, 2] and up.op.type == "ScatterUpdate"
        sess = cs.Session()
        sess.run(cs.global_variables_initializer())
        held = sess.run(w)
        sess.run([up])
        sess.run(add)
        np.testing.assert_array_equal(sess.run(sub), [[2, 2], [-2, -2], [0, 0], [1, 1]])
        assert not held.any()  # a fetched value never changes afterwards
        with pytest.raises(ValueError):
            cs.scatter_update(w, [0, 1], np.ones((3, 2), np.float32))
        with pytest.raises(TypeError):
            cs.scatter_add(cs.constant([1.0]), [0], [1.0])
        i = cs.placeholder(cs.int32, [1])
        with pytest.raises(cs.errors.InvalidArgumentError, match="not in"):
            sess.run(cs.scatter_add(w, i, np.ones((1, 2), np.float32)), {i: [4]})


def test_sgd_embedding_step_is_sparse_and_small():
    vocab, dim, batch = 1_000_000, 64, 256
    g = cs.Graph()
    with g.as_default():
        w = cs.get_variable("emb", [vocab, dim], initializer=cs.zeros_initializer())
        ids = cs.placeholder(cs.int32, [batch])
        e = cs.nn.embedding_lookup(w, ids)
        loss = cs.reduce_sum(cs.square(e - 1.0))
        step = cs.train.GradientDescentOptimizer(0.1).minimize(loss)
        assert not [op for op in g.get_operations() if op.type == "IndexedSlicesToDense"]
        sess = cs.Session()
        sess.run(cs.global_variables_initializer())
        feed = {ids: np.arange(batch, dtype=np.int32) * 3}
        sess.run(step, feed)  # compiles the plan
        tracemalloc.start()
        try:
            for _ in range(3):
                sess.run(step, feed)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        table_bytes = vocab * dim * 4
        assert peak < 50 * batch * dim * 4 < table_bytes // 10, peak
        got = sess.run(w)
        np.testing.assert_allclose(got[3], 1 - 0.8 ** 4, rtol=1e-6)
        assert not got[1].any()


def test_in_place_update_keeps_start_of_run_reads_and_held_values():
    g = cs.Graph()
    with g.as_default():
        w = cs.get_variable("emb", [6, 2], initializer=cs.ones_initializer())
        ids = cs.constant([1, 1, 4])
        e = cs.nn.embedding_lookup(w, ids)
        step = cs.train.GradientDescentOptimizer(0.5).minimize(cs.reduce_sum(e))
        sess = cs.Session()
        sess.run(cs.global_variables_initializer())
        w0, e0, _ = sess.run([w, e, step])  # fetched with the step: start-of-run values
        assert (w0 == 1).all() and (e0 == 1).all()
        held = sess.run(w)
        np.testing.assert_array_equal(held[:, 0], [1, 0, 1, 1, 0.5, 1])
        sess.run(step)  # in place would change `held`: it is copied instead
        np.testing.assert_array_equal(held[:, 0], [1, 0, 1, 1, 0.5, 1])
        del held
        sess.run(step)
        np.testing.assert_array_equal(sess.run(w)[:, 0], [1, -2, 1, 1, -0.5, 1])
        snap = {"emb": sess.run(w)}
        snap["emb"].setflags(write=False)
        before = snap["emb"].copy()
        sess.run(step, params=snap)  # a caller's snapshot is never written
        np.testing.assert_array_equal(snap["emb"], before)


def test_optimizers_given_indexed_slices():
    g = cs.Graph()
    with g.as_default():
        w = cs.get_variable("emb", [5, 2], initializer=cs.ones_initializer())
        e = cs.nn.embedding_lookup(w, cs.constant([3, 3, 0]))
        loss = cs.reduce_sum(e * e)
        mom = cs.train.MomentumOptimizer(0.1, 0.9).minimize(loss)  # dense _apply_sparse
        sess = cs.Session()
        sess.run(cs.global_variables_initializer())
        sess.run(mom)
        np.testing.assert_allclose(sess.run(w)[:, 0], [0.8, 1, 1, 0.6, 1], rtol=1e-6)


@pytest.mark.parametrize("repeats", [3, 40])  # rounds, and the reduceat beyond 16
def test_repeated_indices_add_up(repeats):
    from ckptsync.ops.scatter_ops import sum_rows

    idx = np.array([5, 2] * repeats + [7], np.int64)
    rows = RNG.normal(size=(idx.size, 3))
    uniq, sums = sum_rows(rows, idx)
    want = np.zeros((8, 3))
    np.add.at(want, idx, rows)
    np.testing.assert_array_equal(uniq, [2, 5, 7])
    np.testing.assert_allclose(sums, want[[2, 5, 7]], rtol=1e-12)
    g = cs.Graph()
    with g.as_default():
        w = cs.Variable(np.zeros((8, 3)))
        sub = cs.scatter_sub(w, idx, rows)
        sess = cs.Session()
        sess.run(cs.global_variables_initializer())
        np.testing.assert_allclose(sess.run(sub), -want, rtol=1e-12)
        dense = cs.convert_to_tensor(cs.IndexedSlices(cs.constant(rows), cs.constant(idx),
                                                      cs.constant([8, 3])))
        np.testing.assert_allclose(sess.run(dense), want, rtol=1e-12)


@pytest.mark.parametrize("how", ["mul", "div", "min", "max"])
@pytest.mark.parametrize("repeats", [2, 20])
def test_scatter_mul_div_min_max(how, repeats):
    idx = np.array([3, 0] * repeats + [1], np.int32)
    upd = RNG.uniform(0.9, 1.1, (idx.size, 2))
    init = RNG.uniform(1.0, 2.0, (4, 2))
    want = init.copy()
    {"mul": np.multiply, "div": np.divide, "min": np.minimum, "max": np.maximum}[how].at(
        want, idx, upd)
    g = cs.Graph()
    with g.as_default():
        w = cs.Variable(init)
        out = getattr(cs, f"scatter_{how}")(w, idx, upd)
        assert out.op.type == "Scatter" + how.capitalize()
        sess = cs.Session()
        sess.run(cs.global_variables_initializer())
        np.testing.assert_allclose(sess.run(out), want, rtol=1e-12)


@pytest.mark.parametrize("make", [
    lambda: cs.train.AdagradOptimizer(0.1),
    lambda: cs.train.FtrlOptimizer(0.1, l1_regularization_strength=0.01),
    lambda: cs.train.RMSPropOptimizer(0.1, momentum=0.5),
    lambda: cs.train.MomentumOptimizer(0.1, 0.9),
    lambda: cs.train.AdadeltaOptimizer(1.0),
], ids=["adagrad", "ftrl", "rmsprop", "momentum", "adadelta"])
def test_adaptive_optimizers_embedding_step_touches_only_the_rows(make):
    # As TF1's _apply_sparse: a step's memory is O(rows looked up), the slots included,
    # never a copy of the [vocab, dim] table or its accumulators.
    vocab, dim, batch = 200_000, 32, 128
    g = cs.Graph()
    with g.as_default():
        w = cs.get_variable("emb", [vocab, dim], initializer=cs.zeros_initializer())
        ids = cs.placeholder(cs.int32, [batch])
        loss = cs.reduce_sum(cs.square(cs.nn.embedding_lookup(w, ids) - 1.0))
        step = make().minimize(loss)
        sess = cs.Session()
        sess.run(cs.global_variables_initializer())
        feed = {ids: np.arange(batch, dtype=np.int32) * 7}
        sess.run(step, feed)  # compiles the plan
        tracemalloc.start()
        try:
            for _ in range(2):
                sess.run(step, feed)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < vocab * dim * 4 // 10, peak
        got = sess.run(w)
        assert got[7].any() and not got[1].any() and not got[vocab - 1].any()
