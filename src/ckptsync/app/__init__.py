"""The ``trainer run`` application, above ``train`` and ``distributed`` (see
docs/architecture.md): a model file, a data set, a checkpoint directory, TF1's monitored
session with the standard hooks, and (under ``mpiexec``) data parallelism.

Modules:
    options: :class:`TrainerOptions` (frozen, validated), :class:`Progress`,
        :class:`TrainingSummary`.
    trainer: :func:`run_training` (the loop) and :func:`resume_point`.
    hooks: the Saver and hooks the loop adds (never a NaN checkpoint, progress and
        throttle, the pre-flight data check, held-out accuracy).
    data_parallel: :class:`DataParallel`, what changes with N ranks (gradient averaging
        through ``train.optimizer.reducing_gradients``, chief-only saving, data shards,
        agreeing on a stop).

It is also TF1's ``tf.app`` (``import ckptsync as tf``): ``tf.app.flags`` and
``tf.app.run`` are :mod:`ckptsync.flags` and its ``run``, loaded on first use (they need
the optional ``absl-py``).

Example:
    >>> from ckptsync.app import TrainerOptions
    >>> TrainerOptions(model_path="model.py", checkpoint_dir="ckpts", steps=100).save_steps
    100
"""

from .data_parallel import DataParallel
from .options import Progress, TrainerOptions, TrainingSummary
from .trainer import resume_point, run_training

__all__ = ["DataParallel", "Progress", "TrainerOptions", "TrainingSummary", "resume_point",
           "run_training"]


def __getattr__(name: str) -> object:  # TF1's tf.app.flags and tf.app.run, on first use
    if name in ("flags", "run"):
        from .. import flags  # here: absl-py is optional, loaded on first use

        return flags if name == "flags" else flags.run
    raise AttributeError(f"module 'ckptsync.app' has no attribute {name!r}")
