"""Symbolic reverse-mode differentiation, as ``tf.gradients``.

Walks the ops between ``xs`` and ``ys`` in reverse creation order (a topological order:
an op's inputs always exist before it), sums the gradients arriving at each tensor, and
calls each op's registered gradient function. The per-op rules live beside the kernels in
:mod:`ckptsync.ops`; this module only walks the graph.

Sparse gradients, as TF: gradients that are all ``IndexedSlices`` add up to one
``IndexedSlices`` (values and indices concatenated); a mix with dense ones adds up dense
(``add_n``). An ``IndexedSlices`` reaching an op whose gradient function needs a dense
tensor is converted (``convert_to_tensor``); only ``Identity`` passes it on as it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import dtypes as _dtypes
from .errors import CkptsyncTypeError, CkptsyncValueError
from .graph import Operation, Tensor
from .indexed_slices import IndexedSlices
from .ops.array_ops import concat, constant, convert_to_tensor, ones_like
from .ops.math_ops import add_n, cast
from .ops.registry import get_op_def

__all__ = ["gradients"]

# Op types whose gradient function takes an IndexedSlices as it is (TF's Identity).
_SPARSE_THROUGH = frozenset({"Identity"})


def _as_tensor(x: Any) -> Tensor:
    if hasattr(x, "_as_graph_element") and not isinstance(x, Tensor):
        x = x._as_graph_element()
    if not isinstance(x, Tensor):
        raise CkptsyncTypeError(f"gradients: expected a Tensor or Variable, got {x!r}.")
    return x


def _as_list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def gradients(ys: Any, xs: Any, grad_ys: Any = None, name: str = "gradients",
              stop_gradients: Any = None, colocate_gradients_with_ops: bool = False,
              gate_gradients: bool = False, aggregation_method: Any = None) -> list[Any]:
    """Symbolic ``sum(d ys / d x)`` for each ``x`` in ``xs``, as ``tf.gradients``.

    Args:
        ys: a tensor or list of tensors to differentiate.
        xs: a tensor/variable or list of them.
        grad_ys: initial gradients, one per ``y`` (default ones of ``y``'s shape).
        stop_gradients: tensors whose ops are treated as constants, as TF: no gradient
            flows back through the op of a stop tensor (through none of its outputs),
            while the gradient *at* the tensor is still computed (a stop tensor that is
            also in ``xs`` gets its gradient); other paths are unaffected.

    Returns:
        One tensor (or ``IndexedSlices``, from ``gather``/``embedding_lookup``) per ``x``,
        or ``None`` where ``x`` does not affect ``ys``. Gradients reaching a tensor along
        several paths are summed.

    Raises:
        LookupError: an op on the path has no registered gradient.
        ValueError: ``grad_ys`` has a different length than ``ys``.
    """
    y_list = [_as_tensor(y) for y in _as_list(ys)]
    x_list = [_as_tensor(x) for x in _as_list(xs)]
    stop_ops = {id(_as_tensor(t).op) for t in _as_list(stop_gradients)} \
        if stop_gradients is not None else set()
    gy_list = _as_list(grad_ys) if grad_ys is not None else [None] * len(y_list)
    if len(gy_list) != len(y_list):
        raise CkptsyncValueError(
            f"gradients: passed {len(gy_list)} grad_ys for {len(y_list)} ys.")
    if not y_list:
        return [None] * len(x_list)
    graph = y_list[0].graph

    # Ops that lie on a path from some x to some y (TF's between ops; stop ops included).
    reach_back: dict[int, Operation] = {}
    stack = [y.op for y in y_list]
    while stack:
        op = stack.pop()
        if id(op) in reach_back:
            continue
        reach_back[id(op)] = op
        stack.extend(t.op for t in op.inputs)
    between: list[Operation] = []
    forward_ok: set[int] = {id(x) for x in x_list}  # tensor ids influenced by xs
    for op in sorted(reach_back.values(), key=lambda o: o._id):
        if any(id(t) in forward_ok for t in op.inputs):
            between.append(op)
            forward_ok.update(id(t) for t in op.outputs)

    pending: dict[int, list[Any]] = {}
    with graph.name_scope(name):
        for y, gy in zip(y_list, gy_list):
            if gy is not None:
                g0 = convert_to_tensor(gy, dtype=y.dtype)
            elif y.shape.is_fully_defined():  # a constant: no kernel runs for it
                g0 = constant(np.ones(y.shape.as_list(), y.dtype.np), name="grad_ys")
            else:
                g0 = ones_like(y)
            pending.setdefault(id(y), []).append(g0)
        for op in reversed(between):
            if id(op) in stop_ops:
                continue
            out_grads = [_aggregate(pending.get(id(t))) for t in op.outputs]
            if all(g is None for g in out_grads):
                continue
            op_def = get_op_def(op.type)
            if op_def.gradient is None:
                if op_def.not_differentiable:
                    continue
                raise LookupError(
                    f"No gradient defined for operation '{op.name}' (op type: {op.type}).")
            with graph.name_scope(op.name + "_grad"):
                if op.type not in _SPARSE_THROUGH:
                    out_grads = [convert_to_tensor(g) if isinstance(g, IndexedSlices) else g
                                 for g in out_grads]
                in_grads = op_def.gradient(op, *out_grads)
            if len(in_grads) != len(op.inputs):
                raise CkptsyncValueError(
                    f"Gradient function for {op.type} returned {len(in_grads)} gradients for "
                    f"{len(op.inputs)} inputs.")
            for t, gi in zip(op.inputs, in_grads):
                if gi is None or not (t.dtype.is_floating or t.dtype.is_complex):
                    continue
                pending.setdefault(id(t), []).append(gi)
        return [_aggregate(pending.get(id(x))) for x in x_list]


def _aggregate(grads: list[Any] | None) -> Any:
    """The sum of the gradients reaching one tensor, as TF's ``_AggregatedGrads``: dense
    ones with ``add_n`` (IndexedSlices among them converted), all-``IndexedSlices`` ones
    concatenated (indices as int64 where their dtypes differ)."""
    if not grads:
        return None
    if len(grads) == 1:
        return grads[0]
    if not all(isinstance(g, IndexedSlices) for g in grads):
        return add_n([convert_to_tensor(g) if isinstance(g, IndexedSlices) else g
                      for g in grads])
    idx_dtypes = {g.indices.dtype for g in grads}
    indices = [g.indices if len(idx_dtypes) == 1 else cast(g.indices, _dtypes.int64)
               for g in grads]
    return IndexedSlices(concat([g.values for g in grads], 0), concat(indices, 0),
                         grads[0].dense_shape)
