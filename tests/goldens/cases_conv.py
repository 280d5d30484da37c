"""Golden cases, area ``conv``: conv2d, conv2d_transpose, max_pool, avg_pool (NHWC): values,
gradients (Conv2DBackpropInput/Filter, MaxPoolGrad, AvgPoolGrad), static shapes, op names,
TF's SAME padding split and max-pool ties. See :mod:`cases` for the case format."""

from __future__ import annotations

from typing import Any

import numpy as np

from .cases import case, rand


def _conv(tf: Any, x: np.ndarray, w: np.ndarray, batch_known: bool = False,
          grads: bool = True, **kw: Any) -> dict:
    shp = list(x.shape) if batch_known else [None, *x.shape[1:]]
    xp = tf.placeholder(tf.float32, shp, name="x")
    wv = tf.Variable(w, name="w")
    out = tf.nn.conv2d(xp, wv, **kw)
    c = {"feeds": {xp: x}, "fetch": {"out": out}, "init": True, "names": [out.op.name]}
    if grads:
        c["grads"] = ("out", [xp, wv])
    return c


@case
def conv2d_same_stride1(tf):
    return _conv(tf, rand(1, 2, 6, 6, 3), rand(2, 3, 3, 3, 4), strides=[1, 1, 1, 1],
                 padding="SAME")


@case
def conv2d_valid_stride2(tf):
    return _conv(tf, rand(3, 2, 7, 8, 2), rand(4, 3, 2, 2, 5), strides=[1, 2, 2, 1],
                 padding="VALID")


@case
def conv2d_same_stride2_odd_padding_split(tf):
    # in 6, k 4, stride 2: out 3, total padding 2 -> 1 before, 1 after; in 7, k 2: 0 / 1.
    return _conv(tf, rand(5, 1, 6, 7, 2), rand(6, 4, 2, 2, 3), strides=[1, 2, 2, 1],
                 padding="SAME")


@case
def conv2d_same_stride3_more_padding_at_end(tf):
    return _conv(tf, rand(7, 2, 5, 5, 1), rand(8, 2, 2, 1, 2), strides=3, padding="SAME",
                 batch_known=True)


@case
def conv2d_dilated(tf):
    # TF's CPU kernels have no dilated gradients ("do not yet support dilation rates larger
    # than 1"): values only here; tests/runtime/test_conv_ops.py checks ours numerically.
    return _conv(tf, rand(9, 2, 7, 7, 3), rand(10, 3, 3, 3, 2), grads=False,
                 strides=[1, 1, 1, 1], padding="SAME", dilations=[1, 2, 2, 1])


@case
def conv2d_dilated_valid_strided(tf):
    return _conv(tf, rand(11, 1, 9, 8, 2), rand(12, 2, 3, 2, 2), grads=False,
                 strides=[1, 2, 1, 1], padding="VALID", dilations=[1, 2, 3, 1])


@case
def conv2d_filters_keyword_and_two_strides(tf):
    x = tf.placeholder(tf.float32, [None, 5, 5, 2], name="x")
    w = tf.constant(rand(13, 3, 3, 2, 3))
    out = tf.nn.conv2d(x, filters=w, strides=[2, 2], padding="VALID", name="conv")
    return {"feeds": {x: rand(14, 3, 5, 5, 2)}, "fetch": {"out": out},
            "grads": ("out", [x, w]), "names": [out.op.name]}


@case
def conv2d_explicit_padding(tf):
    return _conv(tf, rand(15, 2, 5, 4, 2), rand(16, 3, 2, 2, 3), strides=[1, 1, 2, 1],
                 padding=[[0, 0], [1, 2], [0, 1], [0, 0]])


@case
def conv2d_1x1(tf):
    return _conv(tf, rand(17, 3, 4, 4, 5), rand(18, 1, 1, 5, 2), strides=1, padding="VALID")


@case
def conv2d_unknown_spatial_shape(tf):
    x = tf.placeholder(tf.float32, [None, None, None, 2], name="x")
    out = tf.nn.conv2d(x, tf.constant(rand(19, 3, 3, 2, 4)), strides=2, padding="SAME")
    return {"feeds": {x: rand(20, 2, 5, 6, 2)}, "fetch": {"out": out}, "grads": ("out", [x])}


@case
def conv2d_float64(tf):
    x = tf.placeholder(tf.float64, [2, 4, 4, 1], name="x")
    w = tf.constant(rand(21, 2, 2, 1, 2, dtype=np.float64))
    out = tf.nn.conv2d(x, w, strides=1, padding="SAME")
    return {"feeds": {x: rand(22, 2, 4, 4, 1, dtype=np.float64)}, "fetch": {"out": out},
            "grads": ("out", [x, w])}


@case
def conv2d_rank3_input_raises(tf):
    x = tf.placeholder(tf.float32, [5, 5, 2])
    tf.nn.conv2d(x, tf.constant(rand(23, 3, 3, 2, 4)), strides=1, padding="SAME")
    return {}


@case
def conv2d_depth_mismatch_raises(tf):
    x = tf.placeholder(tf.float32, [1, 5, 5, 3])
    tf.nn.conv2d(x, tf.constant(rand(24, 3, 3, 2, 4)), strides=1, padding="SAME")
    return {}


@case
def conv2d_window_too_large_valid_raises(tf):
    x = tf.placeholder(tf.float32, [1, 3, 3, 1])
    tf.nn.conv2d(x, tf.constant(rand(25, 4, 4, 1, 1)), strides=1, padding="VALID")
    return {}


@case
def conv2d_bad_padding_raises(tf):
    x = tf.placeholder(tf.float32, [1, 3, 3, 1])
    tf.nn.conv2d(x, tf.constant(rand(26, 2, 2, 1, 1)), strides=1, padding="FULL")
    return {}


@case
def conv2d_filter_and_filters_raises(tf):
    x = tf.placeholder(tf.float32, [1, 3, 3, 1])
    w = tf.constant(rand(27, 2, 2, 1, 1))
    tf.nn.conv2d(x, filter=w, filters=w, strides=1, padding="SAME")
    return {}


@case
def conv2d_dtype_mismatch_raises(tf):
    x = tf.placeholder(tf.float32, [1, 3, 3, 1])
    tf.nn.conv2d(x, tf.constant(rand(28, 2, 2, 1, 1, dtype=np.float64)), strides=1,
                 padding="SAME")
    return {}


def _transpose(tf: Any, value: np.ndarray, w: np.ndarray, out_shape: Any, **kw: Any) -> dict:
    v = tf.placeholder(tf.float32, [None, *value.shape[1:]], name="v")
    wv = tf.Variable(w, name="w")
    out = tf.nn.conv2d_transpose(v, wv, out_shape, **kw)
    return {"feeds": {v: value}, "fetch": {"out": out}, "grads": ("out", [v, wv]),
            "init": True, "names": [out.op.name]}


@case
def conv2d_transpose_same_stride2(tf):
    return _transpose(tf, rand(30, 2, 3, 4, 3), rand(31, 3, 3, 5, 3), [2, 6, 8, 5],
                      strides=[1, 2, 2, 1], padding="SAME")


@case
def conv2d_transpose_valid_stride2(tf):
    return _transpose(tf, rand(32, 2, 3, 3, 2), rand(33, 3, 3, 4, 2), [2, 7, 7, 4],
                      strides=[1, 2, 2, 1], padding="VALID")


@case
def conv2d_transpose_same_odd_output(tf):
    return _transpose(tf, rand(34, 1, 3, 3, 2), rand(35, 2, 2, 1, 2), [1, 5, 6, 1],
                      strides=2, padding="SAME", name="up")


@case
def conv2d_transpose_output_shape_tensor(tf):
    v = tf.placeholder(tf.float32, [2, 2, 2, 3], name="v")
    w = tf.constant(rand(36, 3, 3, 4, 3))
    out = tf.nn.conv2d_transpose(v, w, tf.constant([2, 4, 4, 4]), strides=[1, 2, 2, 1],
                                 padding="SAME")
    return {"feeds": {v: rand(37, 2, 2, 2, 3)}, "fetch": {"out": out}, "grads": ("out", [v, w])}


@case
def conv2d_transpose_output_shape_from_tf_shape(tf):
    v = tf.placeholder(tf.float32, [None, 3, 3, 2], name="v")
    w = tf.constant(rand(39, 3, 3, 4, 2))
    out = tf.nn.conv2d_transpose(v, w, [tf.shape(v)[0], 6, 6, 4], strides=2, padding="SAME")
    stacked = tf.nn.conv2d_transpose(v, w, tf.stack([tf.shape(v)[0], 5, 5, 4]), strides=2,
                                     padding="SAME")
    return {"feeds": {v: rand(55, 2, 3, 3, 2)}, "fetch": {"out": out, "stacked": stacked},
            "grads": ("out", [v])}


@case
def conv2d_transpose_depth_mismatch_raises(tf):
    v = tf.placeholder(tf.float32, [2, 2, 2, 3])
    tf.nn.conv2d_transpose(v, tf.constant(rand(38, 3, 3, 4, 2)), [2, 4, 4, 4],
                           strides=[1, 2, 2, 1], padding="SAME")
    return {}


def _pool(tf: Any, fn: str, x: np.ndarray, batch_known: bool = False, **kw: Any) -> dict:
    xp = tf.placeholder(tf.float32, list(x.shape) if batch_known else [None, *x.shape[1:]],
                        name="x")
    out = getattr(tf.nn, fn)(xp, **kw)
    return {"feeds": {xp: x}, "fetch": {"out": out}, "grads": ("out", [xp]),
            "names": [out.op.name]}


@case
def max_pool_2x2_valid(tf):
    return _pool(tf, "max_pool", rand(40, 2, 6, 6, 3), ksize=[1, 2, 2, 1],
                 strides=[1, 2, 2, 1], padding="VALID")


@case
def max_pool_3x3_stride2_same(tf):
    return _pool(tf, "max_pool", rand(41, 2, 7, 6, 2), ksize=[1, 3, 3, 1],
                 strides=[1, 2, 2, 1], padding="SAME")


@case
def max_pool_overlapping_stride1_same(tf):
    return _pool(tf, "max_pool", rand(42, 1, 5, 5, 2), ksize=3, strides=1, padding="SAME",
                 batch_known=True)


@case
def max_pool_ties_go_to_the_first_max(tf):
    x = np.round(rand(43, 2, 6, 6, 2, low=0.0, high=2.0)).astype(np.float32)
    return _pool(tf, "max_pool", x, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")


@case
def max_pool_all_equal_ties(tf):
    return _pool(tf, "max_pool", np.ones((1, 4, 4, 1), np.float32), ksize=3, strides=1,
                 padding="SAME", name="pool")


@case
def max_pool_negative_values_same_padding(tf):
    return _pool(tf, "max_pool", rand(44, 1, 5, 5, 1, low=-3.0, high=-1.0), ksize=2,
                 strides=2, padding="SAME")


@case
def max_pool_int32(tf):
    x = tf.placeholder(tf.int32, [1, 4, 4, 1], name="x")
    out = tf.nn.max_pool(x, 2, 2, "SAME")
    return {"feeds": {x: np.arange(16, dtype=np.int32).reshape(1, 4, 4, 1)},
            "fetch": {"out": out}}


@case
def avg_pool_2x2_valid(tf):
    return _pool(tf, "avg_pool", rand(45, 2, 6, 6, 3), ksize=[1, 2, 2, 1],
                 strides=[1, 2, 2, 1], padding="VALID")


@case
def avg_pool_same_counts_only_valid_elements(tf):
    return _pool(tf, "avg_pool", rand(46, 2, 5, 7, 2), ksize=[1, 3, 3, 1],
                 strides=[1, 2, 2, 1], padding="SAME")


@case
def avg_pool_overlapping_stride1_same(tf):
    return _pool(tf, "avg_pool", rand(47, 1, 4, 5, 1), ksize=[2, 3], strides=1, padding="SAME",
                 batch_known=True)


@case
def avg_pool_unknown_spatial_shape(tf):
    x = tf.placeholder(tf.float32, [None, None, None, 2], name="x")
    out = tf.nn.avg_pool(x, 2, 2, "SAME")
    return {"feeds": {x: rand(48, 2, 5, 3, 2)}, "fetch": {"out": out}, "grads": ("out", [x])}


@case
def max_pool_window_too_large_valid_raises(tf):
    x = tf.placeholder(tf.float32, [1, 3, 3, 1])
    tf.nn.max_pool(x, 4, 1, "VALID")
    return {}


@case
def avg_pool_int_raises(tf):
    x = tf.placeholder(tf.int32, [1, 3, 3, 1])
    tf.nn.avg_pool(x, 2, 1, "VALID")
    return {}


@case
def cnn_training_steps(tf):
    # conv -> relu -> max_pool -> conv -> avg_pool -> dense, 3 SGD steps.
    x = tf.placeholder(tf.float32, [None, 8, 8, 1], name="x")
    y = tf.placeholder(tf.int32, [None], name="y")
    w1 = tf.Variable(rand(50, 3, 3, 1, 4, low=-0.5, high=0.5), name="w1")
    w2 = tf.Variable(rand(51, 3, 3, 4, 6, low=-0.5, high=0.5), name="w2")
    w3 = tf.Variable(rand(52, 24, 10, low=-0.5, high=0.5), name="w3")
    h = tf.nn.max_pool(tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME")), 2, 2, "SAME")
    h = tf.nn.avg_pool(tf.nn.relu(tf.nn.conv2d(h, w2, 1, "SAME")), 2, 2, "VALID")
    logits = tf.matmul(tf.reshape(h, [-1, 24]), w3)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                          logits=logits))
    train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
    labels = np.random.RandomState(53).randint(0, 10, 6).astype(np.int32)
    return {"feeds": {x: rand(54, 6, 8, 8, 1, low=0.0, high=1.0), y: labels},
            "fetch": {"loss": loss, "w1": w1, "w2": w2}, "init": True,
            "before": [(train, 3)]}
