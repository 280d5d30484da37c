"""TF1's run-time checks as programs use them: an ``assert_*`` op guards what depends on
it through ``control_dependencies``, raises ``InvalidArgumentError`` with TF's message
when it runs and fails, and is decided at build time when its inputs are constants."""

from __future__ import annotations

import numpy as np
import pytest

import ckptsync as tf
from tests.gradcheck import check_case

RNG = np.random.default_rng(18)


def _any(shape):
    return RNG.uniform(-2, 2, shape)


# Central-difference checks (tests/runtime/test_op_gradients.py collects them): the ops of
# this module and of logging_ops / sort_ops that have a gradient.
GRAD_CASES = {
    "check_numerics": (lambda a: tf.check_numerics(a * a, "m"), [(_any, (2, 3))]),
    "print": (lambda a, b: tf.Print(a * b, [b, a], first_n=0), [(_any, (3,)), (_any, (3,))]),
    "sort_axis0": (lambda a: tf.sort(a, axis=0) * tf.constant(np.arange(8.0).reshape(4, 2)),
                   [(_any, (4, 2))]),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradient_matches_central_differences(name):
    build, gens = GRAD_CASES[name]
    check_case(build, gens, RNG, rtol=1e-5, atol=1e-5, name=name)


def test_a_guarded_train_step_stops_before_its_update():
    w = tf.Variable(1.0)
    x = tf.placeholder(tf.float32, [None])
    check = tf.debugging.assert_non_negative(x, message="inputs must be >= 0")
    with tf.control_dependencies([check]):
        step = tf.assign_add(w, tf.reduce_sum(x))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(step, {x: np.array([1.0, 2.0], np.float32)})
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"^assertion failed: \[inputs must be >= 0\.  \] \[Condition "
                                 r"x >= 0 did not hold element-wise:\] \[x \(Placeholder:0\) = "
                                 r"\] \[-1 5\]$") as info:
            sess.run(step, {x: np.array([-1.0, 5.0], np.float32)})
        assert info.value.op.type == "Assert"
        assert sess.run(w) == 4.0  # the failing run changed nothing


def test_constant_inputs_are_checked_when_the_graph_is_built():
    with pytest.raises(tf.errors.InvalidArgumentError, match="Condition x < y did not hold"):
        tf.assert_less(tf.constant([1, 5]), 3)
    ok = tf.assert_less(tf.constant([1, 2]), 3)
    assert ok.type == "Assert"
    with tf.Session() as sess:
        sess.run(ok)


def test_static_rank_and_dtype_checks_are_no_ops_or_errors():
    x = tf.placeholder(tf.float32, [None, 3])
    assert tf.assert_rank(x, 2).type == "NoOp"
    assert tf.assert_rank_at_least(x, 1).name == "assert_rank_at_least/static_checks_determined_all_ok"
    assert tf.assert_type(x, tf.float32).type == "NoOp"
    with pytest.raises(ValueError, match=r"Tensor Placeholder:0 must have rank 1\.  Received "
                                         r"rank 2, shape \(\?, 3\)"):
        tf.assert_rank(x, 1)
    with pytest.raises(TypeError, match="must be of type tf.int32; got tf.float32"):
        tf.assert_type(x, tf.int32)
    with pytest.raises(TypeError, match="must be of type <dtype: 'int32'>"):
        tf.assert_rank(x, np.int64(2))


def test_a_dynamic_rank_check_runs_in_the_session():
    x = tf.placeholder(tf.float32)
    with tf.control_dependencies([tf.assert_rank(x, 2)]):
        y = tf.identity(x)
    with tf.Session() as sess:
        assert sess.run(y, {x: np.ones((1, 1), np.float32)}).shape == (1, 1)
        with pytest.raises(tf.errors.InvalidArgumentError, match="must have rank"):
            sess.run(y, {x: np.ones(3, np.float32)})


def test_assert_needs_a_scalar_bool_condition():
    with pytest.raises(TypeError, match="condition must be bool"):
        tf.Assert(tf.constant(1.0), ["x"])
    with pytest.raises(ValueError, match="Shape must be rank 0 but is rank 1"):
        tf.Assert(tf.constant([True]), ["x"])
    c = tf.placeholder(tf.bool)
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError,
                                             match=r"In\[0\] should be a scalar: \[2\]"):
        sess.run(tf.Assert(c, ["x"]), {c: np.array([True, True])})


def test_check_numerics_names_what_it_found_and_checks_gradients():
    x = tf.placeholder(tf.float32, [2])
    y = tf.check_numerics(tf.log(x), "log of x")
    (g,) = tf.gradients(y, [x])
    with tf.Session() as sess:
        np.testing.assert_allclose(sess.run(y, {x: np.array([1.0, np.e], np.float32)}), [0, 1],
                                   atol=1e-6)
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match="^log of x : Tensor had Inf values$"):
            sess.run(y, {x: np.array([0.0, 1.0], np.float32)})
        checks = [op.attrs["message"] for op in tf.get_default_graph().get_operations()
                  if op.type == "CheckNumerics"]
        assert checks[:2] == ["log of x", "Not a number (NaN) or infinity (Inf) values detected in "
                                      "gradient. log of x"]
        (g_nan,) = tf.gradients(y, [x], grad_ys=tf.constant([np.nan, 1.0], tf.float32))
        with pytest.raises(tf.errors.InvalidArgumentError, match="detected in gradient"):
            sess.run(g_nan, {x: np.array([1.0, 1.0], np.float32)})


def test_debugging_namespace_is_the_top_level_functions():
    names = ("assert_equal assert_none_equal assert_less assert_less_equal assert_greater "
             "assert_greater_equal assert_positive assert_negative assert_non_negative "
             "assert_non_positive assert_rank assert_rank_at_least assert_type assert_integer "
             "assert_scalar check_numerics Assert is_finite is_nan is_inf").split()
    assert [n for n in names if getattr(tf.debugging, n) is not getattr(tf, n)] == []
