"""``RunConfig``: how an Estimator checkpoints, logs and where it runs, as TF 2.15's
``tf.estimator.RunConfig`` (``tensorflow_estimator/python/estimator/run_config.py``):
the same defaults, checks and messages, and ``TF_CONFIG`` read the same way for the
task types ckptsync runs (local, a lone ``chief``, the ``evaluator``).
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from ..errors import CkptsyncValueError
from ..session import ConfigProto

__all__ = ["RunConfig", "TaskType"]

_USE_DEFAULT = object()
_SAVE_CKPT_ERR = "`save_checkpoints_steps` and `save_checkpoints_secs` cannot be both set."

#: The properties ``replace`` may set, in TF's order (TF's message lists them).
_DEFAULT_REPLACEABLE_LIST = [
    "model_dir", "tf_random_seed", "save_summary_steps", "save_checkpoints_steps",
    "save_checkpoints_secs", "session_config", "keep_checkpoint_max",
    "keep_checkpoint_every_n_hours", "log_step_count_steps", "train_distribute", "device_fn",
    "protocol", "eval_distribute", "experimental_distribute",
    "experimental_max_worker_delay_secs", "session_creation_timeout_secs",
    "checkpoint_save_graph_def",
]


class TaskType:
    """``TF_CONFIG``'s task types, as TF's ``tf.estimator.RunConfig`` TaskType."""

    MASTER = "master"
    PS = "ps"
    WORKER = "worker"
    CHIEF = "chief"
    EVALUATOR = "evaluator"


def _get_model_dir(tf_config: dict[str, Any], model_dir: str | None) -> str | None:
    if model_dir == "":
        raise CkptsyncValueError("model_dir should be non-empty.")
    in_config = tf_config.get("model_dir")
    if in_config == "":
        raise CkptsyncValueError("model_dir in TF_CONFIG should be non-empty.")
    if in_config and model_dir and in_config != model_dir:
        raise CkptsyncValueError(
            "`model_dir` provided in RunConfig construct, if set, must have the same value as "
            f"the model_dir in TF_CONFIG. model_dir: {model_dir}\nTF_CONFIG[\"model_dir\"]: "
            f"{in_config}.\n")
    return model_dir or in_config


def _validate(config: RunConfig) -> None:
    """TF's ``_validate_properties``: each set property checked, TF's messages."""
    checks = [
        ("model_dir", lambda d: d, "model_dir should be non-empty"),
        ("save_summary_steps", lambda s: s >= 0, "save_summary_steps should be >= 0"),
        ("save_checkpoints_steps", lambda s: s >= 0, "save_checkpoints_steps should be >= 0"),
        ("save_checkpoints_secs", lambda s: s >= 0, "save_checkpoints_secs should be >= 0"),
        ("session_config", lambda c: isinstance(c, ConfigProto),
         "session_config must be instance of ConfigProto"),
        ("keep_checkpoint_max", lambda k: k >= 0, "keep_checkpoint_max should be >= 0"),
        ("keep_checkpoint_every_n_hours", lambda h: h > 0,
         "keep_checkpoint_every_n_hours should be > 0"),
        ("log_step_count_steps", lambda n: n > 0, "log_step_count_steps should be > 0"),
        ("tf_random_seed", lambda s: isinstance(s, int), "tf_random_seed must be integer."),
        ("session_creation_timeout_secs", lambda t: t > 0,
         "session_creation_timeout_secs should be > 0"),
    ]
    for name, cond, message in checks:
        value = getattr(config, "_" + name)
        if value is not None and not cond(value):
            raise CkptsyncValueError(message)


class RunConfig:
    """The configuration of an Estimator's runs, as TF's ``tf.estimator.RunConfig``.

    Args:
        model_dir: where checkpoints, event files and ``eval*/`` go (the Estimator's
            ``model_dir`` argument may give it instead; ``TF_CONFIG``'s ``model_dir``
            too).
        tf_random_seed: the graph-level seed set before ``input_fn``/``model_fn`` (int).
        save_summary_steps: write the summaries (``loss``, ``merge_all``) every N global
            steps (100; 0 for none).
        save_checkpoints_steps, save_checkpoints_secs: checkpoint every N steps or N
            seconds (at most one; neither given: every 600 s; one given as None and the
            other not given, or both None: no checkpoints at all; as TF).
        session_config: a ``ConfigProto`` or None.
        keep_checkpoint_max: newest checkpoints kept (5; 0 keeps all).
        keep_checkpoint_every_n_hours: also keep one per this many hours (10000).
        log_step_count_steps: log loss and write ``global_step/sec`` every N steps (100).
        train_distribute, device_fn, protocol, eval_distribute, experimental_distribute,
        experimental_max_worker_delay_secs: accepted for TF's signature; distribution
            strategies are not supported (a non-None strategy raises).
        session_creation_timeout_secs, checkpoint_save_graph_def: accepted, as TF.

    Raises:
        ValueError: both ``save_checkpoints_steps`` and ``save_checkpoints_secs``; a
            negative count (``save_summary_steps should be >= 0``, ...), a
            ``log_step_count_steps`` or ``keep_checkpoint_every_n_hours`` <= 0, a
            non-int seed, an empty ``model_dir``, a ``session_config`` that is no
            ``ConfigProto``, a distribution strategy, or a ``TF_CONFIG`` naming a task
            ckptsync cannot run (TF's messages where TF has them).
    """

    def __init__(self, model_dir: str | os.PathLike[str] | None = None,
                 tf_random_seed: int | None = None, save_summary_steps: int = 100,
                 save_checkpoints_steps: Any = _USE_DEFAULT,
                 save_checkpoints_secs: Any = _USE_DEFAULT,
                 session_config: ConfigProto | None = None, keep_checkpoint_max: int = 5,
                 keep_checkpoint_every_n_hours: float = 10000,
                 log_step_count_steps: int = 100, train_distribute: Any = None,
                 device_fn: Any = None, protocol: Any = None, eval_distribute: Any = None,
                 experimental_distribute: Any = None,
                 experimental_max_worker_delay_secs: Any = None,
                 session_creation_timeout_secs: int = 7200,
                 checkpoint_save_graph_def: bool = True):
        if save_checkpoints_steps is _USE_DEFAULT and save_checkpoints_secs is _USE_DEFAULT:
            save_checkpoints_steps, save_checkpoints_secs = None, 600
        elif save_checkpoints_secs is _USE_DEFAULT:
            save_checkpoints_secs = None
        elif save_checkpoints_steps is _USE_DEFAULT:
            save_checkpoints_steps = None
        elif save_checkpoints_steps is not None and save_checkpoints_secs is not None:
            raise CkptsyncValueError(_SAVE_CKPT_ERR)
        for what, strategy in (("train_distribute", train_distribute),
                               ("eval_distribute", eval_distribute),
                               ("experimental_distribute", experimental_distribute)):
            if strategy is not None:
                raise CkptsyncValueError(
                    f"RunConfig: {what} (a tf.distribute strategy) is not supported by "
                    "ckptsync's Estimator; it trains in one process (ckptsync.distributed "
                    "and `trainer run --workers` train data-parallel).")
        tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
        model_dir = os.fspath(model_dir) if model_dir is not None else None
        self._model_dir = _get_model_dir(tf_config, model_dir)
        self._tf_random_seed = tf_random_seed
        self._save_summary_steps = save_summary_steps
        self._save_checkpoints_steps = save_checkpoints_steps
        self._save_checkpoints_secs = save_checkpoints_secs
        self._session_config = session_config
        self._keep_checkpoint_max = keep_checkpoint_max
        self._keep_checkpoint_every_n_hours = keep_checkpoint_every_n_hours
        self._log_step_count_steps = log_step_count_steps
        self._train_distribute = self._eval_distribute = self._experimental_distribute = None
        self._device_fn = device_fn
        self._protocol = protocol
        self._experimental_max_worker_delay_secs = experimental_max_worker_delay_secs
        self._session_creation_timeout_secs = session_creation_timeout_secs
        self._checkpoint_save_graph_def = checkpoint_save_graph_def
        _validate(self)
        self._init_task(tf_config)

    def _init_task(self, tf_config: dict[str, Any]) -> None:
        """The task of ``TF_CONFIG`` (TF's local mode without a cluster: task type
        ``worker``, index 0; with one: ``chief`` or ``evaluator``)."""
        cluster = tf_config.get("cluster") or {}
        task = tf_config.get("task") or {}
        self._cluster_spec = dict(cluster)
        self._master = tf_config.get("session_master", "")
        self._evaluation_master = tf_config.get("eval_session_master", "")
        self._task_id = int(task.get("index", 0))
        if not cluster:
            self._task_type = task.get("type", TaskType.WORKER)
            if self._task_type != TaskType.WORKER:
                raise CkptsyncValueError(
                    'If "cluster" is not set in TF_CONFIG, task type must be WORKER.')
            if self._task_id != 0:
                raise CkptsyncValueError(
                    'If "cluster" is not set in TF_CONFIG, task index must be 0.')
            self._is_chief, self._num_ps_replicas, self._num_worker_replicas = True, 0, 1
            self._global_id_in_cluster: int | None = 0
            return
        if "type" not in task:
            raise CkptsyncValueError('If "cluster" is set in TF_CONFIG, task type must be set.')
        self._task_type = task["type"]
        if self._task_id < 0:
            raise CkptsyncValueError("Task index must be non-negative number.")
        if self._task_type == TaskType.EVALUATOR:
            self._cluster_spec, self._num_ps_replicas, self._num_worker_replicas = {}, 0, 0
            self._global_id_in_cluster, self._is_chief = None, False
            return
        if self._task_type not in cluster:
            raise CkptsyncValueError(
                f"{self._task_type} is not a valid task_type in the cluster_spec:\n"
                f"{cluster}\n\nNote that these values may be coming from the TF_CONFIG "
                "environment variable.")
        others = sorted(set(cluster) - {TaskType.CHIEF})
        if self._task_type != TaskType.CHIEF or others or len(cluster[TaskType.CHIEF]) != 1:
            raise CkptsyncValueError(
                f"TF_CONFIG: task type {self._task_type!r} in cluster {cluster} is not "
                "supported by ckptsync's Estimator, which trains in one process: use a "
                "cluster of one 'chief' (plus an 'evaluator' task), or ckptsync.distributed "
                "(`trainer run --workers`) for data-parallel training.")
        self._is_chief, self._num_ps_replicas, self._num_worker_replicas = True, 0, 1
        self._global_id_in_cluster = 0

    # ---------------------------------------------------------------- properties
    cluster_spec = property(lambda self: self._cluster_spec,
                            doc="``TF_CONFIG``'s cluster as a dict of job -> addresses.")
    model_dir = property(lambda self: self._model_dir)
    tf_random_seed = property(lambda self: self._tf_random_seed)
    save_summary_steps = property(lambda self: self._save_summary_steps)
    save_checkpoints_steps = property(lambda self: self._save_checkpoints_steps)
    save_checkpoints_secs = property(lambda self: self._save_checkpoints_secs)
    session_config = property(lambda self: self._session_config)
    keep_checkpoint_max = property(lambda self: self._keep_checkpoint_max)
    keep_checkpoint_every_n_hours = property(lambda self: self._keep_checkpoint_every_n_hours)
    log_step_count_steps = property(lambda self: self._log_step_count_steps)
    task_type = property(lambda self: self._task_type)
    task_id = property(lambda self: self._task_id)
    is_chief = property(lambda self: self._is_chief)
    master = property(lambda self: self._master)
    evaluation_master = property(lambda self: self._evaluation_master)
    num_ps_replicas = property(lambda self: self._num_ps_replicas)
    num_worker_replicas = property(lambda self: self._num_worker_replicas)
    global_id_in_cluster = property(lambda self: self._global_id_in_cluster)
    device_fn = property(lambda self: self._device_fn)
    protocol = property(lambda self: self._protocol)
    train_distribute = property(lambda self: self._train_distribute)
    eval_distribute = property(lambda self: self._eval_distribute)
    experimental_max_worker_delay_secs = property(
        lambda self: self._experimental_max_worker_delay_secs)
    session_creation_timeout_secs = property(lambda self: self._session_creation_timeout_secs)
    checkpoint_save_graph_def = property(lambda self: self._checkpoint_save_graph_def)
    service = property(lambda self: None)

    def replace(self, **kwargs: Any) -> RunConfig:
        """A copy with the given properties replaced, as TF: setting one of
        ``save_checkpoints_steps``/``save_checkpoints_secs`` clears the other.

        Raises:
            ValueError: a property not in TF's replaceable list ("Replacing foo is not
                supported. Allowed properties are [...]"), both checkpoint frequencies,
                or a value the constructor refuses.
        """
        return RunConfig._replace(copy.deepcopy(self), **kwargs)

    @staticmethod
    def _replace(config: RunConfig, **kwargs: Any) -> RunConfig:
        for key, value in kwargs.items():
            if key not in _DEFAULT_REPLACEABLE_LIST:
                raise CkptsyncValueError(
                    f"Replacing {key} is not supported. Allowed properties are "
                    f"{_DEFAULT_REPLACEABLE_LIST}.")
            setattr(config, "_" + key, value)
        steps, secs = config._save_checkpoints_steps, config._save_checkpoints_secs
        if "save_checkpoints_steps" in kwargs and "save_checkpoints_secs" in kwargs:
            if steps is not None and secs is not None:
                raise CkptsyncValueError(_SAVE_CKPT_ERR)
        elif "save_checkpoints_steps" in kwargs and steps is not None:
            config._save_checkpoints_secs = None
        elif "save_checkpoints_secs" in kwargs and secs is not None:
            config._save_checkpoints_steps = None
        _validate(config)
        return config

    def __repr__(self) -> str:
        fields = ("model_dir", "tf_random_seed", "save_summary_steps", "save_checkpoints_steps",
                  "save_checkpoints_secs", "keep_checkpoint_max", "log_step_count_steps",
                  "task_type", "task_id")
        return "RunConfig(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in fields) + ")"
