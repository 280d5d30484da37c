"""TF1's module path ``tensorflow.python.training.basic_session_run_hooks``, so
``from ckptsync.train import basic_session_run_hooks`` works where a program imports
TF's: the same names (the hooks of :mod:`ckptsync.train.basic_hooks` and
:mod:`ckptsync.train.summary_hooks`, ``SessionRunArgs`` and the ``session_run_hook``
module), and, as in TF's module, no ``SessionRunHook`` of its own (it is
``session_run_hook.SessionRunHook``)."""

from . import session_run_hook  # noqa: F401
from .basic_hooks import (  # noqa: F401
    CheckpointSaverHook,
    CheckpointSaverListener,
    FinalOpsHook,
    LoggingTensorHook,
    NanLossDuringTrainingError,
    NanTensorHook,
    SecondOrStepTimer,
    StepCounterHook,
    StopAtStepHook,
)
from .session_run_hook import SessionRunArgs  # noqa: F401
from .summary_hooks import SummarySaverHook  # noqa: F401

__all__ = ["CheckpointSaverHook", "CheckpointSaverListener", "FinalOpsHook",
           "LoggingTensorHook", "NanLossDuringTrainingError", "NanTensorHook",
           "SecondOrStepTimer", "StepCounterHook", "StopAtStepHook", "SummarySaverHook",
           "SessionRunArgs", "session_run_hook"]
