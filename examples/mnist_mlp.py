"""The MNIST MLP of the seed articles: 784 -> 256 -> 256 -> 10, ReLU, Adam.

Use with ``trainer run --model examples/mnist_mlp.py --data mnist:DIR``. Inputs ``x``
float32 ``[batch, 784]`` (pixels / 255); outputs ``classes`` int64 ``[batch]`` and
``probabilities`` float32 ``[batch, 10]``.
"""

import ckptsync as cs

HIDDEN = (256, 256)
NUM_CLASSES = 10


def build_net(graph, device, mode, learning_rate=1e-3):
    with graph.as_default(), graph.device(device):
        x = cs.placeholder(cs.float32, [None, 784], name="x")
        h = x
        for i, units in enumerate(HIDDEN):
            with cs.variable_scope(f"dense{i}"):
                w = cs.get_variable("w", [h.get_shape().as_list()[-1], units])
                b = cs.get_variable("b", [units], initializer=cs.zeros_initializer())
                h = cs.nn.relu(cs.nn.bias_add(cs.matmul(h, w), b))
        with cs.variable_scope(f"dense{len(HIDDEN)}"):
            w = cs.get_variable("w", [HIDDEN[-1], NUM_CLASSES])
            b = cs.get_variable("b", [NUM_CLASSES], initializer=cs.zeros_initializer())
            logits = cs.nn.bias_add(cs.matmul(h, w), b)
        outputs = {"classes": cs.argmax(logits, axis=1, name="classes"),
                   "probabilities": cs.nn.softmax(logits, name="probabilities")}
        if mode == cs.ModeKeys.PREDICT:
            return cs.ModelSpec(inputs={"x": x}, outputs=outputs)
        y = cs.placeholder(cs.int64, [None], name="y")
        loss = cs.reduce_mean(
            cs.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), name="loss")
        train_op = cs.train.AdamOptimizer(learning_rate).minimize(
            loss, global_step=cs.train.get_or_create_global_step())
        return cs.ModelSpec(inputs={"x": x}, outputs=outputs, labels={"y": y}, loss=loss,
                            train_op=train_op)
