"""Golden cases, area ``misc``: the TF1 names of the new-user trial (session 22) that
give values: ``sort``/``argsort``, ``Print`` (its value and gradient), ``py_func`` /
``numpy_function`` (values, unknown shapes, no gradient, the error class of a raising
function), the ``assert_*`` family and ``Assert`` under ``control_dependencies``,
``check_numerics``, ``random_shuffle``'s shape. The text these write (messages, stderr)
is compared by ``text_cases.py``. See :mod:`cases` for the case format."""

from __future__ import annotations

import numpy as np

from .cases import case, rand

TIES = np.array([[3, 1, 2, 1], [0, 0, -1, 5], [2, 2, 2, 2]], np.float32)


# --------------------------------------------------------------------- sort / argsort
@case
def sort_ascending_ties(tf):
    x = tf.placeholder(tf.float32, [None, 4], name="x")
    return {"feeds": {x: TIES}, "fetch": {"v": tf.sort(x), "i": tf.argsort(x)},
            "grads": ("v", [x])}


@case
def sort_descending_ties_stable(tf):
    x = tf.placeholder(tf.float32, [None, 4], name="x")
    return {"feeds": {x: TIES},
            "fetch": {"v": tf.sort(x, direction="DESCENDING"),
                      "i": tf.argsort(x, direction="DESCENDING", stable=True)},
            "grads": ("v", [x])}


@case
def sort_axis0_float64(tf):
    x = tf.placeholder(tf.float64, [3, 2, 4], name="x")
    return {"feeds": {x: rand(3, 3, 2, 4, dtype=np.float64)},
            "fetch": {"v": tf.sort(x, axis=0), "i": tf.argsort(x, axis=1, direction="DESCENDING"),
                      "m": tf.sort(x, axis=-2)},
            "grads": ("v", [x])}


@case
def sort_int32_extremes(tf):
    v = np.array([[5, -2147483648, 2147483647, 0, -1, 5]], np.int32)
    x = tf.constant(v)
    return {"feeds": {}, "fetch": {"up": tf.sort(x), "down": tf.sort(x, direction="DESCENDING"),
                                   "i": tf.argsort(x)}}


@case
def sort_uint8_and_int64(tf):
    a = tf.constant(np.array([[200, 3, 255, 0, 3]], np.uint8))
    b = tf.constant(np.array([7, -9, 7, 2**40], np.int64))
    return {"feeds": {}, "fetch": {"a": tf.sort(a), "ai": tf.argsort(a),
                                   "b": tf.sort(b, direction="DESCENDING")}}


@case
def sort_unknown_dims(tf):
    x = tf.placeholder(tf.float32, [None, None], name="x")
    return {"feeds": {x: rand(4, 2, 5)}, "fetch": {"v": tf.sort(x), "i": tf.argsort(x, axis=0)}}


@case
def sort_bad_direction(tf):
    return {"feeds": {}, "fetch": {"v": tf.sort(tf.constant([1.0, 2.0]), direction="UP")}}


@case
def sort_axis_tensor_not_constant(tf):
    a = tf.placeholder(tf.int32, [], name="a")
    return {"feeds": {}, "fetch": {"v": tf.sort(tf.constant([1.0, 2.0]), axis=a)}}


# --------------------------------------------------------------------- Print
@case
def print_is_identity_with_gradient(tf):
    x = tf.placeholder(tf.float32, [2, 3], name="x")
    y = tf.Print(x * 2.0, [x, tf.shape(x), "text"], message="m: ", first_n=1, summarize=2)
    return {"feeds": {x: rand(5, 2, 3)}, "fetch": {"y": y}, "grads": ("y", [x])}


@case
def print_int_passthrough(tf):
    x = tf.placeholder(tf.int64, [None], name="x")
    y = tf.Print(x, [x])
    return {"feeds": {x: np.array([1, 2, 3], np.int64)}, "fetch": {"y": y + 1}}


@case
def print_v2_under_control_dependencies(tf):
    x = tf.placeholder(tf.float32, [3], name="x")
    p = tf.print("x:", x)
    with tf.control_dependencies([p]):
        y = tf.identity(x * 3.0)
    return {"feeds": {x: rand(6, 3)}, "fetch": {"y": y}}


# --------------------------------------------------------------------- py_func
@case
def py_func_single_output(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    y = tf.py_func(lambda a: (a * 2 + 1).astype(np.float32), [x], tf.float32)
    return {"feeds": {x: rand(7, 2, 3)}, "fetch": {"y": y, "z": y + x}}


@case
def py_func_list_outputs_stateless(tf):
    x = tf.placeholder(tf.float32, [4], name="x")
    n = tf.constant(3, tf.int64)
    outs = tf.py_func(lambda a, b: [a[::-1].copy(), np.int64(b * a.shape[0])], [x, n],
                      [tf.float32, tf.int64], stateful=False)
    one = tf.py_func(lambda a: a.sum(), [x], [tf.float32])
    return {"feeds": {x: rand(8, 4)}, "fetch": {"r": outs[0], "n": outs[1], "one": one[0]}}


@case
def numpy_function_values(tf):
    x = tf.placeholder(tf.float64, [2, 2], name="x")
    y = tf.numpy_function(lambda a: np.linalg.inv(a), [x], tf.float64)
    return {"feeds": {x: np.array([[2.0, 1.0], [1.0, 3.0]])}, "fetch": {"y": y}}


@case
def py_func_string_in_and_out(tf):
    s = tf.constant(["ab", "cde"])
    y = tf.py_func(lambda a: np.array([v.upper() + b"!" for v in a], dtype=object), [s],
                   tf.string)
    n = tf.py_func(lambda a: np.array([len(v) for v in a], np.int32), [s], tf.int32)
    return {"feeds": {}, "fetch": {"n": n}, "before": [(y, 1)]}


@case
def py_func_has_no_gradient(tf):
    x = tf.placeholder(tf.float32, [3], name="x")
    y = tf.py_func(lambda a: a * a, [x], tf.float32)
    y.set_shape([3])
    z = y + x
    return {"feeds": {x: rand(9, 3)}, "fetch": {"z": z}, "grads": ("z", [x])}


@case
def py_func_wrong_dtype(tf):
    x = tf.placeholder(tf.float32, [3], name="x")
    y = tf.py_func(lambda a: a.astype(np.float64), [x], tf.float32)
    return {"feeds": {x: rand(10, 3)}, "fetch": {"y": y}}


@case
def py_func_python_float_is_float64(tf):
    x = tf.placeholder(tf.float32, [3], name="x")
    return {"feeds": {x: rand(10, 3)},
            "fetch": {"y": tf.py_func(lambda a: 1.5, [x], tf.float32)}}


@case
def py_func_raises_value_error(tf):
    def f(a):
        raise ValueError("bad value")
    x = tf.placeholder(tf.float32, [3], name="x")
    return {"feeds": {x: rand(11, 3)}, "fetch": {"y": tf.py_func(f, [x], tf.float32)}}


@case
def py_func_raises_stop_iteration(tf):
    def f(a):
        raise StopIteration("done")
    x = tf.placeholder(tf.float32, [3], name="x")
    return {"feeds": {x: rand(11, 3)}, "fetch": {"y": tf.py_func(f, [x], tf.float32)}}


@case
def py_func_raises_key_error(tf):
    def f(a):
        return {}["k"]
    x = tf.placeholder(tf.float32, [3], name="x")
    return {"feeds": {x: rand(11, 3)}, "fetch": {"y": tf.py_func(f, [x], tf.float32)}}


@case
def py_func_raises_not_implemented(tf):
    def f(a):
        raise NotImplementedError("later")
    x = tf.placeholder(tf.float32, [3], name="x")
    return {"feeds": {x: rand(11, 3)}, "fetch": {"y": tf.py_func(f, [x], tf.float32)}}


@case
def py_func_wrong_count(tf):
    x = tf.placeholder(tf.float32, [3], name="x")
    y = tf.py_func(lambda a: [a, a], [x], [tf.float32, tf.float32, tf.float32])
    return {"feeds": {x: rand(11, 3)}, "fetch": {"y": y[0]}}


# --------------------------------------------------------------------- asserts
def _guarded(tf, check, x):
    with tf.control_dependencies([check]):
        return tf.identity(x)


@case
def assert_family_pass(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    i = tf.placeholder(tf.int32, [None], name="i")
    checks = [tf.assert_equal(x, x * 1.0), tf.assert_none_equal(x, x - 1.0),
              tf.assert_less(x, 10.0), tf.assert_less_equal(x, x),
              tf.assert_greater(x + 10.0, x), tf.assert_greater_equal(x, -10.0),
              tf.assert_positive(x + 10.0), tf.assert_negative(x - 10.0),
              tf.assert_non_negative(i), tf.assert_non_positive(-i),
              tf.assert_rank(x, 2), tf.assert_rank_at_least(x, 1),
              tf.debugging.assert_equal(i, i), tf.assert_type(x, tf.float32),
              tf.assert_integer(i), tf.Assert(tf.reduce_all(x < 5.0), [x, "ok"])]
    with tf.control_dependencies(checks):
        y = tf.identity(x * 2.0)
    return {"feeds": {x: rand(12, 2, 3), i: np.array([0, 1, 2], np.int32)},
            "fetch": {"y": y, "s": tf.assert_scalar(tf.constant(1.0))}}


@case
def assert_equal_fails_at_run_time(tf):
    x = tf.placeholder(tf.float32, [None], name="x")
    return {"feeds": {x: np.array([1, 2, 3], np.float32)},
            "fetch": {"y": _guarded(tf, tf.assert_equal(x, 2.0, message="not two"), x)}}


@case
def assert_less_fails_at_run_time(tf):
    x = tf.placeholder(tf.int32, [None], name="x")
    return {"feeds": {x: np.array([1, 7], np.int32)},
            "fetch": {"y": _guarded(tf, tf.debugging.assert_less(x, 5), x)}}


@case
def assert_positive_fails_at_run_time(tf):
    x = tf.placeholder(tf.float32, [None], name="x")
    return {"feeds": {x: np.array([1, 0], np.float32)},
            "fetch": {"y": _guarded(tf, tf.assert_positive(x), x)}}


@case
def assert_non_negative_fails_at_run_time(tf):
    x = tf.placeholder(tf.int64, [None], name="x")
    return {"feeds": {x: np.array([4, -1], np.int64)},
            "fetch": {"y": _guarded(tf, tf.assert_non_negative(x), x)}}


@case
def assert_greater_fails_statically(tf):
    return {"feeds": {}, "fetch": {"y": _guarded(tf, tf.assert_greater(tf.constant([1, 2]), 3),
                                                 tf.constant(1.0))}}


@case
def assert_rank_fails_statically(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    return {"feeds": {}, "fetch": {"y": _guarded(tf, tf.assert_rank(x, 3), x)}}


@case
def assert_rank_fails_at_run_time(tf):
    x = tf.placeholder(tf.float32, None, name="x")
    return {"feeds": {x: np.zeros((2, 2), np.float32)},
            "fetch": {"y": _guarded(tf, tf.assert_rank(x, 1), x)}}


@case
def assert_rank_at_least_passes_at_run_time(tf):
    x = tf.placeholder(tf.float32, None, name="x")
    return {"feeds": {x: np.zeros((2, 2), np.float32)},
            "fetch": {"y": _guarded(tf, tf.assert_rank_at_least(x, 2), x)}}


@case
def assert_type_fails(tf):
    x = tf.placeholder(tf.float32, [2], name="x")
    return {"feeds": {}, "fetch": {"y": _guarded(tf, tf.assert_type(x, tf.int32), x)}}


@case
def assert_integer_fails(tf):
    x = tf.placeholder(tf.float32, [2], name="x")
    return {"feeds": {}, "fetch": {"y": _guarded(tf, tf.assert_integer(x), x)}}


@case
def assert_scalar_fails(tf):
    return {"feeds": {}, "fetch": {"y": tf.assert_scalar(tf.constant([1.0]))}}


@case
def assert_op_fails_with_data(tf):
    x = tf.placeholder(tf.float32, [None], name="x")
    check = tf.Assert(tf.reduce_all(x > 0.0), ["x was", x], summarize=1)
    return {"feeds": {x: np.array([1, -1], np.float32)}, "fetch": {"y": _guarded(tf, check, x)}}


# --------------------------------------------------------------------- check_numerics
@case
def check_numerics_pass_and_gradient(tf):
    x = tf.placeholder(tf.float32, [2, 2], name="x")
    y = tf.check_numerics(x * 3.0, "y is bad")
    v = tf.verify_tensor_all_finite(x, "x is bad")
    return {"feeds": {x: rand(13, 2, 2)}, "fetch": {"y": y, "v": v}, "grads": ("y", [x])}


@case
def check_numerics_nan(tf):
    x = tf.placeholder(tf.float32, [2], name="x")
    return {"feeds": {x: np.array([1, np.nan], np.float32)},
            "fetch": {"y": tf.check_numerics(x, "found")}}


@case
def check_numerics_int_input(tf):
    return {"feeds": {}, "fetch": {"y": tf.check_numerics(tf.constant([1, 2]), "m")}}


# --------------------------------------------------------------------- random namespace
@case
def random_namespace_shapes(tf):
    tf.set_random_seed(3)
    n = tf.random.normal([2, 3])
    u = tf.random.uniform([4], minval=2.0, maxval=3.0)
    t = tf.random.truncated_normal([5], stddev=0.5)
    s = tf.random.shuffle(tf.constant(np.arange(12).reshape(6, 2).astype(np.int64)))
    s2 = tf.random_shuffle(tf.constant(np.arange(5, dtype=np.float32)), seed=1)
    return {"feeds": {}, "fetch": {
        "n": tf.shape(n), "u_in_range": tf.reduce_all((u >= 2.0) & (u < 3.0)),
        "t_bounded": tf.reduce_all(tf.abs(t) <= 1.0), "s_rows": tf.reduce_sum(s, axis=0),
        "s_sorted": tf.sort(s[:, 0]), "s2_sum": tf.reduce_sum(s2)}}
