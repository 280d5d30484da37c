"""Property tests of ``cs.layers`` against numpy: dense on random shapes and dtypes (an
unknown batch dim, empty batches, rank > 2), batch normalization in training and
inference over random shapes and axes, flatten with unknown dims."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptsync as cs

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(lead=st.lists(st.integers(0, 3), min_size=1, max_size=3), din=st.integers(1, 4),
       units=st.integers(1, 4), dtype=st.sampled_from([np.float32, np.float64]),
       use_bias=st.booleans(), seed=st.integers(0, 2**16))
def test_dense_matches_numpy(lead, din, units, dtype, use_bias, seed):
    rng = np.random.RandomState(seed)
    xv = rng.randn(*lead, din).astype(dtype)
    kv = rng.randn(din, units)
    with cs.Graph().as_default():
        x = cs.placeholder(cs.as_dtype(dtype), [None, *lead[1:], din])
        y = cs.layers.dense(x, units, use_bias=use_bias, kernel_initializer=cs.constant_initializer(kv),
                            bias_initializer=cs.constant_initializer(0.5))
        assert y.dtype.base_dtype == cs.as_dtype(dtype)
        assert y.shape.as_list() == [None, *lead[1:], units]
        (gx,) = cs.gradients(cs.reduce_sum(y * y), [x])
        with cs.Session() as s:
            s.run(cs.global_variables_initializer())
            got, g = s.run([y, gx], {x: xv})
    want = xv.astype(np.float64) @ kv + (0.5 if use_bias else 0.0)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(g, 2 * want @ kv.T, rtol=tol * 10, atol=tol * 10)


@SETTINGS
@given(shape=st.lists(st.integers(2, 4), min_size=2, max_size=4), data=st.data(),
       training=st.booleans(), momentum=st.floats(0.0, 0.99), seed=st.integers(0, 2**16))
def test_batch_norm_matches_numpy(shape, data, training, momentum, seed):
    axis = data.draw(st.sampled_from([-1, 1] if len(shape) > 2 else [-1]))
    rng = np.random.RandomState(seed)
    xv = (rng.randn(*shape) * 2 + 1).astype(np.float32)
    ax = axis % len(shape)
    axes = tuple(i for i in range(len(shape)) if i != ax)
    c = shape[ax]
    gamma, beta = rng.rand(c) + 0.5, rng.randn(c)
    with cs.Graph().as_default():
        x = cs.placeholder(cs.float32, shape)
        y = cs.layers.batch_normalization(
            x, axis=axis, training=training, momentum=momentum,
            gamma_initializer=cs.constant_initializer(gamma),
            beta_initializer=cs.constant_initializer(beta))
        ups = cs.get_collection(cs.GraphKeys.UPDATE_OPS)
        mm, mv = cs.global_variables()[2:]
        with cs.Session() as s:
            s.run(cs.global_variables_initializer())
            got = s.run(y, {x: xv})
            if ups:
                s.run(ups, {x: xv})
            mmv, mvv = s.run([mm, mv])
    bshape = [1] * len(shape)
    bshape[ax] = c
    if training:
        mean, var = xv.mean(axes), xv.var(axes)
    else:
        mean, var = np.zeros(c), np.ones(c)
    r = lambda v: np.reshape(v, bshape)  # noqa: E731
    want = (xv - r(mean)) / np.sqrt(r(var) + 1e-3) * r(gamma) + r(beta)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    if training:
        fused = len(shape) == 4 and ax in (1, 3)
        n = xv.size // c
        uvar = var * n / (n - 1) if fused else var
        np.testing.assert_allclose(mmv, momentum * 0 + (1 - momentum) * mean, rtol=1e-4,
                                   atol=1e-5)
        np.testing.assert_allclose(mvv, momentum * 1 + (1 - momentum) * uvar, rtol=1e-4,
                                   atol=1e-5)
    else:
        assert not ups and (mmv == 0).all() and (mvv == 1).all()


@SETTINGS
@given(dims=st.lists(st.integers(1, 3), min_size=1, max_size=4), batch=st.integers(0, 3),
       unknown=st.lists(st.booleans(), min_size=5, max_size=5))
def test_flatten_matches_numpy(dims, batch, unknown):
    xv = np.arange(batch * int(np.prod(dims)), dtype=np.float32).reshape(batch, *dims)
    static = [None if u else d for d, u in zip(dims, unknown)]
    if batch == 0 and None in static:
        batch = 1  # TF cannot infer -1 for an empty tensor either
        xv = np.arange(int(np.prod(dims)), dtype=np.float32).reshape(1, *dims)
    with cs.Graph().as_default():
        x = cs.placeholder(cs.float32, [None, *static])
        f = cs.layers.flatten(x)
        known = None if any(d is None for d in static) else int(np.prod(dims))
        assert f.shape.as_list() == [None, known]
        with cs.Session() as s:
            got = s.run(f, {x: xv})
    np.testing.assert_array_equal(got, xv.reshape(batch, int(np.prod(dims))))
