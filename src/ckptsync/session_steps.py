"""The steps of a compiled ``Session`` run: one closure per kernel call over a flat list
of value slots (see :class:`.session.Session`). Kept apart from the session so that the
hot loop's pieces sit together: how an op becomes a step, how variables are read at the
start of a run, and how results are stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import InvalidArgumentError
from .graph import Operation
from .ops._registry import FusedInputs, get_op_def

if TYPE_CHECKING:
    from .session import _RunContext

__all__ = ["_Plan", "_Step", "_make_step", "_read_variables_step"]

# A step takes the run's value slots and its run context (``session._RunContext``).
_Step = Callable[[list[Any], Any], None]


class _Plan:
    """A compiled run: kernel calls in order over a flat list of value slots.

    ``template`` holds the constants' values already in their slots, so a run starts from
    ``template.copy()`` and never calls a kernel for a constant.
    """

    __slots__ = ("steps", "ops", "feed_slots", "fetch_slots", "template")

    def __init__(self, steps: list[_Step], ops: list[Operation], feed_slots: list[int],
                 fetch_slots: list[int | None], template: list[Any]):
        self.steps = steps
        self.ops = ops
        self.feed_slots = feed_slots
        self.fetch_slots = fetch_slots
        self.template = template


def _make_step(op: Operation, slot: dict[int, int], fed: set[int], out_slot: int | None = None,
               fused: FusedInputs | None = None) -> _Step | None:
    """The step that runs ``op``; ``out_slot`` holds the array its kernel writes into,
    ``fused`` replaces a fusing op's kernel."""
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

        def var_step(v: list[Any], ctx: _RunContext) -> None:
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

            def out_step1(v: list[Any], ctx: _RunContext) -> None:
                v[o] = fn(v[a], out=v[w])

            return out_step1
        if len(ins_) == 2:
            a, b = ins_

            def out_step2(v: list[Any], ctx: _RunContext) -> None:
                v[o] = fn(v[a], v[b], out=v[w], **attrs)

            return out_step2

        def out_step(v: list[Any], ctx: _RunContext) -> None:
            v[o] = fn(*[v[i] for i in ins_], out=v[w], **attrs)

        return out_step
    if d.kind == "stateful":
        def stateful_step(v: list[Any], ctx: _RunContext) -> None:
            res = fn(ctx, op, *[None if i is None else v[i] for i in ins])
            _store(v, outs, res)

        return stateful_step
    if single and not attrs and len(ins_) == 2:
        a, b = ins_

        def step2(v: list[Any], ctx: _RunContext) -> None:
            v[o] = fn(v[a], v[b])

        return step2
    if single and not attrs and len(ins_) == 1:
        a = ins_[0]

        def step1(v: list[Any], ctx: _RunContext) -> None:
            v[o] = fn(v[a])

        return step1
    if single and len(ins_) == 1:  # e.g. ArgMax(axis=...), Softmax
        a = ins_[0]

        def step1_attrs(v: list[Any], ctx: _RunContext) -> None:
            v[o] = fn(v[a], **attrs)

        return step1_attrs
    if single:
        def step_n(v: list[Any], ctx: _RunContext) -> None:
            v[o] = fn(*[v[i] for i in ins_], **attrs)

        return step_n

    def step_multi(v: list[Any], ctx: _RunContext) -> None:
        _store(v, outs, fn(*[v[i] for i in ins_], **attrs))

    return step_multi


def _read_variables_step(reads: list[tuple[int, str]]) -> _Step:
    """One step that reads every variable the plan needs (start-of-run values)."""

    def step(v: list[Any], ctx: _RunContext) -> None:
        read = ctx.read
        for o, name in reads:
            v[o] = read(name)

    return step


def _store(v: list[Any], outs: list[int], res: Any) -> None:
    if len(outs) == 1:
        v[outs[0]] = res
    elif outs:
        for o, r in zip(outs, res):
            v[o] = r


