"""EstimatorSpec's checks and tf.estimator.export, against TF 2.15's messages (recorded
from ``tensorflow_estimator/python/estimator/model_fn.py`` and ``export/export.py``)."""

from __future__ import annotations

import pytest

import ckptsync as tf

E, M = tf.estimator.EstimatorSpec, tf.estimator.ModeKeys


@pytest.fixture
def graph():
    g = tf.Graph()
    with g.as_default():
        yield g


def test_loss_of_shape_one_is_reshaped_to_a_scalar_as_tf(graph):
    spec = E(M.EVAL, loss=tf.constant([2.0]))
    assert spec.loss.shape.as_list() == [] and spec.predictions == {}
    assert spec.eval_metric_ops == {} and spec.training_hooks == ()


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(mode=M.TRAIN, loss="L"), ValueError, "Missing train_op."),
    (dict(mode=M.EVAL), ValueError, "Missing loss."),
    (dict(mode=M.PREDICT), ValueError, "Missing predictions."),
    (dict(mode=M.EVAL, loss=1.0), TypeError, "loss must be Tensor, given: 1.0"),
    (dict(mode=M.EVAL, loss="L2"), ValueError, "Loss must be scalar, given:"),
    (dict(mode=M.PREDICT, predictions={"a": 1}), TypeError, "predictions[a] must be Tensor, given: 1"),
    (dict(mode=M.EVAL, loss="L", training_hooks=[object()]), TypeError,
     "All hooks must be SessionRunHook instances, given: <object"),
    (dict(mode=M.EVAL, loss="L", eval_metric_ops={"a": "L"}), TypeError,
     "Values of eval_metric_ops must be (metric_value, update_op) tuples, given:"),
    (dict(mode=M.EVAL, loss="L", eval_metric_ops=[1]), TypeError, "eval_metric_ops must be a dict"),
    (dict(mode=M.EVAL, loss="L", scaffold=3), TypeError, "scaffold must be tf.train.Scaffold. Given: 3"),
    (dict(mode=M.PREDICT, predictions="L", export_outputs={"a": 1}), TypeError,
     "Values in `export_outputs` must be ExportOutput objects, received: {'a': 1}."),
    (dict(mode=M.TRAIN, loss="L", train_op=3), TypeError, "train_op must be Operation or Tensor"),
])
def test_bad_specs_raise_tfs_errors(graph, kwargs, error, message):
    values = {"L": tf.constant(1.0), "L2": tf.constant([1.0, 2.0])}
    kwargs = {k: values.get(v, v) if isinstance(v, str) and k != "mode" else v
              for k, v in kwargs.items()}
    if kwargs.get("eval_metric_ops") == {"a": "L"}:
        kwargs["eval_metric_ops"] = {"a": values["L"]}
    with pytest.raises(error) as info:
        E(**kwargs)
    assert message in str(info.value)


def test_hooks_are_session_run_hooks(graph):
    hook = tf.train.StopAtStepHook(last_step=3)
    spec = E(M.EVAL, loss=tf.constant(1.0), evaluation_hooks=[hook], scaffold=tf.train.Scaffold())
    assert spec.evaluation_hooks == (hook,)


def test_a_tensor_from_another_graph_is_refused(graph):
    with tf.Graph().as_default():
        other = tf.constant(1.0)
    with pytest.raises(ValueError, match='loss with "Const:0" must be from the default graph'):
        E(M.EVAL, loss=other)


def test_predict_gets_a_default_serving_signature(graph):
    p = tf.constant([1.0])
    spec = E(M.PREDICT, predictions={"p": p})
    assert list(spec.export_outputs) == ["serving_default"]
    assert spec.export_outputs["serving_default"].outputs == {"p": p}
    out = tf.estimator.export.PredictOutput(p)
    spec = E(M.PREDICT, predictions=p, export_outputs={"mine": out})
    assert spec.export_outputs == {"mine": out, "serving_default": out}
    with pytest.raises(ValueError, match="Multiple `export_outputs`"):
        E(M.PREDICT, predictions=p, export_outputs={"a": out, "b": out})


def test_replace_keeps_the_mode(graph):
    spec = E(M.EVAL, loss=tf.constant(1.0))
    assert spec._replace(loss=tf.constant(2.0)).mode == M.EVAL
    with pytest.raises(ValueError, match="mode of EstimatorSpec cannot be changed."):
        spec._replace(mode=M.TRAIN)


def test_raw_serving_input_receiver_fn_makes_placeholders_like_the_features(graph):
    x = tf.placeholder(tf.float32, [None, 64], name="x")
    fn = tf.estimator.export.build_raw_serving_input_receiver_fn({"x": x}, default_batch_size=5)
    receiver = fn()
    got = receiver.features["x"]
    assert got is receiver.receiver_tensors["x"] and got is not x
    assert got.shape.as_list() == [5, 64] and got.dtype == tf.float32
    assert got.op.type == "Placeholder" and got.op.name == "x_1"  # named as TF: x's op name
    assert receiver.receiver_tensors_alternatives is None


def test_serving_input_receiver_wraps_a_lone_tensor_and_checks(graph):
    x = tf.placeholder(tf.float32, [None, 2], name="x")
    r = tf.estimator.export.ServingInputReceiver(x, x)
    assert r.features == {"feature": x} and r.receiver_tensors == {"input": x}
    t = tf.estimator.export.TensorServingInputReceiver(x, {"x": x})
    assert t.features is x
    with pytest.raises(ValueError, match="features must be defined."):
        tf.estimator.export.ServingInputReceiver(None, x)
    with pytest.raises(ValueError, match="feature a must be a Tensor, SparseTensor, or RaggedTensor."):
        tf.estimator.export.ServingInputReceiver({"a": 1}, x)
    with pytest.raises(ValueError, match="receiver_tensor keys must be strings: 3."):
        tf.estimator.export.ServingInputReceiver(x, {3: x})
    with pytest.raises(ValueError, match="receiver_tensors_alternatives must be a dict"):
        tf.estimator.export.ServingInputReceiver(x, x, [x])
