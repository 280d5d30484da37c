"""TF 1.15 names a TF1 program uses: the hooks under ``tf.estimator`` (the very classes
of ``tf.train``, as TF's), ``tf.train.FeedFnHook`` / ``GlobalStepWaiterHook``,
``tf.OpError``, ``tf.train.Optimizer.GATE_*``, ``tf.train.summary_iterator`` and
integer ``tf.random_uniform``."""

from __future__ import annotations

import numpy as np
import pytest

import ckptsync as tf

# What TF 2.15's tf.compat.v1.estimator has of the hooks (ProfilerHook: no profiler here).
ESTIMATOR_HOOKS = ["CheckpointSaverHook", "CheckpointSaverListener", "FeedFnHook",
                   "FinalOpsHook", "GlobalStepWaiterHook", "LoggingTensorHook",
                   "NanTensorHook", "SessionRunArgs", "SessionRunContext", "SessionRunHook",
                   "SessionRunValues", "StepCounterHook", "StopAtStepHook",
                   "SummarySaverHook"]


@pytest.fixture(autouse=True)
def _graph():
    tf.reset_default_graph()
    yield


@pytest.mark.parametrize("name", ESTIMATOR_HOOKS)
def test_estimator_has_trains_hook_classes(name):
    assert getattr(tf.estimator, name) is getattr(tf.train, name)


def test_op_error_and_gate_constants_as_tf1():
    assert tf.OpError is tf.errors.OpError
    assert issubclass(tf.errors.OutOfRangeError, tf.OpError)
    assert (tf.train.Optimizer.GATE_NONE, tf.train.Optimizer.GATE_OP,
            tf.train.Optimizer.GATE_GRAPH) == (0, 1, 2)
    x = tf.get_variable("x", initializer=2.0)
    opt = tf.train.GradientDescentOptimizer(0.5)
    train = opt.minimize(tf.square(x), gate_gradients=opt.GATE_NONE)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train)
        assert float(sess.run(x)) == pytest.approx(0.0)


def test_integer_random_uniform_as_tf1():
    tf.set_random_seed(3)
    a = tf.random_uniform([2000], maxval=5, dtype=tf.int32)
    b = tf.random_uniform([4, 3], minval=-3, maxval=3, dtype=tf.int64)
    assert a.dtype == tf.int32 and a.shape.as_list() == [2000] and b.dtype == tf.int64
    with tf.Session() as sess:
        va, vb = sess.run([a, b])
    assert va.dtype == np.int32 and set(np.unique(va)) == {0, 1, 2, 3, 4}
    assert vb.dtype == np.int64 and vb.min() >= -3 and vb.max() < 3
    with pytest.raises(ValueError, match="Must specify maxval for integer dtype tf.int32"):
        tf.random_uniform([2], dtype=tf.int32)
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError,
                                             match="Need minval < maxval: 5 >= 5"):
        sess.run(tf.random_uniform([2], minval=5, maxval=5, dtype=tf.int32))
    with pytest.raises(ValueError, match="floating"):
        tf.random_uniform([2], maxval=3, dtype=tf.bool)


def test_feed_fn_hook_feeds_every_run():
    x = tf.placeholder(tf.float32, [])
    y = x * 10
    fed = iter([1.0, 2.0, 3.0])
    hook = tf.train.FeedFnHook(lambda: {x: next(fed)})
    with tf.train.MonitoredSession(hooks=[hook]) as sess:
        assert [float(sess.run(y)) for _ in range(3)] == [10.0, 20.0, 30.0]


def test_global_step_waiter_hook_starts_once_the_step_is_reached():
    gs = tf.train.get_or_create_global_step()
    inc = tf.assign_add(gs, 1)
    with tf.train.MonitoredSession(hooks=[tf.train.GlobalStepWaiterHook(0)]) as sess:
        assert int(sess.run(inc)) == 1
    tf.reset_default_graph()
    with pytest.raises(RuntimeError, match="Global step should be created"):
        tf.train.GlobalStepWaiterHook(3).begin()


def test_summary_iterator_yields_the_events_of_a_file(tmp_path):
    w = tf.summary.FileWriter(str(tmp_path))
    for step, v in ((1, 0.5), (2, 0.25)):
        w.add_summary(tf.Summary(value=[tf.Summary.Value(tag="loss", simple_value=v)]), step)
    w.close()
    (path,) = tmp_path.glob("events.out.tfevents.*")
    events = list(tf.train.summary_iterator(str(path)))
    assert events[0].file_version.startswith("brain.Event:")
    assert [(e.step, e.summary.value[0].tag, e.summary.value[0].simple_value)
            for e in events if e.HasField("summary")] == [(1, "loss", 0.5), (2, "loss", 0.25)]
    with pytest.raises(tf.errors.NotFoundError):
        next(tf.train.summary_iterator(str(tmp_path / "missing")))
