"""A ``model_fn`` model file under ``mpiexec -n 2``: its gradients are averaged as any
model file's (the trainer's ``reducing_gradients`` seam around the ``model_fn`` call), so
2 ranks x batch B train as one process with batch 2B, and only rank 0 writes."""

from __future__ import annotations

import json
import subprocess
import textwrap

import numpy as np
import pytest

from ckptsync import checkpoint as ckpt

from .conftest import cli, env, mpiexec, needs_mpi, run_mpi

pytestmark = [needs_mpi, pytest.mark.timeout(240)]

MODEL_FN = textwrap.dedent("""
    import ckptsync as tf

    def model_fn(features, labels, mode):
        h = tf.layers.dense(features["x"], 32, activation=tf.nn.relu)
        logits = tf.layers.dense(h, 10)
        loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
        if mode == tf.estimator.ModeKeys.EVAL:
            return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops={
                "accuracy": tf.metrics.accuracy(labels, tf.argmax(logits, axis=1))})
        train_op = tf.train.AdamOptimizer(1e-2).minimize(
            loss, global_step=tf.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
""")


def test_two_ranks_train_a_model_fn_file_as_one_process_with_the_global_batch(tmp_path):
    model = tmp_path / "mlp_fn.py"
    model.write_text(MODEL_FN)
    two, one = tmp_path / "two", tmp_path / "one"
    flags = ("--model", str(model), "--steps", "20", "--save-every-steps", "20",
             "--log-format", "json")
    r = run_mpi(mpiexec(2, *cli("trainer", "run", *flags, "--batch-size", "16",
                                "--checkpoint-dir", str(two))))
    assert r.returncode == 0, r.stdout + r.stderr
    summaries = [json.loads(ln) for ln in r.stdout.splitlines() if '"summary"' in ln]
    assert len(summaries) == 1 and summaries[0]["ranks"] == 2, r.stdout
    assert 0 < summaries[0]["held_out_metrics"]["accuracy"] <= 1
    single = subprocess.run(cli("trainer", "run", *flags, "--batch-size", "32",
                                "--checkpoint-dir", str(one)),
                            env=env(), capture_output=True, text=True, timeout=120)
    assert single.returncode == 0, single.stderr
    a = ckpt.read_checkpoint(str(two / "model.ckpt-20"))
    b = ckpt.read_checkpoint(str(one / "model.ckpt-20"))
    assert sorted(a) == sorted(b)
    for name in b:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-6, err_msg=name)
