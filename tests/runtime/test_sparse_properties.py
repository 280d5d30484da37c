"""Property tests: random gathers, embedding lookups and scatters match numpy in value and
gradient, across dtypes, empty dims and unknown (``None``) static dims."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptsync as cs

DTYPES = [(cs.float32, np.float32), (cs.float64, np.float64), (cs.int32, np.int32),
          (cs.int64, np.int64)]
SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _numpy_gather(p, idx, axis, b):
    if b == 0:
        return np.take(p, idx, axis=axis)
    if p.shape[0] == 0:  # an empty batch
        return np.zeros(p.shape[:axis] + idx.shape[b:] + p.shape[axis + 1:], p.dtype)
    return np.stack([_numpy_gather(p[k], idx[k], axis - 1, b - 1) for k in range(p.shape[0])])


@st.composite
def gathers(draw):
    rank = draw(st.integers(1, 3))
    pshape = [draw(st.integers(0 if k else 1, 3)) for k in range(rank)]
    axis = draw(st.integers(0, rank - 1))
    b = draw(st.integers(0, axis))
    ishape = pshape[:b] + [draw(st.integers(0, 3)) for _ in range(draw(st.integers(0, 2)))]
    if pshape[axis] == 0:
        ishape[b:] = [0] * (len(ishape) - b) or []
        if len(ishape) == b:
            ishape.append(0)
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, max(pshape[axis], 1), ishape)
    dt = draw(st.sampled_from(DTYPES))
    idt = draw(st.sampled_from([np.int32, np.int64]))
    unknown = draw(st.booleans())
    return (rng.normal(size=pshape) * 4).astype(dt[1]), idx.astype(idt), axis, b, dt[0], \
        unknown, draw(st.integers(-1, 0))


@SETTINGS
@given(gathers())
def test_gather_matches_numpy_with_gradient(case):
    p, idx, axis, b, dt, unknown, neg = case
    g = cs.Graph()
    with g.as_default():
        pshape = [None] * p.ndim if unknown else list(p.shape)
        ph = cs.placeholder(dt, pshape)
        ih = cs.placeholder(cs.as_dtype(idx.dtype), [None] * idx.ndim if unknown else idx.shape)
        ax = axis - p.ndim if (neg and not unknown) else axis
        out = cs.gather(ph, ih, axis=ax, batch_dims=b)
        want = _numpy_gather(p, idx, axis, b)
        assert out.shape.is_compatible_with(want.shape) and out.dtype == dt
        if not unknown:
            assert out.shape.as_list() == list(want.shape)
        sess = cs.Session()
        got = sess.run(out, {ph: p, ih: idx})
        np.testing.assert_array_equal(got, want)
        assert got.dtype == p.dtype
        if dt.is_floating:
            up = np.random.default_rng(1).normal(size=want.shape).astype(p.dtype)
            (gr,) = cs.gradients(out, ph, grad_ys=cs.constant(up))
            assert isinstance(gr, cs.IndexedSlices) == (axis == 0 and b == 0)
            dense = sess.run(cs.convert_to_tensor(gr), {ph: p, ih: idx})
            ref = np.zeros_like(p)
            view = np.moveaxis(ref, axis, b)
            n_i = idx.ndim - b  # TF's [B, mid, I, rest] -> [B, I, mid, rest]
            moved = np.moveaxis(up, list(range(axis, axis + n_i)), list(range(b, b + n_i)))
            for pos in np.ndindex(*idx.shape):
                key = pos[:b] + (idx[pos],)
                view[key] += moved[pos]
            np.testing.assert_allclose(dense, ref, rtol=1e-6, atol=1e-6)


@st.composite
def lookups(draw):
    n_p = draw(st.integers(1, 4))
    vocab = draw(st.integers(n_p, 12))
    dim = draw(st.integers(1, 3))
    strategy = draw(st.sampled_from(["mod", "div"]))
    ids_shape = [draw(st.integers(0, 3)) for _ in range(draw(st.integers(1, 2)))]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    return vocab, dim, n_p, strategy, rng.integers(0, vocab, ids_shape), rng


@SETTINGS
@given(lookups())
def test_partitioned_embedding_lookup_matches_one_table(case):
    vocab, dim, n_p, strategy, ids, rng = case
    table = rng.normal(size=(vocab, dim))
    if strategy == "mod":
        rows = [np.arange(vocab)[k::n_p] for k in range(n_p)]
    else:
        per, extra = divmod(vocab, n_p)
        bounds = np.cumsum([0] + [per + (k < extra) for k in range(n_p)])
        rows = [np.arange(bounds[k], bounds[k + 1]) for k in range(n_p)]
    g = cs.Graph()
    with g.as_default():
        parts = [cs.placeholder(cs.float64, [None, dim]) for _ in range(n_p)]
        ih = cs.placeholder(cs.int64, [None] * ids.ndim)
        out = cs.nn.embedding_lookup(parts, ih, partition_strategy=strategy)
        feed = {ph: table[r] for ph, r in zip(parts, rows)}
        feed[ih] = ids
        sess = cs.Session()
        np.testing.assert_array_equal(sess.run(out, feed), table[ids])
        grads = cs.gradients(cs.reduce_sum(out * 2.0), parts)
        counts = np.bincount(ids.reshape(-1), minlength=vocab).astype(np.float64)
        for gr, r in zip(grads, rows):
            if gr is None:
                continue
            got = sess.run(cs.convert_to_tensor(gr), feed)
            np.testing.assert_allclose(got, np.repeat(2 * counts[r, None], dim, 1))


@SETTINGS
@given(st.sampled_from(DTYPES), st.integers(1, 6), st.integers(0, 5),
       st.sampled_from(["update", "add", "sub", "mul", "min", "max"]), st.integers(0, 2**16))
def test_scatter_matches_numpy(dt, rows, n, how, seed):
    rng = np.random.default_rng(seed)
    init = (rng.normal(size=(rows, 2)) * 5).astype(dt[1])
    idx = rng.integers(0, rows, n)
    upd = (rng.normal(size=(n, 2)) * 5).astype(dt[1])
    g = cs.Graph()
    with g.as_default():
        w = cs.Variable(init)
        op = getattr(cs, f"scatter_{how}")
        ih = cs.placeholder(cs.int32, [None])
        uh = cs.placeholder(dt[0], [None, 2])
        out = op(w, ih, uh)
        sess = cs.Session()
        sess.run(cs.global_variables_initializer())
        before = sess.run(w)
        got = sess.run(out, {ih: idx, uh: upd})
        want = init.copy()
        if how == "update":
            want[idx] = upd
        else:
            ufunc = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                     "min": np.minimum, "max": np.maximum}[how]
            ufunc.at(want, idx, upd)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(sess.run(w), want)
        np.testing.assert_array_equal(before, init)  # a held fetch is never written
