"""``Estimator``: trains, evaluates and predicts with a ``model_fn``, as TF 2.15's
``tf.estimator.Estimator`` (``tensorflow_estimator/python/estimator/estimator.py``),
over ckptsync's ``MonitoredTrainingSession`` and hooks.

``model_dir`` layout (as TF's, with ckptsync's checkpoint files)::

    model_dir/checkpoint               state file (model_checkpoint_path, all_...)
    model_dir/model.ckpt-<step>.h5     checkpoints (TF: .index/.data-*/.meta)
    model_dir/events.out.tfevents.*    loss, global_step/sec, merge_all summaries
    model_dir/eval/, eval_<name>/      evaluate's metrics and checkpoint_path

Not thread-safe: one ``train``/``evaluate``/``predict`` call at a time per Estimator
(each builds its own graph).
"""

from __future__ import annotations

import copy
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from .. import checkpoint as _ckpt
from .. import metrics as _metrics
from .. import summary as _summary
from ..errors import CkptsyncValueError, UnimplementedError
from ..graph import Graph, GraphKeys, add_to_collection, get_collection
from ..model_fn import EstimatorSpec
from ..model_spec import ModeKeys
from ..ops.random_ops import set_random_seed
from ..ops.state_ops import group
from ..train import (
    CheckpointSaverHook,
    ChiefSessionCreator,
    FinalOpsHook,
    LoggingTensorHook,
    MonitoredSession,
    MonitoredTrainingSession,
    NanTensorHook,
    Saver,
    Scaffold,
    StepCounterHook,
    StopAtStepHook,
    SummarySaverHook,
    create_global_step,
    get_global_step,
)
from . import _util
from .run_config import RunConfig, TaskType
from .warm_start import WarmStartSettings, warm_start

__all__ = ["Estimator", "WarmStartSettings"]

log = logging.getLogger("ckptsync.estimator")


def _overwrite_model_dir(config: Any, model_dir: Any) -> RunConfig:
    """As TF's ``maybe_overwrite_model_dir_and_session_config``."""
    if config is None:
        config = RunConfig()
        log.info("Using default config.")
    if not isinstance(config, RunConfig):
        raise CkptsyncValueError(
            f"config must be an instance of `RunConfig`, but provided {config}.")
    model_dir = os.fspath(model_dir) if model_dir is not None else None
    if model_dir is not None and config.model_dir is not None and config.model_dir != model_dir:
        raise CkptsyncValueError(
            "`model_dir` are set both in constructor and `RunConfig`, but with different "
            f"values. In constructor: '{model_dir}', in `RunConfig`: '{config.model_dir}' ")
    if model_dir:
        config = config.replace(model_dir=model_dir)
    elif config.model_dir is None:
        model_dir = tempfile.mkdtemp()
        log.warning("Using temporary folder as model directory: %s", model_dir)
        config = config.replace(model_dir=model_dir)
    return config


def _global_step_in(model_dir: str) -> int:
    """The step of ``model_dir``'s latest checkpoint, 0 without one (as TF)."""
    try:
        latest = _ckpt.latest_checkpoint(model_dir)
        return int(_ckpt.load_variable(latest, GraphKeys.GLOBAL_STEP)) if latest else 0
    except Exception:  # noqa: BLE001 - as TF's bare except: any unreadable state is step 0
        return 0


class Estimator:
    """Trains, evaluates and predicts a ``model_fn``, as TF's ``tf.estimator.Estimator``.

    Args:
        model_fn: ``model_fn(features, labels, mode, params, config)`` returning an
            :class:`~ckptsync.estimator.EstimatorSpec`; it must take ``features``, the
            others are passed when it names them.
        model_dir: checkpoints and summaries (or ``config.model_dir``; neither: a new
            temporary directory, as TF).
        config: a :class:`RunConfig`.
        params: a dict passed (deep-copied) to ``model_fn`` and ``input_fn``.
        warm_start_from: a checkpoint path/directory or :class:`WarmStartSettings`: the
            trainable variables' first values when ``model_dir`` has no checkpoint.

    Raises:
        ValueError: no ``model_fn``, a ``model_fn`` without ``features`` ("model_fn (...)
            must include features argument."), ``params`` it does not take, arguments
            it has beyond TF's five, a ``config`` that is not a ``RunConfig``, or
            ``model_dir`` differing from ``config.model_dir`` (TF's messages).
    """

    def __init__(self, model_fn: Callable[..., EstimatorSpec],
                 model_dir: str | os.PathLike[str] | None = None,
                 config: RunConfig | None = None, params: dict[str, Any] | None = None,
                 warm_start_from: Any = None):
        _assert_members_are_not_overridden(self)
        self._config = _overwrite_model_dir(config, model_dir)
        self._model_dir: str = self._config.model_dir
        if model_fn is None:
            raise CkptsyncValueError("model_fn must be provided to Estimator.")
        _util.verify_model_fn_args(model_fn, params)
        self._model_fn = model_fn
        self._params = copy.deepcopy(params or {})
        if warm_start_from is None or isinstance(warm_start_from, WarmStartSettings):
            self._warm_start: WarmStartSettings | None = warm_start_from
        else:
            self._warm_start = WarmStartSettings(warm_start_from)

    model_dir = property(lambda self: self._model_dir, doc="Where checkpoints go.")
    config = property(lambda self: copy.deepcopy(self._config), doc="A copy of the RunConfig.")
    params = property(lambda self: copy.deepcopy(self._params), doc="A copy of params.")

    @property
    def model_fn(self) -> Callable[..., EstimatorSpec]:
        """``model_fn(features, labels, mode, config)`` calling this Estimator's, as TF."""

        def public_model_fn(features: Any, labels: Any, mode: str, config: Any) -> EstimatorSpec:
            return self._call_model_fn(features, labels, mode, config)

        return public_model_fn

    def latest_checkpoint(self) -> str | None:
        """The prefix of ``model_dir``'s newest checkpoint, or None."""
        return _ckpt.latest_checkpoint(self._model_dir)

    def get_variable_names(self) -> list[str]:
        """The variable names in the latest checkpoint, sorted.

        Raises:
            ValueError: no checkpoint ("Could not find trained model in model_dir: ...").
        """
        self._check_checkpoint_available()
        return [name for name, _ in _ckpt.list_variables(self._model_dir)]

    def get_variable_value(self, name: str) -> Any:
        """The value (numpy array) of ``name`` in the latest checkpoint.

        Raises:
            ValueError: no checkpoint. NotFoundError: no such variable.
        """
        self._check_checkpoint_available()
        return _ckpt.load_variable(self._model_dir, name)

    def eval_dir(self, name: str | None = None) -> str:
        """``model_dir/eval`` or ``model_dir/eval_<name>``."""
        return os.path.join(self._model_dir, "eval" if not name else "eval_" + name)

    def _check_checkpoint_available(self) -> None:
        if not _ckpt.latest_checkpoint(self._model_dir):
            raise CkptsyncValueError(
                f"Could not find trained model in model_dir: {self._model_dir}.")

    # ------------------------------------------------------------------ calls
    def _call_input_fn(self, input_fn: Any, mode: str) -> tuple[Any, Any, list[Any]]:
        result = _util.call_input_fn(input_fn, mode, self.params, self.config)
        return _util.parse_input_fn_result(result, input_fn)

    def _call_model_fn(self, features: Any, labels: Any, mode: str,
                       config: Any) -> EstimatorSpec:
        return _util.call_model_fn(self._model_fn, features, labels, mode, self.params, config)

    def _new_graph(self) -> Graph:
        g = Graph()
        with g.as_default():
            set_random_seed(self._config.tf_random_seed)
            create_global_step(g)
        return g

    # ------------------------------------------------------------------ train
    def train(self, input_fn: Callable[..., Any], hooks: Any = None, steps: int | None = None,
              max_steps: int | None = None, saving_listeners: Any = None) -> Estimator:
        """Trains until ``steps`` more steps, global step ``max_steps``, the end of
        the input, or a hook's stop; returns ``self``.

        ``input_fn(params, config, mode)`` (the arguments it names) returns a
        ``tf.data.Dataset`` of ``(features, labels)`` (read from its beginning at each
        call), a ``(features, labels)`` tuple of tensors, or features. Checkpoints go to
        ``model_dir`` every ``save_checkpoints_steps``/``secs``, at the first step and
        at the end (``keep_checkpoint_max`` newest kept); the ``loss`` scalar and
        ``merge_all`` every ``save_summary_steps``; ``global_step/sec`` and a
        loss/step log line every ``log_step_count_steps``. A ``max_steps`` the latest
        checkpoint already reached returns at once.

        Raises:
            ValueError: both ``steps`` and ``max_steps``, one <= 0, an evaluator/ps task,
                ``saving_listeners`` without checkpoint saving, a bad ``input_fn``
                result or ``model_fn`` result (messages name the function).
            TypeError: hooks that are not ``SessionRunHook``, listeners that are not
                ``CheckpointSaverListener``.
        """
        if self._config.task_type in (TaskType.EVALUATOR, TaskType.PS):
            raise CkptsyncValueError(
                "Train has been called wrong configuration. Please use "
                "tf.estimator.train_and_evaluate which calls proper API according to given "
                f"configuration. Current configuration: {self._config}.")
        if steps is not None and max_steps is not None:
            raise CkptsyncValueError("Can not provide both steps and max_steps.")
        if steps is not None and steps <= 0:
            raise CkptsyncValueError(f"Must specify steps > 0, given: {steps}")
        if max_steps is not None and max_steps <= 0:
            raise CkptsyncValueError(f"Must specify max_steps > 0, given: {max_steps}")
        if max_steps is not None and max_steps <= _global_step_in(self._model_dir):
            log.info("Skipping training since max_steps has already saved.")
            return self
        hooks = _util.check_hooks(hooks)
        if steps is not None or max_steps is not None:
            hooks.append(StopAtStepHook(steps, max_steps))
        listeners = _util.check_listeners(saving_listeners)
        g = self._new_graph()
        with g.as_default():
            features, labels, input_hooks = self._call_input_fn(input_fn, ModeKeys.TRAIN)
            spec = self._call_model_fn(features, labels, ModeKeys.TRAIN, self.config)
            loss = self._train_with_spec(spec, input_hooks + hooks, listeners)
        log.info("Loss for final step: %s.", loss)
        return self

    def _train_with_spec(self, spec: EstimatorSpec, worker_hooks: list[Any],
                         listeners: list[Any]) -> Any:
        cfg = self._config
        if self._warm_start is not None and not _ckpt.latest_checkpoint(self._model_dir):
            log.info("Warm-starting from %s", self._warm_start.ckpt_to_initialize_from)
            warm_start(self._warm_start)
        if not any(x.op.name == "loss" for x in get_collection(GraphKeys.SUMMARIES)):
            _summary.scalar("loss", spec.loss)
        add_to_collection(GraphKeys.LOSSES, spec.loss)
        worker_hooks.append(NanTensorHook(spec.loss))
        if cfg.log_step_count_steps is not None:
            worker_hooks.append(LoggingTensorHook(
                {"loss": spec.loss, "step": get_global_step()},
                every_n_iter=cfg.log_step_count_steps))
        worker_hooks.extend(spec.training_hooks)
        scaffold = spec.scaffold or Scaffold()
        if not (scaffold.saver or get_collection(GraphKeys.SAVERS)):
            add_to_collection(GraphKeys.SAVERS, Saver(
                sharded=True, max_to_keep=cfg.keep_checkpoint_max,
                keep_checkpoint_every_n_hours=cfg.keep_checkpoint_every_n_hours,
                defer_build=True, save_relative_paths=True))
        chief_hooks: list[Any] = []
        saver_hooks = [h for h in worker_hooks + list(spec.training_chief_hooks)
                       if isinstance(h, CheckpointSaverHook)]
        if (cfg.save_checkpoints_secs or cfg.save_checkpoints_steps) and not saver_hooks:
            chief_hooks = [CheckpointSaverHook(
                self._model_dir, save_secs=cfg.save_checkpoints_secs,
                save_steps=cfg.save_checkpoints_steps, scaffold=scaffold)]
            saver_hooks = chief_hooks[:1]
        if listeners:
            if not saver_hooks:
                raise CkptsyncValueError(
                    "There should be a CheckpointSaverHook to use saving_listeners. Please "
                    "set one of the RunConfig.save_checkpoints_steps or "
                    "RunConfig.save_checkpoints_secs.")
            for lst in listeners:
                if lst not in saver_hooks[0]._listeners:
                    saver_hooks[0]._listeners.append(lst)
        # As TF's MonitoredTrainingSession, whose hooks share the directory's cached
        # writer: one event file per directory and process.
        writer = _summary.FileWriterCache.get(self._model_dir)
        if cfg.log_step_count_steps and cfg.log_step_count_steps > 0:
            chief_hooks.append(StepCounterHook(every_n_steps=cfg.log_step_count_steps,
                                               summary_writer=writer))
        if cfg.save_summary_steps and cfg.save_summary_steps > 0:
            chief_hooks.append(SummarySaverHook(save_steps=cfg.save_summary_steps,
                                                summary_writer=writer, scaffold=scaffold))
        with MonitoredTrainingSession(
                is_chief=cfg.is_chief, checkpoint_dir=self._model_dir, scaffold=scaffold,
                hooks=worker_hooks, chief_only_hooks=chief_hooks + list(spec.training_chief_hooks),
                save_checkpoint_secs=0, save_summaries_steps=0, log_step_count_steps=0) as sess:
            loss, steps = None, 0
            while not sess.should_stop():
                steps += 1
                _, loss = sess.run([spec.train_op, spec.loss])
        if steps == 0:
            log.warning("Training with estimator made no steps. Perhaps input is empty or "
                        "misspecified.")
        return loss

    # ------------------------------------------------------------------ evaluate
    def evaluate(self, input_fn: Callable[..., Any], steps: int | None = None,
                 hooks: Any = None, checkpoint_path: str | None = None,
                 name: str | None = None) -> dict[str, Any]:
        """Evaluates ``checkpoint_path`` (default: the latest; none at all: freshly
        initialized variables, as TF 2.15) on ``input_fn``'s data for ``steps``
        batches or until the input ends.

        Returns:
            TF's dict: each ``eval_metric_ops`` value, ``loss`` (the mean of the
            batches' losses, TF's ``tf.metrics.mean(loss)``) and ``global_step`` (the
            checkpoint's). They are also written, with the checkpoint's path, to
            :meth:`eval_dir` (``model_dir/eval`` or ``eval_<name>``) at that step.

        Raises:
            ValueError: ``steps`` <= 0, a metric named ``loss`` or ``global_step``, a bad
                ``input_fn``/``model_fn`` result. TypeError: a hook that is not one.
        """
        hooks = _util.check_hooks(hooks)
        counter = None
        if steps is not None:
            if steps <= 0:
                raise CkptsyncValueError(f"Must specify steps > 0, given: {steps}")
            counter = _util.StopAfterNEvalsHook(steps)
        if not checkpoint_path:
            checkpoint_path = _ckpt.latest_checkpoint(self._model_dir)
            if not checkpoint_path:
                log.info("Could not find trained model in model_dir: %s, running "
                         "initialization to evaluate.", self._model_dir)
        g = self._new_graph()
        with g.as_default():
            features, labels, input_hooks = self._call_input_fn(input_fn, ModeKeys.EVAL)
            spec = self._call_model_fn(features, labels, ModeKeys.EVAL, self.config)
            metric_ops = dict(spec.eval_metric_ops)
            if _util.LOSS_METRIC_KEY in metric_ops:
                raise CkptsyncValueError(
                    f'Metric with name "{_util.LOSS_METRIC_KEY}" is not allowed, because '
                    "Estimator already defines a default metric with the same name.")
            metric_ops[_util.LOSS_METRIC_KEY] = _metrics.mean(spec.loss)
            update_ops = [metric_ops[k][1] for k in sorted(metric_ops)]
            eval_dict = {k: metric_ops[k][0] for k in sorted(metric_ops)}
            if not checkpoint_path and self._warm_start is not None:
                warm_start(self._warm_start)
            if GraphKeys.GLOBAL_STEP in eval_dict:
                raise CkptsyncValueError(
                    "Metric with name `global_step` is not allowed, because Estimator already "
                    "defines a default metric with the same name.")
            eval_dict[GraphKeys.GLOBAL_STEP] = get_global_step()
            all_hooks = input_hooks + hooks + list(spec.evaluation_hooks)
            all_hooks += [counter] if counter else []
            final = FinalOpsHook(eval_dict)
            update_op = group(*update_ops)
            creator = ChiefSessionCreator(scaffold=spec.scaffold or Scaffold(),
                                          checkpoint_filename_with_path=checkpoint_path)
            with MonitoredSession(session_creator=creator, hooks=all_hooks + [final]) as sess:
                while not sess.should_stop():
                    sess.run(update_op)
            results: dict[str, Any] = final.final_ops_values
            # In the eval graph, as TF's: a new eval dir's event file holds that graph.
            _util.write_dict_to_summary(self.eval_dir(name), results,
                                        int(results[GraphKeys.GLOBAL_STEP]), checkpoint_path)
        return results

    # ------------------------------------------------------------------ export
    def export_saved_model(self, export_dir_base: str, serving_input_receiver_fn: Any,
                           *args: Any, **kwargs: Any) -> None:
        """Not supported: ckptsync has no SavedModel format. ``infer serve --model FILE
        --checkpoint-dir MODEL_DIR`` serves ``model_dir``'s checkpoints with the
        ``model_fn`` file's ``serving_input_receiver_fn`` (docs/estimator.md).

        Raises:
            UnimplementedError: always.
        """
        raise UnimplementedError(None, None, (
            "Estimator.export_saved_model: ckptsync writes no SavedModel; serve model_dir's "
            "checkpoints with `infer serve --model FILE --checkpoint-dir MODEL_DIR` (FILE "
            "defining model_fn and serving_input_receiver_fn)."))

    export_savedmodel = export_saved_model

    # ------------------------------------------------------------------ predict
    def predict(self, input_fn: Callable[..., Any], predict_keys: list[str] | None = None,
                hooks: Any = None, checkpoint_path: str | None = None,
                yield_single_examples: bool = True) -> Iterator[Any]:
        """Yields ``model_fn``'s predictions for ``input_fn``'s features (a generator:
        nothing runs before the first ``next``), as TF: one dict of name -> value per
        example (``yield_single_examples``) or per batch, only ``predict_keys``' entries.
        ``checkpoint_path`` defaults to the latest (none: initialized variables).

        Raises:
            ValueError: ``predict_keys`` with non-dict predictions, or none of them
                among the predictions; predictions of different batch lengths.
        """
        hooks = _util.check_hooks(hooks)
        if not checkpoint_path:
            checkpoint_path = _ckpt.latest_checkpoint(self._model_dir)
        if not checkpoint_path:
            log.info("Could not find trained model in model_dir: %s, running "
                     "initialization to predict.", self._model_dir)
        g = self._new_graph()
        with g.as_default():
            features, _, input_hooks = self._call_input_fn(input_fn, ModeKeys.PREDICT)
            if not any(op.type == "IteratorGetNext" for op in g.get_operations()):
                # as TF: without a tf.data iterator nothing ends the input
                log.warning("Input graph does not use tf.data.Dataset or contain a "
                            "QueueRunner. That means predict yields forever. This is "
                            "probably a mistake.")
            spec = self._call_model_fn(features, None, ModeKeys.PREDICT, self.config)
            if not checkpoint_path and self._warm_start is not None:
                warm_start(self._warm_start)
            predictions = _extract_keys(spec.predictions, predict_keys)
            creator = ChiefSessionCreator(scaffold=spec.scaffold or Scaffold(),
                                          checkpoint_filename_with_path=checkpoint_path)
            all_hooks = input_hooks + hooks + list(spec.prediction_hooks)
            with MonitoredSession(session_creator=creator, hooks=all_hooks) as sess:
                while not sess.should_stop():
                    values = sess.run(predictions)
                    if not yield_single_examples:
                        yield values
                    elif not isinstance(predictions, dict):
                        yield from values
                    else:
                        for i in range(_batch_length(values)):
                            yield {k: v[i] for k, v in values.items()}


def _extract_keys(predictions: Any, predict_keys: Any) -> Any:
    if not predict_keys:
        return predictions
    if not isinstance(predictions, dict):
        raise CkptsyncValueError(
            "predict_keys argument is not valid in case of non-dict predictions.")
    existing = predictions.keys()
    chosen = {k: v for k, v in predictions.items() if k in predict_keys}
    if not chosen:
        raise CkptsyncValueError(
            f"Expected to run at least one output from {existing}, provided {predict_keys}.")
    return chosen


class _UnbatchedPredictionError(CkptsyncValueError, IndexError):
    """A rank-0 prediction with ``yield_single_examples``; TF's ``IndexError`` with a message."""


def _batch_length(values: dict[str, Any]) -> int:
    length = None
    for key, value in values.items():
        if not getattr(value, "shape", ()):  # TF 2.15 fails on shape[0] with a bare IndexError
            raise _UnbatchedPredictionError(
                f"Prediction {key!r} is a scalar (rank 0, no batch dimension): with "
                "yield_single_examples=True every prediction needs a first dimension equal "
                "to the batch size; pass yield_single_examples=False to get whole batches.")
        length = length or value.shape[0]
        if value.shape[0] != length:
            raise CkptsyncValueError(
                f"Batch length of predictions should be same. {key} has different batch "
                "length than others.")
    return int(length or 0)


_ALLOWED_OVERRIDES = frozenset(["model_fn", "_create_and_assert_global_step",
                                "_export_all_saved_models", "latest_checkpoint"])


def _assert_members_are_not_overridden(obj: Any) -> None:
    """As TF: a subclass may not redefine Estimator's members (but ``model_fn``, ...)."""
    members = {m for m in dir(Estimator) if not m.startswith("__")}
    common = members & set(type(obj).__dict__) - _ALLOWED_OVERRIDES
    overridden = [m for m in common if getattr(Estimator, m) != getattr(type(obj), m)]
    if type(obj) is not Estimator and overridden:
        raise CkptsyncValueError(
            f"Subclasses of Estimator cannot override members of Estimator. {type(obj)} "
            f"does override {overridden}")

