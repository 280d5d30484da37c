"""``cs.layers`` (TF1's ``tf.layers``) and contrib's regularizers: names, sharing,
collections, batch-norm updates, gradients, and a small CNN trained on the digits."""

from __future__ import annotations

import numpy as np
import pytest

import ckptsync as tf
from ckptsync.datasets import load_digits
from ckptsync.errors import CkptsyncValueError


@pytest.fixture(autouse=True)
def _graph():
    g = tf.Graph()
    with g.as_default():
        yield g


def _names(key):
    return [getattr(v, "name", v) for v in tf.get_collection(key)]


def test_variable_names_shapes_and_collections_line_up_with_tf1():
    x = tf.placeholder(tf.float32, [None, 3])
    tf.layers.dense(tf.layers.dense(x, 4), 2)
    im = tf.placeholder(tf.float32, [None, 8, 8, 3])
    tf.layers.batch_normalization(tf.layers.conv2d(im, 5, 3), training=True)
    assert _names(tf.GraphKeys.GLOBAL_VARIABLES) == [
        "dense/kernel:0", "dense/bias:0", "dense_1/kernel:0", "dense_1/bias:0",
        "conv2d/kernel:0", "conv2d/bias:0", "batch_normalization/gamma:0",
        "batch_normalization/beta:0", "batch_normalization/moving_mean:0",
        "batch_normalization/moving_variance:0"]
    assert len(tf.trainable_variables()) == 8
    assert tf.model_variables() == []
    shapes = [v.shape.as_list() for v in tf.global_variables()]
    assert shapes[:6] == [[3, 4], [4], [4, 2], [2], [3, 3, 3, 5], [5]]
    assert _names(tf.GraphKeys.UPDATE_OPS) == ["batch_normalization/AssignMovingAvg",
                                               "batch_normalization/AssignMovingAvg_1"]


def test_name_reuse_and_variable_scopes():
    x = tf.placeholder(tf.float32, [None, 3])
    with tf.variable_scope("net"):
        y = tf.layers.dense(x, 4, name="fc")
    with tf.variable_scope("net", reuse=True):
        y2 = tf.layers.dense(x, 4, name="fc")
    assert [v.name for v in tf.global_variables()] == ["net/fc/kernel:0", "net/fc/bias:0"]
    assert y.op.name == "net/fc/BiasAdd" and y2.op.name.startswith("net_1/fc/")
    with pytest.raises(CkptsyncValueError, match="already exists"):
        with tf.variable_scope("net"):
            tf.layers.dense(x, 4, name="fc")
    tf.layers.dense(x, 4, name="fc2")
    tf.layers.dense(x, 4, name="fc2", reuse=True)
    assert len(tf.global_variables()) == 4


def test_layer_object_shares_variables_across_calls():
    layer = tf.layers.Dense(2, activation=tf.nn.relu)
    a = layer(tf.placeholder(tf.float32, [None, 3]))
    b = layer.apply(tf.placeholder(tf.float32, [5, 3]))
    assert layer.variables == [layer.kernel, layer.bias] == tf.global_variables()
    assert layer.trainable_variables == layer.variables and layer.name == "dense_1"
    assert layer.scope_name == "dense"
    assert a.op.name == "dense/Relu" and b.shape.as_list() == [5, 2]
    frozen = tf.layers.Dense(2, trainable=False)
    frozen(tf.placeholder(tf.float32, [None, 3]))
    assert frozen.trainable_variables == [] and len(frozen.non_trainable_variables) == 2
    assert len(tf.trainable_variables()) == 2


def test_forward_values_with_constant_initializers():
    x = tf.placeholder(tf.float32, [None, 2])
    y = tf.layers.dense(x, 3, kernel_initializer=tf.constant_initializer(0.5),
                        bias_initializer=tf.constant_initializer(0.1), activation=tf.nn.relu)
    im = tf.placeholder(tf.float32, [1, 4, 4, 1])
    c = tf.layers.conv2d(im, 2, 2, padding="same", kernel_initializer=tf.ones_initializer())
    p = tf.layers.average_pooling2d(c, 2, 2)
    m = tf.layers.max_pooling2d(c, 2, 2)
    f = tf.layers.flatten(m)
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        xv = np.array([[1.0, -3.0], [2.0, 2.0]], np.float32)
        np.testing.assert_allclose(s.run(y, {x: xv}), np.maximum(xv.sum(1, keepdims=True)
                                                                 * 0.5 + 0.1, 0) * np.ones(3))
        iv = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
        cv, pv, fv = s.run([c, p, f], {im: iv})
        assert cv.shape == (1, 4, 4, 2) and cv[0, 0, 0, 0] == 0 + 1 + 4 + 5
        assert pv.shape == (1, 2, 2, 2) and fv.shape == (1, 8)


def test_conv1d_and_channels_first():
    x = tf.placeholder(tf.float32, [2, 7, 3])
    y = tf.layers.conv1d(x, 4, 3, kernel_initializer=tf.ones_initializer())
    z = tf.layers.max_pooling1d(y, 2, 2)
    im = tf.placeholder(tf.float32, [2, 3, 6, 6])
    c = tf.layers.conv2d(im, 4, 3, data_format="channels_first")
    assert y.shape.as_list() == [2, 5, 4] and z.shape.as_list() == [2, 2, 4]
    assert c.shape.as_list() == [2, 4, 4, 4]
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        xv = np.random.RandomState(0).rand(2, 7, 3).astype(np.float32)
        want = np.stack([xv[:, i:i + 3].sum((1, 2)) for i in range(5)], 1)
        np.testing.assert_allclose(s.run(y, {x: xv})[..., 0], want, rtol=1e-5)


def test_dropout_training_flag_bool_and_tensor():
    x = tf.ones([200, 50])
    assert tf.layers.dropout(x, 0.5).op.type == "Identity"
    training = tf.placeholder(tf.bool, [])
    d = tf.layers.dropout(x, 0.5, training=training)
    with tf.Session() as s:
        assert (s.run(d, {training: False}) == 1).all()
        on = s.run(d, {training: True})
        assert set(np.unique(on)) <= {0.0, 2.0} and 0.4 < (on == 0).mean() < 0.6


def _bn_case(x_value, training_value, momentum=0.5):
    with tf.Graph().as_default():
        return _bn_run(x_value, training_value, momentum)


def _bn_run(x_value, training_value, momentum):
    x = tf.placeholder(tf.float32, x_value.shape)
    training = tf.placeholder(tf.bool, [])
    y = tf.layers.batch_normalization(x, training=training, momentum=momentum)
    ups = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    layer_vars = tf.global_variables()
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        out = s.run(y, {x: x_value, training: training_value})
        s.run(ups, {x: x_value, training: training_value})
        return out, s.run(layer_vars[2:])


@pytest.mark.parametrize("shape", [(4, 3, 3, 2), (6, 3)])
def test_batch_norm_training_and_moving_averages(shape):
    xv = np.random.RandomState(3).randn(*shape).astype(np.float32) * 2 + 1
    axes = tuple(range(len(shape) - 1))
    out, (mm, mv) = _bn_case(xv, True)
    want = (xv - xv.mean(axes)) / np.sqrt(xv.var(axes) + 1e-3)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    # As TF: the fused (4-D) path feeds the moving variance the unbiased batch variance.
    var = xv.var(axes, ddof=1 if len(shape) == 4 else 0)
    np.testing.assert_allclose(mm, 0.5 * xv.mean(axes), rtol=1e-5)
    np.testing.assert_allclose(mv, 0.5 + 0.5 * var, rtol=1e-5)
    out, (mm, mv) = _bn_case(xv, False)
    np.testing.assert_allclose(out, xv / np.sqrt(1 + 1e-3), rtol=1e-5)
    assert (mm == 0).all() and (mv == 1).all()


def test_batch_norm_update_ops_with_control_dependencies_train():
    x = tf.placeholder(tf.float32, [8, 3])
    h = tf.layers.batch_normalization(tf.layers.dense(x, 4), training=True)
    loss = tf.reduce_mean(tf.square(h - 1.0))
    with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    mm = [v for v in tf.global_variables() if "moving_mean" in v.name][0]
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        s.run(train, {x: np.random.RandomState(0).randn(8, 3)})
        assert np.abs(s.run(mm)).sum() > 0


def test_regularizers_feed_regularization_losses():
    x = tf.placeholder(tf.float32, [None, 3])
    reg = tf.contrib.layers.l2_regularizer(0.1)
    tf.layers.dense(x, 4, kernel_regularizer=reg, kernel_initializer=tf.ones_initializer(),
                    bias_regularizer=tf.contrib.layers.l1_regularizer(0.5),
                    bias_initializer=tf.constant_initializer(-1.0),
                    activity_regularizer=tf.contrib.layers.l1_l2_regularizer(0.1, 0.2))
    assert _names(tf.GraphKeys.REGULARIZATION_LOSSES) == [
        "dense/kernel/Regularizer/l2_regularizer:0", "dense/bias/Regularizer/l1_regularizer:0",
        "dense/ActivityRegularizer/truediv:0"]
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        k, b, _ = s.run(tf.get_collection(tf.GraphKeys.REGULARIZATION_LOSSES), {x: np.ones((2, 3))})
    assert k == pytest.approx(0.1 * 12 / 2) and b == pytest.approx(0.5 * 4)
    with pytest.raises(CkptsyncValueError, match="integer"):
        tf.contrib.layers.l2_regularizer(1)
    assert tf.contrib.layers.l2_regularizer(0.0)(tf.ones([2])) is None


def test_apply_regularization_and_contrib_flatten():
    w = tf.get_variable("w", initializer=np.ones((2, 2), np.float32))
    total = tf.contrib.layers.apply_regularization(tf.contrib.layers.l1_regularizer(0.5), [w])
    assert total.op.name == "get_regularization_penalty"
    assert tf.get_collection(tf.GraphKeys.REGULARIZATION_LOSSES) == [total]
    f = tf.contrib.layers.flatten(tf.zeros([3, 2, 2]))
    assert f.shape.as_list() == [3, 4] and f.op.name == "Flatten/Reshape"
    with pytest.raises(CkptsyncValueError, match="No weights"):
        tf.contrib.layers.apply_regularization(tf.contrib.layers.l1_regularizer(0.5))


def test_bad_inputs_name_the_layer():
    with pytest.raises(CkptsyncValueError, match="conv2d"):
        tf.layers.conv2d(tf.zeros([2, 3]), 2, 3)
    with pytest.raises(CkptsyncValueError, match="last dimension"):
        tf.layers.dense(tf.placeholder(tf.float32, [None, None]), 2)
    with pytest.raises(CkptsyncValueError, match="padding"):
        tf.layers.max_pooling2d(tf.zeros([1, 4, 4, 1]), 2, 2, padding="full")


def test_tf_layers_cnn_trains_on_digits():
    data = load_digits()
    xtr, ytr = data.train["x"], data.train["y"]
    xte, yte = data.test["x"], data.test["y"]
    tf.set_random_seed(0)
    x = tf.placeholder(tf.float32, [None, 64])
    y = tf.placeholder(tf.int64, [None])
    training = tf.placeholder_with_default(False, [])
    h = tf.reshape(x, [-1, 8, 8, 1])
    h = tf.layers.conv2d(h, 16, 3, padding="same", activation=tf.nn.relu)
    h = tf.layers.batch_normalization(h, training=training, momentum=0.9)
    h = tf.layers.max_pooling2d(h, 2, 2)
    h = tf.layers.flatten(h)
    h = tf.layers.dense(h, 64, activation=tf.nn.relu,
                        kernel_regularizer=tf.contrib.layers.l2_regularizer(1e-4))
    h = tf.layers.dropout(h, 0.2, training=training)
    logits = tf.layers.dense(h, 10)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=logits)) + tf.add_n(tf.get_collection(tf.GraphKeys.REGULARIZATION_LOSSES))
    with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
        train = tf.train.AdamOptimizer(0.01).minimize(loss)
    acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
    rng = np.random.RandomState(0)
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        for _ in range(6):
            order = rng.permutation(len(xtr))
            for i in range(0, len(order), 64):
                idx = order[i:i + 64]
                s.run(train, {x: xtr[idx], y: ytr[idx], training: True})
        assert s.run(acc, {x: xte, y: yte}) > 0.93
