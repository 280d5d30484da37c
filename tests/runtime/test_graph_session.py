"""Graph building, Session.run semantics and errors."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import ckptsync as cs
from ckptsync.errors import FailedPreconditionError, InvalidArgumentError


def test_names_follow_tf1_scopes():
    g = cs.Graph()
    with g.as_default():
        with cs.name_scope("layer"):
            c = cs.constant(1.0, name="c")
            c2 = cs.constant(2.0, name="c")
        with cs.variable_scope("dense0"):
            w = cs.get_variable("w", [3, 4])
    assert c.name == "layer/c:0"
    assert c2.name == "layer/c_1:0"
    assert w.name == "dense0/w:0"
    assert w.op.name == "dense0/w"
    assert w.get_shape().as_list() == [3, 4]
    assert w.dtype.base_dtype == cs.float32


def test_get_variable_reuse_rules():
    g = cs.Graph()
    with g.as_default():
        with cs.variable_scope("s"):
            w = cs.get_variable("w", [2])
        with pytest.raises(ValueError, match="already exists, disallowed"):
            with cs.variable_scope("s"):
                cs.get_variable("w", [2])
        with cs.variable_scope("s", reuse=True):
            assert cs.get_variable("w", [2]) is w
            with pytest.raises(ValueError, match="does not exist, or was not created with"):
                cs.get_variable("missing", [2])
        with cs.variable_scope("s", reuse=cs.AUTO_REUSE):
            assert cs.get_variable("w") is w
            with pytest.raises(ValueError, match="Trying to share variable s/w"):
                cs.get_variable("w", [3])


def test_session_run_nested_structures_and_names():
    Pair = collections.namedtuple("Pair", "a b")
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, 2], name="x")
        y = cs.reduce_sum(x * 2.0, name="y")
        z = cs.identity(x, name="z")
    with cs.Session(graph=g) as sess:
        feed = {x: [[1.0, 2.0]]}
        out = sess.run({"y": y, "pair": Pair(y, [z, "y:0"]), "t": (y,)}, feed)
        assert isinstance(out["pair"], Pair)
        assert float(out["y"]) == 6.0
        assert isinstance(out["t"], tuple)
        np.testing.assert_array_equal(out["pair"].b[0], [[1.0, 2.0]])
        assert float(out["pair"].b[1]) == 6.0
        assert sess.run(y.op, feed) is None


def test_values_live_in_the_session():
    g = cs.Graph()
    with g.as_default():
        v = cs.Variable(1.0, name="v")
        inc = cs.assign_add(v, 1.0)
        init = cs.global_variables_initializer()
    s1, s2 = cs.Session(graph=g), cs.Session(graph=g)
    s1.run(init)
    s2.run(init)
    s1.run(inc)
    s1.run(inc)
    assert float(s1.run(v)) == 3.0
    assert float(s2.run(v)) == 1.0


def test_reads_see_start_of_run_values():
    g = cs.Graph()
    with g.as_default():
        v = cs.Variable(1.0, name="v")
        upd = cs.assign(v, v * 10.0)
        read_after = v + 0.0
        init = cs.global_variables_initializer()
    with cs.Session(graph=g) as sess:
        sess.run(init)
        new, seen = sess.run([upd, read_after])
        assert float(new) == 10.0 and float(seen) == 1.0
        assert float(sess.run(v)) == 10.0


def test_unfed_placeholder_raises_invalid_argument_and_a_bad_feed_value_error_as_tf1():
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, 3], name="x")
        y = x * 2.0
    with cs.Session(graph=g) as sess:
        with pytest.raises(InvalidArgumentError, match="must feed a value for placeholder tensor 'x'"):
            sess.run(y)
        # TF1's client checks a fed value before the run: ValueError, not an op error.
        with pytest.raises(ValueError, match=r"shape \(2, 2\) for Tensor 'x:0'.*\(\?, 3\)"):
            sess.run(y, {x: np.zeros((2, 2))})
        with pytest.raises(ValueError, match="dtype"):
            sess.run(y, {x: np.array([["a", "b", "c"]])})
        with pytest.raises(TypeError, match="Cannot interpret feed_dict key as Tensor.*'nope'"):
            sess.run(y, {"nope:0": 1.0})


def test_a_0d_fetch_is_a_numpy_scalar_as_tf1():
    g = cs.Graph()
    with g.as_default():
        v = cs.Variable(2.0, name="v")
        s = cs.reduce_sum(v * 3.0)
        init = cs.global_variables_initializer()
    with cs.Session(graph=g) as sess:
        sess.run(init)
        got = sess.run({"s": s, "v": v, "both": [s, v]})
        for value in (got["s"], got["v"], *got["both"], sess.run(v)):
            assert type(value) is np.float32, type(value)
        assert got["s"] == 6.0


def test_uninitialized_variable_read_names_it():
    g = cs.Graph()
    with g.as_default():
        with cs.variable_scope("dense0"):
            w = cs.get_variable("w", [2])
    with cs.Session(graph=g) as sess:
        with pytest.raises(FailedPreconditionError, match="uninitialized value dense0/w"):
            sess.run(w)


def test_finalized_graph_refuses_new_ops():
    g = cs.Graph()
    with g.as_default():
        cs.constant(1.0)
    g.finalize()
    with g.as_default(), pytest.raises(RuntimeError, match="finalized"):
        cs.constant(2.0)


def test_params_override_session_values_for_one_run():
    g = cs.Graph()
    with g.as_default():
        v = cs.Variable(np.ones(2, np.float32), name="v")
        y = cs.reduce_sum(v)
    sess = cs.Session(graph=g)
    assert float(sess.run(y, params={"v": np.full(2, 5.0, np.float32)})) == 10.0
    with pytest.raises(FailedPreconditionError):
        sess.run(y)


def test_matmul_shape_error_names_both_shapes():
    g = cs.Graph()
    with g.as_default():
        a = cs.placeholder(cs.float32, [None, 3])
        b = cs.constant(np.zeros((4, 2), np.float32))
        with pytest.raises(ValueError, match=r"\(\?, 3\).*\(4, 2\)"):
            cs.matmul(a, b)


def test_device_strings_are_normalized_and_recorded():
    g = cs.Graph()
    with g.as_default():
        with g.device("cpu:1"):
            c = cs.constant(1.0)
        with pytest.raises(ValueError, match="Unknown device type 'tpu'"):
            with g.device("/tpu:0"):
                pass
    assert c.op.device == "/device:CPU:1"


def test_seeded_initial_values_are_reproducible():
    def build():
        g = cs.Graph()
        with g.as_default():
            cs.set_random_seed(7)
            w = cs.get_variable("w", [4, 5])
            init = cs.global_variables_initializer()
        s = cs.Session(graph=g)
        s.run(init)
        return s.run(w)

    np.testing.assert_array_equal(build(), build())


def test_make_callable_runs_as_run_with_feeds_by_position() -> None:
    import ckptsync as cs
    from ckptsync.errors import CkptsyncRuntimeError, CkptsyncTypeError

    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, 2], name="x")
        k = cs.placeholder(cs.float32, [], name="k")
        w = cs.Variable(np.array([[1.0], [2.0]], np.float32), name="w")
        y = cs.matmul(x, w) * k
        init = cs.global_variables_initializer()
    sess = cs.Session(graph=g)
    sess.run(init)
    call = sess.make_callable({"y": y, "w": w}, [x, "k:0"])
    xv = np.array([[1.0, 1.0], [2.0, 0.0]], np.float32)
    got = call(xv, 2.0)
    want = sess.run({"y": y, "w": w}, {x: xv, k: 2.0})
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["y"], [[6.0], [4.0]])
    # params= reads variables from a snapshot for that call only, as run(params=...).
    other = {"w": np.array([[0.0], [1.0]], np.float32)}
    np.testing.assert_array_equal(call(xv, 1.0, params=other)["y"], [[1.0], [0.0]])
    np.testing.assert_array_equal(call(xv, 1.0)["y"], [[3.0], [2.0]])
    with pytest.raises(CkptsyncTypeError, match="feeds 2 tensors; got 1"):
        call(xv)
    with pytest.raises(ValueError, match="Cannot feed value of shape"):
        call(np.ones((1, 3), np.float32), 1.0)  # wrong shape, as run says
    with pytest.raises(CkptsyncTypeError, match="unexpected"):
        call(xv, 1.0, options=None)
    assert sess.make_callable(y, [x, k], accept_options=True)(
        xv, 1.0, options=None, run_metadata=None).shape == (2, 1)
    sess.close()
    with pytest.raises(CkptsyncRuntimeError, match="closed"):
        call(xv, 1.0)


def test_a_variable_has_every_tensor_operator_as_tf1():
    g = cs.Graph()
    with g.as_default():
        v = cs.Variable(np.arange(6, dtype=np.int32).reshape(2, 3), name="v")
        f = cs.Variable(np.array([True, False]), name="f")
        out = {"row": v[0], "col": v[:, 1], "floordiv": v // 2, "mod": v % 4, "and": v & 3,
               "or": v | 8, "xor": v ^ 1, "invert": ~f, "rfloordiv": 7 // (v + 1)}
        init = cs.global_variables_initializer()
    with cs.Session(graph=g) as sess:
        sess.run(init)
        got = sess.run(out)
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    np.testing.assert_array_equal(got["row"], a[0])
    np.testing.assert_array_equal(got["col"], a[:, 1])
    np.testing.assert_array_equal(got["floordiv"], a // 2)
    np.testing.assert_array_equal(got["mod"], a % 4)
    np.testing.assert_array_equal(got["and"], a & 3)
    np.testing.assert_array_equal(got["or"], a | 8)
    np.testing.assert_array_equal(got["xor"], a ^ 1)
    np.testing.assert_array_equal(got["invert"], [False, True])
    np.testing.assert_array_equal(got["rfloordiv"], 7 // (a + 1))
