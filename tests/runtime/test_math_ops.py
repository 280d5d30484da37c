"""The math part of issue 17: reductions, elementwise math, logical ops, clipping, cumsum,
batched matmul, einsum/tensordot, norm and the Tensor operators.

Gradients are checked against central differences in float64 (``GRAD_CASES``, which
``test_op_gradients`` also counts for its coverage guard); random-input property tests
compare with numpy across dtypes, broadcasting, empty and unknown dimensions. What TF
itself answers is in the goldens (``tests/goldens/cases_math.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptsync as cs
from tests.gradcheck import check_case

RNG = np.random.default_rng(7)


def _pos(shape):
    return RNG.uniform(0.5, 2.0, shape)


def _any(shape):
    return RNG.normal(size=shape)


def _small(shape):
    return RNG.uniform(-0.9, 0.9, shape)


def _apart(shape):
    v = RNG.permutation(np.arange(np.prod(shape), dtype=np.float64)) * 0.37 - 1.3
    return v.reshape(shape) + 0.05


def _with_zero(shape):
    v = _any(shape)
    v.reshape(-1)[1] = 0.0
    return v


def _offgrid(shape):  # x for floormod: away from the multiples of y's values (0.7..)
    return RNG.uniform(0.1, 0.6, shape) + RNG.integers(-3, 3, shape)


# name -> (builder(*placeholders) -> tensor, input generators)
GRAD_CASES = {
    "reduce_min": (lambda a: cs.reduce_min(a, axis=1), [(_apart, (3, 4))]),
    "reduce_prod": (lambda a: cs.reduce_prod(a, axis=[0, 2]), [(_any, (2, 3, 2))]),
    "reduce_prod_zero": (lambda a: cs.reduce_prod(a), [(_with_zero, (2, 3))]),
    "reduce_logsumexp": (lambda a: cs.reduce_logsumexp(a, axis=-1, keepdims=True),
                         [(_any, (3, 4))]),
    "cumsum": (lambda a: cs.cumsum(a, axis=1), [(_any, (2, 4))]),
    "cumsum_excl_rev": (lambda a: cs.cumsum(a, axis=0, exclusive=True, reverse=True),
                        [(_any, (3, 2))]),
    "batch_matmul_broadcast": (lambda a, b: cs.matmul(a, b),
                               [(_any, (2, 1, 3, 4)), (_any, (5, 4, 2))]),
    "batch_matmul_adjoint": (lambda a, b: cs.matmul(a, b, adjoint_a=True, transpose_b=True),
                             [(_any, (2, 4, 3)), (_any, (2, 5, 4))]),
    "batch_matmul_rank2_rank3": (lambda a, b: cs.matmul(a, b), [(_any, (3, 4)), (_any, (2, 4, 5))]),
    "einsum_matmul": (lambda a, b: cs.einsum("ij,jk->ik", a, b), [(_any, (2, 3)), (_any, (3, 4))]),
    "einsum_batch": (lambda a, b: cs.einsum("bij,bjk->bik", a, b),
                     [(_any, (2, 2, 3)), (_any, (2, 3, 2))]),
    "einsum_sum": (lambda a: cs.einsum("ij->", a), [(_any, (2, 3))]),
    "einsum_transpose": (lambda a: cs.einsum("ij->ji", a), [(_any, (2, 3))]),
    "einsum_outer": (lambda a, b: cs.einsum("i,j->ij", a, b), [(_any, (3,)), (_any, (2,))]),
    "einsum_rowsum_dot": (lambda a, b: cs.einsum("ij,j->i", a, b), [(_any, (2, 3)), (_any, (3,))]),
    "einsum_ellipsis": (lambda a, b: cs.einsum("...ij,...jk->...ik", a, b),
                        [(_any, (2, 2, 3)), (_any, (1, 3, 2))]),
    "einsum_ellipsis_one_side": (lambda a, b: cs.einsum("...ij,jk->...ik", a, b),
                                 [(_any, (2, 2, 3)), (_any, (3, 2))]),
    "tensordot": (lambda a, b: cs.tensordot(a, b, [[1, 2], [0, 1]]),
                  [(_any, (2, 3, 4)), (_any, (3, 4, 2))]),
    "norm_euclidean": (lambda a: cs.norm(a, axis=1), [(_any, (2, 3))]),
    "norm_1": (lambda a: cs.norm(a, ord=1), [(_apart, (2, 3))]),
    "norm_inf": (lambda a: cs.norm(a, ord=np.inf, axis=0), [(_apart, (2, 3))]),
    "norm_p3": (lambda a: cs.norm(a, ord=3, axis=-1, keepdims=True), [(_apart, (2, 3))]),
    "norm_matrix_1": (lambda a: cs.norm(a, ord=1, axis=[0, 1]), [(_apart, (3, 3))]),
    "rsqrt": (lambda a: cs.rsqrt(a), [(_pos, (2, 3))]),
    "reciprocal": (lambda a: cs.reciprocal(a), [(_pos, (2, 3))]),
    "log1p": (lambda a: cs.log1p(a), [(_pos, (2, 3))]),
    "expm1": (lambda a: cs.expm1(a), [(_any, (2, 3))]),
    "sin": (lambda a: cs.sin(a), [(_any, (2, 3))]),
    "cos": (lambda a: cs.cos(a), [(_any, (2, 3))]),
    "erf": (lambda a: cs.erf(a), [(_any, (2, 3))]),
    "squared_difference": (lambda a, b: cs.squared_difference(a, b),
                           [(_any, (2, 3)), (_any, (3,))]),
    "floormod": (lambda a, b: cs.floormod(a, b), [(_offgrid, (2, 3)), (lambda s: np.full(s, 0.7), (3,))]),
    "sign": (lambda a: cs.sign(a) * a, [(_apart, (2, 3))]),
    "clip_by_value": (lambda a: cs.clip_by_value(a, -0.55, 0.62), [(_apart, (3, 4))]),
    "clip_by_norm": (lambda a: cs.clip_by_norm(a, 1.0), [(_any, (2, 3))]),
    "clip_by_norm_axes": (lambda a: cs.clip_by_norm(a, 0.5, axes=[1]), [(_any, (2, 3))]),
    "clip_by_global_norm": (lambda a, b: cs.add_n(cs.clip_by_global_norm([a, None, b], 1.0)[0][::2]),
                            [(_any, (2, 3)), (_any, (2, 3))]),
    "global_norm": (lambda a, b: cs.global_norm([a, b]), [(_any, (2, 3)), (_any, (3,))]),
    "tan": (lambda a: cs.tan(a), [(_small, (2, 3))]),
    "atan": (lambda a: cs.atan(a), [(_any, (2, 3))]),
    "asin": (lambda a: cs.asin(a), [(_small, (2, 3))]),
    "acos": (lambda a: cs.acos(a), [(_small, (2, 3))]),
    "sinh": (lambda a: cs.sinh(a), [(_any, (2, 3))]),
    "cosh": (lambda a: cs.cosh(a), [(_any, (2, 3))]),
    "erfc": (lambda a: cs.erfc(a), [(_any, (2, 3))]),
    "atan2": (lambda a, b: cs.atan2(a, b), [(_any, (2, 3)), (_pos, (3,))]),
    "div_no_nan": (lambda a, b: cs.div_no_nan(a, b), [(_any, (2, 3)), (_pos, (2, 3))]),
    "cumprod": (lambda a: cs.cumprod(a, axis=1), [(_pos, (2, 4))]),
    "cumprod_excl_rev": (lambda a: cs.cumprod(a, exclusive=True, reverse=True), [(_pos, (3, 2))]),
    "trace": (lambda a: cs.trace(a), [(_any, (2, 3, 3))]),
    "matrix_diag_part": (lambda a: cs.matrix_diag_part(a), [(_any, (2, 3, 4))]),
    "matrix_transpose": (lambda a: cs.matrix_transpose(a), [(_any, (2, 3, 4))]),
}
# Ops whose gradient is defined to be None, as TF's (floor, ceil, floordiv).
NO_GRAD_CASES = {
    "floor": (lambda a: cs.floor(a), [(_any, (2, 3))]),
    "ceil": (lambda a: cs.ceil(a), [(_any, (2, 3))]),
    "floordiv": (lambda a, b: cs.floordiv(a, b), [(_any, (2, 3)), (_pos, (3,))]),
    "rint": (lambda a: cs.rint(a), [(_any, (2, 3))]),
}


def test_truncatemod_has_no_gradient_function_as_tf():
    with cs.Graph().as_default():
        x = cs.placeholder(cs.float32, [3])
        assert cs.gradients(cs.truncatediv(x, 2.0), [x]) == [None]
        with pytest.raises(LookupError):
            cs.gradients(cs.truncatemod(x, 2.0), [x])


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradient_matches_central_differences(name):
    build, gens = GRAD_CASES[name]
    check_case(build, gens, RNG, rtol=1e-5, atol=1e-5, name=name)


@pytest.mark.parametrize("name", sorted(NO_GRAD_CASES))
def test_ops_without_a_gradient_give_none(name):
    build, gens = NO_GRAD_CASES[name]
    g = cs.Graph()
    with g.as_default():
        phs = [cs.placeholder(cs.float64, shape) for _, shape in gens]
        assert cs.gradients(cs.reduce_sum(build(*phs)), phs) == [None] * len(phs)


# --------------------------------------------------------------------- TF behaviours
def _run(t, feed=None):
    return cs.Session(graph=t.graph if not isinstance(t, list) else t[0].graph).run(t, feed)


def test_pow_exponent_gradient_is_zero_where_the_base_is_not_positive():
    with cs.Graph().as_default():
        x = cs.constant([-2.0, 0.0, 2.0])
        y = cs.constant([2.0, 2.0, 2.0])
        gx, gy = cs.gradients(cs.pow(x, y), [x, y])
        gx, gy = _run([gx, gy])
    np.testing.assert_allclose(gy, [0.0, 0.0, 4.0 * np.log(2.0)], rtol=1e-6)
    np.testing.assert_allclose(gx, [-4.0, 0.0, 4.0])


def test_clip_by_global_norm_keeps_none_and_indexed_slices():
    with cs.Graph().as_default():
        a = cs.constant([3.0, 0.0])
        s = cs.IndexedSlices(cs.constant([[4.0]]), cs.constant([1]), cs.constant([3, 1]))
        out, norm = cs.clip_by_global_norm([a, None, s], 1.0)
        assert out[1] is None and isinstance(out[2], cs.IndexedSlices)
        va, vs, vn = _run([out[0], out[2].values, norm])
    np.testing.assert_allclose(vn, 5.0)
    np.testing.assert_allclose(va, [0.6, 0.0], rtol=1e-6)
    np.testing.assert_allclose(vs, [[0.8]], rtol=1e-6)
    with pytest.raises(TypeError):
        cs.clip_by_global_norm(cs.constant([1.0]), 1.0)


def test_clip_by_global_norm_of_an_infinite_norm_is_nan():
    with cs.Graph().as_default():
        out, _ = cs.clip_by_global_norm([cs.constant([np.inf, 1.0])], 1.0)
        assert np.isnan(_run(out[0])).all()


def test_add_n_with_an_unknown_rank_input_takes_the_known_shape():
    with cs.Graph().as_default():
        a = cs.placeholder(cs.float32)
        b = cs.placeholder(cs.float32, [2, None])
        c = cs.add_n([a, b, cs.ones([2, 3])])
        assert c.get_shape().as_list() == [2, 3]
        with pytest.raises(ValueError):
            cs.add_n([cs.ones([2]), cs.ones([3])])


@pytest.mark.parametrize("make", [
    lambda: cs.constant([1, 2]) + 1.5,
    lambda: 2.0 * cs.constant([1, 2]),
    lambda: cs.multiply(cs.constant([1, 2], cs.int64), 2.0),
    lambda: cs.constant([True]) + cs.constant([True]),
    lambda: cs.constant([True]) - True,
    lambda: -cs.constant([True]),
    lambda: cs.constant([True]) / cs.constant([True]),
    lambda: cs.logical_and(cs.constant([1]), cs.constant([1])),
    lambda: cs.is_nan(cs.constant([1])),
    lambda: cs.floor(cs.constant([1])),
    lambda: cs.reduce_any(cs.constant([1])),
    lambda: cs.matmul(cs.constant([[True]]), cs.constant([[True]])),
])
def test_dtype_errors_are_type_errors_as_tf(make):
    with cs.Graph().as_default(), pytest.raises(TypeError):
        make()


def test_numpy_scalars_are_cast_and_bool_multiply_is_and():
    with cs.Graph().as_default():
        a = cs.constant([1, 2]) + np.float32(2.5)
        b = cs.constant([True, True]) * cs.constant([True, False])
        assert a.dtype == cs.int32 and b.dtype == cs.bool
        va, vb = _run([a, b])
    np.testing.assert_array_equal(va, [3, 4])
    np.testing.assert_array_equal(vb, [True, False])


def test_integer_division_by_zero_raises_invalid_argument():
    with cs.Graph().as_default():
        t = cs.constant([7]) // cs.constant([0])
        with pytest.raises(cs.errors.InvalidArgumentError):
            _run(t)


def test_argmax_over_an_empty_axis_raises_invalid_argument():
    with cs.Graph().as_default():
        t = cs.argmax(cs.zeros([0, 3]), 0)
        with pytest.raises(cs.errors.InvalidArgumentError):
            _run(t)


def test_einsum_refuses_a_repeated_label_and_a_bad_equation():
    with cs.Graph().as_default():
        a = cs.ones([3, 3])
        for eq in ("ii->i", "ij,jk->ik", "ij->k", "i j k"):
            with pytest.raises(ValueError):
                cs.einsum(eq, a)


def test_tf1_spellings_of_reductions():
    with cs.Graph().as_default():
        x = cs.constant([[1, 5], [3, 2]])
        r = cs.reduce_max(x, reduction_indices=[1], keep_dims=True)
        m = cs.argmax(x, dimension=1, output_type=cs.int32)
        assert r.get_shape().as_list() == [2, 1] and r.dtype == cs.int32
        assert m.dtype == cs.int32
        vr, vm = _run([r, m])
        np.testing.assert_array_equal(vr, [[5], [3]])
        np.testing.assert_array_equal(vm, [1, 0])
        with pytest.raises(ValueError):
            cs.reduce_sum(x, axis=0, reduction_indices=0)


# --------------------------------------------------------------------- properties
def _np_reduce(kind, x, axis, keepdims):
    ax = None if axis is None else tuple(axis)
    if kind == "sum":
        return np.sum(x, axis=ax, keepdims=keepdims, dtype=x.dtype)
    if kind == "prod":
        return np.prod(x, axis=ax, keepdims=keepdims, dtype=x.dtype)
    if kind == "max":
        lo = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        return np.max(x, axis=ax, keepdims=keepdims, initial=lo)
    if kind == "min":
        hi = np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).max
        return np.min(x, axis=ax, keepdims=keepdims, initial=hi)
    if kind == "mean":
        n = x.size if ax is None else int(np.prod([x.shape[a] for a in ax]))
        s = np.sum(x, axis=ax, keepdims=keepdims, dtype=x.dtype)
        if x.dtype.kind == "f":
            with np.errstate(all="ignore"):
                return (s / n).astype(x.dtype) if n else np.full(s.shape, np.nan, x.dtype)
        return np.zeros_like(s) if n == 0 else (np.trunc(s / n)).astype(x.dtype)
    raise AssertionError(kind)


REDUCE = {"sum": cs.reduce_sum, "prod": cs.reduce_prod, "max": cs.reduce_max,
          "min": cs.reduce_min, "mean": cs.reduce_mean}


@st.composite
def reduce_inputs(draw):
    shape = tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=3)))
    axis = None
    if shape and draw(st.booleans()):
        axis = sorted(draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
    return shape, axis


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reduce_inputs(), st.sampled_from(sorted(REDUCE)),
       st.sampled_from(["int32", "int64", "float32", "float64"]), st.booleans(), st.booleans(),
       st.integers(0, 2**31 - 1))
def test_reductions_match_numpy_in_dtype_and_value(inp, kind, dtype, keepdims, unknown, seed):
    shape, axis = inp
    x = np.random.RandomState(seed).randint(-3, 4, shape).astype(dtype)
    with cs.Graph().as_default():
        ph = cs.placeholder(dtype, [None] * len(shape) if unknown else shape)
        out = REDUCE[kind](ph, axis=axis, keepdims=keepdims)
        got = _run(out, {ph: x})
    want = _np_reduce(kind, x, axis, keepdims)
    assert out.dtype == cs.as_dtype(dtype)
    assert out.get_shape().is_compatible_with(want.shape)
    assert np.asarray(got).dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["int32", "int64", "float32", "float64"]),
       st.lists(st.integers(0, 3), min_size=0, max_size=2), st.booleans(),
       st.integers(0, 2**31 - 1))
def test_floordiv_and_floormod_match_python_semantics(dtype, shape, broadcast, seed):
    rs = np.random.RandomState(seed)
    x = rs.randint(-9, 10, shape).astype(dtype)
    y = rs.choice([-3, -2, 1, 2, 5], size=(shape[-1:] if broadcast else shape)).astype(dtype)
    with cs.Graph().as_default():
        a, b = cs.constant(x), cs.constant(y)
        q, r = _run([a // b, a % b])
    np.testing.assert_array_equal(q, np.floor_divide(x, y))
    np.testing.assert_array_equal(r, np.mod(x, y))
    assert q.dtype == np.dtype(dtype)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 3), min_size=0, max_size=2),
       st.lists(st.integers(1, 3), min_size=0, max_size=2), st.integers(1, 3),
       st.integers(1, 3), st.integers(0, 3), st.booleans(), st.booleans(),
       st.integers(0, 2**31 - 1))
def test_batch_matmul_broadcasts_as_numpy(ba, bb, m, n, k, adj_a, adj_b, seed):
    if len(ba) < 1 and len(bb) < 1:
        ba = [2]
    rs = np.random.RandomState(seed)
    # make the batch dims broadcastable: b's dims are 1 or a's
    bb = [1 if (i >= len(ba) or rs.rand() < 0.5) else ba[len(ba) - len(bb) + i]
          if len(ba) >= len(bb) else d for i, d in enumerate(bb)]
    try:
        np.broadcast_shapes(tuple(ba), tuple(bb))
    except ValueError:
        bb = [1] * len(bb)
    a = rs.normal(size=(*ba, *((k, m) if adj_a else (m, k))))
    b = rs.normal(size=(*bb, *((n, k) if adj_b else (k, n))))
    if a.ndim < 2 or b.ndim < 2:
        return
    want = np.matmul(np.swapaxes(a, -1, -2) if adj_a else a, np.swapaxes(b, -1, -2) if adj_b else b)
    with cs.Graph().as_default():
        pa = cs.placeholder(cs.float64, [None] * a.ndim)
        pb = cs.placeholder(cs.float64, b.shape)
        out = cs.matmul(pa, pb, adjoint_a=adj_a, adjoint_b=adj_b)
        got = _run(out, {pa: a, pb: b})
    assert out.get_shape().is_compatible_with(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["ij,jk->ik", "bij,bjk->bik", "ij->ji", "ij->", "i,j->ij", "ij,ij->i",
                        "bij,jk->bik", "ijk->kj", "ij,kj->ik"]),
       st.integers(0, 3), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_einsum_matches_numpy(eq, d0, d1, seed):
    rs = np.random.RandomState(seed)
    sizes = dict(zip("bijk", (2, d0, d1, 3)))
    ins = eq.split("->")[0].split(",")
    xs = [rs.normal(size=[sizes[c] for c in s]).astype(np.float32) for s in ins]
    with cs.Graph().as_default():
        out = cs.einsum(eq, *[cs.constant(x) for x in xs])
        got = _run(out)
    want = np.einsum(eq, *xs)
    assert out.get_shape().as_list() == list(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 3), min_size=1, max_size=3), st.booleans(), st.booleans(),
       st.sampled_from(["int32", "float32", "float64"]), st.integers(0, 2**31 - 1))
def test_cumsum_matches_numpy(shape, exclusive, reverse, dtype, seed):
    x = np.random.RandomState(seed).randint(-5, 6, shape).astype(dtype)
    axis = len(shape) - 1
    with cs.Graph().as_default():
        got = _run(cs.cumsum(cs.constant(x), axis=axis, exclusive=exclusive, reverse=reverse))
    y = np.flip(x, axis) if reverse else x
    want = np.cumsum(y, axis=axis, dtype=x.dtype)
    if exclusive:
        want = want - y
    want = np.flip(want, axis) if reverse else want
    assert got.dtype == x.dtype
    np.testing.assert_allclose(got, want)


UNARY_NP = {
    "floor": (cs.floor, np.floor), "ceil": (cs.ceil, np.ceil), "rint": (cs.rint, np.rint),
    "rsqrt": (lambda t: cs.rsqrt(cs.abs(t) + 1), lambda x: 1 / np.sqrt(np.abs(x) + 1)),
    "reciprocal": (lambda t: cs.reciprocal(cs.abs(t) + 1), lambda x: 1 / (np.abs(x) + 1)),
    "log1p": (lambda t: cs.log1p(cs.abs(t)), lambda x: np.log1p(np.abs(x))),
    "expm1": (cs.expm1, np.expm1), "sin": (cs.sin, np.sin), "cos": (cs.cos, np.cos),
    "tan": (cs.tan, np.tan), "atan": (cs.atan, np.arctan), "sinh": (cs.sinh, np.sinh),
    "is_finite": (cs.is_finite, np.isfinite), "sign": (cs.sign, np.sign),
}


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(UNARY_NP)), st.sampled_from(["float32", "float64"]),
       st.lists(st.integers(0, 3), min_size=0, max_size=3), st.booleans(),
       st.integers(0, 2**31 - 1))
def test_unary_ops_match_numpy_with_unknown_and_empty_dims(name, dtype, shape, unknown, seed):
    ours, ref = UNARY_NP[name]
    x = np.random.RandomState(seed).uniform(-3, 3, shape).astype(dtype)
    with cs.Graph().as_default():
        ph = cs.placeholder(dtype, [None] * len(shape) if unknown else shape)
        out = ours(ph)
        got = _run(out, {ph: x})
    want = ref(x)
    assert np.asarray(got).dtype == want.dtype
    assert out.get_shape().is_compatible_with(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == "float32" else 1e-12)


def test_negative_axes_of_unknown_rank_tensors_resolve_at_run_time():
    with cs.Graph().as_default():
        x = cs.placeholder(cs.float32)
        outs = [cs.cumsum(x, -1), cs.cumprod(x, -1, exclusive=True), cs.argmax(x, -1)]
        got = _run(outs, {x: np.array([[1.0, 3.0, 2.0]], np.float32)})
    np.testing.assert_allclose(got[0], [[1, 4, 6]])
    np.testing.assert_allclose(got[1], [[1, 1, 3]])
    np.testing.assert_array_equal(got[2], [1])
