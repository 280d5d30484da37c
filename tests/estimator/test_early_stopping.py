"""``tf.estimator.experimental.stop_if_*_hook``: a real Estimator trains until the
metrics in its eval directory's event files (as ``evaluate`` writes them) say stop, as
TF 2.15's ``early_stopping``; the chief's ``signal_early_stopping/STOP`` is saved."""

from __future__ import annotations

import numpy as np
import pytest

import ckptsync as tf

X = np.arange(16, dtype=np.float32).reshape(8, 2) / 16.0
Y = (X @ np.array([1.0, -2.0], np.float32)).astype(np.float32)


def model_fn(features, labels, mode):
    w = tf.get_variable("w", [2, 1], initializer=tf.zeros_initializer())
    loss = tf.losses.mean_squared_error(labels, tf.reshape(tf.matmul(features["x"], w), [-1]))
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(
        loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def input_fn():
    return tf.data.Dataset.from_tensor_slices(({"x": X}, Y)).repeat().batch(4)


def _eval_events(est, losses):
    w = tf.summary.FileWriter(est.eval_dir())
    for step, v in losses:
        w.add_summary(tf.Summary(value=[tf.Summary.Value(tag="loss", simple_value=v)]), step)
    w.close()


@pytest.mark.parametrize("losses,stops", [
    ([(0, 1.0), (100, 2.0), (200, 3.0)], True),    # no decrease in 200 >= 100 steps
    ([(0, 3.0), (100, 2.0), (200, 1.0)], False),   # still decreasing: trains all 20
], ids=["stalled", "improving"])
def test_stop_if_no_decrease_hook_reads_the_eval_dirs_event_files(tmp_path, losses, stops):
    est = tf.estimator.Estimator(model_fn, model_dir=str(tmp_path / "m"),
                                 config=tf.estimator.RunConfig(log_step_count_steps=1000))
    _eval_events(est, losses)
    hook = tf.estimator.experimental.stop_if_no_decrease_hook(
        est, "loss", max_steps_without_decrease=100, run_every_secs=None, run_every_steps=1)
    est.train(input_fn, hooks=[hook], steps=20)
    step = est.get_variable_value("global_step")
    assert (step, bool(est.get_variable_value("signal_early_stopping/STOP"))) == (
        (1, True) if stops else (20, False))


def test_threshold_hook_and_bad_arguments(tmp_path):
    est = tf.estimator.Estimator(model_fn, model_dir=str(tmp_path / "m"))
    _eval_events(est, [(0, 0.5), (10, 0.9)])
    hook = tf.estimator.experimental.stop_if_higher_hook(
        est, "loss", 0.8, run_every_secs=None, run_every_steps=1)
    est.train(input_fn, hooks=[hook], steps=20)
    assert est.get_variable_value("global_step") == 1
    with pytest.raises(TypeError, match="must have type `tf.estimator.Estimator`"):
        tf.estimator.experimental.stop_if_lower_hook(object(), "loss", 0.1, eval_dir="e")
    with pytest.raises(ValueError, match="Only one of `run_every_secs` and `run_every_steps`"):
        tf.estimator.experimental.make_early_stopping_hook(est, lambda: False, 60, 10)
