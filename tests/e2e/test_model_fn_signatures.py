"""Every signature a ``model_fn``'s ``export_outputs`` names is served by ``infer
serve`` over real HTTP, as TF Serving serves a SavedModel's signature_defs:
``{"signature_name": "probs", ...}`` picks one, ``/metadata`` lists them all, and an
unknown name is a 400 naming the ones there are."""

from __future__ import annotations

import subprocess
import textwrap

import httpx
import numpy as np
import pytest

from ckptsync.data import load_digits

from .conftest import cli, env, serve, wait_ready

MODEL = textwrap.dedent("""
    import ckptsync as tf

    def model_fn(features, labels, mode):
        logits = tf.layers.dense(features["x"], 10)
        classes = tf.argmax(logits, axis=1)
        probs = tf.nn.softmax(logits)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions={"classes": classes},
                export_outputs={
                    "serving_default": tf.estimator.export.PredictOutput({"classes": classes}),
                    "probs": tf.estimator.export.PredictOutput({"probabilities": probs}),
                    "top": tf.estimator.export.RegressionOutput(tf.reduce_max(probs, 1))})
        loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=tf.train.AdamOptimizer(
            0.05).minimize(loss, global_step=tf.train.get_global_step()))

    serving_input_receiver_fn = tf.estimator.export.build_raw_serving_input_receiver_fn(
        {"x": tf.placeholder(tf.float32, [None, 64], name="x")})
""")


@pytest.mark.timeout(300)
def test_every_export_output_is_a_signature_served_by_name(tmp_path, procs):
    model = tmp_path / "sigs.py"
    model.write_text(MODEL)
    ckpts = tmp_path / "ckpts"
    r = subprocess.run(cli("trainer", "run", "--model", str(model), "--checkpoint-dir",
                           str(ckpts), "--steps", "30", "--save-every-steps", "30"),
                       env=env(), capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    port_file = tmp_path / "port"
    port = serve(procs, port_file, model, ckpts, "--model-name", "m")
    wait_ready(port, procs[-1])
    x = load_digits().test["x"][:5].tolist()
    url = f"http://127.0.0.1:{port}/v1/models/m"
    with httpx.Client(timeout=60) as client:
        sigs = client.get(f"{url}/metadata").json()["metadata"]["signature_def"][
            "signature_def"]
        default = client.post(f"{url}:predict", json={"instances": x})
        probs = client.post(f"{url}:predict", json={"signature_name": "probs", "instances": x})
        top = client.post(f"{url}:predict", json={"signature_name": "top", "inputs": {"x": x}})
        bad = client.post(f"{url}:predict", json={"signature_name": "pred", "instances": x})
    assert set(sigs) == {"serving_default", "probs", "top"}
    assert {k: set(v["outputs"]) for k, v in sigs.items()} == {
        "serving_default": {"classes"}, "probs": {"probabilities"}, "top": {"outputs"}}
    assert all(set(v["inputs"]) == {"x"} for v in sigs.values())
    assert default.status_code == probs.status_code == top.status_code == 200, probs.text
    classes = np.array(default.json()["predictions"])
    p = np.array(probs.json()["predictions"])
    assert p.shape == (5, 10) and np.allclose(p.sum(axis=1), 1.0, atol=1e-5)
    assert (p.argmax(axis=1) == classes).all()
    assert np.allclose(top.json()["outputs"], p.max(axis=1), atol=1e-6)
    assert bad.status_code == 400
    assert 'Serving signature name: "pred" not found in signature def' in bad.json()["error"]
