"""Seed 000 (``/work/shared/seeds/000_*.txt``): an Estimator trained with a custom hook
that runs ``tf.train.broadcast_global_variables()``, run with only its imports changed.

The seed's code is not valid TF as written; the program below is its minimal correction,
each change one TF itself requires (checked under TF 2.15 with ``tensorflow.compat.v1``,
``broadcast_global_variables`` stubbed by ``tf.no_op``):

1. ``my_model()`` becomes ``my_model(features, labels, mode)`` (TF: "model_fn ... must
   include features argument") reading ``features``/``labels`` (the seed's placeholders
   are never fed by an Estimator) and returning an ``EstimatorSpec`` (TF: "model_fn
   should return an EstimatorSpec."; the seed returned ``(train_op, accuracy)``).
2. The global step is ``tf.train.get_global_step()``: the Estimator creates it, so the
   seed's ``tf.get_variable('global_step', ...)`` fails in TF ("already exists").
3. ``main`` no longer calls ``my_model()`` itself, and the dataset is built inside
   ``input_fn`` (TF: a dataset of another graph cannot be iterated in the Estimator's).
   ``train_inputs``, ``train_labels`` and ``batch_size``, undefined in the seed, are given.
4. The hook builds the broadcast op in ``begin()``: in ``before_run`` the graph is
   finalized (TF: "Graph is finalized and cannot be modified").
5. ``basic_session_run_hooks.SessionRunHook`` does not exist in TF's module; it is
   ``basic_session_run_hooks.session_run_hook.SessionRunHook`` there (and here).

``tf.train.broadcast_global_variables`` itself is not TF's (it is Horovod's
``hvd.broadcast_global_variables(root_rank)``): ckptsync provides it, ``root_rank``
defaulting to 0, so the seed's call runs as written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

SEED_PROGRAM = '''
import numpy as np
import tensorflow as tf
from tensorflow.python.training import basic_session_run_hooks

train_inputs = np.linspace(-1, 1, 640, dtype=np.float32).reshape(64, 10)
train_labels = train_inputs.sum(axis=1, keepdims=True) * 0.5
batch_size = 16


def my_model(features, labels, mode):
    global_step = tf.train.get_global_step()

    with tf.device('/cpu:0'):
        x = features
        y = labels

        w = tf.get_variable('weights', [10, 1], initializer=tf.random_normal_initializer())
        b = tf.get_variable('biases', [1], initializer=tf.constant_initializer())

        logits = tf.matmul(x, w) + b
        loss = tf.reduce_mean(tf.square(logits - y))

        optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.1)
        train_op = optimizer.minimize(loss, global_step=global_step)

        predictions = tf.round(logits)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(predictions, y), tf.float32))

        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


class MyHook(basic_session_run_hooks.session_run_hook.SessionRunHook):
    def __init__(self):
        super(MyHook, self).__init__()

    def begin(self):
        self._broadcast = tf.train.broadcast_global_variables()

    def before_run(self, run_context):
        run_context.session.run(self._broadcast)


def main(argv):
    hook = MyHook()

    def input_fn():
        dataset = tf.data.Dataset.from_tensor_slices((train_inputs, train_labels))
        dataset = dataset.shuffle(buffer_size=1000).batch(batch_size)
        iterator = dataset.make_one_shot_iterator()
        inputs, labels = iterator.get_next()
        return inputs, labels

    estimator = tf.estimator.Estimator(model_fn=my_model, model_dir=argv[1])
    estimator.train(input_fn=input_fn, hooks=[hook])
    return estimator
'''

# Not part of the program: runs main and reports what happened.
HARNESS = '''
import json, sys
runs = []
_before_run = MyHook.before_run
def counting(self, run_context):
    runs.append(self._broadcast.type)
    return _before_run(self, run_context)
MyHook.before_run = counting
est = main(sys.argv)
print(json.dumps({"global_step": int(est.get_variable_value("global_step")), "runs": runs,
                  "checkpoint": est.latest_checkpoint()}))
'''


def test_the_seed_runs_with_only_its_imports_changed(tmp_path):
    program = SEED_PROGRAM.replace("import tensorflow as tf", "import ckptsync as tf").replace(
        "from tensorflow.python.training import", "from ckptsync.train import")
    changed = [(a, b) for a, b in zip(SEED_PROGRAM.splitlines(), program.splitlines()) if a != b]
    assert [a for a, _ in changed] == ["import tensorflow as tf",
                                       "from tensorflow.python.training import basic_session_run_hooks"]
    path = tmp_path / "seed_000.py"
    path.write_text(program + HARNESS)
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    env.pop("TF_CONFIG", None)
    proc = subprocess.run([sys.executable, str(path), str(tmp_path / "model")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    # 64 examples in batches of 16, one epoch: 4 steps (as TF 2.15 runs it), each run
    # preceded by the broadcast, and a fifth run that meets the end of the input.
    assert report["global_step"] == 4
    assert report["runs"] == ["BroadcastGlobalVariables"] * 5
    assert report["checkpoint"] == str(tmp_path / "model" / "model.ckpt-4")
