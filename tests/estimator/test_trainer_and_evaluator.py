"""train_and_evaluate as two real processes on one model_dir, as TF_CONFIG's ``chief``
and ``evaluator`` tasks: the evaluator follows the trainer's checkpoints as they appear.

The trainer waits, after each save, until the evaluator has evaluated that checkpoint
(a marker file its exporter writes): so the evaluator sees every checkpoint, and the test
waits on events, not on clocks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

import ckptsync as tf

PROGRAM = '''
import json, os, sys, time
import numpy as np
import ckptsync as tf

X = np.linspace(0, 1, 32, dtype=np.float32).reshape(16, 2)
Y = (X @ np.array([2.0, -1.0], np.float32) + 0.5).astype(np.float32)
MODEL_DIR, MARKERS = sys.argv[1], sys.argv[2]


def model_fn(features, labels, mode):
    w = tf.get_variable("w", [2, 1], initializer=tf.zeros_initializer())
    y = tf.reshape(tf.matmul(features["x"], w), [-1])
    loss = tf.losses.mean_squared_error(labels, y)
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.EstimatorSpec(
            mode, loss=loss, eval_metric_ops={"rmse": tf.metrics.root_mean_squared_error(labels, y)})
    train_op = tf.train.GradientDescentOptimizer(0.2).minimize(
        loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def train_input_fn():
    return tf.data.Dataset.from_tensor_slices(({"x": X}, Y)).repeat().batch(4)


def eval_input_fn():
    return tf.data.Dataset.from_tensor_slices(({"x": X}, Y)).batch(8)


class Marker(tf.estimator.Exporter):
    name = "marker"

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        step = int(eval_result["global_step"])
        path = os.path.join(MARKERS, "%d.json" % step)
        with open(path + ".tmp", "w") as f:
            json.dump({"checkpoint": os.path.basename(checkpoint_path), "final": is_the_final_export,
                       "metrics": {k: float(v) for k, v in eval_result.items()}}, f)
        os.replace(path + ".tmp", path)  # whole, or not there
        return step


class WaitForEvaluator(tf.train.CheckpointSaverListener):
    def after_save(self, session, global_step_value):
        marker = os.path.join(MARKERS, "%d.json" % global_step_value)
        deadline = time.monotonic() + 60
        while not os.path.exists(marker):
            if time.monotonic() > deadline:
                raise RuntimeError("the evaluator never evaluated step %d" % global_step_value)
            time.sleep(0.02)


est = tf.estimator.Estimator(model_fn, config=tf.estimator.RunConfig(
    model_dir=MODEL_DIR, save_checkpoints_steps=3, log_step_count_steps=100))
train_spec = tf.estimator.TrainSpec(train_input_fn, max_steps=9, saving_listeners=[WaitForEvaluator()])
eval_spec = tf.estimator.EvalSpec(eval_input_fn, steps=None, exporters=[Marker()],
                                  start_delay_secs=0, throttle_secs=0)
print(json.dumps({"result": tf.estimator.train_and_evaluate(est, train_spec, eval_spec),
                  "task": est.config.task_type}))
'''


def _start(program, model_dir, markers, task_type):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(
        os.path.join(os.path.dirname(__file__), "..", "..", "src")))
    env["TF_CONFIG"] = json.dumps({"cluster": {"chief": ["localhost:2222"]},
                                   "task": {"type": task_type, "index": 0}})
    return subprocess.Popen([sys.executable, str(program), str(model_dir), str(markers)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_an_evaluator_process_follows_a_trainer_process(tmp_path):
    program, model_dir, markers = tmp_path / "prog.py", tmp_path / "model", tmp_path / "markers"
    program.write_text(PROGRAM)
    markers.mkdir()
    evaluator = _start(program, model_dir, markers, "evaluator")  # first: it waits
    trainer = _start(program, model_dir, markers, "chief")
    try:
        t_out, t_err = trainer.communicate(timeout=180)
        e_out, e_err = evaluator.communicate(timeout=60)
    finally:
        for p in (trainer, evaluator):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    assert trainer.returncode == 0, t_err[-3000:]
    assert evaluator.returncode == 0, e_err[-3000:]
    assert json.loads(t_out.splitlines()[-1]) == {"result": None, "task": "chief"}
    assert json.loads(e_out.splitlines()[-1]) == {"result": None, "task": "evaluator"}
    # Every checkpoint the trainer saved, evaluated once by the evaluator, the last one
    # (at max_steps) as the final export; then the evaluator stopped by itself.
    steps = sorted(int(f.split(".")[0]) for f in os.listdir(markers) if f.endswith(".json"))
    assert steps == [0, 3, 6, 9]
    final = json.loads((markers / "9.json").read_text())
    assert final["checkpoint"] == "model.ckpt-9" and final["final"] is True
    assert not json.loads((markers / "6.json").read_text())["final"]
    # The evaluator's numbers are those of evaluating that checkpoint here.
    ns: dict = {}
    exec(compile(PROGRAM.split("class Marker")[0].replace(
        "MODEL_DIR, MARKERS = sys.argv[1], sys.argv[2]", ""), "prog", "exec"), ns)
    est = tf.estimator.Estimator(ns["model_fn"], model_dir=str(tmp_path / "copy"))
    here = est.evaluate(ns["eval_input_fn"], checkpoint_path=str(model_dir / "model.ckpt-9"))
    assert np.isclose(final["metrics"]["loss"], here["loss"], rtol=1e-6)
    assert np.isclose(final["metrics"]["rmse"], here["rmse"], rtol=1e-6)
    # Its summaries are in model_dir/eval at each step, read back by TensorBoard's loader.
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(model_dir / "eval"))
    acc.Reload()
    assert sorted(e.step for e in acc.Scalars("rmse")) == [0, 3, 6, 9]
