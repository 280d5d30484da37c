"""Makes the TF checkpoint fixtures of tests/checkpoint/test_tf_bundle.py with TensorFlow.

Run in the goldens venv (TensorFlow is the oracle, never a dependency)::

    .goldens-venv/bin/python tests/checkpoint/tf_fixtures/make_fixtures.py write
    .goldens-venv/bin/python tests/checkpoint/tf_fixtures/make_fixtures.py read-ours

``write``: TF1's ``tf.compat.v1.train.Saver`` saves ``tf_mixed/model.ckpt-7`` (several
dtypes, scalars, an empty tensor, an 8 KiB variable, names with slashes, a slot beside
its variable, ``global_step``) and ``tf_mixed/tf_values.npz``: every tensor as TF's own
``NewCheckpointReader`` reads it back.

``write-partitioned``: ``tf_partitioned/model.ckpt-1``, a partitioned variable (see
:func:`write_partitioned`).

``read-ours``: TF reads ``ours/model.ckpt-3`` (written by ckptsync's ``write_tf_checkpoint``,
see the test) with ``tf.train.list_variables``, ``NewCheckpointReader`` and a
``Saver.restore`` into a graph of matching variables, and writes ``ours/tf_read.json``.
"""

import json
import os
import sys

import numpy as np
import tensorflow.compat.v1 as tf

tf.disable_v2_behavior()
HERE = os.path.dirname(os.path.abspath(__file__))


def values():
    """The variables of tf_mixed: name -> numpy value."""
    return {
        "dense/kernel": np.arange(6, dtype=np.float32).reshape(2, 3) / 7,
        "dense/bias": np.array([0.5, -1.25, 3.0], np.float32),
        "scope/var": np.array([[1.5, 2.5]], np.float64),
        "scope/var/Adam": np.array([[0.25, -0.75]], np.float64),
        "a/b/c/deep": np.float32(3.25),
        "counts": np.array([1, -2, 2**31 - 1, -2**31], np.int32),
        "flags": np.array([True, False, True]),
        "half": np.array([[1.0, -2.0], [0.5, 65504.0]], np.float16),
        "bytes": np.array([0, 1, 127, 128, 255], np.uint8),
        "small_ints": np.array([-128, 0, 127], np.int8),
        "shorts": np.array([-32768, 7, 32767], np.int16),
        "cplx": np.array([1 + 2j, -3.5 - 0.5j], np.complex64),
        "cplx128": np.array([[0.25 - 1j]], np.complex128),
        "empty": np.zeros((0, 3), np.float32),
        "big/embedding": (np.arange(64 * 32, dtype=np.float32).reshape(64, 32) - 1000) / 64,
        "global_step": np.int64(7),
    }


def write():
    out = os.path.join(HERE, "tf_mixed")
    os.makedirs(out, exist_ok=True)
    with tf.Graph().as_default():
        vs = [tf.Variable(v, name=k) for k, v in values().items()]
        saver = tf.train.Saver(vs)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            saver.save(sess, os.path.join(out, "model.ckpt"), global_step=7,
                       write_meta_graph=False)
    reader = tf.train.NewCheckpointReader(os.path.join(out, "model.ckpt-7"))
    arrays = {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}
    np.savez(os.path.join(out, "tf_values.npz"), **arrays)
    with open(os.path.join(out, "checkpoint")) as f:
        state = f.read()
    # TF writes absolute paths into the state file; the fixture keeps them relative.
    with open(os.path.join(out, "checkpoint"), "w") as f:
        f.write(state.replace(out + os.sep, ""))


def write_partitioned():
    """tf_partitioned/model.ckpt-1: a variable split in 3 by a partitioner (its slices
    are stored under binary keys) beside an ordinary one; tf_values.npz as TF reads it."""
    out = os.path.join(HERE, "tf_partitioned")
    os.makedirs(out, exist_ok=True)
    with tf.Graph().as_default():
        part = tf.get_variable(
            "emb", initializer=tf.constant(np.arange(300 * 2, dtype=np.float32).reshape(300, 2)),
            partitioner=tf.fixed_size_partitioner(3))
        plain = tf.get_variable("plain", initializer=tf.constant([1.0, 2.0]))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            tf.train.Saver().save(sess, os.path.join(out, "model.ckpt"), global_step=1,
                                  write_meta_graph=False, write_state=False)
        del part, plain
    reader = tf.train.NewCheckpointReader(os.path.join(out, "model.ckpt-1"))
    np.savez(os.path.join(out, "tf_values.npz"),
             **{k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()})


def read_ours():
    prefix = os.path.join(HERE, "ours", "model.ckpt-3")
    listed = tf.train.list_variables(prefix)
    reader = tf.train.NewCheckpointReader(prefix)
    dtypes = reader.get_variable_to_dtype_map()
    with tf.Graph().as_default():
        vs = {name: tf.Variable(tf.zeros(shape, dtypes[name]), name=name)
              for name, shape in listed}
        with tf.Session() as sess:
            tf.train.Saver(vs).restore(sess, prefix)
            restored = sess.run(vs)
    doc = {"list_variables": [[n, list(s)] for n, s in listed],
           "dtypes": {n: dtypes[n].name for n, _ in listed},
           "restored": {n: np.asarray(v).tolist() if dtypes[n].name[:7] != "complex" else
                        [np.real(v).tolist(), np.imag(v).tolist()]
                        for n, v in restored.items()}}
    with open(os.path.join(HERE, "ours", "tf_read.json"), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    {"write": write, "write-partitioned": write_partitioned,
     "read-ours": read_ours}[sys.argv[1]]()
