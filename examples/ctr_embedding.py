"""A click-through-rate model: hashed user and item ids into one 1,000,000 x 64 float32
embedding table (256 MB), a small MLP, sigmoid cross-entropy, Adagrad.

A model file for ``trainer run`` and ``infer serve`` (it defines ``build_net(graph,
device, mode) -> cs.ModelSpec``), trained on ``--data synthetic-ctr`` (synthetic click
logs, see ``docs/training.md``):

    python examples/ctr_embedding.py --checkpoint-dir /tmp/ctr --steps 300
    trainer run --model examples/ctr_embedding.py --data synthetic-ctr \\
        --checkpoint-dir /tmp/ctr --steps 2000 --batch-size 256 --save-every-steps 10
    infer serve --model examples/ctr_embedding.py --checkpoint-dir /tmp/ctr
    ckptsync demo --model examples/ctr_embedding.py --incremental

Inputs ``user_id`` and ``item_id``, int64 ``[batch]`` in ``[0, 1_000_000)`` (already
hashed); label ``click`` int64 ``[batch]`` in {0, 1}; outputs ``logistic`` float32
``[batch]`` (the click probability) and ``classes`` int64 ``[batch]`` (``logistic >
0.5``). Both ids index the same table (``embedding/table``): the MLP sees
``[user, item, user * item]`` (192 wide) -> 64 -> 32 -> 1, ReLU.

A step at batch 256 looks up 512 rows, and its gradient with respect to the table is an
``IndexedSlices`` of those rows, which ``tf.train.AdagradOptimizer`` applies sparsely:
only the looked-up rows of the table and of its accumulator (``embedding/table/Adagrad``,
another 256 MB in the trainer, not in the server) are read or written, so a step costs
the same whatever the table's size.
"""

import argparse
import json
import os

import ckptsync as cs

#: Rows of the embedding table (the hashed id space of ``--data synthetic-ctr``).
BUCKETS = 1_000_000
EMBED_DIM = 64
HIDDEN = (64, 32)
LEARNING_RATE = 0.2
INIT_STDDEV = 0.05


def dense(x, units, name, activation=None):
    """``activation(x @ w + b)`` with ``w`` ``[in, units]`` (glorot-uniform) and ``b`` zeros."""
    with cs.variable_scope(name):
        w = cs.get_variable("w", [x.get_shape().as_list()[-1], units])
        b = cs.get_variable("b", [units], initializer=cs.zeros_initializer())
        y = cs.nn.bias_add(cs.matmul(x, w), b)
        return activation(y) if activation else y


def build_net(graph, device, mode, learning_rate=LEARNING_RATE):
    with graph.as_default(), graph.device(device):
        user = cs.placeholder(cs.int64, [None], name="user_id")
        item = cs.placeholder(cs.int64, [None], name="item_id")
        with cs.variable_scope("embedding"):
            table = cs.get_variable("table", [BUCKETS, EMBED_DIM], cs.float32,
                                    initializer=cs.random_normal_initializer(stddev=INIT_STDDEV))
        u = cs.nn.embedding_lookup(table, user)
        v = cs.nn.embedding_lookup(table, item)
        h = cs.concat([u, v, u * v], axis=1)
        for i, units in enumerate(HIDDEN):
            h = dense(h, units, f"dense{i}", cs.nn.relu)
        logits = cs.reshape(dense(h, 1, f"dense{len(HIDDEN)}"), [-1], name="logits")
        probability = cs.sigmoid(logits, name="logistic")
        outputs = {"logistic": probability,
                   "classes": cs.cast(cs.greater(logits, 0.0), cs.int64, name="classes")}
        inputs = {"user_id": user, "item_id": item}
        if mode == cs.ModeKeys.PREDICT:
            return cs.ModelSpec(inputs=inputs, outputs=outputs)
        click = cs.placeholder(cs.int64, [None], name="click")
        loss = cs.reduce_mean(cs.nn.sigmoid_cross_entropy_with_logits(
            labels=cs.cast(click, cs.float32), logits=logits), name="loss")
        global_step = cs.train.get_or_create_global_step()
        train_op = cs.train.AdagradOptimizer(learning_rate).minimize(
            loss, global_step=global_step)
        return cs.ModelSpec(inputs=inputs, outputs=outputs, labels={"click": click},
                            loss=loss, train_op=train_op)


def main(argv=None):
    """Trains on ``synthetic-ctr`` in a plain TF1 loop (``Session``, ``Saver``; it resumes
    from the directory's latest checkpoint) and prints the held-out AUC of the first and
    the last step as JSON."""
    from ckptsync.data import BatchIterator, load_dataset, roc_auc  # numpy data, not TF's API

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint-dir", required=True)
    ap.add_argument("--steps", type=int, default=300, help="Train until this global step.")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--save-every-steps", type=int, default=100)
    ap.add_argument("--data", default="synthetic-ctr")
    args = ap.parse_args(argv)
    data = load_dataset(args.data, ("user_id", "item_id"), ("click",))
    test = {k: v[:20_000] for k, v in data.test.items()}
    graph = cs.Graph()
    spec = build_net(graph, "/cpu:0", cs.ModeKeys.TRAIN)
    with graph.as_default():
        step = cs.train.get_global_step()
        saver = cs.train.Saver(max_to_keep=3)
        init = cs.global_variables_initializer()
    feeds = {**spec.inputs, **spec.labels}
    batches = BatchIterator(data.train, args.batch_size, seed=0)
    prefix = f"{args.checkpoint_dir}/model.ckpt"
    os.makedirs(args.checkpoint_dir, exist_ok=True)  # as TF1, Saver.save wants it to exist

    def held_out_auc(sess):
        p = sess.run(spec.outputs["logistic"], {spec.inputs[k]: test[k] for k in spec.inputs})
        return roc_auc(test["click"], p)

    with cs.Session(graph=graph) as sess:
        latest = cs.train.latest_checkpoint(args.checkpoint_dir)
        if latest:
            saver.restore(sess, latest)
        else:
            sess.run(init)
        first = held_out_auc(sess)
        while (s := int(sess.run(step))) < args.steps:
            sess.run(spec.train_op, {feeds[k]: v for k, v in next(batches).items()})
            if (s + 1) % args.save_every_steps == 0 or s + 1 == args.steps:
                saver.save(sess, prefix, global_step=step)
        print(json.dumps({"global_step": int(sess.run(step)), "held_out_auc_first": first,
                          "held_out_auc_last": held_out_auc(sess)}))


if __name__ == "__main__":
    main()
