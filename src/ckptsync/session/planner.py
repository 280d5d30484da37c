"""The one planner: (fetched elements, fed tensors) -> a :class:`~.plan.Plan`.

Planning a run, in order:

1. *Prune*: walk back from the fetched elements to the ops they need; a fed tensor cuts
   the walk (its producer does not run); ref inputs (a variable named by an assign) are
   not evaluated.
2. *Order*: the needed ops in creation order (a topological order of the graph), and one
   value slot per tensor, fed tensors first.
3. *Steps*: in a sub-graph's plan, one step giving the ``_Arg`` of each captured
   variable the run's writes (:mod:`.ordering`); one step that reads every needed
   variable (their values before the run's writes); the *prepare* steps of ops whose
   inputs are computed in place (:mod:`.inplace_inputs`); then one step per op, except
   constants (their values sit in the plan's template), fed ops, and ``MatMul ->
   BiasAdd [-> Relu]`` chains, which run as one step where the chain's last op would
   (:mod:`.fused_matmul`). An op that reads a variable after a write of it ordered
   before it gets a *fresh read* step first (:mod:`.ordering`, as TF1's ref variables).

Thread-safety: :func:`compile_plan` only reads the graph; the session caches its plans.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping
from typing import Any

from ..tensor import Operation, Tensor
from .fused_matmul import fused_matmul_step, plan_fused_matmuls
from .inplace_inputs import plan_inplace_inputs
from .ordering import fresh_read_step, plan_fresh_reads, var_args_step
from .plan import Plan, Step, needed_ops, readers_of
from .steps import make_step, read_variables_step

__all__ = ["compile_plan", "needed_ops"]


def compile_plan(elements: list[Tensor | Operation], fed: list[Tensor],
                 var_args: Mapping[int, str] | None = None) -> Plan:
    """The plan of a run that fetches ``elements`` with the tensors of ``fed`` fed; in a
    sub-graph's plan, ``var_args`` maps the ids of the fed ``_Arg`` tensors that stand
    for captured variables to the variables' op names.

    Raises:
        InvalidArgumentError: a needed placeholder is not fed (names it, its dtype and
            shape).
        CkptsyncValueError: a needed op's type has no registered kernel.
    """
    fed_ids = {id(t) for t in fed}
    ordered = needed_ops(elements, fed_ids)
    slot: dict[int, int] = {}
    for t in fed:
        slot.setdefault(id(t), len(slot))
    for op in ordered:
        for t in op.outputs:
            slot.setdefault(id(t), len(slot))
    fresh = plan_fresh_reads(ordered, fed_ids, var_args)
    steps: list[Step] = []
    step_ops: list[Operation] = []
    args = [t for t in fed if var_args and id(t) in var_args]
    if args:
        assert var_args is not None
        steps.append(var_args_step([(slot[id(t)], var_args[id(t)]) for t in args]))
        step_ops.append(args[0].op)
    skip = _fresh_only(ordered, elements, fresh) if fresh else set()
    var_reads = [(slot[id(op.outputs[0])], op.name) for op in ordered
                 if op.type == "VariableV2" and id(op.outputs[0]) not in fed_ids
                 and id(op) not in skip]
    if var_reads:
        steps.append(read_variables_step(var_reads))
        step_ops.append(next(op for op in ordered if op.type == "VariableV2"))
    inplace = plan_inplace_inputs(ordered, elements, fed_ids, len(slot))
    for op, prepare in inplace.prepare:
        steps.append(prepare)
        step_ops.append(op)
    n_slots = inplace.n_slots
    chains = plan_fused_matmuls(ordered, elements, fed_ids,
                                {*inplace.outs, *inplace.fused, *fresh})
    for op in ordered:
        if op.type == "VariableV2":
            continue
        if all(id(t) in fed_ids for t in op.outputs) and op.outputs:
            continue
        if op.type == "Const":
            continue
        chain = chains.get(id(op))
        if chain is not None:
            # At the chain's last op: every input (the bias too) is computed by then.
            if op is (chain.relu or chain.bias_add):
                steps.append(fused_matmul_step(chain, slot))
                step_ops.append(chain.matmul)
            continue
        slots: Mapping[int, int] = slot
        reads = fresh.get(id(op), ())
        if reads:
            own = {id(t): n_slots + k for k, (t, _) in enumerate(reads)}
            slots = ChainMap(own, slot)
        st = make_step(op, slots, fed_ids, inplace.outs.get(id(op)), inplace.fused.get(id(op)))
        if st is not None:
            for k, (_, name) in enumerate(reads):
                steps.append(fresh_read_step(n_slots + k, name))
                step_ops.append(op)
            n_slots += len(reads)
            steps.append(st)
            step_ops.append(op)
    template: list[Any] = [None] * n_slots
    for op in ordered:
        if op.type == "Const" and id(op.outputs[0]) not in fed_ids:
            template[slot[id(op.outputs[0])]] = op.attrs["value"]
    fetch_slots = [slot[id(el)] if isinstance(el, Tensor) else None for el in elements]
    memo: dict[int, bool] = {}
    copied = tuple(i for i, el in enumerate(elements)
                   if isinstance(el, Tensor) and _may_alias(el, fed_ids, memo))
    return Plan(steps, step_ops, [slot[id(t)] for t in fed], fetch_slots, template, copied)


# Ops whose value may be memory the run does not own: a variable's storage (a read, an
# assign's or an update's result), a constant's or a default's value, a fed array, a
# data set's element, a py_func's return, a branch's or a loop's result.
_HELD_SOURCES = frozenset({
    "VariableV2", "Const", "Placeholder", "PlaceholderWithDefault", "IteratorGetNext",
    "PyFunc", "PyFuncStateless", "_Arg", "If", "While", "Assign", "AssignAdd",
    "AssignSub", "AssignMovingAverage", "ScatterAdd", "ScatterSub", "ScatterMul",
    "ScatterDiv", "ScatterMin", "ScatterMax", "ScatterUpdate"})
# Ops whose kernels may return their input, or a numpy view of it.
_VIEWS = frozenset({
    "Identity", "IdentityN", "StopGradient", "Reshape", "ReshapeLike", "Squeeze",
    "ExpandDims", "ExpandDimsLast", "StridedSlice", "Slice", "Transpose", "Unpack", "Split",
    "SplitV", "BroadcastTo", "CheckNumerics", "Print", "PrintV2", "ReverseV2", "Cast"})


def _may_alias(t: Tensor, fed_ids: set[int], memo: dict[int, bool]) -> bool:
    """Whether the value of ``t`` in a run may share memory with something that outlives
    the run (see ``_HELD_SOURCES``): such a fetch is returned as a copy, as TF1's
    ``Session.run`` returns arrays of the caller's own (writing into one changes no
    variable, constant or feed)."""
    key = id(t)
    found = memo.get(key)
    if found is None:
        op = t.op
        found = key in fed_ids or op.type in _HELD_SOURCES or op.type.startswith(
            ("Apply", "SparseApply")) or (op.type in _VIEWS and any(
                _may_alias(i, fed_ids, memo) for i in op.inputs))
        memo[key] = found
    return found


def _fresh_only(ordered: list[Operation], elements: list[Tensor | Operation],
                fresh: dict[int, list[tuple[Tensor, str]]]) -> set[int]:
    """Ids of the variable ops whose every read in the plan is a fresh read and whose
    value is not fetched: the plan need not read them first (holding that array would
    keep a sparse update from writing the variable's rows in place)."""
    readers = readers_of(ordered)
    fetched = {id(el) for el in elements}
    skip = set()
    for op in ordered:
        if op.type != "VariableV2":
            continue
        t = op.outputs[0]
        if id(t) not in fetched and all(
                any(r is t for r, _ in fresh.get(id(c), ())) for c in readers.get(id(t), ())):
            skip.add(id(op))
    return skip
