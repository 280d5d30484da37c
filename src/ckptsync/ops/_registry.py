"""The op registry: each op type's numpy kernel and its gradient, registered together.

An op is registered once with :func:`register`, which puts its forward (a numpy kernel)
and its gradient function side by side::

    @register("Square", grad=lambda op, g: [g * 2.0 * op.inputs[0]])
    def _square(x):
        return np.square(x)

Kernel kinds, which tell the session how to call a kernel:
    ``pure``        ``kernel(*input_arrays, **attrs) -> array | tuple of arrays``
    ``stateful``    ``kernel(ctx, op, *input_arrays) -> array | tuple``; may read and
                    write variables through ``ctx`` (writes land when the run ends) or
                    draw random numbers from ``ctx.rng(op)``.
    ``placeholder`` must be fed.
    ``variable``    yields the variable's value at the start of the run.

Gradient functions take ``(op, *output_grads)`` (graph tensors, ``None`` where an output
receives no gradient) and return one graph tensor or ``None`` per input.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import dtypes as _dtypes
from ..errors import CkptsyncValueError
from ..graph import Operation, Tensor, get_default_graph

__all__ = ["OpDef", "register", "get_op_def", "make_op", "registered_types"]

GradFn = Callable[..., Sequence["Tensor | None"]]


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


_REGISTRY: dict[str, OpDef] = {}


def register(
    op_type: str,
    *,
    grad: GradFn | None = None,
    kind: str = "pure",
    ref_inputs: tuple[int, ...] = (),
    not_differentiable: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Registers ``op_type``'s kernel (the decorated function) with its gradient."""

    def deco(kernel: Callable[..., Any]) -> Callable[..., Any]:
        if op_type in _REGISTRY:
            raise CkptsyncValueError(f"Op type {op_type!r} is already registered.")
        _REGISTRY[op_type] = OpDef(op_type, kernel, grad, kind, tuple(ref_inputs),
                                   not_differentiable)
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
