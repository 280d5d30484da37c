"""tf.nn ops of issue 17 (activations, normalization, logistic losses, top_k, dropout):
central-difference gradients in float64, numpy references on random inputs (hypothesis)
across dtypes, empty and unknown dims, and dropout's statistics and seeding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptsync as cs
from ckptsync.ops import nn_norm
from tests.gradcheck import numeric_gradient

RNG = np.random.default_rng(17)


def _any(shape):
    return RNG.normal(size=shape)


def _apart(shape):
    # Distinct values at least 0.1 apart and away from the kinks at 0 and 6.
    v = RNG.permutation(np.arange(np.prod(shape), dtype=np.float64)) * 0.73 - 3.01
    return v.reshape(shape)


def _unit(shape):
    return RNG.uniform(0.05, 0.95, shape)


def _pos(shape):
    return RNG.uniform(0.5, 2.0, shape)


# name -> (builder(*float64 placeholders) -> tensor, input generators): checked against
# central differences by tests/runtime/test_op_gradients.py (its table's format).
GRAD_CASES = {
    "relu6": (lambda a: cs.nn.relu6(a * 3.0), [(_apart, (3, 4))]),
    "elu": (lambda a: cs.nn.elu(a), [(_apart, (3, 4))]),
    "selu": (lambda a: cs.nn.selu(a), [(_apart, (3, 4))]),
    "leaky_relu": (lambda a: cs.nn.leaky_relu(a, alpha=0.1), [(_apart, (3, 4))]),
    "leaky_relu_tensor_alpha": (lambda a, b: cs.nn.leaky_relu(a, alpha=b),
                                [(_apart, (2, 3)), (_unit, ())]),
    "softplus": (lambda a: cs.nn.softplus(a * 10.0), [(_any, (3, 4))]),
    "softsign": (lambda a: cs.nn.softsign(a), [(_any, (3, 4))]),
    "swish": (lambda a: cs.nn.swish(a), [(_any, (3, 4))]),
    "swish_beta": (lambda a, b: cs.nn.swish(a, b), [(_any, (3, 4)), (_pos, ())]),
    "log_sigmoid": (lambda a: cs.log_sigmoid(a * 5.0), [(_any, (3, 4))]),
    "l2_loss": (lambda a: cs.nn.l2_loss(a), [(_any, (3, 4))]),
    "l2_normalize": (lambda a: cs.nn.l2_normalize(a, axis=1), [(_any, (3, 4))]),
    "moments": (lambda a: cs.add_n(list(cs.nn.moments(a, axes=[0]))), [(_any, (5, 3))]),
    "batch_normalization": (lambda x, m, v, o, s: cs.nn.batch_normalization(x, m, v, o, s, 1e-3),
                            [(_any, (4, 3)), (_any, (3,)), (_pos, (3,)), (_any, (3,)),
                             (_any, (3,))]),
    "sigmoid_xent": (lambda a, b: cs.nn.sigmoid_cross_entropy_with_logits(labels=b, logits=a),
                     [(_any, (3, 4)), (_unit, (3, 4))]),
    "weighted_xent": (lambda a, b, w: cs.nn.weighted_cross_entropy_with_logits(
        labels=b, logits=a, pos_weight=w), [(_any, (3, 4)), (_unit, (3, 4)), (_pos, (4,))]),
    "top_k": (lambda a: cs.nn.top_k(a, k=2).values, [(_apart, (3, 5))]),
    "xw_plus_b": (lambda x, w, b: cs.nn.xw_plus_b(x, w, b),
                  [(_any, (2, 3)), (_any, (3, 4)), (_any, (4,))]),
    "softmax_xent_v2": (lambda a, b: cs.nn.softmax_cross_entropy_with_logits_v2(
        labels=cs.nn.softmax(b), logits=a), [(_any, (3, 4)), (_any, (3, 4))]),
    "softmax_xent_v2_axis0": (lambda a, b: cs.nn.softmax_cross_entropy_with_logits_v2(
        labels=cs.nn.softmax(b, axis=0), logits=a, axis=0), [(_any, (4, 3)), (_any, (4, 3))]),
    "softmax_axis0": (lambda a: cs.nn.softmax(a, axis=0), [(_any, (3, 4))]),
    "log_softmax_axis1": (lambda a: cs.nn.log_softmax(a, axis=1), [(_any, (2, 3, 2))]),
    "bias_add_nchw": (lambda x, b: cs.nn.bias_add(x, b, data_format="NCHW"),
                      [(_any, (2, 3, 2, 2)), (_any, (3,))]),
    "crelu": (lambda a: cs.nn.crelu(a), [(_apart, (2, 3))]),
    "relu_layer": (lambda x, w, b: cs.nn.relu_layer(x, w, b),
                   [(_any, (2, 3)), (_any, (3, 4)), (_any, (4,))]),
    # second order (gradient penalties): the <Type>Grad ops' own gradients
    **{f"{name}_second_order": (
        lambda a, c, f=f: cs.gradients(f(a), [a], grad_ys=c)[0],
        [(_apart, (2, 3)), (_any, (2, 3))])
       for name, f in [("relu6", lambda a: cs.nn.relu6(a * 3.0)), ("elu", cs.nn.elu),
                       ("selu", cs.nn.selu), ("softplus", cs.nn.softplus),
                       ("leaky_relu", lambda a: cs.nn.leaky_relu(a, 0.3))]},
    # float32 inside (FusedBatchNormV3 takes no float64, as TF): its gradient is checked in
    # float64 on the kernels below.
    "fused_batch_norm": (lambda x: cs.nn.fused_batch_norm(
        cs.cast(x, cs.float32), np.ones(2, np.float32), np.zeros(2, np.float32))[0],
        [(_any, (2, 2, 2, 2))]),
}
INTERNAL_GRAD_OPS: tuple[str, ...] = ()
_NOT_CENTRAL = {"fused_batch_norm"}


@pytest.mark.parametrize("is_training", [True, False])
def test_fused_batch_norm_kernel_gradient_in_float64(is_training):
    x, scale, offset = _any((3, 2, 2, 2)), _pos((2,)), _any((2,))
    mean, var = _any((2,)), _pos((2,))
    attrs = dict(epsilon=1e-3, is_training=is_training, data_format="NHWC",
                 exponential_avg_factor=1.0)
    g = RNG.normal(size=x.shape)

    def loss():
        return float((nn_norm._fbn_kernel(x, scale, offset, mean, var, **attrs)[0] * g).sum())

    dx, dscale, doffset = nn_norm._fbn_grad_kernel(g, x, scale, mean, var, **attrs)
    np.testing.assert_allclose(dx, numeric_gradient(loss, x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dscale, numeric_gradient(loss, scale), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(doffset, numeric_gradient(loss, offset), rtol=1e-5, atol=1e-6)


def test_fused_batch_norm_matches_moments_and_batch_normalization():
    xv = RNG.normal(size=(4, 3, 3, 5)).astype(np.float32)
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, 3, 3, 5])
        sc, off = cs.constant(_pos(5).astype(np.float32)), cs.constant(_any(5).astype(np.float32))
        y, bm, bv = cs.nn.fused_batch_norm(x, sc, off, epsilon=1e-3)
        m, v = cs.nn.moments(x, [0, 1, 2])
        y2 = cs.nn.batch_normalization(x, m, v, off, sc, 1e-3)
        gy = cs.gradients(cs.reduce_sum(y * y), [x, sc, off])
        gy2 = cs.gradients(cs.reduce_sum(y2 * y2), [x, sc, off])
    out = cs.Session(graph=g).run([y, y2, bm, m, bv, v, gy, gy2], {x: xv})
    np.testing.assert_allclose(out[0], out[1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out[2], out[3], rtol=1e-5, atol=1e-6)
    n = 4 * 3 * 3
    np.testing.assert_allclose(out[4], out[5] * n / (n - 1), rtol=1e-5)
    for a, b in zip(out[6], out[7]):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


def test_fused_batch_norm_rejects_float64_and_bad_shapes():
    with cs.Graph().as_default():
        with pytest.raises(TypeError, match="FusedBatchNormV3"):
            cs.nn.fused_batch_norm(cs.zeros([1, 2, 2, 3], cs.float64), [1.0] * 3, [0.0] * 3)
        with pytest.raises(ValueError, match="scale"):
            cs.nn.fused_batch_norm(cs.zeros([1, 2, 2, 3]), [1.0] * 4, [0.0] * 3)
        with pytest.raises(ValueError, match="4-D"):
            cs.nn.fused_batch_norm(cs.zeros([2, 3]), [1.0] * 3, [0.0] * 3)


# --------------------------------------------------------------------- numpy references
def _selu(x):
    a, s = 1.6732632423543772, 1.0507009873554805
    return np.where(x < 0, s * a * np.expm1(np.minimum(x, 0)), s * x)


REFERENCES = {
    "relu6": (cs.nn.relu6, lambda x: np.clip(x, 0, 6)),
    "elu": (cs.nn.elu, lambda x: np.where(x < 0, np.expm1(np.minimum(x, 0)), x)),
    "selu": (cs.nn.selu, _selu),
    "leaky_relu": (cs.nn.leaky_relu, lambda x: np.where(x > 0, x, 0.2 * x)),
    "softplus": (cs.nn.softplus, lambda x: np.logaddexp(0, x)),
    "softsign": (cs.nn.softsign, lambda x: x / (1 + np.abs(x))),
    "log_sigmoid": (cs.log_sigmoid, lambda x: -np.logaddexp(0, -x)),
    "swish": (cs.nn.swish, lambda x: x / (1 + np.exp(-x))),
}


@st.composite
def _arrays(draw):
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=3)))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.sampled_from([1.0, 10.0, 100.0]))
    return (np.random.default_rng(seed).normal(size=shape) * scale).astype(dtype)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(REFERENCES)), _arrays(), st.booleans())
def test_activations_match_numpy(name, x, unknown_dims):
    fn, ref = REFERENCES[name]
    with cs.Graph().as_default() as g:
        shape = [None] * x.ndim if unknown_dims else list(x.shape)
        t = cs.placeholder(cs.as_dtype(x.dtype), shape)
        y = fn(t)
        assert y.dtype == t.dtype and y.get_shape().as_list() == shape
        (gx,) = cs.gradients(cs.reduce_sum(y), [t])
    out, grad = cs.Session(graph=g).run([y, gx], {t: x})
    assert out.dtype == x.dtype and out.shape == x.shape and grad.shape == x.shape
    tol = 1e-5 if x.dtype == np.float32 else 1e-12
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(out, ref(x.astype(np.float64)), rtol=tol, atol=tol)


def _top_k_ref(x, k):
    idx = np.array([sorted(range(x.shape[-1]), key=lambda i: (-row[i], i))[:k]
                    for row in x.reshape(-1, x.shape[-1])], dtype=np.int64)
    idx = idx.reshape(*x.shape[:-1], k)
    return np.take_along_axis(x, idx, -1), idx


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 3), min_size=0, max_size=2), st.integers(1, 6),
       st.sampled_from([np.float32, np.float64, np.int32, np.int64]), st.integers(0, 2**31 - 1),
       st.data())
def test_top_k_matches_a_stable_reference(lead, n, dtype, seed, data):
    k = data.draw(st.integers(0, n))
    # Few distinct values, so there are many ties.
    x = np.random.default_rng(seed).integers(-2, 3, size=(*lead, n)).astype(dtype)
    with cs.Graph().as_default() as g:
        t = cs.placeholder(cs.as_dtype(dtype), [None] * len(lead) + [n])
        r = cs.nn.top_k(t, k=k)
        assert r.values.get_shape().as_list() == [None] * len(lead) + [k]
    values, indices = cs.Session(graph=g).run([r.values, r.indices], {t: x})
    want_v, want_i = _top_k_ref(x, k)
    np.testing.assert_array_equal(indices, want_i)
    np.testing.assert_array_equal(values, want_v)
    assert values.dtype == dtype and indices.dtype == np.int32


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_top_k_of_many_matches_the_full_sort(dtype):
    from ckptsync.ops import nn_topk
    rng = np.random.default_rng(3)
    for values in (rng.integers(0, 50, (7, 1000)), rng.normal(size=(3, 2, 500)) * 100):
        x = values.astype(dtype)
        for k in (1, 5, 30):
            np.testing.assert_array_equal(nn_topk._top_indices(x, k),
                                          nn_topk._stable_descending(x)[..., :k])
    x = np.zeros((2, 300), dtype)  # all tied: the first k indices
    np.testing.assert_array_equal(nn_topk._top_indices(x, 3), [[0, 1, 2]] * 2)


def test_top_k_gradient_scatters_into_the_indices():
    with cs.Graph().as_default() as g:
        x = cs.constant(np.array([[1.0, 5.0, 3.0, 5.0]], np.float32))
        v = cs.nn.top_k(x, 3).values
        (gx,) = cs.gradients(v, [x], grad_ys=cs.constant(np.array([[10.0, 20.0, 30.0]],
                                                                 np.float32)))
    np.testing.assert_array_equal(cs.Session(graph=g).run(gx), [[0.0, 10.0, 30.0, 20.0]])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 4), st.integers(1, 5), st.integers(0, 6), st.integers(0, 2**31 - 1))
def test_in_top_k_matches_a_reference(batch, classes, k, seed):
    rng = np.random.default_rng(seed)
    p = rng.integers(0, 3, size=(batch, classes)).astype(np.float32)
    if batch and rng.random() < 0.3:
        p[rng.integers(batch), rng.integers(classes)] = rng.choice([np.nan, np.inf])
    t = rng.integers(-1, classes + 1, size=batch).astype(np.int32)
    with cs.Graph().as_default() as g:
        out = cs.nn.in_top_k(cs.placeholder(cs.float32, [None, classes], name="p"),
                             cs.placeholder(cs.int32, [None], name="t"), k)
    got = cs.Session(graph=g).run(out, {"p:0": p, "t:0": t})
    want = [bool(0 <= t[b] < classes and np.isfinite(p[b]).all()
                 and (p[b] > p[b, t[b]]).sum() < k) for b in range(batch)]
    assert got.dtype == np.bool_ and got.tolist() == want


# --------------------------------------------------------------------- dropout
def _dropout_graph(seed=None, graph_seed=None, **kw):
    g = cs.Graph()
    with g.as_default():
        if graph_seed is not None:
            cs.set_random_seed(graph_seed)
        x = cs.placeholder(cs.float32, [None, 200], name="x")
        y = cs.nn.dropout(x, seed=seed, **kw)
    return g, x, y


def test_dropout_drops_at_the_rate_and_scales_the_rest():
    g, x, y = _dropout_graph(rate=0.3, seed=1)
    out = cs.Session(graph=g).run(y, {x: np.ones((50, 200), np.float32)})
    assert abs((out == 0).mean() - 0.3) < 0.02
    np.testing.assert_allclose(np.unique(out[out != 0]), [1 / 0.7], rtol=1e-6)
    assert y.get_shape().as_list() == [None, 200] and y.dtype == cs.float32


def test_dropout_masks_repeat_across_programs_with_the_same_seeds():
    feed = np.ones((4, 200), np.float32)
    runs = []
    for _ in range(2):
        g, x, y = _dropout_graph(graph_seed=5, keep_prob=0.5)
        sess = cs.Session(graph=g)
        runs.append([sess.run(y, {x: feed}) for _ in range(2)])
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    assert not np.array_equal(runs[0][0], runs[0][1])  # each run draws a new mask
    g, x, y = _dropout_graph(graph_seed=6, keep_prob=0.5)
    assert not np.array_equal(cs.Session(graph=g).run(y, {x: feed}), runs[0][0])


def test_dropout_op_seed_alone_is_deterministic():
    feed = np.ones((4, 200), np.float32)
    a = [cs.Session(graph=g).run(y, {x: feed}) for g, x, y in
         (_dropout_graph(seed=3, rate=0.5) for _ in range(2))]
    np.testing.assert_array_equal(a[0], a[1])


def test_dropout_noise_shape_drops_whole_rows_and_gradient_is_the_mask():
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, 6])
        ns = cs.placeholder(cs.int32, [2])
        y = cs.nn.dropout(x, rate=0.5, noise_shape=ns, seed=2)
        assert y.get_shape().as_list() == [None, 6]
        with pytest.raises(ValueError):  # as TF: an unknown dim of x cannot fill it
            cs.nn.dropout(x, rate=0.5, noise_shape=[None, 1])
        (gx,) = cs.gradients(cs.reduce_sum(y), [x])
    out, grad = cs.Session(graph=g).run([y, gx], {x: np.ones((100, 6), np.float32),
                                                  ns: [100, 1]})
    assert all(len(set(row)) == 1 for row in out)
    assert 20 < (out[:, 0] == 0).sum() < 80
    np.testing.assert_array_equal(grad, out)  # ones in: the gradient is mask * 2


def test_dropout_noise_shape_from_the_batch_size():
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, 6])
        y = cs.nn.dropout(x, rate=0.5, noise_shape=[cs.shape(x)[0], 1], seed=4)
        assert y.get_shape().as_list() == [None, 6]
    out = cs.Session(graph=g).run(y, {x: np.ones((50, 6), np.float32)})
    assert all(len(set(row)) == 1 for row in out) and 0 < (out[:, 0] == 0).sum() < 50


def test_dropout_keep_prob_placeholder():
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, 200])
        kp = cs.placeholder(cs.float32, [])
        y = cs.nn.dropout(x, keep_prob=kp)
    sess = cs.Session(graph=g)
    feed = np.arange(800, dtype=np.float32).reshape(4, 200)
    np.testing.assert_array_equal(sess.run(y, {x: feed, kp: 1.0}), feed)
    half = sess.run(y, {x: feed + 1, kp: 0.5})
    assert set(np.unique(half / (feed + 1))) <= {0.0, 2.0}


def test_dropout_errors():
    with cs.Graph().as_default():
        x = cs.placeholder(cs.float32, [None, 3])
        with pytest.raises(ValueError, match="both"):
            cs.nn.dropout(x, keep_prob=0.5, rate=0.5)
        with pytest.raises(ValueError, match=r"\[0, 1\)"):
            cs.nn.dropout(x, rate=1.0)
        with pytest.raises(ValueError, match="scalar"):
            cs.nn.dropout(x, rate=cs.constant([0.1, 0.2]))
        with pytest.raises(ValueError, match="broadcast"):
            cs.nn.dropout(x, rate=0.1, noise_shape=[None, 2])
        with pytest.raises(ValueError, match="floating"):
            cs.nn.dropout(cs.constant([1, 2]), rate=0.1)
        assert cs.nn.dropout(x, rate=0.0) is x


def test_softmax_cross_entropy_v1_stops_gradients_into_labels():
    with cs.Graph().as_default():
        lg = cs.placeholder(cs.float32, [None, 3])
        lb = cs.placeholder(cs.float32, [None, 3])
        v1 = cs.nn.softmax_cross_entropy_with_logits(labels=lb, logits=lg)
        v2 = cs.nn.softmax_cross_entropy_with_logits_v2(labels=lb, logits=lg)
        assert cs.gradients(v1, [lb]) == [None]
        assert cs.gradients(v2, [lb])[0] is not None


@pytest.mark.parametrize("fn", [cs.random_uniform, cs.random_normal, cs.truncated_normal])
def test_random_ops_take_shape_tensors(fn):
    g = cs.Graph()
    with g.as_default():
        cs.set_random_seed(1)
        x = cs.placeholder(cs.float32, [None, 3])
        r = fn(cs.shape(x), seed=2)
        r2 = fn([cs.shape(x)[0], 2])
        assert r.get_shape().as_list() == [None, 3] and r2.get_shape().as_list() == [None, 2]
    a, b = cs.Session(graph=g).run([r, r2], {x: np.zeros((5, 3), np.float32)})
    assert a.shape == (5, 3) and b.shape == (5, 2) and a.dtype == np.float32
