"""Golden cases, area ``select``: gather_nd, one_hot, range, where / where_v2,
boolean_mask, unique, dynamic_partition, segment reductions, sequence_mask (issue 17).
See :mod:`cases` for the case format."""

from __future__ import annotations

import numpy as np

from .cases import case, rand


# --------------------------------------------------------------------- gather_nd
@case
def gather_nd_elements(tf):
    p = tf.placeholder(tf.float32, [None, 3], name="p")
    i = tf.placeholder(tf.int32, [None, 2], name="i")
    out = tf.gather_nd(p, i)
    return {"feeds": {p: rand(1, 4, 3), i: np.array([[0, 1], [3, 2], [0, 1], [2, 0]], np.int32)},
            "fetch": {"out": out}, "grads": ("out", [p]), "names": [out.op.name]}


@case
def gather_nd_slices_int64(tf):
    p = tf.placeholder(tf.float64, [2, 3, 4], name="p")
    i = tf.constant(np.array([[[1], [0]], [[1], [1]]], np.int64))
    out = tf.gather_nd(p, i, name="slices")
    return {"feeds": {p: rand(2, 2, 3, 4, dtype=np.float64)}, "fetch": {"out": out},
            "grads": ("out", [p]), "names": [out.op.name]}


@case
def gather_nd_partial_index_unknown_dims(tf):
    p = tf.placeholder(tf.float32, [None, None, 2], name="p")
    i = tf.placeholder(tf.int32, [None, 2], name="i")
    out = tf.gather_nd(p, i)
    return {"feeds": {p: rand(3, 3, 2, 2), i: np.array([[2, 1], [0, 0], [2, 1]], np.int32)},
            "fetch": {"out": out}, "grads": ("out", [p])}


@case
def gather_nd_int_params(tf):
    p = tf.constant(np.arange(12, dtype=np.int32).reshape(3, 4))
    out = tf.gather_nd(p, [[2, 3], [0, 0]])
    return {"feeds": {}, "fetch": {"out": out}}


@case
def gather_nd_out_of_range(tf):
    p = tf.placeholder(tf.float32, [None, 3], name="p")
    i = tf.placeholder(tf.int32, [None, 2], name="i")
    return {"feeds": {p: rand(4, 2, 3), i: np.array([[0, 1], [0, 3]], np.int32)},
            "fetch": {"out": tf.gather_nd(p, i)}}


@case
def gather_nd_index_too_deep(tf):
    p = tf.placeholder(tf.float32, [2, 3], name="p")
    return {"feeds": {}, "fetch": {"out": tf.gather_nd(p, [[0, 1, 1]])}}


@case
def gather_nd_float_indices(tf):
    p = tf.placeholder(tf.float32, [2, 3], name="p")
    return {"feeds": {}, "fetch": {"out": tf.gather_nd(p, tf.constant([[0.0, 1.0]]))}}


# --------------------------------------------------------------------- one_hot
@case
def one_hot_default(tf):
    i = tf.placeholder(tf.int32, [None], name="i")
    out = tf.one_hot(i, 4)
    return {"feeds": {i: np.array([0, 3, -1, 4, 2], np.int32)}, "fetch": {"out": out},
            "names": [out.op.name]}


@case
def one_hot_values_axis(tf):
    i = tf.placeholder(tf.int64, [2, None], name="i")
    out = tf.one_hot(i, 3, on_value=5, off_value=-1, axis=1)
    last = tf.one_hot(i, 3, on_value=2.5, axis=-1, name="hot")
    first = tf.one_hot(i, 3, axis=0, dtype=tf.float64)
    return {"feeds": {i: np.array([[0, 2, 1], [1, 1, 5]], np.int64)},
            "fetch": {"out": out, "last": last, "first": first},
            "names": [out.op.name, last.op.name, first.op.name]}


@case
def one_hot_tensor_depth(tf):
    i = tf.constant([1, 0], tf.uint8)
    d = tf.placeholder(tf.int32, [], name="d")
    return {"feeds": {d: np.int32(3)}, "fetch": {"out": tf.one_hot(i, d, off_value=0.5)}}


@case
def one_hot_dtype_mismatch(tf):
    return {"feeds": {}, "fetch": {"out": tf.one_hot([1], 2, on_value=1.0, dtype=tf.int32)}}


@case
def one_hot_on_off_mismatch(tf):
    return {"feeds": {}, "fetch": {"out": tf.one_hot([1], 2, on_value=1.0, off_value=0)}}


# --------------------------------------------------------------------- range
@case
def range_forms(tf):
    a = tf.range(5)
    b = tf.range(2, 11, 3)
    c = tf.range(1.0, 2.0, 0.25)
    d = tf.range(10, 0, -3, dtype=tf.int64)
    e = tf.range(tf.constant(4, tf.int64))
    f = tf.range(0, 3, dtype=tf.float64)
    g = tf.range(3, 3)
    return {"feeds": {}, "fetch": {"a": a, "b": b, "c": c, "d": d, "e": e, "f": f, "g": g},
            "names": [t.op.name for t in (a, b, c, d, e, f, g)]}


@case
def range_tensor_args(tf):
    lim = tf.placeholder(tf.int32, [], name="lim")
    delta = tf.placeholder(tf.float32, [], name="delta")
    a = tf.range(lim)
    b = tf.range(1, lim, delta, name="steps")
    return {"feeds": {lim: np.int32(7), delta: np.float32(1.5)}, "fetch": {"a": a, "b": b},
            "names": [a.op.name, b.op.name]}


@case
def range_bad_constants(tf):
    return {"feeds": {}, "fetch": {"out": tf.range(5, 1)}}


@case
def range_zero_delta_fed(tf):
    d = tf.placeholder(tf.int32, [], name="d")
    return {"feeds": {d: np.int32(0)}, "fetch": {"out": tf.range(0, 4, d)}}


# --------------------------------------------------------------------- where
@case
def where_indices(tf):
    c = tf.placeholder(tf.bool, [None, 3], name="c")
    out = tf.where(c)
    v2 = tf.where_v2(c)
    return {"feeds": {c: np.array([[True, False, True], [False, False, False],
                                   [False, True, False]])},
            "fetch": {"out": out, "v2": v2}, "names": [out.op.name, v2.op.name]}


@case
def where_indices_numeric_rank3(tf):
    x = tf.placeholder(tf.float32, [2, None, 2], name="x")
    v = rand(5, 2, 3, 2)
    v[v < 0] = 0
    return {"feeds": {x: v}, "fetch": {"out": tf.where(x)}}


@case
def where_select_same_shape(tf):
    c = tf.placeholder(tf.bool, [None, 3], name="c")
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    y = tf.placeholder(tf.float32, [None, 3], name="y")
    out = tf.where(c, x, y)
    cv = rand(6, 4, 3) > 0
    return {"feeds": {c: cv, x: rand(7, 4, 3), y: rand(8, 4, 3)}, "fetch": {"out": out},
            "grads": ("out", [x, y]), "names": [out.op.name]}


@case
def where_select_row_vector(tf):
    c = tf.placeholder(tf.bool, [None], name="c")
    x = tf.placeholder(tf.float32, [None, 2, 2], name="x")
    y = tf.placeholder(tf.float32, [None, 2, 2], name="y")
    out = tf.where(c, x, y)
    return {"feeds": {c: np.array([True, False, True]), x: rand(9, 3, 2, 2),
                      y: rand(10, 3, 2, 2)},
            "fetch": {"out": out}, "grads": ("out", [x, y])}


@case
def where_select_shape_mismatch(tf):
    c = tf.placeholder(tf.bool, [2, 3], name="c")
    x = tf.placeholder(tf.float32, [2, 3], name="x")
    y = tf.placeholder(tf.float32, [3], name="y")
    return {"feeds": {}, "fetch": {"out": tf.where(c, x, y)}}


@case
def where_select_dtype_mismatch(tf):
    c = tf.placeholder(tf.bool, [3], name="c")
    x = tf.placeholder(tf.float32, [3], name="x")
    y = tf.placeholder(tf.float64, [3], name="y")
    return {"feeds": {}, "fetch": {"out": tf.where(c, x, y)}}


@case
def where_select_fed_mismatch(tf):
    c = tf.placeholder(tf.bool, [None], name="c")
    x = tf.placeholder(tf.float32, [None, 2], name="x")
    return {"feeds": {c: np.array([True, False]), x: rand(11, 3, 2)},
            "fetch": {"out": tf.where(c, x, x)}}


@case
def where_v2_broadcast(tf):
    c = tf.placeholder(tf.bool, [None, 1], name="c")
    x = tf.placeholder(tf.float32, [3], name="x")
    y = tf.placeholder(tf.float32, [], name="y")
    out = tf.where_v2(c, x, y)
    return {"feeds": {c: np.array([[True], [False]]), x: rand(12, 3), y: np.float32(0.5)},
            "fetch": {"out": out}, "grads": ("out", [x, y]), "names": [out.op.name]}


@case
def where_v2_python_scalar(tf):
    x = tf.placeholder(tf.float32, [2, 2], name="x")
    out = tf.where_v2(x > 0.0, x, 0.0)
    return {"feeds": {x: rand(13, 2, 2)}, "fetch": {"out": out}, "grads": ("out", [x])}


@case
def where_v2_no_broadcast(tf):
    c = tf.placeholder(tf.bool, [2], name="c")
    x = tf.placeholder(tf.float32, [3], name="x")
    return {"feeds": {}, "fetch": {"out": tf.where_v2(c, x, x)}}


# --------------------------------------------------------------------- boolean_mask
@case
def boolean_mask_rows(tf):
    t = tf.placeholder(tf.float32, [None, 3], name="t")
    m = tf.placeholder(tf.bool, [None], name="m")
    out = tf.boolean_mask(t, m)
    return {"feeds": {t: rand(14, 4, 3), m: np.array([True, False, True, True])},
            "fetch": {"out": out}, "grads": ("out", [t]), "names": [out.op.name]}


@case
def boolean_mask_2d_mask(tf):
    t = tf.placeholder(tf.float32, [2, 3, 2], name="t")
    m = tf.constant(np.array([[True, False, True], [False, True, True]]))
    out = tf.boolean_mask(t, m, name="masked")
    return {"feeds": {t: rand(15, 2, 3, 2)}, "fetch": {"out": out},
            "grads": ("out", [t]), "names": [out.op.name]}


@case
def boolean_mask_axis(tf):
    t = tf.placeholder(tf.float32, [2, None, 2], name="t")
    m = tf.placeholder(tf.bool, [3], name="m")
    out = tf.boolean_mask(t, m, axis=1)
    return {"feeds": {t: rand(16, 2, 3, 2), m: np.array([False, True, True])},
            "fetch": {"out": out}, "grads": ("out", [t])}


@case
def boolean_mask_scalar_mask(tf):
    t = tf.placeholder(tf.float32, [3], name="t")
    return {"feeds": {}, "fetch": {"out": tf.boolean_mask(t, True)}}


@case
def boolean_mask_shape_mismatch(tf):
    t = tf.placeholder(tf.float32, [3, 2], name="t")
    m = tf.placeholder(tf.bool, [2], name="m")
    return {"feeds": {}, "fetch": {"out": tf.boolean_mask(t, m)}}


# --------------------------------------------------------------------- unique
@case
def unique_ints(tf):
    x = tf.placeholder(tf.int32, [None], name="x")
    y, idx = tf.unique(x)
    return {"feeds": {x: np.array([4, 1, 4, 7, 1, 1, 9], np.int32)},
            "fetch": {"y": y, "idx": idx}, "names": [y.op.name]}


@case
def unique_floats_int64_idx(tf):
    x = tf.constant([2.5, -1.0, 2.5, 0.0], tf.float32)
    out = tf.unique(x, out_idx=tf.int64, name="uniq")
    return {"feeds": {}, "fetch": {"y": out.y, "idx": out.idx}, "names": [out.y.op.name]}


@case
def unique_has_no_gradient(tf):
    x = tf.placeholder(tf.float32, [None], name="x")
    y = tf.unique(x).y
    return {"feeds": {x: np.array([1, 2, 1], np.float32)}, "fetch": {"y": y},
            "grads": ("y", [x])}


# --------------------------------------------------------------------- dynamic_partition
@case
def dynamic_partition_rows(tf):
    d = tf.placeholder(tf.float32, [None, 2], name="d")
    p = tf.placeholder(tf.int32, [None], name="p")
    a, b, c = tf.dynamic_partition(d, p, 3)
    out = tf.concat([a * 2.0, b, c * 3.0], 0)
    return {"feeds": {d: rand(17, 5, 2), p: np.array([2, 0, 2, 0, 0], np.int32)},
            "fetch": {"a": a, "b": b, "c": c, "out": out}, "grads": ("out", [d]),
            "names": [a.op.name]}


@case
def dynamic_partition_2d_partitions(tf):
    d = tf.placeholder(tf.float32, [2, 3], name="d")
    parts = tf.dynamic_partition(d, tf.constant([[1, 0, 1], [1, 1, 0]]), 2, name="split")
    return {"feeds": {d: rand(18, 2, 3)}, "fetch": {"p0": parts[0], "p1": parts[1]},
            "grads": ("p1", [d]), "names": [parts[0].op.name]}


@case
def dynamic_partition_out_of_range(tf):
    d = tf.placeholder(tf.float32, [3], name="d")
    p = tf.placeholder(tf.int32, [3], name="p")
    parts = tf.dynamic_partition(d, p, 2)
    return {"feeds": {d: rand(19, 3), p: np.array([0, 2, 1], np.int32)},
            "fetch": {"p0": parts[0]}}


# --------------------------------------------------------------------- segments
@case
def segment_reductions(tf):
    d = tf.placeholder(tf.float32, [None, 3], name="d")
    ids = tf.placeholder(tf.int32, [None], name="ids")
    s = tf.segment_sum(d, ids)
    m = tf.segment_mean(d, ids)
    mx = tf.segment_max(d, ids)
    mn = tf.segment_min(d, ids)
    out = s + 2.0 * m + 3.0 * mx - mn
    return {"feeds": {d: rand(20, 6, 3), ids: np.array([0, 0, 1, 3, 3, 3], np.int32)},
            "fetch": {"s": s, "m": m, "mx": mx, "mn": mn, "out": out},
            "grads": ("out", [d]), "names": [s.op.name, m.op.name, mx.op.name, mn.op.name]}


@case
def segment_max_ties(tf):
    d = tf.placeholder(tf.float32, [5], name="d")
    mx = tf.segment_max(d, tf.constant([0, 0, 0, 1, 1], tf.int64))
    return {"feeds": {d: np.array([1, 3, 3, 2, 2], np.float32)}, "fetch": {"mx": mx},
            "grads": ("mx", [d])}


@case
def segment_sum_int(tf):
    d = tf.constant(np.arange(8, dtype=np.int32).reshape(4, 2))
    return {"feeds": {}, "fetch": {"s": tf.segment_sum(d, [0, 1, 1, 2], name="ss")}}


@case
def segment_sum_unsorted_ids(tf):
    d = tf.placeholder(tf.float32, [3], name="d")
    ids = tf.placeholder(tf.int32, [3], name="ids")
    return {"feeds": {d: rand(21, 3), ids: np.array([0, 2, 1], np.int32)},
            "fetch": {"s": tf.segment_sum(d, ids)}}


@case
def segment_sum_length_mismatch(tf):
    d = tf.placeholder(tf.float32, [3, 2], name="d")
    return {"feeds": {}, "fetch": {"s": tf.segment_sum(d, [0, 1])}}


@case
def unsorted_segment_sum_negative_ids(tf):
    d = tf.placeholder(tf.float32, [None, 2], name="d")
    ids = tf.placeholder(tf.int32, [None], name="ids")
    s = tf.unsorted_segment_sum(d, ids, 4)
    return {"feeds": {d: rand(22, 6, 2), ids: np.array([2, 0, -1, 2, 0, 1], np.int32)},
            "fetch": {"s": s}, "grads": ("s", [d]), "names": [s.op.name]}


@case
def unsorted_segment_max_min(tf):
    d = tf.placeholder(tf.float32, [None, 2], name="d")
    ids = tf.placeholder(tf.int32, [None], name="ids")
    mx = tf.unsorted_segment_max(d, ids, 3)
    mn = tf.unsorted_segment_min(d, ids, 3)
    out = 2.0 * mx + mn
    v = rand(26, 6, 2)
    v[3] = v[0]
    return {"feeds": {d: v, ids: np.array([2, 0, -1, 2, 0, 1], np.int32)},
            "fetch": {"mx": mx, "mn": mn, "out": out}, "grads": ("out", [d]),
            "names": [mx.op.name, mn.op.name]}


@case
def unsorted_segment_max_empty_float(tf):
    d = tf.placeholder(tf.float32, [2], name="d")
    return {"feeds": {d: rand(27, 2)},
            "fetch": {"mx": tf.unsorted_segment_max(d, [0, 0], 2),
                      "mn": tf.unsorted_segment_min(d, [1, 1], 2)}}


@case
def unsorted_segment_prod_with_zeros(tf):
    d = tf.placeholder(tf.float32, [7], name="d")
    ids = tf.constant([0, 0, 1, 1, 1, 2, 3], tf.int64)
    pr = tf.unsorted_segment_prod(d, ids, 5)
    return {"feeds": {d: np.array([2, 3, 0, 4, 5, 0, 1.5], np.float32)}, "fetch": {"pr": pr},
            "grads": ("pr", [d])}


@case
def unsorted_segment_prod_two_zeros(tf):
    d = tf.placeholder(tf.float32, [4], name="d")
    pr = tf.unsorted_segment_prod(d, tf.constant([0, 0, 0, 1]), 2)
    return {"feeds": {d: np.array([0, 3, 0, 2], np.float32)}, "fetch": {"pr": pr},
            "grads": ("pr", [d])}


@case
def unsorted_segment_mean_multi_dim_ids(tf):
    d = tf.placeholder(tf.float32, [2, 3, 2], name="d")
    ids = tf.constant([[0, 1, 0], [2, 2, 0]])
    mean = tf.unsorted_segment_mean(d, ids, 4)
    total = tf.unsorted_segment_sum(d, ids, tf.constant(3))
    return {"feeds": {d: rand(23, 2, 3, 2)}, "fetch": {"mean": mean, "total": total},
            "grads": ("mean", [d])}


@case
def unsorted_segment_sum_fed_num(tf):
    d = tf.placeholder(tf.float32, [None], name="d")
    n = tf.placeholder(tf.int32, [], name="n")
    s = tf.unsorted_segment_sum(d, tf.constant([1, 1, 0]), n)
    return {"feeds": {d: rand(24, 3), n: np.int32(3)}, "fetch": {"s": s}, "grads": ("s", [d])}


@case
def unsorted_segment_max_int_empty(tf):
    d = tf.constant([3, 1, 2], tf.int32)
    return {"feeds": {}, "fetch": {"mx": tf.unsorted_segment_max(d, [0, 0, 2], 3),
                                   "mn": tf.unsorted_segment_min(d, [0, 0, 2], 3)}}


@case
def unsorted_segment_sum_out_of_range(tf):
    d = tf.placeholder(tf.float32, [3], name="d")
    ids = tf.placeholder(tf.int32, [3], name="ids")
    return {"feeds": {d: rand(25, 3), ids: np.array([0, 3, 1], np.int32)},
            "fetch": {"s": tf.unsorted_segment_sum(d, ids, 3)}}


@case
def unsorted_segment_sum_bad_prefix(tf):
    d = tf.placeholder(tf.float32, [3, 2], name="d")
    return {"feeds": {}, "fetch": {"s": tf.unsorted_segment_sum(d, [[0, 1, 2]], 3)}}


# --------------------------------------------------------------------- sequence_mask
@case
def sequence_mask_maxlen(tf):
    lengths = tf.placeholder(tf.int32, [None], name="lengths")
    out = tf.sequence_mask(lengths, 5)
    return {"feeds": {lengths: np.array([0, 2, 5, 7], np.int32)}, "fetch": {"out": out},
            "names": [out.op.name]}


@case
def sequence_mask_default_maxlen_float(tf):
    lengths = tf.placeholder(tf.int32, [2, None], name="lengths")
    out = tf.sequence_mask(lengths, dtype=tf.float32)
    return {"feeds": {lengths: np.array([[1, 3], [0, 2]], np.int32)}, "fetch": {"out": out},
            "names": [out.op.name]}


@case
def sequence_mask_tensor_maxlen_int64(tf):
    lengths = tf.constant([1, 2], tf.int64)
    m = tf.placeholder(tf.int32, [], name="m")
    out = tf.sequence_mask(lengths, m, dtype=tf.int32, name="mask")
    return {"feeds": {m: np.int32(3)}, "fetch": {"out": out}, "names": [out.op.name]}


@case
def gather_nd_batch_dims(tf):
    p = tf.placeholder(tf.float32, [2, 3, 4], name="p")
    i = tf.placeholder(tf.int32, [2, 5, 1], name="i")
    out = tf.gather_nd(p, i, batch_dims=1)
    return {"feeds": {p: rand(28, 2, 3, 4),
                      i: np.array([[[1], [0], [2], [1], [1]], [[2], [2], [0], [1], [0]]],
                                  np.int32)},
            "fetch": {"out": out}, "grads": ("out", [p])}


@case
def gather_nd_batch_dims_two_unknown(tf):
    p = tf.placeholder(tf.float64, [None, 3, 4], name="p")
    i = tf.placeholder(tf.int64, [None, 3, 1], name="i")
    out = tf.gather_nd(p, i, batch_dims=2)
    return {"feeds": {p: rand(29, 2, 3, 4, dtype=np.float64),
                      i: np.array([[[3], [0], [1]], [[2], [2], [0]]], np.int64)},
            "fetch": {"out": out}, "grads": ("out", [p])}


@case
def gather_nd_batch_dims_index_pairs(tf):
    p = tf.placeholder(tf.float32, [None, 3, 4], name="p")
    i = tf.placeholder(tf.int32, [None, 2, 2], name="i")
    out = tf.gather_nd(p, i, batch_dims=1)
    return {"feeds": {p: rand(30, 2, 3, 4),
                      i: np.array([[[2, 3], [0, 0]], [[1, 1], [1, 1]]], np.int32)},
            "fetch": {"out": out}, "grads": ("out", [p])}


@case
def gather_nd_batch_dims_mismatch(tf):
    p = tf.placeholder(tf.float32, [2, 3], name="p")
    i = tf.placeholder(tf.int32, [3, 1], name="i")
    return {"feeds": {}, "fetch": {"out": tf.gather_nd(p, i, batch_dims=1)}}


# --------------------------------------------------------------------- dynamic_stitch
@case
def dynamic_stitch_overwrite_and_holes(tf):
    i2 = tf.placeholder(tf.int32, [None], name="i2")
    d1 = tf.placeholder(tf.float32, [2, 2], name="d1")
    d2 = tf.placeholder(tf.float32, [None, 2], name="d2")
    out = tf.dynamic_stitch([tf.constant([0, 4]), i2], [d1, d2])
    return {"feeds": {i2: np.array([2, 0], np.int32), d1: rand(31, 2, 2), d2: rand(32, 2, 2)},
            "fetch": {"out": out}, "grads": ("out", [d1, d2]), "names": [out.op.name]}


@case
def dynamic_stitch_constant_indices(tf):
    d = tf.placeholder(tf.float64, [2, 3], name="d")
    e = tf.placeholder(tf.float64, [], name="e")
    out = tf.dynamic_stitch([tf.constant([[1, 0, 3], [5, 5, 2]]), tf.constant(4)], [d, e],
                            name="stitched")
    return {"feeds": {d: rand(33, 2, 3, dtype=np.float64), e: np.float64(0.25)},
            "fetch": {"out": out}, "grads": ("out", [d, e]), "names": [out.op.name]}


@case
def dynamic_stitch_trailing_dims_differ(tf):
    d = tf.placeholder(tf.float64, [2, 3], name="d")
    e = tf.placeholder(tf.float64, [3], name="e")
    out = tf.dynamic_stitch([tf.constant([[1, 0, 3], [5, 5, 2]]), tf.constant(4)], [d, e])
    return {"feeds": {}, "fetch": {"out": out}}


@case
def dynamic_stitch_partition_round_trip(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    p = tf.placeholder(tf.int32, [None], name="p")
    idx = tf.dynamic_partition(tf.range(tf.shape(x)[0]), p, 2)
    parts = tf.dynamic_partition(x, p, 2)
    out = tf.dynamic_stitch(idx, [parts[0] * 2.0, parts[1]])
    return {"feeds": {x: rand(35, 5, 3), p: np.array([1, 0, 0, 1, 1], np.int32)},
            "fetch": {"out": out}, "grads": ("out", [x])}


@case
def dynamic_stitch_int64_indices(tf):
    return {"feeds": {}, "fetch": {"out": tf.dynamic_stitch([tf.constant([0], tf.int64)],
                                                            [tf.constant([1.0])])}}


@case
def dynamic_stitch_negative_index(tf):
    i = tf.placeholder(tf.int32, [2], name="i")
    out = tf.dynamic_stitch([i], [tf.constant([1.0, 2.0])])
    return {"feeds": {i: np.array([0, -1], np.int32)}, "fetch": {"out": out}}


@case
def segment_prod_with_empty(tf):
    d = tf.placeholder(tf.float32, [None, 2], name="d")
    out = tf.segment_prod(d, tf.constant([0, 0, 2, 2, 2]))
    return {"feeds": {d: rand(36, 5, 2)}, "fetch": {"out": out}, "grads": ("out", [d]),
            "names": [out.op.name]}


@case
def one_hot_axis_past_rank(tf):
    i = tf.placeholder(tf.int32, [2], name="i")
    return {"feeds": {i: np.array([0, 1], np.int32)}, "fetch": {"out": tf.one_hot(i, 2, axis=3)}}


@case
def one_hot_axis_below_minus_one(tf):
    return {"feeds": {}, "fetch": {"out": tf.one_hot([1], 2, axis=-2)}}


@case
def unique_nans_are_distinct(tf):
    x = tf.placeholder(tf.float32, [None], name="x")
    y, idx = tf.unique(x)
    return {"feeds": {x: np.array([np.nan, 1.0, np.nan, 1.0], np.float32)},
            "fetch": {"y": y, "idx": idx}}


@case
def names_inside_a_scope(tf):
    x = tf.placeholder(tf.float32, [2], name="x")
    with tf.name_scope("foo"):
        outs = {"r": tf.range(5, name=None), "m": tf.boolean_mask(x, [True, False]),
                "h": tf.one_hot([1], 2), "w": tf.where([True]), "s": tf.sequence_mask([1], 2),
                "g": tf.gather_nd(x, [[1]]), "u": tf.unique([1]).y,
                "st": tf.dynamic_stitch([[0]], [[1.0]]), "ss": tf.segment_sum(x, [0, 0])}
    return {"feeds": {x: rand(37, 2)}, "fetch": outs,
            "names": [t.op.name for _, t in sorted(outs.items())]}
