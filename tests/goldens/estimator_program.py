"""A small deterministic Estimator program, written once and run under both TF 2.15
(``estimator_generate.py`` records its output as ``tests/goldens/estimator.json``) and
ckptsync (``tests/estimator/test_goldens.py`` compares), so both sides run the same code.

``run(tf, workdir)`` takes the module a TF1 program imports as ``tf``
(``tensorflow.compat.v1`` or ``ckptsync``) and returns a JSON-able dict: the files in
``model_dir`` after each phase (TF's ``.index``/``.data-*``/``.meta`` and ckptsync's
``.h5`` both become their checkpoint prefix), the state file, variable values, what
``evaluate`` and ``predict`` return, the event files' tags and steps (read with
TensorBoard's own loader) and the errors of bad calls. Constant initializers and no
shuffling make every value exact up to float32 rounding.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

X = np.array([[0.1 * i, 1.0 - 0.05 * i] for i in range(12)], np.float32)
Y = (2.0 * X[:, 0] - X[:, 1] + 0.5).astype(np.float32)


def _files(model_dir: str) -> list[str]:
    """What ``model_dir`` holds, checkpoint files as their prefix, event files as
    ``events``, directories with a trailing ``/``."""
    out = set()
    for name in os.listdir(model_dir):
        if os.path.isdir(os.path.join(model_dir, name)):
            out.add(name + "/")
            continue
        m = re.match(r"^(.*?\.ckpt-\d+)(\.index|\.data-\d+-of-\d+|\.meta|\.h5)$", name)
        out.add(m.group(1) if m else "events" if name.startswith("events.out.tfevents")
                else name)
    return sorted(out)


def _state(tf: Any, model_dir: str) -> dict[str, Any]:
    st = tf.train.get_checkpoint_state(model_dir)
    return {"model_checkpoint_path": os.path.basename(st.model_checkpoint_path),
            "all_model_checkpoint_paths": [os.path.basename(p)
                                           for p in st.all_model_checkpoint_paths]}


def _events(directory: str) -> dict[str, Any]:
    """Scalar tags -> [[step, value], ...] (``global_step/sec`` without its value) and
    tensor tags -> [step, ...], from every event file of ``directory``, in TensorBoard's
    own loader."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(directory, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    return {"scalars": {t: [[e.step, None if t == "global_step/sec" else float(e.value)]
                            for e in acc.Scalars(t)]  # a rate: its value is the clock's
                        for t in sorted(tags["scalars"])},
            "tensors": {t: [e.step for e in acc.Tensors(t)] for t in sorted(tags["tensors"])}}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _error(fn: Any, *replace: Any) -> list[str]:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - recording what TF raises
        message = str(e)
        for r in replace:
            message = message.replace(str(r), "<obj>")
        builtin = next(c for c in type(e).__mro__ if c.__module__ == "builtins")
        return [builtin.__name__, message]
    return ["no error", ""]


def run(tf: Any, workdir: str) -> dict[str, Any]:
    """Runs the program with ``tf`` in ``workdir`` (an empty directory); returns what
    it saw."""
    est_lib = tf.estimator
    ModeKeys = est_lib.ModeKeys  # noqa: N806 - TF's name

    def model_fn(features, labels, mode, params, config):
        w = tf.get_variable("w", [2, 1], initializer=tf.constant_initializer([0.5, -0.25]))
        b = tf.get_variable("b", [1], initializer=tf.zeros_initializer())
        y = tf.reshape(tf.matmul(features["x"], w) + b, [-1])
        predictions = {"y": y, "twice": 2.0 * y}
        if mode == ModeKeys.PREDICT:
            return est_lib.EstimatorSpec(mode, predictions=predictions)
        loss = tf.losses.mean_squared_error(labels, y)
        if mode == ModeKeys.EVAL:
            return est_lib.EstimatorSpec(mode, loss=loss, eval_metric_ops={
                "rmse": tf.metrics.root_mean_squared_error(labels, y),
                "mean_y": tf.metrics.mean(y)})
        # Written by the trainer's merge_all. Of y, which the update waits for: a summary of
        # w itself races with the update in TF (its value at a step is not TF's to fix).
        tf.summary.scalar("y_mean", tf.reduce_mean(y))
        opt = tf.train.GradientDescentOptimizer(params["lr"])
        train_op = opt.minimize(loss, global_step=tf.train.get_global_step())
        return est_lib.EstimatorSpec(mode, loss=loss, train_op=train_op)

    def train_input_fn(params):
        assert params["lr"] == 0.1
        return tf.data.Dataset.from_tensor_slices(({"x": X}, Y)).repeat().batch(4)

    def eval_input_fn():  # 10 examples: batches of 4, 4, 2 (loss is the batches' mean)
        return tf.data.Dataset.from_tensor_slices(({"x": X[:10]}, Y[:10])).batch(4)

    def finite_input_fn(mode):  # 12 examples, batches of 5: 3 steps, then the end
        assert mode == ModeKeys.TRAIN
        return tf.data.Dataset.from_tensor_slices(({"x": X}, Y)).batch(5)

    def tuple_input_fn():
        return {"x": tf.constant(X[:4])}, tf.constant(Y[:4])

    def predict_input_fn():
        return tf.data.Dataset.from_tensor_slices({"x": X[:5]}).batch(2)

    out: dict[str, Any] = {}
    model_dir = os.path.join(workdir, "model")
    config = est_lib.RunConfig(model_dir=model_dir, tf_random_seed=1, save_summary_steps=2,
                               save_checkpoints_steps=3, keep_checkpoint_max=2,
                               log_step_count_steps=2)
    est = est_lib.Estimator(model_fn, config=config, params={"lr": 0.1})
    out["model_dir"] = est.model_dir == model_dir
    out["latest_before"] = est.latest_checkpoint()
    out["eval_untrained"] = _plain(est.evaluate(eval_input_fn, name="untrained"))

    est.train(train_input_fn, max_steps=7)
    out["after_max_steps_7"] = {"files": _files(model_dir), "state": _state(tf, model_dir),
                                "latest": os.path.basename(est.latest_checkpoint())}
    out["variable_names"] = sorted(est.get_variable_names())
    out["values_7"] = {n: _plain(est.get_variable_value(n)) for n in ("w", "b", "global_step")}
    est.train(train_input_fn, steps=4)
    out["after_steps_4"] = {"files": _files(model_dir), "state": _state(tf, model_dir),
                            "global_step": int(est.get_variable_value("global_step"))}
    est.train(train_input_fn, max_steps=5)  # already past: returns at once
    out["after_max_steps_5"] = {"files": _files(model_dir),
                                "global_step": int(est.get_variable_value("global_step"))}
    est.train(finite_input_fn)  # ends with its input
    est.train(tuple_input_fn, steps=2)
    out["after_finite_and_tuple"] = {
        "files": _files(model_dir), "state": _state(tf, model_dir),
        "values": {n: _plain(est.get_variable_value(n)) for n in ("w", "b", "global_step")}}

    out["eval"] = _plain(est.evaluate(eval_input_fn))
    out["eval_two_steps"] = _plain(est.evaluate(eval_input_fn, steps=2, name="two"))
    oldest = tf.train.get_checkpoint_state(model_dir).all_model_checkpoint_paths[0]
    out["eval_at_oldest"] = _plain(est.evaluate(eval_input_fn, checkpoint_path=oldest))
    out["files_after_eval"] = _files(model_dir)
    out["predict"] = _plain(list(est.predict(predict_input_fn)))
    out["predict_batches"] = _plain(list(est.predict(predict_input_fn,
                                                     yield_single_examples=False)))
    out["predict_keys"] = _plain(list(est.predict(predict_input_fn, predict_keys=["twice"])))
    out["events_model_dir"] = _events(model_dir)
    out["events_eval"] = _events(os.path.join(model_dir, "eval"))
    out["events_eval_two"] = _events(os.path.join(model_dir, "eval_two"))

    # tf.estimator.inputs.numpy_input_fn: 24 examples over two epochs in batches of 5.
    np_dir = os.path.join(workdir, "numpy")
    est3 = est_lib.Estimator(model_fn, model_dir=np_dir, params={"lr": 0.1})
    est3.train(est_lib.inputs.numpy_input_fn({"x": X}, Y, batch_size=5, num_epochs=2,
                                             shuffle=False))
    out["numpy_input_fn"] = {
        "values": {n: _plain(est3.get_variable_value(n)) for n in ("w", "b", "global_step")},
        "predict": _plain(list(est3.predict(est_lib.inputs.numpy_input_fn(
            {"x": X[:3]}, batch_size=2, shuffle=False)))),
        "errors": {
            "shuffle": _error(lambda: est_lib.inputs.numpy_input_fn({"x": X})),
            "empty": _error(lambda: est_lib.inputs.numpy_input_fn({}, shuffle=False)()),
            "lengths": _error(lambda: est_lib.inputs.numpy_input_fn(
                {"x": X}, Y[:3], shuffle=False)()),
            "duplicate": _error(lambda: est_lib.inputs.numpy_input_fn(
                {"x": X}, {"x": Y}, shuffle=False)()),
            "type": _error(lambda: est_lib.inputs.numpy_input_fn([1], shuffle=False)()),
        }}

    # train_and_evaluate, locally: an evaluation after each checkpoint (throttle 0).
    tae_dir = os.path.join(workdir, "tae")
    est2 = est_lib.Estimator(model_fn, params={"lr": 0.1}, config=est_lib.RunConfig(
        model_dir=tae_dir, save_checkpoints_steps=2, save_summary_steps=100))
    result = est_lib.train_and_evaluate(
        est2, est_lib.TrainSpec(train_input_fn, max_steps=5),
        est_lib.EvalSpec(eval_input_fn, steps=None, throttle_secs=0, start_delay_secs=0))
    out["train_and_evaluate"] = {"result": _plain(result[0]), "exports": _plain(result[1]),
                                 "files": _files(tae_dir),
                                 "eval_events": _events(os.path.join(tae_dir, "eval"))}

    out["run_config"] = _run_config(tf)
    out["errors"] = _errors(tf, model_fn, train_input_fn, workdir)
    return out


def _run_config(tf: Any) -> dict[str, Any]:
    rc = tf.estimator.RunConfig
    c = rc()
    fields = ("model_dir", "tf_random_seed", "save_summary_steps", "save_checkpoints_steps",
              "save_checkpoints_secs", "keep_checkpoint_max", "keep_checkpoint_every_n_hours",
              "log_step_count_steps", "task_type", "task_id", "is_chief", "num_ps_replicas",
              "num_worker_replicas", "master", "evaluation_master")
    out = {"defaults": {f: getattr(c, f) for f in fields}}
    out["steps_only"] = [rc(save_checkpoints_steps=5).save_checkpoints_secs,
                         rc(save_checkpoints_steps=5).save_checkpoints_steps]
    r = rc(save_checkpoints_secs=30).replace(save_checkpoints_steps=7, keep_checkpoint_max=1)
    out["replaced"] = [r.save_checkpoints_steps, r.save_checkpoints_secs, r.keep_checkpoint_max]
    out["errors"] = {
        "both": _error(lambda: rc(save_checkpoints_steps=1, save_checkpoints_secs=1)),
        "replace_both": _error(lambda: rc().replace(save_checkpoints_steps=1,
                                                    save_checkpoints_secs=1)),
        "replace_unknown": _error(lambda: rc().replace(foo=1)),
        "empty_model_dir": _error(lambda: rc(model_dir="")),
        "summary_steps": _error(lambda: rc(save_summary_steps=-1)),
        "ckpt_steps": _error(lambda: rc(save_checkpoints_steps=-1)),
        "ckpt_secs": _error(lambda: rc(save_checkpoints_secs=-1)),
        "keep_max": _error(lambda: rc(keep_checkpoint_max=-1)),
        "keep_hours": _error(lambda: rc(keep_checkpoint_every_n_hours=0)),
        "log_steps": _error(lambda: rc(log_step_count_steps=0)),
        "seed": _error(lambda: rc(tf_random_seed=1.5)),
        "session_config": _error(lambda: rc(session_config=3)),
    }
    return out


def _errors(tf: Any, model_fn: Any, input_fn: Any, workdir: str) -> dict[str, Any]:
    est_lib = tf.estimator
    empty = os.path.join(workdir, "empty")
    est = est_lib.Estimator(model_fn, model_dir=empty, params={"lr": 0.1})

    def no_features(labels, mode):
        return None

    def bad_model_fn(features, labels, mode):
        return "not a spec"

    def three(params):
        return 1, 2, 3

    def plain_input_fn():
        return {"x": tf.constant(X[:4])}, tf.constant(Y[:4])

    def foo_fn(features, foo):
        return None

    def loss_metric_fn(features, labels, mode, params):
        spec = model_fn(features, labels, mode, params, None)
        if mode == est_lib.ModeKeys.EVAL:
            return est_lib.EstimatorSpec(mode, loss=spec.loss, eval_metric_ops={
                "loss": tf.metrics.mean(spec.loss)})
        return spec

    bad = est_lib.Estimator(bad_model_fn, model_dir=os.path.join(workdir, "bad"))
    three_est = est_lib.Estimator(model_fn, model_dir=os.path.join(workdir, "three"),
                                  params={"lr": 0.1})
    lm = est_lib.Estimator(loss_metric_fn, model_dir=os.path.join(workdir, "lm"),
                           params={"lr": 0.1})
    hook = object()
    return {
        "no_features": _error(lambda: est_lib.Estimator(no_features), no_features),
        "params_not_taken": _error(lambda: est_lib.Estimator(bad_model_fn, params={"a": 1}),
                                   bad_model_fn),
        "unexpected_arg": _error(lambda: est_lib.Estimator(foo_fn), foo_fn),
        "config_type": _error(lambda: est_lib.Estimator(model_fn, config=3)),
        "model_dir_mismatch": _error(lambda: est_lib.Estimator(
            model_fn, model_dir="/a", config=est_lib.RunConfig(model_dir="/b"))),
        "steps_and_max_steps": _error(lambda: est.train(input_fn, steps=1, max_steps=1)),
        "steps_zero": _error(lambda: est.train(input_fn, steps=0)),
        "max_steps_zero": _error(lambda: est.train(input_fn, max_steps=0)),
        "hook_type": _error(lambda: est.train(input_fn, steps=1, hooks=[hook]), hook),
        "listener_type": _error(lambda: est.train(input_fn, steps=1, saving_listeners=[hook]),
                                hook),
        "eval_steps_zero": _error(lambda: est.evaluate(input_fn, steps=0)),
        "no_checkpoint_names": _error(est.get_variable_names, empty),
        "no_checkpoint_value": _error(lambda: est.get_variable_value("w"), empty),
        "not_a_spec": _error(lambda: bad.train(plain_input_fn, steps=1)),
        "three_tuple": _error(lambda: three_est.train(three, steps=1)),
        "loss_metric": _error(lambda: lm.evaluate(input_fn, steps=1)),
        "predict_keys": _error(lambda: list(est.predict(
            lambda: tf.data.Dataset.from_tensor_slices({"x": X[:2]}).batch(2),
            predict_keys=["nope"]))),
        "train_spec_input_fn": _error(lambda: est_lib.TrainSpec(3)),
        "train_spec_max_steps": _error(lambda: est_lib.TrainSpec(input_fn, max_steps=0)),
        "eval_spec_steps": _error(lambda: est_lib.EvalSpec(input_fn, steps=0)),
        "eval_spec_name": _error(lambda: est_lib.EvalSpec(input_fn, name=3)),
        "eval_spec_delay": _error(lambda: est_lib.EvalSpec(input_fn, start_delay_secs=-1)),
        "eval_spec_throttle": _error(lambda: est_lib.EvalSpec(input_fn, throttle_secs=-1)),
        "eval_spec_hook": _error(lambda: est_lib.EvalSpec(input_fn, hooks=[hook]), hook),
        "tae_estimator": _error(lambda: est_lib.train_and_evaluate(
            3, est_lib.TrainSpec(input_fn), est_lib.EvalSpec(input_fn))),
        "tae_eval_spec": _error(lambda: est_lib.train_and_evaluate(
            est, est_lib.TrainSpec(input_fn), 3)),
    }
