"""``DistributedOptimizer``: averages gradients across ranks before they are applied."""

from __future__ import annotations

from typing import Any

from ..errors import CkptsyncValueError
from ..graph import Operation
from ..train.optimizer import Optimizer
from ..variables import Variable
from ._runtime import size
from .collectives import ReduceOp
from .graph_ops import ALLREDUCE_OP_TYPE, allreduce_tensors

__all__ = ["DistributedOptimizer", "allreduce_gradients"]


def allreduce_gradients(grads_and_vars: list[tuple[Any, Variable]],
                        op: ReduceOp = ReduceOp.MEAN,
                        name: str = "DistributedAllreduce") -> list[tuple[Any, Variable]]:
    """``[(g, v)]`` with every non-None ``g`` replaced by its allreduce across ranks, all
    in one fused graph op. Identity with one rank, and for gradients that already are
    the outputs of an allreduce (so wrapping twice reduces once).
    """
    gv = list(grads_and_vars)
    todo = [i for i, (g, _) in enumerate(gv)
            if g is not None and getattr(getattr(g, "op", None), "type", None)
            != ALLREDUCE_OP_TYPE]
    if size() == 1 or not todo:
        return gv
    reduced = allreduce_tensors([gv[i][0] for i in todo], op, name=name)
    for i, r in zip(todo, reduced):
        gv[i] = (r, gv[i][1])
    return gv


class DistributedOptimizer(Optimizer):
    """Wraps ``optimizer`` so its gradients are averaged (``op``) across ranks, as
    Horovod's ``hvd.DistributedOptimizer``.

    ``compute_gradients`` calls the wrapped optimizer's, then allreduces every non-None
    gradient in one fused op (identity with one rank); ``apply_gradients``, slots and
    variables delegate to the wrapped optimizer, so checkpoints are the same as without
    the wrapper. ``minimize`` = both, as every optimizer.

    Args:
        optimizer: the optimizer to wrap.
        name: default ``"Distributed" + optimizer.get_name()``.
        op: ``Average`` (= ``ReduceOp.MEAN``, default) or ``Sum``.
        use_locking, device_dense, device_sparse, sparse_as_dense: accepted for Horovod
            compatibility; no effect (every gradient here is dense).
        compression: only ``None`` (no compression).
        backward_passes_per_step: only 1.

    Raises:
        ValueError: ``op`` is MAX/MIN, or an unsupported compression or
            ``backward_passes_per_step``.

    Example:
        >>> import ckptsync as cs
        >>> opt = cs.distributed.DistributedOptimizer(cs.train.AdamOptimizer(1e-3))
    """

    def __init__(self, optimizer: Optimizer, name: str | None = None, use_locking: bool = False,
                 device_dense: str = "", device_sparse: str = "", compression: Any = None,
                 sparse_as_dense: bool = False, backward_passes_per_step: int = 1,
                 op: ReduceOp = ReduceOp.MEAN):
        if op not in (ReduceOp.MEAN, ReduceOp.SUM):
            raise CkptsyncValueError(
                f"DistributedOptimizer: op must be Average (ReduceOp.MEAN) or Sum, got {op!r}.")
        if compression is not None and getattr(compression, "__name__", "") != "NoneCompressor":
            raise CkptsyncValueError(
                f"DistributedOptimizer: compression is not supported, got {compression!r}; "
                "pass compression=None.")
        if backward_passes_per_step != 1:
            raise CkptsyncValueError(
                "DistributedOptimizer: backward_passes_per_step must be 1 (values > 1 need "
                f"Adasum, which ckptsync does not implement), got {backward_passes_per_step}.")
        super().__init__(use_locking, name or "Distributed" + optimizer.get_name())
        self._optimizer = optimizer
        self._op = op

    def compute_gradients(self, *args: Any, **kwargs: Any) -> list[tuple[Any, Variable]]:
        gv = self._optimizer.compute_gradients(*args, **kwargs)
        return allreduce_gradients(gv, self._op, name=self.get_name() + "_Allreduce")

    def apply_gradients(self, grads_and_vars: Any, global_step: Any = None,
                        name: str | None = None) -> Operation:
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                               name=name)

    def get_slot(self, var: Variable, name: str) -> Variable | None:
        return self._optimizer.get_slot(var, name)

    def get_slot_names(self) -> list[str]:
        return self._optimizer.get_slot_names()

    def variables(self) -> list[Variable]:
        return self._optimizer.variables()
