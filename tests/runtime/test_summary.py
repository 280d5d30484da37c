"""``cs.summary``: summary ops as TF1 names and fills them, event files written through
tensorboard's writer and read back with TensorBoard's own ``EventAccumulator``.

Reference values (histogram buckets, image pixels) were recorded from TensorFlow 2.21's
``tf.compat.v1`` into ``summary_tf_reference.json``.
"""

from __future__ import annotations

import glob
import io
import json
import os
import pathlib

import numpy as np
import pytest

import ckptsync as tf

EventAccumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator").EventAccumulator
REF = json.loads((pathlib.Path(__file__).parent / "summary_tf_reference.json").read_text())


def _accumulate(logdir: str) -> EventAccumulator:
    acc = EventAccumulator(str(logdir), size_guidance={"images": 0, "tensors": 0,
                                                       "histograms": 0, "scalars": 0})
    acc.Reload()
    return acc


def test_names_tags_and_collection_as_tf1():
    x = tf.constant(3.0)
    s1 = tf.summary.scalar("loss", x)
    with tf.name_scope("foo"):
        s2 = tf.summary.scalar("acc", x)
        s3 = tf.summary.scalar("acc", x, family="fam")
    s4 = tf.summary.scalar("l2", x, family="fam")
    s5 = tf.summary.scalar("loss", x)
    h = tf.summary.histogram("w", [1.0])
    im = tf.summary.image("img", tf.zeros([2, 4, 5, 3]))
    t = tf.summary.text("note", tf.constant("hello"))
    m = tf.summary.merge([s1, s2])
    names = [(o.op.name, o.op.type) for o in (s1, s2, s3, s4, s5, h, im, t, m)]
    assert names == [("loss", "ScalarSummary"), ("foo/acc", "ScalarSummary"),
                     ("foo/fam/acc", "ScalarSummary"), ("fam/l2", "ScalarSummary"),
                     ("loss_1", "ScalarSummary"), ("w", "HistogramSummary"),
                     ("img", "ImageSummary"), ("note", "TensorSummaryV2"),
                     ("Merge/MergeSummary", "MergeSummary")]
    assert all(o.dtype == tf.string and o.shape.as_list() == [] for o, _ in
               zip((s1, s2, m), range(3)))
    assert tf.get_collection(tf.GraphKeys.SUMMARIES) == [s1, s2, s3, s4, s5, h, im, t]
    with tf.Session() as sess:
        tags = [v.tag for v in tf.Summary.FromString(
            sess.run(tf.summary.merge([s1, s2, s3, s4, s5]))).value]
    assert tags == ["loss", "foo/acc", "fam/foo/fam/acc", "fam/fam/l2", "loss_1"]


def test_collections_argument_and_merge_all():
    assert tf.summary.merge_all() is None
    tf.summary.scalar("a", 1.0, collections=["mine"])
    tf.summary.scalar("b", 2, collections=[])
    assert tf.get_collection(tf.GraphKeys.SUMMARIES) == []
    m = tf.summary.merge_all("mine")
    with tf.Session() as sess:
        s = tf.Summary.FromString(sess.run(m))
    assert [(v.tag, v.simple_value) for v in s.value] == [("a", 1.0)]


@pytest.mark.parametrize("key", ["w", "e", "r"])
def test_histogram_matches_tf(key):
    if key == "w":
        values = tf.constant([0.0, 1.0, 1.5, -2.0, 1e-13, 3.0], tf.float64)
    elif key == "e":
        values = tf.zeros([0])
    else:
        values = tf.constant(np.random.RandomState(1).randn(1000).astype(np.float32) * 10)
    op = tf.summary.histogram(key, values)
    with tf.Session() as sess:
        histo = tf.Summary.FromString(sess.run(op)).value[0].histo
    ref = REF[key]
    for field in ("min", "max", "num", "sum", "sum_squares"):
        assert getattr(histo, field) == ref[field], field
    assert list(histo.bucket_limit) == ref["bucket_limit"]
    assert list(histo.bucket) == ref["bucket"]


def test_histogram_nan_and_merge_duplicates_raise_as_tf1():
    bad = tf.summary.histogram("bad", tf.constant([np.nan]))
    s = tf.summary.scalar("loss", 1.0)
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError, match="Nan in summary histogram for: bad"):
            sess.run(bad)
        with pytest.raises(tf.errors.InvalidArgumentError, match="Duplicate tag loss"):
            sess.run(tf.summary.merge([s, s]))
        with pytest.raises(tf.errors.InvalidArgumentError, match="not the same shape"):
            sess.run(tf.summary.scalar("v", tf.constant([1.0, 2.0])))
    with pytest.raises(TypeError):
        tf.summary.scalar("s", tf.constant([True]))
    with pytest.raises(ValueError, match="dtype string"):
        tf.summary.text("t", tf.constant(1.0))
    with pytest.raises(ValueError, match="height, width"):
        tf.summary.image("i", tf.zeros([4, 5, 3]))


@pytest.mark.parametrize("key", ["f", "p", "u", "n"])
def test_image_pixels_match_tf(key):
    """Float images scaled as TF1 (all >= 0; mixed signs; a NaN pixel red), uint8 as is."""
    from PIL import Image

    raw = np.array(REF[f"img{key}"], dtype=object)
    data = np.where(raw == None, np.nan, raw).astype(  # noqa: E711 - JSON null is NaN
        np.uint8 if key == "u" else np.float32)
    op = tf.summary.image(key, data)
    with tf.Session() as sess:
        values = tf.Summary.FromString(sess.run(op)).value
    ref = REF[f"img_{key}"]
    assert [v.tag for v in values] == [r["tag"] for r in ref]
    for v, r in zip(values, ref):
        assert (v.image.height, v.image.width, v.image.colorspace) == (r["h"], r["w"], r["c"])
        pixels = np.array(Image.open(io.BytesIO(v.image.encoded_image_string)))
        np.testing.assert_array_equal(pixels.reshape(np.shape(r["pixels"])), r["pixels"])


def test_file_writer_round_trip_read_by_tensorboard(tmp_path):
    step = tf.placeholder(tf.float32, [])
    with tf.name_scope("train"):
        tf.summary.scalar("loss", step * 2.0)
    tf.summary.histogram("weights", tf.random_normal([100], seed=1) + step)
    tf.summary.image("picture", tf.ones([1, 2, 3, 1]) * step, max_outputs=1)
    tf.summary.text("note", tf.constant(["a", "bc"]))
    merged = tf.summary.merge_all()
    with tf.summary.FileWriter(str(tmp_path), graph=tf.get_default_graph()) as w:
        with tf.Session() as sess:
            for i in range(3):
                w.add_summary(sess.run(merged, {step: float(i)}), global_step=i)
        assert w.get_logdir() == str(tmp_path)
    files = glob.glob(os.path.join(tmp_path, "events.out.tfevents.*"))
    assert len(files) == 1
    acc = _accumulate(str(tmp_path))
    tags = acc.Tags()
    assert tags["scalars"] == ["train/loss"] and tags["histograms"] == ["weights"]
    assert tags["images"] == ["picture/image"] and tags["tensors"] == ["note"]
    assert tags["graph"] and tags["meta_graph"]
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(0, 0.0), (1, 2.0), (2, 4.0)]
    assert [e.histogram_value.num for e in acc.Histograms("weights")] == [100.0] * 3
    assert [e.step for e in acc.Images("picture/image")] == [0, 1, 2]
    assert list(acc.Tensors("note")[0].tensor_proto.string_val) == [b"a", b"bc"]
    nodes = {n.name: n for n in acc.Graph().node}
    assert nodes["train/loss"].op == "ScalarSummary"
    assert nodes["train/mul"].input[0] == "Placeholder" and len(nodes["train/mul"].input) == 2


def test_file_writer_events_session_log_close_and_reopen(tmp_path):
    w = tf.summary.FileWriter(str(tmp_path), filename_suffix=".first")
    w.add_session_log(tf.SessionLog(status=tf.SessionLog.START), 1)
    s = tf.Summary(value=[tf.Summary.Value(tag="x", simple_value=5.0)])
    w.add_summary(s, 1)
    w.add_summary(s.SerializeToString(), 2)
    w.close()
    w.add_summary(s, 3)  # dropped once closed, as TF1
    w.reopen()
    w.add_summary(s, 4)
    w.flush()
    w.close()
    assert len(glob.glob(os.path.join(tmp_path, "events.out.tfevents.*"))) == 2
    assert glob.glob(os.path.join(tmp_path, "*.first"))
    acc = _accumulate(str(tmp_path))
    assert [(e.step, e.value) for e in acc.Scalars("x")] == [(1, 5.0), (2, 5.0), (4, 5.0)]


def test_file_writer_makes_a_new_file_when_its_directory_was_deleted(tmp_path):
    # As TF's EventsWriter (FileStillExists): the event file gone, the next write makes
    # the directory and a new file instead of failing.
    import shutil
    logdir = tmp_path / "d"
    w = tf.summary.FileWriter(str(logdir))
    s = tf.Summary(value=[tf.Summary.Value(tag="x", simple_value=1.0)])
    w.add_summary(s, 1)
    w.flush()
    old = set(glob.glob(os.path.join(logdir, "events.out.tfevents.*")))
    shutil.rmtree(logdir)
    w.add_summary(s, 2)
    w.flush()
    shutil.rmtree(logdir)
    w.flush()  # a flush alone also notices
    w.add_summary(s, 3)
    w.close()
    new = set(glob.glob(os.path.join(logdir, "events.out.tfevents.*")))
    assert new and not new & old
    assert [e.step for e in _accumulate(str(logdir)).Scalars("x")] == [3]


def test_writer_thread_failing_on_a_deleted_file_is_a_warning_then_recovers(tmp_path, caplog):
    # tensorboard's writer thread dies when its timed flush finds the file gone: that is
    # one warning (no traceback), and the next write goes to a new file.
    import shutil
    import threading
    logdir = tmp_path / "d"
    w = tf.summary.FileWriter(str(logdir), flush_secs=0.5)
    s = tf.Summary(value=[tf.Summary.Value(tag="x", simple_value=1.0)])
    with caplog.at_level("WARNING", logger="ckptsync"):
        w.add_summary(s, 1)
        for _ in range(100):  # the writer's timed flush may write a file in mid-rmtree
            shutil.rmtree(logdir, ignore_errors=True)
            if not logdir.exists():
                break
        assert not logdir.exists()
        # An event already handed to tensorboard's writer when the directory went (the
        # race a FileWriter cannot see): its thread's timed flush fails.
        try:
            w._writer.add_event(tf.Event(step=1, summary=s))
        except OSError:
            pass  # the thread had died on the first one already
        worker = w._writer._async_writer._worker
        worker.join(timeout=30)
        assert not worker.is_alive()
        assert threading.excepthook.__name__ == "hook"
    assert "Event writer thread stopped" in caplog.text
    w.add_summary(s, 2)
    w.close()
    assert [e.step for e in _accumulate(str(logdir)).Scalars("x")] == [2]


@pytest.mark.parametrize("sub", ["", "/sub/dir"])
def test_file_writer_on_a_file_raises_failed_precondition_as_tf(tmp_path, sub):
    f = tmp_path / "file"
    f.write_text("x")
    # TF 2.21: FailedPreconditionError "<file> is not a directory", also for a path below.
    with pytest.raises(tf.errors.FailedPreconditionError, match=f"^{f} is not a directory$"):
        tf.summary.FileWriter(str(f) + sub)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(tf.errors.FailedPreconditionError, match=f"^{fifo} is not a directory$"):
        tf.summary.FileWriter(str(fifo) + sub)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_file_writer_in_an_unwritable_directory_names_it(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(tf.errors.PermissionDeniedError, match=str(ro)):
        tf.summary.FileWriter(str(ro))


def test_write_or_warn_warns_once_per_cause_and_goes_on(caplog):
    from ckptsync.summary.writer import write_or_warn

    def fail():
        raise OSError(28, "No space left on device")

    with caplog.at_level("WARNING", logger="ckptsync"):
        assert write_or_warn(fail) is False
        assert write_or_warn(fail) is False
        assert write_or_warn(lambda: None) is True
    assert caplog.text.count("No space left on device") == 1


def test_file_writer_cache_shares_and_clears(tmp_path):
    a = tf.summary.FileWriterCache.get(str(tmp_path))
    assert tf.summary.FileWriterCache.get(str(tmp_path) + "/") is a
    tf.summary.FileWriterCache.clear()
    b = tf.summary.FileWriterCache.get(str(tmp_path))
    assert b is not a
    tf.summary.FileWriterCache.clear()


def test_string_constants():
    c = tf.constant([["a", "b"]])
    assert c.dtype == tf.string and c.shape.as_list() == [1, 2]
    assert tf.as_dtype("string") == tf.string and tf.string.name == "string"
    with tf.Session() as sess:
        assert sess.run(c).tolist() == [[b"a", b"b"]]
