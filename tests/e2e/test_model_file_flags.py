"""A model file that defines ``tf.app.flags`` and reads them (at import and in
``model_fn``) runs under real ``trainer run`` and ``infer serve`` processes: the host's
command line (``--model``, ``--steps``...) is not the file's, so its flags keep their
defaults instead of failing on ``Unknown command line flag 'model'``."""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from ckptsync.checkpoint import read_checkpoint

from .conftest import cli, env

pytest.importorskip("absl", reason="tf.app.flags needs the optional absl-py (ckptsync[flags])")

FLAG_MODEL = textwrap.dedent("""
    import ckptsync as tf

    tf.app.flags.DEFINE_integer("hidden", 12, "hidden units")
    FLAGS = tf.app.flags.FLAGS
    WIDTH_AT_IMPORT = FLAGS.hidden

    def model_fn(features, labels, mode):
        h = tf.layers.dense(features["x"], FLAGS.hidden + WIDTH_AT_IMPORT, tf.nn.relu)
        logits = tf.layers.dense(h, 10)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions={"classes": tf.argmax(logits, 1)})
        loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=tf.train.AdamOptimizer(
            0.01).minimize(loss, tf.train.get_global_step()))
""")


@pytest.mark.timeout(240)
def test_a_model_file_reading_its_flags_trains_under_trainer_run(tmp_path):
    model = tmp_path / "flagmodel.py"
    model.write_text(FLAG_MODEL)
    ckpts = tmp_path / "ckpts"
    r = subprocess.run(cli("trainer", "run", "--model", str(model), "--checkpoint-dir",
                           str(ckpts), "--steps", "4", "--save-every-steps", "4"),
                       env=env(), capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "Unknown command line flag" not in r.stderr
    arrays = read_checkpoint(str(ckpts / "model.ckpt-4"))
    assert arrays["dense/kernel"].shape == (64, 24)  # FLAGS.hidden's default, twice
