"""``tf.Print``, ``tf.print`` and ``tf.py_func`` as TF1 programs use them: the text lands
on the process's stderr (or the stream asked for) when the op runs and only then; a
Python function runs in the session's run with numpy values, its errors as TF's."""

from __future__ import annotations

import logging
import sys
import threading

import numpy as np
import pytest

import ckptsync as tf


def test_print_writes_to_stderr_each_run_and_passes_its_input_through(capfd):
    x = tf.placeholder(tf.float32, [None, 2])
    y = tf.Print(x * 2.0, [tf.reduce_sum(x), tf.shape(x)], message="sum, shape: ")
    with tf.Session() as sess:
        assert capfd.readouterr().err == ""  # building wrote nothing
        out = sess.run(y, {x: np.ones((3, 2), np.float32)})
        sess.run(y, {x: np.zeros((1, 2), np.float32)})
    np.testing.assert_array_equal(out, np.full((3, 2), 2.0, np.float32))
    assert capfd.readouterr().err == "sum, shape: [6][3 2]\nsum, shape: [0][1 2]\n"


def test_print_first_n_counts_per_session(capfd):
    c = tf.constant([1, 2, 3])
    p = tf.Print(c, [c], message="n", first_n=1)
    for _ in range(2):
        with tf.Session() as sess:
            sess.run(p)
            sess.run(p)
    assert capfd.readouterr().err == "n[1 2 3]\nn[1 2 3]\n"


def test_print_gradient_flows_to_its_input_only():
    x = tf.placeholder(tf.float32, [3])
    s = tf.reduce_sum(x)
    y = tf.Print(x * 3.0, [s])
    gx, gs = tf.gradients(tf.reduce_sum(y), [x, s])
    assert gs is None
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(gx, {x: np.ones(3, np.float32)}), [3, 3, 3])


def test_tf_print_runs_only_when_fetched_or_depended_on(capfd):
    x = tf.placeholder(tf.float32, [2])
    loose = tf.print("never", x)  # neither fetched nor a dependency
    with tf.control_dependencies([tf.print("x =", x, "doubled")]):
        y = x * 2.0
    with tf.Session() as sess:
        sess.run(y, {x: np.array([1.5, -2.0], np.float32)})
        assert capfd.readouterr().err == "x = [1.5 -2] doubled\n"
        sess.run(loose, {x: np.array([0.0, 1.0], np.float32)})
    assert capfd.readouterr().err == "never [0 1]\n"


def test_tf_print_to_stdout_a_file_and_tf_logging(capfd, tmp_path, caplog):
    path = tmp_path / "out.txt"
    ops = [tf.print("out", tf.constant(1), output_stream=sys.stdout, end="|"),
           tf.print("file", tf.constant([1, 2]), output_stream=f"file://{path}"),
           tf.print("logged", tf.constant(2.5), output_stream=tf.logging.warning)]
    with caplog.at_level(logging.INFO, logger="tensorflow"), tf.Session() as sess:
        sess.run(ops)
    assert capfd.readouterr().out == "out 1|"
    assert path.read_text() == "file [1 2]\n"
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("tensorflow", logging.WARNING, "logged 2.5")]


def test_tf_print_refuses_an_unknown_stream():
    with pytest.raises(ValueError, match="Unsupported output stream"):
        tf.print("x", output_stream=object())


def test_py_func_calls_numpy_in_the_run_with_unknown_static_shapes():
    calls = []

    def f(a, b):
        calls.append((a.dtype, a.shape, int(b)))
        return (a * b).astype(np.float32), np.int64(a.shape[0])

    x = tf.placeholder(tf.float32, [None, 2])
    y, n = tf.py_func(f, [x, tf.constant(3)], [tf.float32, tf.int64])
    assert y.shape.ndims is None and n.shape.ndims is None and calls == []
    assert y.op.type == "PyFunc" and y.dtype == tf.float32 and n.dtype == tf.int64
    with tf.Session() as sess:
        yv, nv = sess.run([y, n], {x: np.ones((4, 2), np.float32)})
    np.testing.assert_array_equal(yv, np.full((4, 2), 3.0, np.float32))
    assert nv == 4 and calls == [(np.dtype(np.float32), (4, 2), 3)]


def test_py_func_errors_name_the_function_and_keep_the_cause():
    def f(a):
        raise KeyError("missing")

    x = tf.placeholder(tf.float32, [2])
    with tf.Session() as sess:
        with pytest.raises(tf.errors.UnknownError, match="KeyError: 'missing'") as info:
            sess.run(tf.py_func(f, [x], tf.float32), {x: np.ones(2, np.float32)})
        assert isinstance(info.value.__cause__, KeyError)
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"0-th value returned by pyfunc_\d+ is double, but expects "
                                 "float"):
            sess.run(tf.py_func(lambda a: 1.0, [x], tf.float32), {x: np.ones(2, np.float32)})
        with pytest.raises(tf.errors.OutOfRangeError):
            sess.run(tf.numpy_function(_stop, [x], tf.float32), {x: np.ones(2, np.float32)})


def _stop(a):
    raise StopIteration


def test_py_func_with_no_outputs_is_an_op_for_control_dependencies():
    seen = []
    x = tf.placeholder(tf.int32, [])
    side = tf.py_func(lambda v: seen.append(int(v)), [x], [])
    with tf.control_dependencies([side]):
        y = tf.identity(x)
    with tf.Session() as sess:
        assert sess.run(y, {x: 7}) == 7
    assert isinstance(side, tf.Operation) and seen == [7]


def test_py_func_from_concurrent_runs():
    x = tf.placeholder(tf.float32, [])
    y = tf.py_func(lambda v: (v + threading.get_ident() * 0).astype(np.float32), [x],
                   tf.float32)
    out, errors = [], []
    sess = tf.Session()

    def worker(i: int) -> None:
        try:
            out.append(float(sess.run(y, {x: float(i)})))
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    sess.close()
    assert errors == [] and sorted(out) == [float(i) for i in range(8)]


def test_py_func_refuses_a_non_callable():
    with pytest.raises(TypeError, match="func must be callable"):
        tf.py_func(3, [], tf.float32)
