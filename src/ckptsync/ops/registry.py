"""The op registry: each op type's numpy kernel and its gradient, registered together.

An op is registered once with :func:`register`, which puts its forward (a numpy kernel)
and its gradient function side by side::

    @register("Square", grad=lambda op, g: [g * 2.0 * op.inputs[0]])
    def _square(x):
        return np.square(x)

Kernel kinds, which tell the session how to call a kernel:
    ``pure``        ``kernel(*input_arrays, **attrs) -> array | tuple of arrays``
    ``stateful``    ``kernel(ctx, op, *input_arrays) -> array | tuple``; may read and
                    write variables through ``ctx`` (a read sees the run's own earlier
                    writes; the writes land in the session when the run ends) or draw
                    random numbers from ``ctx.rng(op)``.
    ``placeholder`` must be fed.
    ``variable``    yields the variable's value (see :mod:`ckptsync.session.ordering`).

What a stateful op writes, for the session to order reads after writes (as TF1's ref
variables, see :mod:`ckptsync.session.ordering`): the variables of its ``ref_inputs``
but those in ``read_refs`` (inputs it only reads, as a sparse gather), the names its
``writes`` function gives (an op that names its variables in attrs), and what the
sub-graphs its ``subgraphs`` function gives write (a cond's branches, a loop's body).
An op whose output is the variable it updates (TF1's ops that output the ref: ``Assign``,
``ScatterAdd``, ``ApplyAdam``, ...) names that ref input ``output_ref``: a read of the
output is a read of the variable (it sees later updates ordered before the read).

Two optional capabilities let the session skip a copy between ops (a fused allreduce of
hundreds of gradients, see :mod:`ckptsync.distributed`):
    ``accepts_out`` a ``pure`` kernel that takes ``out=``, a C-contiguous array of the
                    op's static output shape and dtype: it writes its result there and
                    returns ``out``, or returns a new array when the result does not fit
                    (the run's shapes or dtypes differ from the static ones).
    ``fuse_inputs`` a ``stateful`` op's planner, called once per compiled run with the
                    indices of the inputs whose producers could write straight into its
                    buffers; it returns a :class:`FusedInputs` (or None: no fusion).

Gradient functions take ``(op, *output_grads)`` (graph tensors, ``None`` where an output
receives no gradient) and return one graph tensor or ``None`` per input.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import dtypes as _dtypes
from ..errors import CkptsyncValueError
from ..graph import Operation, Tensor, get_default_graph

__all__ = ["OpDef", "FusedInputs", "register", "get_op_def", "make_op", "registered_types"]

GradFn = Callable[..., Sequence["Tensor | None"]]


class FusedInputs(Protocol):
    """A stateful op's plan, for one compiled run, to have inputs computed in place.

    The session calls :meth:`prepare` once per run before any producer runs and passes
    its i-th array as ``out=`` to the producer of input ``direct[i]``; it then calls
    :meth:`run` instead of the op's kernel. A producer whose result did not fit its
    ``out`` returns a new array instead, so ``run`` must check (``arrays[i] is out``)
    and copy what did not land in place.
    """

    @property
    def direct(self) -> Sequence[int]: ...

    def prepare(self, ctx: Any) -> Sequence[Any]: ...

    def run(self, ctx: Any, op: Operation, *arrays: Any) -> Any: ...


FusePlanner = Callable[[Operation, list[int]], "FusedInputs | None"]


@dataclass(frozen=True)
class OpDef:
    """How the session runs one op type and how ``gradients`` differentiates it."""

    type: str
    kernel: Callable[..., Any] | None
    gradient: GradFn | None
    kind: str = "pure"
    # Input indices that are variable references: not evaluated, the kernel gets None.
    ref_inputs: tuple[int, ...] = field(default_factory=tuple)
    # True for ops whose gradient is defined to be absent (argmax, equal, ...).
    not_differentiable: bool = False
    # A pure kernel that accepts ``out=`` (see the module docstring).
    accepts_out: bool = False
    # A stateful op that plans its inputs' buffers (see the module docstring).
    fuse_inputs: FusePlanner | None = None
    # Ref inputs the kernel only reads (the others it writes).
    read_refs: tuple[int, ...] = field(default_factory=tuple)
    # op -> names of the variable ops it writes other than through its ref inputs.
    writes: Callable[[Operation], Sequence[str]] | None = None
    # op -> the sub-graphs (``func_graph.SubGraph``) its kernel runs.
    subgraphs: Callable[[Operation], Sequence[Any]] | None = None
    # The ref input whose variable the op's output 0 is (its new value, as TF1's ref).
    output_ref: int | None = None


_REGISTRY: dict[str, OpDef] = {}


def register(
    op_type: str,
    *,
    grad: GradFn | None = None,
    kind: str = "pure",
    ref_inputs: tuple[int, ...] = (),
    not_differentiable: bool = False,
    accepts_out: bool = False,
    fuse_inputs: FusePlanner | None = None,
    read_refs: tuple[int, ...] = (),
    writes: Callable[[Operation], Sequence[str]] | None = None,
    subgraphs: Callable[[Operation], Sequence[Any]] | None = None,
    output_ref: int | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Registers ``op_type``'s kernel (the decorated function) with its gradient."""
    if not set(read_refs) <= set(ref_inputs) or (
            output_ref is not None and (output_ref not in ref_inputs or output_ref in read_refs)):
        raise CkptsyncValueError(f"Op type {op_type!r}: read_refs and output_ref must be "
                                 "among ref_inputs, output_ref one it writes.")
    if (writes is not None or subgraphs is not None) and kind != "stateful":
        raise CkptsyncValueError(f"Op type {op_type!r}: only stateful ops write variables.")
    if accepts_out and kind != "pure":
        raise CkptsyncValueError(f"Op type {op_type!r}: only pure kernels may accept out=.")
    if fuse_inputs is not None and kind != "stateful":
        raise CkptsyncValueError(f"Op type {op_type!r}: only stateful ops may fuse inputs.")

    def deco(kernel: Callable[..., Any]) -> Callable[..., Any]:
        if op_type in _REGISTRY:
            raise CkptsyncValueError(f"Op type {op_type!r} is already registered.")
        _REGISTRY[op_type] = OpDef(op_type, kernel, grad, kind, tuple(ref_inputs),
                                   not_differentiable, accepts_out, fuse_inputs,
                                   tuple(read_refs), writes, subgraphs, output_ref)
        return kernel

    return deco


def register_special(op_type: str, kind: str, grad: GradFn | None = None) -> None:
    """Registers an op type without a kernel (placeholders, variables, no-ops)."""
    _REGISTRY[op_type] = OpDef(op_type, None, grad, kind, (), grad is None)


def get_op_def(op_type: str) -> OpDef:
    try:
        return _REGISTRY[op_type]
    except KeyError:
        raise CkptsyncValueError(f"No kernel is registered for op type {op_type!r}.") from None


def registered_types() -> list[str]:
    return sorted(_REGISTRY)


def make_op(
    op_type: str,
    inputs: Sequence[Tensor],
    dtypes: Sequence[_dtypes.DType],
    shapes: Sequence[Any],
    name: str | None = None,
    attrs: dict[str, Any] | None = None,
    control_inputs: Sequence[Operation] = (),
) -> Operation:
    """Creates an op of a registered type in the inputs' graph (else the default graph)."""
    get_op_def(op_type)
    graph = inputs[0].graph if inputs else get_default_graph()
    return graph.create_op(op_type, inputs, dtypes, shapes, name=name, attrs=attrs,
                           control_inputs=control_inputs)


def single(op_type: str, inputs: Sequence[Tensor], dtype: _dtypes.DType, shape: Any,
           name: str | None = None, attrs: dict[str, Any] | None = None) -> Tensor:
    """Creates a one-output op and returns its output tensor."""
    return make_op(op_type, inputs, [dtype], [shape], name=name, attrs=attrs).outputs[0]
