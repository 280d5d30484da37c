"""``while_loop`` as TF1: ``cond`` and ``body`` traced into sub-graphs
(:mod:`.func_graph`), one ``While`` op that runs them until ``cond`` is False (the trip
count is decided at run time), and ``WhileGrad`` for its gradient.

The forward keeps, per iteration, the values of the body's tensors that the gradient
needs (``SubGraph.saved``, filled in when the gradient is built); ``WhileGrad`` runs the
body's gradient sub-graph once per iteration in reverse from them, summing the gradients
of loop-invariant captures (tensors and variables used inside the body). The user-visible
results are ``Identity`` ops named as TF1's (``while/Exit:0``, ``while/Exit_1:0``, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError, InvalidArgumentError
from ..graph import Operation, Tensor, get_default_graph
from ..tensor_shape import TensorShape
from .array_ops import convert_to_tensor, identity, zeros_like
from .func_graph import (
    BLOB,
    FuncContext,
    SubGraph,
    active,
    assert_same_structure,
    dense,
    flatten,
    pack_as,
    zeros_value,
)
from .registry import make_op, register

__all__ = ["while_loop"]


def _fits(shape: TensorShape, inv: TensorShape) -> bool:
    """``shape`` is at least as specific as ``inv`` (TF's ``_ShapeLessThanOrEqual``)."""
    if inv.dims is None:
        return True
    if shape.dims is None or len(shape.dims) != len(inv.dims):
        return False
    return all(b is None or a == b for a, b in zip(shape.dims, inv.dims))


class WhileSpec:
    """A ``While`` op's sub-graphs and, per sub-graph, the input (after the loop
    variables) of each capture, then of each reference capture."""

    def __init__(self, cond: SubGraph, body: SubGraph, n_vars: int, cond_index: list[int],
                 body_index: list[int], has_max: bool, back_prop: bool,
                 shapes: list[TensorShape]):
        self.cond, self.body, self.n_vars = cond, body, n_vars
        self.cond_index, self.body_index = cond_index, body_index
        self.has_max, self.back_prop, self.shapes = has_max, back_prop, shapes


def while_loop(cond: Callable[..., Any], body: Callable[..., Any], loop_vars: Any,
               shape_invariants: Any = None, parallel_iterations: int = 10,
               back_prop: bool = True, swap_memory: bool = False, name: str | None = None,
               maximum_iterations: Any = None, return_same_structure: bool = False) -> Any:
    """Repeats ``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)``, as TF1's
    ``tf.while_loop``.

    Args:
        cond: returns a scalar bool tensor from the loop variables.
        body: returns the next loop variables, in the structure of ``loop_vars``.
        loop_vars: a (nested) list/tuple/namedtuple/dict of tensors (or values).
        shape_invariants: per loop variable, a ``TensorShape`` it keeps across
            iterations (default: its initial shape); the outputs have these shapes.
        maximum_iterations: an int (or int32 scalar tensor) bounding the trip count.
        back_prop: False: no gradient through the loop (nothing is kept per iteration).
        parallel_iterations, swap_memory: accepted for TF1 compatibility; ignored.
        return_same_structure: False (TF1's default) returns a single loop variable as
            itself rather than a one-element list.

    Returns:
        The loop variables after the last iteration.

    Raises:
        TypeError: ``cond``/``body`` not callable; ``cond`` not bool; the body changes a
            loop variable's dtype.
        ValueError: no loop variables; the body returns another structure; a loop
            variable's shape changes beyond its shape invariant (as TF1's message).
    """
    if not callable(cond):
        raise CkptsyncTypeError("cond must be callable.")
    if not callable(body):
        raise CkptsyncTypeError("body must be callable.")
    if parallel_iterations < 1:
        raise CkptsyncTypeError("parallel_iterations must be a positive integer.")
    single_var = not isinstance(loop_vars, (list, tuple))
    lv = [loop_vars] if single_var else loop_vars
    g = get_default_graph()
    with g.name_scope(name or "while"):
        init = [x if isinstance(x, Tensor) else convert_to_tensor(x) for x in flatten(lv)]
        if not init:
            raise CkptsyncValueError("No loop variables provided")
        if shape_invariants is None:
            shapes = [t.shape for t in init]
        else:
            inv = [shape_invariants] if single_var else shape_invariants
            flat_inv = [TensorShape(s) for s in _flatten_shapes(inv)]
            if len(flat_inv) != len(init):
                raise CkptsyncValueError(
                    "shape_invariants must have the same structure as loop_vars.")
            for t, s in zip(init, flat_inv):
                if not _fits(t.shape, s):
                    raise CkptsyncValueError(
                        f"The shape invariant specified for {t.name} is not compatible with "
                        "the initial shape of the loop variable. It enters the loop with shape "
                        f"{t.shape}, but the specified shape invariant is {s}.")
            shapes = flat_inv
        max_it = None
        if maximum_iterations is not None:
            max_it = convert_to_tensor(maximum_iterations, dtype=_dtypes.int32
                                       if not isinstance(maximum_iterations, Tensor) else None)
            if not max_it.dtype.is_integer or (max_it.shape.dims is not None and len(max_it.shape.dims)):
                raise CkptsyncValueError("maximum_iterations must be a scalar integer tensor.")

        cctx = FuncContext(g, arg_name="Identity")
        with active(cctx):
            cargs = [cctx.arg(t.dtype, s) for t, s in zip(init, shapes)]
            c = cond(*pack_as(lv, cargs))
            c = c if isinstance(c, Tensor) else convert_to_tensor(c)
            if c.dtype != _dtypes.bool:
                raise CkptsyncTypeError(f"while_loop: cond must return a bool tensor, got "
                                        f"{c.dtype.name}.")
            cout = cctx.capture(c)
        bctx = FuncContext(g, arg_name="Enter")
        with active(bctx):
            bargs = [bctx.arg(t.dtype, s) for t, s in zip(init, shapes)]
            res = body(*pack_as(lv, bargs))
            if not isinstance(res, (list, tuple, dict)):
                res = [res]
            assert_same_structure(list(lv), list(res))
            outs = [bctx.capture(x if isinstance(x, Tensor) else convert_to_tensor(x))
                    for x in flatten(res)]
        for t, o, s in zip(init, outs, shapes):
            if o.dtype != t.dtype:
                raise CkptsyncTypeError(
                    f"Loop variable {t.name} enters the loop with type {t.dtype.name}, but "
                    f"has type {o.dtype.name} after one iteration.")
            if not _fits(o.shape, s):
                raise CkptsyncValueError(
                    f"Input tensor '{t.name}' enters the loop with shape {s}, but has shape "
                    f"{o.shape} after one iteration. To allow the shape to vary across "
                    "iterations, use the `shape_invariants` argument of tf.while_loop to "
                    "specify a less-specific shape.")
        caps: list[Tensor] = []
        pos: dict[int, int] = {}
        index = []
        control: list[Operation] = []
        for ctx in (cctx, bctx):
            idx = []
            for outer in [*(o for o, _ in ctx.captures), *ctx.ref_captures]:
                if id(outer) not in pos:
                    pos[id(outer)] = len(caps)
                    caps.append(outer)
                idx.append(pos[id(outer)])
            index.append(idx)
            control.extend(ctx.control)
        spec = WhileSpec(SubGraph(cctx, cargs, [cout]), SubGraph(bctx, bargs, outs), len(init),
                         index[0], index[1], max_it is not None, back_prop, shapes)
        op = make_op("While", [*init, *caps, *([max_it] if max_it is not None else [])],
                     [*(t.dtype for t in init), BLOB], [*shapes, None], name="While",
                     attrs={"spec": spec}, control_inputs=control)
        start = 1 if max_it is not None else 0  # TF1 counts the iterations as loop var 0
        exits = [identity(o, name="Exit" if k + start == 0 else f"Exit_{k + start}")
                 for k, o in enumerate(op.outputs[:-1])]
    packed = pack_as(res, exits)
    if single_var or (not return_same_structure and len(exits) == 1):
        return exits[0] if len(exits) == 1 else packed
    return packed


def _flatten_shapes(inv: Any) -> list[Any]:
    if isinstance(inv, TensorShape) or inv is None:
        return [inv]
    if isinstance(inv, dict):
        return [s for k in sorted(inv) for s in _flatten_shapes(inv[k])]
    if isinstance(inv, (list, tuple)) and not all(
            d is None or isinstance(d, (int, np.integer)) for d in inv):
        return [s for x in inv for s in _flatten_shapes(x)]
    return [inv]


@register("While", kind="stateful", grad=lambda op, *g: _while_grad(op, *g),
          subgraphs=lambda op: (op.attrs["spec"].cond, op.attrs["spec"].body))
def _while_kernel(ctx: Any, op: Operation, *ins: Any) -> tuple[Any, ...]:
    spec: WhileSpec = op.attrs["spec"]
    n = spec.n_vars
    vals = list(ins[:n])
    caps = ins[n:len(ins) - (1 if spec.has_max else 0)]
    ccaps = [caps[j] for j in spec.cond_index[:len(spec.cond.ctx.captures)]]
    bcaps = [caps[j] for j in spec.body_index[:len(spec.body.ctx.captures)]]
    limit = int(np.asarray(ins[-1])) if spec.has_max else None
    keep = spec.back_prop and bool(spec.body.saved)
    hist: list[list[Any]] = []
    it = 0
    while limit is None or it < limit:
        (p,), _ = spec.cond.run(ctx, [*vals, *ccaps])
        p = np.asarray(p)
        if p.shape != ():
            raise InvalidArgumentError(
                None, op, f"while_loop '{op.name}': cond must return a scalar, got shape "
                f"{p.shape}.")
        if not p:
            break
        vals, saved = spec.body.run(ctx, [*vals, *bcaps])
        hist.append(saved if keep else [])
        it += 1
    return (*vals, (hist, caps, vals))


class WhileGradSpec:
    """A ``WhileGrad`` op's body-gradient sub-graph and how to feed it."""

    def __init__(self, sub: SubGraph, diff: list[int], present: list[bool], saved: list[int],
                 cap_targets: list[int]):
        self.sub, self.diff, self.present = sub, diff, present
        self.saved, self.cap_targets = saved, cap_targets


def _while_grad(op: Operation, *grads: Any) -> list[Any]:
    from ..gradients import gradients  # gradients builds on the ops

    spec: WhileSpec = op.attrs["spec"]
    n = spec.n_vars
    none: list[Any] = [None] * len(op.inputs)
    diff = [k for k in range(n) if op.outputs[k].dtype.is_floating]
    if not spec.back_prop or not diff or all(grads[k] is None for k in diff):
        return none
    body = spec.body
    bcaps = [(i, inner) for i, inner in enumerate(
             [*(inner for _, inner in body.ctx.captures), *body.ctx.ref_captures])
             if inner.dtype.is_floating]
    gctx = FuncContext(op.graph, forward=body.ctx, arg_name="grad")
    with active(gctx):
        gargs = [gctx.arg(op.outputs[k].dtype, spec.shapes[k]) for k in diff]
        xs = [body.args[k] for k in diff] + [inner for _, inner in bcaps]
        dxs = gradients([body.outputs[k] for k in diff], xs, grad_ys=gargs)
        outs = []
        for k, d in zip(diff, dxs[:len(diff)]):
            d = dense(d)
            outs.append(gctx.capture(d if d is not None else zeros_like(body.args[k])))
        cap_targets = []
        for (i, _), d in zip(bcaps, dxs[len(diff):]):
            d = dense(d)
            if d is not None:
                cap_targets.append(spec.body_index[i])
                outs.append(gctx.capture(d))
    sub = SubGraph(gctx, gargs, outs)
    present = [grads[k] is not None for k in diff]
    gspec = WhileGradSpec(sub, diff, present, [body.save(t) for t, _ in gctx.saved], cap_targets)
    ext = [outer for outer, _ in gctx.captures]
    n_caps = len(op.inputs) - n - (1 if spec.has_max else 0)
    cap_ins = op.inputs[n:n + n_caps]
    gop = make_op("WhileGrad", [op.outputs[-1], *(dense(grads[k]) for k in diff if
                                                  grads[k] is not None), *ext],
                  [*(op.inputs[k].dtype for k in diff), *(cap_ins[j].dtype for j in cap_targets)],
                  [*(op.inputs[k].shape for k in diff), *(cap_ins[j].shape for j in cap_targets)],
                  name="WhileGrad", attrs={"spec": gspec}, control_inputs=gctx.control)
    result = none
    for k, o in zip(diff, gop.outputs):
        result[k] = o
    for j, o in zip(cap_targets, gop.outputs[len(diff):]):
        result[n + j] = o
    return result


@register("WhileGrad", kind="stateful", subgraphs=lambda op: (op.attrs["spec"].sub,))
def _while_grad_kernel(ctx: Any, op: Operation, blob: Any, *ins: Any) -> Any:
    gs: WhileGradSpec = op.attrs["spec"]
    hist, caps, final = blob
    n_present = sum(gs.present)
    it = iter(ins[:n_present])
    g = [next(it) if p else zeros_value(final[k]) for k, p in zip(gs.diff, gs.present)]
    ext = list(ins[n_present:])
    nd = len(gs.diff)
    acc: list[Any] = [None] * len(gs.cap_targets)
    for saved in reversed(hist):
        outs, _ = gs.sub.run(ctx, [*g, *ext, *(saved[s] for s in gs.saved)])
        g = outs[:nd]
        for c, v in enumerate(outs[nd:]):
            acc[c] = v if acc[c] is None else acc[c] + v
    for c, j in enumerate(gs.cap_targets):
        if acc[c] is None:
            acc[c] = zeros_value(caps[j])
    res = (*g, *acc)
    return res if len(res) != 1 else res[0]  # a one-output kernel returns the array


_ = identity
