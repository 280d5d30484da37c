"""A TF1 program of the names the session-22 new-user trial found missing, run with
only its import changed (``import ckptsync.compat.v1 as tf``), in its own process; and
the compat names themselves."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import ckptsync as tf

PROGRAM = textwrap.dedent('''
    import json, os, sys
    import numpy as np
    import ckptsync.compat.v1 as tf

    tf.disable_v2_behavior()
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.INFO)
    tf.app.flags.DEFINE_string("out_dir", "", "Where to write.")
    FLAGS = tf.app.flags.FLAGS

    def main(_):
        if not tf.gfile.Exists(FLAGS.out_dir):
            tf.gfile.MakeDirs(FLAGS.out_dir)
        tf.set_random_seed(1)
        x = tf.placeholder(tf.float32, [None, 3], name="x")
        w = tf.get_variable("w", [3, 1], initializer=tf.random_normal_initializer())
        noise = tf.random.uniform([3], -0.01, 0.01)
        check = tf.debugging.assert_rank(x, 2)
        with tf.control_dependencies([check, tf.print("batch", tf.shape(x))]):
            y = tf.matmul(tf.Print(x, [tf.reduce_mean(x)], "mean x: "), w)
        ranked = tf.argsort(tf.squeeze(y, 1), direction="DESCENDING")
        doubled = tf.py_func(lambda a: (2 * a).astype(np.float32), [noise], tf.float32)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            r, d = sess.run([ranked, doubled], {x: np.eye(3, dtype=np.float32)})
        with tf.gfile.GFile(os.path.join(FLAGS.out_dir, "ranked.json"), "w") as f:
            f.write(json.dumps({"ranked": sorted(r.tolist()), "doubled_len": len(d),
                                "compat": tf.compat.v1 is tf,
                                "text": tf.compat.as_text(b"ok")}))
        tf.logging.info("wrote %s", tf.gfile.ListDirectory(FLAGS.out_dir))

    if __name__ == "__main__":
        tf.app.run()
''')


@pytest.mark.timeout(120)
def test_a_tf1_program_runs_with_only_its_import_changed(tmp_path):
    pytest.importorskip("absl", reason="tf.app.flags needs the optional absl-py")
    (tmp_path / "prog.py").write_text(PROGRAM)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "prog.py", f"--out_dir={out}"], cwd=tmp_path,
                       text=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=100)
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "ranked.json").read_text()) == {
        "ranked": [0, 1, 2], "doubled_len": 3, "compat": True, "text": "ok"}
    err = r.stderr.splitlines()
    assert "batch [3 3]" in err and "mean x: [0.333333343]" in err
    assert any(line.endswith("wrote ['ranked.json']") for line in err), r.stderr


def test_compat_v1_is_the_package_and_v2_switches():
    import ckptsync.compat.v1 as v1

    assert v1 is tf and tf.compat.v1 is tf and tf.compat.v1.compat.v1 is tf
    assert tf.compat.as_bytes("é") == b"\xc3\xa9" and tf.compat.as_str(b"a") == "a"
    with pytest.raises(TypeError, match="Expected binary or unicode string"):
        tf.compat.as_text(3)
    assert tf.disable_v2_behavior() is None and tf.executing_eagerly() is False
    with pytest.raises(ValueError, match="graph mode only"):
        tf.enable_eager_execution()


def test_version_is_ckptsyncs_own():
    import importlib.metadata

    # Not a TensorFlow version: code that branches on TF's version must not take
    # ckptsync for a TF it is not (docs/graph-language.md).
    assert tf.__version__ == importlib.metadata.version("ckptsync")


def test_random_namespace_is_the_random_ops():
    assert (tf.random.normal, tf.random.uniform, tf.random.truncated_normal,
            tf.random.shuffle, tf.random.set_random_seed) == (
        tf.random_normal, tf.random_uniform, tf.truncated_normal, tf.random_shuffle,
        tf.set_random_seed)
    tf.set_random_seed(5)
    s = tf.random.shuffle(tf.constant([[1, 1], [2, 2], [3, 3], [4, 4]]))
    with tf.Session() as sess:
        runs = [sess.run(s) for _ in range(6)]
    assert all(sorted(r[:, 0].tolist()) == [1, 2, 3, 4] and (r[:, 0] == r[:, 1]).all()
               for r in runs)
    assert len({r[:, 0].tobytes() for r in runs}) > 1  # a new order per run


@pytest.mark.timeout(60)
def test_without_absl_only_the_flags_are_missing_and_the_error_names_the_extra():
    program = textwrap.dedent('''
        import sys
        sys.modules["absl"] = None  # as if absl-py were not installed
        import ckptsync as tf
        tf.logging.info("fine"); tf.gfile.Exists("."); tf.app.TrainerOptions
        try:
            tf.app.flags
        except ImportError as e:
            print(e)
    ''')
    r = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert "pip install 'ckptsync[flags]'" in r.stdout
