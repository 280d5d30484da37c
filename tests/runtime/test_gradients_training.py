"""Gradients against central differences, and an MLP trained against hand-written numpy."""

from __future__ import annotations

import numpy as np
import pytest

import ckptsync as cs
from tests.gradcheck import check_gradients


@pytest.mark.parametrize("make", [
    lambda x, w, b: cs.reduce_mean(cs.nn.relu(cs.matmul(x, w) + b)),
    lambda x, w, b: cs.reduce_sum(cs.nn.softmax(cs.nn.bias_add(cs.matmul(x, w), b)) * b),
    lambda x, w, b: cs.reduce_mean(cs.nn.sparse_softmax_cross_entropy_with_logits(
        labels=cs.constant(np.array([0, 2, 1], np.int64)), logits=cs.matmul(x, w) + b)),
])
def test_mlp_gradients_match_central_differences(make):
    rng = np.random.default_rng(0)
    xv = rng.normal(size=(3, 4))
    wv = rng.normal(size=(4, 3))
    bv = rng.normal(size=(3,))
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float64, [None, 4])
        w = cs.placeholder(cs.float64, [4, 3])
        b = cs.placeholder(cs.float64, [3])
        y = make(x, w, b)
    check_gradients(y, [x, w, b], {x: xv, w: wv, b: bv}, cs.Session(graph=g),
                    rtol=1e-5, atol=1e-7)


def test_unconnected_gradient_is_none_and_paths_sum():
    g = cs.Graph()
    with g.as_default():
        a = cs.placeholder(cs.float32, [])
        b = cs.placeholder(cs.float32, [])
        y = a * a + a * 3.0
        ga, gb = cs.gradients(y, [a, b])
    assert gb is None
    assert float(cs.Session(graph=g).run(ga, {a: 2.0})) == pytest.approx(7.0)


def test_adam_training_matches_handwritten_numpy():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(32, 5)).astype(np.float32)
    Y = rng.integers(0, 3, size=32).astype(np.int64)
    w0 = rng.normal(size=(5, 3)).astype(np.float32)
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, 5])
        y = cs.placeholder(cs.int64, [None])
        w = cs.get_variable("w", initializer=w0)
        b = cs.get_variable("b", [3], initializer=cs.zeros_initializer())
        loss = cs.reduce_mean(cs.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=cs.matmul(x, w) + b))
        step = cs.train.get_or_create_global_step()
        train = cs.train.AdamOptimizer(0.01).minimize(loss, global_step=step)
        init = cs.global_variables_initializer()
    sess = cs.Session(graph=g)
    sess.run(init)

    W, B = w0.astype(np.float64), np.zeros(3)
    m = [np.zeros_like(W), np.zeros_like(B)]
    v = [np.zeros_like(W), np.zeros_like(B)]
    b1, b2, eps, lr = 0.9, 0.999, 1e-8, 0.01
    for t in range(1, 21):
        logits = X @ W + B
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        d = p.copy()
        d[np.arange(32), Y] -= 1
        d /= 32
        grads = [X.T @ d, d.sum(0)]
        lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        params = [W, B]
        for i in range(2):
            m[i] = b1 * m[i] + (1 - b1) * grads[i]
            v[i] = b2 * v[i] + (1 - b2) * grads[i] ** 2
            params[i] = params[i] - lr_t * m[i] / (np.sqrt(v[i]) + eps)
        W, B = params
        sess.run(train, {x: X, y: Y})
    np.testing.assert_allclose(sess.run(w), W, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(sess.run(b), B, rtol=1e-4, atol=1e-5)
    assert int(sess.run(step)) == 20
    names = {v.op.name for v in g.get_collection(cs.GraphKeys.GLOBAL_VARIABLES)}
    assert {"w/Adam", "w/Adam_1", "b/Adam", "b/Adam_1", "beta1_power", "beta2_power"} <= names


def test_digits_mlp_matches_handwritten_numpy_step_for_step():
    """The 64-128-128-10 Adam MLP, same init and batches as a hand-written numpy step."""
    from benchmarks.bench_train_step import NumpyMLP, build_ckptsync, init_params
    from ckptsync.data import BatchIterator, load_digits

    params = init_params(seed=3)
    sess, train, loss, x, y = build_ckptsync(params)
    ref = NumpyMLP(params)
    it = BatchIterator(load_digits().train, 64, seed=1)
    for _ in range(30):
        b = next(it)
        got_loss = float(sess.run(loss, {x: b["x"], y: b["y"]}))
        want_loss = ref.step(b["x"], b["y"])
        sess.run(train, {x: b["x"], y: b["y"]})
        assert got_loss == pytest.approx(want_loss, rel=1e-4, abs=1e-5)
    for i, name in enumerate(["dense0/w", "dense0/b", "dense1/w", "dense1/b", "dense2/w",
                              "dense2/b"]):
        np.testing.assert_allclose(sess.run(name + ":0"), ref.p[i], rtol=1e-3, atol=1e-5)
