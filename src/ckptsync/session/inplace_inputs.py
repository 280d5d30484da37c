"""Inputs computed in place: which kernels of a ``Session`` plan write their results
straight into the buffers of the op that reads them.

An op registered with ``fuse_inputs`` (the distributed ``MpiAllreduce``) is offered the
inputs whose producers can write into an array it owns: computed in the run (not fed)
by a single-output kernel that accepts ``out=`` (see :mod:`ckptsync.ops.registry`), of
a fully defined static shape, and read exactly once in the run, by that op (not fetched,
not read by another op). Its planner picks the ones it takes (``direct``). The plan then
gets one *prepare* step per fusing op, run before any kernel, that puts the arrays to
write into in extra value slots, and each such producer's step passes its slot as
``out=``.
"""

from __future__ import annotations

from typing import NamedTuple

from ..ops.registry import FusedInputs, get_op_def
from ..tensor import Operation, Tensor
from .plan import RunContext, Step, readers_of

__all__ = ["InplaceInputsPlan", "plan_inplace_inputs"]


class InplaceInputsPlan(NamedTuple):
    """The in-place part of a plan (empty when no op of the run fuses its inputs)."""

    fused: dict[int, FusedInputs]  # id(fusing op) -> how it runs in this plan
    outs: dict[int, int]  # id(producer op) -> the value slot of the array it writes into
    prepare: list[tuple[Operation, Step]]  # (fusing op, step), to run first
    n_slots: int  # value slots in all, the extra ones included


def plan_inplace_inputs(ordered: list[Operation], elements: list[Tensor | Operation],
                        fed_ids: set[int], n_slots: int) -> InplaceInputsPlan:
    """The in-place part of a plan of ``ordered`` ops that fetches ``elements``, feeds the
    tensors in ``fed_ids`` and has ``n_slots`` value slots so far."""
    plan = InplaceInputsPlan({}, {}, [], n_slots)
    fusing = [op for op in ordered if get_op_def(op.type).fuse_inputs is not None]
    if not fusing:
        return plan
    readers = readers_of(ordered)
    fetched = {id(el) for el in elements}
    for op in fusing:
        candidates = [
            i for i, t in enumerate(op.inputs)
            if len(readers.get(id(t), ())) == 1 and id(t) not in fetched
            and id(t) not in fed_ids and len(t.op.outputs) == 1
            and get_op_def(t.op.type).accepts_out and t.shape.is_fully_defined()]
        planner = get_op_def(op.type).fuse_inputs
        assert planner is not None
        fused = planner(op, candidates)
        if fused is None:
            continue
        plan.fused[id(op)] = fused
        if not fused.direct:
            continue
        for k, i in enumerate(fused.direct):
            plan.outs[id(op.inputs[i].op)] = n_slots + k
        plan.prepare.append((op, _prepare_step(fused, n_slots, len(fused.direct))))
        n_slots += len(fused.direct)
    return plan._replace(n_slots=n_slots)


def _prepare_step(fused: FusedInputs, first: int, n: int) -> Step:
    """Puts the arrays the producers of ``fused``'s direct inputs write into in slots
    ``[first, first + n)``."""

    def step(v: list[object], ctx: RunContext) -> None:
        v[first:first + n] = fused.prepare(ctx)

    return step
