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
