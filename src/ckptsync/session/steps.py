"""How an op becomes a :data:`~.plan.Step` of a compiled ``Session`` run: one closure
per kernel call over the run's value slots, specialised by arity and attrs (this is the
hot loop), the one step that reads every variable at the start of a run (the reads
ordered after a write get their own, :mod:`.ordering`), and how results are stored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InvalidArgumentError
from ..ops.registry import FusedInputs, get_op_def
from ..tensor import Operation
from .plan import RunContext, Step

__all__ = ["make_step", "read_variables_step"]


def make_step(op: Operation, slot: Mapping[int, int], fed: set[int], out_slot: int | None = None,
              fused: FusedInputs | None = None) -> Step | None:
    """The step that runs ``op`` (None for a no-op).

    Args:
        slot: id(tensor) -> its value slot.
        fed: ids of the fed tensors.
        out_slot: the slot of the array ``op``'s kernel writes into (``out=``), if any.
        fused: replaces the kernel of an op whose inputs are computed in place.

    Raises:
        InvalidArgumentError: ``op`` is a placeholder (it must be fed; names it, its dtype
            and shape).
    """
    d = get_op_def(op.type)
    outs = [slot[id(t)] for t in op.outputs]
    if d.kind == "noop":
        return None
    if d.kind == "placeholder":
        t = op.outputs[0]
        raise InvalidArgumentError(
            None, op, f"You must feed a value for placeholder tensor '{op.name}' with dtype "
            f"{t.dtype.name} and shape {t.shape}")
    if d.kind == "variable":
        name, o = op.name, outs[0]

        def var_step(v: list[Any], ctx: RunContext) -> None:
            v[o] = ctx.read(name)

        return var_step
    ins = [None if i in d.ref_inputs else slot[id(t)] for i, t in enumerate(op.inputs)]
    fn: Callable[..., Any] | None = d.kernel if fused is None else fused.run
    assert fn is not None
    attrs = dict(op.attrs)
    ins_ = [i for i in ins if i is not None]
    single = len(outs) == 1
    o = outs[0] if outs else -1
    if out_slot is not None:
        w = out_slot
        if len(ins_) == 1 and not attrs:
            a = ins_[0]

            def out_step1(v: list[Any], ctx: RunContext) -> None:
                v[o] = fn(v[a], out=v[w])

            return out_step1
        if len(ins_) == 2:
            a, b = ins_

            def out_step2(v: list[Any], ctx: RunContext) -> None:
                v[o] = fn(v[a], v[b], out=v[w], **attrs)

            return out_step2

        def out_step(v: list[Any], ctx: RunContext) -> None:
            v[o] = fn(*[v[i] for i in ins_], out=v[w], **attrs)

        return out_step
    if d.kind == "stateful":
        def stateful_step(v: list[Any], ctx: RunContext) -> None:
            res = fn(ctx, op, *[None if i is None else v[i] for i in ins])
            _store_outputs(v, outs, res)

        return stateful_step
    if single and not attrs and len(ins_) == 2:
        a, b = ins_

        def step2(v: list[Any], ctx: RunContext) -> None:
            v[o] = fn(v[a], v[b])

        return step2
    if single and not attrs and len(ins_) == 1:
        a = ins_[0]

        def step1(v: list[Any], ctx: RunContext) -> None:
            v[o] = fn(v[a])

        return step1
    if single and len(ins_) == 1:  # e.g. ArgMax(axis=...), Softmax
        a = ins_[0]

        def step1_attrs(v: list[Any], ctx: RunContext) -> None:
            v[o] = fn(v[a], **attrs)

        return step1_attrs
    if single:
        def step_n(v: list[Any], ctx: RunContext) -> None:
            v[o] = fn(*[v[i] for i in ins_], **attrs)

        return step_n

    def step_multi(v: list[Any], ctx: RunContext) -> None:
        _store_outputs(v, outs, fn(*[v[i] for i in ins_], **attrs))

    return step_multi


def read_variables_step(reads: list[tuple[int, str]]) -> Step:
    """One step that reads every variable the plan needs (before the run's writes: the
    step runs first)."""

    def step(v: list[Any], ctx: RunContext) -> None:
        read = ctx.read
        for o, name in reads:
            v[o] = read(name)

    return step


def _store_outputs(v: list[Any], outs: list[int], res: Any) -> None:
    if len(outs) == 1:
        v[outs[0]] = res
    elif outs:
        for o, r in zip(outs, res):
            v[o] = r


