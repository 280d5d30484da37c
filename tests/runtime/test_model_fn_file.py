"""``ckptsync.model_fn_file``: a model file's ``model_fn`` as a ``build_net`` (in-process:
the graphs each mode builds, the arguments matched as TF's Estimator matches them)."""

from __future__ import annotations

import functools
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ckptsync as tf
from ckptsync.model_fn import fn_args
from ckptsync.model_fn_file import DataSignature, ModelFnNet
from ckptsync.model_spec import ModelFileError, load_build_net

DATA = DataSignature({"x": (np.dtype(np.float32), (4,))}, {"y": (np.dtype(np.int64), ())},
                     "test")

MODEL = textwrap.dedent("""
    import ckptsync as tf

    PARAMS = {"units": 3}
    calls = []

    def model_fn(features, labels, mode, params, config):
        calls.append((sorted(features), labels, mode, dict(params), config))
        logits = tf.layers.dense(features["x"], params["units"])
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions=logits)
        loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
        train_op = tf.train.GradientDescentOptimizer(0.1).minimize(
            loss, global_step=tf.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op,
                                          predictions={"logits": logits})

    def serving_input_receiver_fn():
        x = tf.placeholder(tf.float32, [None, 4], name="serving_x")
        return tf.estimator.export.ServingInputReceiver({"x": x}, x)
""")


@pytest.fixture
def net(tmp_path):
    (tmp_path / "m.py").write_text(MODEL)
    build_net = load_build_net(tmp_path / "m.py")
    assert isinstance(build_net, ModelFnNet)
    return build_net


def test_train_mode_feeds_placeholders_shaped_from_the_data_and_creates_the_global_step(net):
    g = tf.Graph()
    spec = net(g, "cpu:0", tf.ModeKeys.TRAIN, 0.5, data=DATA, config="cfg")
    assert list(spec.inputs) == ["x"] and list(spec.labels) == ["y"]
    assert spec.inputs["x"].get_shape().as_list() == [None, 4]
    assert spec.labels["y"].dtype == tf.int64
    assert spec.outputs == {"logits": spec.extra["estimator_spec"].predictions["logits"]}
    assert spec.loss is not None and spec.train_op is not None
    features, labels, mode, params, config = net.model_fn.__globals__["calls"][-1]
    # features a dict, a sole label a Tensor (as an input_fn of numpy arrays gives them).
    assert features == ["x"] and labels is spec.labels["y"] and mode == "train"
    assert params == {"units": 3, "learning_rate": 0.5} and config == "cfg"
    names = [v.op.name for v in g.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)]
    assert names[0] == "global_step" and "dense/kernel" in names


def test_predict_serves_the_receiver_tensors_and_a_lone_prediction_as_output(net):
    g = tf.Graph()
    spec = net(g, "cpu:0", tf.ModeKeys.PREDICT)
    # A lone receiver tensor is "input"; a lone predictions Tensor "output" (as TF).
    assert list(spec.inputs) == ["input"] and spec.inputs["input"].op.name == "serving_x"
    assert list(spec.outputs) == ["output"] and spec.labels is None
    assert spec.outputs["output"].get_shape().as_list() == [None, 3]
    assert net.model_fn.__globals__["calls"][-1][1] is None  # labels


def test_train_and_predict_make_the_same_variables(net):
    made = []
    for mode, kw in ((tf.ModeKeys.TRAIN, {"data": DATA}), (tf.ModeKeys.PREDICT, {})):
        g = tf.Graph()
        net(g, "cpu:0", mode, **kw)
        made.append({v.op.name for v in g.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES)})
    assert made[0] == made[1] == {"dense/kernel", "dense/bias"}


def test_train_without_the_data_signature_is_refused(net):
    with pytest.raises(ModelFileError, match="needs the training data's signature"):
        net(tf.Graph(), "cpu:0", tf.ModeKeys.TRAIN)


def test_arguments_are_matched_by_name_as_tfs_fn_args():
    def f(features, labels, mode, params):
        pass

    class Callable_:
        def __call__(self, features, mode):
            pass

    assert fn_args(f) == ("features", "labels", "mode", "params")
    assert fn_args(functools.partial(f, params={})) == ("features", "labels", "mode")
    assert fn_args(functools.partial(f, 1)) == ("labels", "mode", "params")
    assert fn_args(Callable_()) == ("features", "mode")


@pytest.mark.parametrize("source, message", [
    ("def model_fn(inputs, labels, mode):\n    pass\n", "must include a features argument"),
    ("PARAMS = [1]\ndef model_fn(features, params):\n    pass\n", "PARAMS in model file"),
    ("def model_fn(features):\n    pass\nserving_input_receiver_fn = 3\n",
     "serving_input_receiver_fn in .* must be a function"),
    ("def model_fn(features):\n    pass\n"
     "def serving_input_receiver_fn():\n    return 'x'\n",
     "returned str 'x'; expected serving_input_receiver_fn\\(\\) -> "),
])
def test_a_model_fn_file_tf_could_not_run_is_refused(tmp_path, source, message):
    (tmp_path / "m.py").write_text(source)
    with pytest.raises(ModelFileError, match=message):
        load_build_net(tmp_path / "m.py")(tf.Graph(), "cpu:0", tf.ModeKeys.PREDICT)


def test_a_model_fn_without_labels_refuses_labelled_data(tmp_path):
    (tmp_path / "m.py").write_text("def model_fn(features, mode):\n    pass\n")
    with pytest.raises(ModelFileError, match="does not take labels, but the data has labels"):
        load_build_net(tmp_path / "m.py")(tf.Graph(), "cpu:0", tf.ModeKeys.TRAIN, data=DATA)


GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "goldens"
                     / "model_fn_digits_estimator.json").read_text())
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits_estimator.py"
DIGITS = DataSignature({"x": (np.dtype(np.float32), (64,))}, {"y": (np.dtype(np.int64), ())},
                       "digits")


@pytest.mark.parametrize("mode", [tf.ModeKeys.TRAIN, tf.ModeKeys.EVAL, tf.ModeKeys.PREDICT])
def test_the_estimator_example_builds_the_graphs_tf_builds(mode):
    """Against TF 2.15's own graphs of the same file (tests/goldens/make_model_fn_golden.py):
    variables (names, shapes, order), metrics, serving signature."""
    want = GOLDEN["modes"][mode]
    g = tf.Graph()
    spec = load_build_net(EXAMPLE)(g, "cpu:0", mode, data=DIGITS)
    with g.as_default():
        assert [[v.op.name, v.get_shape().as_list()] for v in tf.global_variables()] \
            == want["global_variables"]
        assert [[v.op.name, v.get_shape().as_list()] for v in tf.local_variables()] \
            == want["local_variables"]
    est = spec.extra["estimator_spec"]
    assert sorted(est.eval_metric_ops or {}) == want["eval_metrics"]
    assert {k: t.get_shape().as_list() for k, t in spec.inputs.items()} == want["inputs"]
    if mode == tf.ModeKeys.PREDICT:
        assert {k: [t.dtype.name, t.get_shape().as_list()] for k, t in spec.outputs.items()} \
            == {k: [d, s] for k, (d, s) in want["outputs"].items()}


@pytest.mark.parametrize("receiver, expect", [
    ("tf.estimator.export.TensorServingInputReceiver(x, x)", "tensor"),
    ("tf.estimator.export.ServingInputReceiver({'image': x}, x)", "image"),
])
def test_training_features_take_the_structure_the_receiver_serves(tmp_path, receiver, expect):
    """A model_fn written for its receiver (``features["image"]``, or ``features`` a
    Tensor) trains from ``--data``'s one feature array ``x`` unchanged."""
    (tmp_path / "m.py").write_text(textwrap.dedent(f"""
        import ckptsync as tf
        seen = []

        def model_fn(features, labels, mode):
            seen.append(features)
            x = features if isinstance(features, tf.Tensor) else features["image"]
            logits = tf.layers.dense(x, 3)
            if mode == tf.estimator.ModeKeys.PREDICT:
                return tf.estimator.EstimatorSpec(mode, predictions=logits)
            loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
            return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=tf.no_op())

        def serving_input_receiver_fn():
            x = tf.placeholder(tf.float32, [None, 4], name="serving_x")
            return {receiver}
    """))
    net = load_build_net(tmp_path / "m.py")
    spec = net(tf.Graph(), "cpu:0", tf.ModeKeys.TRAIN, data=DATA)
    assert list(spec.inputs) == ["x"]  # what the trainer feeds from the data
    features = net.model_fn.__globals__["seen"][-1]
    if expect == "tensor":
        assert features is spec.inputs["x"]
    else:
        assert features == {"image": spec.inputs["x"]}
    served = net(tf.Graph(), "cpu:0", tf.ModeKeys.PREDICT)
    assert list(served.inputs) == ["input"]


def test_a_classification_or_regression_output_is_served_with_a_warning(tmp_path, caplog):
    """TF exports a ClassificationOutput/RegressionOutput signature only over one string
    input (tf.Example) and leaves it out otherwise; here it is served as a predict
    signature of its tensors, and the log says TF Serving would not serve it."""
    (tmp_path / "m.py").write_text(textwrap.dedent("""
        import ckptsync as tf

        def model_fn(features, labels, mode):
            probs = tf.nn.softmax(tf.layers.dense(features["x"], 3))
            return tf.estimator.EstimatorSpec(mode, predictions=probs, export_outputs={
                "classify": tf.estimator.export.ClassificationOutput(scores=probs),
                "serving_default": tf.estimator.export.PredictOutput({"p": probs})})

        serving_input_receiver_fn = tf.estimator.export.build_raw_serving_input_receiver_fn(
            {"x": tf.placeholder(tf.float32, [None, 4], name="x")})
    """))
    spec = load_build_net(tmp_path / "m.py")(tf.Graph(), "cpu:0", tf.ModeKeys.PREDICT)
    assert set(spec.extra["signature_outputs"]["classify"]) == {"scores"}
    assert 'export_outputs["classify"] is a ClassificationOutput' in caplog.text
    assert "TF Serving would not serve" in caplog.text
    assert 'export_outputs["serving_default"]' not in caplog.text
