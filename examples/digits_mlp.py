"""The digits MLP: 64 -> 128 -> 128 -> 10, ReLU, Adam.

A model file for ``trainer run`` and ``infer serve``: it defines
``build_net(graph, device, mode) -> cs.ModelSpec``. Both processes call it (TRAIN and
PREDICT modes) and get the same variables, so the server can restore the trainer's
checkpoints. Inputs ``x`` float32 ``[batch, 64]`` (pixels / 16); outputs ``classes``
int64 ``[batch]`` and ``probabilities`` float32 ``[batch, 10]``.
"""

import ckptsync as cs

HIDDEN = (128, 128)
NUM_CLASSES = 10
LEARNING_RATE = 1e-3


def dense(x, units, name, activation=None):
    """``activation(x @ w + b)`` with ``w`` ``[in, units]`` (glorot-uniform) and ``b`` zeros."""
    with cs.variable_scope(name):
        w = cs.get_variable("w", [x.get_shape().as_list()[-1], units])
        b = cs.get_variable("b", [units], initializer=cs.zeros_initializer())
        y = cs.nn.bias_add(cs.matmul(x, w), b)
        return activation(y) if activation else y


def build_net(graph, device, mode, learning_rate=LEARNING_RATE):
    with graph.as_default(), graph.device(device):
        x = cs.placeholder(cs.float32, [None, 64], name="x")
        h = x
        for i, units in enumerate(HIDDEN):
            h = dense(h, units, f"dense{i}", cs.nn.relu)
        logits = dense(h, NUM_CLASSES, f"dense{len(HIDDEN)}")
        outputs = {
            "classes": cs.argmax(logits, axis=1, name="classes"),
            "probabilities": cs.nn.softmax(logits, name="probabilities"),
        }
        if mode == cs.ModeKeys.PREDICT:
            return cs.ModelSpec(inputs={"x": x}, outputs=outputs)
        y = cs.placeholder(cs.int64, [None], name="y")
        loss = cs.reduce_mean(
            cs.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), name="loss")
        global_step = cs.train.get_or_create_global_step()
        train_op = cs.train.AdamOptimizer(learning_rate).minimize(loss, global_step=global_step)
        return cs.ModelSpec(inputs={"x": x}, outputs=outputs, labels={"y": y}, loss=loss,
                            train_op=train_op)
