"""The graph's node types, as TensorFlow 1's ``tf.Tensor`` and ``tf.Operation``.

An :class:`Operation` is a node of a :class:`~ckptsync.graph.Graph`; it produces
:class:`Tensor` outputs named ``"<op name>:<index>"``. Tensors carry a dtype and a static
:class:`~ckptsync.tensor_shape.TensorShape`, and overload Python's operators with graph
ops (``a + b`` adds an ``AddV2`` op): :mod:`ckptsync.ops.elementwise_ops` installs them with
:meth:`Tensor.override_operator` when it is imported, as TF's ``math_ops`` does, since
this module sits below the ops. Nothing is computed here.

Thread-safety: as the graph that holds them (read-only once it is finalized).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from . import dtypes as _dtypes
from .errors import CkptsyncTypeError, CkptsyncValueError
from .tensor_shape import TensorShape

if TYPE_CHECKING:
    from .graph import Graph

__all__ = ["Tensor", "Operation", "OVERLOADABLE_OPERATORS"]

# The operators ``Tensor.override_operator`` accepts (those elementwise_ops installs).
OVERLOADABLE_OPERATORS = frozenset({
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
    "__rtruediv__", "__matmul__", "__rmatmul__", "__pow__", "__rpow__", "__neg__", "__abs__",
    "__lt__", "__le__", "__gt__", "__ge__", "__floordiv__", "__rfloordiv__", "__mod__",
    "__rmod__", "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__invert__",
    "__getitem__",  # installed by slicing_ops (x[:, 0], x[1:-1, ..., None], x[t])
})


class Tensor:
    """One output of an :class:`Operation`, as ``tf.Tensor`` in graph mode.

    Attributes:
        op: the producing operation.
        value_index: which output of ``op`` this is.
        dtype: a :class:`~ckptsync.dtypes.DType`.
    """

    __slots__ = ("op", "value_index", "dtype", "_shape", "_consumers", "__weakref__")

    # Lets numpy defer to our operator overloads (ndarray + Tensor -> Tensor).
    __array_priority__ = 100

    def __init__(self, op: Operation, value_index: int, dtype: _dtypes.DType, shape: Any):
        self.op = op
        self.value_index = value_index
        self.dtype = dtype
        self._shape = TensorShape(shape)
        self._consumers: list[Operation] = []

    @property
    def name(self) -> str:
        """``"<op name>:<index>"``, e.g. ``"dense0/MatMul:0"``."""
        return f"{self.op.name}:{self.value_index}"

    @property
    def graph(self) -> Graph:
        return self.op.graph

    @property
    def device(self) -> str:
        return self.op.device

    @property
    def shape(self) -> TensorShape:
        return self._shape

    def get_shape(self) -> TensorShape:
        """The static shape; unknown dimensions are ``None`` in ``as_list()``."""
        return self._shape

    def set_shape(self, shape: Any) -> None:
        """Refines the static shape (as TF1's ``Tensor.set_shape``)."""
        self._shape = self._shape.merge_with(TensorShape(shape))

    def consumers(self) -> list[Operation]:
        return list(self._consumers)

    def eval(self, feed_dict: Any = None, session: Any = None) -> Any:
        """``session.run(self, feed_dict)``, in the default session when none is given.

        Raises:
            ValueError: no session is given and there is no default session.
        """
        from .graph import get_default_session  # graph.py imports this module

        sess = session or get_default_session()
        if sess is None:
            raise CkptsyncValueError(
                "Cannot evaluate tensor using `eval()`: No default session is registered. "
                "Use `with sess.as_default()` or pass an explicit session to `eval(session=sess)`"
            )
        return sess.run(self, feed_dict)

    def __repr__(self) -> str:
        return f"<cs.Tensor '{self.name}' shape={self._shape} dtype={self.dtype.name}>"

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:  # identity, as TF1 graph tensors
        return self is other

    def __bool__(self) -> bool:
        raise CkptsyncTypeError(
            "Using a `cs.Tensor` as a Python `bool` is not allowed. Use `if t is not None:` "
            "to test whether it is defined."
        )

    def __iter__(self) -> Iterator[Any]:
        raise CkptsyncTypeError("Tensor objects are only iterable when eager execution is enabled.")

    @classmethod
    def override_operator(cls, operator: str, func: Callable[..., Tensor]) -> None:
        """Installs ``func(self, other)`` (or ``func(self)``) as ``operator``, e.g.
        ``"__add__"``, as TF's ``Tensor._override_operator``. Called by
        :mod:`ckptsync.ops.elementwise_ops` when it is imported.

        Raises:
            ValueError: ``operator`` is not in ``OVERLOADABLE_OPERATORS``.

        Thread-safety: call at import time only.
        """
        if operator not in OVERLOADABLE_OPERATORS:
            raise CkptsyncValueError(f"Overriding {operator} is not allowed.")
        setattr(cls, operator, func)

    if TYPE_CHECKING:  # installed by elementwise_ops (see override_operator)
        def __add__(self, other: Any) -> Tensor: ...
        def __radd__(self, other: Any) -> Tensor: ...
        def __sub__(self, other: Any) -> Tensor: ...
        def __rsub__(self, other: Any) -> Tensor: ...
        def __mul__(self, other: Any) -> Tensor: ...
        def __rmul__(self, other: Any) -> Tensor: ...
        def __truediv__(self, other: Any) -> Tensor: ...
        def __rtruediv__(self, other: Any) -> Tensor: ...
        def __matmul__(self, other: Any) -> Tensor: ...
        def __rmatmul__(self, other: Any) -> Tensor: ...
        def __pow__(self, other: Any) -> Tensor: ...
        def __rpow__(self, other: Any) -> Tensor: ...
        def __neg__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...
        def __lt__(self, other: Any) -> Tensor: ...
        def __le__(self, other: Any) -> Tensor: ...
        def __gt__(self, other: Any) -> Tensor: ...
        def __ge__(self, other: Any) -> Tensor: ...
        def __getitem__(self, key: Any) -> Tensor: ...
        def __floordiv__(self, other: Any) -> Tensor: ...
        def __rfloordiv__(self, other: Any) -> Tensor: ...
        def __mod__(self, other: Any) -> Tensor: ...
        def __rmod__(self, other: Any) -> Tensor: ...
        def __and__(self, other: Any) -> Tensor: ...
        def __rand__(self, other: Any) -> Tensor: ...
        def __or__(self, other: Any) -> Tensor: ...
        def __ror__(self, other: Any) -> Tensor: ...
        def __xor__(self, other: Any) -> Tensor: ...
        def __rxor__(self, other: Any) -> Tensor: ...
        def __invert__(self) -> Tensor: ...


class Operation:
    """A node of the graph, as ``tf.Operation``.

    Attributes:
        type: the op type, e.g. ``"MatMul"``.
        name: the unique name within the graph, e.g. ``"dense0/MatMul"``.
        inputs: the input tensors.
        outputs: the output tensors.
        control_inputs: operations that must run before this one.
        device: canonical device string, e.g. ``"/device:CPU:0"`` or ``""``.
    """

    def __init__(
        self,
        graph: Graph,
        op_type: str,
        name: str,
        inputs: Sequence[Tensor],
        output_dtypes: Sequence[_dtypes.DType],
        output_shapes: Sequence[Any],
        attrs: dict[str, Any] | None,
        control_inputs: Sequence[Operation],
        device_name: str,
    ):
        self.graph = graph
        self.type = op_type
        self.name = name
        self.inputs = tuple(inputs)
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.control_inputs = tuple(control_inputs)
        self.device = device_name
        self._id = graph._next_id()
        self.outputs = tuple(
            Tensor(self, i, dt, sh) for i, (dt, sh) in enumerate(zip(output_dtypes, output_shapes))
        )
        for t in self.inputs:
            t._consumers.append(self)

    def get_attr(self, name: str) -> Any:
        try:
            return self.attrs[name]
        except KeyError:
            raise CkptsyncValueError(f"Operation {self.name!r} has no attr named {name!r}.") from None

    def values(self) -> tuple[Tensor, ...]:
        return self.outputs

    def run(self, feed_dict: Any = None, session: Any = None) -> None:
        """``session.run(self, feed_dict)``, in the default session when none is given.

        Raises:
            ValueError: no session is given and there is no default session.
        """
        from .graph import get_default_session  # graph.py imports this module

        sess = session or get_default_session()
        if sess is None:
            raise CkptsyncValueError(
                "Cannot execute operation using `run()`: No default session is registered."
            )
        sess.run(self, feed_dict)

    def __repr__(self) -> str:
        return f"<cs.Operation '{self.name}' type={self.type}>"
