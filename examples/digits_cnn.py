"""The digits CNN: conv 3x3x16 -> max-pool 2 -> conv 3x3x32 -> max-pool 2 -> dense 64
-> dropout (training only) -> 10.

A model file for ``trainer run`` and ``infer serve`` (the same contract as
``digits_mlp.py``): it defines ``build_net(graph, device, mode) -> cs.ModelSpec``; both
processes call it (TRAIN and PREDICT modes) and get the same variables, so the server can
restore the trainer's checkpoints. Input ``x`` float32 ``[batch, 64]`` (pixels / 16, as
the digits data set and the MLP), seen by the convolutions as images ``[batch, 8, 8, 1]``;
outputs ``classes`` int64 ``[batch]`` and ``probabilities`` float32 ``[batch, 10]``.
ReLU after each layer but the last, SAME padding, Adam.

In TRAIN mode the network is built twice over the same variables (``AUTO_REUSE``): with
dropout for ``loss``/``train_op``, and without for ``classes``/``probabilities``, so the
trainer's held-out accuracy (and the server) see the deterministic network; the held-out
loss is the dropout loss's.

    trainer run --model examples/digits_cnn.py --checkpoint-dir /tmp/cnn --steps 1500
    ckptsync demo --model examples/digits_cnn.py
"""

import ckptsync as cs

CONV_FILTERS = (16, 32)
HIDDEN = 64
DROPOUT_RATE = 0.25
NUM_CLASSES = 10
LEARNING_RATE = 2e-3


def conv(x, filters, name):
    """``relu(conv2d(x, w) + b)`` then a 2x2 max-pool: ``[b, h, w, c] -> [b, h/2, w/2, filters]``."""
    with cs.variable_scope(name):
        w = cs.get_variable("w", [3, 3, x.get_shape().as_list()[-1], filters])
        b = cs.get_variable("b", [filters], initializer=cs.zeros_initializer())
        y = cs.nn.relu(cs.nn.bias_add(cs.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME"), b))
        return cs.nn.max_pool(y, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME")


def dense(x, units, name, activation=None):
    """``activation(x @ w + b)`` with ``w`` ``[in, units]`` (glorot-uniform) and ``b`` zeros."""
    with cs.variable_scope(name):
        w = cs.get_variable("w", [x.get_shape().as_list()[-1], units])
        b = cs.get_variable("b", [units], initializer=cs.zeros_initializer())
        y = cs.nn.bias_add(cs.matmul(x, w), b)
        return activation(y) if activation else y


def network(x, dropout_rate=0.0):
    """Logits ``[batch, 10]`` of ``x [batch, 64]``; variables under ``cnn/`` (shared)."""
    with cs.variable_scope("cnn", reuse=cs.AUTO_REUSE):
        h = cs.reshape(x, [-1, 8, 8, 1])
        for i, filters in enumerate(CONV_FILTERS):
            h = conv(h, filters, f"conv{i}")
        h = cs.reshape(h, [-1, 2 * 2 * CONV_FILTERS[-1]])
        h = dense(h, HIDDEN, "dense0", cs.nn.relu)
        if dropout_rate:
            h = cs.nn.dropout(h, rate=dropout_rate)
        return dense(h, NUM_CLASSES, "dense1")


def build_net(graph, device, mode, learning_rate=LEARNING_RATE):
    with graph.as_default(), graph.device(device):
        x = cs.placeholder(cs.float32, [None, 64], name="x")
        logits = network(x)
        outputs = {
            "classes": cs.argmax(logits, axis=1, name="classes"),
            "probabilities": cs.nn.softmax(logits, name="probabilities"),
        }
        if mode == cs.ModeKeys.PREDICT:
            return cs.ModelSpec(inputs={"x": x}, outputs=outputs)
        y = cs.placeholder(cs.int64, [None], name="y")
        train_logits = network(x, DROPOUT_RATE)
        loss = cs.reduce_mean(
            cs.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=train_logits),
            name="loss")
        global_step = cs.train.get_or_create_global_step()
        train_op = cs.train.AdamOptimizer(learning_rate).minimize(loss, global_step=global_step)
        return cs.ModelSpec(inputs={"x": x}, outputs=outputs, labels={"y": y}, loss=loss,
                            train_op=train_op)
