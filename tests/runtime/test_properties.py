"""Property test: random elementwise/broadcast graphs match numpy in value and gradient."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptsync as cs

UNARY = {
    "neg": (cs.negative, np.negative),
    "square": (cs.square, np.square),
    "tanh": (cs.nn.tanh, np.tanh),
    "sigmoid": (cs.nn.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "exp_small": (lambda t: cs.exp(t * 0.1), lambda x: np.exp(x * 0.1)),
}
BINARY = {
    "add": (cs.add, np.add),
    "sub": (cs.subtract, np.subtract),
    "mul": (cs.multiply, np.multiply),
}


@st.composite
def shapes(draw):
    base = draw(st.lists(st.integers(1, 3), min_size=0, max_size=3))
    a = [d if draw(st.booleans()) else 1 for d in base]
    b = [d if draw(st.booleans()) else 1 for d in base]
    # drop leading dims of b sometimes (numpy's rank broadcasting)
    cut = draw(st.integers(0, len(b)))
    return tuple(a), tuple(b[cut:])


@st.composite
def programs(draw):
    n = draw(st.integers(1, 6))
    steps = []
    for _ in range(n):
        if draw(st.booleans()):
            steps.append(("u", draw(st.sampled_from(sorted(UNARY)))))
        else:
            steps.append(("b", draw(st.sampled_from(sorted(BINARY))), draw(st.booleans())))
    return steps


def run_program(steps, a, b, lib):
    acc = a
    for s in steps:
        if s[0] == "u":
            acc = UNARY[s[1]][lib](acc)
        else:
            other = b if s[2] else a
            acc = BINARY[s[1]][lib](acc, other)
    return acc


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes(), programs(), st.integers(0, 2**31 - 1))
def test_random_elementwise_graphs_match_numpy(shp, steps, seed):
    sa, sb = shp
    rng = np.random.default_rng(seed)
    av, bv = rng.normal(size=sa), rng.normal(size=sb)
    g = cs.Graph()
    with g.as_default():
        a = cs.placeholder(cs.float64, sa)
        b = cs.placeholder(cs.float64, sb)
        y = run_program(steps, a, b, 0)
        out_shape = np.broadcast_shapes(sa, sb) if any(s[0] == "b" and s[2] for s in steps) else sa
        proj_v = rng.normal(size=np.broadcast_shapes(out_shape, y.get_shape().as_list()))
        loss = cs.reduce_sum(y * cs.constant(proj_v))
        grads = cs.gradients(loss, [a, b])
    sess = cs.Session(graph=g)
    feed = {a: av, b: bv}
    want = run_program(steps, av, bv, 1)
    got = sess.run(y, feed)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert got.shape == np.shape(want)
    assert y.get_shape().as_list() == list(np.shape(want))

    def f(av_, bv_):
        return float(np.sum(np.broadcast_to(run_program(steps, av_, bv_, 1), proj_v.shape) * proj_v))

    ga, gb = sess.run([gr if gr is not None else a for gr in grads], feed)
    for i, (val, got_g, grad_t) in enumerate(((av, ga, grads[0]), (bv, gb, grads[1]))):
        num = np.zeros_like(val)
        flat = val.reshape(-1)
        for k in range(flat.size):
            old = flat[k]
            flat[k] = old + 1e-6
            fp = f(av, bv)
            flat[k] = old - 1e-6
            fm = f(av, bv)
            flat[k] = old
            num.reshape(-1)[k] = (fp - fm) / 2e-6
        # The central difference's own rounding error is ~eps * |f| / h: programs that
        # square repeatedly reach |f| ~ 1e8, where that is ~1e-2 (the analytic gradient is
        # the exact one).
        atol = 1e-6 + 4 * np.finfo(np.float64).eps * abs(f(av, bv)) / 1e-6
        if grad_t is None:
            np.testing.assert_allclose(num, 0, atol=atol)
        else:
            np.testing.assert_allclose(got_g, num, rtol=1e-5, atol=atol, err_msg=f"input {i}")
