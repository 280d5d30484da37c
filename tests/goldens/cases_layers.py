"""Golden cases, area ``layers``: TF1's ``tf.layers`` (``dense``, ``conv1d``/``conv2d``,
pooling, ``flatten``, ``dropout``, ``batch_normalization``): variable names, shapes and
collections, forward values with constant initializers, gradients, batch-norm training and
inference and its moving averages after update steps, regularization losses. See
:mod:`cases`.

TensorFlow 2.16+ keeps ``tf.compat.v1.layers`` in the ``tf-keras`` package (without it
every case records an AttributeError): ``scripts/make-goldens`` installs ``tf-keras`` of
TF's version into the goldens venv and runs with ``TF_USE_LEGACY_KERAS=1``.
Regularizers are written as the lambdas ``tf.contrib.layers`` returns (TF 2 has no
contrib).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .cases import case, rand


def _l2(tf: Any, scale: float) -> Any:
    return lambda w: tf.multiply(tf.constant(scale, w.dtype.base_dtype), tf.nn.l2_loss(w),
                                 name="l2_regularizer")


def _l1(tf: Any, scale: float) -> Any:
    return lambda w: tf.multiply(tf.constant(scale, w.dtype.base_dtype),
                                 tf.reduce_sum(tf.abs(w)), name="l1_regularizer")


def _collections(tf: Any) -> list[str]:
    keys = [tf.GraphKeys.GLOBAL_VARIABLES, tf.GraphKeys.TRAINABLE_VARIABLES,
            tf.GraphKeys.MODEL_VARIABLES, tf.GraphKeys.REGULARIZATION_LOSSES,
            tf.GraphKeys.UPDATE_OPS, tf.GraphKeys.LOCAL_VARIABLES]
    out = []
    for k in keys:
        out += [f"{k}:{getattr(v, 'name', v)}" for v in tf.get_collection(k)]
    return out


def _shapes(tf: Any) -> list[str]:
    return [f"{v.name}{v.get_shape().as_list()}" for v in tf.global_variables()]


@case
def layers_variable_names(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    h = tf.layers.dense(x, 4)
    h = tf.layers.dense(h, 5, activation=tf.nn.relu)
    h = tf.layers.dense(h, 2, name="logits")
    im = tf.placeholder(tf.float32, [None, 8, 8, 3], name="im")
    c = tf.layers.conv2d(im, 6, 3)
    c = tf.layers.conv2d(c, 4, [2, 3], strides=2, padding="same", use_bias=False)
    b = tf.layers.batch_normalization(c, training=True)
    p = tf.layers.max_pooling2d(b, 2, 2)
    a = tf.layers.average_pooling2d(b, 2, 1)
    f = tf.layers.flatten(p)
    d = tf.layers.dropout(f, 0.5)
    with tf.variable_scope("tower"):
        t = tf.layers.dense(x, 3)
        t2 = tf.layers.conv1d(tf.placeholder(tf.float32, [2, 9, 3], name="seq"), 2, 3)
    outs = [h, c, b, p, a, f, d, t, t2]
    return {"feeds": {}, "fetch": {}, "names": _shapes(tf) + _collections(tf)
            + [o.op.name for o in outs] + [str(o.get_shape().as_list()) for o in outs]}


@case
def layers_name_and_reuse(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    ones = tf.ones_initializer()
    y1 = tf.layers.dense(x, 2, name="fc", kernel_initializer=ones)
    y2 = tf.layers.dense(x, 2, name="fc", reuse=True)
    with tf.variable_scope("net"):
        z1 = tf.layers.dense(x, 2, kernel_initializer=ones)
    with tf.variable_scope("net", reuse=True):
        z2 = tf.layers.dense(x, 2)
    layer = tf.layers.Dense(2, kernel_initializer=ones, name="shared")
    s1, s2 = layer(x), layer.apply(x * 2.0)
    names = [layer.name, layer.kernel.name, layer.bias.name] + [
        v.name for v in layer.variables + layer.trainable_variables]
    names += [t.op.name for t in (y1, y2, z1, z2, s1, s2)]
    return {"feeds": {x: rand(1, 2, 3)}, "init": True, "names": _shapes(tf) + names,
            "fetch": {"y1": y1, "y2": y2, "z2": z2, "s2": s2}}


@case
def layers_dense_values_and_grads(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    k = tf.constant_initializer(rand(2, 3, 4))
    y = tf.layers.dense(x, 4, activation=tf.nn.tanh, kernel_initializer=k,
                        bias_initializer=tf.constant_initializer(0.25))
    kernel, bias = tf.trainable_variables()
    return {"feeds": {x: rand(3, 5, 3)}, "init": True, "fetch": {"y": y},
            "grads": ("y", [x, kernel, bias])}


@case
def layers_dense_rank3_input(tf):
    x = tf.placeholder(tf.float32, [2, None, 3], name="x")
    y = tf.layers.dense(x, 4, kernel_initializer=tf.constant_initializer(rand(4, 3, 4)),
                        use_bias=False)
    return {"feeds": {x: rand(5, 2, 4, 3)}, "init": True, "fetch": {"y": y},
            "grads": ("y", [x, tf.trainable_variables()[0]])}


@case
def layers_dense_float64(tf):
    x = tf.placeholder(tf.float64, [None, 2], name="x")
    y = tf.layers.dense(x, 3, kernel_initializer=tf.ones_initializer())
    return {"feeds": {x: rand(6, 4, 2, dtype=np.float64)}, "init": True, "fetch": {"y": y},
            "names": _shapes(tf) + [v.dtype.base_dtype.name for v in tf.global_variables()]}


@case
def layers_conv2d_valid_and_same(tf):
    im = tf.placeholder(tf.float32, [2, 7, 6, 3], name="im")
    a = tf.layers.conv2d(im, 4, 3, kernel_initializer=tf.constant_initializer(rand(7, 3, 3, 3, 4)),
                         bias_initializer=tf.constant_initializer(0.1), activation=tf.nn.relu)
    b = tf.layers.conv2d(im, 2, [3, 2], strides=[2, 1], padding="same",
                         kernel_initializer=tf.constant_initializer(rand(8, 3, 2, 3, 2)))
    return {"feeds": {im: rand(9, 2, 7, 6, 3)}, "init": True, "fetch": {"a": a, "b": b},
            "grads": ("a", [im] + tf.trainable_variables()[:2])}


@case
def layers_conv2d_dilated(tf):
    im = tf.placeholder(tf.float32, [1, 9, 9, 2], name="im")
    y = tf.layers.conv2d(im, 3, 3, dilation_rate=2,
                         kernel_initializer=tf.constant_initializer(rand(10, 3, 3, 2, 3)))
    return {"feeds": {im: rand(11, 1, 9, 9, 2)}, "init": True, "fetch": {"y": y},
            "grads": ("y", [im, tf.trainable_variables()[0]])}


@case
def layers_conv1d(tf):
    x = tf.placeholder(tf.float32, [2, 9, 3], name="x")
    y = tf.layers.conv1d(x, 4, 3, strides=2, padding="same",
                         kernel_initializer=tf.constant_initializer(rand(12, 3, 3, 4)),
                         bias_initializer=tf.constant_initializer(-0.5))
    return {"feeds": {x: rand(13, 2, 9, 3)}, "init": True, "fetch": {"y": y},
            "grads": ("y", [x, tf.trainable_variables()[0]])}


@case
def layers_pooling(tf):
    im = tf.placeholder(tf.float32, [2, 7, 7, 3], name="im")
    outs = {
        "max_valid": tf.layers.max_pooling2d(im, 2, 2),
        "max_same": tf.layers.max_pooling2d(im, 3, 2, padding="same"),
        "avg_valid": tf.layers.average_pooling2d(im, [2, 3], [1, 2]),
        "avg_same": tf.layers.average_pooling2d(im, 3, 2, padding="same"),
        "max_obj": tf.layers.MaxPooling2D(2, 1)(im),
        "avg_obj": tf.layers.AveragePooling2D(3, 3, padding="same")(im),
    }
    total = tf.add_n([tf.reduce_sum(t * t) for t in outs.values()])
    outs["total"] = total
    return {"feeds": {im: rand(14, 2, 7, 7, 3)}, "fetch": outs, "grads": ("total", [im]),
            "names": [t.op.name for t in outs.values() if t is not total]}


@case
def layers_flatten(tf):
    a = tf.placeholder(tf.float32, [None, 2, 3, 2], name="a")
    b = tf.placeholder(tf.float32, [4, None, 3], name="b")
    fa, fb = tf.layers.flatten(a), tf.layers.flatten(b)
    fc = tf.layers.Flatten()(a)
    return {"feeds": {a: rand(15, 5, 2, 3, 2), b: rand(16, 4, 2, 3)},
            "fetch": {"fa": fa, "fb": fb, "fc": fc}, "grads": ("fa", [a]),
            "names": [t.op.name for t in (fa, fb, fc)]}


@case
def layers_dropout(tf):
    x = tf.ones([64, 32])
    off = tf.layers.dropout(x, 0.5)
    off2 = tf.layers.Dropout(0.3)(x, training=False)
    on = tf.layers.dropout(x, 0.75, training=True)
    training = tf.placeholder_with_default(False, [], name="training")
    fed = tf.layers.dropout(x, 0.5, training=training)
    return {"feeds": {}, "fetch": {"off": off, "off2": off2, "on_max": tf.reduce_max(on),
                                   "fed": fed},
            "names": [off.op.name, off2.op.name]}


def _bn(tf: Any, shape: list[int], seed: int, training: Any, **kw: Any) -> dict:
    x = tf.placeholder(tf.float32, shape, name="x")
    y = tf.layers.batch_normalization(x, training=training, **kw)
    ups = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    fetch = {"y": y}
    for v in tf.global_variables():
        fetch[v.op.name] = v.read_value() if hasattr(v, "read_value") else v
    spec = {"feeds": {x: rand(seed, *shape) * 1.5 + 0.5}, "init": True, "fetch": fetch,
            "grads": ("y", [x] + tf.trainable_variables()),
            "names": _shapes(tf) + _collections(tf)}
    if ups:
        spec["before"] = [(tf.group(*ups), 3)]
    return spec


@case
def layers_batch_norm_fused_training(tf):
    return _bn(tf, [4, 3, 3, 2], 20, True, momentum=0.8)


@case
def layers_batch_norm_fused_inference(tf):
    return _bn(tf, [4, 3, 3, 2], 21, False, epsilon=0.01,
               gamma_initializer=tf.constant_initializer([2.0, 0.5]),
               beta_initializer=tf.constant_initializer([0.1, -0.2]),
               moving_mean_initializer=tf.constant_initializer([0.3, -0.1]),
               moving_variance_initializer=tf.constant_initializer([1.5, 0.7]))


@case
def layers_batch_norm_dense_training(tf):
    return _bn(tf, [6, 3], 22, True, momentum=0.5,
               gamma_initializer=tf.constant_initializer([1.0, 2.0, 0.5]))


@case
def layers_batch_norm_dense_inference(tf):
    return _bn(tf, [6, 3], 23, False,
               moving_variance_initializer=tf.constant_initializer([2.0, 0.5, 1.0]))


@case
def layers_batch_norm_rank3_axis1(tf):
    return _bn(tf, [4, 3, 5], 24, True, axis=1, momentum=0.9)


@case
def layers_batch_norm_no_center_scale(tf):
    return _bn(tf, [4, 2, 2, 3], 25, True, center=False, scale=False, momentum=0.7)


@case
def layers_batch_norm_training_tensor(tf):
    x = tf.placeholder(tf.float32, [4, 3, 3, 2], name="x")
    h = tf.placeholder(tf.float32, [5, 3], name="h")
    on = tf.placeholder_with_default(True, [], name="on")
    off = tf.placeholder_with_default(False, [], name="off")
    y1 = tf.layers.batch_normalization(x, training=on, momentum=0.6)
    y2 = tf.layers.batch_normalization(x, training=off, momentum=0.6)
    y3 = tf.layers.batch_normalization(h, training=on, momentum=0.6)
    y4 = tf.layers.batch_normalization(h, training=off, momentum=0.6)
    ups = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    fetch = {"y1": y1, "y2": y2, "y3": y3, "y4": y4}
    for v in tf.global_variables():
        fetch[v.op.name] = v.read_value() if hasattr(v, "read_value") else v
    loss = tf.reduce_sum(y1 * y1) + tf.reduce_sum(y3 * tf.sin(y3)) + tf.reduce_sum(y2) + tf.reduce_sum(y4)
    fetch["loss"] = loss
    return {"feeds": {x: rand(26, 4, 3, 3, 2) + 1.0, h: rand(27, 5, 3) - 0.5}, "init": True,
            "fetch": fetch, "before": [(tf.group(*ups), 2)],
            "grads": ("loss", [x, h] + tf.trainable_variables()),
            "names": _shapes(tf) + [str(len(ups))]}


@case
def layers_batch_norm_train_step(tf):
    x = tf.placeholder(tf.float32, [8, 4, 4, 1], name="x")
    c = tf.layers.conv2d(x, 2, 3, kernel_initializer=tf.constant_initializer(rand(28, 3, 3, 1, 2)))
    b = tf.layers.batch_normalization(c, training=True, momentum=0.9)
    logits = tf.layers.dense(tf.layers.flatten(b), 3,
                             kernel_initializer=tf.constant_initializer(rand(29, 8, 3)))
    loss = tf.reduce_mean(tf.square(logits - 1.0))
    with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
        train = tf.train.GradientDescentOptimizer(0.05).minimize(loss)
    fetch = {"loss": loss}
    for v in tf.global_variables():
        fetch[v.op.name] = v.read_value() if hasattr(v, "read_value") else v
    return {"feeds": {x: rand(30, 8, 4, 4, 1)}, "init": True, "fetch": fetch,
            "before": [(train, 4)]}


@case
def layers_regularization_losses(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    y = tf.layers.dense(x, 4, kernel_regularizer=_l2(tf, 0.1), bias_regularizer=_l1(tf, 0.5),
                        kernel_initializer=tf.constant_initializer(rand(31, 3, 4)),
                        bias_initializer=tf.constant_initializer(-0.3),
                        activity_regularizer=_l1(tf, 0.01))
    c = tf.layers.conv2d(tf.reshape(y, [-1, 2, 2, 1]), 2, 2, kernel_regularizer=_l2(tf, 0.2),
                         kernel_initializer=tf.constant_initializer(rand(32, 2, 2, 1, 2)))
    b = tf.layers.batch_normalization(c, training=True, gamma_regularizer=_l2(tf, 0.3),
                                      beta_regularizer=_l1(tf, 0.4))
    losses = tf.get_collection(tf.GraphKeys.REGULARIZATION_LOSSES)
    total = tf.add_n(losses)
    fetch = {f"loss{i}": t for i, t in enumerate(losses)}
    fetch["total"] = total
    fetch["b"] = b
    return {"feeds": {x: rand(33, 5, 3)}, "init": True, "fetch": fetch,
            "grads": ("total", [x] + tf.trainable_variables()),
            "names": [t.name for t in losses]}


@case
def layers_scope_regularizer_and_initializer(tf):
    x = tf.placeholder(tf.float32, [None, 2], name="x")
    with tf.variable_scope("s", initializer=tf.constant_initializer(0.5),
                           regularizer=_l2(tf, 1.0)):
        y = tf.layers.dense(x, 2)
    losses = tf.get_collection(tf.GraphKeys.REGULARIZATION_LOSSES)
    return {"feeds": {x: rand(34, 3, 2)}, "init": True, "fetch": {"y": y},
            "names": [t.name for t in losses] + _shapes(tf)}


@case
def layers_bad_conv_rank(tf):
    tf.layers.conv2d(tf.zeros([2, 3]), 2, 3)
    return {"feeds": {}, "fetch": {}}


@case
def layers_bad_dense_unknown_last_dim(tf):
    tf.layers.dense(tf.placeholder(tf.float32, [None, None]), 2)
    return {"feeds": {}, "fetch": {}}


@case
def layers_bad_reuse_missing(tf):
    tf.layers.dense(tf.zeros([2, 3]), 2, name="nothing", reuse=True)
    return {"feeds": {}, "fetch": {}}


@case
def layers_bad_duplicate_name(tf):
    x = tf.zeros([2, 3])
    tf.layers.dense(x, 2, name="twice")
    tf.layers.dense(x, 2, name="twice")
    return {"feeds": {}, "fetch": {}}


@case
def layers_conv2d_transpose(tf):
    im = tf.placeholder(tf.float32, [None, 3, 4, 2], name="im")
    a = tf.layers.conv2d_transpose(im, 3, 3, strides=2,
                                   kernel_initializer=tf.constant_initializer(rand(40, 3, 3, 3, 2)),
                                   bias_initializer=tf.constant_initializer(0.2))
    b = tf.layers.conv2d_transpose(im, 2, [2, 3], strides=[2, 1], padding="same",
                                   kernel_initializer=tf.constant_initializer(rand(41, 2, 3, 2, 2)))
    return {"feeds": {im: rand(42, 2, 3, 4, 2)}, "init": True, "fetch": {"a": a, "b": b},
            "grads": ("a", [im] + tf.trainable_variables()[:2]),
            "names": _shapes(tf) + [a.op.name, b.op.name]}


@case
def layers_auto_reuse_and_custom_layer(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    ones = tf.ones_initializer()
    y1 = tf.layers.dense(x, 2, name="auto", reuse=tf.AUTO_REUSE, kernel_initializer=ones)
    y2 = tf.layers.dense(x * 3.0, 2, name="auto", reuse=tf.AUTO_REUSE)

    class Scale(tf.layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight("w", [int(input_shape[-1])],
                                     initializer=tf.constant_initializer(1.5))
            self.c = self.add_weight("count", [], initializer=tf.zeros_initializer(),
                                     trainable=False)
            self.built = True

        def call(self, inputs):
            return inputs * self.w + self.c

    layer = Scale()
    s = layer(x)
    names = [layer.name, y1.op.name, y2.op.name, s.op.name] + [
        v.name for v in layer.trainable_variables + layer.non_trainable_variables]
    return {"feeds": {x: rand(43, 2, 3)}, "init": True, "fetch": {"y2": y2, "s": s},
            "names": _shapes(tf) + _collections(tf) + names, "grads": ("s", [x, layer.w])}


@case
def layers_under_name_scopes(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    layer = tf.layers.Dense(2, kernel_initializer=tf.ones_initializer())
    with tf.name_scope("foo"):
        a = layer(x)
        b = tf.layers.batch_normalization(a, training=True)
    with tf.name_scope("bar"):
        c = layer(x * 2.0)
        d = tf.layers.dropout(c, 0.5, training=False)
    with tf.variable_scope("vs"):
        with tf.name_scope("inner"):
            e = tf.layers.conv2d(tf.reshape(x, [-1, 1, 3, 1]), 1, [1, 2], name="cv",
                                 kernel_initializer=tf.ones_initializer())
    names = [t.op.name for t in (a, b, c, d, e)] + [layer.name, layer.scope_name]
    return {"feeds": {x: rand(44, 2, 3)}, "init": True, "fetch": {"b": b, "d": d, "e": e},
            "names": _shapes(tf) + _collections(tf) + names}


@case
def layers_batch_norm_unfused_4d(tf):
    return _bn(tf, [3, 2, 2, 3], 45, True, fused=False, momentum=0.6)


@case
def layers_batch_norm_float16(tf):
    x = tf.placeholder(tf.float16, [4, 2, 2, 3], name="x")
    y = tf.layers.batch_normalization(x, training=True, momentum=0.5)
    # (The unfused float16 path rounds some outputs 1 ulp away from TF's; not compared.)
    ups = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    fetch = {"y": y}
    for v in tf.global_variables():
        fetch[v.op.name] = v.read_value() if hasattr(v, "read_value") else v
    return {"feeds": {x: (rand(46, 4, 2, 2, 3) * 2).astype(np.float16)}, "init": True,
            "fetch": fetch, "before": [(tf.group(*ups), 2)],
            "names": _shapes(tf) + [v.dtype.base_dtype.name for v in tf.global_variables()]}
