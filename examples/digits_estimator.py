"""The digits CNN of ``digits_cnn.py`` written as a TF1 Estimator program: ``tf.layers``,
a ``tf.data`` ``input_fn``, ``tf.metrics`` accuracy and a ``serving_input_receiver_fn``.

conv 3x3x16 -> max-pool 2 -> conv 3x3x32 -> max-pool 2 -> dense 64 -> dropout (TRAIN
only) -> 10, ReLU, SAME padding, Adam. Features ``{"x": [batch, 64] float32}`` (pixels /
16), labels ``[batch] int64``; predictions ``classes`` int64 ``[batch]`` and
``probabilities`` float32 ``[batch, 10]``. Variables as TF1 names them (``conv2d/kernel``,
``dense_1/bias``, ...).

It runs four ways, with only ``import ckptsync as tf`` where a TF1 program imports
TensorFlow:

    python examples/digits_estimator.py --model-dir /tmp/est      # Estimator + train_and_evaluate
    trainer run --model examples/digits_estimator.py --checkpoint-dir /tmp/cnn --steps 500
    infer serve --model examples/digits_estimator.py --checkpoint-dir /tmp/cnn
    ckptsync demo --model examples/digits_estimator.py

As a script, ``tf.estimator.Estimator`` trains on :func:`input_fn`'s ``tf.data`` pipeline
and ``train_and_evaluate`` evaluates each new checkpoint. ``trainer run`` and ``infer
serve`` call :func:`model_fn` themselves (they feed the data; ``input_fn`` is not used):
``params`` is :data:`PARAMS`, the serving signature ``x -> classes, probabilities``
comes from :func:`serving_input_receiver_fn`.
"""

import argparse
import json

import ckptsync as tf

#: ``model_fn``'s ``params`` (``trainer run`` passes this dict; ``--learning-rate``
#: overrides ``learning_rate``).
PARAMS = {"learning_rate": 2e-3, "dropout_rate": 0.25}


def cnn(x, training, params):
    """Logits ``[batch, 10]`` of ``x`` ``[batch, 64]``; dropout only when ``training``."""
    h = tf.reshape(x, [-1, 8, 8, 1])
    for filters in (16, 32):
        h = tf.layers.conv2d(h, filters, 3, padding="same", activation=tf.nn.relu)
        h = tf.layers.max_pooling2d(h, 2, 2, padding="same")
    h = tf.layers.flatten(h)
    h = tf.layers.dense(h, 64, activation=tf.nn.relu)
    h = tf.layers.dropout(h, rate=params["dropout_rate"], training=training)
    return tf.layers.dense(h, 10)


def model_fn(features, labels, mode, params):
    """TF1's Estimator contract: the graph for ``mode``, as a ``tf.estimator.EstimatorSpec``."""
    logits = cnn(features["x"], mode == tf.estimator.ModeKeys.TRAIN, params)
    classes = tf.argmax(logits, axis=1, name="classes")
    predictions = {"classes": classes,
                   "probabilities": tf.nn.softmax(logits, name="probabilities")}
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions=predictions)
    loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if mode == tf.estimator.ModeKeys.EVAL:
        metrics = {"accuracy": tf.metrics.accuracy(labels=labels, predictions=classes)}
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)
    optimizer = tf.train.AdamOptimizer(params["learning_rate"])
    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def serving_input_receiver_fn():
    """The serving signature's input: ``x`` ``[batch, 64]`` float32, fed to the model as is."""
    x = tf.placeholder(tf.float32, [None, 64], name="x")
    return tf.estimator.export.ServingInputReceiver({"x": x}, {"x": x})


def input_fn(split, batch_size, epochs=None, shuffle=True):
    """A ``tf.data`` pipeline of the bundled digits' ``"train"`` or ``"test"`` split:
    ``({"x": [batch, 64] float32}, [batch] int64)``."""
    from ckptsync.data import load_digits  # the data (not TF's API): numpy arrays

    arrays = getattr(load_digits(), split)
    ds = tf.data.Dataset.from_tensor_slices(({"x": arrays["x"]}, arrays["y"]))
    if shuffle:
        ds = ds.shuffle(1000, seed=0)
    return ds.repeat(epochs).batch(batch_size)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", required=True, help="Estimator's model_dir (checkpoints).")
    ap.add_argument("--steps", type=int, default=600, help="Train until this global step.")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--save-checkpoints-steps", type=int, default=200)
    args = ap.parse_args(argv)
    config = tf.estimator.RunConfig(save_checkpoints_steps=args.save_checkpoints_steps,
                                    tf_random_seed=0, log_step_count_steps=100)
    estimator = tf.estimator.Estimator(model_fn, model_dir=args.model_dir, config=config,
                                       params=PARAMS)
    train_spec = tf.estimator.TrainSpec(lambda: input_fn("train", args.batch_size),
                                        max_steps=args.steps)
    eval_spec = tf.estimator.EvalSpec(lambda: input_fn("test", 512, epochs=1, shuffle=False),
                                      steps=None, throttle_secs=0)
    metrics, _ = tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
    print(json.dumps({k: float(v) for k, v in metrics.items()}))


if __name__ == "__main__":
    main()
