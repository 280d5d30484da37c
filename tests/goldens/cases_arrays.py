"""Golden cases, area ``arrays``: slicing and indexing (``StridedSlice``, ``Slice``),
stack/unstack/split/tile/pad/reverse/broadcast_to, shape queries, and tensors used as
shapes and axes (static shapes with unknown dims as TF's shape inference). See
:mod:`cases` for the case format."""

from __future__ import annotations

from typing import Any

import numpy as np

from .cases import case, rand


def _index(tf: Any, shape: list, value: np.ndarray, fn: Any) -> dict:
    x = tf.placeholder(tf.float32, shape, name="x")
    y = fn(x)
    return {"feeds": {x: value}, "fetch": {"out": y}, "grads": ("out", [x]),
            "names": [y.op.name, y.op.type]}


@case
def index_column(tf):
    return _index(tf, [None, 4], rand(1, 3, 4), lambda x: x[:, 0])


@case
def index_range_ellipsis_newaxis(tf):
    return _index(tf, [None, 3, 4], rand(2, 4, 3, 4), lambda x: x[1:-1, ..., None])


@case
def index_reverse(tf):
    return _index(tf, [5, None], rand(3, 5, 2), lambda x: x[::-1])


@case
def index_steps_negative(tf):
    return _index(tf, [6, 5], rand(4, 6, 5), lambda x: x[-1:0:-2, 4:1:-1])


@case
def index_newaxis_front_and_shrink(tf):
    return _index(tf, [2, 3, 4], rand(5, 2, 3, 4), lambda x: x[None, 1, ..., 2])


@case
def index_known_shape_all_kinds(tf):
    return _index(tf, [4, 5, 6], rand(6, 4, 5, 6), lambda x: x[1:3, ::2, -2])


@case
def index_scalar_tensor(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    t = tf.placeholder(tf.int32, [], name="t")
    y = x[t]
    z = x[:, t]
    w = x[t:]
    return {"feeds": {x: rand(7, 4, 3), t: np.int32(2)},
            "fetch": {"out": y, "col": z, "rest": w}, "grads": ("out", [x]),
            "names": [y.op.name, z.op.name]}


@case
def index_out_of_bounds_static(tf):
    x = tf.placeholder(tf.float32, [3, 5], name="x")
    return {"feeds": {}, "fetch": {"out": x[5]}}


@case
def index_out_of_bounds_at_run_time(tf):
    x = tf.placeholder(tf.float32, [None, 5], name="x")
    t = tf.placeholder(tf.int32, [], name="t")
    return {"feeds": {x: rand(8, 2, 5), t: np.int32(4)}, "fetch": {"out": x[t]}}


@case
def strided_slice_masks(tf):
    x = tf.placeholder(tf.float32, [None, 4, 5], name="x")
    y = tf.strided_slice(x, [0, 1, 0, 3], [0, 3, 0, 0], [1, 1, 1, 1], begin_mask=1,
                         end_mask=1, ellipsis_mask=4, shrink_axis_mask=8)
    z = tf.strided_slice(x, [1, 0], [2, 4], new_axis_mask=2)
    return {"feeds": {x: rand(9, 3, 4, 5)}, "fetch": {"out": y, "z": z}, "grads": ("out", [x]),
            "names": [y.op.name, z.op.name]}


@case
def slice_with_minus_one(tf):
    x = tf.placeholder(tf.float32, [4, None], name="x")
    y = tf.slice(x, [1, 2], [-1, 2])
    return {"feeds": {x: rand(10, 4, 5)}, "fetch": {"out": y}, "grads": ("out", [x]),
            "names": [y.op.name]}


@case
def stack_and_unstack(tf):
    a = tf.placeholder(tf.float32, [None, 3], name="a")
    b = tf.placeholder(tf.float32, [2, 3], name="b")
    s = tf.stack([a, b], axis=1)
    parts = tf.unstack(s, axis=2)
    out = parts[0] * 2.0 + parts[2]
    return {"feeds": {a: rand(11, 2, 3), b: rand(12, 2, 3)},
            "fetch": {"stack": s, "out": out, "p1": parts[1]}, "grads": ("out", [a, b]),
            "names": [s.op.name, parts[0].op.name]}


@case
def unstack_num_of_unknown_dim(tf):
    a = tf.placeholder(tf.float32, [None, 3], name="a")
    parts = tf.unstack(a, num=2)
    return {"feeds": {a: rand(13, 2, 3)}, "fetch": {"p0": parts[0], "p1": parts[1]}}


@case
def unstack_unknown_num_raises(tf):
    a = tf.placeholder(tf.float32, [None, 3], name="a")
    return {"feeds": {}, "fetch": {"p0": tf.unstack(a)[0]}}


@case
def split_even_and_sizes(tf):
    x = tf.placeholder(tf.float32, [None, 6], name="x")
    even = tf.split(x, 3, axis=1)
    sized = tf.split(x, [1, -1, 2], 1)
    out = even[0] * sized[0] + tf.reduce_sum(sized[1], axis=1, keepdims=True) + even[2]
    return {"feeds": {x: rand(14, 2, 6)},
            "fetch": {"out": out, "mid": sized[1], "e1": even[1]}, "grads": ("out", [x]),
            "names": [even[0].op.name, sized[0].op.name, even[0].op.type, sized[0].op.type]}


@case
def tile_reverse_broadcast(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    t = tf.tile(x, [2, 2])
    r = tf.reverse(t, [0, 1])
    b = tf.broadcast_to(x[:1], [4, 3])
    out = r * 1.5 + tf.concat([b, b], 1)
    return {"feeds": {x: rand(15, 2, 3)}, "fetch": {"out": out, "t": t, "b": b},
            "grads": ("out", [x]), "names": [t.op.name, r.op.name, b.op.name]}


@case
def broadcast_to_shape_of(tf):
    x = tf.placeholder(tf.float32, [3, 1], name="x")
    y = tf.placeholder(tf.float32, [None, 3, 4], name="y")
    b = tf.broadcast_to(x, tf.shape(y))
    return {"feeds": {x: rand(16, 3, 1), y: rand(17, 2, 3, 4)}, "fetch": {"out": b * y},
            "grads": ("out", [x, y])}


@case
def pad_modes(tf):
    x = tf.placeholder(tf.float32, [None, 4], name="x")
    c = tf.pad(x, [[1, 0], [2, 1]])
    v2 = tf.pad(x, [[0, 1], [1, 1]], constant_values=3.0)
    rf = tf.pad(x, [[1, 1], [3, 2]], "REFLECT")
    sy = tf.pad(x, [[2, 1], [0, 4]], mode="SYMMETRIC")
    out = tf.reduce_sum(c) + tf.reduce_sum(v2 * v2) + tf.reduce_sum(rf * rf) + tf.reduce_sum(
        sy * sy * sy)
    return {"feeds": {x: rand(18, 3, 4)}, "fetch": {"out": out, "c": c, "v2": v2, "rf": rf,
                                                    "sy": sy},
            "grads": ("out", [x]), "names": [c.op.type, v2.op.type, rf.op.type, c.op.name]}


@case
def reshape_to_shape_of_other(tf):
    x = tf.placeholder(tf.float32, [None, 5, 4], name="x")
    y = tf.placeholder(tf.float32, [None, 20], name="y")
    r1 = tf.reshape(x, tf.shape(y))
    r2 = tf.reshape(x, [-1, tf.shape(y)[1]])
    r3 = tf.reshape(x, [tf.shape(x)[0], -1, 2])
    out = r1 * y + r2
    return {"feeds": {x: rand(19, 2, 5, 4), y: rand(20, 2, 20)},
            "fetch": {"out": out, "r3": r3}, "grads": ("out", [x, y]),
            "names": [r1.op.name, r2.op.name]}


@case
def reshape_known_via_shape(tf):
    x = tf.placeholder(tf.float32, [3, 5], name="x")
    z = tf.placeholder(tf.float32, [15], name="z")
    r = tf.reshape(z, tf.shape(x))
    return {"feeds": {x: rand(21, 3, 5), z: rand(22, 15)}, "fetch": {"out": r + x},
            "grads": ("out", [z])}


@case
def fill_zeros_ones_from_shape_tensors(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    f = tf.fill(tf.shape(x), 2.5)
    z = tf.zeros(tf.shape(x), dtype=tf.int32)
    o = tf.ones([tf.shape(x)[0], 2])
    big = tf.zeros([10, 200])
    return {"feeds": {x: rand(23, 2, 3)},
            "fetch": {"f": f * x, "z": z, "o": o, "big": tf.reduce_sum(big)},
            "grads": ("f", [x]),
            "names": [f.op.type, z.op.name, z.op.type, o.op.name, big.op.type]}


@case
def expand_dims_and_concat_tensor_axes(tf):
    x = tf.placeholder(tf.float32, [2, 3], name="x")
    a = tf.constant(1)
    e = tf.expand_dims(x, a)
    c = tf.concat([x, x * 2.0], tf.constant(-1))
    e2 = tf.expand_dims(x, -1)
    return {"feeds": {x: rand(24, 2, 3)}, "fetch": {"e": e, "c": c, "e2": e2},
            "grads": ("c", [x]), "names": [e.op.name, c.op.name, e.op.type]}


@case
def unknown_rank_concat_squeeze_expand(tf):
    u = tf.placeholder(tf.float32, None, name="u")
    y = tf.placeholder(tf.float32, [None, 3], name="y")
    c = tf.concat([u, y], 0)
    s = tf.squeeze(u)
    e = tf.expand_dims(u, 0)
    return {"feeds": {u: rand(25, 1, 3), y: rand(26, 2, 3)},
            "fetch": {"c": c, "s": s, "e": e}, "grads": ("c", [u, y])}


@case
def squeeze_unknown_dims(tf):
    s = tf.placeholder(tf.float32, [None, 1, 3, 1], name="s")
    a = tf.squeeze(s)
    b = tf.squeeze(s, [1])
    c = tf.squeeze(s, axis=[0, -1])
    return {"feeds": {s: rand(27, 1, 1, 3, 1)}, "fetch": {"a": a, "b": b, "c": c},
            "grads": ("b", [s]), "names": [a.op.name, a.op.type]}


@case
def squeeze_non_one_dim_raises(tf):
    s = tf.placeholder(tf.float32, [2, 3], name="s")
    return {"feeds": {}, "fetch": {"a": tf.squeeze(s, [0])}}


@case
def size_rank_shape_n(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    z = tf.placeholder(tf.float32, [2, 5], name="z")
    sn = tf.shape_n([x, z])
    return {"feeds": {x: rand(28, 4, 3), z: rand(29, 2, 5)},
            "fetch": {"size_x": tf.size(x), "size_z": tf.size(z), "rank": tf.rank(x),
                      "sn0": sn[0], "sn1": sn[1], "shape_z": tf.shape(z)},
            "names": [tf.size(x).op.type, tf.size(z).op.type, sn[0].op.name, sn[1].op.name,
                      tf.shape(z).op.type, tf.shape(x).op.type]}


@case
def placeholder_with_default_and_identity_n(tf):
    d = tf.placeholder_with_default(tf.constant(rand(30, 2, 3)), [None, 3])
    x = tf.placeholder(tf.float32, [2, 3], name="x")
    ids = tf.identity_n([d, x])
    out = ids[0] * ids[1]
    return {"feeds": {x: rand(31, 2, 3)}, "fetch": {"out": out, "d": d},
            "grads": ("out", [x]), "names": [d.op.name, ids[0].op.name, ids[1].op.name]}


@case
def int_and_bool_slicing(tf):
    x = tf.placeholder(tf.int64, [None, 4], name="x")
    b = tf.placeholder(tf.bool, [3], name="b")
    return {"feeds": {x: np.arange(12).reshape(3, 4), b: np.array([True, False, True])},
            "fetch": {"xs": x[::2, 1:], "bs": b[::-1], "st": tf.stack([x[0], x[1]], 1),
                      "sp": tf.split(x, 2, 1)[1], "pad": tf.pad(x, [[0, 1], [1, 0]])}}


@case
def shape_dimension_values(tf):
    x = tf.placeholder(tf.float32, [None, 6], name="x")
    n = x.get_shape()[-1].value
    dims = [d for d in x.shape]
    w = tf.zeros([n, dims[1] // 2])
    return {"feeds": {x: rand(32, 2, 6)}, "fetch": {"out": tf.matmul(x, w + 1.0)},
            "grads": ("out", [x])}


@case
def autopacking_mixed_list(tf):
    x = tf.placeholder(tf.float32, [None, 6], name="x")
    v = tf.Variable(2.0, name="v")
    packed = tf.convert_to_tensor([v, 3.0])
    cols = tf.reshape(x, tf.stack([tf.shape(x)[0] * 2, 3]))
    return {"feeds": {x: rand(33, 2, 6)}, "init": True,
            "fetch": {"packed": packed, "cols": cols}, "grads": ("cols", [x]),
            "names": [packed.op.type]}


@case
def reshape_two_unknowns_fails_at_run_time(tf):
    x = tf.placeholder(tf.float32, [None, 6], name="x")
    return {"feeds": {x: rand(34, 2, 6)}, "fetch": {"r": tf.reshape(x, [-1, -1])}}


@case
def static_value_of_shapes(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    z = tf.zeros([2, 3])
    known = tf.get_static_value(tf.shape(z))
    unknown = tf.get_static_value(tf.shape(x))
    return {"feeds": {x: rand(35, 2, 3)},
            "fetch": {"known": tf.constant(known), "flag": tf.constant(unknown is None),
                      "t": tf.reshape(x, [known[1], -1])}}


@case
def tensor_shapes_as_shapes(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    z = tf.zeros([2, 3])
    r = tf.reshape(x, z.shape)
    b1 = tf.broadcast_to(tf.ones([2, 1]), [tf.shape(x)[0], 4])
    return {"feeds": {x: rand(36, 2, 3)},
            "fetch": {"r": r * tf.zeros(z.shape), "f": tf.fill(z.shape, 1.5), "b1": b1},
            "grads": ("r", [x])}


@case
def concat_scalars_raises(tf):
    return {"feeds": {}, "fetch": {"c": tf.concat([tf.constant(1.0), tf.constant(2.0)], 0)}}


@case
def expand_dims_axis_out_of_range_at_run_time(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    a = tf.placeholder(tf.int32, [], name="a")
    return {"feeds": {x: rand(37, 2, 3), a: np.int32(4)}, "fetch": {"e": tf.expand_dims(x, a)}}


@case
def index_int64_tensors(tf):
    x = tf.placeholder(tf.float32, [None, 4], name="x")
    t = tf.placeholder(tf.int64, [], name="t")
    y = x[t]
    z = x[:, t:]
    w = x[:, ::-1][:, t]
    return {"feeds": {x: rand(38, 3, 4), t: np.int64(1)}, "fetch": {"y": y, "z": z, "w": w},
            "grads": ("z", [x])}


@case
def model_patterns(tf):
    x = tf.placeholder(tf.float32, [None, 8, 4], name="x")
    h = tf.reshape(x, [-1, x.shape[1].value * x.shape[2].value])
    i, j, f, o = tf.split(value=h, num_or_size_splits=4, axis=1)
    seq = tf.stack([tf.concat([s, s * 2.0], axis=1) for s in tf.unstack(x, axis=1)], axis=1)
    w = tf.constant(rand(39, 4, 3))
    y = tf.reshape(tf.matmul(tf.reshape(x, [-1, 4]), w),
                   tf.concat([tf.shape(x)[:-1], [3]], 0))
    b = tf.shape(x, "batch_shape")
    out = tf.reduce_sum(seq[:, -1, :]) + tf.reduce_sum(y * y) + tf.reduce_sum(i * o)
    return {"feeds": {x: rand(40, 2, 8, 4)},
            "fetch": {"out": out, "y": y, "seq": seq, "j": j, "b": b},
            "grads": ("out", [x]), "names": [b.op.name, i.op.name]}
