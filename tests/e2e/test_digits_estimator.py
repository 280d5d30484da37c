"""``examples/digits_estimator.py`` (the digits CNN as a TF1 Estimator program) in each of
its modes: ``trainer run`` then ``infer serve`` over HTTP, ``ckptsync demo``, and as a
script (``tf.estimator.Estimator`` + ``train_and_evaluate``) whose ``model_dir`` is
served."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import numpy as np
import pytest

from ckptsync.checkpoint import read_checkpoint
from ckptsync.data import load_digits

from .conftest import REPO, cli, env, serve

EXAMPLE = str(REPO / "examples" / "digits_estimator.py")


def test_trainer_run_trains_the_estimator_example_and_infer_serve_serves_it(tmp_path, procs):
    ckpts = tmp_path / "ckpts"
    r = subprocess.run(
        cli("trainer", "run", "--model", EXAMPLE, "--checkpoint-dir", str(ckpts), "--steps",
            "200", "--save-every-steps", "100", "--log-format", "json"),
        env=env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert s["global_step"] == 200
    assert s["held_out_metrics"]["accuracy"] == s["held_out_accuracy"] >= 0.9, s
    names = set(read_checkpoint(str(ckpts / "model.ckpt-200")))
    # tf.layers' names, as TF1 gives them.
    assert {"conv2d/kernel", "conv2d_1/bias", "dense/kernel", "dense_1/bias",
            "global_step"} <= names

    port_file = tmp_path / "port"
    port = serve(procs, port_file, EXAMPLE, ckpts, "--model-name", "digits")
    test = load_digits().test
    with httpx.Client(timeout=60) as client:
        r2 = client.post(f"http://127.0.0.1:{port}/v1/models/digits:predict",
                         json={"instances": test["x"].tolist()})
    assert r2.status_code == 200, r2.text
    out = r2.json()
    assert out["model_version"] == 200
    classes = np.array([p["classes"] for p in out["predictions"]])
    probs = np.array([p["probabilities"] for p in out["predictions"]])
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-4)
    # Served without dropout, as the trainer's EVAL-mode accuracy was measured.
    assert float(np.mean(classes == test["y"])) == pytest.approx(s["held_out_accuracy"])


def test_demo_shows_the_served_estimator_example_improving(tmp_path):
    r = subprocess.run(
        cli("main", "demo", "--model", EXAMPLE, "--steps", "200", "--save-every-steps", "40",
            "--max-steps-per-s", "150", "--interval-s", "0.25", "--checkpoint-dir",
            str(tmp_path / "ckpts")),
        env=env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("served accuracy"))
    first, last = (float(t) for t in line.split("first ")[1].split(" (")[0].split(" -> last "))
    assert last > first and last >= 0.9
    assert "0 failures" in line


def test_as_a_script_an_estimator_trains_it_and_infer_serve_serves_its_model_dir(
        tmp_path, procs):
    model_dir = tmp_path / "model_dir"
    r = subprocess.run([sys.executable, EXAMPLE, "--model-dir", str(model_dir), "--steps",
                        "200", "--save-checkpoints-steps", "100"],
                       env=env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    metrics = json.loads(r.stdout.strip().splitlines()[-1])  # train_and_evaluate's
    assert metrics["global_step"] == 200 and metrics["accuracy"] >= 0.9, metrics
    # The Estimator's checkpoints are ckptsync's: infer serve follows its model_dir.
    port_file = tmp_path / "port"
    port = serve(procs, port_file, EXAMPLE, model_dir, "--model-name", "digits")
    test = load_digits().test
    with httpx.Client(timeout=60) as client:
        out = client.post(f"http://127.0.0.1:{port}/v1/models/digits:predict",
                          json={"instances": test["x"].tolist()}).json()
    assert out["model_version"] == 200
    classes = np.array([p["classes"] for p in out["predictions"]])
    # The served accuracy is the Estimator's own evaluation of that checkpoint.
    assert float(np.mean(classes == test["y"])) == pytest.approx(metrics["accuracy"])
