"""conv2d, conv2d_transpose, max_pool, avg_pool: central-difference gradients (first and
second order), random configurations against a direct loop reference, and errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptsync as cs
from ckptsync.errors import InvalidArgumentError
from tests.gradcheck import check_values

RNG = np.random.default_rng(17)


def _numeric_check(build, arrays, eps=1e-6, tol=1e-5):
    """``build(*placeholders) -> tensor``; compares d sum(out * r) / d inputs numerically."""
    check_values(build, arrays, RNG, rtol=tol, atol=tol, eps=eps)


def _apart(*shape):
    # distinct values at least 0.05 apart: no max-pool ties within +-eps
    v = RNG.permutation(np.arange(int(np.prod(shape)), dtype=np.float64)) * 0.05 - 1.0
    return v.reshape(shape)


CONV = [
    dict(strides=1, padding="SAME"),
    dict(strides=[1, 2, 2, 1], padding="SAME"),
    dict(strides=[2, 1], padding="VALID"),
    dict(strides=1, padding="SAME", dilations=[1, 2, 2, 1]),
    dict(strides=2, padding="VALID", dilations=2),
    dict(strides=1, padding=[[0, 0], [1, 0], [2, 1], [0, 0]]),
]


@pytest.mark.parametrize("kw", CONV, ids=[str(k) for k in CONV])
def test_conv2d_gradients(kw):
    _numeric_check(lambda x, w: cs.nn.conv2d(x, w, **kw),
                   [RNG.normal(size=(2, 5, 6, 2)), RNG.normal(size=(3, 2, 2, 3))])


@pytest.mark.parametrize("kw", [dict(strides=2, padding="SAME"), dict(strides=2, padding="VALID"),
                                dict(strides=1, padding="SAME")])
def test_conv2d_transpose_gradients(kw):
    out_shape = {"SAME": [2, 6, 5, 3], "VALID": [2, 7, 6, 3]}[kw["padding"]]
    if kw["strides"] == 1:
        out_shape = [2, 3, 3, 3]
    _numeric_check(lambda v, w: cs.nn.conv2d_transpose(v, w, out_shape, **kw),
                   [RNG.normal(size=(2, 3, 3, 2)), RNG.normal(size=(3, 2, 3, 2))])


def test_conv2d_second_order_gradients():
    # d/dx of (d loss / d w) exercises the gradients of Conv2DBackpropFilter and -Input.
    def build(x, w):
        y = cs.nn.conv2d(x, w, strides=2, padding="SAME")
        gx, gw = cs.gradients(y, [x, w], grad_ys=y)  # d(sum(y * y) / 2)
        return cs.reduce_sum(gx * gx) + cs.reduce_sum(gw * gw)

    def wrapped(x, w):
        return cs.reshape(build(x, w), [1])

    _numeric_check(wrapped, [RNG.normal(size=(1, 4, 4, 2)), RNG.normal(size=(2, 2, 2, 2))],
                   tol=1e-4)


POOL = [
    dict(ksize=2, strides=2, padding="VALID"),
    dict(ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME"),
    dict(ksize=3, strides=1, padding="SAME"),
    dict(ksize=[2, 3], strides=[1, 2], padding="SAME"),
]


@pytest.mark.parametrize("fn", ["max_pool", "avg_pool"])
@pytest.mark.parametrize("kw", POOL, ids=[str(k) for k in POOL])
def test_pool_gradients(fn, kw):
    _numeric_check(lambda x: getattr(cs.nn, fn)(x, **kw), [_apart(2, 5, 6, 2)])


@pytest.mark.parametrize("fn", ["max_pool", "avg_pool"])
def test_pool_second_order_gradients(fn):
    def build(x):
        y = getattr(cs.nn, fn)(x, 3, 2, "SAME")
        (gx,) = cs.gradients(y, [x], grad_ys=y)  # d(sum(y * y) / 2)
        return cs.reshape(cs.reduce_sum(gx * gx * x), [1])

    _numeric_check(build, [_apart(1, 5, 5, 2)], tol=1e-4)


# --------------------------------------------------------------------- direct reference
def _pads(size, k, s, d, padding):
    k_eff = (k - 1) * d + 1
    if padding == "VALID":
        return (size - k_eff) // s + 1, 0
    out = -(-size // s)
    return out, max((out - 1) * s + k_eff - size, 0) // 2


def _ref_conv(x, w, s, d, padding):
    n, h, wd, c = x.shape
    kh, kw, _, o = w.shape
    oh, pt = _pads(h, kh, s, d, padding)
    ow, pl = _pads(wd, kw, s, d, padding)
    out = np.zeros((n, oh, ow, o))
    for i in range(oh):
        for j in range(ow):
            for a in range(kh):
                for b in range(kw):
                    r, q = i * s + a * d - pt, j * s + b * d - pl
                    if 0 <= r < h and 0 <= q < wd:
                        out[:, i, j] += x[:, r, q] @ w[a, b]
    return out


def _ref_pool(x, k, s, padding, kind):
    n, h, wd, c = x.shape
    oh, pt = _pads(h, k, s, 1, padding)
    ow, pl = _pads(wd, k, s, 1, padding)
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            r0, q0 = max(i * s - pt, 0), max(j * s - pl, 0)
            win = x[:, r0:i * s - pt + k, q0:j * s - pl + k]
            out[:, i, j] = win.max(axis=(1, 2)) if kind == "max" else win.mean(axis=(1, 2))
    return out


configs = st.fixed_dictionaries({
    "n": st.integers(0, 3), "h": st.integers(1, 7), "w": st.integers(1, 7),
    "c": st.integers(1, 3), "o": st.integers(1, 3), "k": st.integers(1, 3),
    "s": st.integers(1, 3), "d": st.integers(1, 2), "padding": st.sampled_from(["SAME", "VALID"]),
    "dtype": st.sampled_from([np.float32, np.float64]), "known": st.booleans(),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs, st.integers(0, 2**31 - 1))
def test_conv_and_pool_match_a_direct_loop(cfg, seed):
    rng = np.random.default_rng(seed)
    k_eff = (cfg["k"] - 1) * cfg["d"] + 1
    if cfg["padding"] == "VALID" and (cfg["h"] < k_eff or cfg["w"] < k_eff):
        return
    x = rng.normal(size=(cfg["n"], cfg["h"], cfg["w"], cfg["c"])).astype(cfg["dtype"])
    w = rng.normal(size=(cfg["k"], cfg["k"], cfg["c"], cfg["o"])).astype(cfg["dtype"])
    dt = cs.float32 if cfg["dtype"] == np.float32 else cs.float64
    g = cs.Graph()
    with g.as_default():
        shp = list(x.shape) if cfg["known"] else [None, None, None, cfg["c"]]
        xp = cs.placeholder(dt, shp)
        conv = cs.nn.conv2d(xp, w, strides=cfg["s"], padding=cfg["padding"],
                            dilations=cfg["d"])
        mx = cs.nn.max_pool(xp, cfg["k"], cfg["s"], cfg["padding"])
        av = cs.nn.avg_pool(xp, cfg["k"], cfg["s"], cfg["padding"])
        with cs.Session() as sess:
            got = sess.run([conv, mx, av], {xp: x})
    tol = 1e-4 if cfg["dtype"] == np.float32 else 1e-10
    want = [_ref_conv(x.astype(np.float64), w.astype(np.float64), cfg["s"], cfg["d"],
                      cfg["padding"]),
            _ref_pool(x, cfg["k"], cfg["s"], cfg["padding"], "max"),
            _ref_pool(x, cfg["k"], cfg["s"], cfg["padding"], "avg")]
    for t, gv, wv in zip((conv, mx, av), got, want):
        assert gv.dtype == cfg["dtype"]
        assert gv.shape == wv.shape
        assert t.shape.is_compatible_with(gv.shape)
        if cfg["known"]:
            assert t.shape.as_list() == list(gv.shape)
        np.testing.assert_allclose(gv, wv, rtol=tol, atol=tol)


# --------------------------------------------------------------------- errors
def test_nchw_is_a_clear_build_time_error():
    x = cs.placeholder(cs.float32, [1, 2, 4, 4])
    with pytest.raises(ValueError, match="data_format 'NCHW' is not supported"):
        cs.nn.conv2d(x, np.ones((2, 2, 2, 1), np.float32), 1, "SAME", data_format="NCHW")
    with pytest.raises(ValueError, match="MaxPool: data_format 'NCHW'"):
        cs.nn.max_pool(x, 2, 2, "SAME", data_format="NCHW")


def test_batch_strides_and_grouped_convolutions_are_refused():
    x = cs.placeholder(cs.float32, [1, 4, 4, 4])
    with pytest.raises(ValueError, match="strides .* batch and depth"):
        cs.nn.conv2d(x, np.ones((2, 2, 4, 1), np.float32), [2, 1, 1, 1], "SAME")
    with pytest.raises(ValueError, match="grouped convolutions are not supported"):
        cs.nn.conv2d(x, np.ones((2, 2, 2, 1), np.float32), 1, "SAME")
    with pytest.raises(ValueError, match="ksize should be of length 1, 2 or 4"):
        cs.nn.max_pool(x, [2, 2, 2], 1, "SAME")


def test_conv2d_transpose_shape_mismatch_is_an_invalid_argument_at_run_time():
    v = cs.placeholder(cs.float32, [None, 3, 3, 2])
    out = cs.nn.conv2d_transpose(v, np.ones((3, 3, 4, 2), np.float32), [1, 5, 5, 4], 1, "SAME")
    assert out.shape.as_list() == [None, 5, 5, 4]
    with cs.Session() as sess:
        with pytest.raises(InvalidArgumentError, match="Size of out_backprop doesn't match"):
            sess.run(out, {v: np.ones((1, 3, 3, 2), np.float32)})


def test_unknown_input_channels_mismatch_is_an_invalid_argument_at_run_time():
    x = cs.placeholder(cs.float32, None)
    y = cs.nn.conv2d(x, np.ones((2, 2, 3, 1), np.float32), 1, "VALID")
    with cs.Session() as sess:
        with pytest.raises(InvalidArgumentError, match="input depth must equal"):
            sess.run(y, {x: np.ones((1, 3, 3, 2), np.float32)})
