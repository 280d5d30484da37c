"""The digits CNN (examples/digits_cnn.py) end to end: a real ``trainer run`` process, then a
real ``infer serve`` process answering predict over HTTP, and ``ckptsync demo --model``."""

from __future__ import annotations

import json
import subprocess

import httpx
import numpy as np

from ckptsync.data import load_digits

from .conftest import REPO, cli, env, serve

CNN = str(REPO / "examples" / "digits_cnn.py")


def test_trainer_trains_the_cnn_and_the_server_answers_predict(tmp_path, procs):
    ckpt_dir = tmp_path / "ckpts"
    r = subprocess.run(
        cli("trainer", "run", "--model", CNN, "--data", "digits", "--checkpoint-dir",
            str(ckpt_dir), "--steps", "500", "--save-every-steps", "250", "--log-format",
            "json"), env=env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["global_step"] == 500
    assert summary["held_out_accuracy"] >= 0.93, summary

    port_file = tmp_path / "port"
    port = serve(procs, port_file, CNN, ckpt_dir, "--model-name", "cnn")
    test = load_digits().test
    with httpx.Client(timeout=60) as client:
        r2 = client.post(f"http://127.0.0.1:{port}/v1/models/cnn:predict",
                         json={"instances": test["x"].tolist()})
    assert r2.status_code == 200, r2.text
    out = r2.json()
    assert out["model_version"] == 500
    preds = np.array([p["classes"] for p in out["predictions"]])
    probs = np.array([p["probabilities"] for p in out["predictions"]])
    assert probs.shape == (len(test["y"]), 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-4)
    # The server's forward is the trainer's: the same held-out accuracy.
    assert abs(float(np.mean(preds == test["y"])) - summary["held_out_accuracy"]) < 1e-9


def test_demo_runs_the_cnn_model_file(tmp_path):
    r = subprocess.run(
        cli("main", "demo", "--model", CNN, "--steps", "300", "--save-every-steps", "50",
            "--max-steps-per-s", "200", "--interval-s", "0.25", "--checkpoint-dir",
            str(tmp_path / "ckpts")),
        env=env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"model: {CNN}" in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("served accuracy"))
    first, last = (float(t) for t in line.split("first ")[1].split(" (")[0].split(" -> last "))
    assert last > first and last >= 0.9
    assert "0 failures" in line
