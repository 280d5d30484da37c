"""``DistributedOptimizer``: averages gradients across ranks before they are applied.

Averaging without an extra pass: for ``MEAN`` (Horovod's ``Average``) the ``1 / size`` is
folded into the loss's gradient seed (``grad_loss``), as ``tf.distribute`` scales each
replica's loss, so the gradient kernels already produce ``g / size`` and the fused
allreduce is a ``SUM`` that the kernels write straight into (no pack copy, no scaling
pass; see :mod:`._allreduce_buffers`). Gradients are linear in the seed, so for a power-of-two
``size`` this is the same average, bit for bit, as scaling after the kernels (barring
subnormals); for other sizes it differs by rounding only, the same on every rank. An
optimizer whose ``compute_gradients`` is not the base one (it might drop ``grad_loss``)
is averaged the plain way: its gradients, then one fused ``MEAN`` allreduce.

:func:`average_gradients` is the same averaging as a gradient reducer for
:func:`ckptsync.train.optimizer.reducing_gradients`: a graph built in that block averages
every ``compute_gradients`` (so every ``minimize``) without the model wrapping its
optimizer; one that does wrap it is still reduced once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import CkptsyncValueError
from ..graph import Operation, Tensor
from ..ops.array_ops import constant, convert_to_tensor, ones_like
from ..ops.math_ops import multiply
from ..train.optimizer import GradsAndVars, Optimizer
from ..variables import Variable
from ._runtime import size
from .collectives import ReduceOp
from .graph_ops import ALLREDUCE_OP_TYPE, allreduce_tensors

__all__ = ["DistributedOptimizer", "allreduce_gradients", "reduced_gradients",
           "average_gradients"]

_state = threading.local()  # .active: inside the outermost reduced_gradients call
_GRAD_LOSS_POS = 5  # compute_gradients(loss, var_list, gate_gradients, aggregation_method,
#                                       colocate_gradients_with_ops, grad_loss)


def allreduce_gradients(grads_and_vars: GradsAndVars, op: ReduceOp = ReduceOp.MEAN,
                        name: str = "DistributedAllreduce") -> GradsAndVars:
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


def reduced_gradients(compute: Callable[..., GradsAndVars], args: tuple[Any, ...],
                      kwargs: dict[str, Any], op: ReduceOp, name: str,
                      predivide: bool = True) -> GradsAndVars:
    """``compute(*args, **kwargs)`` (a ``compute_gradients`` with TF's signature),
    reduced across ranks by one fused allreduce op.

    With ``predivide`` and ``op`` MEAN, ``grad_loss`` is scaled by ``1 / size`` and the
    op is a SUM (see the module docstring); pass ``predivide=False`` when ``compute``
    might ignore ``grad_loss``. Only the outermost of nested calls (an optimizer wrapped
    twice, or wrapped inside ``trainer``'s averaging block) scales and reduces. Identity
    with one rank.
    """
    if size() == 1 or getattr(_state, "active", False):
        return compute(*args, **kwargs)
    loss = args[0] if args else kwargs.get("loss")
    if predivide and op is ReduceOp.MEAN and isinstance(loss, Tensor) \
            and loss.dtype.is_floating:
        args, kwargs = _with_scaled_grad_loss(loss, args, kwargs, 1.0 / size())
        op = ReduceOp.SUM
    _state.active = True
    try:
        gv = compute(*args, **kwargs)
    finally:
        _state.active = False
    return allreduce_gradients(gv, op, name=name)


def average_gradients(compute: Callable[..., GradsAndVars], args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> GradsAndVars:
    """A :data:`~ckptsync.train.optimizer.GradientReducer` averaging across ranks:
    ``compute(*args, **kwargs)`` with ``1 / size`` folded into ``grad_loss``, then one fused
    ``SUM`` allreduce op named ``DistributedAllreduce``, exactly what
    ``DistributedOptimizer`` builds. Inside a ``DistributedOptimizer`` (or another
    reduction) it only computes, so gradients are reduced once. Identity with one rank.

    Thread-safety: as graph building (the nesting state is per thread).

    Example:
        >>> import ckptsync as cs
        >>> g = cs.Graph()
        >>> with cs.train.optimizer.reducing_gradients(g, average_gradients):
        ...     pass  # build_net(g, ...) here: its minimize() averages across ranks
    """
    return reduced_gradients(compute, args, kwargs, ReduceOp.MEAN, "DistributedAllreduce")


def _with_scaled_grad_loss(loss: Tensor, args: tuple[Any, ...], kwargs: dict[str, Any],
                           scale: float) -> tuple[tuple[Any, ...], dict[str, Any]]:
    grad_loss = args[_GRAD_LOSS_POS] if len(args) > _GRAD_LOSS_POS else kwargs.get("grad_loss")
    with loss.graph.as_default(), loss.graph.name_scope("predivide"):
        if grad_loss is not None:
            seed = multiply(convert_to_tensor(grad_loss, dtype=loss.dtype),
                            np.asarray(scale, loss.dtype.np))
        elif loss.shape.is_fully_defined():
            seed = constant(np.full(loss.shape.as_list(), scale, loss.dtype.np))
        else:
            seed = multiply(ones_like(loss), np.asarray(scale, loss.dtype.np))
    if len(args) > _GRAD_LOSS_POS:
        return (*args[:_GRAD_LOSS_POS], seed, *args[_GRAD_LOSS_POS + 1:]), kwargs
    return args, {**kwargs, "grad_loss": seed}


def _uses_base_compute_gradients(optimizer: Optimizer) -> bool:
    """True when ``optimizer.compute_gradients`` surely honours ``grad_loss``."""
    while isinstance(optimizer, DistributedOptimizer):
        optimizer = optimizer._optimizer
    return type(optimizer).compute_gradients is Optimizer.compute_gradients


class DistributedOptimizer(Optimizer):
    """Wraps ``optimizer`` so its gradients are averaged (``op``) across ranks, as
    Horovod's ``hvd.DistributedOptimizer``.

    ``compute_gradients`` calls the wrapped optimizer's (for ``Average``, with the loss's
    gradient seed scaled by ``1 / size``: see the module docstring), then allreduces every
    non-None gradient in one fused op (identity with one rank); ``apply_gradients``, slots and
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

    def compute_gradients(self, *args: Any, **kwargs: Any) -> GradsAndVars:
        return reduced_gradients(self._optimizer.compute_gradients, args, kwargs, self._op,
                                 self.get_name() + "_Allreduce",
                                 predivide=_uses_base_compute_gradients(self._optimizer))

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
