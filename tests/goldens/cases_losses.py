"""Golden cases, area ``losses``: every ``tf.losses`` loss with scalar, per-example and
broadcast weights under each ``Reduction``, its gradients (into predictions/logits,
labels where they get one, and the weights), the loss op names, the collection helpers
(``get_losses``, ``get_total_loss``, ``get_regularization_loss``) and the errors for bad
weights, reductions and shapes. See :mod:`cases`."""

from __future__ import annotations

from typing import Any

import numpy as np

from .cases import case, rand

REDUCTIONS = ("NONE", "SUM", "MEAN", "SUM_BY_NONZERO_WEIGHTS", "SUM_OVER_BATCH_SIZE",
              "SUM_OVER_NONZERO_WEIGHTS")
ONEHOT = np.eye(3, dtype=np.float32)[[0, 2, 1, 2]]
IDS = np.array([0, 2, 1, 2], np.int32)
BINARY = np.array([[1, 0, 1], [0, 0, 1], [1, 1, 0], [0, 1, 0]], np.float32)


def _weights(tf: Any, kind: str, shape: tuple[int, ...]) -> Any:
    """``scalar`` (a Python float), ``example`` ([batch] or [batch, 1], a zero among them)
    or ``full`` (the losses' shape, zeros among them) weights, as a constant tensor."""
    if kind == "scalar":
        return 2.5
    if kind == "example":
        w = np.array([1.5, 0.0, 2.0, 0.5], np.float32)
        return tf.constant(w if len(shape) == 1 else w.reshape(4, 1))
    w = np.abs(rand(77, *shape))
    w.flat[::4] = 0.0
    return tf.constant(w)


def _inputs(tf: Any, loss: str) -> tuple[dict, Any, Any, tuple[int, ...]]:
    """The feeds, the (labels, predictions) tensors and the losses' elementwise shape."""
    if loss == "sparse_softmax_cross_entropy":
        lg = tf.placeholder(tf.float32, [None, 3], name="logits")
        lb = tf.placeholder(tf.int32, [None], name="labels")
        return {lg: rand(1, 4, 3) * 2, lb: IDS}, lb, lg, (4,)
    if loss == "softmax_cross_entropy":
        lg = tf.placeholder(tf.float32, [None, 3], name="logits")
        lb = tf.placeholder(tf.float32, [None, 3], name="labels")
        return {lg: rand(2, 4, 3) * 2, lb: ONEHOT}, lb, lg, (4,)
    p = tf.placeholder(tf.float32, [4, 3], name="predictions")
    lb = tf.placeholder(tf.float32, [4, 3], name="labels")
    if loss == "log_loss":
        return {p: rand(3, 4, 3, low=0.02, high=0.98), lb: BINARY}, lb, p, (4, 3)
    if loss in ("sigmoid_cross_entropy", "hinge_loss"):
        return {p: rand(4, 4, 3) * 2, lb: BINARY}, lb, p, (4, 3)
    if loss == "cosine_distance":
        a = rand(5, 4, 3)
        b = rand(6, 4, 3)
        return ({p: a / np.linalg.norm(a, axis=1, keepdims=True),
                 lb: b / np.linalg.norm(b, axis=1, keepdims=True)}, lb, p, (4, 1))
    return {p: rand(7, 4, 3) * 2, lb: rand(8, 4, 3) * 2}, lb, p, (4, 3)


def _call(tf: Any, loss: str, lb: Any, p: Any, **kw: Any) -> Any:
    fn = getattr(tf.losses, loss)
    if loss == "cosine_distance":
        return fn(lb, p, axis=1, **kw)
    return fn(lb, p, **kw)


def _loss_case(loss: str, reduction: str, weights: str, extra: dict | None = None) -> None:
    def build(tf: Any) -> dict:
        feeds, lb, p, shape = _inputs(tf, loss)
        w = _weights(tf, weights, shape)
        out = _call(tf, loss, lb, p, weights=w, reduction=getattr(tf.losses.Reduction,
                                                                   reduction), **(extra or {}))
        xs = [p] + ([] if loss in ("sparse_softmax_cross_entropy",) else [lb])
        if not isinstance(w, float):
            xs.append(w)
        return {"feeds": feeds, "fetch": {"loss": out}, "grads": ("loss", xs),
                "names": [out.op.name, *[t.op.name for t in tf.losses.get_losses()]]}
    build.__name__ = f"{loss}_{reduction.lower()}_{weights}" + (
        "_" + "_".join(f"{k}{v}" for k, v in extra.items()) if extra else "")
    build.__module__ = __name__
    case(build)


LOSSES = ("absolute_difference", "mean_squared_error", "huber_loss", "log_loss", "hinge_loss",
          "cosine_distance", "sigmoid_cross_entropy", "softmax_cross_entropy",
          "sparse_softmax_cross_entropy")
for _i, _loss in enumerate(LOSSES):
    _kinds = {_red: ("scalar", "example", "full")[(_i + _j) % 3]
              for _j, _red in enumerate(REDUCTIONS)}
    for _red, _kind in _kinds.items():
        _loss_case(_loss, _red, _kind)
    for _kind in ("scalar", "example", "full"):  # the default reduction with each weights
        if _kinds["SUM_BY_NONZERO_WEIGHTS"] != _kind:
            _loss_case(_loss, "SUM_BY_NONZERO_WEIGHTS", _kind)
_loss_case("huber_loss", "SUM_BY_NONZERO_WEIGHTS", "full", {"delta": 0.3})
_loss_case("log_loss", "SUM_BY_NONZERO_WEIGHTS", "scalar", {"epsilon": 0.01})
_loss_case("softmax_cross_entropy", "SUM_BY_NONZERO_WEIGHTS", "example",
           {"label_smoothing": 0.2})
_loss_case("softmax_cross_entropy", "MEAN", "scalar", {"label_smoothing": 0.1})
_loss_case("sigmoid_cross_entropy", "SUM_BY_NONZERO_WEIGHTS", "full", {"label_smoothing": 0.3})
_loss_case("sigmoid_cross_entropy", "NONE", "scalar", {"label_smoothing": 0.1})


@case
def loss_default_weights_and_scope(tf):
    p = tf.placeholder(tf.float32, [None, 2], name="p")
    y = tf.constant([[1.0, 0.0], [0.5, 2.0], [0.0, 0.0]])
    a = tf.losses.mean_squared_error(y, p)
    b = tf.losses.absolute_difference(y, p, scope="my_loss")
    c = tf.losses.huber_loss(y, p, loss_collection=None)
    return {"feeds": {p: rand(9, 3, 2)}, "fetch": {"a": a, "b": b, "c": c},
            "grads": ("a", [p]),
            "names": [a.op.name, b.op.name, c.op.name,
                      *[t.op.name for t in tf.losses.get_losses()]]}


@case
def loss_all_weights_zero(tf):
    p = tf.constant(rand(10, 3, 2))
    y = tf.constant(rand(11, 3, 2))
    z = tf.zeros([3, 1])
    return {"feeds": {}, "fetch": {
        "mse": tf.losses.mean_squared_error(y, p, weights=z),
        "mean": tf.losses.absolute_difference(y, p, weights=z,
                                              reduction=tf.losses.Reduction.MEAN)}}


@case
def loss_float64_logits(tf):
    lg = tf.placeholder(tf.float64, [2, 3], name="logits")
    y = tf.constant(np.eye(3)[[1, 2]])
    out = tf.losses.softmax_cross_entropy(y, lg, weights=tf.constant([1.0, 3.0]))
    s = tf.losses.sigmoid_cross_entropy(y, lg)
    return {"feeds": {lg: rand(12, 2, 3, dtype=np.float64)}, "fetch": {"out": out, "s": s},
            "grads": ("out", [lg])}


@case
def loss_sparse_labels_column(tf):
    lg = tf.placeholder(tf.float32, [4, 3], name="logits")
    out = tf.losses.sparse_softmax_cross_entropy(tf.constant(IDS.reshape(4, 1)), lg,
                                                 weights=tf.constant([[1.0], [2.0], [0.0], [1.0]]))
    return {"feeds": {lg: rand(13, 4, 3)}, "fetch": {"out": out}, "grads": ("out", [lg])}


@case
def loss_total_and_regularization(tf):
    p = tf.placeholder(tf.float32, [3, 2], name="p")
    w = tf.Variable(tf.constant([[1.0, -2.0], [0.5, 3.0]]), name="w")
    tf.losses.mean_squared_error(tf.zeros([3, 2]), tf.matmul(p, w))
    tf.losses.add_loss(tf.reduce_sum(tf.abs(w)) * 0.1)
    tf.add_to_collection(tf.GraphKeys.REGULARIZATION_LOSSES, tf.reduce_sum(w * w) * 0.01)
    total = tf.losses.get_total_loss()
    no_reg = tf.losses.get_total_loss(add_regularization_losses=False, name="data_loss")
    reg = tf.losses.get_regularization_loss()
    return {"feeds": {p: rand(14, 3, 2)}, "init": True,
            "fetch": {"total": total, "no_reg": no_reg, "reg": reg},
            "grads": ("total", [p, w]),
            "names": [total.op.name, no_reg.op.name, reg.op.name,
                      str(len(tf.losses.get_losses())),
                      str(len(tf.losses.get_regularization_losses()))]}


@case
def loss_regularization_none(tf):
    return {"feeds": {}, "fetch": {"reg": tf.losses.get_regularization_loss()}}


@case
def loss_total_of_nothing_raises(tf):
    return {"feeds": {}, "fetch": {"t": tf.losses.get_total_loss()}}


@case
def loss_weights_wrong_rank_raises(tf):
    p = tf.constant(rand(15, 4, 3))
    return {"feeds": {}, "fetch": {"l": tf.losses.mean_squared_error(
        p, p, weights=tf.constant([1.0, 2.0, 3.0, 4.0]))}}


@case
def loss_weights_wrong_dim_raises(tf):
    p = tf.constant(rand(16, 4, 3))
    return {"feeds": {}, "fetch": {"l": tf.losses.absolute_difference(
        p, p, weights=tf.ones([4, 2]))}}


@case
def loss_bad_reduction_raises(tf):
    p = tf.constant(rand(17, 4, 3))
    return {"feeds": {}, "fetch": {"l": tf.losses.mean_squared_error(p, p, reduction="avg")}}


@case
def loss_shape_mismatch_raises(tf):
    return {"feeds": {}, "fetch": {"l": tf.losses.huber_loss(tf.ones([4, 3]), tf.ones([4, 2]))}}


@case
def loss_cosine_without_axis_raises(tf):
    return {"feeds": {}, "fetch": {"l": tf.losses.cosine_distance(tf.ones([4, 3]),
                                                                  tf.ones([4, 3]))}}


@case
def loss_compute_weighted_loss(tf):
    x = tf.placeholder(tf.float32, [2, 3], name="x")
    w = tf.constant([[0.0], [2.0]])
    outs = {r: tf.losses.compute_weighted_loss(x, w, reduction=getattr(tf.losses.Reduction, r))
            for r in REDUCTIONS}
    outs["default"] = tf.losses.compute_weighted_loss(x)
    return {"feeds": {x: rand(18, 2, 3)}, "fetch": outs, "grads": ("MEAN", [x]),
            "names": [t.op.name for t in outs.values()]}
