"""Control flow: ``cond`` and ``case`` as TF1 (``while_loop`` lives in :mod:`.while_ops`).

``cond(pred, true_fn, false_fn)`` traces each branch into a sub-graph
(:mod:`.func_graph`) and adds one ``If`` op whose inputs are ``pred`` and the tensors
the branches capture from outside. Its kernel runs only the taken branch's ops, inside
the same run (a read in the branch sees the run's earlier assignments of a variable, and
reads after the ``If`` op see the branch's, see :mod:`ckptsync.session.ordering`). The
user-visible results are ``Identity`` ops named as TF1's
(``cond/Merge:0``, ``cond/Merge_1:0``, ...).

Gradients: ``If``'s gradient is a ``CondGrad`` op that runs the gradient of the branch
taken in the forward (from the forward's saved values) and gives zeros for the inputs
only the other branch uses, as TF1.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError, InvalidArgumentError
from ..graph import Operation, Tensor, get_default_graph
from .array_ops import convert_to_tensor, identity
from .func_graph import (
    BLOB,
    FuncContext,
    SubGraph,
    active,
    assert_same_structure,
    dense,
    flatten,
    merge_shapes,
    pack_as,
    zeros_value,
)
from .registry import make_op, register

__all__ = ["cond", "case"]
# Names also (or only) exported as ``cs.nn.<name>``.
NN_EXPORTS: tuple[str, ...] = ()


def _as_output(x: Any, ctx: FuncContext, pred: Tensor) -> Tensor:
    if isinstance(x, Operation):  # TF1: an op's result is the predicate, after the op
        with ctx.graph.control_dependencies([x]):
            return identity(ctx.capture(pred))
    return ctx.capture(x if isinstance(x, Tensor) else convert_to_tensor(x))


def trace_branch(fn: Callable[[], Any], which: str, strict: bool, pred: Tensor
                 ) -> tuple[SubGraph, Any]:
    """``fn()`` traced into a :class:`SubGraph` with no args; and its result structure."""
    g = pred.graph
    ctx = FuncContext(g, arg_name="Switch")
    with active(ctx):
        res = fn()
        if res is None:
            raise CkptsyncValueError(f"'{which}' must have a return value.")
        if not strict and isinstance(res, (list, tuple)) and len(res) == 1:
            res = res[0]
        flat = [_as_output(x, ctx, pred) for x in flatten(res)]
    return SubGraph(ctx, [], flat), res


class CondSpec:
    """An ``If`` op's branches and, per branch, the ``If`` input (after ``pred``) of
    each capture, then of each reference capture."""

    def __init__(self, branches: list[SubGraph], index: list[list[int]]):
        self.branches = branches
        self.index = index


def cond(pred: Any, true_fn: Callable[[], Any] | None = None,
         false_fn: Callable[[], Any] | None = None, strict: bool = False,
         name: str | None = None, fn1: Any = None, fn2: Any = None) -> Any:
    """``true_fn()`` if ``pred`` else ``false_fn()``, as TF1's ``tf.cond``: only the
    taken branch's ops run.

    Args:
        pred: a scalar ``bool`` tensor (or Python bool).
        true_fn, false_fn: callables returning the same nested structure (tuples, lists,
            dicts of tensors) with the same dtypes; static shapes may differ (the
            result's shape keeps what both agree on).
        strict: when False (TF1's default), a single-element list/tuple result is
            returned as its element.

    Returns:
        The taken branch's results, in ``true_fn``'s structure.

    Raises:
        TypeError: a function is not callable; ``pred`` is not bool.
        ValueError: ``pred`` is not a scalar; the branches return different structures
            or dtypes; a branch returns None.
    """
    true_fn = true_fn if true_fn is not None else fn1
    false_fn = false_fn if false_fn is not None else fn2
    if not callable(true_fn):
        raise CkptsyncTypeError("true_fn must be callable.")
    if not callable(false_fn):
        raise CkptsyncTypeError("false_fn must be callable.")
    g = pred.graph if isinstance(pred, Tensor) else get_default_graph()
    with g.name_scope(name or "cond"):
        p = convert_to_tensor(pred)
        if p.dtype != _dtypes.bool:
            raise CkptsyncTypeError(f"Input 'pred' of 'Switch' Op has type {p.dtype.name} that "
                                    "does not match expected type of bool.")
        if p.shape.dims is not None and len(p.shape.dims) != 0:
            raise CkptsyncValueError(f"cond: pred must be a scalar, got shape {p.shape}.")
        t_sub, t_res = trace_branch(true_fn, "true_fn", strict, p)
        f_sub, f_res = trace_branch(false_fn, "false_fn", strict, p)
        assert_same_structure(t_res, f_res)
        for a, b in zip(t_sub.outputs, f_sub.outputs):
            if a.dtype != b.dtype:
                raise CkptsyncValueError(
                    "Outputs of 'true_fn' and 'false_fn' must have the same type(s). Received "
                    f"{a.dtype.name} from 'true_fn' and {b.dtype.name} from 'false_fn'.")
        outs = call_branches(p, [t_sub, f_sub])
    return pack_as(t_res, outs)


def call_branches(p: Tensor, branches: list[SubGraph]) -> list[Tensor]:
    """Adds the ``If`` op running ``branches[0]`` when ``p`` else ``branches[1]``; its
    user-visible outputs (``Merge``, ``Merge_1``, ...)."""
    inputs: list[Tensor] = []
    pos: dict[int, int] = {}
    index: list[list[int]] = []
    control: list[Operation] = []
    for sub in branches:
        idx = []
        for outer in [*(o for o, _ in sub.ctx.captures), *sub.ctx.ref_captures]:
            if id(outer) not in pos:
                pos[id(outer)] = len(inputs)
                inputs.append(outer)
            idx.append(pos[id(outer)])
        index.append(idx)
        control.extend(c for c in sub.ctx.control if all(c is not o for o in control))
    t, f = branches
    dts = [a.dtype for a in t.outputs]
    shapes = [merge_shapes(a.shape, b.shape) for a, b in zip(t.outputs, f.outputs)]
    op = make_op("If", [p, *inputs], [*dts, BLOB], [*shapes, None], name="If",
                 attrs={"spec": CondSpec(branches, index)}, control_inputs=control)
    return [identity(o, name="Merge") for o in op.outputs[:-1]]


@register("If", kind="stateful", grad=lambda op, *g: _if_grad(op, *g),
          subgraphs=lambda op: op.attrs["spec"].branches)
def _if_kernel(ctx: Any, op: Operation, pred: Any, *ins: Any) -> tuple[Any, ...]:
    spec: CondSpec = op.attrs["spec"]
    p = np.asarray(pred)
    if p.shape != ():
        raise InvalidArgumentError(
            None, op, f"The predicate of cond '{op.name}' must be a scalar; got shape {p.shape}.")
    b = 0 if p else 1
    sub = spec.branches[b]
    outs, saved = sub.run(ctx, [ins[j] for j in spec.index[b][:len(sub.ctx.captures)]])
    return (*outs, (b, ins, saved))


class CondGradSpec:
    """A ``CondGrad`` op's per-branch gradient sub-graphs and how to feed them."""

    def __init__(self) -> None:
        self.subs: list[SubGraph] = []
        self.ext: list[list[int]] = []  # per branch: CondGrad input (after grads) per capture
        self.saved: list[list[int]] = []  # per branch: forward saved index per saved arg
        self.where: list[dict[int, int]] = []  # per branch: If input -> sub-graph output
        self.targets: list[int] = []  # If inputs (after pred) that get a gradient
        self.n_grads = 0


def _if_grad(op: Operation, *grads: Any) -> list[Any]:
    from ..gradients import gradients  # gradients builds on the ops

    spec: CondSpec = op.attrs["spec"]
    n = len(spec.branches[0].outputs)
    keep = [k for k in range(n) if grads[k] is not None and op.outputs[k].dtype.is_floating]
    if not keep:
        return [None] * len(op.inputs)
    gs = [dense(grads[k]) for k in keep]
    gspec = CondGradSpec()
    gspec.n_grads = len(keep)
    ext_inputs: list[Tensor] = []
    ext_pos: dict[int, int] = {}
    control: list[Operation] = []
    for b, sub in enumerate(spec.branches):
        gctx = FuncContext(op.graph, forward=sub.ctx, arg_name="grad")
        where: dict[int, int] = {}
        outs: list[Tensor] = []
        with active(gctx):
            gargs = [gctx.arg(op.outputs[k].dtype, op.outputs[k].shape) for k in keep]
            caps = [(i, inner) for i, inner in enumerate(
                        [*(inner for _, inner in sub.ctx.captures), *sub.ctx.ref_captures])
                    if inner.dtype.is_floating or inner.dtype.is_complex]
            dxs = gradients([sub.outputs[k] for k in keep], [inner for _, inner in caps],
                            grad_ys=gargs) if caps else []
            for (i, _), d in zip(caps, dxs):
                d = dense(d)
                if d is None:
                    continue
                where[spec.index[b][i]] = len(outs)
                outs.append(gctx.capture(d))
        gsub = SubGraph(gctx, gargs, outs)
        ext = []
        for outer, _ in gctx.captures:
            if id(outer) not in ext_pos:
                ext_pos[id(outer)] = len(ext_inputs)
                ext_inputs.append(outer)
            ext.append(ext_pos[id(outer)])
        control.extend(gctx.control)
        gspec.subs.append(gsub)
        gspec.ext.append(ext)
        gspec.saved.append([sub.save(t) for t, _ in gctx.saved])
        gspec.where.append(where)
    gspec.targets = sorted({j for w in gspec.where for j in w})
    if not gspec.targets:
        return [None] * len(op.inputs)
    fwd_ins = op.inputs[1:]
    gop = make_op("CondGrad", [op.outputs[-1], *gs, *ext_inputs],
                  [fwd_ins[j].dtype for j in gspec.targets],
                  [fwd_ins[j].shape for j in gspec.targets], name="CondGrad",
                  attrs={"spec": gspec}, control_inputs=control)
    result: list[Any] = [None] * len(op.inputs)
    for o, j in zip(gop.outputs, gspec.targets):
        result[1 + j] = o
    return result


@register("CondGrad", kind="stateful", subgraphs=lambda op: op.attrs["spec"].subs)
def _cond_grad_kernel(ctx: Any, op: Operation, blob: Any, *ins: Any) -> Any:
    gspec: CondGradSpec = op.attrs["spec"]
    b, fwd_ins, saved = blob
    ng = gspec.n_grads
    feeds = [*ins[:ng], *[ins[ng + e] for e in gspec.ext[b]], *[saved[s] for s in gspec.saved[b]]]
    outs, _ = gspec.subs[b].run(ctx, feeds)
    where = gspec.where[b]
    res = []
    for j in gspec.targets:
        k = where.get(j)
        res.append(outs[k] if k is not None else zeros_value(fwd_ins[j]))
    return tuple(res) if len(res) != 1 else res[0]  # a one-output kernel returns the array


# --------------------------------------------------------------------- case
@register("CaseAssert", kind="stateful")
def _case_assert_kernel(ctx: Any, op: Operation, *preds: Any) -> None:
    vals = [bool(np.asarray(p)) for p in preds]
    n, msg = op.attrs["n"], op.attrs["msg"]
    if n < 0:  # "the (last) predicate must hold"
        if not vals[-1]:
            raise InvalidArgumentError(None, op, f"assertion failed: [{msg}] "
                                                 f"[{' '.join(str(int(v)) for v in vals)}]")
        return None
    if sum(vals) > n:
        names = ", ".join(t.name for t in op.inputs)
        raise InvalidArgumentError(
            None, op, f"assertion failed: [{msg}: more than {n} conditions ({names}) "
            f"evaluated as True:] [{' '.join(str(int(v)) for v in vals)}]")
    return None


def _assert(preds: list[Tensor], n: int, msg: str) -> Operation:
    g = preds[0].graph if preds else get_default_graph()
    if not preds:
        return g.create_op("NoOp", [], [], [], name="Assert")
    return make_op("CaseAssert", preds, [], [], name="Assert", attrs={"n": n, "msg": msg})


def case(pred_fn_pairs: Any, default: Callable[[], Any] | None = None, exclusive: bool = False,
         strict: bool = False, name: str = "case") -> Any:
    """The result of the first ``fn`` whose ``pred`` is True, else ``default()``, as
    TF1's ``tf.case`` (nested ``cond``\\ s; only the chosen function's ops run).

    Args:
        pred_fn_pairs: a list of ``(pred, fn)`` pairs (or a dict ``{pred: fn}``): scalar
            bool tensors and callables returning the same structure.
        default: called when no ``pred`` is True. Without it the last ``fn`` is the
            default, and a run where no ``pred`` is True raises ``InvalidArgumentError``
            ("None of conditions evaluated as True").
        exclusive: check at run time that at most one ``pred`` is True (with no
            ``default``, among all but the last, as TF1); else ``InvalidArgumentError``.

    Raises:
        TypeError: ``pred_fn_pairs`` is not a list/tuple/dict of pairs, a ``fn`` or
            ``default`` is not callable.
    """
    if not isinstance(pred_fn_pairs, (list, tuple, Mapping)):
        raise CkptsyncTypeError("'pred_fn_pairs' must be a list, tuple, or dict. "
                                f"Received: {type(pred_fn_pairs)}")
    pairs = list(pred_fn_pairs.items()) if isinstance(pred_fn_pairs, Mapping) else list(
        pred_fn_pairs)
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise CkptsyncTypeError(f"Each entry in 'pred_fn_pairs' must be a 2-tuple. "
                                    f"Received {pair}.")
        if not callable(pair[1]):
            raise CkptsyncTypeError(f"pred_fn_pairs[:, 1] must be callable: got {pair[1]!r}")
    if default is not None and not callable(default):
        raise CkptsyncTypeError("default must be callable.")
    preds = [convert_to_tensor(p) for p, _ in pairs]
    for p in preds:
        if p.dtype != _dtypes.bool:
            raise CkptsyncTypeError(f"pred must be Tensor of type bool: {p.name}")
    fns = [f for _, f in pairs]
    g = preds[0].graph if preds else get_default_graph()
    with g.name_scope(name or "case"):
        if default is None:
            if not preds:
                raise CkptsyncValueError("case: no pred_fn_pairs and no default.")
            k = len(preds) - 1
            last_pred, last_fn = preds[k], fns[k]
            others = preds[:k]
            preds, fns = others, fns[:k]

            def default() -> Any:
                checks = [_assert(others, 0, "Implementation error: selected default action "
                                  f"#{k} was called, but some of other predicates are True: "),
                          _assert([*others, last_pred], -1,
                                  "Input error: None of conditions evaluated as True:")]
                with g.control_dependencies(checks):
                    res = last_fn()
                    return pack_as(res, [identity(x) if isinstance(x, Tensor) else x
                                         for x in flatten(res)])
        fn = default
        for p, f in reversed(list(zip(preds, fns))):
            fn = (lambda p_, f_, rest: lambda: cond(p_, f_, rest, strict=strict))(p, f, fn)
        if exclusive:
            with g.control_dependencies([_assert(preds, 1, "Input error: exclusive=True")]):
                return fn()
        return fn()


from . import while_ops  # noqa: E402  (registration; while_loop is exported from here)
from .while_ops import while_loop  # noqa: E402

__all__ += ["while_loop"]
_ = while_ops
