"""Golden cases, area ``linalg``: batched ``matmul`` (broadcast batch dims, transpose and
adjoint flags), ``einsum``, ``tensordot`` and ``norm`` (issue 17). See :mod:`cases` for
the case format."""

from __future__ import annotations

from typing import Any

import numpy as np

from .cases import case, rand


def _two(tf: Any, fn: Any, a: np.ndarray, b: np.ndarray, unknown_batch: bool = True) -> dict:
    x = tf.placeholder(tf.float32, [None, *a.shape[1:]] if unknown_batch else list(a.shape),
                       name="a")
    y = tf.placeholder(tf.float32, list(b.shape), name="b")
    out = fn(x, y)
    return {"feeds": {x: a, y: b}, "fetch": {"out": out}, "grads": ("out", [x, y])}


def _one(tf: Any, fn: Any, a: np.ndarray) -> dict:
    x = tf.placeholder(tf.float32, list(a.shape), name="a")
    out = fn(x)
    return {"feeds": {x: a}, "fetch": {"out": out}, "grads": ("out", [x])}


# --------------------------------------------------------------------- batched matmul
@case
def batch_matmul_rank3(tf):
    return _two(tf, tf.matmul, rand(201, 2, 3, 4), rand(202, 2, 4, 5))


@case
def batch_matmul_broadcast_batch_dims(tf):
    return _two(tf, tf.matmul, rand(203, 2, 1, 3, 4), rand(204, 5, 4, 2))


@case
def batch_matmul_rank2_with_rank3(tf):
    return _two(tf, tf.matmul, rand(205, 3, 4), rand(206, 2, 4, 5), unknown_batch=False)


@case
def batch_matmul_transpose_flags(tf):
    return _two(tf, lambda a, b: tf.matmul(a, b, transpose_a=True, transpose_b=True),
                rand(207, 2, 4, 3), rand(208, 2, 5, 4))


@case
def batch_matmul_adjoint_flags(tf):
    return _two(tf, lambda a, b: tf.matmul(a, b, adjoint_a=True),
                rand(209, 2, 4, 3), rand(210, 1, 4, 5))


@case
def matmul_adjoint_rank2(tf):
    return _two(tf, lambda a, b: tf.matmul(a, b, adjoint_b=True), rand(211, 3, 4),
                rand(212, 5, 4))


@case
def matmul_names(tf):
    a = tf.placeholder(tf.float32, [2, 3, 4], name="a")
    b = tf.placeholder(tf.float32, [4, 5], name="b")
    c = tf.placeholder(tf.float32, [5, 4], name="c")
    out = tf.matmul(a, b)
    two = tf.matmul(c, b, transpose_a=True, transpose_b=True)
    return {"feeds": {a: rand(213, 2, 3, 4), b: rand(214, 4, 5), c: rand(215, 5, 4)},
            "fetch": {"out": out, "two": two, "op": a @ b},
            "names": [out.op.name, two.op.name, (a @ b).op.name]}


@case
def batch_matmul_inner_dims_differ_raises(tf):
    a = tf.placeholder(tf.float32, [2, 3, 4])
    b = tf.placeholder(tf.float32, [2, 5, 6])
    return {"feeds": {}, "fetch": {"out": tf.matmul(a, b)}}


@case
def matmul_both_transpose_and_adjoint_raises(tf):
    a = tf.placeholder(tf.float32, [3, 3])
    return {"feeds": {}, "fetch": {"out": tf.matmul(a, a, transpose_a=True, adjoint_a=True)}}


@case
def matmul_rank1_raises(tf):
    return {"feeds": {}, "fetch": {"out": tf.matmul(tf.ones([4]), tf.ones([4, 2]))}}


@case
def batch_matmul_int32(tf):
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4) - 10
    b = np.arange(8, dtype=np.int32).reshape(4, 2) - 3
    return {"feeds": {}, "fetch": {"out": tf.matmul(tf.constant(a), tf.constant(b))}}


# --------------------------------------------------------------------- einsum / tensordot
@case
def einsum_matmul(tf):
    return _two(tf, lambda a, b: tf.einsum("ij,jk->ik", a, b), rand(216, 2, 3), rand(217, 3, 4))


@case
def einsum_batch_matmul(tf):
    return _two(tf, lambda a, b: tf.einsum("bij,bjk->bik", a, b), rand(218, 2, 3, 4),
                rand(219, 2, 4, 5))


@case
def einsum_transpose(tf):
    return _one(tf, lambda a: tf.einsum("ijk->kij", a), rand(220, 2, 3, 4))


@case
def einsum_sum_all(tf):
    return _one(tf, lambda a: tf.einsum("ij->", a), rand(221, 3, 4))


@case
def einsum_outer(tf):
    return _two(tf, lambda a, b: tf.einsum("i,j->ij", a, b), rand(222, 3), rand(223, 4),
                unknown_batch=False)


@case
def einsum_contract_to_vector(tf):
    return _two(tf, lambda a, b: tf.einsum("bij,bj->bi", a, b), rand(224, 2, 3, 4),
                rand(225, 2, 4))


@case
def einsum_ellipsis(tf):
    return _two(tf, lambda a, b: tf.einsum("...ij,jk->...ik", a, b), rand(226, 2, 3, 4),
                rand(227, 4, 2))


@case
def einsum_names(tf):
    a = tf.placeholder(tf.float32, [2, 3], name="a")
    out = tf.einsum("ij->ji", a)
    return {"feeds": {a: rand(228, 2, 3)}, "fetch": {"out": out}, "names": [out.op.name]}


@case
def einsum_wrong_operand_count_raises(tf):
    return {"feeds": {}, "fetch": {"out": tf.einsum("ij,jk->ik", tf.ones([2, 3]))}}


@case
def tensordot_int_axes(tf):
    return _two(tf, lambda a, b: tf.tensordot(a, b, 1), rand(229, 2, 3, 4), rand(230, 4, 5),
                unknown_batch=False)


@case
def tensordot_axes_lists(tf):
    return _two(tf, lambda a, b: tf.tensordot(a, b, [[1, 2], [0, 1]]), rand(231, 2, 3, 4),
                rand(232, 3, 4, 5), unknown_batch=False)


@case
def tensordot_outer(tf):
    return _two(tf, lambda a, b: tf.tensordot(a, b, 0), rand(233, 2, 3), rand(234, 4),
                unknown_batch=False)


@case
def tensordot_transposed_axes(tf):
    return _two(tf, lambda a, b: tf.tensordot(a, b, [[0], [1]]), rand(235, 3, 2),
                rand(236, 4, 3), unknown_batch=False)


# --------------------------------------------------------------------- norm
@case
def norm_euclidean_all(tf):
    return _one(tf, tf.norm, rand(237, 3, 4))


@case
def norm_vector_orders(tf):
    a = tf.placeholder(tf.float32, [3, 4], name="a")
    x = rand(238, 3, 4)
    out = (tf.norm(a, axis=1) + tf.norm(a, ord=1, axis=1) + tf.norm(a, ord=np.inf, axis=1)
           + tf.norm(a, ord=3, axis=1) + tf.norm(a, ord=1.5, axis=-1))
    return {"feeds": {a: x}, "fetch": {"out": out, "kd": tf.norm(a, axis=0, keepdims=True),
                                       "kd1": tf.norm(a, ord=1, keep_dims=True)},
            "grads": ("out", [a])}


@case
def norm_matrix_orders(tf):
    a = tf.placeholder(tf.float32, [2, 3, 4], name="a")
    x = rand(239, 2, 3, 4)
    out = (tf.norm(a, ord="fro", axis=[1, 2]) + tf.norm(a, ord=1, axis=[1, 2])
           + tf.norm(a, ord=np.inf, axis=[-2, -1]) + tf.norm(a, axis=[1, 2]))
    return {"feeds": {a: x}, "fetch": {"out": out,
                                       "kd": tf.norm(a, ord=1, axis=[1, 2], keepdims=True)},
            "grads": ("out", [a])}


@case
def norm_bad_ord_raises(tf):
    return {"feeds": {}, "fetch": {"out": tf.norm(tf.ones([3]), ord=-1)}}


@case
def norm_fro_for_a_vector_raises(tf):
    return {"feeds": {}, "fetch": {"out": tf.norm(tf.ones([3]), ord="fro", axis=0)}}


# --------------------------------------------------------------------- diagonals
@case
def trace_batched(tf):
    return _one(tf, tf.trace, rand(240, 2, 3, 3))


@case
def matrix_diag_part_nonsquare(tf):
    return _one(tf, tf.matrix_diag_part, rand(241, 2, 3, 4))


@case
def matrix_transpose_(tf):
    return _one(tf, tf.matrix_transpose, rand(242, 2, 3, 4))
