"""variable_scope / get_variable exactly as TF1 (TF1_SEMANTICS.md §1)."""

from __future__ import annotations

import numpy as np
import pytest

import ckptsync as cs


@pytest.fixture
def g():
    graph = cs.Graph()
    with graph.as_default():
        yield graph


def test_reuse_is_inherited_and_false_means_inherit(g):
    with cs.variable_scope("a"):
        w = cs.get_variable("w", [1])
    with cs.variable_scope("a", reuse=True):
        with cs.variable_scope("b", reuse=False) as b:
            assert b.reuse is True
        assert cs.get_variable("w", [1]) is w


def test_invalid_reuse_value_and_missing_names(g):
    with pytest.raises(ValueError, match="reuse"):
        with cs.variable_scope("a", reuse="yes"):
            pass
    with pytest.raises(ValueError, match="reuse=True cannot be used without a name_or_scope"):
        with cs.variable_scope(None, default_name="d", reuse=True):
            pass
    with pytest.raises(TypeError, match="default_name is None then name_or_scope is required"):
        with cs.variable_scope(None):
            pass
    with pytest.raises(TypeError, match="auxiliary_name_scope"):
        with cs.variable_scope("a", auxiliary_name_scope=1):
            pass


def test_explicit_names_never_uniquified_but_name_scopes_are(g):
    with cs.variable_scope("tower"):
        v1 = cs.get_variable("w", [1])
        op1 = cs.constant(1.0, name="c")
    with cs.variable_scope("tower"):
        op2 = cs.constant(1.0, name="c")
        with pytest.raises(ValueError, match="Variable tower/w already exists, disallowed"):
            cs.get_variable("w", [1])
    assert v1.name == "tower/w:0"
    assert op1.name == "tower/c:0" and op2.name == "tower_1/c:0"


def test_default_names_are_uniquified_among_siblings(g):
    names = []
    for _ in range(3):
        with cs.variable_scope(None, default_name="d"):
            names.append(cs.get_variable("w", [1]).name)
    assert names == ["d/w:0", "d_1/w:0", "d_2/w:0"]
    with cs.variable_scope("outer"):
        with cs.variable_scope(None, default_name="d"):
            assert cs.get_variable("w", [1]).name == "outer/d/w:0"
    # Counts for children reset when the parent string scope exits and is re-entered.
    with cs.variable_scope("outer", reuse=cs.AUTO_REUSE):
        with cs.variable_scope(None, default_name="d"):
            assert cs.get_variable("w", [1]).name == "outer/d/w:0"


def test_reentering_a_captured_scope_object(g):
    with cs.variable_scope("outer") as outer:
        pass
    with cs.variable_scope("other"):
        with cs.variable_scope(outer) as s:
            v = cs.get_variable("w", [1])
            c = cs.constant(1.0, name="c")
        assert s.original_name_scope == outer.original_name_scope
    assert v.name == "outer/w:0"
    assert c.name == "other/outer/c:0"
    with cs.variable_scope(outer, reuse=True):
        assert cs.get_variable("w", [1]) is v


def test_reuse_variables_is_permanent(g):
    with cs.variable_scope("s") as s:
        w = cs.get_variable("w", [1])
        s.reuse_variables()
        assert cs.get_variable("w") is w
    assert s.reuse is True


def test_name_scope_changes_ops_and_variables_but_not_get_variable(g):
    with cs.name_scope("ns"):
        with cs.variable_scope("tower"):
            v = cs.get_variable("w", [1])
            op = cs.constant(0.0, name="c")
        plain = cs.Variable(1.0, name="v")
    dup = cs.Variable(1.0, name="v")
    dup2 = cs.Variable(1.0, name="v")
    assert v.name == "tower/w:0"
    assert op.name == "ns/tower/c:0"
    assert plain.name == "ns/v:0"
    assert dup.name == "v:0" and dup2.name == "v_1:0"


def test_improper_nesting_raises(g):
    a = cs.variable_scope("a")
    b = cs.variable_scope("b")
    a.__enter__()
    b.__enter__()
    with pytest.raises(RuntimeError, match="Improper nesting of variable_scope"):
        a.__exit__(None, None, None)


def test_scope_initializer_and_dtype_and_precedence(g):
    with cs.variable_scope("s", initializer=cs.constant_initializer(3.0), dtype=cs.float64):
        a = cs.get_variable("a", [2])
        b = cs.get_variable("b", [2], initializer=cs.zeros_initializer())
        with cs.variable_scope("inner"):
            c = cs.get_variable("c", [1])
    d = cs.get_variable("d", [2])
    assert a.dtype == cs.float64 and c.dtype == cs.float64 and d.dtype == cs.float32
    sess = cs.Session(graph=g)
    sess.run(cs.global_variables_initializer())
    a_v, b_v, c_v = sess.run([a, b, c])
    assert list(a_v) == [3.0, 3.0] and list(b_v) == [0.0, 0.0] and list(c_v) == [3.0]


@pytest.mark.parametrize(("shape", "fan_in", "fan_out"), [
    ([], 1, 1), ([5], 5, 5), ([3, 7], 3, 7), ([2, 3, 4, 5], 2 * 3 * 4, 2 * 3 * 5)])
def test_glorot_uniform_default_uses_tf_fans(g, shape, fan_in, fan_out):
    cs.set_random_seed(5)  # seeded: an unseeded 21-value draw missed 0.8 * limit 1% of runs
    v = cs.get_variable("w", shape)
    sess = cs.Session(graph=g)
    sess.run(v.initializer)
    val = sess.run(v)
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    assert np.all(np.abs(val) <= limit)
    if val.size > 20:
        assert np.abs(val).max() > 0.8 * limit


def test_default_initializers_by_dtype(g):
    i = cs.get_variable("i", [2], dtype=cs.int32)
    b = cs.get_variable("b", [2], dtype=cs.bool)
    with pytest.raises(ValueError, match="An initializer for variable c of complex64 is required"):
        cs.get_variable("c", [2], dtype=cs.complex64)
    sess = cs.Session(graph=g)
    sess.run(cs.global_variables_initializer())
    assert list(sess.run(i)) == [0, 0] and list(sess.run(b)) == [False, False]


def test_constant_initializers_give_the_shape(g):
    v = cs.get_variable("v", initializer=np.arange(6, dtype=np.int32).reshape(2, 3))
    t = cs.get_variable("t", initializer=cs.constant([1.0, 2.0]))
    assert v.get_shape().as_list() == [2, 3] and v.dtype == cs.int32
    assert t.get_shape().as_list() == [2]
    with pytest.raises(ValueError, match="If initializer is a constant, do not specify shape"):
        cs.get_variable("x", [2], initializer=cs.constant([1.0, 2.0]))
    with pytest.raises(ValueError, match="don't match"):
        cs.get_variable("y", initializer=cs.constant([1, 2]), dtype=cs.float32)
    with pytest.raises(ValueError, match="shape should be fully defined"):
        cs.get_variable("z", initializer=cs.zeros_initializer())
    z = cs.get_variable("zf", initializer=lambda: np.ones(3, np.float32))
    assert z.get_shape().as_list() == [3]


def test_sharing_checks_shape_and_dtype(g):
    with cs.variable_scope("s"):
        cs.get_variable("w", [2, 3])
    with cs.variable_scope("s", reuse=True):
        assert cs.get_variable("w", [None, 3]).get_shape().as_list() == [2, 3]
        with pytest.raises(ValueError, match=r"Trying to share variable s/w, but specified shape"):
            cs.get_variable("w", [3, 3])
        with pytest.raises(ValueError, match=r"Trying to share variable s/w, but specified dtype"):
            cs.get_variable("w", [2, 3], dtype=cs.float64)


def test_collections_and_prefix_filtering(g):
    with cs.variable_scope("foo") as foo:
        a = cs.get_variable("a", [1])
        loc = cs.get_local_variable("l", [1])
        n = cs.get_variable("n", [1], trainable=False)
    with cs.variable_scope("foo_bar"):
        b = cs.get_variable("b", [1])
    only = cs.get_variable("only", [1], collections=["mine"])
    assert foo.global_variables() == [a, n]
    assert foo.trainable_variables() == [a]
    assert foo.local_variables() == [loc]
    assert cs.global_variables() == [a, n, b]
    # A given collections list replaces GLOBAL_VARIABLES; trainable still adds TRAINABLE.
    assert cs.trainable_variables() == [a, b, only]
    assert g.get_collection("mine") == [only]
    assert cs.get_variable_scope().global_variables() == [a, n, b]


def test_global_step_helpers(g):
    assert cs.train.get_global_step() is None
    step = cs.train.create_global_step()
    assert step.name == "global_step:0" and step.dtype == cs.int64 and not step.trainable
    with pytest.raises(ValueError, match='"global_step" already exists.'):
        cs.train.create_global_step()
    assert cs.train.get_or_create_global_step() is step
    sess = cs.Session(graph=g)
    sess.run(step.initializer)
    assert cs.train.global_step(sess, step) == 0


def test_non_integer_global_step_is_a_type_error(g):
    cs.Variable(0.0, name="global_step")
    with pytest.raises(TypeError, match="does not have integer type"):
        cs.train.get_global_step()
