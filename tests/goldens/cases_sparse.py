"""Golden cases, area ``sparse``: ``gather``, ``embedding_lookup`` (one table, partitions
'mod' and 'div', ``max_norm``), their ``IndexedSlices`` gradients (compared dense),
``scatter_update/add/sub`` and SGD steps on an embedding. See :mod:`cases` for the
format."""

from __future__ import annotations

import numpy as np

from .cases import case, rand


def _table(seed: int, rows: int, dim: int) -> np.ndarray:
    return rand(seed, rows, dim)


@case
def gather_axis0(tf):
    p = tf.placeholder(tf.float32, [5, 3], name="p")
    i = tf.placeholder(tf.int32, [2, 2], name="i")
    out = tf.gather(p, i)
    return {"feeds": {p: rand(1, 5, 3), i: np.array([[0, 4], [4, 2]], np.int32)},
            "fetch": {"out": out}, "grads": ("out", [p]), "names": [out.op.name]}


@case
def gather_axis1_int64(tf):
    p = tf.placeholder(tf.float64, [2, 4, 3], name="p")
    i = tf.constant(np.array([3, 0, 3], np.int64))
    out = tf.gather(p, i, axis=1, name="g")
    return {"feeds": {p: rand(2, 2, 4, 3, dtype=np.float64)}, "fetch": {"out": out},
            "grads": ("out", [p]), "names": [out.op.name]}


@case
def gather_negative_axis(tf):
    p = tf.placeholder(tf.float32, [3, 4], name="p")
    out = tf.gather(p, [1, 1, 0], axis=-1)
    return {"feeds": {p: rand(3, 3, 4)}, "fetch": {"out": out}, "grads": ("out", [p])}


@case
def gather_batch_dims(tf):
    p = tf.placeholder(tf.float32, [2, 3, 4], name="p")
    i = tf.constant(np.array([[2, 0], [1, 1]], np.int32))
    out = tf.gather(p, i, axis=1, batch_dims=1)
    return {"feeds": {p: rand(4, 2, 3, 4)}, "fetch": {"out": out}, "grads": ("out", [p])}


@case
def gather_batch_dims_axis2(tf):
    p = tf.placeholder(tf.float32, [2, 3, 4], name="p")
    i = tf.constant(np.array([[3, 0], [1, 1]], np.int32))
    out = tf.gather(p, i, axis=2, batch_dims=1)
    return {"feeds": {p: rand(5, 2, 3, 4)}, "fetch": {"out": out}, "grads": ("out", [p])}


@case
def gather_int_params(tf):
    p = tf.constant(np.arange(12, dtype=np.int32).reshape(4, 3))
    i = tf.placeholder(tf.int64, [None], name="i")
    return {"feeds": {i: np.array([3, 3, 1], np.int64)}, "fetch": {"out": tf.gather(p, i)}}


@case
def gather_unknown_dims(tf):
    p = tf.placeholder(tf.float32, [None, 2], name="p")
    i = tf.placeholder(tf.int32, None, name="i")
    out = tf.gather(p, i)
    return {"feeds": {p: rand(6, 4, 2), i: np.array([[1], [3], [0]], np.int32)},
            "fetch": {"out": out}, "grads": ("out", [p])}


@case
def gather_empty_indices(tf):
    p = tf.placeholder(tf.float32, [4, 2], name="p")
    i = tf.placeholder(tf.int32, [0], name="i")
    out = tf.gather(p, i)
    return {"feeds": {p: rand(7, 4, 2), i: np.zeros([0], np.int32)}, "fetch": {"out": out},
            "grads": ("out", [p])}


@case
def gather_index_out_of_range(tf):
    p = tf.placeholder(tf.float32, [4, 2], name="p")
    i = tf.placeholder(tf.int32, [2], name="i")
    return {"feeds": {p: rand(8, 4, 2), i: np.array([1, 4], np.int32)},
            "fetch": {"out": tf.gather(p, i)}}


@case
def gather_float_indices_raises(tf):
    p = tf.placeholder(tf.float32, [4, 2], name="p")
    return {"feeds": {}, "fetch": {"out": tf.gather(p, tf.constant([1.0]))}}


@case
def gather_axis_out_of_range_raises(tf):
    p = tf.placeholder(tf.float32, [4, 2], name="p")
    return {"feeds": {}, "fetch": {"out": tf.gather(p, [0], axis=2)}}


@case
def embedding_lookup_variable(tf):
    w = tf.Variable(_table(10, 6, 4), name="emb")
    ids = tf.placeholder(tf.int32, [None, 3], name="ids")
    out = tf.nn.embedding_lookup(w, ids)
    return {"feeds": {ids: np.array([[0, 5, 5], [2, 0, 1]], np.int32)}, "init": True,
            "fetch": {"out": out}, "grads": ("out", [w]),
            "names": [out.op.name, out.op.inputs[0].op.name]}


@case
def embedding_lookup_named_tensor(tf):
    p = tf.placeholder(tf.float32, [5, 2], name="p")
    out = tf.nn.embedding_lookup(p, tf.constant([4, 0, 4]), name="emb")
    return {"feeds": {p: rand(11, 5, 2)}, "fetch": {"out": out}, "grads": ("out", [p]),
            "names": [out.op.name]}


@case
def embedding_lookup_mod_partitions(tf):
    parts = [tf.Variable(_table(12 + k, n, 3), name=f"part_{k}")
             for k, n in enumerate([3, 3, 2])]
    ids = tf.placeholder(tf.int64, [2, 4], name="ids")
    out = tf.nn.embedding_lookup(parts, ids)
    return {"feeds": {ids: np.array([[0, 1, 2, 7], [7, 3, 5, 0]], np.int64)}, "init": True,
            "fetch": {"out": out}, "grads": ("out", parts)}


@case
def embedding_lookup_div_partitions(tf):
    parts = [tf.Variable(_table(20 + k, n, 2), name=f"part_{k}")
             for k, n in enumerate([3, 2, 2])]
    ids = tf.placeholder(tf.int32, [None], name="ids")
    out = tf.nn.embedding_lookup(parts, ids, partition_strategy="div")
    return {"feeds": {ids: np.array([6, 0, 2, 3, 5, 2, 4], np.int32)}, "init": True,
            "fetch": {"out": out}, "grads": ("out", parts)}


@case
def embedding_lookup_max_norm(tf):
    w = tf.Variable(_table(30, 5, 3) * 2.0, name="emb")
    ids = tf.constant(np.array([[1, 2], [4, 1]], np.int32))
    out = tf.nn.embedding_lookup(w, ids, max_norm=1.5)
    return {"feeds": {}, "init": True, "fetch": {"out": out}, "grads": ("out", [w])}


@case
def embedding_lookup_max_norm_partitions(tf):
    parts = [tf.Variable(_table(31 + k, 3, 2) * 2.0, name=f"part_{k}") for k in range(2)]
    out = tf.nn.embedding_lookup(parts, tf.constant([5, 0, 3, 1]), max_norm=1.0)
    return {"feeds": {}, "init": True, "fetch": {"out": out}, "grads": ("out", parts)}


@case
def embedding_gradient_aggregates(tf):
    # Two lookups of one table (IndexedSlices + IndexedSlices) and a dense use of it.
    w = tf.Variable(_table(40, 6, 2), name="emb")
    a = tf.nn.embedding_lookup(w, tf.constant([1, 1, 3]))
    b = tf.gather(w, tf.constant([[5], [1]]))
    sparse_only = tf.reduce_sum(a * a) + tf.reduce_sum(b) * 3.0
    mixed = sparse_only + tf.reduce_sum(w * w)
    out = sparse_only + mixed * 2.0
    return {"feeds": {}, "init": True, "fetch": {"out": out}, "grads": ("out", [w])}


@case
def scatter_update_add_sub(tf):
    w = tf.Variable(_table(50, 5, 3), name="w")
    upd = tf.scatter_update(w, [4, 0], rand(51, 2, 3))
    add = tf.scatter_add(w, tf.constant([[1, 1], [2, 1]]), rand(52, 2, 2, 3))
    sub = tf.scatter_sub(w, [3], rand(53, 1, 3))
    return {"feeds": {}, "init": True, "before": [(upd, 1), (add, 2), (sub, 1)],
            "fetch": {"again": tf.scatter_add(w, [0], np.ones([1, 3], np.float32))},
            "names": [upd.op.name, add.op.name, sub.op.name]}


@case
def scatter_wrong_updates_shape_raises(tf):
    w = tf.Variable(_table(54, 5, 3), name="w")
    return {"feeds": {}, "fetch": {"out": tf.scatter_update(w, [0, 1], rand(55, 3, 3))}}


@case
def scatter_index_out_of_range(tf):
    w = tf.Variable(_table(56, 5, 3), name="w")
    i = tf.placeholder(tf.int32, [1], name="i")
    return {"feeds": {i: np.array([5], np.int32)}, "init": True,
            "fetch": {"out": tf.scatter_add(w, i, rand(57, 1, 3))}}


def _sgd_embedding(tf, opt):
    w = tf.Variable(_table(60, 8, 4), name="emb")
    ids = tf.placeholder(tf.int32, [None, 2], name="ids")
    target = tf.placeholder(tf.float32, [None, 4], name="target")
    e = tf.nn.embedding_lookup(w, ids)
    loss = tf.reduce_mean(tf.square(tf.reduce_sum(e, 1) - target))
    step = opt.minimize(loss)
    feeds = {ids: np.array([[1, 3], [3, 3], [7, 0]], np.int32), target: rand(61, 3, 4)}
    return {"feeds": feeds, "init": True, "before": [(step, 3)],
            "fetch": {"emb": w.read_value(), "loss": loss},
            "names": [step.name]}


@case
def sgd_step_on_embedding(tf):
    return _sgd_embedding(tf, tf.train.GradientDescentOptimizer(0.5))


@case
def momentum_step_on_embedding(tf):
    # A dense optimizer given an IndexedSlices gradient (the base _apply_sparse).
    return _sgd_embedding(tf, tf.train.MomentumOptimizer(0.3, 0.9))


@case
def adam_step_on_embedding(tf):
    return _sgd_embedding(tf, tf.train.AdamOptimizer(0.1))


@case
def stop_gradients_blocks_op(tf):
    a = tf.placeholder(tf.float32, [3], name="a")
    b = tf.placeholder(tf.float32, [3], name="b")
    ab = a * b
    y = ab + a * 2.0
    ga, gb, gab = tf.gradients(y, [a, b, ab], stop_gradients=[ab])
    return {"feeds": {a: rand(70, 3), b: rand(71, 3)}, "fetch": {"ga": ga, "gab": gab},
            "names": [f"gb is None: {gb is None}"]}


@case
def stop_gradients_stops_xs(tf):
    a = tf.placeholder(tf.float32, [2], name="a")
    b = a * 3.0
    c = b * b
    ga, gb = tf.gradients(c, [a, b], stop_gradients=[b])
    return {"feeds": {a: rand(72, 2)}, "fetch": {"gb": gb},
            "names": [f"ga is None: {ga is None}"]}


@case
def scatter_scalar_updates_and_ranks(tf):
    v1 = tf.Variable(np.arange(5, dtype=np.float32), name="v1")
    v3 = tf.Variable(rand(80, 3, 2, 2), name="v3")
    a = tf.scatter_update(v1, [0, 3], 7.0)
    b = tf.scatter_add(v3, [[2], [0]], rand(81, 2, 1, 2, 2))
    c = tf.scatter_sub(v1, tf.constant(np.array([4, 4, 1], np.int64)), [1.0, 2.0, 3.0])
    return {"feeds": {}, "init": True, "before": [(a, 1), (b, 1)],
            "fetch": {"c": c, "b": tf.scatter_add(v3, [1], tf.zeros([1, 2, 2]))}}


@case
def gather_scalar_index(tf):
    p = tf.placeholder(tf.float32, [4, 3], name="p")
    out = tf.gather(p, 2)
    col = tf.gather(p, tf.constant(1), axis=1)
    return {"feeds": {p: rand(82, 4, 3)}, "fetch": {"out": out, "col": col},
            "grads": ("out", [p])}


@case
def embedding_lookup_int64_ids_3d_table(tf):
    w = tf.Variable(rand(83, 5, 2, 3), name="emb")
    ids = tf.placeholder(tf.int64, [None], name="ids")
    out = tf.nn.embedding_lookup(w, ids)
    return {"feeds": {ids: np.array([4, 0, 4], np.int64)}, "init": True,
            "fetch": {"out": out}, "grads": ("out", [w])}


@case
def embedding_lookup_empty_params_list_raises(tf):
    return {"feeds": {}, "fetch": {"out": tf.nn.embedding_lookup([], tf.constant([0]))}}


@case
def scatter_mul_div_min_max(tf):
    w = tf.Variable(rand(90, 4, 2, low=0.5, high=2.0), name="w")
    ops = [tf.scatter_mul(w, [1, 3, 1], rand(91, 3, 2, low=0.5, high=1.5)),
           tf.scatter_div(w, [0, 0], rand(92, 2, 2, low=0.5, high=1.5)),
           tf.scatter_min(w, [2, 1], rand(93, 2, 2, low=0.5, high=2.0)),
           tf.scatter_max(w, [3, 3, 0], rand(94, 3, 2, low=0.5, high=2.0))]
    return {"feeds": {}, "init": True, "before": [(op, 1) for op in ops[:3]],
            "fetch": {"w": ops[3]}, "names": [op.op.name for op in ops]}
