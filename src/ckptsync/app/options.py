"""What one ``trainer run`` is given and what it returns: :class:`TrainerOptions` (frozen,
validated), :class:`Progress` (each step, for displays) and :class:`TrainingSummary`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..device import canonical_device
from ..errors import CkptsyncValueError

__all__ = ["TrainerOptions", "Progress", "TrainingSummary", "CheckpointWritten"]


@dataclass(frozen=True)
class CheckpointWritten:
    """A checkpoint that reached the disk: its ``path`` (prefix), ``kind`` (``"full"`` or
    ``"delta"``: an incremental checkpoint composed with its base), ``nbytes``, the
    size of its data file in bytes, and ``parent``: the predecessor it names (a delta's
    base, a full checkpoint's parent), None for a plain full checkpoint."""

    path: str
    kind: str
    nbytes: int
    parent: str | None = None


@dataclass(frozen=True)
class TrainerOptions:
    """Options of one training run; validated on construction.

    Raises:
        ValueError: a value out of range, or both ``save_every_steps`` and
            ``save_every_secs`` (the message names both).
    """

    model_path: str
    checkpoint_dir: str
    data: str = "digits"
    device: str = "cpu:0"
    steps: int = 2000
    batch_size: int = 64
    learning_rate: float | None = None
    save_every_steps: int | None = None
    save_every_secs: float | None = None
    max_to_keep: int = 5
    seed: int = 0
    resume: bool = True
    eval_every: int = 0
    max_steps_per_s: float | None = None
    async_save: bool = False
    #: TensorBoard event files of the run go here (None: none are written).
    summary_dir: str | None = None
    summary_every_steps: int = 10
    #: Incremental checkpoints (``Saver(incremental=True)``): deltas between full ones.
    incremental: bool = False
    full_checkpoint_every_n: int = 16

    def __post_init__(self) -> None:
        if self.steps <= 0:
            raise CkptsyncValueError(f"steps must be > 0, got {self.steps}.")
        if self.batch_size <= 0:
            raise CkptsyncValueError(f"batch_size must be > 0, got {self.batch_size}.")
        if self.save_every_steps is not None and self.save_every_secs is not None:
            raise CkptsyncValueError(
                "save_every_steps and save_every_secs are mutually exclusive; give one "
                f"(got save_every_steps={self.save_every_steps}, "
                f"save_every_secs={self.save_every_secs}).")
        if self.save_every_steps is not None and self.save_every_steps <= 0:
            raise CkptsyncValueError(f"save_every_steps must be > 0, got {self.save_every_steps}.")
        if self.save_every_secs is not None and not self.save_every_secs > 0:
            raise CkptsyncValueError(f"save_every_secs must be > 0, got {self.save_every_secs}.")
        if self.max_to_keep < 0:
            raise CkptsyncValueError(f"max_to_keep must be >= 0, got {self.max_to_keep}.")
        if self.learning_rate is not None and not (self.learning_rate > 0
                                                   and math.isfinite(self.learning_rate)):
            raise CkptsyncValueError(f"learning_rate must be > 0, got {self.learning_rate}.")
        if self.eval_every < 0:
            raise CkptsyncValueError(f"eval_every must be >= 0, got {self.eval_every}.")
        if self.max_steps_per_s is not None and not self.max_steps_per_s > 0:
            raise CkptsyncValueError(f"max_steps_per_s must be > 0, got {self.max_steps_per_s}.")
        if self.summary_every_steps <= 0:
            raise CkptsyncValueError(
                f"summary_every_steps must be > 0, got {self.summary_every_steps}.")
        if self.full_checkpoint_every_n < 1:
            raise CkptsyncValueError(
                f"full_checkpoint_every_n must be >= 1, got {self.full_checkpoint_every_n}.")
        canonical_device(self.device)

    @property
    def save_steps(self) -> int | None:
        if self.save_every_steps is None and self.save_every_secs is None:
            return 100
        return self.save_every_steps


@dataclass
class Progress:
    """A snapshot of the run for progress displays.

    Attributes:
        step: the global step just run; ``last_step`` the one training stops at.
        loss: that step's training loss.
        steps_per_s: recent speed (steps per second), None at first.
        last_checkpoint: the newest checkpoint prefix on disk (data file and state file
            published), or None; with ``--async-save`` a save still queued is not it.
        eval_accuracy, eval_loss: held-out figures when this step evaluated, else None
            (accuracy is None for a model that is not a classifier).
        queued_checkpoints: prefixes of async saves started and not yet on disk, oldest
            first.
        eval_metrics: a ``model_fn``'s ``eval_metric_ops`` values when this step
            evaluated (name -> float), else None.
        checkpoint: with ``incremental``, ``last_checkpoint`` described when it reached
            the disk since the previous Progress, else None.
    """

    step: int
    last_step: int
    loss: float
    steps_per_s: float | None
    last_checkpoint: str | None
    eval_accuracy: float | None = None
    eval_loss: float | None = None
    queued_checkpoints: tuple[str, ...] = ()
    eval_metrics: dict[str, Any] | None = None
    checkpoint: CheckpointWritten | None = None


@dataclass
class TrainingSummary:
    """What ``run_training`` returns. ``checkpoints_written`` counts checkpoints on disk
    (with ``--async-save``: confirmed by the writer); ``held_out_accuracy`` is None for a
    model that is not a classifier."""

    global_step: int
    steps_run: int
    final_loss: float | None
    held_out_accuracy: float | None
    checkpoints_written: int
    last_checkpoint: str | None
    restored_from: str | None
    stopped_by_signal: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    #: The held-out loss at the end (the loss's units), or None (no held-out rows).
    held_out_loss: float | None = None
    #: Processes training together (1 without ``mpiexec``), and the rows per step over
    #: all of them (``ranks * batch_size``).
    ranks: int = 1
    global_batch_size: int = 0
    #: A ``model_fn``'s ``eval_metric_ops`` over the held-out rows at the end, name ->
    #: float (empty for a ``build_net`` model or without held-out rows).
    held_out_metrics: dict[str, Any] = field(default_factory=dict)
