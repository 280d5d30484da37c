"""Session.track_changes: which variables, and which rows, runs changed (issue #19, 1).

Real graphs and sessions; the bytes a run changed are found by comparing with a copy kept
by the test only (the tracker itself never compares).
"""

from __future__ import annotations

import threading
import weakref

import numpy as np
import pytest

import ckptsync as cs
from ckptsync.errors import FailedPreconditionError, InvalidArgumentError
from ckptsync.session.changes import ChangeTracker

N_ROWS, DIM = 40, 4

OPTIMIZERS = {
    "GradientDescent": lambda: cs.train.GradientDescentOptimizer(0.1),
    "Adagrad": lambda: cs.train.AdagradOptimizer(0.1),
    "Ftrl": lambda: cs.train.FtrlOptimizer(0.1),
    "FtrlV2": lambda: cs.train.FtrlOptimizer(0.1, l2_shrinkage_regularization_strength=0.01),
    "Momentum": lambda: cs.train.MomentumOptimizer(0.1, 0.9),
    "Nesterov": lambda: cs.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
    "RMSProp": lambda: cs.train.RMSPropOptimizer(0.1, momentum=0.5),
    "CenteredRMSProp": lambda: cs.train.RMSPropOptimizer(0.1, centered=True),
    "Adadelta": lambda: cs.train.AdadeltaOptimizer(1.0),
}


def _embedding_model(make_opt):
    """An embedding table looked up by ``ids``, a dense layer on top, trained by
    ``make_opt()`` with a global step. Returns (graph, ids, train op, init, names of the
    table and its slots, names of the other variables, all names)."""
    g = cs.Graph()
    with g.as_default():
        table = cs.get_variable("emb", [N_ROWS, DIM],
                                initializer=cs.random_normal_initializer(seed=1))
        w = cs.get_variable("w", [DIM, 1], initializer=cs.random_normal_initializer(seed=2))
        ids = cs.placeholder(cs.int32, [None])
        e = cs.nn.embedding_lookup(table, ids)
        loss = cs.reduce_sum(cs.square(cs.matmul(e, w) - 3.0))
        opt = make_opt()
        gs = cs.train.get_or_create_global_step()
        train = opt.minimize(loss, global_step=gs)
        init = cs.global_variables_initializer()
        slots = opt.get_slot_names()
        sparse = ["emb"] + [opt.get_slot(table, s).op.name for s in slots]
        names = [v.op.name for v in cs.global_variables()]
        dense = [n for n in names if n not in sparse]  # w, its slots, global_step, ...
    assert {"w", gs.op.name, *(opt.get_slot(w, s).op.name for s in slots)} <= set(dense)
    return g, ids, train, init, sparse, dense, names


def _differing_rows(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """The rows of dim 0 whose bytes differ (the test's own comparison)."""
    b = before.reshape(before.shape[0], -1).view(np.uint8)
    a = after.reshape(after.shape[0], -1).view(np.uint8)
    return np.flatnonzero((a != b).any(axis=1))


@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
def test_sparse_training_reports_the_looked_up_rows_of_table_and_slots(opt_name):
    g, ids, train, init, sparse, dense, names = _embedding_model(OPTIMIZERS[opt_name])
    with cs.Session(graph=g) as sess:
        tracker = sess.track_changes()
        sess.run(init)
        values, changes = sess.read_variables_and_changes(names, tracker)
        assert changes == dict.fromkeys(names)  # an initializer is a whole change
        for batch in ([3, 7, 3, 12], [0, 39], [7, 7, 7]):
            before = {n: values[n].copy() for n in names}
            del values  # held, the arrays would be updated in a copy (either is fine)
            sess.run(train, {ids: np.array(batch, np.int32)})
            values, changes = sess.read_variables_and_changes(names, tracker)
            want = np.unique(batch)
            assert set(changes) == set(names)
            for n in sparse:
                assert changes[n].dtype == np.int64
                np.testing.assert_array_equal(changes[n], want, err_msg=n)
                differ = _differing_rows(before[n], values[n])
                assert set(differ) <= set(changes[n]), n
                if opt_name == "GradientDescent":  # nonzero gradients: exactly these rows
                    np.testing.assert_array_equal(differ, changes[n])
            for n in dense:
                assert changes[n] is None, n


def test_adam_applies_sparse_gradients_densely_so_reports_whole():
    g, ids, train, init, sparse, dense, names = _embedding_model(
        lambda: cs.train.AdamOptimizer(0.1))
    with cs.Session(graph=g) as sess:
        sess.run(init)
        tracker = sess.track_changes()
        sess.run(train, {ids: [1, 2]})
        _, changes = sess.read_variables_and_changes(names, tracker)
    assert changes == dict.fromkeys(names)  # m, v and beta powers included


def _table_graph(rows=N_ROWS, dtype=np.float64):
    g = cs.Graph()
    with g.as_default():
        t = cs.get_variable("t", initializer=np.arange(rows * 2, dtype=dtype).reshape(rows, 2)
                            + 1)
        d = cs.get_variable("d", initializer=np.zeros(3, dtype))
        init = cs.global_variables_initializer()
    return g, t, d, init


@pytest.mark.parametrize("scatter", ["scatter_update", "scatter_add", "scatter_sub",
                                     "scatter_mul", "scatter_div", "scatter_min",
                                     "scatter_max"])
def test_scatter_ops_report_their_indices(scatter):
    g, t, d, init = _table_graph()
    with g.as_default():
        idx = np.array([[5, 2], [2, 30]], np.int64)  # any shape, repeats allowed
        value = 1000.5 if scatter == "scatter_max" else 0.5  # every named row changes
        op = getattr(cs, scatter)(t, idx, np.full((2, 2, 2), value))
    with cs.Session(graph=g) as sess:
        sess.run(init)
        tracker = sess.track_changes()
        before = sess.read_variables(["t"])["t"].copy()
        sess.run(op)
        values, changes = sess.read_variables_and_changes(["t", "d"], tracker)
    assert list(changes) == ["t"]  # "d" did not change: not reported
    np.testing.assert_array_equal(changes["t"], [2, 5, 30])
    np.testing.assert_array_equal(_differing_rows(before, values["t"]), [2, 5, 30])


def test_runs_union_a_take_resets_and_only_the_names_asked_for_are_taken():
    g, t, d, init = _table_graph()
    with g.as_default():
        ids = cs.placeholder(cs.int32, [None])
        add = cs.scatter_add(t, ids, cs.ones_like(cs.gather(t, ids)))
        assign_d = cs.assign(d, [1.0, 2.0, 3.0])
    with cs.Session(graph=g) as sess:
        sess.run(init)
        tracker = sess.track_changes()
        assert sess.read_variables_and_changes(["t", "d"], tracker)[1] == {}
        sess.run(add, {ids: [4, 1]})
        sess.run(add, {ids: [9, 4]})
        sess.run(assign_d)
        _, changes = sess.read_variables_and_changes(["t"], tracker)
        np.testing.assert_array_equal(changes["t"], [1, 4, 9])
        assert list(changes) == ["t"]
        _, changes = sess.read_variables_and_changes(["t", "d"], tracker)
        assert changes == {"d": None}  # t's rows were taken; d's change was kept
        assert sess.read_variables_and_changes(["t", "d"], tracker)[1] == {}


def test_a_whole_write_in_the_same_run_wins_over_rows_before_or_after_it():
    g, t, d, init = _table_graph()
    with g.as_default():
        add = cs.scatter_add(t, [1], [[1.0, 1.0]])
        with cs.control_dependencies([add]):
            whole_after = cs.assign(t, cs.zeros_like(t))
        reset = cs.assign(t, cs.ones_like(t))
        with cs.control_dependencies([reset]):
            rows_after = cs.scatter_add(t, [2], [[1.0, 1.0]])
    with cs.Session(graph=g) as sess:
        sess.run(init)
        tracker = sess.track_changes()
        for op in (whole_after, rows_after):
            sess.run(op)
            assert sess.read_variables_and_changes(["t"], tracker)[1] == {"t": None}


def test_put_back_merges_with_newer_changes():
    g, t, d, init = _table_graph()
    with g.as_default():
        ids = cs.placeholder(cs.int32, [None])
        add = cs.scatter_add(t, ids, cs.ones_like(cs.gather(t, ids)))
    with cs.Session(graph=g) as sess:
        sess.run(init)
        tracker = sess.track_changes()
        sess.run(add, {ids: [3, 8]})
        _, taken = sess.read_variables_and_changes(["t", "d"], tracker)
        sess.run(add, {ids: [8, 20]})
        tracker.put_back(taken)  # the save that took them failed
        _, changes = sess.read_variables_and_changes(["t", "d"], tracker)
        np.testing.assert_array_equal(changes["t"], [3, 8, 20])
        tracker.put_back({"t": np.array([1], np.int32), "d": None})
        sess.run(add, {ids: [2]})
        tracker.put_back({"t": None})  # a whole change absorbs rows, before and after
        sess.run(add, {ids: [5]})
        assert sess.read_variables_and_changes(["t", "d"], tracker)[1] == {"t": None,
                                                                           "d": None}
        with pytest.raises(TypeError, match="'t'.*integer rows"):
            tracker.put_back({"t": np.array([1.5])})
        with pytest.raises(ValueError, match="'t'.*one-dimensional"):
            tracker.put_back({"t": np.zeros((2, 2), np.int64)})
        with pytest.raises(ValueError, match="'t'.*>= 0"):
            tracker.put_back({"t": np.array([-1])})


def test_a_failed_run_records_only_what_landed():
    g, t, d, init = _table_graph()
    with g.as_default():
        assign_d = cs.assign(d, [7.0, 7.0, 7.0])
        add = cs.scatter_add(t, [6, 3], [[1.0, 1.0], [1.0, 1.0]])
        with cs.control_dependencies([assign_d]):
            fails_after_assign = cs.check_numerics(cs.log(cs.constant(-1.0)), "boom")
        with cs.control_dependencies([add]):
            fails_after_scatter = cs.check_numerics(cs.log(cs.constant(-1.0)), "boom")
    with cs.Session(graph=g) as sess:
        sess.run(init)
        tracker = sess.track_changes()
        with pytest.raises(InvalidArgumentError, match="boom"):
            sess.run(fails_after_assign)
        values, changes = sess.read_variables_and_changes(["t", "d"], tracker)
        assert changes == {}  # the assignment did not land
        np.testing.assert_array_equal(values["d"], np.zeros(3))
        before = values["t"].copy()
        del values
        t.load(before, sess)  # an array of t's own (init's is the constant's: shared)
        assert sess.read_variables_and_changes(["t"], tracker)[1] == {"t": None}
        with pytest.raises(InvalidArgumentError, match="boom"):
            sess.run(fails_after_scatter)
        values, changes = sess.read_variables_and_changes(["t", "d"], tracker)
        # Held by nobody, t's array was updated in place: the rows changed though the
        # run failed (as TF1's ref variables), and they are reported (no change lost).
        np.testing.assert_array_equal(_differing_rows(before, values["t"]), [3, 6])
        assert list(changes) == ["t"]
        np.testing.assert_array_equal(changes["t"], [3, 6])


def test_concurrent_runs_lose_no_row():
    g, t, d, init = _table_graph(rows=1000)
    with g.as_default():
        ids = cs.placeholder(cs.int32, [None])
        add = cs.scatter_add(t, ids, cs.ones_like(cs.gather(t, ids)))
    n_steps = 60
    batches = {k: [np.arange(k * 500 + i * 8, k * 500 + i * 8 + 3) for i in range(n_steps)]
               for k in (0, 1)}
    with cs.Session(graph=g) as sess:
        sess.run(init)
        tracker = sess.track_changes()
        start = threading.Barrier(3, timeout=60)
        errors: list[BaseException] = []

        def train(k):
            try:
                start.wait()
                for b in batches[k]:
                    sess.run(add, {ids: b})
            except BaseException as e:  # noqa: BLE001  # reported by the test
                errors.append(e)

        threads = [threading.Thread(target=train, args=(k,)) for k in (0, 1)]
        for th in threads:
            th.start()
        taken: list[np.ndarray] = []
        start.wait()
        while any(th.is_alive() for th in threads):  # takes while the two threads run
            rows = sess.read_variables_and_changes(["t"], tracker)[1].get("t")
            if rows is not None:
                taken.append(rows)
        for th in threads:
            th.join(timeout=60)
        assert not errors
        rows = sess.read_variables_and_changes(["t"], tracker)[1].get("t")
        if rows is not None:
            taken.append(rows)
    want = np.unique(np.concatenate([b for k in batches for b in batches[k]]))
    got = np.concatenate(taken)
    assert got.size == np.unique(got).size  # each row reported once: takes are exact
    np.testing.assert_array_equal(np.sort(got), want)


def test_restore_load_and_initializers_report_whole(tmp_path):
    g, t, d, init = _table_graph()
    with g.as_default():
        saver = cs.train.Saver()
    with cs.Session(graph=g) as sess:
        tracker = sess.track_changes()
        sess.run(init)
        assert sess.read_variables_and_changes(["t", "d"], tracker)[1] == {"t": None,
                                                                           "d": None}
        prefix = saver.save(sess, str(tmp_path / "model.ckpt"))
        assert sess.read_variables_and_changes(["t", "d"], tracker)[1] == {}  # reads only
        saver.restore(sess, prefix)
        assert sess.read_variables_and_changes(["t", "d"], tracker)[1] == {"t": None,
                                                                           "d": None}
        d.load(np.ones(3), sess)
        assert sess.read_variables_and_changes(["t", "d"], tracker)[1] == {"d": None}


def test_each_tracker_records_alone_and_a_dropped_one_is_let_go():
    g, t, d, init = _table_graph()
    with g.as_default():
        add = cs.scatter_add(t, [0], [[1.0, 1.0]])
    with cs.Session(graph=g) as sess:
        sess.run(init)
        first, second = sess.track_changes(), sess.track_changes()
        sess.run(add)
        assert list(sess.read_variables_and_changes(["t"], first)[1]) == ["t"]
        assert list(sess.read_variables_and_changes(["t"], second)[1]) == ["t"]
        gone = weakref.ref(second)
        del second
        assert gone() is None  # the session does not keep it alive
        sess.run(add)
        assert len(sess._trackers.refs) == 1  # forgotten at the next landing
        assert list(sess.read_variables_and_changes(["t"], first)[1]) == ["t"]


def test_bad_arguments_are_named():
    g, t, d, init = _table_graph()
    with cs.Session(graph=g) as sess, cs.Session(graph=g) as other:
        tracker = other.track_changes()
        with pytest.raises(ValueError, match="not a ChangeTracker of this session"):
            sess.read_variables_and_changes(["t"], tracker)
        with pytest.raises(ValueError, match="not a ChangeTracker"):
            sess.read_variables_and_changes(["t"], object())  # type: ignore[arg-type]
        mine = sess.track_changes()
        assert isinstance(mine, ChangeTracker)
        with pytest.raises(FailedPreconditionError, match="uninitialized value t"):
            sess.read_variables_and_changes(["t"], mine)


def test_dense_updates_report_whole_and_rows_inside_a_cond_or_callable_are_rows():
    g, t, d, init = _table_graph()
    with g.as_default():
        ema = cs.train.ExponentialMovingAverage(0.9)
        average = ema.apply([d])
        avg_name = ema.average(d).op.name
        flag = cs.placeholder(cs.bool, [])
        in_cond = cs.cond(flag, lambda: cs.scatter_add(t, [11, 4], [[1.0, 1.0]] * 2),
                          lambda: cs.identity(t))
        ids = cs.placeholder(cs.int32, [None])
        add = cs.scatter_add(t, ids, cs.ones_like(cs.gather(t, ids)))
        init_avg = cs.global_variables_initializer()
    with cs.Session(graph=g) as sess:
        sess.run(init_avg)
        tracker = sess.track_changes()
        sess.run(average)
        assert sess.read_variables_and_changes(["t", "d", avg_name], tracker)[1] == {
            avg_name: None}
        sess.run(in_cond, {flag: False})
        assert sess.read_variables_and_changes(["t"], tracker)[1] == {}
        sess.run(in_cond, {flag: True})
        np.testing.assert_array_equal(
            sess.read_variables_and_changes(["t"], tracker)[1]["t"], [4, 11])
        step = sess.make_callable(add, [ids])
        step(np.array([17, 2], np.int32))
        np.testing.assert_array_equal(
            sess.read_variables_and_changes(["t"], tracker)[1]["t"], [2, 17])


def test_many_runs_between_takes_union_exactly():
    g, t, d, init = _table_graph(rows=500)
    with g.as_default():
        ids = cs.placeholder(cs.int32, [None])
        add = cs.scatter_add(t, ids, cs.ones_like(cs.gather(t, ids)))
    rng = np.random.default_rng(7)
    batches = [rng.integers(0, 500, rng.integers(1, 20)) for _ in range(150)]
    with cs.Session(graph=g) as sess:
        sess.run(init)
        tracker = sess.track_changes()
        step = sess.make_callable(add, [ids])
        for b in batches[:100]:  # more runs than the tracker keeps unmerged
            step(b)
        _, changes = sess.read_variables_and_changes(["t"], tracker)
        np.testing.assert_array_equal(changes["t"], np.unique(np.concatenate(batches[:100])))
        tracker.put_back({"t": np.array([499, 3, 499, 0])})  # any order, repeats
        for b in batches[100:]:
            step(b)
        _, changes = sess.read_variables_and_changes(["t"], tracker)
    np.testing.assert_array_equal(
        changes["t"], np.unique(np.concatenate(batches[100:] + [np.array([0, 3, 499])])))
