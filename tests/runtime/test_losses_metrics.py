"""tf.losses and tf.metrics beyond the goldens: gradients against central differences,
random shapes (empty and unknown batch dims), weights and reductions against a numpy
reference, streaming and same-run semantics of the metrics, and error messages."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptsync as cs

R = cs.losses.Reduction
RNG = np.random.default_rng(7)


def _np_reduce(losses: np.ndarray, w: np.ndarray, reduction: str) -> np.ndarray:
    wb = np.broadcast_to(w, losses.shape).astype(np.float64)
    weighted = losses * wb
    if reduction == R.NONE:
        return weighted
    total = weighted.sum()
    denom = {R.SUM: 1.0, R.MEAN: wb.sum(), R.SUM_OVER_BATCH_SIZE: float(losses.size),
             R.SUM_BY_NONZERO_WEIGHTS: float((wb != 0).sum())}[reduction]
    return np.float64(0.0) if denom == 0 else total / denom


NP_LOSSES = {
    "mean_squared_error": lambda y, p: (p - y) ** 2,
    "absolute_difference": lambda y, p: np.abs(p - y),
    "huber_loss": lambda y, p: np.where(np.abs(p - y) <= 1.0, 0.5 * (p - y) ** 2,
                                        np.abs(p - y) - 0.5),
    "hinge_loss": lambda y, p: np.maximum(0.0, 1 - (2 * y - 1) * p),
    "sigmoid_cross_entropy": lambda y, p: np.maximum(p, 0) - p * y + np.log1p(np.exp(-np.abs(p))),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loss=st.sampled_from(sorted(NP_LOSSES)), batch=st.integers(0, 4),
       dim=st.integers(1, 3), weights=st.sampled_from(["scalar", "example", "full", "one"]),
       reduction=st.sampled_from([R.NONE, R.SUM, R.MEAN, R.SUM_OVER_BATCH_SIZE,
                                  R.SUM_BY_NONZERO_WEIGHTS]),
       unknown_batch=st.booleans(), seed=st.integers(0, 2**16))
def test_losses_match_numpy(loss, batch, dim, weights, reduction, unknown_batch, seed):
    rng = np.random.default_rng(seed)
    y = (rng.uniform(0, 1, (batch, dim)) > 0.5).astype(np.float32)
    p = rng.normal(size=(batch, dim)).astype(np.float32) * 2
    w = {"scalar": np.float32(1.5), "one": np.float32(1.0),
         "example": rng.choice([0.0, 0.5, 2.0], (batch, 1)).astype(np.float32),
         "full": rng.choice([0.0, 1.0, 3.0], (batch, dim)).astype(np.float32)}[weights]
    with cs.Graph().as_default():
        shape = [None if unknown_batch else batch, dim]
        pt, yt = cs.placeholder(cs.float32, shape), cs.placeholder(cs.float32, shape)
        wt = float(w) if np.ndim(w) == 0 else cs.constant(w)
        out = getattr(cs.losses, loss)(yt, pt, weights=wt, reduction=reduction)
        assert out in cs.losses.get_losses()
        got = cs.Session().run(out, {pt: p, yt: y})
    want = _np_reduce(NP_LOSSES[loss](y.astype(np.float64), p.astype(np.float64)), w, reduction)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _central(f, x: np.ndarray, eps: float = 1e-2) -> np.ndarray:
    g = np.zeros_like(x, dtype=np.float64)
    for i in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[i] += eps
        lo[i] -= eps
        g[i] = (float(f(hi)) - float(f(lo))) / (2 * eps)
    return g


GRAD_LOSSES = {
    "mean_squared_error": lambda y, p, w: cs.losses.mean_squared_error(y, p, weights=w),
    "huber_loss": lambda y, p, w: cs.losses.huber_loss(y, p, weights=w, delta=5.0),
    "log_loss": lambda y, p, w: cs.losses.log_loss(y, cs.sigmoid(p), weights=w),
    "sigmoid_cross_entropy": lambda y, p, w: cs.losses.sigmoid_cross_entropy(
        y, p, weights=w, label_smoothing=0.1),
    "softmax_cross_entropy": lambda y, p, w: cs.losses.softmax_cross_entropy(
        y, p, weights=cs.reshape(w, [-1]), label_smoothing=0.2, reduction=R.MEAN),
    "cosine_distance": lambda y, p, w: cs.losses.cosine_distance(y, p, axis=1, weights=w),
}


@pytest.mark.parametrize("name", sorted(GRAD_LOSSES))
def test_loss_gradients_central_differences(name):
    p0 = RNG.normal(size=(3, 4)).astype(np.float32)
    y0 = np.eye(4, dtype=np.float32)[[0, 3, 1]]
    w0 = np.array([[1.0], [0.0], [2.5]], np.float32)
    with cs.Graph().as_default():
        p = cs.placeholder(cs.float32, [3, 4])
        w = cs.placeholder(cs.float32, [3, 1])
        loss = GRAD_LOSSES[name](cs.constant(y0), p, w)
        gp, gw = cs.gradients(loss, [p, w])
        sess = cs.Session()
        got_p, got_w = sess.run([gp, gw], {p: p0, w: w0})
        fp = _central(lambda v: sess.run(loss, {p: v, w: w0}), p0)
        # The count of non-zero weights jumps at 0: the weights' check stays away from it.
        w1 = np.array([[1.0], [0.5], [2.5]], np.float32)
        got_w = sess.run(gw, {p: p0, w: w1})
        fw = _central(lambda v: sess.run(loss, {p: p0, w: v}), w1)
    np.testing.assert_allclose(got_p, fp, rtol=2e-2, atol=2e-3)
    if name != "softmax_cross_entropy":  # MEAN divides by sum(w): smooth in w as well
        np.testing.assert_allclose(got_w, fw, rtol=2e-2, atol=2e-3)


def test_weights_that_cannot_broadcast_name_the_shapes():
    with cs.Graph().as_default():
        x = cs.ones([4, 3])
        with pytest.raises(ValueError, match=r"weights can not be broadcast.*dim 1"):
            cs.losses.mean_squared_error(x, x, weights=cs.ones([4, 2]))
        with pytest.raises(ValueError, match="Invalid Reduction Key avg"):
            cs.losses.absolute_difference(x, x, reduction="avg")


def _streamed(metric, batches):
    """A metric over a step-indexed batch of constants; returns (sess, value, update, step
    advance)."""
    step = cs.Variable(0, trainable=False, name="step")
    args = [cs.gather(cs.constant(b), step) for b in batches]
    value, update = metric(*args)
    with cs.control_dependencies([update]):
        advance = cs.assign_add(step, 1)
    sess = cs.Session()
    sess.run([cs.global_variables_initializer(), cs.local_variables_initializer()])
    return sess, value, update, advance


def test_metric_value_and_update_in_one_run_and_apart():
    labels = np.array([[1, 2, 3, 4], [1, 1, 1, 1], [0, 0, 0, 0]], np.int64)
    preds = np.array([[1, 2, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], np.int64)
    with cs.Graph().as_default():
        sess, acc, update, advance = _streamed(cs.metrics.accuracy, [labels, preds])
        assert sess.run(acc) == 0.0
        # One run: value as before the batch (the variables at the run's start), the
        # update op's value after it, as TF (whose order of the two is not fixed).
        before, after = sess.run([acc, update])
        assert (before, after) == (0.0, 0.5)
        assert sess.run(acc) == 0.5
        sess.run(cs.local_variables_initializer())
        for _ in range(3):
            sess.run(advance)
        assert sess.run(acc) == pytest.approx(10 / 12)
        sess.run(cs.local_variables_initializer())
        assert sess.run(acc) == 0.0


def test_metric_update_twice_in_one_run_counts_once():
    # A run reads each variable once (at its start): an update op fetched twice is one op.
    with cs.Graph().as_default():
        v, u = cs.metrics.mean(cs.constant([1.0, 3.0]))
        sess = cs.Session()
        sess.run(cs.local_variables_initializer())
        assert sess.run([u, u]) == [2.0, 2.0]
        assert [float(x) for x in sess.run(cs.local_variables())] == [4.0, 2.0]


def test_auc_matches_a_numpy_roc():
    rng = np.random.default_rng(3)
    labels = rng.uniform(0, 1, (3, 50)) > 0.5
    probs = np.clip(labels * 0.3 + rng.uniform(0, 0.7, (3, 50)), 0, 1).astype(np.float32)
    with cs.Graph().as_default():
        sess, auc, _, advance = _streamed(
            lambda lb, p: cs.metrics.auc(lb, p, num_thresholds=1000), [labels, probs])
        for _ in range(3):
            sess.run(advance)
        got = float(sess.run(auc))
    pos, neg = probs[labels], probs[~labels]
    exact = ((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean())
    assert got == pytest.approx(exact, abs=5e-3)


def test_metric_variables_are_local_and_not_trainable():
    with cs.Graph().as_default():
        cs.metrics.precision(cs.constant([True, False]), cs.constant([True, True]))
        names = [v.op.name for v in cs.local_variables()]
        assert names == ["precision/true_positives/count", "precision/false_positives/count"]
        assert [v.op.name for v in cs.get_collection(cs.GraphKeys.METRIC_VARIABLES)] == names
        assert not cs.global_variables() and not cs.trainable_variables()


def test_metric_errors():
    with cs.Graph().as_default():
        with pytest.raises(ValueError, match="Curve must be either ROC or PR"):
            cs.metrics.auc(cs.constant([True]), cs.constant([0.5]), curve="XY")
        with pytest.raises(ValueError, match="summation_method"):
            cs.metrics.auc(cs.constant([True]), cs.constant([0.5]), summation_method="x")
        with pytest.raises(ValueError, match="incompatible"):
            cs.metrics.accuracy(cs.ones([4, 3]), cs.ones([4, 2]))
