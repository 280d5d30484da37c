"""TF1's CPU side of ``bench_train_step.py``: one model's training step under
``tensorflow.compat.v1``, single threaded, timed on request.

Run by ``bench_train_step.py`` with the goldens venv's python (TensorFlow is never a
dependency of ckptsync). Protocol on stdin/stdout, one JSON line each: after the build and
the warm-up it prints ``{"ready": true, "loss": <loss after the warm-up steps>}``; then for
each line ``run`` it times every batch once and prints ``{"step_s": <seconds per step>}``;
EOF ends it.

    .goldens-venv/bin/python benchmarks/_tf_worker.py MODEL STEPS WARMUP [VOCAB]
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow.compat.v1 as tf  # noqa: E402  (after the environment above)
from _train_models import model  # noqa: E402


def main() -> None:
    name, steps, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    m = model(name, *(int(a) for a in sys.argv[4:5]))
    tf.disable_v2_behavior()
    g = tf.Graph()
    with g.as_default():
        train, loss, phs = m.build(tf, m.params())
        init = tf.global_variables_initializer()
    cfg = tf.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    sess = tf.Session(graph=g, config=cfg)
    sess.run(init)
    batches = [{phs[k]: v for k, v in b.items()} for b in m.batches(steps)]
    for b in batches[:warmup]:
        sess.run(train, b)
    print(json.dumps({"ready": True, "loss": float(sess.run(loss, batches[0]))}), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            continue
        t = time.perf_counter()
        for b in batches:
            sess.run(train, b)
        print(json.dumps({"step_s": (time.perf_counter() - t) / len(batches)}), flush=True)


if __name__ == "__main__":
    main()
