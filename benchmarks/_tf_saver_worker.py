"""TF1's side of ``bench_checkpoint.py``'s warm restore: ``tf.compat.v1.train.Saver``
over the same variables (count, sizes, float32, values), timed on request.

Run by ``bench_checkpoint.py`` with the goldens venv's python (TensorFlow is never a
dependency of ckptsync). It builds ``VARS`` float32 variables of ``N`` elements each, fills
them with the benchmark's values (``numpy.random.default_rng(0)``, in order), saves them
once with ``Saver.save`` (TF's V2 bundle: ``.index`` + ``.data-00000-of-00001``) into
``DIR`` and restores once to warm the page cache. Protocol on stdin/stdout, one JSON line
each: ``{"ready": true, "save_s": <seconds>}``; then for each line ``restore`` it times one
``Saver.restore(sess, prefix)`` and prints ``{"restore_s": <seconds>}``; EOF ends it.
TF's bundle reader checks every tensor's crc32c as it reads it.

    .goldens-venv/bin/python benchmarks/_tf_saver_worker.py N VARS DIR
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402  (after the environment above)


def main() -> None:
    n, count, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    tf.disable_v2_behavior()
    g = tf.Graph()
    with g.as_default():
        variables = [tf.get_variable(f"layer{i:02d}/w", [n], tf.float32,
                                     initializer=tf.zeros_initializer())
                     for i in range(count)]
        init = tf.global_variables_initializer()
        saver = tf.train.Saver(max_to_keep=None)
    sess = tf.Session(graph=g)
    sess.run(init)
    rng = np.random.default_rng(0)
    for v in variables:  # fed through a placeholder: no 2 GiB constants in the graph
        v.load(rng.random(n, dtype=np.float32), sess)
    t = time.perf_counter()
    prefix = saver.save(sess, os.path.join(work, "tf_model.ckpt"), write_meta_graph=False)
    save_s = time.perf_counter() - t
    saver.restore(sess, prefix)  # the page cache is warm from here on
    print(json.dumps({"ready": True, "save_s": save_s}), flush=True)
    for line in sys.stdin:
        if line.strip() != "restore":
            continue
        t = time.perf_counter()
        saver.restore(sess, prefix)
        print(json.dumps({"restore_s": time.perf_counter() - t}), flush=True)


if __name__ == "__main__":
    main()
