"""``SummarySaverHook`` and ``MonitoredTrainingSession(summary_dir=...)``: event files
read back with TensorBoard's ``EventAccumulator``, as TF1 writes them."""

from __future__ import annotations

import pytest

import ckptsync as tf

EventAccumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator").EventAccumulator


def _model():
    gs = tf.train.get_or_create_global_step()
    w = tf.get_variable("w", [], initializer=tf.constant_initializer(1.0))
    loss = tf.square(w)
    tf.summary.scalar("loss", loss)
    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
    return gs, train


def _scalars(logdir, tag="loss"):
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return acc, [e.step for e in acc.Scalars(tag)]


def test_hook_every_n_steps(tmp_path):
    gs, train = _model()
    hook = tf.train.SummarySaverHook(save_steps=3, output_dir=str(tmp_path),
                                     summary_op=tf.summary.merge_all())
    with tf.train.MonitoredSession(hooks=[hook]) as sess:
        for _ in range(10):
            sess.run(train)
    acc, steps = _scalars(tmp_path)
    assert steps == [1, 4, 7, 10]
    assert acc.Tags()["graph"]


def test_hook_with_writer_and_scaffold_and_errors(tmp_path):
    with pytest.raises(ValueError, match="Exactly one of scaffold or summary_op"):
        tf.train.SummarySaverHook(save_steps=1)
    with pytest.raises(ValueError):
        tf.train.SummarySaverHook(summary_op=tf.constant(1.0))
    gs, train = _model()
    writer = tf.summary.FileWriter(str(tmp_path))
    scaffold = tf.train.Scaffold()
    hook = tf.train.SummarySaverHook(save_steps=2, summary_writer=writer, scaffold=scaffold)
    with tf.train.MonitoredSession(tf.train.ChiefSessionCreator(scaffold=scaffold),
                                   hooks=[hook]) as sess:
        for _ in range(4):
            sess.run(train)
    assert scaffold.summary_op is not None
    assert tf.get_collection(tf.GraphKeys.SUMMARY_OP) == [scaffold.summary_op]
    writer.close()
    assert _scalars(tmp_path)[1] == [1, 3]


def test_hook_needs_a_global_step():
    tf.summary.scalar("x", 1.0)
    hook = tf.train.SummarySaverHook(save_steps=1, summary_op=tf.summary.merge_all())
    with pytest.raises(RuntimeError, match="Global step"):
        hook.begin()


def test_monitored_training_session_summary_dir(tmp_path):
    gs, train = _model()
    logdir = tmp_path / "logs"
    with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path / "ckpt"),
                                           summary_dir=str(logdir),
                                           save_summaries_steps=5,
                                           save_checkpoint_secs=None) as sess:
        for _ in range(11):
            sess.run(train)
    acc, steps = _scalars(logdir)
    assert steps == [1, 6, 11]
    assert acc.Scalars("loss")[0].value == pytest.approx(1.0)
    # StepCounterHook (log_step_count_steps=100) had no second trigger in 11 steps.
    assert "global_step/sec" not in acc.Tags()["scalars"]
    assert not list((tmp_path / "ckpt").glob("events.out.tfevents.*"))


def test_monitored_training_session_without_summary_dir_writes_to_checkpoint_dir(tmp_path):
    """As TF1: ``summary_dir`` None falls back to ``checkpoint_dir`` (summaries and
    ``global_step/sec``)."""
    gs, train = _model()
    ckpt = tmp_path / "ckpt"
    with tf.train.MonitoredTrainingSession(checkpoint_dir=str(ckpt), save_summaries_steps=5,
                                           log_step_count_steps=5,
                                           save_checkpoint_secs=None) as sess:
        for _ in range(11):
            sess.run(train)
    acc, steps = _scalars(ckpt)
    assert steps == [1, 6, 11]
    assert [e.step for e in acc.Scalars("global_step/sec")] == [6, 11]


def test_step_counter_hook_writes_global_step_per_sec(tmp_path):
    """As TF1: first trigger at step 1 (no figure yet), then at 3, 5, 7."""
    gs, train = _model()
    hook = tf.train.StepCounterHook(every_n_steps=2, output_dir=str(tmp_path))
    with tf.train.MonitoredSession(hooks=[hook]) as sess:
        for _ in range(7):
            sess.run(train)
    acc, steps = _scalars(tmp_path, "global_step/sec")
    assert steps == [3, 5, 7] and all(e.value > 0 for e in acc.Scalars("global_step/sec"))


def test_hooks_of_one_directory_share_one_event_file(tmp_path):
    """As TF1 (SummaryWriterCache): the summary and step-counter hooks of two sessions in
    one process write one event file, so TensorBoard's loader keeps every event."""
    gs, train = _model()
    logdir = tmp_path / "logs"
    for _ in range(2):
        with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path / "ckpt"),
                                               summary_dir=str(logdir),
                                               save_summaries_steps=2,
                                               log_step_count_steps=2,
                                               save_checkpoint_steps=5) as sess:
            for _ in range(5):
                sess.run(train)
    assert len(list(logdir.glob("events.out.tfevents.*"))) == 1
    acc, steps = _scalars(logdir)
    assert steps == [1, 3, 5, 6, 8, 10]
    assert [e.step for e in acc.Scalars("global_step/sec")] == [3, 5, 8, 10]


def test_a_closed_cached_writer_is_reopened(tmp_path):
    a = tf.summary.FileWriterCache.get(str(tmp_path))
    a.close()
    b = tf.summary.FileWriterCache.get(str(tmp_path))
    b.add_summary(tf.Summary(value=[tf.Summary.Value(tag="x", simple_value=2.0)]), 1)
    b.flush()
    assert [e.value for e in _scalars(tmp_path, "x")[0].Scalars("x")] == [2.0]
