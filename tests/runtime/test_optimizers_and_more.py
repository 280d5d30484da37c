"""Optimizers as TF1, reproducibility across processes, plan caching, static shapes."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import ckptsync as cs


def _quadratic(opt_factory, steps=5):
    g = cs.Graph()
    with g.as_default():
        w = cs.get_variable("w", initializer=np.array([1.0, -2.0], np.float64))
        loss = cs.reduce_sum(cs.square(w) * cs.constant(np.array([1.0, 3.0])))
        opt = opt_factory()
        train = opt.minimize(loss)
        init = cs.global_variables_initializer()
    sess = cs.Session(graph=g)
    sess.run(init)
    for _ in range(steps):
        sess.run(train)
    return sess.run(w), opt, g


def _ref_momentum(lr, mu, nesterov, steps=5):
    w = np.array([1.0, -2.0])
    c = np.array([1.0, 3.0])
    acc = np.zeros(2)
    for _ in range(steps):
        grad = 2 * c * w
        acc = mu * acc + grad
        w = w - lr * (grad + mu * acc) if nesterov else w - lr * acc
    return w


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_matches_tf1_update_rule(nesterov):
    got, opt, g = _quadratic(lambda: cs.train.MomentumOptimizer(0.05, 0.9, use_nesterov=nesterov))
    np.testing.assert_allclose(got, _ref_momentum(0.05, 0.9, nesterov), rtol=1e-12)
    names = [v.op.name for v in g.get_collection(cs.GraphKeys.GLOBAL_VARIABLES)]
    assert names == ["w", "w/Momentum"]
    assert opt.get_slot_names() == ["momentum"]


def test_gradient_descent():
    got, _, _ = _quadratic(lambda: cs.train.GradientDescentOptimizer(0.1), steps=3)
    w = np.array([1.0, -2.0])
    for _ in range(3):
        w = w - 0.1 * 2 * np.array([1.0, 3.0]) * w
    np.testing.assert_allclose(got, w, rtol=1e-12)


def test_compute_apply_gradients_and_var_list():
    g = cs.Graph()
    with g.as_default():
        a = cs.get_variable("a", initializer=np.float64(1.0))
        b = cs.get_variable("b", initializer=np.float64(1.0))
        loss = a * a + b * b
        opt = cs.train.GradientDescentOptimizer(0.5)
        gv = opt.compute_gradients(loss, var_list=[a])
        assert [v for _, v in gv] == [a]
        step = cs.train.get_or_create_global_step()
        train = opt.apply_gradients(gv, global_step=step)
        init = cs.global_variables_initializer()
        with pytest.raises(ValueError, match="No gradients provided for any variable"):
            opt.apply_gradients([(None, b)])
    sess = cs.Session(graph=g)
    sess.run(init)
    sess.run(train)
    assert sess.run([a, b, step]) == [0.0, 1.0, 1]


def test_adam_slots_are_global_not_trainable_and_carried_by_saver(tmp_path):
    g = cs.Graph()
    with g.as_default():
        with cs.variable_scope("dense0"):
            w = cs.get_variable("w", [2, 2])
        cs.train.AdamOptimizer().minimize(cs.reduce_sum(w))
        saver = cs.train.Saver()
        init = cs.global_variables_initializer()
    # Outside ``g.as_default()`` the collections read the (fresh) global default graph,
    # as TF1's: none of g's variables are there.
    assert cs.trainable_variables() == []
    assert cs.global_variables() == []
    with g.as_default():
        assert [v.op.name for v in g.get_collection(cs.GraphKeys.TRAINABLE_VARIABLES)] == ["dense0/w"]
    sess = cs.Session(graph=g)
    sess.run(init)
    path = saver.save(sess, str(tmp_path / "model.ckpt"))
    names = [n for n, _ in cs.train.list_variables(path)]
    assert names == sorted(["beta1_power", "beta2_power", "dense0/w", "dense0/w/Adam",
                            "dense0/w/Adam_1"])


SCRIPT = """
import ckptsync as cs, numpy as np, sys
g = cs.Graph()
with g.as_default():
    cs.set_random_seed(123)
    a = cs.get_variable("a", [3, 4])
    b = cs.get_variable("b", [5], initializer=cs.random_normal_initializer(seed=7))
    c = cs.get_variable("c", [2], initializer=cs.truncated_normal_initializer())
    init = cs.global_variables_initializer()
s = cs.Session(graph=g)
s.run(init)
sys.stdout.write(np.concatenate([v.reshape(-1) for v in s.run([a, b, c])]).tobytes().hex())
"""


def test_seeded_initial_values_are_bit_identical_across_processes():
    outs = [subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                           timeout=60, check=True).stdout for _ in range(2)]
    assert outs[0] == outs[1] and len(outs[0]) == 2 * 4 * 19


def test_plan_is_computed_once_per_fetch_and_feed_keys():
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None])
        y = cs.reduce_sum(x)
        z = y * 2.0
    sess = cs.Session(graph=g)
    for i in range(5):
        sess.run(y, {x: np.ones(i + 1)})
    assert len(sess._plans) == 1
    sess.run([y, z], {x: [1.0]})
    assert len(sess._plans) == 2


def test_static_shape_inference_with_unknown_batch():
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, 64])
        w = cs.zeros([64, 10])
        logits = cs.matmul(x, w) + cs.zeros([10])
        assert logits.get_shape().as_list() == [None, 10]
        assert cs.reduce_mean(logits, axis=1).get_shape().as_list() == [None]
        assert cs.argmax(logits, axis=1).get_shape().as_list() == [None]
        assert cs.reshape(cs.zeros([4, 6]), [-1, 3]).get_shape().as_list() == [8, 3]
        assert cs.concat([x, x], axis=1).get_shape().as_list() == [None, 128]
        assert cs.transpose(x).get_shape().as_list() == [64, None]
        with pytest.raises(ValueError, match=r"AddV2.*\(\?, 10\).*\(3,\)"):
            logits + cs.zeros([3])
        with pytest.raises(TypeError, match="does not match dtype"):
            x + cs.zeros([64], dtype=cs.float64)
        with pytest.raises(ValueError, match="cannot reshape a tensor with 24 elements"):
            cs.reshape(cs.zeros([4, 6]), [5, 5])
