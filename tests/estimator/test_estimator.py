"""Estimator behaviour beyond the TF goldens: errors naming the user's function,
listeners and hooks, warm starts, summaries, TF_CONFIG, and the TF module paths."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import ckptsync as tf

X = np.arange(16, dtype=np.float32).reshape(8, 2) / 16.0
Y = (X @ np.array([1.0, -2.0], np.float32)).astype(np.float32)


def model_fn(features, labels, mode, params):
    w = tf.get_variable("w", [2, 1], initializer=tf.constant_initializer(params.get("w0", 0.0)))
    y = tf.reshape(tf.matmul(features["x"], w), [-1])
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"y": y})
    loss = tf.losses.mean_squared_error(labels, y)
    tf.summary.scalar("w_sum", tf.reduce_sum(w))
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(
        loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op,
                                      training_hooks=params.get("hooks", ()),
                                      evaluation_hooks=params.get("eval_hooks", ()))


def input_fn():
    return tf.data.Dataset.from_tensor_slices(({"x": X}, Y)).repeat().batch(4)


def eval_input_fn():
    return tf.data.Dataset.from_tensor_slices(({"x": X}, Y)).batch(4)


def estimator(tmp_path, name="m", **config):
    config.setdefault("log_step_count_steps", 1000)
    return tf.estimator.Estimator(model_fn, config=tf.estimator.RunConfig(
        model_dir=str(tmp_path / name), **config), params={})


def test_an_input_fn_that_raises_keeps_its_error_and_is_named(tmp_path):
    def broken_input_fn():
        raise KeyError("no such column")

    with pytest.raises(KeyError, match="no such column") as info:
        estimator(tmp_path).train(broken_input_fn, steps=1)
    assert any("input_fn" in n and "broken_input_fn" in n for n in info.value.__notes__)


def test_an_input_fn_of_the_wrong_structure_is_named(tmp_path):
    def three():
        return 1, 2, 3

    with pytest.raises(ValueError, match=r"input_fn should return \(features, labels\) as a "
                                         r"len 2 tuple\. .*three.* returned a tuple of 3"):
        estimator(tmp_path).train(three, steps=1)
    with pytest.raises(ValueError, match="returned None; expected a tf.data.Dataset"):
        estimator(tmp_path).train(lambda: None, steps=1)


def test_a_model_fn_returning_no_spec_or_the_wrong_modes_spec_is_named(tmp_path):
    def returns_tuple(features, labels, mode):
        return tf.constant(1.0), tf.no_op()

    with pytest.raises(ValueError, match=r"model_fn should return an EstimatorSpec\. "
                                         r".*returns_tuple.* returned tuple"):
        tf.estimator.Estimator(returns_tuple, str(tmp_path / "a")).train(input_fn, steps=1)

    def eval_only(features, labels, mode):
        w = tf.get_variable("w", [2, 1])
        loss = tf.reduce_mean(tf.matmul(features["x"], w))
        return tf.estimator.EstimatorSpec(tf.estimator.ModeKeys.EVAL, loss=loss)

    with pytest.raises(ValueError, match=r"eval_only.* was called with mode='train' and "
                                         r"returned an EstimatorSpec\(mode='eval'\) without "
                                         r"train_op"):
        tf.estimator.Estimator(eval_only, str(tmp_path / "b")).train(input_fn, steps=1)

    def no_labels(features, mode):
        return None

    with pytest.raises(ValueError, match="model_fn does not take labels, but input_fn "
                                         "returns labels."):
        tf.estimator.Estimator(no_labels, str(tmp_path / "c")).train(input_fn, steps=1)


def test_a_model_fn_that_raises_keeps_its_error_and_is_named(tmp_path):
    def broken(features, labels, mode):
        raise TypeError("bad layer")

    with pytest.raises(TypeError, match="bad layer") as info:
        tf.estimator.Estimator(broken, str(tmp_path)).train(input_fn, steps=1)
    assert any("model_fn" in n and "broken" in n for n in info.value.__notes__)


class Listener(tf.train.CheckpointSaverListener):
    def __init__(self):
        self.saved = []

    def after_save(self, session, global_step_value):
        self.saved.append(global_step_value)


def test_saving_listeners_hear_each_save_and_need_a_saver(tmp_path):
    listener = Listener()
    estimator(tmp_path, save_checkpoints_steps=2).train(input_fn, max_steps=5,
                                                        saving_listeners=[listener])
    assert listener.saved == [0, 2, 4, 5]
    with pytest.raises(ValueError, match="There should be a CheckpointSaverHook to use "
                                         "saving_listeners"):
        estimator(tmp_path, "n", save_checkpoints_steps=None,
                  save_checkpoints_secs=None).train(input_fn, steps=1,
                                                    saving_listeners=[Listener()])


class CountingHook(tf.train.SessionRunHook):
    def __init__(self):
        self.calls = []

    def begin(self):
        self.calls.append("begin")

    def after_run(self, run_context, run_values):
        self.calls.append("run")

    def end(self, session):
        self.calls.append("end")


def test_training_and_evaluation_hooks_of_the_spec_and_the_call_run(tmp_path):
    spec_hook, call_hook, eval_hook = CountingHook(), CountingHook(), CountingHook()

    def with_hooks(features, labels, mode):  # not through params: the Estimator copies them
        return model_fn(features, labels, mode, {"hooks": [spec_hook], "eval_hooks": [eval_hook]})

    est = tf.estimator.Estimator(with_hooks, str(tmp_path))
    est.train(input_fn, steps=3, hooks=[call_hook])
    assert spec_hook.calls == call_hook.calls == ["begin", "run", "run", "run", "end"]
    est.evaluate(eval_input_fn)  # 8 examples, batches of 4: two runs, then the end
    assert eval_hook.calls == ["begin", "run", "run", "end"]


def test_warm_start_takes_the_first_values_from_another_model_dir(tmp_path):
    first = estimator(tmp_path, "first")
    first.train(input_fn, steps=5)
    w = first.get_variable_value("w")
    second = tf.estimator.Estimator(model_fn, str(tmp_path / "second"), params={"w0": 7.0},
                                    warm_start_from=first.model_dir)
    values = list(second.predict(lambda: tf.data.Dataset.from_tensor_slices({"x": X[:2]}).batch(2)))
    assert np.allclose([v["y"] for v in values], (X[:2] @ w).ravel(), rtol=1e-6)
    second.train(input_fn, steps=1)
    assert int(second.get_variable_value("global_step")) == 1  # only trainables warm-start
    settings = tf.estimator.WarmStartSettings(first.model_dir, vars_to_warm_start="nothing.*")
    third = tf.estimator.Estimator(model_fn, str(tmp_path / "third"), params={"w0": 7.0},
                                   warm_start_from=settings)
    third.train(input_fn, steps=1)
    assert not np.allclose(third.get_variable_value("w"), w)


def test_merge_all_summaries_and_the_loss_are_written_every_save_summary_steps(tmp_path):
    from tensorboard.backend.event_processing import event_accumulator as ea

    est = estimator(tmp_path, save_summary_steps=3, log_step_count_steps=3)
    est.train(input_fn, max_steps=7)
    tf.summary.FileWriterCache.clear()
    acc = ea.EventAccumulator(est.model_dir)
    acc.Reload()
    assert [e.step for e in acc.Scalars("w_sum")] == [1, 4, 7]
    assert [e.step for e in acc.Scalars("loss")] == [1, 4, 7]
    assert [e.step for e in acc.Scalars("global_step/sec")] == [4, 7]


def test_predict_is_a_generator_and_checks_its_keys(tmp_path):
    est = estimator(tmp_path)
    gen = est.predict(lambda: tf.data.Dataset.from_tensor_slices({"x": X[:3]}).batch(2))
    assert next(gen) == {"y": 0.0}  # no checkpoint: initialized variables, as TF
    assert len(list(gen)) == 2
    with pytest.raises(ValueError, match="Expected to run at least one output"):
        next(est.predict(lambda: {"x": tf.constant(X)}, predict_keys=["z"]))


def test_predict_of_a_scalar_prediction_names_it_instead_of_a_bare_index_error(tmp_path):
    def scalar_fn(features, labels, mode):
        y = tf.reduce_sum(features["x"], axis=1)
        return tf.estimator.EstimatorSpec(mode, predictions={"y": y, "s": tf.constant(1.0)})

    est = tf.estimator.Estimator(scalar_fn, model_dir=str(tmp_path / "s"))

    def data():
        return tf.data.Dataset.from_tensor_slices({"x": X}).batch(4)

    # TF 2.15 raises a bare IndexError (shape[0] of a 0-d array); ours is also an IndexError
    with pytest.raises(IndexError, match=r"Prediction 's' is a scalar \(rank 0"):
        next(est.predict(data, predict_keys=["s"]))
    with pytest.raises(ValueError, match="yield_single_examples=False"):
        next(est.predict(data))
    batch = next(est.predict(data, predict_keys=["s"], yield_single_examples=False))
    assert batch == {"s": 1.0}


def test_train_refuses_an_evaluator_config_and_subclasses_may_not_override(tmp_path, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"chief": ["h:1"]},
                                                "task": {"type": "evaluator", "index": 0}}))
    config = tf.estimator.RunConfig(model_dir=str(tmp_path))
    assert (config.task_type, config.is_chief, config.cluster_spec) == ("evaluator", False, {})
    est = tf.estimator.Estimator(model_fn, config=config, params={})
    with pytest.raises(ValueError, match="Train has been called wrong configuration"):
        est.train(input_fn, steps=1)

    class Mine(tf.estimator.Estimator):
        def train(self, *a, **k):
            return None

    with pytest.raises(ValueError, match="Subclasses of Estimator cannot override members"):
        Mine(model_fn, str(tmp_path), params={})


@pytest.mark.parametrize("tf_config,message", [
    ({"task": {"type": "chief"}}, 'If "cluster" is not set in TF_CONFIG, task type must be WORKER.'),
    ({"task": {"index": 1}}, 'If "cluster" is not set in TF_CONFIG, task index must be 0.'),
    ({"cluster": {"chief": ["h:1"]}}, 'If "cluster" is set in TF_CONFIG, task type must be set.'),
    ({"cluster": {"chief": ["h:1"], "worker": ["h:2"]}, "task": {"type": "worker", "index": 0}},
     "not supported by ckptsync's Estimator, which trains in one process"),
    ({"model_dir": ""}, "model_dir in TF_CONFIG should be non-empty."),
])
def test_tf_config_is_read_as_tf_and_tasks_ckptsync_cannot_run_are_refused(
        monkeypatch, tf_config, message):
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    with pytest.raises(ValueError) as info:
        tf.estimator.RunConfig()
    assert message in str(info.value)


def test_tf_config_model_dir_and_a_lone_chief(monkeypatch, tmp_path):
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "model_dir": str(tmp_path), "cluster": {"chief": ["h:1"]},
        "task": {"type": "chief", "index": 0}}))
    c = tf.estimator.RunConfig()
    assert (c.model_dir, c.task_type, c.is_chief, c.num_worker_replicas) == (
        str(tmp_path), "chief", True, 1)
    with pytest.raises(ValueError, match="must have the same value as the model_dir in TF_CONFIG"):
        tf.estimator.RunConfig(model_dir=str(tmp_path / "other"))


def test_distribution_strategies_are_refused():
    with pytest.raises(ValueError, match="train_distribute .* is not supported"):
        tf.estimator.RunConfig(train_distribute=object())


def test_tf_module_paths_and_names():
    from ckptsync.train import basic_session_run_hooks as h

    assert h.StopAtStepHook is tf.train.StopAtStepHook
    assert h.session_run_hook.SessionRunHook is tf.train.SessionRunHook
    assert not hasattr(h, "SessionRunHook")  # as TF's module
    assert callable(tf.train.checkpoints_iterator)
    assert tf.estimator.export.PredictOutput is tf.estimator.export.PredictOutput
    with tf.Graph().as_default():
        tf.Variable(1.0)
        assert tf.train.broadcast_global_variables().type == "BroadcastGlobalVariables"
        with pytest.raises(ValueError, match="root_rank must be in"):
            tf.train.broadcast_global_variables(3)


def test_a_finite_input_ends_training_with_a_final_checkpoint(tmp_path):
    est = estimator(tmp_path, save_checkpoints_steps=100)
    est.train(eval_input_fn)  # 8 examples, batches of 4: 2 steps
    assert os.path.basename(est.latest_checkpoint()) == "model.ckpt-2"
    assert est.train(eval_input_fn, max_steps=2) is est  # reached already: returns at once


def test_numpy_input_fn_of_an_array_and_a_label_dict(tmp_path):
    def array_model(features, labels, mode):
        w = tf.get_variable("w", [2, 1], initializer=tf.ones_initializer())
        y = tf.reshape(tf.matmul(features, w), [-1])  # features: the array itself, a Tensor
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions={"y": y})
        loss = tf.losses.mean_squared_error(labels["t"], y)
        train_op = tf.train.GradientDescentOptimizer(0.1).minimize(
            loss, global_step=tf.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    est = tf.estimator.Estimator(array_model, str(tmp_path))
    fn = tf.estimator.inputs.numpy_input_fn(X, {"t": Y}, batch_size=3, num_epochs=1,
                                            shuffle=True)
    est.train(fn)  # 8 examples in batches of 3: 3 steps, the last of 2
    assert int(est.get_variable_value("global_step")) == 3
    preds = list(est.predict(tf.estimator.inputs.numpy_input_fn(X, shuffle=False)))
    assert len(preds) == 8


def test_export_saved_model_says_what_to_do_instead(tmp_path):
    with pytest.raises(tf.errors.UnimplementedError, match="infer serve"):
        estimator(tmp_path).export_saved_model(str(tmp_path / "export"), lambda: None)


def test_train_in_a_model_dir_that_is_a_file_or_fifo_fails_precondition_as_tf(tmp_path):
    for name, make in (("file", lambda p: p.write_text("x")), ("fifo", os.mkfifo)):
        path = tmp_path / name
        make(path)
        est = tf.estimator.Estimator(model_fn, model_dir=str(path), params={})
        with pytest.raises(tf.errors.FailedPreconditionError,
                           match=f"^{path} is not a directory$"):
            est.train(input_fn, steps=1)


def test_train_refuses_an_unparsable_state_file_evaluate_warns(tmp_path, caplog):
    # Unlike TF (which logs "Unparsable checkpoint state", trains from step 0 and then
    # overwrites the state file): a DataLossError naming the file and the way out.
    est = estimator(tmp_path)
    est.train(input_fn, steps=3)
    state = tmp_path / "m" / "checkpoint"
    state.write_text("model_checkpoint_path: \"model.ckpt-3\n garbage {")
    with pytest.raises(tf.errors.DataLossError,
                       match=f"Unparsable checkpoint state {state}.*Repair the state file"):
        est.train(input_fn, steps=2)
    assert state.read_text().endswith("garbage {")
    assert not (tmp_path / "m" / "model.ckpt-2.h5").exists()
    # The same code path: MonitoredTrainingSession(checkpoint_dir=...).
    with tf.Graph().as_default():
        tf.train.get_or_create_global_step()
        with pytest.raises(tf.errors.DataLossError, match="Unparsable checkpoint state"):
            tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path / "m"))
    # Read-only users keep TF's behaviour: no checkpoint, a warning naming the file.
    with caplog.at_level("WARNING", logger="ckptsync"):
        assert est.latest_checkpoint() is None
    assert f"Unparsable checkpoint state {state}" in caplog.text


def test_evaluate_whose_summary_write_fails_warns_and_returns(tmp_path, caplog, monkeypatch):
    est = estimator(tmp_path)
    est.train(input_fn, steps=2)

    def full_disk(self, *args, **kwargs):
        raise OSError(28, "No space left on device (evaluate test)")

    monkeypatch.setattr(tf.summary.FileWriter, "add_summary", full_disk)
    with caplog.at_level("WARNING", logger="ckptsync"):
        metrics = est.evaluate(eval_input_fn)
    assert metrics["global_step"] == 2 and "loss" in metrics
    assert caplog.text.count("No space left on device (evaluate test)") == 1


def test_the_eval_event_file_holds_the_eval_graph(tmp_path):
    """As TF's Estimator: the eval directory's writer is made inside the eval graph, so
    TensorBoard shows that graph for ``eval/`` (it had 0 nodes)."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    est = estimator(tmp_path)
    est.train(input_fn, steps=2)
    est.evaluate(input_fn, steps=1)
    tf.summary.FileWriterCache.clear()
    acc = ea.EventAccumulator(est.eval_dir())
    acc.Reload()
    nodes = [n.name for n in acc.Graph().node]
    assert "global_step" in nodes and len(nodes) > 5
