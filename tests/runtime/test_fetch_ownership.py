"""``Session.run`` returns arrays of the caller's own, as TF1: writing into a fetched value
changes no variable, constant, feed or data set, whichever way it was fetched (the
variable itself, a view of it, an update's result), and a variable updated in place
afterwards does not change a value fetched before."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ckptsync as cs


def _graph() -> tuple[Any, dict[str, Any]]:
    g = cs.Graph()
    with g.as_default():
        t = cs.Variable(np.zeros((4, 2), np.float32), name="t")
        c = cs.constant(np.arange(6, dtype=np.float32).reshape(3, 2), name="c")
        x = cs.placeholder(cs.float32, [None, 2], name="x")
        ops = {
            "t": t, "c": c, "x": x,
            "identity": cs.identity(t), "reshape": cs.reshape(t, [8]), "slice": t[1:3],
            "transpose": cs.transpose(t), "c_view": cs.reshape(c, [6]),
            "scatter": cs.scatter_add(t, [1], [[1.0, 1.0]]),
            "assign_add": t.assign_add(np.ones((4, 2), np.float32)),
            "next": cs.data.Dataset.from_tensor_slices(
                np.ones((5, 2), np.float32)).batch(5).make_one_shot_iterator().get_next(),
        }
        ops["init"] = cs.global_variables_initializer()
    return g, ops


@pytest.mark.parametrize("fetch", ["t", "identity", "reshape", "slice", "transpose",
                                   "scatter", "assign_add"])
def test_writing_into_a_fetched_variable_value_leaves_the_variable_alone(fetch: str) -> None:
    g, ops = _graph()
    with cs.Session(graph=g) as sess:
        sess.run(ops["init"])
        sess.run(ops["scatter"])  # the variable's array is now updated in place
        before = sess.run(ops["t"]).copy()
        got = sess.run(ops[fetch])
        expected_after = sess.run(ops["t"]).copy()  # (the fetch may itself be an update)
        assert got.flags.writeable  # TF1 returns writable arrays of the caller's own
        got[...] = 99.0
        assert np.array_equal(sess.run(ops["t"]), expected_after)
        if fetch not in ("scatter", "assign_add"):
            assert np.array_equal(expected_after, before)


def test_a_value_fetched_before_an_in_place_update_keeps_its_values() -> None:
    g, ops = _graph()
    with cs.Session(graph=g) as sess:
        sess.run(ops["init"])
        sess.run(ops["scatter"])
        held = [sess.run(ops[k]) for k in ("t", "identity", "slice")]
        copies = [h.copy() for h in held]
        sess.run(ops["scatter"])
        sess.run(ops["scatter"])
        for h, c in zip(held, copies):
            assert np.array_equal(h, c)


def test_constants_feeds_and_data_set_elements_are_copied_too() -> None:
    g, ops = _graph()
    fed = np.ones((2, 2), np.float32)
    with cs.Session(graph=g) as sess:
        c = sess.run(ops["c"])
        c[...] = -1.0
        view = sess.run(ops["c_view"])
        view[...] = -1.0
        assert np.array_equal(sess.run(ops["c"]), np.arange(6).reshape(3, 2))
        got = sess.run(ops["x"], {ops["x"]: fed})
        got[...] = 5.0
        assert np.array_equal(fed, np.ones((2, 2)))
        element = sess.run(ops["next"])
        element[...] = 7.0
    with cs.Session(graph=g) as sess2:  # the data set's arrays are unchanged
        assert np.array_equal(sess2.run(ops["next"]), np.ones((5, 2)))


def test_an_incremental_checkpoint_stays_readable_after_a_fetched_value_is_written() -> None:
    # A write into a fetched variable used to land in the variable unseen by the change
    # tracker, so the next delta's block digests did not match what it stored.
    import tempfile

    g = cs.Graph()
    with g.as_default():
        table = cs.Variable(np.zeros((64, 4), np.float32), name="table")
        rows = cs.placeholder(cs.int32, [None])
        update = cs.scatter_add(table, rows, cs.ones([cs.shape(rows)[0], 4]))
        cs.train.get_or_create_global_step()
        saver = cs.train.Saver(incremental=True, max_to_keep=None)
        init = cs.global_variables_initializer()
    with tempfile.TemporaryDirectory() as d, cs.Session(graph=g) as sess:
        sess.run(init)
        saver.save(sess, f"{d}/model.ckpt", global_step=0)
        sess.run(update, {rows: [1]})
        sess.run(table)[2, 0] = 123.0  # the caller's own array
        sess.run(update, {rows: [3]})
        prefix = saver.save(sess, f"{d}/model.ckpt", global_step=1)
        expected = sess.run(table)
        assert expected[2, 0] == 0.0
        assert np.array_equal(cs.train.load_variable(prefix, "table"), expected)
