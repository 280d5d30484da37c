"""tf.data: pipelines in sessions, iterators, the end of input, and an iterator's position
saved in real checkpoint files and restored (a restarted trainer gets the same next batch)."""

from __future__ import annotations

import numpy as np
import pytest

import ckptsync as tf
from ckptsync.data import load_digits

tf_data = tf.data


def _all(sess, nxt, limit=1000):
    out = []
    for _ in range(limit):
        try:
            out.append(sess.run(nxt))
        except tf.errors.OutOfRangeError:
            return out
    raise AssertionError("no end of sequence")


def test_loaders_return_labeled_data_and_dataset_is_tfs():
    assert type(load_digits()).__name__ == "LabeledData"
    assert tf.data.Dataset.range(3).output_types == tf.int64


def test_pipeline_order_and_end_of_sequence():
    with tf.Graph().as_default():
        ds = (tf_data.Dataset.range(20).filter(lambda x: tf.equal(x % 2, 0)).map(lambda x: x * 10)
              .skip(1).take(6).batch(4))
        nxt = tf_data.make_one_shot_iterator(ds).get_next()
        with tf.Session() as sess:
            got = [v.tolist() for v in _all(sess, nxt)]
    assert got == [[20, 40, 60, 80], [100, 120]]


def test_shuffle_seeded_is_deterministic_reshuffled_each_epoch_and_a_permutation():
    def epochs():
        with tf.Graph().as_default():
            ds = tf_data.Dataset.range(10).shuffle(10, seed=7).repeat(3).batch(10)
            nxt = ds.make_one_shot_iterator().get_next()
            with tf.Session() as sess:
                return [v.tolist() for v in _all(sess, nxt)]

    a, b = epochs(), epochs()
    assert a == b and len(a) == 3
    assert all(sorted(e) == list(range(10)) for e in a)
    assert a[0] != a[1] or a[1] != a[2]


def test_initializable_iterator_fed_placeholder_and_reinitialize():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 2])
        it = tf_data.Dataset.from_tensor_slices(x).batch(2).make_initializable_iterator()
        nxt = it.get_next()
        assert nxt.shape.as_list() == [None, 2]
        with tf.Session() as sess:
            with pytest.raises(tf.errors.FailedPreconditionError):
                sess.run(nxt)
            sess.run(it.initializer, {x: np.ones((3, 2), np.float32)})
            assert [v.shape for v in _all(sess, nxt)] == [(2, 2), (1, 2)]
            sess.run(it.initializer, {x: np.zeros((1, 2), np.float32)})
            assert len(_all(sess, nxt)) == 1


def test_one_shot_iterator_refuses_a_placeholder():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None])
        with pytest.raises(ValueError, match="Cannot capture a placeholder"):
            tf_data.make_one_shot_iterator(tf_data.Dataset.from_tensor_slices(x))


def test_reinitializable_iterator_from_structure():
    with tf.Graph().as_default():
        a = tf_data.Dataset.range(3)
        b = tf_data.Dataset.range(10, 12)
        it = tf_data.Iterator.from_structure(a.output_types, a.output_shapes)
        nxt = it.get_next()
        ia, ib = it.make_initializer(a), it.make_initializer(b)
        with tf.Session() as sess:
            sess.run(ia)
            assert [int(v) for v in _all(sess, nxt)] == [0, 1, 2]
            sess.run(ib)
            assert [int(v) for v in _all(sess, nxt)] == [10, 11]


def _digits_graph(batch=32, seed=3):
    data = load_digits()
    x_all = tf.placeholder(tf.float32, [None, 64], name="x_all")
    y_all = tf.placeholder(tf.int64, [None], name="y_all")
    ds = (tf_data.Dataset.from_tensor_slices({"x": x_all, "y": y_all})
          .shuffle(500, seed=seed).repeat().batch(batch, drop_remainder=True).prefetch(1))
    it = ds.make_initializable_iterator()
    tf.add_to_collection(tf.GraphKeys.SAVEABLE_OBJECTS,
                         tf_data.experimental.make_saveable_from_iterator(it))
    el = it.get_next()
    assert el["x"].shape.as_list() == [batch, 64]
    w = tf.get_variable("w", [64, 10], initializer=tf.zeros_initializer())
    b = tf.get_variable("b", [10], initializer=tf.zeros_initializer())
    logits = tf.matmul(el["x"], w) + b
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=el["y"], logits=logits))
    step = tf.train.get_or_create_global_step()
    train = tf.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=step)
    feed = {x_all: data.train["x"], y_all: data.train["y"]}
    return it, el, loss, train, feed


def test_training_loop_over_digits_and_position_restored_from_a_checkpoint(tmp_path):
    # Uninterrupted: 12 steps, recording the labels of each batch.
    with tf.Graph().as_default():
        it, el, loss, train, feed = _digits_graph()
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(it.initializer, feed)
            ref, losses = [], []
            for _ in range(12):
                y, lv, _ = sess.run([el["y"], loss, train])
                ref.append(y)
                losses.append(lv)
    assert np.mean(losses[-3:]) < losses[0]
    # Interrupted after 5 steps: a checkpoint, then a new process-like restart.
    prefix = str(tmp_path / "model.ckpt")
    with tf.Graph().as_default():
        it, el, loss, train, feed = _digits_graph()
        saver = tf.train.Saver()
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(it.initializer, feed)
            for i in range(5):
                y, _ = sess.run([el["y"], train])
                np.testing.assert_array_equal(y, ref[i])
            path = saver.save(sess, prefix, global_step=5)
    assert "IteratorV2_STATE" in tf.train.list_variables(str(tmp_path))[0] or any(
        k == "IteratorV2_STATE" for k, _ in tf.train.list_variables(str(tmp_path)))
    with tf.Graph().as_default():
        it, el, loss, train, feed = _digits_graph()
        saver = tf.train.Saver()
        with tf.Session() as sess:
            sess.run(it.initializer, feed)
            saver.restore(sess, path)
            for i in range(5, 12):
                y, _ = sess.run([el["y"], train])
                np.testing.assert_array_equal(y, ref[i])
    # Restored before the initializer ran (MonitoredSession's order): resumes on init.
    with tf.Graph().as_default():
        it, el, loss, train, feed = _digits_graph()
        scaffold = tf.train.Scaffold(local_init_op=it.initializer, init_feed_dict=None)
        with tf.Session() as sess:
            tf.train.Saver().restore(sess, path)
            sess.run(it.initializer, feed)
            np.testing.assert_array_equal(sess.run(el["y"]), ref[5])
        del scaffold


def test_monitored_session_stops_cleanly_at_the_end_of_input(tmp_path):
    with tf.Graph().as_default():
        ds = tf_data.Dataset.from_tensor_slices(np.arange(10, dtype=np.float32)).batch(4)
        nxt = ds.make_one_shot_iterator().get_next()
        tf.train.get_or_create_global_step()
        seen = []
        with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path)) as sess:
            while not sess.should_stop():
                seen.append(sess.run(nxt).tolist())
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_state_of_a_mapped_padded_cached_pipeline_round_trips():
    with tf.Graph().as_default():
        ds = (tf_data.Dataset.range(1, 7).map(lambda n: tf.fill(tf.cast(n, tf.int32)[None], n))
              .cache().repeat(2).padded_batch(3, padded_shapes=[None]))
        it = ds.make_one_shot_iterator()
        nxt = it.get_next()
        saveable = tf_data.experimental.make_saveable_from_iterator(it)
        with tf.Session() as sess:
            first = sess.run(nxt)
            assert first.tolist() == [[1, 0, 0], [2, 2, 0], [3, 3, 3]]
            state = saveable.save_value(sess)
            rest = [v.tolist() for v in _all(sess, nxt)]
            saveable.restore_value(sess, state)
            assert [v.tolist() for v in _all(sess, nxt)] == rest
    assert len(rest) == 3


def _digits_one_shot():
    data = load_digits()
    ds = (tf_data.Dataset.from_tensor_slices((data.train["x"], data.train["y"]))
          .shuffle(200, seed=11).repeat().batch(16))
    it = tf_data.make_one_shot_iterator(ds)
    tf.add_to_collection(tf.GraphKeys.SAVEABLE_OBJECTS,
                         tf_data.experimental.make_saveable_from_iterator(it))
    x, y = it.get_next()
    w = tf.get_variable("w", [64, 10], initializer=tf.zeros_initializer())
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=tf.matmul(x, w)))
    step = tf.train.get_or_create_global_step()
    return y, tf.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=step)


def test_monitored_training_session_restart_continues_with_the_next_batch(tmp_path):
    with tf.Graph().as_default():
        y, train = _digits_one_shot()
        with tf.train.MonitoredTrainingSession() as sess:
            ref = [sess.run([y, train])[0] for _ in range(10)]
    ckpts = str(tmp_path / "ckpts")
    with tf.Graph().as_default():
        y, train = _digits_one_shot()
        with tf.train.MonitoredTrainingSession(checkpoint_dir=ckpts,
                                               save_checkpoint_steps=100) as sess:
            for i in range(6):
                np.testing.assert_array_equal(sess.run([y, train])[0], ref[i])
    assert tf.train.latest_checkpoint(ckpts).endswith("-6")
    with tf.Graph().as_default():
        y, train = _digits_one_shot()
        with tf.train.MonitoredTrainingSession(checkpoint_dir=ckpts) as sess:
            for i in range(6, 10):
                np.testing.assert_array_equal(sess.run([y, train])[0], ref[i])


def test_state_of_flat_map_unbatch_and_generator_round_trips():
    def gen():
        yield from range(7)

    with tf.Graph().as_default():
        a = tf_data.Dataset.range(1, 5).flat_map(lambda n: tf_data.Dataset.range(n))
        b = tf_data.Dataset.from_generator(gen, tf.int64, []).batch(3).unbatch()
        c = tf_data.Dataset.range(3).interleave(
            lambda n: tf_data.Dataset.range(n * 10, n * 10 + 3), cycle_length=2, block_length=2)
        b = tf_data.Dataset.zip((b, c)).map(lambda u, v: u * 1000 + v)
        it = tf_data.make_one_shot_iterator(tf_data.Dataset.zip((a, b)))
        nxt = it.get_next()
        saveable = tf_data.experimental.make_saveable_from_iterator(it)
        with tf.Session() as sess:
            for _ in range(4):
                sess.run(nxt)
            state = saveable.save_value(sess)
            rest = [tuple(int(v) for v in e) for e in _all(sess, nxt)]
            saveable.restore_value(sess, state)
            assert [tuple(int(v) for v in e) for e in _all(sess, nxt)] == rest
    assert rest == [(1, 4002), (2, 5012), (0, 6020)]


def _range_pipeline_saved_at_12(tmp_path):
    with tf.Graph().as_default():
        it = tf_data.Dataset.range(100).batch(4).make_initializable_iterator()
        tf.add_to_collection(tf.GraphKeys.SAVEABLE_OBJECTS,
                             tf_data.experimental.make_saveable_from_iterator(it))
        nxt, saver = it.get_next(), tf.train.Saver()
        with tf.Session() as sess:
            sess.run(it.initializer)
            assert [sess.run(nxt).tolist() for _ in range(3)][-1] == [8, 9, 10, 11]
            return saver.save(sess, str(tmp_path / "it"))


@pytest.mark.parametrize("kind,make", [
    ("Range -> Map -> Batch, elements (int64[?], int64[?])",
     lambda: tf_data.Dataset.range(100).map(lambda x: (x, x)).batch(4)),
    ("Range -> Map -> Batch, elements float32[?]",
     lambda: tf_data.Dataset.range(100).map(lambda x: tf.cast(x, tf.float32)).batch(4)),
    ("Range -> Filter -> Batch, elements int64[?]",
     lambda: tf_data.Dataset.range(100).filter(lambda x: x > 50).batch(4)),
    ("Range -> Shuffle -> Batch, elements int64[?]",
     lambda: tf_data.Dataset.range(100).shuffle(10).batch(4)),
])
@pytest.mark.parametrize("initialize_first", [True, False])
def test_iterator_state_is_refused_by_another_pipeline_naming_both(tmp_path, kind, make,
                                                                    initialize_first):
    path = _range_pipeline_saved_at_12(tmp_path)
    with tf.Graph().as_default():
        it = make().make_initializable_iterator()
        tf.add_to_collection(tf.GraphKeys.SAVEABLE_OBJECTS,
                             tf_data.experimental.make_saveable_from_iterator(it))
        saver = tf.train.Saver()
        with tf.Session() as sess:
            # as TF1 (NotFoundError: the saved state's keys are another chain's)
            with pytest.raises(tf.errors.NotFoundError) as info:
                if initialize_first:
                    sess.run(it.initializer)
                    saver.restore(sess, path)
                else:  # applied when the initializer runs
                    saver.restore(sess, path)
                    sess.run(it.initializer)
    message = str(info.value)
    assert "iterator state for IteratorV2" in message
    assert "saved from the input pipeline Range -> Batch, elements int64[?]" in message
    assert f"cannot be restored into {kind}" in message


def test_iterator_state_restores_into_the_same_pipeline(tmp_path):
    path = _range_pipeline_saved_at_12(tmp_path)
    with tf.Graph().as_default():
        it = tf_data.Dataset.range(100).batch(4).make_initializable_iterator()
        tf.add_to_collection(tf.GraphKeys.SAVEABLE_OBJECTS,
                             tf_data.experimental.make_saveable_from_iterator(it))
        nxt, saver = it.get_next(), tf.train.Saver()
        with tf.Session() as sess:
            sess.run(it.initializer)
            saver.restore(sess, path)
            assert sess.run(nxt).tolist() == [12, 13, 14, 15]
