"""cond, case and while_loop: only the taken branch runs, nested structures, captures,
assignments in branches, run-time trip counts, and gradients against central
differences (float64)."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptsync as cs
from ckptsync.errors import InvalidArgumentError
from ckptsync.ops.func_graph import flatten
from ckptsync.ops.registry import make_op, register, registered_types
from tests.gradcheck import check_case, check_gradients, numeric_gradient

RNG = np.random.default_rng(7)
CALLS: list[str] = []

if "TestCounter" not in registered_types():
    @register("TestCounter", kind="stateful")
    def _counter(ctx, op, x):
        CALLS.append(op.attrs["tag"])
        return x


def _normal(shape):
    return RNG.normal(size=shape)


# Central-difference cases run by test_op_gradients.py (its table's format).
GRAD_CASES = {
    "cond_true": (lambda a, b: cs.cond(cs.constant(True), lambda: a * cs.nn.tanh(b),
                                       lambda: a + b), [(_normal, (2, 3)), (_normal, (3,))]),
    "cond_false": (lambda a, b: cs.cond(cs.constant(False), lambda: a * b,
                                        lambda: cs.square(a) - b), [(_normal, (2, 3)), (_normal, (3,))]),
    "while_loop": (lambda a, w: cs.while_loop(
        lambda i, x: i < 3, lambda i, x: (i + 1, cs.nn.tanh(cs.matmul(x, w))), [0, a])[1],
        [(_normal, (2, 3)), (_normal, (3, 3))]),
}


def counted(x, tag):
    return make_op("TestCounter", [x], [x.dtype], [x.shape], name="counter",
                   attrs={"tag": tag}).outputs[0]


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_grad_cases_central_differences(name):
    build, gens = GRAD_CASES[name]
    check_case(build, gens, RNG, rtol=1e-5, atol=1e-5, name=name)


# ----------------------------------------------------------------------- cond
def test_only_the_taken_branch_runs():
    g = cs.Graph()
    with g.as_default():
        p = cs.placeholder(cs.bool, [])
        x = cs.placeholder(cs.float32, [2])
        v = cs.Variable(1.0, name="v")
        out = cs.cond(p, lambda: counted(x, "true") * 2.0,
                      lambda: counted(x, "false") + cs.assign(v, 7.0))
        with cs.Session() as sess:
            sess.run(cs.global_variables_initializer())
            CALLS.clear()
            np.testing.assert_allclose(sess.run(out, {p: True, x: [1, 2]}), [2, 4])
            assert CALLS == ["true"] and sess.run(v) == 1.0
            np.testing.assert_allclose(sess.run(out, {p: False, x: [1, 2]}), [8, 9])
            assert CALLS == ["true", "false"] and sess.run(v) == 7.0


def test_assign_in_branch_as_tf1():
    g = cs.Graph()
    with g.as_default():
        p = cs.placeholder(cs.bool, [])
        v = cs.Variable(1.0)
        out = cs.cond(p, lambda: cs.assign(v, 5.0), lambda: cs.identity(v))
        with cs.Session() as sess:
            sess.run(cs.global_variables_initializer())
            assert sess.run(out, {p: False}) == 1.0 and sess.run(v) == 1.0
            assert sess.run(out, {p: True}) == 5.0 and sess.run(v) == 5.0


def test_nested_cond_structures_and_captures():
    Pair = namedtuple("Pair", "a b")
    g = cs.Graph()
    with g.as_default():
        p = cs.placeholder(cs.bool, [])
        q = cs.placeholder(cs.bool, [])
        x = cs.placeholder(cs.float32, [None])
        c = cs.constant(10.0)

        def inner(s):
            return cs.cond(q, lambda: x * s, lambda: x + s + c)

        out = cs.cond(p, lambda: (Pair(inner(2.0), x), {"k": [c * 1.0]}),
                      lambda: (Pair(inner(3.0), x * 0.0), {"k": [c + 1.0]}), name="outer")
        assert isinstance(out[0], Pair) and isinstance(out[1]["k"], list)
        assert out[0].a.name == "outer/Merge:0"
        assert out[0].a.shape.as_list() == [None]
        with cs.Session() as sess:
            for pv in (True, False):
                for qv in (True, False):
                    got = sess.run(out, {p: pv, q: qv, x: [1.0, 2.0]})
                    s = 2.0 if pv else 3.0
                    want = np.array([1.0, 2.0]) * s if qv else np.array([1.0, 2.0]) + s + 10
                    np.testing.assert_allclose(got[0].a, want)
                    assert got[1]["k"][0] == (10.0 if pv else 11.0)


def test_cond_errors_and_strict():
    g = cs.Graph()
    with g.as_default():
        p = cs.placeholder(cs.bool, [])
        x = cs.placeholder(cs.float32, [3])
        with pytest.raises(ValueError, match="same nested structure"):
            cs.cond(p, lambda: (x, x), lambda: x)
        with pytest.raises(ValueError, match="must have the same type"):
            cs.cond(p, lambda: x, lambda: cs.cast(x, cs.int32))
        with pytest.raises(TypeError):
            cs.cond(x, lambda: x, lambda: x)
        assert isinstance(cs.cond(p, lambda: [x], lambda: [x]), cs.Tensor)
        assert isinstance(cs.cond(p, lambda: [x], lambda: [x], strict=True), list)
        assert cs.cond(p, lambda: cs.zeros([2]), lambda: cs.zeros([3])).shape.as_list() == [None]


@pytest.mark.parametrize("taken", [True, False])
def test_cond_gradient_central_differences(taken):
    g = cs.Graph()
    with g.as_default():
        p = cs.placeholder(cs.bool, [])
        x = cs.placeholder(cs.float64, [2, 3])
        y = cs.placeholder(cs.float64, [3])
        out = cs.cond(p, lambda: cs.nn.tanh(x) * y, lambda: cs.square(y) + x * 0.5)
        loss = cs.reduce_sum(out * cs.constant(RNG.normal(size=(2, 3))))
        sess = cs.Session()
        feed = {p: taken, x: RNG.normal(size=(2, 3)), y: RNG.normal(size=3)}
        check_gradients(loss, [x, y], feed, sess)


def test_cond_gradient_untaken_branch_is_zero_and_random_draws_are_kept():
    g = cs.Graph()
    with g.as_default():
        p = cs.placeholder(cs.bool, [])
        x = cs.placeholder(cs.float32, [4])
        y = cs.placeholder(cs.float32, [4])
        mask = []

        def noisy():
            m = cs.random_uniform([4], seed=3)
            mask.append(m)
            return x * m

        out = cs.cond(p, noisy, lambda: y * 3.0)
        gx, gy = cs.gradients(out, [x, y])
        with cs.Session() as sess:
            a, b = sess.run([gx, gy], {p: False, x: np.ones(4), y: np.ones(4)})
            np.testing.assert_array_equal(a, 0)
            np.testing.assert_array_equal(b, 3)
            o, a = sess.run([out, gx], {p: True, x: np.ones(4), y: np.ones(4)})
            np.testing.assert_allclose(a, o)  # the gradient is the forward's own draw


def test_case_first_true_wins_default_and_exclusive():
    g = cs.Graph()
    with g.as_default():
        p = cs.placeholder(cs.bool, [], name="p")
        q = cs.placeholder(cs.bool, [], name="q")
        x = cs.placeholder(cs.float32, [2])
        c1 = cs.case([(p, lambda: x), (q, lambda: x + 1)], default=lambda: x * 0)
        c2 = cs.case([(p, lambda: x), (q, lambda: x + 1)], default=lambda: x * 0,
                     exclusive=True)
        c3 = cs.case({p: lambda: counted(x, "p"), q: lambda: counted(x, "q") + 1})
        assert c1.name == "case/cond/Merge:0"
        with cs.Session() as sess:
            f = {x: [1.0, 2.0]}
            np.testing.assert_allclose(sess.run(c1, {p: True, q: True, **f}), [1, 2])
            np.testing.assert_allclose(sess.run(c1, {p: False, q: True, **f}), [2, 3])
            np.testing.assert_allclose(sess.run(c1, {p: False, q: False, **f}), [0, 0])
            with pytest.raises(InvalidArgumentError, match="exclusive=True"):
                sess.run(c2, {p: True, q: True, **f})
            CALLS.clear()
            np.testing.assert_allclose(sess.run(c3, {p: False, q: True, **f}), [2, 3])
            assert CALLS == ["q"]
            with pytest.raises(InvalidArgumentError, match="None of conditions"):
                sess.run(c3, {p: False, q: False, **f})


# ----------------------------------------------------------------------- while
def test_while_fed_trip_count_structures_and_names():
    g = cs.Graph()
    with g.as_default():
        n = cs.placeholder(cs.int32, [])
        x = cs.placeholder(cs.float32, [3])
        out = cs.while_loop(lambda i, s: i < n,
                            lambda i, s: (i + 1, {"a": s["a"] * x, "b": [s["b"][0] + 1.0]}),
                            (0, {"a": cs.ones([3]), "b": [cs.zeros([])]}))
        assert [t.name for t in flatten(out)] == [
            "while/Exit:0", "while/Exit_1:0", "while/Exit_2:0"]
        one = cs.while_loop(lambda i: i < n, lambda i: i + 2, [0])
        assert isinstance(one, cs.Tensor)
        with cs.Session() as sess:
            for k in (0, 1, 4):
                i, s = sess.run(out, {n: k, x: [1.0, 2.0, 3.0]})
                assert i == k and s["b"][0] == k
                np.testing.assert_allclose(s["a"], np.array([1.0, 2.0, 3.0]) ** k)
            assert sess.run(one, {n: 5}) == 6


def test_while_shape_invariants_and_max_iterations():
    g = cs.Graph()
    with g.as_default():
        with pytest.raises(ValueError, match="shape_invariants"):
            cs.while_loop(lambda a: cs.reduce_sum(a) < 10.0, lambda a: cs.concat([a, a], 0),
                          [cs.ones([1])])
        grow = cs.while_loop(lambda a: cs.reduce_sum(a) < 10.0,
                             lambda a: cs.concat([a, a], 0), [cs.ones([1])],
                             shape_invariants=[cs.TensorShape([None])])
        assert grow.shape.as_list() == [None]
        m = cs.placeholder(cs.int32, [])
        capped = cs.while_loop(lambda i: True, lambda i: i + 1, [0], maximum_iterations=m)
        assert capped.name.endswith("Exit_1:0")
        with cs.Session() as sess:
            assert sess.run(grow).shape == (16,)
            assert sess.run(capped, {m: 7}) == 7


def test_while_body_ops_run_once_per_iteration():
    g = cs.Graph()
    with g.as_default():
        n = cs.placeholder(cs.int32, [])
        x = cs.placeholder(cs.float32, [])
        out = cs.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, counted(a, "body") * 2.0),
                            [0, x])
        with cs.Session() as sess:
            CALLS.clear()
            assert sess.run(out, {n: 3, x: 1.0})[1] == 8.0
            assert CALLS == ["body"] * 3


@pytest.mark.parametrize("trips", [0, 1, 3])
def test_while_gradient_central_differences(trips):
    g = cs.Graph()
    with g.as_default():
        n = cs.placeholder(cs.int32, [])
        x0 = cs.placeholder(cs.float64, [2])
        w = cs.placeholder(cs.float64, [2, 2])
        out = cs.while_loop(
            lambda i, a, b: i < n,
            lambda i, a, b: (i + 1, cs.nn.tanh(cs.matmul(a, w)), b + cs.reduce_sum(a * a)),
            [0, cs.reshape(x0, [1, 2]), cs.constant(0.0, cs.float64)])
        loss = cs.reduce_sum(out[1] * np.array([[0.3, -0.7]])) + out[2] * 0.5
        sess = cs.Session()
        feed = {n: trips, x0: RNG.normal(size=2), w: RNG.normal(size=(2, 2))}
        check_gradients(loss, [x0, w], feed, sess)


def test_while_gradient_wrt_variable_and_nested_control_flow():
    g = cs.Graph()
    with g.as_default():
        n = cs.placeholder(cs.int32, [])
        p = cs.placeholder(cs.bool, [])
        x = cs.placeholder(cs.float64, [3])
        v = cs.Variable(np.array([0.5, -1.0, 2.0]), name="v")

        def body(i, a):
            inner = cs.while_loop(lambda j, b: j < 2, lambda j, b: (j + 1, b * v + 0.1), [0, a])
            return i + 1, cs.cond(p, lambda: cs.nn.tanh(inner[1]), lambda: inner[1] * x)

        out = cs.while_loop(lambda i, a: i < n, body, [0, x])
        loss = cs.reduce_sum(out[1] * cs.constant([1.0, -2.0, 0.5], cs.float64))
        gv, gx = cs.gradients(loss, [v, x])
        with cs.Session() as sess:
            sess.run(cs.global_variables_initializer())
            for pv in (True, False):
                feed = {n: 2, p: pv, x: RNG.normal(size=3)}
                got_v, got_x = sess.run([gv, gx], feed)
                np.testing.assert_allclose(
                    got_x, numeric_gradient(lambda f=feed: float(sess.run(loss, f)), feed[x]), atol=1e-5)
                base = sess.run(v).copy()

                def f_v(vv=base, f=feed):
                    return float(sess.run(loss, f, params={"v": vv}))

                np.testing.assert_allclose(got_v, numeric_gradient(f_v, base), atol=1e-5)


def test_while_back_prop_false_and_errors():
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [])
        out = cs.while_loop(lambda a: a < 10.0, lambda a: a * 2.0, [x], back_prop=False)
        assert cs.gradients(out, x) == [None]
        with pytest.raises(ValueError, match="same nested structure"):
            cs.while_loop(lambda a: True, lambda a: (a, a), [x])
        with pytest.raises(TypeError):
            cs.while_loop(lambda a: True, lambda a: cs.cast(a, cs.int32), [x])
        with pytest.raises(TypeError):
            cs.while_loop(lambda a: a, lambda a: a, [x])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trips=st.integers(0, 5), scale=st.floats(0.2, 1.5),
       dims=st.lists(st.integers(0, 3), min_size=0, max_size=2),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_while_matches_numpy_loop(trips, scale, dims, dtype):
    g = cs.Graph()
    with g.as_default():
        n = cs.placeholder(cs.int32, [])
        x = cs.placeholder(cs.as_dtype(dtype), [None] * len(dims))
        out = cs.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a * scale + 1.0), [0, x])
        grad = cs.gradients(cs.reduce_sum(out[1]), x)[0]
        value = np.random.default_rng(len(dims)).normal(size=dims).astype(dtype)
        with cs.Session() as sess:
            (_, got), gx = sess.run([out, grad], {n: trips, x: value})
        want = value.copy()
        for _ in range(trips):
            want = want * dtype(scale) + 1
        np.testing.assert_allclose(got, want, rtol=1e-5)
        np.testing.assert_allclose(gx, np.full(dims, scale ** trips), rtol=1e-5)
        assert got.dtype == dtype and got.shape == tuple(dims)


def test_gradients_reach_variables_read_by_reference_and_made_in_a_branch():
    g = cs.Graph()
    with g.as_default():
        p = cs.placeholder(cs.bool, [])
        n = cs.placeholder(cs.int32, [])
        params = cs.Variable(np.arange(12, dtype=np.float32).reshape(4, 3))
        ids = cs.constant([0, 2, 2])
        picked = cs.cond(p, lambda: cs.gather(params, ids), lambda: cs.zeros([3, 3]))
        looped = cs.while_loop(lambda i, a: i < n,
                               lambda i, a: (i + 1, a + cs.reduce_sum(cs.gather(params, ids))),
                               [0, cs.constant(0.0)])[1]

        def make():
            w = cs.get_variable("inner_w", [3], initializer=cs.ones_initializer())
            return cs.reduce_sum(w * 2.0)

        made = cs.cond(p, make, lambda: cs.constant(0.0))
        inner_w = [v for v in cs.global_variables() if "inner_w" in v.name][0]
        g_pick = cs.gradients(cs.reduce_sum(picked), params)[0]
        g_loop = cs.gradients(looped, params)[0]
        g_made = cs.gradients(made, inner_w)[0]
        rows = np.array([1, 0, 2, 0], np.float32)[:, None] * np.ones(3, np.float32)
        with cs.Session() as sess:
            sess.run(cs.global_variables_initializer())
            np.testing.assert_allclose(sess.run(g_pick, {p: True}), rows)
            np.testing.assert_allclose(sess.run(g_pick, {p: False}), 0 * rows)
            np.testing.assert_allclose(sess.run(g_loop, {n: 3}), 3 * rows)
            np.testing.assert_allclose(sess.run(g_made, {p: True}), [2, 2, 2])
            assert sess.run(made, {p: True}) == 6.0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(taken=st.booleans(), dims=st.lists(st.integers(0, 3), min_size=0, max_size=3),
       dtype=st.sampled_from([np.float32, np.float64, np.int32]), known=st.booleans())
def test_cond_matches_numpy(taken, dims, dtype, known):
    g = cs.Graph()
    with g.as_default():
        p = cs.placeholder(cs.bool, [])
        x = cs.placeholder(cs.as_dtype(dtype), dims if known else [None] * len(dims))
        out = cs.cond(p, lambda: x * 2 + 1, lambda: x - 3)
        assert out.shape.as_list() == (dims if known else [None] * len(dims))
        value = (np.arange(int(np.prod(dims))).reshape(dims) % 7).astype(dtype)
        with cs.Session() as sess:
            got = sess.run(out, {p: taken, x: value})
            grads = cs.gradients(cs.reduce_sum(out), x) if dtype != np.int32 else [None]
            if grads[0] is not None:
                gx = sess.run(grads[0], {p: taken, x: value})
                np.testing.assert_allclose(gx, np.full(dims, 2.0 if taken else 1.0))
                assert gx.shape == tuple(dims)
    want = value * 2 + 1 if taken else value - 3
    np.testing.assert_array_equal(got, want)
    assert got.dtype == dtype
