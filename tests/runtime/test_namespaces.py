"""TF1's namespaces and the names TF1 programs use most: ``import ckptsync as tf`` has
them, under the same spellings (``tf.math.log``, ``tf.linalg.matmul``, ``tf.nn.conv2d``,
``tf.train.AdamOptimizer``, ``tf.contrib.layers.xavier_initializer``)."""

from __future__ import annotations

import numpy as np
import pytest

import ckptsync as tf

TOP = """reduce_min reduce_prod reduce_any reduce_all reduce_logsumexp argmin argmax floor ceil
rsqrt reciprocal log1p expm1 sin cos erf squared_difference truediv div floordiv floormod
mod logical_and logical_or logical_not logical_xor is_nan is_finite is_inf clip_by_value
clip_by_norm clip_by_global_norm global_norm cumsum tensordot einsum matmul norm stack
unstack split tile pad gather gather_nd slice strided_slice one_hot range where where_v2
boolean_mask reverse size rank shape_n broadcast_to sequence_mask placeholder_with_default
identity_n unique dynamic_partition segment_sum unsorted_segment_sum scatter_update
scatter_add to_float to_int32 to_int64 cond case while_loop get_collection
get_collection_ref add_to_collection GraphKeys ConfigProto initialize_all_variables
all_variables variance_scaling_initializer orthogonal_initializer IndexedSlices
log_sigmoid""".split()
NN = """conv2d conv2d_transpose max_pool avg_pool dropout relu6 elu selu leaky_relu softplus
softsign swish log_sigmoid l2_loss l2_normalize moments batch_normalization
fused_batch_norm embedding_lookup sigmoid_cross_entropy_with_logits
weighted_cross_entropy_with_logits top_k in_top_k xw_plus_b""".split()
TRAIN = """RMSPropOptimizer AdagradOptimizer AdadeltaOptimizer FtrlOptimizer exponential_decay
piecewise_constant polynomial_decay cosine_decay inverse_time_decay natural_exp_decay
ExponentialMovingAverage init_from_checkpoint""".split()


@pytest.mark.parametrize("space,names", [(tf, TOP), (tf.nn, NN), (tf.train, TRAIN),
                                         (tf.contrib.layers, ["xavier_initializer",
                                                              "variance_scaling_initializer"])],
                         ids=["tf", "tf.nn", "tf.train", "tf.contrib.layers"])
def test_the_names_of_issue_17_are_there(space, names):
    assert [n for n in names if not hasattr(space, n)] == []


def test_tf_math_and_tf_linalg_are_the_same_functions():
    assert tf.math.log is tf.log and tf.math.reduce_sum is tf.reduce_sum
    assert tf.math.segment_sum is tf.segment_sum and tf.math.top_k is tf.nn.top_k
    assert tf.math.sigmoid is tf.sigmoid and tf.linalg.matmul is tf.matmul
    assert tf.linalg.einsum is tf.einsum and tf.linalg.adjoint is tf.linalg.matrix_transpose
    with tf.Graph().as_default():
        x = tf.constant(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
        got = tf.Session().run([tf.math.reduce_logsumexp(x, axis=1), tf.linalg.trace(x)])
    np.testing.assert_allclose(got[0], np.log(np.exp([[1, 2], [3, 4]]).sum(1)), rtol=1e-6)
    assert got[1] == 5.0
