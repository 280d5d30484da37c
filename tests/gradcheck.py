"""The central-difference gradient checker the op test modules share.

A case table (``GRAD_CASES`` in ``tests/runtime/test_*_ops.py``) maps a name to
``(build, gens)``: ``build(*float64 placeholders) -> tensor`` and ``gens``, a list of
``(gen, shape)`` whose ``gen(shape)`` draws one input. ``check_case`` builds the graph,
projects the output on random weights (so every output element's gradient counts) and
compares ``cs.gradients`` with central differences of the projected sum.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

import ckptsync as cs


def numeric_gradient(f: Callable[[], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences ``(f(x + eps) - f(x - eps)) / (2 eps)`` of the scalar ``f()``
    in each element of ``x``, which is perturbed in place (``f`` reads it, e.g. as a fed
    value) and restored after each element."""
    grad = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        old = x[i]
        x[i] = old + eps
        hi = f()
        x[i] = old - eps
        lo = f()
        x[i] = old
        grad[i] = (hi - lo) / (2 * eps)
    return grad


def check_gradients(loss, xs, feed, sess, *, rtol=1e-5, atol=1e-5, eps=1e-6, name=""):
    """Asserts ``cs.gradients(loss, xs)`` (IndexedSlices made dense) equals central
    differences of ``sess.run(loss, feed)`` in each ``feed[x]`` (perturbed in place)."""
    with loss.graph.as_default():
        grads = [cs.convert_to_tensor(g) if isinstance(g, cs.IndexedSlices) else g
                 for g in cs.gradients(loss, xs)]
    got = sess.run(grads, feed)
    for i, (x, g) in enumerate(zip(xs, got)):
        want = numeric_gradient(lambda: float(sess.run(loss, feed)), feed[x], eps)
        np.testing.assert_allclose(g, want, rtol=rtol, atol=atol,
                                   err_msg=f"{name}: gradient of input {i} ({x.name})")


def check_values(build, values: Sequence[np.ndarray], rng: np.random.Generator, *,
                 rtol=1e-5, atol=1e-5, eps=1e-6, cast=False, name=""):
    """Checks the gradient of ``sum(build(*placeholders) * r)`` in each of ``values``
    (float64 arrays, fed to float64 placeholders of their shapes; perturbed in place and
    restored); ``r`` is drawn from ``rng`` with the output's shape (the static one, else
    the shape of a run). ``cast``: the output is cast to float64 first."""
    g = cs.Graph()
    with g.as_default():
        phs = [cs.placeholder(cs.float64, v.shape) for v in values]
        y = build(*phs)
        if cast:
            y = cs.cast(y, cs.float64)
        sess = cs.Session(graph=g)
        feed = dict(zip(phs, values))
        shape = y.get_shape()
        dims = shape.as_list() if shape.is_fully_defined() else sess.run(y, feed).shape
        loss = cs.reduce_sum(y * cs.constant(rng.normal(size=dims)))
        check_gradients(loss, phs, feed, sess, rtol=rtol, atol=atol, eps=eps, name=name)


def check_case(build, gens, rng: np.random.Generator, *, rtol=1e-5, atol=1e-5, eps=1e-6,
               cast=False, name=""):
    """``check_values`` of inputs drawn by ``gens`` (``[(gen, shape), ...]``, each
    ``gen(shape)`` cast to float64), in order, before ``rng`` draws the projection."""
    values = [gen(shape).astype(np.float64) for gen, shape in gens]
    check_values(build, values, rng, rtol=rtol, atol=atol, eps=eps, cast=cast, name=name)
