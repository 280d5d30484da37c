"""Collectives as graph ops: a fused ``allreduce`` of many tensors, and
``broadcast_global_variables``; plus the start-of-job check that every rank built the
same graph.

Both ops are ``stateful`` kernels (they communicate, so the session runs them on every
``run`` that needs them and never folds them): ``MpiAllreduce`` takes N tensors and
outputs their N reductions, fused: in a session, through the bucket buffers the
producers of its inputs write into (:mod:`._allreduce_buffers`); as a plain kernel (one
rank, or inputs of unknown static shape), through one :func:`~.collectives.allreduce` call;
``BroadcastGlobalVariables`` reads every global variable's session value, broadcasts them
from the root in one fused call and writes them back (reads ordered after the op see
them; other runs see them when the run ends, as every assignment in ckptsync).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import CkptsyncTypeError, CkptsyncValueError, FailedPreconditionError
from ..graph import Graph, GraphKeys, Operation, Tensor, get_default_graph
from ..ops.array_ops import convert_to_tensor
from ..ops.registry import register
from ._allreduce_buffers import plan_bucketed_allreduce
from ._runtime import rank, size
from .collectives import ReduceOp, allgather_object, allreduce, broadcast, reducible

__all__ = ["allreduce_tensors", "broadcast_global_variables", "graph_signature",
           "check_same_graph", "ALLREDUCE_OP_TYPE"]

ALLREDUCE_OP_TYPE = "MpiAllreduce"


# ------------------------------------------------------------------ fused allreduce
def _allreduce_grad(op: Operation, *grads: Tensor | None) -> list[Tensor | None]:
    # d(allreduce_sum(x))/dx_r = allreduce_sum(upstream); MEAN likewise scaled by 1/size.
    reduce_op = ReduceOp(op.attrs["op"])
    if reduce_op not in (ReduceOp.SUM, ReduceOp.MEAN):
        return [None] * len(grads)
    present = [g for g in grads if g is not None]
    if not present:
        return [None] * len(grads)
    reduced = iter(allreduce_tensors(present, reduce_op, name=op.name + "_grad"))
    return [None if g is None else next(reduced) for g in grads]


@register(ALLREDUCE_OP_TYPE, kind="stateful", grad=_allreduce_grad,
          fuse_inputs=plan_bucketed_allreduce)
def _allreduce_kernel(ctx: Any, op: Operation, *arrays: np.ndarray) -> Any:
    """The reduced arrays: a tuple, or the array itself for an op of one output (the
    session stores a single-output op's result as is)."""
    out = allreduce(list(arrays), ReduceOp(op.attrs["op"]))
    return out[0] if len(out) == 1 else tuple(out)


def allreduce_tensors(tensors: Sequence[Any], op: ReduceOp = ReduceOp.MEAN,
                      name: str | None = None) -> list[Tensor]:
    """One graph op that allreduces all ``tensors`` together (fused) when run.

    Args:
        tensors: tensors (or variables, arrays) of numeric dtypes, same on every rank.
        op: the reduction.
        name: the op's name (default ``"MpiAllreduce"``).

    Returns:
        The reduced tensors, same dtypes and shapes, in order.

    Raises:
        ValueError: no tensors. TypeError: ``op`` is not a ReduceOp, or a tensor's dtype
            cannot be reduced with it.
    """
    if not isinstance(op, ReduceOp):
        raise CkptsyncTypeError(f"allreduce_tensors: op must be a ReduceOp, got {op!r}.")
    ts = [convert_to_tensor(t) for t in tensors]
    if not ts:
        raise CkptsyncValueError("allreduce_tensors: no tensors given.")
    for t in ts:
        if not reducible(np.dtype(t.dtype.np).kind, op):
            raise CkptsyncTypeError(
                f"allreduce_tensors: {t.name} of dtype {t.dtype.name} cannot be reduced with "
                f"{op.name} (bool: only MAX/MIN; complex: not MAX/MIN).")
    graph = ts[0].graph
    out = graph.create_op(ALLREDUCE_OP_TYPE, ts, [t.dtype for t in ts], [t.shape for t in ts],
                          name=name or ALLREDUCE_OP_TYPE, attrs={"op": op.value})
    return list(out.outputs)


# ------------------------------------------------------------------ broadcast
@register("BroadcastGlobalVariables", kind="stateful",
          writes=lambda op: op.attrs["variables"])
def _broadcast_kernel(ctx: Any, op: Operation) -> None:
    names: list[str] = op.attrs["variables"]
    root: int = op.attrs["root_rank"]
    if size() == 1 or not names:
        return None
    _check_same(op.attrs["signature"], f"broadcast_global_variables op '{op.name}'")
    values = broadcast([ctx.read(n) for n in names], root)
    if rank() != root:
        for n, v in zip(names, values):
            ctx.write(n, v)
    return None


def broadcast_global_variables(root_rank: int, graph: Graph | None = None) -> Operation:
    """An op that sets every GLOBAL_VARIABLE to ``root_rank``'s value, as Horovod's
    ``hvd.broadcast_global_variables``: graph mode, one grouped op, fused into few MPI
    calls. Run it once after the session is created (and after any restore), e.g. with
    :class:`BroadcastGlobalVariablesHook`. Each run first checks that every rank has the
    same variables (names, shapes, dtypes).

    Raises:
        ValueError: ``root_rank`` is out of range.

    Example:
        >>> import ckptsync as cs
        >>> g = cs.Graph()
        >>> with g.as_default():
        ...     v = cs.Variable([1.0, 2.0], name="v")
        ...     bcast = cs.distributed.broadcast_global_variables(0)
        >>> with cs.Session(graph=g) as sess:
        ...     sess.run(v.initializer)
        ...     sess.run(bcast)
        ...     sess.run(v).tolist()
        [1.0, 2.0]
    """
    n = size()
    if not 0 <= root_rank < n:
        raise CkptsyncValueError(
            f"broadcast_global_variables: root_rank must be in [0, {n}), got {root_rank}.")
    graph = graph or get_default_graph()
    variables = graph.get_collection(GraphKeys.GLOBAL_VARIABLES)
    sig = [_var_sig(v) for v in variables]
    return graph.create_op(
        "BroadcastGlobalVariables", [], [], [], name="broadcast_global_variables",
        attrs={"variables": [v.op.name for v in variables], "root_rank": root_rank,
               "signature": sig})


# ------------------------------------------------------------------ graph check
def _var_sig(v: Any) -> tuple[str, str, str]:
    return (v.op.name, str(v.shape.as_list() if v.shape.dims is not None else None),
            v.dtype.name)


def graph_signature(graph: Graph) -> list[tuple[str, str, str]]:
    """What must match across ranks: every global variable's (name, shape, dtype), and
    every fused allreduce op's name and tensor shapes/dtypes, in creation order."""
    sig = [_var_sig(v) for v in graph.get_collection(GraphKeys.GLOBAL_VARIABLES)]
    for op in graph.get_operations():
        if op.type == ALLREDUCE_OP_TYPE:
            sig.append((op.name, str([t.shape.as_list() if t.shape.dims is not None else None
                                      for t in op.inputs]),
                        ",".join(t.dtype.name for t in op.inputs) + "/" + op.attrs["op"]))
    return sig


def check_same_graph(graph: Graph) -> None:
    """Verifies that every rank built the same graph (a collective: all ranks call it).

    Raises:
        FailedPreconditionError: the ranks differ; the message names the first rank that
            differs from rank 0 and the first differing variable or allreduce op.
    """
    _check_same(graph_signature(graph), "the graph")


def _check_same(sig: list[tuple[str, str, str]], what: str) -> None:
    if size() == 1:
        return
    digest = hashlib.sha256(repr(sig).encode()).hexdigest()
    digests = allgather_object(digest)
    if len(set(digests)) == 1:
        return
    sigs = allgather_object(sig)
    other = next(r for r, d in enumerate(digests) if d != digests[0])
    raise FailedPreconditionError(None, None, _describe(sigs[0], sigs[other], other, what))


def _describe(a: list[tuple[str, str, str]], b: list[tuple[str, str, str]], other: int,
              what: str) -> str:
    head = f"Ranks built different graphs: {what} on rank {other} differs from rank 0"
    da, db = {s[0]: s for s in a}, {s[0]: s for s in b}
    for name, s in da.items():
        if name not in db:
            return f"{head}: '{name}' exists only on rank 0. Run the same model on every rank."
        t = db[name]
        if s != t:
            return (f"{head}: '{name}' has shape {s[1]}, dtype {s[2]} on rank 0 but shape "
                    f"{t[1]}, dtype {t[2]} on rank {other}. Run the same model on every rank.")
    for name in db:
        if name not in da:
            return (f"{head}: '{name}' exists only on rank {other}. Run the same model on "
                    "every rank.")
    return f"{head}: the same variables in another order. Run the same model on every rank."

