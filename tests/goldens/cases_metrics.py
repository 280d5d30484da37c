"""Golden cases, area ``metrics``: every ``tf.metrics`` metric streamed over three batches
(taken from constants by a step variable that an op run after the update ops advances),
with and without weights: the value after the batches, the update op's value on the
third batch, the local variables, and the op and variable names; plus the reset by
``local_variables_initializer``, the collections and bad input. See :mod:`cases`."""

from __future__ import annotations

from typing import Any

import numpy as np

from .cases import case

_RS = np.random.RandomState(2024)
PROBS = _RS.uniform(0, 1, (3, 10)).astype(np.float32)
LABELS = _RS.uniform(0, 1, (3, 10)) > 0.45
WEIGHTS = _RS.uniform(0, 2, (3, 10)).astype(np.float32)
WEIGHTS[0, :3] = 0.0
CLASSES = _RS.randint(0, 4, (3, 10)).astype(np.int64)
PRED_CLASSES = np.where(_RS.uniform(0, 1, (3, 10)) > 0.4, CLASSES,
                        _RS.randint(0, 4, (3, 10))).astype(np.int64)
VALUES = (_RS.uniform(-2, 2, (3, 10)) * 3).astype(np.float32)


def _batch(tf: Any, step: Any, array: np.ndarray, column: bool = False) -> Any:
    t = tf.gather(tf.constant(array), tf.mod(step, 3))
    return tf.expand_dims(t, -1) if column else t


def _stream(tf: Any, build: Any, batches: int = 3, fetch_update: bool = False) -> dict:
    """Runs the metric's update op on ``batches`` batches, then fetches its value (or,
    with ``fetch_update``, runs the update op on the last batch and fetches that)."""
    step = tf.Variable(0, trainable=False, name="step")
    value, update = build(tf, step)
    with tf.control_dependencies([update]):
        advance = tf.assign_add(step, 1)
    before = [(tf.local_variables_initializer(), 1), (advance, batches - int(fetch_update))]
    local = {v.op.name: v for v in tf.local_variables()}
    fetch = {"update": update} if fetch_update else {"value": value, **local}
    names = [value.op.name, update.op.name, *sorted(local),
             *sorted(v.op.name for v in tf.get_collection(tf.GraphKeys.METRIC_VARIABLES))]
    return {"feeds": {}, "init": True, "before": before, "fetch": fetch, "names": names}


def _metric_cases(name: str, build: Any) -> None:
    for suffix, kw in (("", {}), ("_update", {"fetch_update": True}),
                       ("_one_batch", {"batches": 1})):
        def fn(tf: Any, kw: dict = kw) -> dict:
            return _stream(tf, build, **kw)
        fn.__name__ = f"metric_{name}{suffix}"
        fn.__module__ = __name__
        case(fn)


def _b(tf: Any, step: Any) -> dict:
    return {"p": _batch(tf, step, PROBS), "l": _batch(tf, step, LABELS),
            "w": _batch(tf, step, WEIGHTS), "c": _batch(tf, step, CLASSES),
            "pc": _batch(tf, step, PRED_CLASSES), "v": _batch(tf, step, VALUES)}


METRICS = {
    "accuracy": lambda tf, b: tf.metrics.accuracy(b["c"], b["pc"]),
    "accuracy_weighted": lambda tf, b: tf.metrics.accuracy(b["c"], b["pc"], weights=b["w"]),
    "accuracy_bool": lambda tf, b: tf.metrics.accuracy(b["l"], b["p"] > 0.5, name="acc"),
    "mean": lambda tf, b: tf.metrics.mean(b["v"]),
    "mean_weighted": lambda tf, b: tf.metrics.mean(b["v"], weights=b["w"]),
    "mean_scalar_weight": lambda tf, b: tf.metrics.mean(b["v"], weights=2.0),
    "precision": lambda tf, b: tf.metrics.precision(b["l"], b["p"] > 0.5),
    "precision_weighted": lambda tf, b: tf.metrics.precision(b["l"], b["p"] > 0.3,
                                                             weights=b["w"]),
    "recall": lambda tf, b: tf.metrics.recall(b["l"], b["p"] > 0.5),
    "recall_weighted": lambda tf, b: tf.metrics.recall(b["l"], b["p"] > 0.6, weights=b["w"]),
    "auc": lambda tf, b: tf.metrics.auc(b["l"], b["p"]),
    "auc_weighted": lambda tf, b: tf.metrics.auc(b["l"], b["p"], weights=b["w"]),
    "auc_thresholds_50": lambda tf, b: tf.metrics.auc(b["l"], b["p"], num_thresholds=50),
    "auc_pr": lambda tf, b: tf.metrics.auc(b["l"], b["p"], curve="PR"),
    "auc_pr_careful": lambda tf, b: tf.metrics.auc(
        b["l"], b["p"], curve="PR", summation_method="careful_interpolation",
        weights=b["w"]),
    "auc_minoring": lambda tf, b: tf.metrics.auc(b["l"], b["p"], summation_method="minoring"),
    "auc_majoring": lambda tf, b: tf.metrics.auc(b["l"], b["p"], summation_method="majoring"),
    "auc_given_thresholds": lambda tf, b: tf.metrics.auc(b["l"], b["p"],
                                                         thresholds=[0.7, 0.2, 0.5]),
    "precision_at_thresholds": lambda tf, b: tf.metrics.precision_at_thresholds(
        b["l"], b["p"], [0.1, 0.5, 0.8], weights=b["w"]),
    "recall_at_thresholds": lambda tf, b: tf.metrics.recall_at_thresholds(
        b["l"], b["p"], [0.3, 0.6]),
    "true_positives_at_thresholds": lambda tf, b: tf.metrics.true_positives_at_thresholds(
        b["l"], b["p"], [0.3, 0.6]),
    "false_negatives_at_thresholds": lambda tf, b: tf.metrics.false_negatives_at_thresholds(
        b["l"], b["p"], [0.3, 0.6], weights=b["w"]),
    "false_positives_at_thresholds": lambda tf, b: tf.metrics.false_positives_at_thresholds(
        b["l"], b["p"], [0.5]),
    "true_negatives_at_thresholds": lambda tf, b: tf.metrics.true_negatives_at_thresholds(
        b["l"], b["p"], [0.5, 0.9]),
    "mean_squared_error": lambda tf, b: tf.metrics.mean_squared_error(b["v"], b["p"]),
    "mean_squared_error_weighted": lambda tf, b: tf.metrics.mean_squared_error(
        b["v"], b["p"], weights=b["w"]),
    "root_mean_squared_error": lambda tf, b: tf.metrics.root_mean_squared_error(b["v"], b["p"]),
    "root_mean_squared_error_weighted": lambda tf, b: tf.metrics.root_mean_squared_error(
        b["v"], b["p"], weights=b["w"]),
    "mean_absolute_error": lambda tf, b: tf.metrics.mean_absolute_error(b["v"], b["p"],
                                                                        weights=b["w"]),
    "true_positives": lambda tf, b: tf.metrics.true_positives(b["l"], b["p"] > 0.5),
    "false_positives": lambda tf, b: tf.metrics.false_positives(b["l"], b["p"] > 0.5,
                                                                weights=b["w"]),
    "false_negatives": lambda tf, b: tf.metrics.false_negatives(b["l"], b["p"] > 0.5),
}
for _name, _fn in METRICS.items():
    _metric_cases(_name, lambda tf, step, _fn=_fn: _fn(tf, _b(tf, step)))


@case
def metric_column_labels_and_weights(tf):
    """Labels ``[batch, 1]`` against predictions ``[batch]`` (squeezed), weights
    ``[batch, 1]``."""
    def build(tf, step):
        return tf.metrics.accuracy(_batch(tf, step, CLASSES, column=True),
                                   _batch(tf, step, PRED_CLASSES),
                                   weights=_batch(tf, step, WEIGHTS, column=True))
    return _stream(tf, build)


@case
def metric_two_in_one_graph(tf):
    def build(tf, step):
        a, ua = tf.metrics.accuracy(_batch(tf, step, CLASSES), _batch(tf, step, PRED_CLASSES))
        b, ub = tf.metrics.accuracy(_batch(tf, step, LABELS), _batch(tf, step, PROBS) > 0.5)
        return a + b, ua + ub
    spec = _stream(tf, build)
    spec["names"] = spec["names"][2:]
    return spec


@case
def metric_reset_by_local_init(tf):
    step = tf.Variable(0, trainable=False, name="step")
    acc, update = tf.metrics.accuracy(_batch(tf, step, CLASSES), _batch(tf, step, PRED_CLASSES))
    with tf.control_dependencies([update]):
        advance = tf.assign_add(step, 1)
    init = tf.local_variables_initializer()
    return {"feeds": {}, "init": True, "before": [(init, 1), (advance, 2), (init, 1)],
            "fetch": {"update": update}}  # not with acc: TF orders the two either way


@case
def metric_collections(tf):
    v, u = tf.metrics.mean(tf.constant([1.0, 2.0, 6.0]), metrics_collections=["m"],
                           updates_collections=["u"])
    a, ua = tf.metrics.auc(tf.constant([True, False]), tf.constant([0.8, 0.3]),
                           metrics_collections=["m"], updates_collections=["u"])
    names = [t.op.name for t in tf.get_collection("m") + tf.get_collection("u")]
    return {"feeds": {}, "before": [(tf.local_variables_initializer(), 1), (u, 1), (ua, 1)],
            "fetch": {"v": v, "a": a}, "names": names}


@case
def metric_accuracy_shape_mismatch_raises(tf):
    return {"feeds": {}, "fetch": {"a": tf.metrics.accuracy(tf.ones([4, 3]),
                                                             tf.ones([4, 2]))[0]}}


@case
def metric_auc_bad_curve_raises(tf):
    return {"feeds": {}, "fetch": {"a": tf.metrics.auc(tf.constant([True]), tf.constant([0.5]),
                                                        curve="XY")[0]}}


@case
def metric_auc_constant_out_of_range_raises(tf):
    return {"feeds": {}, "fetch": {"a": tf.metrics.auc(tf.constant([True, False]),
                                                        tf.constant([0.2, 1.5]))[1]}}


@case
def metric_auc_fed_out_of_range_not_checked(tf):
    """TF's run-time range assertion is not attached to float32 predictions: none here."""
    x = tf.placeholder(tf.float32, [None], name="x")
    lb = tf.placeholder(tf.bool, [None], name="lb")
    value, update = tf.metrics.auc(lb, x)
    return {"feeds": {x: np.array([0.2, 1.5, 0.7], np.float32),
                      lb: np.array([True, False, True])},
            "before": [(tf.local_variables_initializer(), 1), (update, 2)],
            "fetch": {"value": value}}


@case
def metric_fed_batch_updated_three_times(tf):
    """The runner's ``before`` with feeds: one fed batch (unknown batch size) counted three
    times, every metric at once."""
    p = tf.placeholder(tf.float32, [None], name="p")
    lb = tf.placeholder(tf.bool, [None], name="lb")
    w = tf.placeholder(tf.float32, [None], name="w")
    ms = {"acc": tf.metrics.accuracy(lb, p > 0.5, weights=w),
          "auc": tf.metrics.auc(lb, p, weights=w),
          "prec": tf.metrics.precision(lb, p > 0.4),
          "rec": tf.metrics.recall(lb, p > 0.4, weights=w),
          "rmse": tf.metrics.root_mean_squared_error(tf.cast(lb, tf.float32), p),
          "mean": tf.metrics.mean(p, weights=w)}
    updates = tf.group(*[u for _, u in ms.values()])
    return {"feeds": {p: PROBS[1], lb: LABELS[1], w: WEIGHTS[0]},
            "before": [(tf.local_variables_initializer(), 1), (updates, 3)],
            "fetch": {k: v for k, (v, _) in ms.items()}}
