"""Model files as a new user writes them, run by real `trainer run` and `infer serve`
processes: a model that imports its siblings, a wrong `build_net` signature, a regression
model (held-out loss, no accuracy)."""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap
import time
import urllib.request
from pathlib import Path

import numpy as np

from .conftest import REPO, cli, env

# A model split over three files: model.py imports mymodel_utils at import time and
# mymodel_layers inside build_net (after the file was loaded).
UTILS = textwrap.dedent("""
    import ckptsync as cs

    def dense(x, units, name):
        with cs.variable_scope(name):
            w = cs.get_variable("w", [x.get_shape().as_list()[-1], units])
            b = cs.get_variable("b", [units], initializer=cs.zeros_initializer())
            return cs.nn.bias_add(cs.matmul(x, w), b)
""")
LAYERS = "import ckptsync as cs\n\ndef relu(x):\n    return cs.nn.relu(x)\n"
MODEL = textwrap.dedent("""
    import ckptsync as cs
    import mymodel_utils

    def build_net(graph, device, mode):
        import mymodel_layers
        with graph.as_default(), graph.device(device):
            x = cs.placeholder(cs.float32, [None, 64], name="x")
            logits = mymodel_utils.dense(mymodel_layers.relu(x), 10, "out")
            outputs = {"classes": cs.argmax(logits, axis=1, name="classes")}
            if mode == cs.ModeKeys.PREDICT:
                return cs.ModelSpec(inputs={"x": x}, outputs=outputs)
            y = cs.placeholder(cs.int64, [None], name="y")
            loss = cs.reduce_mean(cs.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y, logits=logits))
            step = cs.train.get_or_create_global_step()
            train_op = cs.train.AdamOptimizer(1e-2).minimize(loss, global_step=step)
            return cs.ModelSpec(inputs={"x": x}, outputs=outputs, labels={"y": y}, loss=loss,
                                train_op=train_op)
""")


def _run(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cli("trainer", "run", *args), env=env(), capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


def _split_model(tmp_path: Path) -> Path:
    d = tmp_path / "models"
    d.mkdir()
    (d / "mymodel_utils.py").write_text(UTILS)
    (d / "mymodel_layers.py").write_text(LAYERS)
    (d / "model.py").write_text(MODEL)
    return d / "model.py"


def test_a_model_imports_its_siblings_in_trainer_and_server(tmp_path):
    model = _split_model(tmp_path)
    ckpts = tmp_path / "ckpts"
    # Run from elsewhere: the siblings are found through the model file's directory.
    r = _run("--model", str(model), "--checkpoint-dir", str(ckpts), "--steps", "20",
             "--save-every-steps", "10", "--log-format", "json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])["global_step"] == 20
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        cli("infer", "serve", "--grpc-port", "0", "--model", str(model), "--checkpoint-dir", str(ckpts),
            "--port", "0", "--port-file", str(port_file)),
        env=env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "infer serve did not start"
            time.sleep(0.02)
        port = int(port_file.read_text())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models/model/metadata",
                                    timeout=30) as resp:
            assert "classes" in resp.read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def test_a_wrong_build_net_signature_names_the_expected_one(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def build_net(graph):\n    return None\n")
    r = _run("--model", str(bad), "--checkpoint-dir", str(tmp_path / "c"), cwd=tmp_path,
             timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "build_net(graph, device, mode) -> ModelSpec" in lines[0]
    assert "build_net(graph)" in lines[0] and str(bad) in lines[0]
    assert not (tmp_path / "c").exists()


REGRESSION = textwrap.dedent("""
    import ckptsync as cs

    def build_net(graph, device, mode):
        with graph.as_default(), graph.device(device):
            x = cs.placeholder(cs.float32, [None, 3], name="x")
            w = cs.get_variable("w", [3, 1])
            prediction = cs.matmul(x, w, name="prediction")
            outputs = {"prediction": prediction}
            if mode == cs.ModeKeys.PREDICT:
                return cs.ModelSpec(inputs={"x": x}, outputs=outputs)
            y = cs.placeholder(cs.float32, [None, 1], name="y")
            loss = cs.reduce_mean(cs.square(prediction - y), name="loss")
            step = cs.train.get_or_create_global_step()
            train_op = cs.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
            return cs.ModelSpec(inputs={"x": x}, outputs=outputs, labels={"y": y}, loss=loss,
                                train_op=train_op)
""")


def test_a_regression_model_reports_held_out_loss_and_no_accuracy(tmp_path):
    (tmp_path / "reg.py").write_text(REGRESSION)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32)).astype(np.float32)
    np.savez(tmp_path / "reg.npz", x=x[:400], y=y[:400], x_test=x[400:], y_test=y[400:])
    args = ("--model", str(tmp_path / "reg.py"), "--data", str(tmp_path / "reg.npz"),
            "--steps", "200", "--eval-every", "100")
    r = _run(*args, "--checkpoint-dir", str(tmp_path / "j"), "--log-format", "json",
             cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    records = [json.loads(ln) for ln in r.stdout.splitlines()]
    summary = records[-1]
    assert summary["held_out_accuracy"] is None
    assert 0 <= summary["held_out_loss"] < 0.05  # y is a linear function of x
    evals = [rec for rec in records if rec["event"] == "progress" and rec["eval_loss"] is not None]
    assert [rec["step"] for rec in evals] == [100, 200]
    assert all(rec["eval_accuracy"] is None for rec in evals)
    assert summary["ranks"] == 1 and summary["global_batch_size"] == 64
    r = _run(*args, "--checkpoint-dir", str(tmp_path / "t"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "held-out loss" in r.stdout and "accuracy" not in r.stdout + r.stderr, r.stdout
    assert "held-out loss" in r.stderr  # the progress line of each evaluation


def test_a_classifier_reports_held_out_loss_and_accuracy(tmp_path):
    r = _run("--model", str(REPO / "examples" / "digits_mlp.py"), "--checkpoint-dir",
             str(tmp_path / "c"), "--steps", "300", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    done = r.stdout.strip().splitlines()[-1]
    assert "held-out loss " in done and "held-out accuracy 0.9" in done, done
