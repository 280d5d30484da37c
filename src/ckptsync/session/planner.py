"""The one planner: (fetched elements, fed tensors) -> a :class:`~.plan.Plan`.

Planning a run, in order:

1. *Prune*: walk back from the fetched elements to the ops they need; a fed tensor cuts
   the walk (its producer does not run); ref inputs (a variable named by an assign) are
   not evaluated.
2. *Order*: the needed ops in creation order (a topological order of the graph), and one
   value slot per tensor, fed tensors first.
3. *Steps*: one step that reads every needed variable (start-of-run values); the
   *prepare* steps of ops whose inputs are computed in place (:mod:`.inplace_inputs`);
   then one step per op, except constants (their values sit in the plan's template),
   fed ops, and ``MatMul -> BiasAdd [-> Relu]`` chains, which run as one step where
   the chain's last op would (:mod:`.fused_matmul`).

Thread-safety: :func:`compile_plan` only reads the graph; the session caches its plans.
"""

from __future__ import annotations

from typing import Any

from ..ops.registry import get_op_def
from ..tensor import Operation, Tensor
from .fused_matmul import fused_matmul_step, plan_fused_matmuls
from .inplace_inputs import plan_inplace_inputs
from .plan import Plan, Step
from .steps import make_step, read_variables_step

__all__ = ["compile_plan", "needed_ops"]


def needed_ops(elements: list[Tensor | Operation], fed_ids: set[int]) -> list[Operation]:
    """The ops a run fetching ``elements`` executes (fed tensors, by id, cut the walk),
    in creation order."""
    needed: dict[int, Operation] = {}
    stack: list[Operation] = []
    for el in elements:
        if isinstance(el, Tensor):
            if id(el) not in fed_ids:
                stack.append(el.op)
        else:
            stack.append(el)
    while stack:
        op = stack.pop()
        if id(op) in needed:
            continue
        needed[id(op)] = op
        refs = get_op_def(op.type).ref_inputs
        for i, t in enumerate(op.inputs):
            if i not in refs and id(t) not in fed_ids:
                stack.append(t.op)
        stack.extend(op.control_inputs)
    return sorted(needed.values(), key=lambda o: o._id)


def compile_plan(elements: list[Tensor | Operation], fed: list[Tensor]) -> Plan:
    """The plan of a run that fetches ``elements`` with the tensors of ``fed`` fed.

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
    steps: list[Step] = []
    step_ops: list[Operation] = []
    var_reads = [(slot[id(op.outputs[0])], op.name) for op in ordered
                 if op.type == "VariableV2" and id(op.outputs[0]) not in fed_ids]
    if var_reads:
        steps.append(read_variables_step(var_reads))
        step_ops.append(next(op for op in ordered if op.type == "VariableV2"))
    inplace = plan_inplace_inputs(ordered, elements, fed_ids, len(slot))
    for op, prepare in inplace.prepare:
        steps.append(prepare)
        step_ops.append(op)
    template: list[Any] = [None] * inplace.n_slots
    chains = plan_fused_matmuls(ordered, elements, fed_ids, {*inplace.outs, *inplace.fused})
    for op in ordered:
        if op.type == "VariableV2":
            continue
        if all(id(t) in fed_ids for t in op.outputs) and op.outputs:
            continue
        if op.type == "Const":
            template[slot[id(op.outputs[0])]] = op.attrs["value"]
            continue
        chain = chains.get(id(op))
        if chain is not None:
            # At the chain's last op: every input (the bias too) is computed by then.
            if op is (chain.relu or chain.bias_add):
                steps.append(fused_matmul_step(chain, slot))
                step_ops.append(chain.matmul)
            continue
        st = make_step(op, slot, fed_ids, inplace.outs.get(id(op)), inplace.fused.get(id(op)))
        if st is not None:
            steps.append(st)
            step_ops.append(op)
    fetch_slots = [slot[id(el)] if isinstance(el, Tensor) else None for el in elements]
    return Plan(steps, step_ops, [slot[id(t)] for t in fed], fetch_slots, template)
