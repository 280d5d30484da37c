"""The adaptive optimizers' sparse updates, hyperparameter checks, ExponentialMovingAverage
with a Saver (a server loads the averaged weights), and init_from_checkpoint. The values
themselves are checked against TensorFlow in tests/goldens/cases_optim.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ckptsync as cs
from ckptsync.errors import InvalidArgumentError

ADAPTIVE = {
    "rmsprop": lambda: cs.train.RMSPropOptimizer(0.05, momentum=0.5),
    "rmsprop_centered": lambda: cs.train.RMSPropOptimizer(0.05, momentum=0.5, centered=True),
    "adagrad": lambda: cs.train.AdagradOptimizer(0.3),
    "adadelta": lambda: cs.train.AdadeltaOptimizer(2.0),
    "ftrl": lambda: cs.train.FtrlOptimizer(0.3, l1_regularization_strength=0.01),
    "ftrl_shrinkage": lambda: cs.train.FtrlOptimizer(
        0.3, learning_rate_power=-0.7, l2_shrinkage_regularization_strength=0.05),
    "momentum": lambda: cs.train.MomentumOptimizer(0.1, 0.9),
}


def _step(make, init: np.ndarray, grad, steps: int = 2):
    """Runs ``apply_gradients`` ``steps`` times; returns (var, {slot: value})."""
    g = cs.Graph()
    with g.as_default():
        var = cs.get_variable("v", initializer=init)
        opt = make()
        train = opt.apply_gradients([(grad(cs), var)])
        slots = {n: opt.get_slot(var, n) for n in opt.get_slot_names()}
        with cs.Session(graph=g) as sess:
            sess.run(cs.global_variables_initializer())
            start = sess.run(slots)
            for _ in range(steps):
                sess.run(train)
            return sess.run(var), sess.run(slots), start


@settings(max_examples=8, deadline=None)
@given(name=st.sampled_from(sorted(ADAPTIVE)), dtype=st.sampled_from([np.float32, np.float64]),
       rows=st.integers(3, 7), dim=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_sparse_update_touches_only_the_rows_looked_up(name, dtype, rows, dim, seed):
    rng = np.random.RandomState(seed)
    init = rng.uniform(-1, 1, (rows, dim)).astype(dtype)
    idx = np.array([0, rows - 1], np.int32)
    values = rng.uniform(-1, 1, (2, dim)).astype(dtype)
    sparse = lambda cs_: cs_.IndexedSlices(cs_.constant(values), cs_.constant(idx),  # noqa: E731
                                           cs_.constant([rows, dim]))
    var, slots, start = _step(ADAPTIVE[name], init, sparse)
    untouched = np.setdiff1d(np.arange(rows), idx)
    np.testing.assert_array_equal(var[untouched], init[untouched])
    for n, s in slots.items():
        np.testing.assert_array_equal(s[untouched], start[n][untouched], err_msg=n)
    # The rows looked up move as a dense update of just those rows would move them.
    dense_var, dense_slots, _ = _step(ADAPTIVE[name], init[idx], lambda cs_: cs_.constant(values))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(var[idx], dense_var, rtol=tol, atol=tol)
    for n, s in slots.items():
        np.testing.assert_allclose(s[idx], dense_slots[n], rtol=tol, atol=tol, err_msg=n)
    assert var.dtype == dtype


def test_sparse_index_out_of_range_fails_at_run_time():
    def grad(cs_):
        return cs_.IndexedSlices(cs_.constant([[1.0, 2.0]]), cs_.constant([7]),
                                 cs_.constant([3, 2]))

    with pytest.raises(InvalidArgumentError, match="index 7 at offset 0 in indices is out of"):
        _step(ADAPTIVE["adagrad"], np.zeros((3, 2), np.float32), grad, steps=1)


@pytest.mark.parametrize("make, match", [
    (lambda: cs.train.AdagradOptimizer(0.1, initial_accumulator_value=0.0),
     "initial_accumulator_value must be positive"),
    (lambda: cs.train.FtrlOptimizer(0.1, l1_regularization_strength=-1.0),
     "l1_regularization_strength -1.0 needs to be positive or zero"),
    (lambda: cs.train.FtrlOptimizer(0.1, learning_rate_power=0.5),
     "learning_rate_power 0.5 needs to be negative or zero"),
    (lambda: cs.train.RMSPropOptimizer(-0.1), r"learning_rate must be in \[0.0, inf\)"),
])
def test_bad_hyperparameters_raise_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_learning_rate_may_be_a_callable_or_a_variable():
    for lr in (lambda: 0.5, None):
        g = cs.Graph()
        with g.as_default():
            w = cs.get_variable("w", initializer=np.float32([1.0]))
            rate = lr if lr is not None else cs.get_variable(
                "lr", initializer=np.float64(0.5), trainable=False)  # cast to float32
            train = cs.train.GradientDescentOptimizer(rate).minimize(cs.reduce_sum(w * w))
            with cs.Session(graph=g) as sess:
                sess.run(cs.global_variables_initializer())
                sess.run(train)
                np.testing.assert_allclose(sess.run(w), [0.0])


# ------------------------------------------------------------ moving averages + Saver
def test_server_restores_the_averaged_weights_under_the_original_names(tmp_path):
    g = cs.Graph()
    with g.as_default():
        w = cs.get_variable("w", initializer=np.float32([1.0, -1.0]))
        step = cs.train.get_or_create_global_step()
        train = cs.train.GradientDescentOptimizer(0.25).minimize(
            cs.reduce_sum(cs.square(w)), global_step=step)
        ema = cs.train.ExponentialMovingAverage(0.5)
        update = ema.apply([w])
        saver = cs.train.Saver()
        with cs.Session(graph=g) as sess:
            sess.run(cs.global_variables_initializer())
            for _ in range(3):
                sess.run(train)
                sess.run(update)
            want = sess.run(ema.average(w))
            trained = sess.run(w)
            path = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=step)
    assert not np.allclose(want, trained)

    serving = cs.Graph()
    with serving.as_default():
        w = cs.get_variable("w", shape=[2])
        ema = cs.train.ExponentialMovingAverage(0.5)
        restore_map = ema.variables_to_restore()
        assert restore_map == {"w/ExponentialMovingAverage": w}
        with cs.Session(graph=serving) as sess:
            cs.train.Saver(restore_map).restore(sess, path)
            np.testing.assert_allclose(sess.run(w), want)


def test_ema_collection_and_average_names():
    g = cs.Graph()
    with g.as_default():
        w = cs.get_variable("w", initializer=np.float32([2.0]))
        x = cs.constant([1.0, 2.0]) * 3.0
        ema = cs.train.ExponentialMovingAverage(0.9, name="avg")
        assert ema.average(w) is None and ema.average_name(w) == "w/avg"
        ema.apply([w, x])
        assert cs.moving_average_variables() == [w]
        assert ema.average(w).op.name == "w/avg"
        assert ema.average(x).op.name == f"{x.op.name}/avg"
        assert not ema.average(w).trainable


# ------------------------------------------------------------ init_from_checkpoint
@pytest.fixture
def checkpoint(tmp_path):
    g = cs.Graph()
    with g.as_default():
        with cs.variable_scope("old"):
            cs.get_variable("w", initializer=np.float32([[1.0, 2.0], [3.0, 4.0]]))
            cs.get_variable("b", initializer=np.float32([5.0, 6.0]))
        cs.get_variable("top", initializer=np.float64(7.0))
        saver = cs.train.Saver()
        with cs.Session(graph=g) as sess:
            sess.run(cs.global_variables_initializer())
            saver.save(sess, str(tmp_path / "model.ckpt"))
    return tmp_path


def _initialized(build):
    g = cs.Graph()
    with g.as_default():
        fetch = build()
        with cs.Session(graph=g) as sess:
            sess.run(cs.global_variables_initializer())
            return sess.run(fetch)


def test_init_from_checkpoint_maps_scopes_and_names(checkpoint):
    def build():
        with cs.variable_scope("new"):
            w = cs.get_variable("w", [2, 2])
            b = cs.get_variable("b", [2])
        other = cs.get_variable("other", [2])
        cs.train.init_from_checkpoint(str(checkpoint), {"old/": "new/", "old/b": other})
        return w, b, other

    w, b, other = _initialized(build)
    np.testing.assert_array_equal(w, [[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(b, [5.0, 6.0])
    np.testing.assert_array_equal(other, [5.0, 6.0])


def test_init_from_checkpoint_root_to_scope(checkpoint):
    def build():
        with cs.variable_scope("model"):
            with cs.variable_scope("old"):
                w = cs.get_variable("w", [2, 2])
        cs.train.init_from_checkpoint(str(checkpoint / "model.ckpt"), {"/": "model/"})
        return w

    np.testing.assert_array_equal(_initialized(build), [[1.0, 2.0], [3.0, 4.0]])


@pytest.mark.parametrize("mapping, shape, match", [
    ({"old/missing": "x"}, [2], "Tensor old/missing is not found in"),
    ({"old/b": "x"}, [3], r"Shape of variable x:0 \(\(3,\)\) doesn't match"),
    ({"old/b": "nothere/"}, [2], "Assignment map with scope only name nothere should map"),
])
def test_init_from_checkpoint_errors(checkpoint, mapping, shape, match):
    g = cs.Graph()
    with g.as_default():
        cs.get_variable("x", shape)
        with pytest.raises(ValueError, match=match):
            cs.train.init_from_checkpoint(str(checkpoint), mapping)


def test_init_from_checkpoint_dtype_mismatch_fails_at_run_time(checkpoint):
    g = cs.Graph()
    with g.as_default():
        x = cs.get_variable("x", [], dtype=cs.float32)
        cs.train.init_from_checkpoint(str(checkpoint), {"top": "x"})
        with cs.Session(graph=g) as sess:
            with pytest.raises(InvalidArgumentError, match="tensor top of checkpoint"):
                sess.run(x.initializer)
