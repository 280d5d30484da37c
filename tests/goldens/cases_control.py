"""Golden cases, area ``control``: ``cond``, ``case`` and ``while_loop`` with fed
predicates and trip counts, nested structures, captures, variables assigned in a branch,
and gradients through both. See :mod:`cases` for the case format."""

from __future__ import annotations

from typing import Any

import numpy as np

from .cases import case, rand


def _cond_grad(tf: Any, taken: bool) -> dict:
    p = tf.placeholder(tf.bool, [], name="p")
    x = tf.placeholder(tf.float32, [2, 3], name="x")
    y = tf.placeholder(tf.float32, [3], name="y")
    out = tf.cond(p, lambda: tf.tanh(x) * y, lambda: tf.square(y) + x * 0.5)
    return {"feeds": {p: np.array(taken), x: rand(1, 2, 3), y: rand(2, 3)},
            "fetch": {"out": out}, "grads": ("out", [x, y]), "names": [out.name]}


@case
def cond_fed_pred_true(tf):
    return _cond_grad(tf, True)


@case
def cond_fed_pred_false(tf):
    return _cond_grad(tf, False)


@case
def cond_nested_structures_and_names(tf):
    p = tf.placeholder(tf.bool, [], name="p")
    x = tf.placeholder(tf.float32, [None, 2], name="x")
    a, d = tf.cond(p, lambda: (x * 2.0, {"k": [x + 1.0, tf.reduce_sum(x)], "j": x[:, 0]}),
                   lambda: (x - 1.0, {"k": [x * x, tf.reduce_max(x)], "j": x[:, 1]}),
                   name="pick")
    return {"feeds": {p: np.array(False), x: rand(3, 4, 2)},
            "fetch": {"a": a, "k0": d["k"][0], "k1": d["k"][1], "j": d["j"]},
            "grads": ("k0", [x]), "names": [a.name, d["j"].name, d["k"][0].name, d["k"][1].name]}


@case
def cond_nested_conds_with_captures(tf):
    p = tf.placeholder(tf.bool, [], name="p")
    q = tf.placeholder(tf.bool, [], name="q")
    x = tf.placeholder(tf.float32, [4], name="x")
    c = tf.constant(3.0)

    def inner(s):
        return tf.cond(q, lambda: x * s, lambda: tf.exp(x) + c)

    out = tf.cond(p, lambda: inner(2.0) * c, lambda: inner(-1.0) - x)
    return {"feeds": {p: np.array(True), q: np.array(False), x: rand(5, 4)},
            "fetch": {"out": out}, "grads": ("out", [x]), "names": [out.name]}


@case
def cond_single_element_list_and_merged_shape(tf):
    p = tf.placeholder(tf.bool, [], name="p")
    x = tf.placeholder(tf.float32, [3], name="x")
    single = tf.cond(p, lambda: [x * 2.0], lambda: [x])
    strict = tf.cond(p, lambda: [x * 2.0], lambda: [x], strict=True)[0]
    merged = tf.cond(p, lambda: tf.zeros([2]), lambda: tf.ones([3]))
    return {"feeds": {p: np.array(True), x: rand(6, 3)},
            "fetch": {"single": single, "strict": strict, "merged": merged}}


def _assign_in_branch(tf: Any, taken: bool) -> dict:
    p = tf.placeholder(tf.bool, [], name="p")
    v = tf.Variable(1.0, name="v")
    out = tf.cond(p, lambda: tf.assign(v, 5.0), lambda: tf.identity(v))
    return {"feeds": {p: np.array(taken)}, "init": True, "before": [(out, 1)],
            "fetch": {"out": out, "v": tf.identity(v)}}


@case
def cond_assign_in_taken_branch(tf):
    return _assign_in_branch(tf, True)


@case
def cond_assign_in_untaken_branch(tf):
    return _assign_in_branch(tf, False)


@case
def cond_gradient_wrt_variable(tf):
    p = tf.placeholder(tf.bool, [], name="p")
    x = tf.placeholder(tf.float32, [2, 3], name="x")
    w = tf.Variable(rand(7, 3, 2), name="w")
    out = tf.cond(p, lambda: tf.matmul(x, w), lambda: tf.matmul(x, w * w) + 1.0)
    return {"feeds": {p: np.array(False), x: rand(8, 2, 3)}, "init": True,
            "fetch": {"out": out}, "grads": ("out", [w, x])}


@case
def cond_different_structures_raise(tf):
    p = tf.placeholder(tf.bool, [])
    x = tf.placeholder(tf.float32, [3])
    tf.cond(p, lambda: (x, x), lambda: x)
    return {"feeds": {}, "fetch": {}}


@case
def cond_different_dtypes_raise(tf):
    p = tf.placeholder(tf.bool, [])
    x = tf.placeholder(tf.float32, [3])
    tf.cond(p, lambda: x, lambda: tf.cast(x, tf.int32))
    return {"feeds": {}, "fetch": {}}


@case
def cond_float_pred_raises(tf):
    x = tf.placeholder(tf.float32, [])
    tf.cond(x, lambda: x, lambda: x)
    return {"feeds": {}, "fetch": {}}


# --------------------------------------------------------------------- case
def _case(tf: Any, pv: bool, qv: bool, **kw: Any) -> dict:
    p = tf.placeholder(tf.bool, [], name="p")
    q = tf.placeholder(tf.bool, [], name="q")
    x = tf.placeholder(tf.float32, [3], name="x")
    out = tf.case([(p, lambda: x * 2.0), (q, lambda: x + 1.0)], **kw)
    return {"feeds": {p: np.array(pv), q: np.array(qv), x: rand(9, 3)},
            "fetch": {"out": out}, "grads": ("out", [x]), "names": [out.name]}


@case
def case_first_true_wins(tf):
    return _case(tf, True, True, default=lambda: tf.zeros([3]))


@case
def case_second(tf):
    return _case(tf, False, True, default=lambda: tf.zeros([3]))


@case
def case_default(tf):
    return _case(tf, False, False, default=lambda: tf.ones([3]) * 7.0)


@case
def case_no_default_last_is_default(tf):
    return _case(tf, False, True)


@case
def case_no_default_none_true_raises(tf):
    return _case(tf, False, False)


@case
def case_exclusive_two_true_raises(tf):
    return _case(tf, True, True, default=lambda: tf.zeros([3]), exclusive=True)


@case
def case_exclusive_one_true(tf):
    return _case(tf, False, True, default=lambda: tf.zeros([3]), exclusive=True)


# --------------------------------------------------------------------- while_loop
def _rnn(tf: Any, trips: int) -> dict:
    n = tf.placeholder(tf.int32, [], name="n")
    x0 = tf.placeholder(tf.float32, [2, 3], name="x0")
    w = tf.placeholder(tf.float32, [3, 3], name="w")
    i, h, s = tf.while_loop(lambda i, h, s: i < n,
                            lambda i, h, s: (i + 1, tf.tanh(tf.matmul(h, w)),
                                             s + tf.reduce_sum(h * h)),
                            [tf.constant(0), x0, tf.constant(0.0)])
    return {"feeds": {n: np.array(trips, np.int32), x0: rand(10, 2, 3), w: rand(11, 3, 3)},
            "fetch": {"i": i, "h": h, "s": s}, "grads": ("h", [x0, w]),
            "names": [i.name, h.name, s.name]}


@case
def while_fed_trip_count(tf):
    return _rnn(tf, 3)


@case
def while_zero_trips(tf):
    return _rnn(tf, 0)


@case
def while_sum_gradient(tf):
    spec = _rnn(tf, 4)
    spec["grads"] = ("s", spec["grads"][1])
    return spec


@case
def while_nested_structures(tf):
    n = tf.placeholder(tf.int32, [], name="n")
    x = tf.placeholder(tf.float32, [3], name="x")
    i, d = tf.while_loop(lambda i, d: i < n,
                         lambda i, d: (i + 1, {"a": d["a"] * x, "b": [d["b"][0] + d["a"]]}),
                         (0, {"a": tf.ones([3]), "b": [tf.zeros([3])]}))
    return {"feeds": {n: np.array(3, np.int32), x: rand(12, 3)},
            "fetch": {"i": i, "a": d["a"], "b": d["b"][0]}, "grads": ("b", [x]),
            "names": [i.name, d["a"].name, d["b"][0].name]}


@case
def while_single_var_and_max_iterations(tf):
    m = tf.placeholder(tf.int32, [], name="m")
    x = tf.placeholder(tf.float32, [2], name="x")
    single = tf.while_loop(lambda a: tf.reduce_sum(a) < 100.0, lambda a: a * 2.0, [x])
    capped = tf.while_loop(lambda a: True, lambda a: a * 1.5, [x], maximum_iterations=m)
    return {"feeds": {m: np.array(4, np.int32), x: np.array([1.0, 2.0], np.float32)},
            "fetch": {"single": single, "capped": capped}, "grads": ("capped", [x]),
            "names": [single.name, capped.name]}


@case
def while_shape_invariants(tf):
    x = tf.placeholder(tf.float32, [1], name="x")
    out = tf.while_loop(lambda a: tf.reduce_sum(a) < 10.0, lambda a: tf.concat([a, a], 0), [x],
                        shape_invariants=[tf.TensorShape([None])])
    return {"feeds": {x: np.array([1.5], np.float32)}, "fetch": {"out": out},
            "grads": ("out", [x])}


@case
def while_shape_change_raises(tf):
    tf.while_loop(lambda a: tf.reduce_sum(a) < 10.0, lambda a: tf.concat([a, a], 0),
                  [tf.ones([1])])
    return {"feeds": {}, "fetch": {}}


@case
def while_body_structure_mismatch_raises(tf):
    tf.while_loop(lambda a: True, lambda a: (a, a), [tf.ones([1])])
    return {"feeds": {}, "fetch": {}}


@case
def while_gradient_wrt_variable_and_capture(tf):
    n = tf.placeholder(tf.int32, [], name="n")
    x = tf.placeholder(tf.float32, [3], name="x")
    c = tf.placeholder(tf.float32, [3], name="c")
    v = tf.Variable(np.array([0.5, -1.0, 0.8], np.float32), name="v")
    _, out = tf.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, tf.sin(a * v) + c),
                           [0, x])
    return {"feeds": {n: np.array(3, np.int32), x: rand(13, 3), c: rand(14, 3)}, "init": True,
            "fetch": {"out": out}, "grads": ("out", [v, x, c])}


@case
def while_with_cond_and_inner_loop(tf):
    n = tf.placeholder(tf.int32, [], name="n")
    p = tf.placeholder(tf.bool, [], name="p")
    x = tf.placeholder(tf.float32, [3], name="x")

    def body(i, a):
        _, b = tf.while_loop(lambda j, b: j < i + 1, lambda j, b: (j + 1, b * 0.9 + x), [0, a])
        return i + 1, tf.cond(p, lambda: tf.tanh(b), lambda: b * x)

    _, out = tf.while_loop(lambda i, a: i < n, body, [0, x])
    return {"feeds": {n: np.array(2, np.int32), p: np.array(True), x: rand(15, 3)},
            "fetch": {"out": out}, "grads": ("out", [x])}


@case
def while_back_prop_false(tf):
    x = tf.placeholder(tf.float32, [2], name="x")
    out = tf.while_loop(lambda a: tf.reduce_sum(a) < 10.0, lambda a: a * 2.0, [x],
                        back_prop=False)
    return {"feeds": {x: np.array([1.0, 0.5], np.float32)}, "fetch": {"out": out}}


@case
def cond_and_while_gather_gradient_wrt_variable(tf):
    p = tf.placeholder(tf.bool, [], name="p")
    n = tf.placeholder(tf.int32, [], name="n")
    table = tf.Variable(rand(16, 5, 3), name="table")
    ids = tf.constant([4, 0, 4])
    picked = tf.cond(p, lambda: tf.gather(table, ids) * 2.0, lambda: tf.zeros([3, 3]))
    _, acc = tf.while_loop(lambda i, a: i < n,
                           lambda i, a: (i + 1, a * 0.5 + tf.gather(table, ids)),
                           [0, tf.zeros([3, 3])])
    return {"feeds": {p: np.array(True), n: np.array(2, np.int32)}, "init": True,
            "fetch": {"out": picked + acc}, "grads": ("out", [table])}


@case
def cond_variable_made_in_branch(tf):
    p = tf.placeholder(tf.bool, [], name="p")
    x = tf.placeholder(tf.float32, [2, 3], name="x")

    def make():
        w = tf.get_variable("w_in_branch", [3, 2], initializer=tf.ones_initializer())
        return tf.matmul(x, w)

    out = tf.cond(p, make, lambda: tf.zeros([2, 2]))
    w = [v for v in tf.global_variables() if "w_in_branch" in v.name][0]
    return {"feeds": {p: np.array(True), x: rand(17, 2, 3)}, "init": True,
            "fetch": {"out": out}, "grads": ("out", [w, x]), "names": [w.name]}


def _op_branches(tf: Any, taken: bool) -> dict:
    p = tf.placeholder(tf.bool, [], name="p")
    v = tf.Variable(1.0, name="v")
    out = tf.cond(p, lambda: tf.assign(v, 3.0).op, lambda: tf.no_op())
    return {"feeds": {p: np.array(taken)}, "init": True, "before": [(out, 1)],
            "fetch": {"out": out, "v": tf.identity(v)}}


@case
def cond_branches_returning_ops_taken(tf):
    return _op_branches(tf, True)


@case
def cond_branches_returning_ops_untaken(tf):
    return _op_branches(tf, False)
