"""Writes ``tests/goldens/model_fn_digits_estimator.json``: what TensorFlow's own
``model_fn`` graphs of ``examples/digits_estimator.py`` hold, in each mode, when the file
is run with ``import tensorflow.compat.v1 as tf`` in place of ``import ckptsync as tf``.

Per mode (TRAIN, EVAL with features/labels as ``trainer run`` feeds them for ``--data
digits``; PREDICT with the file's ``serving_input_receiver_fn``): the global and local
variables (name, shape) after TF's Estimator has created the global step and called
``model_fn``, the eval metric names, and the serving signature. ``tests/runtime/
test_model_fn_file.py`` compares ckptsync's graphs with it, without TensorFlow.

Needs TF with ``tf.estimator`` (<= 2.15):

    /work/tf215venv/bin/python tests/goldens/make_model_fn_golden.py
"""

from __future__ import annotations

import json
import os
import pathlib
import types
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

#: ``tensorflow.compat.v1``, imported by :func:`main` only: the suite imports this module
#: (``--doctest-modules``) where TensorFlow is not installed.
tf: Any = None

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "digits_estimator.py"
OUT = pathlib.Path(__file__).with_name("model_fn_digits_estimator.json")


def load_example() -> types.ModuleType:
    source = EXAMPLE.read_text()
    assert "\nimport ckptsync as tf\n" in source
    source = source.replace("\nimport ckptsync as tf\n",
                            "\nimport tensorflow.compat.v1 as tf\n", 1)
    module = types.ModuleType("digits_estimator_tf")
    exec(compile(source, str(EXAMPLE), "exec"), module.__dict__)  # noqa: S102
    return module


def variables(collection: str) -> list[list]:
    return [[v.op.name, v.get_shape().as_list()] for v in tf.get_collection(collection)]


def main() -> None:
    global tf
    import tensorflow.compat.v1 as tf  # noqa: PLC0415 - see the module global

    tf.disable_v2_behavior()
    m = load_example()
    modes = {}
    for name, mode in (("train", tf.estimator.ModeKeys.TRAIN),
                       ("eval", tf.estimator.ModeKeys.EVAL),
                       ("infer", tf.estimator.ModeKeys.PREDICT)):
        with tf.Graph().as_default():
            tf.random.set_random_seed(0)
            tf.train.get_or_create_global_step()  # as Estimator, before model_fn
            labels = None
            if mode == tf.estimator.ModeKeys.PREDICT:
                receiver = m.serving_input_receiver_fn()
                features, inputs = receiver.features, receiver.receiver_tensors
            else:
                features = {"x": tf.placeholder(tf.float32, [None, 64], name="x")}
                labels = tf.placeholder(tf.int64, [None], name="y")
                inputs = features
            spec = m.model_fn(features=features, labels=labels, mode=mode, params=m.PARAMS)
            entry = {
                "global_variables": variables(tf.GraphKeys.GLOBAL_VARIABLES),
                "local_variables": variables(tf.GraphKeys.LOCAL_VARIABLES),
                "eval_metrics": sorted(spec.eval_metric_ops or {}),
                "inputs": {k: t.get_shape().as_list() for k, t in inputs.items()},
            }
            if mode == tf.estimator.ModeKeys.PREDICT:
                outputs = spec.export_outputs["serving_default"].outputs
                entry["outputs"] = {k: [t.dtype.name, t.get_shape().as_list()]
                                    for k, t in outputs.items()}
            modes[name] = entry
    OUT.write_text(json.dumps({"tensorflow": tf.__version__, "modes": modes}, indent=1,
                              sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
