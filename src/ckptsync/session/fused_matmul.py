"""Kernel fusion in a ``Session`` plan: ``MatMul -> BiasAdd [-> Relu]`` as one step.

TF1's Grappler *remapper* rewrites this chain into one ``_FusedMatMul`` node on CPU; here
the plan does the same: one step computes ``matmul(x, w)``, adds the bias in place and
applies the ReLU in place, and writes the last op's output slot. The step runs where the
chain's last op would (its bias may be computed after the MatMul). The chain is fused
only where that is invisible: every intermediate output is read exactly once in the run
(by the next op of the chain), is neither fetched nor fed, and no input computed in place (see
:mod:`.inplace_inputs`) is among them. The results are bit-identical to the three kernels
(the same float operations on the same values); an error in the fused step names the
MatMul op.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..ops.registry import get_op_def
from ..tensor import Operation, Tensor
from .plan import RunContext, Step, readers_of

__all__ = ["FusedMatMul", "fused_matmul_step", "plan_fused_matmuls"]


class FusedMatMul(NamedTuple):
    """One fused chain: the MatMul, its BiasAdd, and the Relu after it (or None)."""

    matmul: Operation
    bias_add: Operation
    relu: Operation | None


def plan_fused_matmuls(ordered: list[Operation], elements: list[Tensor | Operation],
                       fed_ids: set[int], taken: set[int]) -> dict[int, FusedMatMul]:
    """The chains to fuse in a plan of ``ordered`` ops fetching ``elements``, feeding
    ``fed_ids``; ops in ``taken`` (other fusions) are left alone. Keyed by id of every
    op of a chain."""
    uses = readers_of(ordered)
    fetched = {id(el) for el in elements}

    def sole_reader(t: Tensor, op_type: str) -> Operation | None:
        readers = uses.get(id(t), [])
        if (len(readers) != 1 or readers[0].type != op_type or id(t) in fetched
                or id(t) in fed_ids or id(readers[0]) in taken
                or readers[0].inputs[0] is not t):
            return None
        return readers[0]

    chains: dict[int, FusedMatMul] = {}
    for op in ordered:
        if op.type != "MatMul" or id(op) in taken or id(op.outputs[0]) in fed_ids:
            continue
        bias_add = sole_reader(op.outputs[0], "BiasAdd")
        if bias_add is None or id(bias_add.outputs[0]) in fed_ids:
            continue
        relu = sole_reader(bias_add.outputs[0], "Relu")
        if relu is not None and id(relu.outputs[0]) in fed_ids:
            relu = None
        chain = FusedMatMul(op, bias_add, relu)
        for member in (op, bias_add, relu):
            if member is not None:
                chains[id(member)] = chain
    return chains


def fused_matmul_step(chain: FusedMatMul, slot: dict[int, int]) -> Step:
    """The step running ``chain``: matmul, bias added in place, ReLU in place."""
    matmul = get_op_def("MatMul").kernel
    assert matmul is not None
    a, w = (slot[id(t)] for t in chain.matmul.inputs)
    b = slot[id(chain.bias_add.inputs[1])]
    last = chain.relu if chain.relu is not None else chain.bias_add
    o = slot[id(last.outputs[0])]
    attrs = dict(chain.matmul.attrs)
    # Without transposes the kernel is np.matmul itself: call it directly (the same
    # operation on the same values; this step runs on every request a server answers).
    plain = not attrs.get("transpose_a") and not attrs.get("transpose_b")
    np_matmul = np.matmul

    def biased(v: list[Any]) -> np.ndarray:
        y = np_matmul(v[a], v[w]) if plain else matmul(v[a], v[w], **attrs)
        bias = v[b]
        if getattr(bias, "ndim", 0) == 1:
            y += bias
            return y
        return y + bias  # a fed bias of another rank broadcasts as BiasAdd's kernel does

    if chain.relu is None:
        def step(v: list[Any], ctx: RunContext) -> None:
            v[o] = biased(v)

        return step

    def step_relu(v: list[Any], ctx: RunContext) -> None:
        y = biased(v)
        v[o] = np.maximum(y, 0, out=y)

    return step_relu
