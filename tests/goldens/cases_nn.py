"""Golden cases, area ``nn``: tf.nn activations, dropout, normalization, logistic losses,
top_k / in_top_k, xw_plus_b and the v1/v2 softmax cross-entropies. See :mod:`cases`."""

from __future__ import annotations

from typing import Any

import numpy as np

from .cases import case, rand

# Values that hit the kinks exactly (0 and 6 for relu6, 0 for the rest).
KINKS = np.array([[-7.0, -1.5, -0.0, 0.0, 0.5], [3.0, 5.99, 6.0, 6.5, 9.0]], np.float32)


def _act(tf: Any, fn: Any, x: np.ndarray, name: str | None = None) -> dict:
    t = tf.placeholder(tf.float32, [None, x.shape[1]], name="x")
    out = fn(t)
    spec = {"feeds": {t: x}, "fetch": {"out": out}, "grads": ("out", [t])}
    if name:
        spec["fetch"]["name"] = out
        spec["names"] = [out.op.name]
    return spec


def _both(x: np.ndarray) -> np.ndarray:
    return np.concatenate([x, KINKS[:, : x.shape[1]]], axis=0)


@case
def relu6(tf):
    return _act(tf, tf.nn.relu6, _both(rand(101, 3, 5, low=-3, high=8)), "Relu6")


@case
def elu(tf):
    return _act(tf, tf.nn.elu, _both(rand(102, 3, 5)), "Elu")


@case
def selu(tf):
    return _act(tf, tf.nn.selu, _both(rand(103, 3, 5)), "Selu")


@case
def leaky_relu_default(tf):
    return _act(tf, tf.nn.leaky_relu, _both(rand(104, 3, 5)), "LeakyRelu")


@case
def leaky_relu_alpha(tf):
    return _act(tf, lambda t: tf.nn.leaky_relu(t, alpha=0.01), _both(rand(105, 3, 5)))


@case
def leaky_relu_named(tf):
    return _act(tf, lambda t: tf.nn.leaky_relu(t, name="lrelu"), rand(106, 2, 3), "lrelu")


@case
def softplus(tf):
    x = _both(rand(107, 3, 5)) * 10.0
    return _act(tf, tf.nn.softplus, x, "Softplus")


@case
def softsign(tf):
    return _act(tf, tf.nn.softsign, _both(rand(108, 3, 5)), "Softsign")


@case
def swish(tf):
    return _act(tf, tf.nn.swish, _both(rand(109, 3, 5)))


@case
def log_sigmoid(tf):
    return _act(tf, tf.log_sigmoid, _both(rand(110, 3, 5)) * 10.0, "LogSigmoid")


@case
def l2_loss(tf):
    return _act(tf, tf.nn.l2_loss, rand(111, 3, 4), "L2Loss")


@case
def l2_normalize_axis1(tf):
    return _act(tf, lambda t: tf.nn.l2_normalize(t, axis=1), rand(112, 3, 4), "l2_normalize")


@case
def l2_normalize_all_eps(tf):
    x = np.array([[0.0, 0.0, 0.0], [1e-4, -2e-4, 0.0]], np.float32)
    return _act(tf, lambda t: tf.nn.l2_normalize(t, epsilon=1e-6), x)


@case
def l2_normalize_dim0(tf):
    return _act(tf, lambda t: tf.nn.l2_normalize(t, dim=0), rand(113, 3, 4))


@case
def relu6_int(tf):
    x = tf.constant(np.array([[-3, 0, 4, 9]], np.int32))
    return {"feeds": {}, "fetch": {"out": tf.nn.relu6(x)}}


@case
def elu_int_raises(tf):
    return {"feeds": {}, "fetch": {"out": tf.nn.elu(tf.constant([1, 2]))}}


# --------------------------------------------------------------------- moments / batchnorm
@case
def moments_axis0(tf):
    x = tf.placeholder(tf.float32, [None, 4], name="x")
    m, v = tf.nn.moments(x, axes=[0])
    return {"feeds": {x: rand(120, 5, 4)}, "fetch": {"mean": m, "var": v, "sum": m + v},
            "grads": ("sum", [x]), "names": [m.op.name, v.op.name]}


@case
def moments_keep_dims(tf):
    x = tf.placeholder(tf.float32, [2, 3, 4], name="x")
    m, v = tf.nn.moments(x, axes=[0, 2], keep_dims=True)
    return {"feeds": {x: rand(121, 2, 3, 4)}, "fetch": {"mean": m, "var": v, "prod": m * v},
            "grads": ("prod", [x]), "names": [m.op.name, v.op.name]}


@case
def moments_image(tf):
    x = tf.placeholder(tf.float32, [None, 3, 3, 2], name="x")
    m, v = tf.nn.moments(x, axes=[0, 1, 2])
    return {"feeds": {x: rand(122, 2, 3, 3, 2)}, "fetch": {"mean": m, "var": v},
            "grads": ("var", [x])}


@case
def batch_normalization_full(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    mean = tf.placeholder(tf.float32, [3], name="mean")
    var = tf.placeholder(tf.float32, [3], name="var")
    off = tf.placeholder(tf.float32, [3], name="offset")
    sc = tf.placeholder(tf.float32, [3], name="scale")
    y = tf.nn.batch_normalization(x, mean, var, off, sc, 1e-3)
    return {"feeds": {x: rand(123, 4, 3), mean: rand(124, 3), var: rand(125, 3, low=0.1),
                      off: rand(126, 3), sc: rand(127, 3)},
            "fetch": {"y": y}, "grads": ("y", [x, mean, var, off, sc]), "names": [y.op.name]}


@case
def batch_normalization_no_scale_offset(tf):
    x = tf.placeholder(tf.float32, [None, 4], name="x")
    m, v = tf.nn.moments(x, axes=[0])
    y = tf.nn.batch_normalization(x, m, v, None, None, 1e-5, name="bn")
    return {"feeds": {x: rand(128, 6, 4)}, "fetch": {"y": y}, "grads": ("y", [x]),
            "names": [y.op.name]}


def _fbn_inputs(seed: int, c: int = 3) -> tuple[np.ndarray, ...]:
    return (rand(seed, 2, 3, 2, c), rand(seed + 1, c, low=0.5), rand(seed + 2, c),
            rand(seed + 3, c), rand(seed + 4, c, low=0.2))


@case
def fused_batch_norm_training(tf):
    xa, sa, oa, _, _ = _fbn_inputs(130)
    x = tf.placeholder(tf.float32, [None, 3, 2, 3], name="x")
    sc = tf.placeholder(tf.float32, [3], name="scale")
    off = tf.placeholder(tf.float32, [3], name="offset")
    y, bm, bv = tf.nn.fused_batch_norm(x, sc, off, epsilon=1e-3)
    return {"feeds": {x: xa, sc: sa, off: oa}, "fetch": {"y": y, "mean": bm, "var": bv},
            "grads": ("y", [x, sc, off]), "names": [y.op.name]}


@case
def fused_batch_norm_training_grad_ignores_stats(tf):
    xa, sa, oa, _, _ = _fbn_inputs(140)
    x = tf.placeholder(tf.float32, [2, 3, 2, 3], name="x")
    y, bm, bv = tf.nn.fused_batch_norm(x, tf.constant(sa), tf.constant(oa), name="bn")
    loss = tf.reduce_sum(y * y) + tf.reduce_sum(bm) + tf.reduce_sum(bv)
    return {"feeds": {x: xa}, "fetch": {"loss": loss}, "grads": ("loss", [x]),
            "names": [y.op.name]}


@case
def fused_batch_norm_inference(tf):
    xa, sa, oa, ma, va = _fbn_inputs(150)
    x = tf.placeholder(tf.float32, [None, 3, 2, 3], name="x")
    sc = tf.placeholder(tf.float32, [3], name="scale")
    off = tf.placeholder(tf.float32, [3], name="offset")
    mean = tf.placeholder(tf.float32, [3], name="mean")
    var = tf.placeholder(tf.float32, [3], name="var")
    y, bm, bv = tf.nn.fused_batch_norm(x, sc, off, mean, var, epsilon=1e-4, is_training=False)
    return {"feeds": {x: xa, sc: sa, off: oa, mean: ma, var: va},
            "fetch": {"y": y, "mean": bm, "var": bv}, "grads": ("y", [x, sc, off, mean, var])}


@case
def fused_batch_norm_avg_factor(tf):
    xa, sa, oa, ma, va = _fbn_inputs(160)
    x = tf.placeholder(tf.float32, [2, 3, 2, 3], name="x")
    y, bm, bv = tf.nn.fused_batch_norm(x, sa, oa, ma, va, exponential_avg_factor=0.25)
    return {"feeds": {x: xa}, "fetch": {"y": y, "mean": bm, "var": bv}}


@case
def fused_batch_norm_float64_raises(tf):
    x = tf.placeholder(tf.float64, [2, 3, 2, 3], name="x")
    y, _, _ = tf.nn.fused_batch_norm(x, np.ones(3, np.float32), np.zeros(3, np.float32))
    return {"feeds": {}, "fetch": {"y": y}}


@case
def moments_float16(tf):
    x = tf.placeholder(tf.float16, [None, 3], name="x")
    m, v = tf.nn.moments(x, axes=[0])
    return {"feeds": {x: rand(129, 4, 3, dtype=np.float16)}, "fetch": {"mean": m, "var": v}}


@case
def fused_batch_norm_inference_needs_mean(tf):
    x = tf.placeholder(tf.float32, [2, 3, 2, 3], name="x")
    y, _, _ = tf.nn.fused_batch_norm(x, np.ones(3, np.float32), np.zeros(3, np.float32),
                                     is_training=False)
    return {"feeds": {}, "fetch": {"y": y}}


# --------------------------------------------------------------------- logistic losses
def _logits_labels(tf: Any, seed: int) -> tuple[Any, Any, dict]:
    lg = tf.placeholder(tf.float32, [None, 4], name="logits")
    lb = tf.placeholder(tf.float32, [None, 4], name="labels")
    logits = np.concatenate([rand(seed, 3, 4) * 5, np.array([[0.0, -30.0, 30.0, 0.0]],
                                                             np.float32)])
    labels = np.random.RandomState(seed).uniform(0, 1, (4, 4)).astype(np.float32)
    labels[3] = [1.0, 0.0, 1.0, 0.0]
    return lg, lb, {lg: logits, lb: labels}


@case
def sigmoid_cross_entropy(tf):
    lg, lb, feeds = _logits_labels(tf, 170)
    out = tf.nn.sigmoid_cross_entropy_with_logits(labels=lb, logits=lg)
    return {"feeds": feeds, "fetch": {"out": out}, "grads": ("out", [lg, lb]),
            "names": [out.op.name]}


@case
def sigmoid_cross_entropy_shape_mismatch(tf):
    lg = tf.placeholder(tf.float32, [2, 4])
    lb = tf.placeholder(tf.float32, [2, 3])
    return {"feeds": {}, "fetch": {"out": tf.nn.sigmoid_cross_entropy_with_logits(
        labels=lb, logits=lg)}}


@case
def sigmoid_cross_entropy_positional(tf):
    lg = tf.placeholder(tf.float32, [2, 4])
    lb = tf.placeholder(tf.float32, [2, 4])
    out = tf.nn.sigmoid_cross_entropy_with_logits(lb, lg)
    return {"feeds": {lg: rand(175, 2, 4), lb: rand(176, 2, 4, low=0, high=1)},
            "fetch": {"out": out}}


@case
def weighted_cross_entropy(tf):
    lg, lb, feeds = _logits_labels(tf, 171)
    out = tf.nn.weighted_cross_entropy_with_logits(labels=lb, logits=lg, pos_weight=3.0)
    return {"feeds": feeds, "fetch": {"out": out}, "grads": ("out", [lg, lb]),
            "names": [out.op.name]}


@case
def weighted_cross_entropy_targets_tensor_weight(tf):
    lg, lb, feeds = _logits_labels(tf, 172)
    pw = tf.placeholder(tf.float32, [4], name="pos_weight")
    feeds[pw] = np.array([0.5, 1.0, 2.0, 4.0], np.float32)
    out = tf.nn.weighted_cross_entropy_with_logits(targets=lb, logits=lg, pos_weight=pw,
                                                   name="wxent")
    return {"feeds": feeds, "fetch": {"out": out}, "grads": ("out", [lg, lb, pw]),
            "names": [out.op.name]}


@case
def softmax_cross_entropy_v1_labels_get_no_gradient(tf):
    lg, lb, feeds = _logits_labels(tf, 173)
    out = tf.nn.softmax_cross_entropy_with_logits(labels=tf.nn.softmax(lb), logits=lg)
    return {"feeds": feeds, "fetch": {"out": out}, "grads": ("out", [lg, lb])}


@case
def softmax_cross_entropy_v2_labels_get_gradient(tf):
    lg, lb, feeds = _logits_labels(tf, 174)
    out = tf.nn.softmax_cross_entropy_with_logits_v2(labels=tf.nn.softmax(lb), logits=lg)
    return {"feeds": feeds, "fetch": {"out": out}, "grads": ("out", [lg, lb])}


# --------------------------------------------------------------------- top_k / in_top_k
TIES = np.array([[1.0, 3.0, 3.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0],
                 [5.0, -1.0, 4.0, 4.0, 9.0]], np.float32)


@case
def top_k_ties(tf):
    x = tf.placeholder(tf.float32, [None, 5], name="x")
    r = tf.nn.top_k(x, k=3)
    return {"feeds": {x: TIES}, "fetch": {"values": r.values, "indices": r.indices},
            "grads": ("values", [x]), "names": [r.values.op.name]}


@case
def top_k_default_k_rank3(tf):
    x = tf.placeholder(tf.float32, [2, 3, 4], name="x")
    values, indices = tf.nn.top_k(x)
    return {"feeds": {x: rand(180, 2, 3, 4)}, "fetch": {"values": values, "indices": indices},
            "grads": ("values", [x])}


@case
def top_k_int_full(tf):
    x = tf.constant(np.array([[3, 1, 3, -2], [7, 7, 0, 7]], np.int32))
    r = tf.nn.top_k(x, k=4, name="topk")
    return {"feeds": {}, "fetch": {"values": r.values, "indices": r.indices},
            "names": [r.indices.op.name]}


@case
def top_k_k_placeholder(tf):
    x = tf.placeholder(tf.float32, [None, 5], name="x")
    k = tf.placeholder(tf.int32, [], name="k")
    r = tf.nn.top_k(x, k=k)
    return {"feeds": {x: TIES, k: np.int32(2)}, "fetch": {"values": r.values,
                                                          "indices": r.indices}}


@case
def top_k_too_large_k(tf):
    x = tf.placeholder(tf.float32, [None, 5], name="x")
    return {"feeds": {}, "fetch": {"v": tf.nn.top_k(x, k=6).values}}


@case
def top_k_runtime_too_large_k(tf):
    x = tf.placeholder(tf.float32, [None, None], name="x")
    return {"feeds": {x: TIES}, "fetch": {"v": tf.nn.top_k(x, k=7).values}}


@case
def in_top_k_ties_and_nonfinite(tf):
    p = tf.placeholder(tf.float32, [None, 4], name="p")
    t = tf.placeholder(tf.int32, [None], name="t")
    preds = np.array([[1.0, 2.0, 2.0, 0.0], [1.0, 1.0, 1.0, 1.0], [np.nan, 1.0, 2.0, 3.0],
                      [np.inf, 1.0, 1.0, 1.0], [0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4]],
                     np.float32)
    targets = np.array([1, 3, 3, 1, 0, 3], np.int32)
    outs = {f"k{k}": tf.nn.in_top_k(p, t, k) for k in (1, 2, 4)}
    return {"feeds": {p: preds, t: targets}, "fetch": outs,
            "names": [outs["k1"].op.name, outs["k2"].op.name]}


@case
def in_top_k_int64_targets(tf):
    p = tf.constant(rand(181, 5, 3))
    out = tf.nn.in_top_k(p, tf.constant(np.array([0, 1, 2, 0, 1], np.int64)), 2, name="acc")
    return {"feeds": {}, "fetch": {"out": out}, "names": [out.op.name]}


# --------------------------------------------------------------------- xw_plus_b
@case
def xw_plus_b(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    w = tf.placeholder(tf.float32, [3, 2], name="w")
    b = tf.placeholder(tf.float32, [2], name="b")
    out = tf.nn.xw_plus_b(x, w, b)
    return {"feeds": {x: rand(190, 4, 3), w: rand(191, 3, 2), b: rand(192, 2)},
            "fetch": {"out": out}, "grads": ("out", [x, w, b]), "names": [out.op.name]}


# --------------------------------------------------------------------- dropout
@case
def dropout_rate_zero_is_identity(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    out = tf.nn.dropout(x, rate=0.0)
    return {"feeds": {x: rand(200, 2, 3)}, "fetch": {"out": out}, "grads": ("out", [x]),
            "names": [out.op.name]}


@case
def dropout_keep_prob_one_is_identity(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    out = tf.nn.dropout(x, keep_prob=1.0)
    return {"feeds": {x: rand(201, 2, 3)}, "fetch": {"out": out}, "names": [out.op.name]}


@case
def dropout_keep_prob_placeholder_fed_one(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    kp = tf.placeholder(tf.float32, name="keep_prob")
    out = tf.nn.dropout(x, keep_prob=kp, seed=7)
    return {"feeds": {x: rand(202, 4, 3), kp: np.float32(1.0)}, "fetch": {"out": out},
            "grads": ("out", [x]), "names": [out.op.name]}


@case
def dropout_named_rate_tensor_inf_kept(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    r = tf.placeholder(tf.float32, [], name="rate")
    out = tf.nn.dropout(x, rate=r, name="drop")
    xv = np.array([[np.inf, -np.inf, 1.0]], np.float32)
    return {"feeds": {x: xv, r: np.float32(0.0)}, "fetch": {"out": out}, "names": [out.op.name]}


@case
def dropout_rate_placeholder_fed_zero_noise_shape(tf):
    x = tf.placeholder(tf.float32, [None, 2, 3], name="x")
    r = tf.placeholder(tf.float32, [], name="rate")
    out = tf.nn.dropout(x, rate=r, noise_shape=[4, 1, 3])
    return {"feeds": {x: rand(203, 4, 2, 3), r: np.float32(0.0)}, "fetch": {"out": out},
            "grads": ("out", [x])}


@case
def dropout_noise_shape_tensor(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    ns = tf.placeholder(tf.int32, [2], name="noise_shape")
    out = tf.nn.dropout(x, keep_prob=1.0 - 1e-9, noise_shape=ns)
    return {"feeds": {x: rand(204, 2, 3), ns: np.array([2, 1], np.int32)},
            "fetch": {"out": out}}


@case
def dropout_noise_shape_unknown_dim_raises(tf):
    x = tf.placeholder(tf.float32, [None, 2, 3], name="x")
    return {"feeds": {}, "fetch": {"out": tf.nn.dropout(x, rate=0.5, noise_shape=[None, 1, 3])}}


@case
def dropout_all_dropped_is_shape_and_dtype(tf):
    x = tf.placeholder(tf.float64, [None, 5], name="x")
    out = tf.nn.dropout(x, rate=0.5)
    return {"feeds": {x: np.zeros((3, 5))}, "fetch": {"out": out}}


@case
def dropout_both_raises(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    return {"feeds": {}, "fetch": {"out": tf.nn.dropout(x, keep_prob=0.5, rate=0.5)}}


@case
def dropout_neither_raises(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    return {"feeds": {}, "fetch": {"out": tf.nn.dropout(x)}}


@case
def dropout_rate_one_raises(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    return {"feeds": {}, "fetch": {"out": tf.nn.dropout(x, rate=1.0)}}


@case
def dropout_keep_prob_zero_raises(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    return {"feeds": {}, "fetch": {"out": tf.nn.dropout(x, keep_prob=0.0)}}


@case
def dropout_int_raises(tf):
    return {"feeds": {}, "fetch": {"out": tf.nn.dropout(tf.constant([1, 2]), rate=0.5)}}


@case
def dropout_noise_shape_batch_from_shape(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    r = tf.placeholder(tf.float32, [], name="rate")
    out = tf.nn.dropout(x, rate=r, noise_shape=[tf.shape(x)[0], 1])
    return {"feeds": {x: rand(205, 4, 3), r: np.float32(0.0)}, "fetch": {"out": out},
            "grads": ("out", [x]), "names": [out.op.name]}


# --------------------------------------------------------------------- more of tf.nn
@case
def softmax_axis0(tf):
    return _act(tf, lambda t: tf.nn.softmax(t, axis=0), rand(210, 3, 4))


@case
def log_softmax_dim1_rank3(tf):
    x = tf.placeholder(tf.float32, [2, 3, 4], name="x")
    out = tf.nn.log_softmax(x, dim=1)
    return {"feeds": {x: rand(211, 2, 3, 4)}, "fetch": {"out": out}, "grads": ("out", [x])}


@case
def bias_add_nchw(tf):
    x = tf.placeholder(tf.float32, [None, 3, 2, 2], name="x")
    b = tf.placeholder(tf.float32, [3], name="b")
    out = tf.nn.bias_add(x, b, data_format="NCHW")
    return {"feeds": {x: rand(212, 2, 3, 2, 2), b: rand(213, 3)}, "fetch": {"out": out},
            "grads": ("out", [x, b])}


@case
def relu_layer(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    w = tf.placeholder(tf.float32, [3, 2], name="w")
    b = tf.placeholder(tf.float32, [2], name="b")
    out = tf.nn.relu_layer(x, w, b)
    return {"feeds": {x: rand(214, 4, 3), w: rand(215, 3, 2), b: rand(216, 2)},
            "fetch": {"out": out}, "grads": ("out", [x, w, b]), "names": [out.op.name]}


@case
def crelu(tf):
    return _act(tf, tf.nn.crelu, _both(rand(217, 2, 5)))


@case
def zero_fraction(tf):
    x = tf.placeholder(tf.float32, [None, 4], name="x")
    out = tf.nn.zero_fraction(tf.nn.relu(x))
    return {"feeds": {x: rand(218, 5, 4)}, "fetch": {"out": out}, "names": [out.op.name]}


@case
def activations_second_order(tf):
    x = tf.placeholder(tf.float32, [None, 5], name="x")
    c = tf.placeholder(tf.float32, [None, 5], name="c")
    acts = [tf.nn.elu, tf.nn.selu, tf.nn.softplus, tf.nn.leaky_relu,
            tf.nn.relu6]
    g = tf.add_n([tf.gradients(f(x), [x], grad_ys=c)[0] for f in acts])
    xv = np.array([[-2.0, -0.5, 0.25, 0.7, 1.5], [-1.1, 0.3, 2.5, -0.2, 0.9]], np.float32)
    return {"feeds": {x: xv, c: rand(219, 2, 5)}, "fetch": {"g": g}, "grads": ("g", [x, c])}


@case
def softmax_cross_entropy_v2_class_axis0(tf):
    lg = tf.placeholder(tf.float32, [4, None], name="logits")
    lb = tf.placeholder(tf.float32, [4, None], name="labels")
    out = tf.nn.softmax_cross_entropy_with_logits_v2(labels=tf.nn.softmax(lb, axis=0),
                                                     logits=lg, axis=0)
    return {"feeds": {lg: rand(220, 4, 3), lb: rand(221, 4, 3)}, "fetch": {"out": out},
            "grads": ("out", [lg, lb])}


@case
def sparse_softmax_cross_entropy_rank3(tf):
    lg = tf.placeholder(tf.float32, [2, None, 4], name="logits")
    lb = tf.placeholder(tf.int32, [2, None], name="labels")
    out = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=lb, logits=lg)
    return {"feeds": {lg: rand(222, 2, 3, 4), lb: np.array([[0, 3, 1], [2, 2, 0]], np.int32)},
            "fetch": {"out": out}, "grads": ("out", [lg])}
