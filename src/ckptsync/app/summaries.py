"""TensorBoard scalars of a ``trainer run --summary-dir`` (the chief's): the loss and
steps per second at the run's first step, then every ``every_steps`` steps, held-out
loss and accuracy when evaluated, and each checkpoint's write time (start of the save to
data and state file on disk; with ``--async-save`` that includes the time queued). The
model's own ``tf.summary`` ops are written too, by a ``SummarySaverHook`` at the same
steps (its timer: the first step, then ``every_steps`` after the last). A failed
summary write is a warning (once per cause), never the end of training; a deleted
``logdir`` is made again, with a new event file.

Tags: ``loss``, ``global_step/sec`` (TF1's StepCounterHook tag), ``held_out/loss``,
``held_out/accuracy``, ``checkpoint/write_secs``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from .. import summary as _summary
from ..graph import Graph, GraphKeys
from ..summary.writer import write_or_warn
from ..train.basic_hooks import CheckpointSaverListener
from ..train.summary_hooks import SummarySaverHook
from .options import Progress

__all__ = ["TrainerSummaries"]


class TrainerSummaries(CheckpointSaverListener):
    """Writes the trainer's scalars to an event file in ``logdir`` (with ``graph``).

    Use ``wrap(on_progress)`` as the loop's progress callback, the object itself as a
    checkpoint listener, ``hooks(scaffold)`` among the session's hooks, then ``close``.
    """

    def __init__(self, logdir: str, graph: Graph, every_steps: int = 10):
        self._writer = _summary.FileWriter(logdir, graph=graph)
        self._graph, self._every = graph, max(1, int(every_steps))
        self._save_started: dict[int, float] = {}
        self._last: int | None = None  # the step of the last loss written

    def scalars(self, step: int, **values: float | None) -> None:
        """Writes ``tag=value`` scalars (None values skipped; ``__`` in a name is ``/``)."""
        summary_cls = _summary.Summary  # tensorboard's message (loaded on first use)
        items = [summary_cls.Value(tag=k.replace("__", "/"), simple_value=float(v))
                 for k, v in values.items() if v is not None]
        if items:
            write_or_warn(self._writer.add_summary, summary_cls(value=items), step)

    def held_out(self, step: int, loss: float | None, accuracy: float | None,
                 metrics: Mapping[str, Any]) -> None:
        """``held_out/loss``, ``held_out/accuracy`` and ``held_out/<metric>`` for each
        scalar of a model_fn's ``eval_metric_ops`` (its accuracy is ``accuracy``)."""
        self.scalars(step, held_out__loss=loss, held_out__accuracy=accuracy,
                     **{f"held_out__{k}": v for k, v in metrics.items()
                        if isinstance(v, float) and k != "accuracy"})

    def wrap(self, on_progress: Callable[[Progress], None] | None
             ) -> Callable[[Progress], None]:
        def report(p: Progress) -> None:
            # At the steps the model's own summaries are written (SummarySaverHook's
            # timer: the run's first step, then every_steps after the last), so that
            # both line up in TensorBoard, as in TF1's Estimator; and the last step.
            if self._last is None or p.step >= self._last + self._every or \
                    p.step == p.last_step:
                self._last = p.step
                self.scalars(p.step, loss=p.loss, **{"global_step/sec": p.steps_per_s})
            if p.eval_loss is not None or p.eval_accuracy is not None or p.eval_metrics:
                self.held_out(p.step, p.eval_loss, p.eval_accuracy, p.eval_metrics or {})
            if on_progress is not None:
                on_progress(p)
        return report

    def hooks(self, scaffold: Any) -> list[Any]:
        """A ``SummarySaverHook`` for the model's own summaries (none if it has none)."""
        if not self._graph.get_collection(GraphKeys.SUMMARIES):
            return []
        return [SummarySaverHook(save_steps=self._every, summary_writer=self._writer,
                                 scaffold=scaffold)]

    def before_save(self, session: Any, global_step_value: int) -> None:
        self._save_started[int(global_step_value)] = time.perf_counter()

    def after_save(self, session: Any, global_step_value: int) -> bool | None:
        started = self._save_started.pop(int(global_step_value), None)
        if started is not None:
            self.scalars(int(global_step_value),
                         **{"checkpoint/write_secs": time.perf_counter() - started})
        write_or_warn(self._writer.flush)
        return None

    def close(self) -> None:
        write_or_warn(self._writer.close)
