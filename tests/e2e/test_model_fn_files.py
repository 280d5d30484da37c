"""Model files written to TF1's Estimator contract, ``model_fn(features, labels, mode,
params)``, run by real ``trainer run`` and ``infer serve`` processes: trained, served over
HTTP, ``PARAMS`` and ``--learning-rate``, ``eval_metric_ops`` in the held-out report, an
npz data set's features, and the errors (one line naming the file and the function)."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import httpx
import numpy as np
import pytest

from ckptsync.checkpoint import read_checkpoint
from ckptsync.data import load_digits

from .conftest import cli, env, serve

# An MLP on the digits: PARAMS, tf.layers, tf.metrics, a raw serving receiver.
MLP = textwrap.dedent("""
    import ckptsync as tf

    PARAMS = {"hidden": 24}

    def model_fn(features, labels, mode, params):
        h = tf.layers.dense(features["x"], params["hidden"], activation=tf.nn.relu)
        logits = tf.layers.dense(h, 10)
        classes = tf.argmax(logits, axis=1)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions={
                "classes": classes, "probabilities": tf.nn.softmax(logits)})
        loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
        metrics = {"accuracy": tf.metrics.accuracy(labels=labels, predictions=classes),
                   "mean_class": tf.metrics.mean(tf.cast(classes, tf.float32))}
        if mode == tf.estimator.ModeKeys.EVAL:
            return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)
        # params["learning_rate"] comes from --learning-rate; kept in the checkpoint.
        lr = tf.get_variable("lr_seen", initializer=params.get("learning_rate", 0.01),
                             trainable=False)
        train_op = tf.train.AdamOptimizer(lr).minimize(
            loss, global_step=tf.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    serving_input_receiver_fn = tf.estimator.export.build_raw_serving_input_receiver_fn(
        {"x": tf.placeholder(tf.float32, [None, 64], name="x")})
""")


def _train(model: Path, ckpts: Path, *args: str, timeout: float = 180
           ) -> subprocess.CompletedProcess:
    return subprocess.run(
        cli("trainer", "run", "--model", str(model), "--checkpoint-dir", str(ckpts),
            "--log-format", "json", *args),
        env=env(), capture_output=True, text=True, timeout=timeout)


def _summary(r: subprocess.CompletedProcess) -> dict:
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_model_fn_file_trains_with_trainer_run_and_is_served_by_infer_serve(tmp_path, procs):
    model = tmp_path / "mlp.py"
    model.write_text(MLP)
    ckpts = tmp_path / "ckpts"
    s = _summary(_train(model, ckpts, "--steps", "120", "--save-every-steps", "60",
                        "--learning-rate", "0.02"))
    assert s["global_step"] == 120
    metrics = s["held_out_metrics"]
    assert set(metrics) == {"accuracy", "mean_class"}, s
    # The held-out accuracy is the model's tf.metrics.accuracy (EVAL mode).
    assert metrics["accuracy"] == s["held_out_accuracy"] >= 0.85
    arrays = read_checkpoint(str(ckpts / "model.ckpt-120"))
    assert arrays["dense/kernel"].shape == (64, 24)  # PARAMS["hidden"]
    assert float(arrays["lr_seen"]) == pytest.approx(0.02)  # --learning-rate -> params
    assert "accuracy/total" not in arrays  # metrics are local variables: never saved

    port_file = tmp_path / "port"
    port = serve(procs, port_file, model, ckpts, "--model-name", "mlp")
    test = load_digits().test
    with httpx.Client(timeout=60) as client:
        meta = client.get(f"http://127.0.0.1:{port}/v1/models/mlp/metadata").json()
        sig = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
        assert set(sig["inputs"]) == {"x"}
        assert set(sig["outputs"]) == {"classes", "probabilities"}
        r = client.post(f"http://127.0.0.1:{port}/v1/models/mlp:predict",
                        json={"instances": test["x"].tolist()})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["model_version"] == 120
    served = np.array([p["classes"] for p in out["predictions"]])
    # The server's PREDICT graph is the trainer's EVAL graph: the same accuracy.
    assert float(np.mean(served == test["y"])) == pytest.approx(s["held_out_accuracy"])


NPZ_MODEL = textwrap.dedent("""
    import ckptsync as tf

    def model_fn(features, labels, mode):
        x = tf.concat([features["a"], features["b"]], axis=1)
        prediction = tf.layers.dense(x, 1, use_bias=False)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions=prediction)
        loss = tf.losses.mean_squared_error(labels, prediction)
        train_op = tf.train.GradientDescentOptimizer(0.1).minimize(
            loss, global_step=tf.train.get_global_step())
        return tf.estimator.EstimatorSpec(
            mode, loss=loss, train_op=train_op,
            eval_metric_ops={"rmse": tf.metrics.root_mean_squared_error(labels, prediction)})

    def serving_input_receiver_fn():
        a = tf.placeholder(tf.float32, [None, 2], name="a")
        b = tf.placeholder(tf.float32, [None, 1], name="b")
        return tf.estimator.export.ServingInputReceiver({"a": a, "b": b}, {"a": a, "b": b})
""")


def test_an_npz_gives_model_fn_every_array_but_y_as_features(tmp_path, procs):
    model = tmp_path / "reg.py"
    model.write_text(NPZ_MODEL)
    rng = np.random.default_rng(0)
    a = rng.normal(size=(300, 2)).astype(np.float32)
    b = rng.normal(size=(300, 1)).astype(np.float32)
    y = (a @ [[1.0], [-2.0]] + 0.5 * b).astype(np.float32)
    data = tmp_path / "reg.npz"
    np.savez(data, a=a, b=b, y=y)
    ckpts = tmp_path / "ckpts"
    s = _summary(_train(model, ckpts, "--data", str(data), "--steps", "150"))
    assert s["held_out_accuracy"] is None  # not a classifier
    assert s["held_out_metrics"]["rmse"] < 0.2
    assert s["held_out_metrics"]["rmse"] == pytest.approx(np.sqrt(s["held_out_loss"]), rel=1e-4)
    port_file = tmp_path / "port"
    port = serve(procs, port_file, model, ckpts, "--model-name", "reg")
    with httpx.Client(timeout=60) as client:
        r = client.post(f"http://127.0.0.1:{port}/v1/models/reg:predict",
                        json={"inputs": {"a": [[1.0, 1.0]], "b": [[2.0]]}})
    assert r.status_code == 200, r.text
    # A lone Tensor of predictions is served as "output" (TF's PredictOutput).
    assert r.json()["outputs"][0][0] == pytest.approx(1.0 - 2.0 + 1.0, abs=0.2)


BASE = textwrap.dedent("""
    import ckptsync as tf

    def net(features, labels):
        logits = tf.layers.dense(features["x"], 10)
        loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
        train_op = tf.train.GradientDescentOptimizer(0.1).minimize(
            loss, global_step=tf.train.get_global_step())
        return logits, loss, train_op
""")

BAD_MODEL_FNS = {
    "returns_a_dict": ("""
        def model_fn(features, labels, mode):
            logits, loss, train_op = net(features, labels)
            return {"loss": loss, "train_op": train_op}
        """, "returned dict", "expected a tf.estimator.EstimatorSpec"),
    "returns_a_predict_spec_in_train": ("""
        def model_fn(features, labels, mode):
            logits, loss, train_op = net(features, labels)
            return tf.estimator.EstimatorSpec(tf.estimator.ModeKeys.PREDICT, predictions=logits)
        """, "without loss and train_op in TRAIN mode",
        "expected EstimatorSpec(mode, loss=..., train_op=...)"),
    "spec_without_train_op": ("""
        def model_fn(features, labels, mode):
            logits, loss, train_op = net(features, labels)
            return tf.estimator.EstimatorSpec(mode, loss=loss)
        """, "failed in TRAIN mode", "train_op"),
    "an_unfed_placeholder": ("""
        def model_fn(features, labels, mode):
            keep = tf.placeholder(tf.float32, [], name="keep_prob")
            logits, loss, train_op = net({"x": features["x"] * keep}, labels)
            return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
        """, "needs placeholder 'keep_prob' ([] float32), which the training data",
        "depend only on its features and labels"),
    "a_feature_the_data_lacks": ("""
        def model_fn(features, labels, mode):
            return net({"x": features["image"]}, labels)
        """, "KeyError: 'image'", "features {'x': [None, 64] float32}"),
    "an_argument_tf_does_not_pass": ("""
        def model_fn(features, labels, mode, hparams):
            pass
        """, "has arguments ['hparams'] that TF's Estimator does not pass",
        "['features', 'labels', 'mode', 'params', 'config']"),
    "params_without_a_params_argument": ("""
        PARAMS = {"units": 3}

        def model_fn(features, labels, mode):
            pass
        """, "defines PARAMS but model_fn takes no params argument", "model_fn(features"),
}


@pytest.mark.parametrize("case", sorted(BAD_MODEL_FNS))
def test_a_bad_model_fn_is_one_line_naming_the_file_and_the_function(tmp_path, case):
    body, *expected = BAD_MODEL_FNS[case]
    model = tmp_path / f"{case}.py"
    model.write_text(BASE + textwrap.dedent(body))
    r = _train(model, tmp_path / "c", "--steps", "5", timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("trainer run: error: ") and str(model) in lines[0]
    assert "model_fn" in lines[0] or "PARAMS" in lines[0]
    for text in expected:
        assert text in lines[0], lines[0]
    assert not (tmp_path / "c").exists()


def test_a_build_net_placeholder_the_data_cannot_fill_is_named(tmp_path):
    model = tmp_path / "extra.py"
    model.write_text(textwrap.dedent("""
        import ckptsync as cs

        def build_net(graph, device, mode):
            with graph.as_default(), graph.device(device):
                x = cs.placeholder(cs.float32, [None, 64], name="x")
                scale = cs.placeholder(cs.float32, [], name="scale")
                logits = cs.layers.dense(x * scale, 10)
                outputs = {"classes": cs.argmax(logits, axis=1)}
                if mode == cs.ModeKeys.PREDICT:
                    return cs.ModelSpec(inputs={"x": x}, outputs=outputs)
                y = cs.placeholder(cs.int64, [None], name="y")
                loss = cs.losses.sparse_softmax_cross_entropy(labels=y, logits=logits)
                train_op = cs.train.GradientDescentOptimizer(0.1).minimize(
                    loss, global_step=cs.train.get_or_create_global_step())
                return cs.ModelSpec(inputs={"x": x}, outputs=outputs, labels={"y": y},
                                    loss=loss, train_op=train_op)
    """))
    r = _train(model, tmp_path / "c", "--steps", "5", timeout=60)
    assert r.returncode == 2, r.stderr
    assert "does not fit" not in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith(f"trainer run: error: build_net in {model}: the loss/train_op "
                           "needs placeholder 'scale' ([] float32)"), line
    assert "ModelSpec.inputs or ModelSpec.labels" in line


def test_infer_serve_of_a_model_fn_without_serving_input_receiver_fn_says_what_to_define(
        tmp_path):
    model = tmp_path / "noserve.py"
    model.write_text(BASE + textwrap.dedent("""
        def model_fn(features, labels, mode):
            logits, loss, train_op = net(features, labels)
            return tf.estimator.EstimatorSpec(mode, predictions=logits, loss=loss,
                                              train_op=train_op)
    """))
    r = subprocess.run(
        cli("infer", "serve", "--grpc-port", "0", "--model", str(model), "--checkpoint-dir", str(tmp_path / "c"),
            "--port", "0"), env=env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert str(model) in lines[0]
    assert "defines model_fn but no serving_input_receiver_fn" in lines[0]
    assert "tf.estimator.export.ServingInputReceiver(features, receiver_tensors)" in lines[0]


def test_a_file_with_both_contracts_is_run_through_build_net(tmp_path):
    model = tmp_path / "both.py"
    mlp = (Path(__file__).resolve().parents[2] / "examples" / "digits_mlp.py").read_text()
    model.write_text(mlp + "\n\ndef model_fn(features, labels, mode):\n"
                     "    raise AssertionError('model_fn must not be called')\n")
    s = _summary(_train(model, tmp_path / "c", "--steps", "5"))
    assert s["global_step"] == 5 and s["held_out_metrics"] == {}


def test_eval_metric_ops_are_written_for_tensorboard(tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    model = tmp_path / "mlp.py"
    model.write_text(MLP)
    logdir = tmp_path / "tb"
    _summary(_train(model, tmp_path / "c", "--steps", "40", "--eval-every", "20",
                    "--summary-dir", str(logdir)))
    acc = event_accumulator.EventAccumulator(str(logdir))
    acc.Reload()
    assert {"held_out/loss", "held_out/accuracy", "held_out/mean_class"} \
        <= set(acc.Tags()["scalars"])
    # At each --eval-every step and at the end, once where they meet.
    assert [e.step for e in acc.Scalars("held_out/mean_class")] == [20, 40]
    assert 0 <= acc.Scalars("held_out/mean_class")[-1].value <= 9
