"""Selection, index and segment ops (issue 17, part "select"): gradients against central
differences, random inputs against numpy references across dtypes, empty and unknown
dims, and the errors TF raises (the values TF gives are in ``tests/goldens/select.json``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptsync as cs
from ckptsync.errors import InvalidArgumentError
from tests.gradcheck import check_case

RNG = np.random.default_rng(17)


def _any(shape):
    return RNG.normal(size=shape)


def _apart(shape):
    # distinct values at least 0.1 apart: no ties within +-eps for max/min
    v = RNG.permutation(np.arange(np.prod(shape), dtype=np.float64)) * 0.37 - 1.3
    return v.reshape(shape) + 0.05


def _i(v, dt=np.int32):
    return cs.constant(np.asarray(v, dt))


_IDS = [0, 0, 1, 3, 3]
_UIDS = [2, 0, -1, 2, 1]

# name -> (builder(*float64 placeholders) -> tensor, [(generator, shape)])
GRAD_CASES = {
    "gather_nd_elements": (lambda a: cs.gather_nd(a, _i([[0, 1], [2, 0], [0, 1]])),
                           [(_any, (3, 2))]),
    "gather_nd_slices": (lambda a: cs.gather_nd(a, _i([[[1]], [[1]], [[0]]], np.int64)),
                         [(_any, (2, 3))]),
    "gather_nd_batch_dims": (lambda a: cs.gather_nd(a, _i([[[1], [1], [0]], [[0], [2], [2]]]),
                                                    batch_dims=1), [(_any, (2, 3, 2))]),
    "gather_nd_whole": (lambda a: cs.gather_nd(a, _i(np.zeros((2, 0)))), [(_any, (2, 2))]),
    "where_select": (lambda a, b: cs.where(cs.greater(a, 0.0), a, b),
                     [(_apart, (3, 2)), (_any, (3, 2))]),
    "where_select_rows": (lambda a, b: cs.where(cs.constant([True, False, True]), a, b),
                          [(_any, (3, 2)), (_any, (3, 2))]),
    "where_v2_broadcast": (lambda a, b: cs.where_v2(cs.constant([[True], [False]]), a, b),
                           [(_any, (3,)), (_any, (2, 1))]),
    "boolean_mask": (lambda a: cs.boolean_mask(a, cs.constant([[True, False], [True, True]]),
                                               axis=1), [(_any, (2, 2, 2, 3))]),
    "dynamic_partition": (lambda a: cs.concat(
        cs.dynamic_partition(a, _i([1, 0, 1, 2]), 3)[1:], 0) * 2.0, [(_any, (4, 2))]),
    "segment_sum": (lambda a: cs.segment_sum(a, _i(_IDS)), [(_any, (5, 2))]),
    "segment_mean": (lambda a: cs.segment_mean(a, _i(_IDS, np.int64)), [(_any, (5, 2))]),
    "segment_max": (lambda a: cs.segment_max(a, _i(_IDS)), [(_apart, (5, 2))]),
    "segment_prod": (lambda a: cs.segment_prod(a, _i(_IDS)), [(_any, (5, 2))]),
    "dynamic_stitch": (lambda a, b: cs.dynamic_stitch([_i([[0, 3], [1, 5]]), _i([2, 4])], [a, b]),
                       [(_any, (2, 2, 3)), (_any, (2, 3))]),
    "segment_min": (lambda a: cs.segment_min(a, _i(_IDS)), [(_apart, (5, 2))]),
    "unsorted_segment_sum": (lambda a: cs.unsorted_segment_sum(a, _i(_UIDS), 4),
                             [(_any, (5, 2))]),
    "unsorted_segment_mean": (lambda a: cs.unsorted_segment_mean(a, _i([[0, 1], [1, 1]]), 2),
                              [(_any, (2, 2, 3))]),
    "unsorted_segment_max": (lambda a: cs.unsorted_segment_max(a, _i(_UIDS), 3),
                             [(_apart, (5, 2))]),
    "unsorted_segment_min": (lambda a: cs.unsorted_segment_min(a, _i(_UIDS), 3),
                             [(_apart, (5, 2))]),
    "unsorted_segment_prod": (lambda a: cs.unsorted_segment_prod(a, _i(_UIDS), 3),
                              [(_any, (5, 2))]),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradient_matches_central_differences(name):
    build, gens = GRAD_CASES[name]
    # the projection takes the output's run-time shape where the static one is partial
    check_case(build, gens, RNG, rtol=1e-5, atol=1e-5, name=name)


def test_segment_max_gradient_is_shared_among_ties():
    with cs.Graph().as_default():
        x = cs.placeholder(cs.float32, [4])
        y = cs.segment_max(x, [0, 0, 0, 1])
        (gx,) = cs.gradients(y, [x])
        out = cs.Session().run(gx, {x: [2.0, 2.0, 1.0, 5.0]})
    np.testing.assert_allclose(out, [0.5, 0.5, 0.0, 1.0])


def test_no_gradient_for_indices_one_hot_range_and_unique():
    with cs.Graph().as_default():
        x = cs.placeholder(cs.float32, [3])
        on = cs.placeholder(cs.float32, [])
        hot = cs.one_hot([0, 2], 3, on_value=on, off_value=0.0)
        y = cs.reduce_sum(hot * x) + cs.reduce_sum(cs.range(0.0, 3.0) * x)
        assert cs.gradients(y, [on]) == [None]
        assert cs.gradients(cs.where(x > 0.0), [x]) == [None]
        with pytest.raises(LookupError):
            cs.gradients(cs.unique(x).y, [x])


# --------------------------------------------------------------------- properties
_DTYPES = [np.float32, np.float64, np.int32, np.int64]


def _values(rng, shape, dt):
    if np.dtype(dt).kind == "f":
        return rng.normal(size=shape).astype(dt)
    return rng.integers(-5, 6, size=shape).astype(dt)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 3), min_size=1, max_size=3), st.integers(0, 3),
       st.integers(0, 4), st.sampled_from(_DTYPES), st.integers(0, 2**31 - 1))
def test_gather_nd_matches_numpy(pshape, k, n, dt, seed):
    rng = np.random.default_rng(seed)
    k = min(k, len(pshape))
    if any(d == 0 for d in pshape[:k]):
        n = 0
    params = _values(rng, pshape, dt)
    idx = np.stack([rng.integers(0, max(d, 1), size=n) for d in pshape[:k]], -1) if k else \
        np.zeros((n, 0), np.int64)
    idx = idx.reshape(n, k).astype(np.int64)
    want = np.array([params[tuple(r)] for r in idx]).reshape((n,) + params.shape[k:])
    with cs.Graph().as_default():
        p = cs.placeholder(cs.as_dtype(dt), [None] * len(pshape))
        i = cs.placeholder(cs.int64, [None, k])
        out = cs.gather_nd(p, i)
        assert out.shape.as_list() == [None] * (1 + len(pshape) - k)
        got = cs.Session().run(out, {p: params, i: idx})
    assert got.dtype == want.dtype or n == 0
    np.testing.assert_array_equal(got, want.astype(dt))


def _reference(kind, data, ids, num):
    rest = data.shape[ids.ndim:]
    rows = data.reshape((-1,) + rest)
    flat = ids.reshape(-1)
    init = {"sum": 0, "mean": 0, "prod": 1,
            "max": np.finfo(data.dtype).min if data.dtype.kind == "f" else np.iinfo(data.dtype).min,
            "min": np.finfo(data.dtype).max if data.dtype.kind == "f" else np.iinfo(data.dtype).max}
    out = np.full((num,) + rest, init[kind], data.dtype)
    for s in range(num):
        sel = rows[flat == s]
        if len(sel):
            fn = {"sum": np.sum, "mean": np.mean, "prod": np.prod, "max": np.max, "min": np.min}
            r = fn[kind](sel, axis=0)
            out[s] = r if kind != "mean" or data.dtype.kind == "f" else sel.sum(0) // len(sel)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["sum", "mean", "prod", "max", "min"]), st.integers(0, 6),
       st.integers(0, 2), st.integers(1, 4), st.sampled_from(_DTYPES),
       st.integers(0, 2**31 - 1))
def test_unsorted_segments_match_numpy(kind, n, extra, num, dt, seed):
    rng = np.random.default_rng(seed)
    data = _values(rng, (n, 2) + (3,) * extra, dt)
    ids = rng.integers(-1, num, size=(n, 2)).astype(np.int32)
    with cs.Graph().as_default():
        d = cs.placeholder(cs.as_dtype(dt), [None, 2] + [None] * extra)
        i = cs.placeholder(cs.int32, [None, None])
        out = getattr(cs, f"unsorted_segment_{kind}")(d, i, num)
        assert out.shape.as_list() == [num] + [None] * extra
        got = cs.Session().run(out, {d: data, i: ids})
    want = _reference(kind, data, ids, num)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["sum", "mean", "max", "min"]), st.lists(st.integers(0, 2), max_size=6),
       st.sampled_from(_DTYPES), st.integers(0, 2**31 - 1))
def test_sorted_segments_match_numpy(kind, steps, dt, seed):
    rng = np.random.default_rng(seed)
    ids = np.cumsum(steps).astype(np.int64)
    data = _values(rng, (len(ids), 3), dt)
    num = int(ids[-1]) + 1 if len(ids) else 0
    want = _reference(kind, data, ids, num)
    if kind in ("max", "min"):  # empty sorted segments are 0, not the dtype's extreme
        empty = np.bincount(ids, minlength=num) == 0
        want[empty] = 0
    with cs.Graph().as_default():
        d = cs.placeholder(cs.as_dtype(dt), [None, 3])
        got = cs.Session().run(getattr(cs, f"segment_{kind}")(d, ids), {d: data})
    # float32 sums in another order: a result near 0 differs by ~1e-8 absolutely
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 if dt == np.float32 else 1e-12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 3), min_size=1, max_size=3), st.integers(0, 2),
       st.integers(0, 2**31 - 1))
def test_boolean_mask_and_where_match_numpy(shape, axis, seed):
    rng = np.random.default_rng(seed)
    axis = min(axis, len(shape) - 1)
    k = rng.integers(1, len(shape) - axis + 1)
    x = rng.normal(size=shape)
    mask = rng.random(shape[axis:axis + k]) > 0.5
    flat = x.reshape(tuple(shape[:axis]) + (mask.size,) + tuple(shape[axis + k:]))
    want = np.compress(mask.reshape(-1), flat, axis=axis)
    with cs.Graph().as_default():
        t = cs.placeholder(cs.float64, [None] * len(shape))
        m = cs.placeholder(cs.bool, [None] * int(k))
        out = cs.boolean_mask(t, m, axis=axis)
        idx = cs.where(t > 0.0)
        got, got_idx = cs.Session().run([out, idx], {t: x, m: mask})
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_idx, np.argwhere(x > 0))
    assert got_idx.dtype == np.int64


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 3), max_size=3), st.lists(st.booleans(), min_size=3, max_size=3),
       st.integers(0, 2**31 - 1))
def test_where_v2_broadcasts_as_numpy(shape, keep, seed):
    rng = np.random.default_rng(seed)
    shapes = [tuple(d if kp else 1 for d in shape[i:]) for i, kp in enumerate(keep[:len(shape)])]
    shapes += [tuple(shape)] * (3 - len(shapes))
    c = rng.random(shapes[0]) > 0.5
    x, y = rng.normal(size=shapes[1]), rng.normal(size=shapes[2])
    with cs.Graph().as_default():
        cp = cs.placeholder(cs.bool, shapes[0])
        xp = cs.placeholder(cs.float64, [None] * len(shapes[1]))
        yp = cs.placeholder(cs.float64, shapes[2])
        out = cs.where_v2(cp, xp, yp)
        got = cs.Session().run(out, {cp: c, xp: x, yp: y})
    np.testing.assert_array_equal(got, np.where(c, x, y))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 8), st.integers(1, 4), st.sampled_from(_DTYPES),
       st.integers(0, 2**31 - 1))
def test_unique_and_dynamic_partition_match_reference(n, parts, dt, seed):
    rng = np.random.default_rng(seed)
    x = _values(rng, (n,), dt)
    p = rng.integers(0, parts, size=n).astype(np.int32)
    with cs.Graph().as_default():
        xp = cs.placeholder(cs.as_dtype(dt), [None])
        pp = cs.placeholder(cs.int32, [None])
        u = cs.unique(xp, out_idx=cs.int64)
        outs = cs.dynamic_partition(xp, pp, parts)
        y, idx, *got_parts = cs.Session().run([u.y, u.idx, *outs], {xp: x, pp: p})
    want_y = list(dict.fromkeys(x.tolist()))
    np.testing.assert_array_equal(y, np.array(want_y, dt).reshape(-1))
    np.testing.assert_array_equal(y[idx] if n else idx, x if n else idx)
    assert idx.dtype == np.int64 and y.dtype == dt
    for i, got in enumerate(got_parts):
        np.testing.assert_array_equal(got, x[p == i])
    with cs.Graph().as_default():  # dynamic_stitch inverts dynamic_partition
        xp = cs.placeholder(cs.as_dtype(dt), [None])
        pp = cs.placeholder(cs.int32, [None])
        where_ = cs.dynamic_partition(cs.range(cs.size(xp)), pp, parts)
        back = cs.dynamic_stitch(where_, cs.dynamic_partition(xp, pp, parts))
        np.testing.assert_array_equal(cs.Session().run(back, {xp: x, pp: p}), x)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(-1, 5), max_size=4), st.integers(0, 5), st.integers(-1, 1),
       st.sampled_from([np.int32, np.int64, np.uint8]))
def test_one_hot_and_sequence_mask_match_numpy(values, depth, axis, dt):
    ind = np.array(values, np.int64)
    if dt == np.uint8:
        ind = np.abs(ind)
    ind = ind.astype(dt)
    hot = (ind[..., None] == np.arange(depth)).astype(np.float32)
    want_hot = np.moveaxis(hot, -1, axis) if axis != -1 else hot
    lengths = np.abs(np.array(values, np.int32))
    want_mask = np.arange(depth)[None, :] < lengths[:, None]
    with cs.Graph().as_default():
        ip = cs.placeholder(cs.as_dtype(dt), [None])
        lp = cs.placeholder(cs.int32, [None])
        h = cs.one_hot(ip, depth, axis=axis)
        m = cs.sequence_mask(lp, depth)
        dflt = cs.sequence_mask(lp)
        got_h, got_m, got_d = cs.Session().run([h, m, dflt], {ip: ind, lp: lengths})
    np.testing.assert_array_equal(got_h, want_hot)
    np.testing.assert_array_equal(got_m, want_mask)
    mx = int(lengths.max()) if lengths.size else 0
    np.testing.assert_array_equal(got_d, np.arange(mx)[None, :] < lengths[:, None])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(-20, 20), st.integers(-20, 20), st.integers(-4, 4).filter(bool))
def test_range_matches_numpy(start, limit, delta):
    if (delta > 0 and start > limit) or (delta < 0 and start < limit):
        with cs.Graph().as_default(), pytest.raises(ValueError):
            cs.range(start, limit, delta)
        return
    with cs.Graph().as_default():
        r = cs.range(start, limit, delta)
        f = cs.range(float(start), float(limit), delta / 4)
        got, got_f = cs.Session().run([r, f])
    np.testing.assert_array_equal(got, np.arange(start, limit, delta, dtype=np.int32))
    assert r.shape.as_list() == [got.size] and f.shape.as_list() == [got_f.size]
    np.testing.assert_allclose(got_f, np.arange(start, limit, delta / 4, np.float64),
                               rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------- errors
def _run(t, feed=None):
    return cs.Session(graph=t.graph).run(t, feed)


def test_run_time_errors_are_invalid_argument():
    with cs.Graph().as_default():
        p = cs.placeholder(cs.float32, [None, 2])
        ids = cs.placeholder(cs.int32, [None])
        cases = [
            (cs.gather_nd(p, cs.constant([[0, 2]])), [1, 0], "does not index into param shape"),
            (cs.segment_sum(p, ids), [1, 0], "not increasing"),
            (cs.unsorted_segment_sum(p, ids, 2), [1, 2], "out of range"),
            (cs.dynamic_partition(p, ids, 2)[0], [0, 2], "is not in [0, 2)"),
            (cs.where(cs.constant([True, False, True]), p, p), [0, 0], "Number of batches"),
        ]
        for t, id_value, msg in cases:
            with pytest.raises(InvalidArgumentError, match=msg.replace("[", r"\[").replace(
                    ")", r"\)")):
                _run(t, {p: np.zeros((2, 2), np.float32), ids: id_value})
        with pytest.raises(InvalidArgumentError, match="segment ids must be >= 0"):
            _run(cs.segment_sum(p, ids), {p: np.zeros((2, 2)), ids: [-1, 0]})
        d = cs.placeholder(cs.int32, [])
        with pytest.raises(InvalidArgumentError, match="delta != 0"):
            _run(cs.range(0, 3, d), {d: 0})


def test_build_time_errors():
    with cs.Graph().as_default():
        p = cs.placeholder(cs.float32, [2, 3])
        with pytest.raises(TypeError):
            cs.gather_nd(p, cs.constant([[0.0]]))
        with pytest.raises(ValueError):
            cs.gather_nd(p, [[0, 0, 0]])
        with pytest.raises(ValueError):
            cs.where(p > 0.0, p)
        with pytest.raises(ValueError):
            cs.where(cs.placeholder(cs.bool, [3]), p, p)
        with pytest.raises(TypeError):
            cs.where(cs.placeholder(cs.bool, [2, 3]), p, cs.placeholder(cs.float64, [2, 3]))
        with pytest.raises(ValueError):
            cs.where_v2(cs.placeholder(cs.bool, [4]), p, p)
        with pytest.raises(ValueError):
            cs.boolean_mask(p, cs.placeholder(cs.bool))
        with pytest.raises(ValueError):
            cs.boolean_mask(p, cs.placeholder(cs.bool, [3]))
        with pytest.raises(TypeError):
            cs.one_hot([1], 2, on_value=1, off_value=0.0)
        with pytest.raises(ValueError):
            cs.one_hot([1], 2, axis=-2)
        with pytest.raises(ValueError):
            cs.unique(p)
        with pytest.raises(TypeError):
            cs.dynamic_partition(p, cs.constant([0, 1], cs.int64), 2)
        with pytest.raises(ValueError):
            cs.unsorted_segment_sum(p, [[0, 1]], 2)
        with pytest.raises(ValueError):
            cs.range(0, 5, 0)


def test_static_shapes_with_unknown_dims_and_ranks():
    with cs.Graph().as_default():
        unk = cs.placeholder(cs.float32)
        assert cs.gather_nd(unk, cs.placeholder(cs.int32, [None, 2])).shape.ndims is None
        assert cs.gather_nd(cs.placeholder(cs.float32, [None, 4, 5]),
                            cs.placeholder(cs.int32, [7, None])).shape.ndims is None
        assert cs.where(unk).shape.as_list() == [None, None]
        assert cs.one_hot(cs.placeholder(cs.int32), 3).shape.ndims is None
        assert cs.segment_sum(unk, cs.placeholder(cs.int32)).shape.ndims is None
        assert cs.unsorted_segment_sum(unk, cs.placeholder(cs.int32), 3).shape.ndims is None
        r = cs.range(cs.placeholder(cs.int64, []))
        assert r.shape.as_list() == [None] and r.dtype == cs.int64
        sel = cs.where(cs.placeholder(cs.bool, [None]), cs.placeholder(cs.float32, [None, 2]),
                       cs.placeholder(cs.float32, [5, None]))
        assert sel.shape.as_list() == [5, 2]
        assert cs.sequence_mask(cs.placeholder(cs.int32, [None, 3]), 4).shape.as_list() == \
            [None, 3, 4]


def test_empty_inputs():
    with cs.Graph().as_default():
        p = cs.placeholder(cs.float32, [None, 2])
        ids = cs.placeholder(cs.int32, [None])
        outs = [cs.gather_nd(p, cs.placeholder(cs.int32, [None, 1])), cs.segment_sum(p, ids),
                cs.unsorted_segment_max(p, ids, 2), cs.where(p > 0.0), cs.boolean_mask(
                    p, cs.placeholder(cs.bool, [None])), cs.unique(ids).y]
        gs = cs.gradients(cs.reduce_sum(outs[0]) + cs.reduce_sum(outs[1]), [p])
        feed = {p: np.zeros((0, 2), np.float32), ids: np.zeros(0, np.int32),
                outs[0].op.inputs[1]: np.zeros((0, 1), np.int32),
                outs[4].op.inputs[1]: np.zeros(0, bool)}
        got = cs.Session().run(outs + gs, feed)
    assert [g.shape for g in got] == [(0, 2), (0, 2), (2, 2), (0, 2), (0, 2), (0,), (0, 2)]


@pytest.mark.parametrize("ids,says", [
    ([[0, 9]], "indices[0,1] = 9 is not in [0, 5)"),  # TF 2.21's tf.compat.v1, word for word
    ([3, 7], "indices[1] = 7 is not in [0, 5)"),
    (9, "indices = 9 is not in [0, 5)"),
])
def test_an_index_out_of_range_is_named_in_the_indices_shape_as_tf(ids, says):
    g = cs.Graph()
    with g.as_default():
        t = cs.Variable(np.zeros((5, 2), np.float32))
        lookup = cs.nn.embedding_lookup(t, cs.constant(ids))
    with cs.Session(graph=g) as sess:
        sess.run(t.initializer)
        with pytest.raises(InvalidArgumentError) as e:
            sess.run(lookup)
    assert says in str(e.value)
