"""Golden cases, area ``ordering``: within one ``Session.run``, a read of a variable sees
every write of it ordered before the read (a data or control dependency), as TF1's ref
variables: assign / assign_add / scatter_* / an optimizer's update, then a read under
``control_dependencies``; chains of updates of one variable; reads after a ``group``;
in a ``while_loop`` body or cond, a ``cond`` branch, after a ``cond`` that assigns;
``tf.metrics``-style updates; and ``add_n`` of one input. Most cases run their fetch
several times (``runs``), so a later run builds on the writes of the earlier ones.

Only reads ordered after the write are cases: TensorFlow gives an unordered read either
value. See :mod:`cases` for the case format."""

from __future__ import annotations

from typing import Any

import numpy as np

from .cases import case


def _var(tf: Any, value: Any, name: str = "v", resource: bool = False) -> Any:
    return tf.Variable(value, use_resource=resource, name=name)


def _assign_then_identity(tf: Any, resource: bool) -> dict:
    v = _var(tf, 1.0, resource=resource)
    a = tf.assign(v, 5.0)
    with tf.control_dependencies([a]):
        r = tf.identity(v)
    return {"feeds": {}, "init": True, "fetch": {"r": r}}


@case
def assign_then_identity(tf):
    return _assign_then_identity(tf, False)


@case
def resource_assign_then_identity(tf):
    return _assign_then_identity(tf, True)


@case
def assign_then_read_value(tf):
    v = _var(tf, 1.0)
    a = tf.assign(v, 5.0)
    with tf.control_dependencies([a]):
        r = v.read_value()
    return {"feeds": {}, "init": True, "fetch": {"r": r}, "names": [r.name]}


@case
def value_under_control_deps_runs_no_assign(tf):
    # A ref variable's value() is its snapshot: the control dependency is not on it, so
    # fetching it runs no assign (a resource variable would read after the assign).
    v = _var(tf, 1.0)
    a = tf.assign(v, 5.0)
    with tf.control_dependencies([a]):
        r = v.value()
    return {"feeds": {}, "init": True, "fetch": {"r": r}, "runs": 2}


@case
def assign_add_then_operator(tf):
    v = _var(tf, 1.0)
    a = tf.assign_add(v, 2.0)
    with tf.control_dependencies([a]):
        r = v + 0.0
    return {"feeds": {}, "init": True, "fetch": {"r": r}, "runs": 3}


def _chained_assign_adds(tf: Any, resource: bool) -> dict:
    v = _var(tf, 1.0, resource=resource)
    a = tf.assign_add(v, 1.0)
    with tf.control_dependencies([a]):
        b = tf.assign_add(v, 2.0)
    with tf.control_dependencies([b]):
        r = tf.identity(v)
    return {"feeds": {}, "init": True, "fetch": {"r": r}, "runs": 3}


@case
def chained_assign_adds_both_apply(tf):
    return _chained_assign_adds(tf, False)


@case
def resource_chained_assign_adds_both_apply(tf):
    return _chained_assign_adds(tf, True)


@case
def assign_of_a_read_after_assign_add(tf):
    v = _var(tf, 1.0)
    a = tf.assign_add(v, 1.0)
    with tf.control_dependencies([a]):
        b = tf.assign(v, v * 10.0)
    with tf.control_dependencies([b]):
        r = tf.identity(v)
    return {"feeds": {}, "init": True, "fetch": {"r": r, "b": b}, "runs": 3}


@case
def assign_output_read_after_a_later_update(tf):
    # An assign's output is the variable (TF1's ref): read after a later update, it has it.
    v = _var(tf, 1.0)
    a = tf.assign(v, 5.0)
    with tf.control_dependencies([a]):
        b = tf.assign_add(v, 1.0)
    with tf.control_dependencies([b]):
        r = a + 0.0
    return {"feeds": {}, "init": True, "fetch": {"r": r}, "runs": 2}


@case
def scatter_output_read_after_a_later_scatter(tf):
    v = _var(tf, np.array([1.0, 2.0], np.float32))
    a = tf.scatter_update(v, [0], [5.0])
    with tf.control_dependencies([a]):
        b = tf.scatter_add(v, [1], [10.0])
    with tf.control_dependencies([b]):
        r = a * 1.0
    return {"feeds": {}, "init": True, "fetch": {"r": r}, "runs": 3}


@case
def assign_output_and_read_in_one_op(tf):
    v = _var(tf, 1.0)
    a = tf.assign(v, 5.0)
    return {"feeds": {}, "init": True, "fetch": {"r": v + a}}


@case
def get_variable_assign_then_read(tf):
    v = tf.get_variable("v", [], initializer=tf.constant_initializer(2.0))
    a = v.assign(4.0)
    with tf.control_dependencies([a]):
        r = v * 3.0
    return {"feeds": {}, "init": True, "fetch": {"r": r}}


@case
def scatter_update_then_identity(tf):
    v = _var(tf, np.array([1.0, 2.0, 3.0], np.float32))
    a = tf.scatter_update(v, [1], [9.0])
    with tf.control_dependencies([a]):
        r = tf.identity(v)
    return {"feeds": {}, "init": True, "fetch": {"r": r}}


@case
def scatter_add_then_scatter_mul_then_read(tf):
    v = _var(tf, np.array([1.0, 2.0, 3.0], np.float32))
    a = tf.scatter_add(v, [0, 2], [10.0, 20.0])
    with tf.control_dependencies([a]):
        b = tf.scatter_mul(v, [2], [2.0])
    with tf.control_dependencies([b]):
        r = v.read_value()
    return {"feeds": {}, "init": True, "fetch": {"r": r}, "runs": 3}


@case
def group_chain_then_read(tf):
    v = _var(tf, 1.0)
    g1 = tf.group(tf.assign(v, 5.0))
    with tf.control_dependencies([g1]):
        g2 = tf.group(tf.no_op())
    with tf.control_dependencies([g2]):
        r = v * 2.0
    return {"feeds": {}, "init": True, "fetch": {"r": r}}


@case
def gradient_descent_step_then_read_weights(tf):
    w = _var(tf, np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), name="w")
    x = tf.constant([[1.0, 1.0]])
    loss = tf.reduce_sum(tf.matmul(x, w))
    train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
    with tf.control_dependencies([train]):
        r = tf.identity(w)
    return {"feeds": {}, "init": True, "fetch": {"w": r}, "runs": 3}


@case
def momentum_step_with_global_step_then_read(tf):
    w = tf.get_variable("w", [2], initializer=tf.constant_initializer([1.0, 2.0]))
    loss = tf.reduce_sum(tf.square(w))
    gs = tf.train.get_or_create_global_step()
    train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss, global_step=gs)
    with tf.control_dependencies([train]):
        rw, rs = tf.identity(w), tf.identity(gs)
    return {"feeds": {}, "init": True, "fetch": {"w": rw, "step": rs}, "runs": 3}


@case
def adam_step_then_read_weights(tf):
    w = tf.get_variable("w", [2], initializer=tf.constant_initializer([1.0, 2.0]))
    train = tf.train.AdamOptimizer(0.1).minimize(tf.reduce_sum(tf.square(w)))
    with tf.control_dependencies([train]):
        r = tf.identity(w)
    return {"feeds": {}, "init": True, "fetch": {"w": r}, "runs": 3}


@case
def sparse_adagrad_step_then_read_table(tf):
    emb = tf.get_variable("emb", [5, 2], initializer=tf.constant_initializer(1.0))
    ids = tf.constant([0, 3, 3])
    loss = tf.reduce_sum(tf.square(tf.nn.embedding_lookup(emb, ids)))
    train = tf.train.AdagradOptimizer(0.1).minimize(loss)
    with tf.control_dependencies([train]):
        r = tf.identity(emb)
    return {"feeds": {}, "init": True, "fetch": {"emb": r}, "runs": 3}


@case
def moving_average_after_step_then_read(tf):
    w = tf.get_variable("w", [2], initializer=tf.constant_initializer([1.0, 2.0]))
    train = tf.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(tf.square(w)))
    ema = tf.train.ExponentialMovingAverage(0.5)
    with tf.control_dependencies([train]):
        update = ema.apply([w])
    with tf.control_dependencies([update]):
        avg, rw = tf.identity(ema.average(w)), tf.identity(w)
    return {"feeds": {}, "init": True, "fetch": {"avg": avg, "w": rw}, "runs": 3}


@case
def metric_update_then_read_its_variables(tf):
    value, update = tf.metrics.mean(tf.constant([1.0, 2.0, 3.0]))
    total, count = tf.local_variables()
    with tf.control_dependencies([update]):
        mean, n = total / count, tf.identity(count)
    return {"feeds": {}, "before": [(tf.local_variables_initializer(), 1)],
            "fetch": {"mean": mean, "count": n}, "runs": 3}


@case
def grouped_assign_adds_then_ratio(tf):
    total, count = _var(tf, 0.0, "total"), _var(tf, 0.0, "count")
    update = tf.group(tf.assign_add(total, 3.0), tf.assign_add(count, 1.0))
    with tf.control_dependencies([update]):
        r = total / count
    return {"feeds": {}, "init": True, "fetch": {"r": r}, "runs": 2}


def _while_assign_add_then_read(tf: Any, resource: bool) -> dict:
    v = _var(tf, 0.0, resource=resource)

    def body(i):
        a = tf.assign_add(v, 1.0)
        with tf.control_dependencies([a]):
            r = tf.identity(v)
        return [i + r]

    out = tf.while_loop(lambda i: i < 10.0, body, [tf.constant(0.0)])
    return {"feeds": {}, "init": True, "fetch": {"out": out}, "runs": 3}


@case
def while_body_assign_add_then_read(tf):
    return _while_assign_add_then_read(tf, False)


@case
def resource_while_body_assign_add_then_read(tf):
    return _while_assign_add_then_read(tf, True)


@case
def while_cond_reads_the_assigned_variable(tf):
    v = _var(tf, 0.0)

    def body(i):
        a = tf.assign_add(v, 1.0)
        with tf.control_dependencies([a]):
            return i + 1

    out = tf.while_loop(lambda i: v < 5.0, body, [0])
    return {"feeds": {}, "init": True, "fetch": {"out": out}, "runs": 3}


@case
def while_body_cond_assigns_then_reads(tf):
    v = _var(tf, 0.0)

    def body(i, acc):
        def inner():
            a = tf.assign_add(v, 2.0)
            with tf.control_dependencies([a]):
                return v + 0.0

        # ``v + 0.0``, not an identity: TF's identity of a ref variable aliases its
        # buffer, so a later kernel reading it would see later iterations' writes. And
        # the next iteration waits for this one's read (else TF reads racily).
        r = tf.cond(i > 0, inner, lambda: v + 0.0)
        return i + 1 + tf.cast(r * 0.0, tf.int32), acc + r

    i, acc = tf.while_loop(lambda i, acc: i < 3, body, [0, 0.0])
    return {"feeds": {}, "init": True, "fetch": {"i": i, "acc": acc}, "runs": 3}


@case
def cond_branch_assigns_then_reads(tf):
    v = _var(tf, 1.0)

    def taken():
        a = tf.assign(v, 7.0)
        with tf.control_dependencies([a]):
            return tf.identity(v) + 1.0

    out = tf.cond(tf.constant(True), taken, lambda: tf.identity(v))
    return {"feeds": {}, "init": True, "fetch": {"out": out}, "runs": 2}


@case
def read_after_cond_that_assigns(tf):
    v = _var(tf, 1.0)
    p = tf.placeholder(tf.bool, [], name="p")
    c = tf.cond(p, lambda: tf.assign_add(v, 7.0), lambda: tf.identity(v))
    with tf.control_dependencies([c]):
        r = tf.identity(v)
    return {"feeds": {p: np.array(True)}, "init": True, "fetch": {"r": r}, "runs": 2}


@case
def add_n_of_one_input(tf):
    x = tf.constant([1.0, 2.0])
    same = tf.add_n([x])
    named = tf.add_n([x], name="total")
    return {"feeds": {}, "fetch": {"same": same, "named": named},
            "names": [same.name, str(same is x), named.name, named.op.type]}
