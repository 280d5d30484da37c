"""Golden cases, area ``core``: the first ops (arithmetic, reductions, matmul, softmax
losses, names and scopes). See :mod:`cases` for the case format."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .cases import case, rand


def _binary(tf: Any, op: str, a: np.ndarray, b: np.ndarray) -> dict:
    x = tf.placeholder(tf.float32, [None, a.shape[1]], name="x")
    y = tf.placeholder(tf.float32, list(b.shape), name="y")
    out = getattr(tf, op)(x, y)
    return {"feeds": {x: a, y: b}, "fetch": {"out": out}, "grads": ("out", [x, y])}


@case
def add_broadcast_row(tf):
    return _binary(tf, "add", rand(1, 3, 4), rand(2, 4))


@case
def subtract_broadcast_column(tf):
    return _binary(tf, "subtract", rand(3, 3, 4), rand(4, 3, 1))


@case
def multiply_broadcast(tf):
    return _binary(tf, "multiply", rand(5, 2, 3), rand(6, 1, 3))


@case
def divide_same_shape(tf):
    return _binary(tf, "divide", rand(7, 2, 3), rand(8, 2, 3, low=0.5, high=2.0))


@case
def maximum_broadcast(tf):
    return _binary(tf, "maximum", rand(9, 3, 4), rand(10, 4))


@case
def minimum_broadcast(tf):
    return _binary(tf, "minimum", rand(11, 3, 4), rand(12, 1, 4))


@case
def operators_on_tensors(tf):
    a = tf.placeholder(tf.float32, [2, 3], name="a")
    b = tf.placeholder(tf.float32, [3], name="b")
    out = (a + b) * 2.0 - b / 4.0 - (-a)
    return {"feeds": {a: rand(13, 2, 3), b: rand(14, 3, low=0.5)}, "fetch": {"out": out},
            "grads": ("out", [a, b])}


def _unary(tf: Any, fn: Callable[[Any], Any], x: np.ndarray) -> dict:
    t = tf.placeholder(tf.float32, [None, x.shape[1]], name="x")
    out = fn(t)
    return {"feeds": {t: x}, "fetch": {"out": out}, "grads": ("out", [t])}


@case
def negative(tf):
    return _unary(tf, tf.negative, rand(15, 2, 3))


@case
def square(tf):
    return _unary(tf, tf.square, rand(16, 2, 3))


@case
def sqrt(tf):
    return _unary(tf, tf.sqrt, rand(17, 2, 3, low=0.1))


@case
def exp(tf):
    return _unary(tf, tf.exp, rand(18, 2, 3))


@case
def log(tf):
    return _unary(tf, tf.log, rand(19, 2, 3, low=0.1))


@case
def abs_(tf):
    return _unary(tf, tf.abs, rand(20, 2, 3))


@case
def relu(tf):
    return _unary(tf, tf.nn.relu, rand(21, 3, 4))


@case
def sigmoid(tf):
    return _unary(tf, tf.sigmoid, rand(22, 3, 4))


@case
def tanh(tf):
    return _unary(tf, tf.tanh, rand(23, 3, 4))


@case
def softmax(tf):
    return _unary(tf, tf.nn.softmax, rand(24, 3, 5))


@case
def log_softmax(tf):
    return _unary(tf, tf.nn.log_softmax, rand(25, 3, 5))


@case
def matmul(tf):
    a = tf.placeholder(tf.float32, [None, 4], name="a")
    b = tf.placeholder(tf.float32, [4, 3], name="b")
    return {"feeds": {a: rand(26, 2, 4), b: rand(27, 4, 3)}, "fetch": {"out": tf.matmul(a, b)},
            "grads": ("out", [a, b])}


@case
def matmul_transposed(tf):
    a = tf.placeholder(tf.float32, [4, 2], name="a")
    b = tf.placeholder(tf.float32, [3, 4], name="b")
    out = tf.matmul(a, b, transpose_a=True, transpose_b=True)
    return {"feeds": {a: rand(28, 4, 2), b: rand(29, 3, 4)}, "fetch": {"out": out},
            "grads": ("out", [a, b])}


@case
def bias_add(tf):
    a = tf.placeholder(tf.float32, [None, 3], name="a")
    b = tf.placeholder(tf.float32, [3], name="b")
    return {"feeds": {a: rand(30, 2, 3), b: rand(31, 3)}, "fetch": {"out": tf.nn.bias_add(a, b)},
            "grads": ("out", [a, b])}


def _reduce(tf: Any, name: str, **kw: Any) -> dict:
    x = tf.placeholder(tf.float32, [2, 3, 4], name="x")
    out = getattr(tf, name)(x, **kw)
    return {"feeds": {x: rand(32, 2, 3, 4)}, "fetch": {"out": out}, "grads": ("out", [x])}


@case
def reduce_sum_all(tf):
    return _reduce(tf, "reduce_sum")


@case
def reduce_sum_axis1_keepdims(tf):
    return _reduce(tf, "reduce_sum", axis=1, keepdims=True)


@case
def reduce_mean_axes(tf):
    return _reduce(tf, "reduce_mean", axis=[0, 2])


@case
def reduce_max_last(tf):
    return _reduce(tf, "reduce_max", axis=-1)


@case
def argmax_axis1(tf):
    x = tf.placeholder(tf.float32, [None, 5], name="x")
    return {"feeds": {x: rand(33, 3, 5)}, "fetch": {"out": tf.argmax(x, axis=1)}}


@case
def equal_and_cast(tf):
    a = tf.placeholder(tf.int64, [4], name="a")
    b = tf.placeholder(tf.int64, [4], name="b")
    eq = tf.equal(a, b)
    return {"feeds": {a: np.array([1, 2, 3, 4]), b: np.array([1, 0, 3, 0])},
            "fetch": {"eq": eq, "mean": tf.reduce_mean(tf.cast(eq, tf.float32))}}


@case
def round_half_to_even(tf):
    x = tf.placeholder(tf.float32, [6], name="x")
    return {"feeds": {x: np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], np.float32)},
            "fetch": {"out": tf.round(x)}}


@case
def reshape_and_transpose(tf):
    x = tf.placeholder(tf.float32, [2, 3, 4], name="x")
    r = tf.reshape(x, [-1, 4])
    t = tf.transpose(x, [2, 0, 1])
    return {"feeds": {x: rand(34, 2, 3, 4)}, "fetch": {"r": r, "t": t}, "grads": ("t", [x])}


@case
def concat_axis1(tf):
    a = tf.placeholder(tf.float32, [2, 3], name="a")
    b = tf.placeholder(tf.float32, [2, 2], name="b")
    out = tf.concat([a, b], axis=1)
    return {"feeds": {a: rand(35, 2, 3), b: rand(36, 2, 2)}, "fetch": {"out": out},
            "grads": ("out", [a, b])}


@case
def fills_and_likes(tf):
    x = tf.placeholder(tf.float32, [2, 3], name="x")
    return {"feeds": {x: rand(37, 2, 3)},
            "fetch": {"fill": tf.fill([2, 2], 7.0), "zeros": tf.zeros([3]),
                      "ones": tf.ones([2, 1], tf.int32), "zl": tf.zeros_like(x),
                      "ol": tf.ones_like(x)}}


@case
def identity_and_stop_gradient(tf):
    x = tf.placeholder(tf.float32, [3], name="x")
    out = tf.identity(x) * tf.stop_gradient(x * 2.0)
    return {"feeds": {x: rand(38, 3)}, "fetch": {"out": out}, "grads": ("out", [x])}


@case
def sparse_softmax_cross_entropy(tf):
    logits = tf.placeholder(tf.float32, [None, 4], name="logits")
    labels = tf.placeholder(tf.int64, [None], name="labels")
    out = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return {"feeds": {logits: rand(39, 3, 4), labels: np.array([0, 3, 1])},
            "fetch": {"out": out}, "grads": ("out", [logits])}


@case
def softmax_cross_entropy_v1(tf):
    logits = tf.placeholder(tf.float32, [None, 4], name="logits")
    labels = tf.placeholder(tf.float32, [None, 4], name="labels")
    out = tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    probs = np.random.RandomState(40).dirichlet(np.ones(4), 3).astype(np.float32)
    return {"feeds": {logits: rand(41, 3, 4), labels: probs}, "fetch": {"out": out},
            "grads": ("out", [logits])}


@case
def variable_names_in_scopes(tf):
    with tf.variable_scope("dense0"):
        w = tf.get_variable("w", [3, 2], initializer=tf.ones_initializer())
        b = tf.get_variable("b", [2], initializer=tf.zeros_initializer())
    with tf.variable_scope("dense0", reuse=True):
        w_again = tf.get_variable("w")
    with tf.name_scope("ns"):
        v = tf.Variable(tf.zeros([2]), name="v")
    return {"feeds": {}, "fetch": {"w": w_again, "b": b, "v": v},
            "names": [w.name, b.name, w_again.name, v.name, v.op.name], "init": True}


@case
def default_op_names(tf):
    x = tf.placeholder(tf.float32, [2], name="x")
    ops = [x + 1.0, x * 2.0, x - 1.0, x / 2.0, 2.0 + x, 3.0 * x, 1.0 - x, 1.0 / x, x ** 2.0,
           -x, tf.add(x, x), tf.multiply(x, x), tf.subtract(x, x), tf.divide(x, x),
           tf.matmul(tf.reshape(x, [1, 2]), tf.ones([2, 1])), tf.reduce_sum(x),
           tf.reduce_mean(x), tf.nn.relu(x), tf.sigmoid(x), tf.square(x), tf.exp(x)]
    return {"feeds": {x: rand(42, 2)}, "fetch": {f"o{i}": o for i, o in enumerate(ops)},
            "names": [o.op.name for o in ops]}


@case
def int_reduce_sum_keeps_int32(tf):
    x = tf.placeholder(tf.int32, [2, 3], name="x")
    return {"feeds": {x: np.arange(6, dtype=np.int32).reshape(2, 3)},
            "fetch": {"out": tf.reduce_sum(x, axis=1)}}


@case
def mismatched_matmul_shapes_raise(tf):
    a = tf.placeholder(tf.float32, [2, 3], name="a")
    b = tf.placeholder(tf.float32, [4, 5], name="b")
    return {"feeds": {}, "fetch": {"out": tf.matmul(a, b)}}


@case
def get_variable_twice_without_reuse_raises(tf):
    tf.get_variable("w", [2])
    tf.get_variable("w", [2])
    return {"feeds": {}, "fetch": {}}


@case
def reuse_of_a_missing_variable_raises(tf):
    with tf.variable_scope("s", reuse=True):
        tf.get_variable("w", [2])
    return {"feeds": {}, "fetch": {}}


@case
def default_name_scopes_are_uniquified(tf):
    names = []
    for _ in range(2):
        with tf.variable_scope(None, default_name="dense"):
            names.append(tf.get_variable("w", [1]).name)
    with tf.name_scope("ns"):
        with tf.variable_scope("tower"):
            v = tf.get_variable("v", [1])
            op = tf.identity(v, name="read")
    t1 = tf.Variable(0.0, name="t")
    t2 = tf.Variable(0.0, name="t")
    return {"feeds": {}, "fetch": {}, "names": [*names, v.name, op.name, t1.name, t2.name]}


@case
def shapes_through_reshape_concat_transpose(tf):
    x = tf.placeholder(tf.float32, [None, 3, 4], name="x")
    outs = {"reshape": tf.reshape(x, [-1, 12]), "concat": tf.concat([x, x], axis=-1),
            "transpose": tf.transpose(x), "expand": tf.expand_dims(x, 1),
            "squeeze": tf.squeeze(tf.expand_dims(x, 1), [1])}
    return {"feeds": {x: rand(43, 2, 3, 4)}, "fetch": outs, "grads": ("concat", [x])}


@case
def cast_truncates_toward_zero(tf):
    x = tf.placeholder(tf.float32, [4], name="x")
    return {"feeds": {x: np.array([-1.7, -0.2, 0.2, 1.7], np.float32)},
            "fetch": {"i": tf.cast(x, tf.int32), "b": tf.cast(x, tf.bool)}}


@case
def int_mean_keeps_int(tf):
    x = tf.placeholder(tf.int32, [2, 3], name="x")
    return {"feeds": {x: np.array([[1, 2, 4], [3, 5, 8]], np.int32)},
            "fetch": {"out": tf.reduce_mean(x, axis=1), "max": tf.reduce_max(x, axis=0)}}


@case
def comparisons_and_where_dtype(tf):
    a = tf.placeholder(tf.float32, [3], name="a")
    b = tf.placeholder(tf.float32, [3], name="b")
    return {"feeds": {a: np.array([1, 2, 3], np.float32), b: np.array([3, 2, 1], np.float32)},
            "fetch": {"lt": a < b, "ge": a >= b, "ne": tf.not_equal(a, b)}}


@case
def pow_and_sign(tf):
    a = tf.placeholder(tf.float32, [3], name="a")
    out = tf.pow(a, 3.0) + tf.sign(a)
    return {"feeds": {a: np.array([0.5, 1.5, 2.0], np.float32)}, "fetch": {"out": out},
            "grads": ("out", [a])}


@case
def add_n_and_gradient_of_sum(tf):
    a = tf.placeholder(tf.float32, [2, 2], name="a")
    out = tf.add_n([a, a * 2.0, tf.square(a)])
    return {"feeds": {a: rand(44, 2, 2)}, "fetch": {"out": out}, "grads": ("out", [a])}


@case
def global_step_variable(tf):
    step = tf.train.get_or_create_global_step()
    return {"feeds": {}, "fetch": {"step": step}, "names": [step.name], "init": True}


@case
def matmul_of_mismatched_dtypes_raises(tf):
    a = tf.placeholder(tf.float32, [2, 2], name="a")
    b = tf.placeholder(tf.float64, [2, 2], name="b")
    return {"feeds": {}, "fetch": {"out": tf.matmul(a, b)}}
