"""examples/digits_estimator.py (the digits CNN as a TF1 Estimator program) runs as an
Estimator program too: ``tf.estimator.Estimator`` over its ``model_fn`` and its
``tf.data`` ``input_fn``, ``train_and_evaluate``, ``predict`` and its
``serving_input_receiver_fn``."""

from __future__ import annotations

import os
import runpy

import numpy as np

import ckptsync as tf

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "digits_estimator.py")


def test_the_digits_estimator_example_trains_evaluates_and_predicts(tmp_path):
    ex = runpy.run_path(EXAMPLE)
    config = tf.estimator.RunConfig(model_dir=str(tmp_path), save_checkpoints_steps=30,
                                    tf_random_seed=0, log_step_count_steps=30)
    est = tf.estimator.Estimator(ex["model_fn"], config=config, params=ex["PARAMS"])
    metrics, exports = tf.estimator.train_and_evaluate(
        est, tf.estimator.TrainSpec(lambda: ex["input_fn"]("train", 64), max_steps=60),
        tf.estimator.EvalSpec(lambda: ex["input_fn"]("test", 256, epochs=1, shuffle=False),
                              steps=None, throttle_secs=0))
    assert metrics["global_step"] == 60 and exports == []
    assert metrics["accuracy"] > 0.4, metrics  # 60 Adam steps on 8x8 digits (chance: 0.1)
    names = est.get_variable_names()
    assert {"conv2d/kernel", "conv2d_1/bias", "dense/kernel", "dense_1/bias"} <= set(names)
    assert os.listdir(tmp_path / "eval")  # evaluations at steps 30 and 60
    x = tf.data.load_digits().test["x"][:5]
    # A Dataset, so the input ends (constant features would be predicted forever, as TF).
    preds = list(est.predict(lambda: tf.data.Dataset.from_tensor_slices({"x": x}).batch(2)))
    assert len(preds) == 5
    assert [p["classes"] for p in preds] == [int(np.argmax(p["probabilities"])) for p in preds]
    with tf.Graph().as_default():
        receiver = ex["serving_input_receiver_fn"]()
        assert receiver.receiver_tensors["x"].shape.as_list() == [None, 64]
