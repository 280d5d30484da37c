"""Golden cases, area ``math``: reductions, elementwise math, logical ops, clipping,
cumsum, the Tensor operators and TF1's dtype rules (issue 17). See :mod:`cases` for the
case format. Each behaviour where ckptsync used to differ from TF has a case here
(``*_as_tf`` in the name)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .cases import case, rand


def _unary(tf: Any, fn: Callable[[Any], Any], x: np.ndarray, grads: bool = True) -> dict:
    t = tf.placeholder(tf.as_dtype(x.dtype), [None, *x.shape[1:]], name="x")
    out = fn(t)
    spec = {"feeds": {t: x}, "fetch": {"out": out}}
    if grads:
        spec["grads"] = ("out", [t])
    return spec


def _binary(tf: Any, fn: Callable[[Any, Any], Any], a: np.ndarray, b: np.ndarray,
            grads: bool = True) -> dict:
    x = tf.placeholder(tf.as_dtype(a.dtype), [None, *a.shape[1:]], name="x")
    y = tf.placeholder(tf.as_dtype(b.dtype), list(b.shape), name="y")
    out = fn(x, y)
    spec = {"feeds": {x: a, y: b}, "fetch": {"out": out}}
    if grads:
        spec["grads"] = ("out", [x, y])
    return spec


def _consts(tf: Any, **fetch: Callable[[], Any]) -> dict:
    return {"feeds": {}, "fetch": {k: f() for k, f in fetch.items()}}


def _ints(seed: int, *shape: int, dtype: Any = np.int32) -> np.ndarray:
    return np.random.RandomState(seed).randint(-9, 10, shape).astype(dtype)


# --------------------------------------------------------------------- reductions
@case
def reduce_min_axis_keepdims(tf):
    return _unary(tf, lambda t: tf.reduce_min(t, axis=1, keepdims=True), rand(101, 3, 4))


@case
def reduce_prod_axis(tf):
    return _unary(tf, lambda t: tf.reduce_prod(t, axis=[0]), rand(102, 3, 4))


@case
def reduce_prod_with_zeros(tf):
    x = rand(103, 2, 3)
    x[0, 1] = 0.0
    x[1, 0] = x[1, 2] = 0.0
    return _unary(tf, lambda t: tf.reduce_prod(t, axis=1), x)


@case
def reduce_logsumexp_axis(tf):
    return _unary(tf, lambda t: tf.reduce_logsumexp(t, axis=1), rand(104, 3, 5) * 20)


@case
def reduce_logsumexp_all_keepdims(tf):
    return _unary(tf, lambda t: tf.reduce_logsumexp(t, keepdims=True), rand(105, 2, 3))


@case
def reduce_any_all(tf):
    x = np.array([[True, False, False], [True, True, True]])
    t = tf.placeholder(tf.bool, [2, 3], name="x")
    return {"feeds": {t: x}, "fetch": {"any": tf.reduce_any(t, 1), "all": tf.reduce_all(t, 1),
                                       "all0": tf.reduce_all(t), "any_kd": tf.reduce_any(
                                           t, 0, keepdims=True)}}


@case
def reduce_any_of_ints_raises_as_tf(tf):
    return _consts(tf, out=lambda: tf.reduce_any(tf.constant([1, 0])))


@case
def tf1_spellings_reduction_indices_keep_dims(tf):
    x = rand(106, 3, 4)
    t = tf.placeholder(tf.float32, [3, 4], name="x")
    out = tf.reduce_sum(t, reduction_indices=[1], keep_dims=True)
    mean = tf.reduce_mean(t, reduction_indices=0)
    mx = tf.reduce_max(t, reduction_indices=1, keep_dims=True)
    am = tf.argmax(t, dimension=1)
    an = tf.argmin(t, dimension=0)
    return {"feeds": {t: x}, "fetch": {"out": out, "mean": mean, "max": mx, "am": am, "an": an},
            "grads": ("out", [t])}


@case
def int_reductions_keep_int32_as_tf(tf):
    x = _ints(107, 3, 4)
    t = tf.placeholder(tf.int32, [3, 4], name="x")
    return {"feeds": {t: x}, "fetch": {
        "sum": tf.reduce_sum(t, 1), "mean": tf.reduce_mean(t, 0), "max": tf.reduce_max(t),
        "min": tf.reduce_min(t, 1), "prod": tf.reduce_prod(t, 1),
        "mean_all": tf.reduce_mean(t), "cumsum": tf.cumsum(t, 1)}}


@case
def int64_reductions_keep_int64(tf):
    x = _ints(108, 2, 5, dtype=np.int64)
    t = tf.placeholder(tf.int64, [2, 5], name="x")
    return {"feeds": {t: x}, "fetch": {"sum": tf.reduce_sum(t), "mean": tf.reduce_mean(t, 1),
                                       "prod": tf.reduce_prod(t, 0)}}


@case
def empty_reductions_as_tf(tf):
    f = tf.placeholder(tf.float32, [2, None], name="f")
    i = tf.placeholder(tf.int32, [None], name="i")
    b = tf.placeholder(tf.bool, [2, None], name="b")
    return {"feeds": {f: np.zeros((2, 0), np.float32), i: np.zeros((0,), np.int32),
                      b: np.zeros((2, 0), bool)},
            "fetch": {"mean_int": tf.reduce_mean(i), "sum_int": tf.reduce_sum(i),
                      "mean_float": tf.reduce_mean(f), "max_axis": tf.reduce_max(f, axis=1),
                      "max_int": tf.reduce_max(i), "min_axis": tf.reduce_min(f, axis=1),
                      "min_int": tf.reduce_min(i), "prod": tf.reduce_prod(f, axis=1),
                      "any": tf.reduce_any(b, 1), "all": tf.reduce_all(b, 1),
                      "lse": tf.reduce_logsumexp(f, axis=1)}}


@case
def argmax_argmin_with_nan_as_tf(tf):
    x = np.array([[np.nan, 1.0, 5.0, np.nan], [2.0, 7.0, np.nan, -1.0],
                  [1.0, np.nan, -3.0, np.nan]], np.float32)
    t = tf.placeholder(tf.float32, [None, 4], name="x")
    return {"feeds": {t: x}, "fetch": {"argmax": tf.argmax(t, 1), "argmin": tf.argmin(t, 1),
                                       "argmax0": tf.argmax(t, 0, output_type=tf.int32),
                                       "max": tf.reduce_max(t, 1)}}


@case
def argmin_ints_ties(tf):
    x = np.array([[3, 1, 1], [2, 2, 0]], np.int32)
    return _consts(tf, out=lambda: tf.argmin(tf.constant(x), axis=1),
                   out0=lambda: tf.argmax(tf.constant(x)))


@case
def cumsum_variants(tf):
    x = rand(109, 3, 4)
    t = tf.placeholder(tf.float32, [None, 4], name="x")
    out = (tf.cumsum(t, axis=1) + 2.0 * tf.cumsum(t, axis=1, exclusive=True)
           + 3.0 * tf.cumsum(t, axis=0, reverse=True)
           + 4.0 * tf.cumsum(t, axis=1, exclusive=True, reverse=True))
    return {"feeds": {t: x}, "fetch": {"out": out}, "grads": ("out", [t])}


# --------------------------------------------------------------------- elementwise
@case
def floor_ceil_no_gradient(tf):
    return _unary(tf, lambda t: tf.floor(t) + tf.ceil(t) * 2.0 + t, rand(110, 3, 4) * 3)


@case
def rsqrt_reciprocal(tf):
    return _unary(tf, lambda t: tf.rsqrt(t) + tf.reciprocal(t), rand(111, 3, 4, low=0.3))


@case
def log1p_expm1(tf):
    return _unary(tf, lambda t: tf.log1p(t) * tf.expm1(t), rand(112, 3, 4, low=-0.5))


@case
def sin_cos(tf):
    return _unary(tf, lambda t: tf.sin(t) - 2.0 * tf.cos(t), rand(113, 3, 4) * 3)


@case
def erf_(tf):
    return _unary(tf, tf.erf, rand(114, 3, 4))


@case
def squared_difference_broadcast(tf):
    return _binary(tf, tf.squared_difference, rand(115, 3, 4), rand(116, 4))


@case
def squared_difference_int(tf):
    return _consts(tf, out=lambda: tf.squared_difference(tf.constant([1, -4]), 3))


@case
def floormod_float_gradient(tf):
    a = rand(117, 3, 4) * 5
    return _binary(tf, tf.floormod, a, np.array([0.7, -1.3, 2.1, -0.9], np.float32))


@case
def floordiv_floormod_ints(tf):
    x = np.array([7, -7, 7, -7, 0], np.int32)
    y = np.array([2, 2, -2, -2, 3], np.int32)
    return _consts(tf, fd=lambda: tf.floordiv(tf.constant(x), tf.constant(y)),
                   fm=lambda: tf.floormod(tf.constant(x), tf.constant(y)),
                   md=lambda: tf.mod(tf.constant(x), tf.constant(y)),
                   op_fd=lambda: tf.constant(x) // 3, op_md=lambda: tf.constant(x) % 3,
                   r_fd=lambda: 7 // tf.constant(y), r_md=lambda: -7 % tf.constant(y))


@case
def floordiv_floats_no_gradient(tf):
    return _binary(tf, lambda x, y: tf.floordiv(x, y) + x // y + x % y,
                   rand(118, 3, 4) * 5, rand(119, 4, low=0.5))


@case
def integer_division_by_zero_raises_as_tf(tf):
    return _consts(tf, out=lambda: tf.floordiv(tf.constant([7]), tf.constant([0])))


@case
def div_tf1_floor_for_ints_true_for_floats(tf):
    return _consts(tf, ints=lambda: tf.div(tf.constant([7, -7]), 2),
                   floats=lambda: tf.div(tf.constant([7.0, -7.0]), 2.0))


@case
def truediv_int_dtypes_as_tf(tf):
    return _consts(tf,
                   i32=lambda: tf.truediv(tf.constant([7, -7]), 2),
                   i64=lambda: tf.truediv(tf.constant([7], tf.int64), tf.constant([2], tf.int64)),
                   i16=lambda: tf.truediv(tf.constant([7], tf.int16), tf.constant([2], tf.int16)),
                   u8=lambda: tf.constant([7], tf.uint8) / tf.constant([2], tf.uint8),
                   divide=lambda: tf.divide(tf.constant([7]), tf.constant([2])))


@case
def logical_ops(tf):
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    x = tf.placeholder(tf.bool, [4], name="x")
    y = tf.placeholder(tf.bool, [4], name="y")
    return {"feeds": {x: a, y: b}, "fetch": {
        "and": tf.logical_and(x, y), "or": tf.logical_or(x, y), "not": tf.logical_not(x),
        "xor": tf.logical_xor(x, y), "op_and": x & y, "op_or": x | y, "op_xor": x ^ y,
        "op_not": ~x, "r_and": True & y, "r_or": False | y, "r_xor": True ^ y},
        "names": [t.op.name for t in (x & y, x | y, x ^ y, ~x, tf.logical_xor(x, y))]}


@case
def logical_and_of_ints_raises_as_tf(tf):
    return _consts(tf, out=lambda: tf.logical_and(tf.constant([1]), tf.constant([1])))


@case
def bitwise_operators_on_ints(tf):
    a = tf.constant(np.array([6, -3, 12], np.int32))
    return _consts(tf, band=lambda: a & 3, bor=lambda: a | 3, bxor=lambda: a ^ 5,
                   inv=lambda: ~a, rand_=lambda: 5 & a)


@case
def is_nan_finite_inf(tf):
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], np.float32)
    t = tf.placeholder(tf.float32, [5], name="x")
    return {"feeds": {t: x}, "fetch": {"nan": tf.is_nan(t), "finite": tf.is_finite(t),
                                       "inf": tf.is_inf(t)}}


@case
def is_nan_of_ints_raises_as_tf(tf):
    return _consts(tf, out=lambda: tf.is_nan(tf.constant([1])))


@case
def deprecated_cast_helpers(tf):
    x = np.array([1.7, -1.7, 2.5], np.float32)
    t = tf.placeholder(tf.float32, [3], name="x")
    f = tf.to_float(tf.to_int32(t))
    return {"feeds": {t: x}, "fetch": {"i32": tf.to_int32(t), "i64": tf.to_int64(t), "f": f,
                                       "same": tf.to_float(t) * 2.0},
            "names": [tf.to_int32(t).op.name, tf.to_int64(t).op.name, f.op.name]}


# --------------------------------------------------------------------- TF1 dtype rules
@case
def python_float_with_int_tensor_raises_as_tf(tf):
    return _consts(tf, out=lambda: tf.constant([1, 2]) + 1.5)


@case
def python_integral_float_with_int_tensor_raises_as_tf(tf):
    return _consts(tf, out=lambda: tf.multiply(tf.constant([1, 2]), 2.0))


@case
def reflected_python_float_with_int_tensor_raises_as_tf(tf):
    return _consts(tf, out=lambda: 1.5 * tf.constant([1, 2]))


@case
def numpy_scalar_with_int_tensor_is_cast_as_tf(tf):
    return _consts(tf, out=lambda: tf.constant([1, 2]) + np.float32(2.5),
                   f=lambda: tf.constant([1.0, 2.0]) + 2)


@case
def bool_addition_raises_as_tf(tf):
    return _consts(tf, out=lambda: tf.constant([True]) + tf.constant([False]))


@case
def bool_negation_raises_as_tf(tf):
    return _consts(tf, out=lambda: -tf.constant([True]))


@case
def bool_subtraction_raises_as_tf(tf):
    return _consts(tf, out=lambda: tf.subtract(tf.constant([True]), tf.constant([True])))


@case
def bool_division_raises_as_tf(tf):
    return _consts(tf, out=lambda: tf.constant([True]) / tf.constant([True]))


@case
def bool_multiply_is_and_as_tf(tf):
    return _consts(tf, out=lambda: tf.constant([True, True]) * tf.constant([True, False]))


# --------------------------------------------------------------------- gradients as TF
@case
def pow_exponent_gradient_at_nonpositive_base_as_tf(tf):
    a = np.array([[-2.0, 0.0, 1.5, 3.0], [-0.5, 0.0, 0.25, 2.0]], np.float32)
    b = np.array([2.0, 3.0, 2.0, 0.5], np.float32)
    return _binary(tf, tf.pow, a, b)


@case
def sign_gradient_is_zeros_as_tf(tf):
    return _unary(tf, tf.sign, rand(120, 3, 4))


@case
def add_n_with_unknown_rank_input_as_tf(tf):
    a = tf.placeholder(tf.float32, None, name="a")
    b = tf.placeholder(tf.float32, [2, None], name="b")
    c = tf.placeholder(tf.float32, [None, 3], name="c")
    out = tf.add_n([a, b, c])
    return {"feeds": {a: rand(121, 2, 3), b: rand(122, 2, 3), c: rand(123, 2, 3)},
            "fetch": {"out": out}, "grads": ("out", [a, b, c])}


# --------------------------------------------------------------------- clipping
@case
def clip_by_value_float(tf):
    return _unary(tf, lambda t: tf.clip_by_value(t, -0.5, 0.75), rand(124, 3, 4))


@case
def clip_by_value_int_and_tensor_bounds(tf):
    x = tf.constant(np.array([[3, -4, 1], [0, 9, -9]], np.int32))
    return _consts(tf, out=lambda: tf.clip_by_value(x, -2, 2),
                   bounds=lambda: tf.clip_by_value(x, tf.constant([-1, 0, -5]), 4))


@case
def clip_by_value_float_bounds_for_ints_raise_as_tf(tf):
    return _consts(tf, out=lambda: tf.clip_by_value(tf.constant([3, -4]), -2.5, 2.5))


@case
def clip_by_norm_clipped_and_not(tf):
    x = tf.placeholder(tf.float32, [None, 4], name="x")
    big = tf.clip_by_norm(x, 1.0)
    small = tf.clip_by_norm(x * 0.01, 1.0)
    rows = tf.clip_by_norm(x, 1.5, axes=[1])
    out = big + small + rows
    return {"feeds": {x: rand(125, 3, 4)}, "fetch": {"out": out, "big": big, "rows": rows},
            "grads": ("out", [x]), "names": [big.op.name, rows.op.name]}


@case
def clip_by_norm_of_zeros_has_finite_gradient(tf):
    return _unary(tf, lambda t: tf.clip_by_norm(t, 1.0), np.zeros((2, 3), np.float32))


@case
def global_norm_skips_none(tf):
    a = tf.placeholder(tf.float32, [2, 3], name="a")
    b = tf.placeholder(tf.float32, [4], name="b")
    n = tf.global_norm([a, None, b])
    return {"feeds": {a: rand(126, 2, 3), b: rand(127, 4)}, "fetch": {"norm": n},
            "grads": ("norm", [a, b]), "names": [n.op.name]}


@case
def clip_by_global_norm_with_none(tf):
    a = tf.placeholder(tf.float32, [2, 3], name="a")
    b = tf.placeholder(tf.float32, [4], name="b")
    (ca, none, cb), norm = tf.clip_by_global_norm([a, None, b], 1.0)
    assert none is None
    out = tf.reduce_sum(ca) + tf.reduce_sum(cb * cb)
    return {"feeds": {a: rand(128, 2, 3), b: rand(129, 4)},
            "fetch": {"ca": ca, "cb": cb, "norm": norm, "out": out}, "grads": ("out", [a, b])}


@case
def clip_by_global_norm_not_clipped_and_use_norm(tf):
    a = tf.placeholder(tf.float32, [3], name="a")
    (ca,), n1 = tf.clip_by_global_norm([a * 0.01], 5.0)
    (cb,), n2 = tf.clip_by_global_norm([a], 1.0, use_norm=tf.constant(4.0))
    return {"feeds": {a: rand(130, 3)}, "fetch": {"ca": ca, "cb": cb, "n1": n1, "n2": n2}}


@case
def clip_by_global_norm_of_inf_is_nan(tf):
    (c,), n = tf.clip_by_global_norm([tf.constant([np.inf, 1.0])], 1.0)
    return {"feeds": {}, "fetch": {"c": c, "n": n}}


@case
def clip_by_global_norm_of_a_tensor_raises_as_tf(tf):
    return _consts(tf, out=lambda: tf.clip_by_global_norm(tf.constant([1.0]), 1.0)[1])


# --------------------------------------------------------------------- operator names
@case
def operator_and_function_names(tf):
    x = tf.placeholder(tf.float32, [2], name="x")
    i = tf.placeholder(tf.int32, [2], name="i")
    outs = {"fd": x // 2.0, "md": x % 2.0, "ifd": i // 2, "imd": i % 3,
            "floormod": tf.floormod(x, 2.0), "floordiv": tf.floordiv(x, 2.0),
            "div": tf.div(x, 2.0), "truediv": tf.truediv(i, 2), "sqd": tf.squared_difference(x, x),
            "rmin": tf.reduce_min(x), "rprod": tf.reduce_prod(x), "lse": tf.reduce_logsumexp(x),
            "argmin": tf.argmin(x), "cumsum": tf.cumsum(x), "clipv": tf.clip_by_value(x, 0.0, 1.0),
            "rsqrt": tf.rsqrt(x), "isnan": tf.is_nan(x)}
    return {"feeds": {x: np.array([3.5, -1.25], np.float32), i: np.array([7, -7], np.int32)},
            "fetch": outs, "names": [t.op.name for t in outs.values()]}


# --------------------------------------------------------------------- more TF1 math
@case
def trig_and_hyperbolic(tf):
    return _unary(tf, lambda t: tf.tan(t) + tf.atan(t) + tf.asin(t) + tf.acos(t) + tf.sinh(t)
                  + tf.cosh(t) + tf.erfc(t), rand(131, 3, 4, low=-0.9, high=0.9))


@case
def rint_no_gradient(tf):
    return _unary(tf, lambda t: tf.rint(t) + t, rand(132, 3, 4) * 4)


@case
def truncate_ops_floats(tf):
    a = rand(137, 3, 4) * 4
    return _binary(tf, lambda x, y: tf.truncatediv(x, y) * 10.0 + tf.truncatemod(x, y), a,
                   np.array([0.7, -1.3, 2.1, -0.9], np.float32), grads=False)


@case
def truncatediv_no_gradient(tf):
    return _binary(tf, tf.truncatediv, rand(138, 3, 4), rand(139, 4, low=0.5))


@case
def truncatemod_gradient_raises_lookup_error_as_tf(tf):
    return _binary(tf, tf.truncatemod, rand(140, 3, 4), rand(141, 4, low=0.5))


@case
def truncate_ops_ints(tf):
    x = tf.constant(np.array([7, -7, 7, -7], np.int32))
    y = tf.constant(np.array([2, 2, -2, -2], np.int32))
    return _consts(tf, td=lambda: tf.truncatediv(x, y), tm=lambda: tf.truncatemod(x, y),
                   fd=lambda: tf.floor_div(x, y))


@case
def atan2_div_no_nan(tf):
    a = rand(133, 3, 4)
    b = rand(134, 4)
    b[1] = 0.0
    return _binary(tf, lambda x, y: tf.atan2(x, y + 3.0) + tf.div_no_nan(x, y), a, b)


@case
def cumprod_variants(tf):
    x = rand(135, 3, 4, low=0.5, high=1.5)
    t = tf.placeholder(tf.float32, [None, 4], name="x")
    out = (tf.cumprod(t, axis=1) + 2.0 * tf.cumprod(t, axis=1, exclusive=True)
           + 3.0 * tf.cumprod(t, axis=0, reverse=True))
    return {"feeds": {t: x}, "fetch": {"out": out}, "grads": ("out", [t])}


@case
def count_nonzero_(tf):
    x = np.array([[0.0, 1.5, 0.0], [2.0, -1.0, 0.0]], np.float32)
    t = tf.placeholder(tf.float32, [2, 3], name="x")
    return {"feeds": {t: x}, "fetch": {
        "all": tf.count_nonzero(t), "ax": tf.count_nonzero(t, axis=1, dtype=tf.int32),
        "kd": tf.count_nonzero(t, reduction_indices=[0], keep_dims=True),
        "bool": tf.count_nonzero(tf.constant([True, False, True]))}}


@case
def scalar_mul_accumulate_n_arg_max(tf):
    x = tf.placeholder(tf.float32, [2, 3], name="x")
    out = tf.scalar_mul(2.5, x) + tf.accumulate_n([x, x * x])
    return {"feeds": {x: rand(136, 2, 3)}, "fetch": {
        "out": out, "am": tf.arg_max(x, 1), "an": tf.arg_min(x, 0, output_type=tf.int32)},
        "grads": ("out", [x])}
