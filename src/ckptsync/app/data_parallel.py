"""What ``trainer run`` does differently under ``mpiexec``: :class:`DataParallel`.

The trainer calls a handful of methods of one ``DataParallel`` object; with one process
each of them is the identity (no MPI is touched), so single-process training is
unchanged. With N ranks:

* **Gradients.** ``build_net`` builds its optimizer itself, so the trainer calls it inside
  ``building(graph)``: that block is ``cs.train.optimizer.reducing_gradients(graph,
  average_gradients)`` (the named seam of :mod:`ckptsync.train.optimizer`; the reducer is
  :func:`ckptsync.distributed.optimizer.average_gradients`), so every
  ``compute_gradients`` (and so every ``minimize``) on that graph returns gradients
  averaged across ranks by one fused allreduce op, exactly as if the model file had
  wrapped its optimizer in :class:`~ckptsync.distributed.DistributedOptimizer` (a model
  file that already does is reduced once, not twice). ``check_graph`` then fails clearly
  if the graph has no allreduce (an optimizer that bypasses ``compute_gradients``) or if
  the ranks built different graphs.
* **Chief.** Rank 0 restores, writes checkpoints and reports; the other ranks initialize
  and take rank 0's values from :class:`~ckptsync.distributed.BroadcastGlobalVariablesHook`
  (the first hook, run after the restore). The data position recorded in rank 0's
  checkpoint is sent to every rank (``from_chief``), so a resumed job continues the same
  data order everywhere.
* **Data.** Every rank iterates the same seeded permutation with the *global* batch
  (``global_batch_size`` = ranks x batch) and keeps its own contiguous slice of each
  global batch (``shard``): rank r trains on rows ``[r*B, (r+1)*B)`` of every global batch.
  Together the ranks see exactly the rows a single process sees with batch ``N*B``, so
  N ranks x batch B train like one process with batch N*B.
* **Stopping.** A signal may reach the ranks at different steps; ``stop_event`` is set on
  every rank after the same step (one tiny MAX-allreduce per step), so all ranks stop
  together and the chief saves the final checkpoint.

Thread-safety: one ``DataParallel`` per process, used by the training loop's thread; only
the ``stop_event`` given to it may be set from another thread (or a signal handler).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from typing import TypeVar

import numpy as np

from ..distributed import (
    BroadcastGlobalVariablesHook,
    ReduceOp,
    allreduce,
    broadcast_object,
    check_same_graph,
    init,
    rank,
    size,
)
from ..distributed.graph_ops import ALLREDUCE_OP_TYPE
from ..distributed.optimizer import average_gradients
from ..graph import Graph
from ..model_spec import ModelFileError
from ..train.optimizer import reducing_gradients
from ..train.session_run_hook import SessionRunContext, SessionRunHook, SessionRunValues

__all__ = ["DataParallel", "AgreeOnStopHook"]

T = TypeVar("T")


class AgreeOnStopHook(SessionRunHook):
    """Sets ``agreed`` on every rank after a step in which any rank had ``local`` set
    (one MAX-allreduce of one int32 per step: a collective, so every rank must run it)."""

    def __init__(self, local: threading.Event, agreed: threading.Event):
        self._local, self._agreed = local, agreed
        self._flag = np.zeros(1, np.int32)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        self._flag[0] = self._local.is_set()
        if allreduce(self._flag, ReduceOp.MAX)[0]:
            self._agreed.set()


class DataParallel:
    """The trainer's data-parallel plan for this process (see the module docstring).

    Args:
        stop_event: set (from a signal handler) to stop after the current step.

    Raises:
        RuntimeError: launched under ``mpiexec`` without ``mpi4py`` (from ``init``).
    """

    def __init__(self, stop_event: threading.Event):
        init()
        self.rank, self.size = rank(), size()
        self.is_chief = self.rank == 0
        self._local_stop = stop_event
        #: The event the training loop watches: set on all ranks after the same step.
        self.stop_event = stop_event if self.size == 1 else threading.Event()

    def building(self, graph: Graph) -> contextlib.AbstractContextManager[None]:
        """Context for ``build_net``: gradients computed on ``graph`` in it are averaged
        across ranks (``reducing_gradients(graph, average_gradients)``); a no-op with one
        rank."""
        if self.size == 1:
            return contextlib.nullcontext()
        return reducing_gradients(graph, average_gradients)

    def check_graph(self, graph: Graph, model_path: str) -> None:
        """Raises ModelFileError if the gradients are not averaged, FailedPreconditionError
        if the ranks built different graphs (a collective)."""
        if self.size == 1:
            return
        if not any(op.type == ALLREDUCE_OP_TYPE for op in graph.get_operations()):
            raise ModelFileError(
                f"build_net in {model_path} computed its gradients without "
                "Optimizer.compute_gradients, so they cannot be averaged across ranks; wrap "
                "its optimizer in cs.distributed.DistributedOptimizer.")
        check_same_graph(graph)

    def global_batch_size(self, batch_size: int) -> int:
        return batch_size * self.size

    def shard(self, batch: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        """This rank's contiguous slice of a global batch."""
        if self.size == 1:
            return batch
        out = {}
        for k, v in batch.items():
            per = len(v) // self.size
            out[k] = v[self.rank * per:(self.rank + 1) * per]
        return out

    def from_chief(self, fn: Callable[[], T]) -> T:
        """``fn()`` evaluated on the chief only, its result sent to every rank."""
        if self.size == 1:
            return fn()
        return broadcast_object(fn() if self.is_chief else None, 0)  # type: ignore[return-value]

    def hooks(self) -> list[SessionRunHook]:
        """Hooks to put first: broadcast from the chief; agree on stopping."""
        if self.size == 1:
            return []
        return [BroadcastGlobalVariablesHook(0),
                AgreeOnStopHook(self._local_stop, self.stop_event)]

    def chief_only(self, hooks: list[SessionRunHook]) -> list[SessionRunHook]:
        return list(hooks) if self.is_chief else []
