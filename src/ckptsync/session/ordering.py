"""Reads ordered after writes: where a ``Session`` plan reads a variable again.

As TF1's ref variables, a kernel that reads a variable sees every write of it that is
ordered before the kernel by a data or a control dependency, writes of the same run
included::

    a = tf.assign(v, 5.0)
    with tf.control_dependencies([a]):
        r = tf.identity(v)          # 5.0, as TF1

A plan reads each variable once, before its first step: the value of every read that
is *not* ordered after a write of that variable in the run (TF1 gives such a read
either value; here it is always the value before the run's writes). Each read that is
ordered after one gets a *fresh read* instead: a step just before the reading op puts
the variable's value as of then (``RunContext.read``: the run's last write of it) in a
value slot of its own, which the op reads. A training step, whose reads all come before
its updates, has none and runs as it did.

What an op writes (:func:`variables_written`): the variables of its ref inputs but those
its type only reads (``OpDef.read_refs``), those its type names (``OpDef.writes``), and
what the ops of the sub-graphs it runs write (``OpDef.subgraphs``: a cond's branches, a
loop's cond and body). The output of an update (``OpDef.output_ref``: ``assign``,
``scatter_add``, an optimizer's apply op) is, as TF1's ref output, the variable itself:
an op reading it after a later update of the variable ordered before that op reads it
fresh too (``assign(v, 5)``, then ``assign_add(v, 1)``, then ``a + 0``: 6). Inside a sub-graph, an ``_Arg`` that stands for a captured
variable (``var_args``) is read as that variable: fresh where ordered after a write in
the sub-graph, and replaced, when the sub-graph starts, by the run's last write of the
variable if there is one (so a loop's next iteration sees the assignments of the last).

Thread-safety: pure functions of the graph (plans are built once and cached).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..ops.registry import get_op_def
from ..tensor import Operation, Tensor
from .plan import RunContext, Step, needed_ops

__all__ = ["variables_written", "plan_fresh_reads", "fresh_read_step", "var_args_step"]

_NONE: frozenset[str] = frozenset()


def variables_written(op: Operation) -> frozenset[str]:
    """The names of the variable ops ``op`` may write when it runs."""
    d = get_op_def(op.type)
    names = {op.inputs[i].op.name for i in d.ref_inputs if i not in d.read_refs}
    if d.writes is not None:
        names.update(d.writes(op))
    if d.subgraphs is not None:
        for sub in d.subgraphs(op):
            names.update(_subgraph_writes(sub))
    return frozenset(names) if names else _NONE


def _subgraph_writes(sub: Any) -> set[str]:
    """What the ops a ``func_graph.SubGraph``'s plan runs may write."""
    fed = {id(t) for t in sub.fed()}
    out: set[str] = set()
    for op in needed_ops([*sub.outputs, *sub.saved], fed):
        out |= variables_written(op)
    return out


def plan_fresh_reads(ordered: list[Operation], fed_ids: set[int],
                     var_args: Mapping[int, str] | None = None
                     ) -> dict[int, list[tuple[Tensor, str]]]:
    """id(op) -> ``(tensor, variable op name)`` per variable tensor that op of
    ``ordered`` (a plan's ops, in order) reads as a value after a write of that
    variable ordered before it; ops without such a read are left out."""
    var_of: dict[int, str] = dict(var_args or {})
    defs = [get_op_def(op.type) for op in ordered]
    for op, d in zip(ordered, defs):
        if op.outputs and id(op.outputs[0]) not in fed_ids:
            if op.type == "VariableV2":
                var_of[id(op.outputs[0])] = op.name
            elif d.output_ref is not None:  # an update's output: the variable (TF1's ref)
                var_of[id(op.outputs[0])] = op.inputs[d.output_ref].op.name
    # Only variables read as values in the plan matter: the sets below stay that small
    # (an initializer's thousands of assigns, read by nobody, track nothing).
    read: set[str] = set()
    for op, d in zip(ordered, defs):
        for i, t in enumerate(op.inputs):
            name = var_of.get(id(t))
            if name is not None and i not in d.ref_inputs:
                read.add(name)
    if not read:
        return {}
    written_by: dict[int, frozenset[str]] = {}  # id(op) -> what is written once op ran
    fresh: dict[int, list[tuple[Tensor, str]]] = {}
    for op, d in zip(ordered, defs):
        before = _NONE
        if written_by:  # else nothing is written before op (most ops of a training step)
            parts = [w for w in (written_by.get(id(t.op)) for t in op.inputs
                                 if id(t) not in fed_ids) if w]
            parts += [w for w in (written_by.get(id(c)) for c in op.control_inputs) if w]
            # One pass over all parts (a group of N updates: O(N), not N growing copies).
            if parts:
                before = parts[0] if len(parts) == 1 else frozenset().union(*parts)
        if before:
            reads: list[tuple[Tensor, str]] = []
            for i, t in enumerate(op.inputs):
                name = None if i in d.ref_inputs else var_of.get(id(t))
                if name is not None and name in before and all(t is not r for r, _ in reads):
                    reads.append((t, name))
            if reads:
                fresh[id(op)] = reads
        if d.kind == "stateful":
            mine = variables_written(op) & read
            if mine and not mine <= before:
                before = before | mine
        if before:
            written_by[id(op)] = before
    return fresh


def fresh_read_step(out: int, name: str) -> Step:
    """The step that puts variable ``name``'s value as of now in slot ``out``."""

    def step(v: list[Any], ctx: RunContext) -> None:
        v[out] = ctx.read(name)

    return step


def var_args_step(pairs: list[tuple[int, str]]) -> Step:
    """The first step of a sub-graph's plan: each ``(slot, variable op name)`` of an
    ``_Arg`` standing for a variable takes the run's last write of the variable, if any
    (else it keeps the value it was fed)."""

    def step(v: list[Any], ctx: RunContext) -> None:
        writes = ctx.writes
        if writes:
            for s, name in pairs:
                w = writes.get(name)
                if w is not None:
                    v[s] = w

    return step
