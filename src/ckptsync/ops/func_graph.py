"""Sub-graphs of control flow: a cond branch or a loop body traced into the graph.

A :class:`FuncContext` is active while a branch/body function runs: every op created
then belongs to it, and an input from outside (a tensor of the enclosing graph) is
*captured*: replaced by an ``_Arg`` placeholder of the same dtype and static shape,
which the ``If``/``While`` op feeds at run time from its own inputs. A control input
from outside becomes a control input of the ``If``/``While`` op instead. The ops of a
branch therefore depend on nothing outside it, and run only when the ``If``/``While``
kernel runs the branch's :class:`SubGraph` (its own plan, through the session's
executor: ``RunContext.compile``/``execute``). Variable references (an ``assign``'s
target) are not captured: assignments inside a branch write the session's variable; a
variable read through a reference by a differentiable op (a sparse gather) also becomes
an input of the ``If``/``While`` op, for gradients. A variable created inside a branch
belongs to the enclosing graph. A variable's value read inside is captured like any
tensor, but its ``_Arg`` is known to stand for the variable (``FuncContext.variables``),
so that the sub-graph's plan reads it as the variable: with the run's own earlier
writes, as TF1's ref variables (see :mod:`ckptsync.session.ordering`).

A gradient context (``forward=`` a sub-graph's context) captures the forward's tensors
as *saved* values instead: the forward kernel fetches them too and hands them to the
gradient kernel (per iteration for a loop), so the backward never recomputes the
forward (random ops keep their draws).

Also TF's ``nest`` for the structures cond/while_loop accept: lists, tuples,
namedtuples and dicts (flattened in sorted key order, as TF).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncValueError
from ..graph import Graph, Operation, Tensor
from ..tensor_shape import TensorShape
from .array_ops import convert_to_tensor
from .registry import get_op_def, register_special, single

__all__ = ["FuncContext", "SubGraph", "active", "flatten", "pack_as", "assert_same_structure",
           "BLOB", "dense", "merge_shapes", "zeros_value"]

# The dtype of an op's "saved values" output (a Python object, never fetched by users).
BLOB = _dtypes.DType(object)

register_special("_Arg", "placeholder")


class FuncContext:
    """The ops of one traced function and what it captured from outside.

    Attributes:
        captures: (outside tensor, its ``_Arg`` inside), in capture order.
        saved: for a gradient context: (forward tensor, its ``_Arg``).
        ref_captures: outside variables that differentiable ops inside read through a
            reference (not fed: the kernel reads the variable; an input of the
            ``If``/``While`` op so that gradients reach the variable).
        control: outside ops that ops inside named as control inputs.
        variables: id(``_Arg``) -> the name of the variable op it stands for (a captured
            variable, or the ``_Arg`` of an enclosing context that stands for one).
    """

    def __init__(self, graph: Graph, forward: FuncContext | None = None, arg_name: str = "Arg"):
        self.graph = graph
        self.forward = forward
        self.arg_name = arg_name
        self.op_ids: set[int] = set()
        self.captures: list[tuple[Tensor, Tensor]] = []
        self.saved: list[tuple[Tensor, Tensor]] = []
        self.control: list[Operation] = []
        self.ref_captures: list[Tensor] = []
        self.variables: dict[int, str] = {}
        self._inner: dict[int, Tensor] = {}

    def contains(self, op: Operation) -> bool:
        return id(op) in self.op_ids

    def arg(self, dtype: _dtypes.DType, shape: Any, name: str | None = None) -> Tensor:
        """A new ``_Arg`` of this context (fed by the kernel that runs it)."""
        with self.graph.control_dependencies(None):
            return single("_Arg", [], dtype, shape, name=name or self.arg_name,
                          attrs={"dtype": dtype, "shape": TensorShape(shape)})

    def capture(self, t: Tensor) -> Tensor:
        """``t`` if it is of this context, else its ``_Arg`` here (made once)."""
        if id(t.op) in self.op_ids:
            return t
        inner = self._inner.get(id(t))
        if inner is None:
            inner = self.arg(t.dtype, t.shape)
            self._inner[id(t)] = inner
            if self.forward is not None and self.forward.contains(t.op):
                self.saved.append((t, inner))
            else:
                self.captures.append((t, inner))
                var = _variable_of(t)
                if var is not None:
                    self.variables[id(inner)] = var
        return inner

    def capture_inputs(self, op_type: str, inputs: Any, ctrl: list[Operation]
                       ) -> tuple[list[Tensor], list[Operation]]:
        d = get_op_def(op_type)
        refs = d.ref_inputs
        for i in refs:  # a differentiable read through a reference (a sparse gather)
            t = inputs[i]
            if d.gradient is not None and id(t.op) not in self.op_ids and all(
                    t is not r for r in self.ref_captures):
                self.ref_captures.append(t)
        new = [t if i in refs else self.capture(t) for i, t in enumerate(inputs)]
        keep = []
        for c in ctrl:
            if id(c) in self.op_ids:
                keep.append(c)
            elif all(c is not o for o in self.control):
                self.control.append(c)
        return new, keep


def _variable_of(t: Tensor) -> str | None:
    """The name of the variable op ``t`` stands for: a variable's own tensor, or the
    ``_Arg`` of an active context that captured one; else None."""
    if t.op.type == "VariableV2":
        return t.op.name
    hook = t.graph._func_hook
    if t.op.type != "_Arg" or hook is None:
        return None
    for c in hook.stack:
        name = c.variables.get(id(t))
        if name is not None:
            return name
    return None


class _Hook:
    """``Graph._func_hook`` while contexts are active: the innermost captures."""

    def __init__(self) -> None:
        self.stack: list[FuncContext] = []

    def capture_inputs(self, op_type: str, inputs: Any, ctrl: list[Operation]) -> Any:
        return self.stack[-1].capture_inputs(op_type, inputs, ctrl)

    def created(self, op: Operation) -> None:
        if op.type == "VariableV2":  # a variable made in a branch belongs to the graph
            return
        for c in self.stack:
            c.op_ids.add(id(op))


@contextlib.contextmanager
def active(ctx: FuncContext) -> Iterator[FuncContext]:
    """Makes ``ctx`` the innermost context of its graph in the block."""
    g = ctx.graph
    hook = g._func_hook
    if hook is None:
        hook = g._func_hook = _Hook()
    hook.stack.append(ctx)
    try:
        yield ctx
    finally:
        hook.stack.pop()
        if not hook.stack:
            g._func_hook = None


class SubGraph:
    """A traced function: its ``args`` (fed by position), flat ``outputs`` and context.

    ``saved`` lists the inner tensors a gradient needs (appended when the gradient is
    built); :meth:`run` fetches them after the outputs.
    """

    def __init__(self, ctx: FuncContext, args: list[Tensor], outputs: list[Tensor]):
        self.ctx = ctx
        self.args = args
        self.outputs = outputs
        self.saved: list[Tensor] = []
        self._plan: tuple[int, int, Any] | None = None

    def save(self, t: Tensor) -> int:
        """The index of ``t`` (a tensor of this sub-graph) among the saved values."""
        for i, s in enumerate(self.saved):
            if s is t:
                return i
        self.saved.append(t)
        return len(self.saved) - 1

    def fed(self) -> list[Tensor]:
        return [*self.args, *(i for _, i in self.ctx.captures), *(i for _, i in self.ctx.saved)]

    def run(self, run_ctx: Any, feeds: list[Any]) -> tuple[list[Any], list[Any]]:
        """(output values, saved values) for ``feeds`` (one per :meth:`fed` tensor)."""
        key = (len(self.saved), len(self.ctx.captures))
        cached = self._plan
        if cached is None or cached[:2] != key:
            plan = run_ctx.compile([*self.outputs, *self.saved], self.fed(),
                                   self.ctx.variables)
            cached = self._plan = (*key, plan)
        res = run_ctx.execute(cached[2], feeds)
        n = len(self.outputs)
        return res[:n], res[n:]


# --------------------------------------------------------------------- nest
def _is_seq(x: Any) -> bool:
    return isinstance(x, (list, tuple, Mapping))


def flatten(x: Any) -> list[Any]:
    """The leaves of ``x`` (dicts in sorted key order), as TF's ``nest.flatten``."""
    if isinstance(x, Mapping):
        return [leaf for k in sorted(x) for leaf in flatten(x[k])]
    if isinstance(x, (list, tuple)):
        return [leaf for item in x for leaf in flatten(item)]
    return [x]


def pack_as(structure: Any, flat: list[Any]) -> Any:
    """``flat`` in the structure of ``structure``, as TF's ``nest.pack_sequence_as``."""
    it = iter(flat)

    def pack(s: Any) -> Any:
        if isinstance(s, Mapping):
            vals = {k: pack(s[k]) for k in sorted(s)}
            out = {k: vals[k] for k in s}
            try:
                return type(s)(out)  # type: ignore[call-arg]
            except TypeError:
                return out
        if isinstance(s, tuple) and hasattr(s, "_fields"):
            return type(s)(*[pack(v) for v in s])
        if isinstance(s, (list, tuple)):
            return type(s)(pack(v) for v in s)
        return next(it)

    return pack(structure)


def assert_same_structure(a: Any, b: Any) -> None:
    """Raises ValueError (as TF's ``nest.assert_same_structure``) unless ``a`` and ``b``
    nest the same way."""
    def same(x: Any, y: Any) -> bool:
        if _is_seq(x) != _is_seq(y):
            return False
        if isinstance(x, Mapping):
            return isinstance(y, Mapping) and sorted(x) == sorted(y) and all(
                same(x[k], y[k]) for k in x)
        if isinstance(x, (list, tuple)):
            return (isinstance(y, (list, tuple)) and len(x) == len(y)
                    and all(same(p, q) for p, q in zip(x, y)))
        return True

    if not same(a, b):
        raise CkptsyncValueError(
            "The two structures don't have the same nested structure.\n\n"
            f"First structure: type={type(a).__name__} str={a}\n\n"
            f"Second structure: type={type(b).__name__} str={b}")


def merge_shapes(a: TensorShape, b: TensorShape) -> TensorShape:
    """The most specific shape both fit (TF's ``Merge`` output shape)."""
    if a.dims is None or b.dims is None or len(a.dims) != len(b.dims):
        return TensorShape(None)
    return TensorShape([x if x == y else None for x, y in zip(a.dims, b.dims)])


def dense(g: Any) -> Any:
    """A dense tensor for a gradient (``IndexedSlices`` converted), or None."""
    if g is None or isinstance(g, Tensor):
        return g
    return convert_to_tensor(g)


def zeros_value(like: Any) -> np.ndarray:
    """Zeros of ``like``'s runtime shape and dtype (an untaken branch's gradient)."""
    a = np.asarray(like)
    return np.zeros(a.shape, a.dtype)

