"""Graphs, as TensorFlow 1's ``tf.Graph`` (the node types live in :mod:`ckptsync.tensor`).

A :class:`Graph` holds :class:`Operation` nodes; each produces :class:`Tensor` outputs
named ``"<op name>:<index>"``. Graphs carry name scopes, device scopes, control
dependencies, collections and a graph-level random seed. Nothing is computed here: a
:class:`~ckptsync.session.Session` runs the graph with numpy.

Thread-safety: building a graph is not thread-safe (as TF1); a finalized graph is
read-only and may be shared by any number of threads and sessions.

Example:
    >>> import ckptsync as cs
    >>> g = cs.Graph()
    >>> with g.as_default(), cs.name_scope("layer"):
    ...     c = cs.constant(1.0, name="c")
    >>> c.name
    'layer/c:0'
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from . import dtypes as _dtypes
from .device import DeviceSpec, canonical_device
from .errors import CkptsyncRuntimeError, CkptsyncTypeError, CkptsyncValueError
from .graph_keys import GraphKeys  # noqa: F401  (re-exported: ckptsync.graph.GraphKeys)
from .tensor import Operation, Tensor

if TYPE_CHECKING:  # typing only: the session package is built on this module
    from .session import Session

__all__ = [
    "Graph",
    "GraphKeys",
    "Operation",
    "Tensor",
    "get_default_graph",
    "reset_default_graph",
    "add_to_collection",
    "add_to_collections",
    "get_collection",
    "get_collection_ref",
    "name_scope",
    "device",
    "control_dependencies",
    "default_session",
    "get_default_session",
]

_VALID_OP_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-/]*$")
_VALID_SCOPE_NAME = re.compile(r"^[A-Za-z0-9_.\-/>]*$")


class Graph:
    """A dataflow graph, as ``tf.Graph``.

    Example:
        >>> g = Graph()
        >>> with g.as_default():
        ...     pass
    """

    def __init__(self) -> None:
        self._ops: list[Operation] = []
        self._ops_by_name: dict[str, Operation] = {}
        self._names_in_use: dict[str, int] = {}
        self._name_stack = ""
        self._device_stack: list[str] = []
        self._control_stack: list[list[Operation] | None] = []
        self._collections: dict[str, list[Any]] = {}
        self._finalized = False
        self._id_counter = 0
        self._lock = threading.RLock()
        self.seed: int | None = None
        # The graph's VariableStore (ckptsync.variable_scope.get_variable_store makes it).
        self._scope_state: Any = None
        # While a cond branch or loop body is traced: captures outside inputs
        # (ckptsync.ops.func_graph installs it).
        self._func_hook: Any = None

    # ----------------------------------------------------------------- defaults
    @contextlib.contextmanager
    def as_default(self) -> Iterator[Graph]:
        """Makes this the default graph in this thread for the ``with`` block."""
        _graph_stack().append(self)
        try:
            yield self
        finally:
            stack = _graph_stack()
            if not stack or stack[-1] is not self:
                raise CkptsyncRuntimeError("Improper nesting of Graph.as_default().")
            stack.pop()

    # ----------------------------------------------------------------- finalize
    @property
    def finalized(self) -> bool:
        return self._finalized

    def finalize(self) -> None:
        """Makes the graph read-only: adding an op raises ``RuntimeError``."""
        self._finalized = True

    def _unsafe_unfinalize(self) -> None:
        self._finalized = False

    def _check_not_finalized(self) -> None:
        if self._finalized:
            raise CkptsyncRuntimeError("Graph is finalized and cannot be modified.")

    def _next_id(self) -> int:
        self._id_counter += 1
        return self._id_counter

    @property
    def _last_id(self) -> int:
        return self._id_counter

    # ----------------------------------------------------------------- names
    def get_name_scope(self) -> str:
        return self._name_stack

    def unique_name(self, name: str, mark_as_used: bool = True) -> str:
        """Returns ``name`` under the current name scope, made unique (``x``, ``x_1``, ...)."""
        if self._name_stack:
            name = f"{self._name_stack}/{name}"
        key = name.lower()
        count = self._names_in_use.get(key, 0)
        if mark_as_used:
            self._names_in_use[key] = count + 1
        if count > 0:
            base = name
            while True:
                name = f"{base}_{count}"
                if name.lower() not in self._names_in_use:
                    break
                count += 1
            if mark_as_used:
                self._names_in_use[name.lower()] = 1
        return name

    def is_name_used(self, name: str) -> bool:
        """Whether an op (or a name scope) already has the exact ``name``."""
        return name in self._ops_by_name or name.lower() in self._names_in_use

    @contextlib.contextmanager
    def name_scope(self, name: str | None) -> Iterator[str]:
        """Opens a name scope, as ``tf.Graph.name_scope``.

        ``None`` or ``""`` resets to the root; a name ending in ``/`` re-enters that exact
        scope; any other name is made unique under the current scope.
        Yields the scope string with a trailing ``/`` (``""`` at the root).
        """
        old = self._name_stack
        if not name:
            new = ""
        elif name.endswith("/"):
            if not _VALID_SCOPE_NAME.match(name):
                raise CkptsyncValueError(f"'{name}' is not a valid scope name")
            new = name[:-1]
        else:
            if not _VALID_SCOPE_NAME.match(name):
                raise CkptsyncValueError(f"'{name}' is not a valid scope name")
            new = self.unique_name(name)
        self._name_stack = new
        try:
            yield f"{new}/" if new else ""
        finally:
            self._name_stack = old

    # ----------------------------------------------------------------- devices
    @contextlib.contextmanager
    def device(self, device_name: str | None) -> Iterator[None]:
        """Places ops created in the block on ``device_name`` (``"/cpu:0"``, ``"gpu:1"``).

        Raises:
            ValueError: the string is not a valid device specification.
        """
        self._device_stack.append(canonical_device(device_name) if device_name else "")
        try:
            yield
        finally:
            self._device_stack.pop()

    def _current_device(self) -> str:
        for d in reversed(self._device_stack):
            if d:
                return d
        return ""

    # ----------------------------------------------------------------- control deps
    @contextlib.contextmanager
    def control_dependencies(self, control_inputs: Sequence[Any] | None) -> Iterator[None]:
        """Ops created in the block run after ``control_inputs`` (``None`` clears)."""
        if control_inputs is None:
            self._control_stack.append(None)
        else:
            ops = [self.as_graph_element(c, allow_tensor=True, allow_operation=True)
                   for c in control_inputs]
            self._control_stack.append([o.op if isinstance(o, Tensor) else o for o in ops])
        try:
            yield
        finally:
            self._control_stack.pop()

    def _current_control_inputs(self) -> list[Operation]:
        out: list[Operation] = []
        for frame in reversed(self._control_stack):
            if frame is None:
                break
            out.extend(frame)
        return out

    # ----------------------------------------------------------------- ops
    def create_op(
        self,
        op_type: str,
        inputs: Sequence[Tensor],
        output_dtypes: Sequence[_dtypes.DType],
        output_shapes: Sequence[Any],
        name: str | None = None,
        attrs: dict[str, Any] | None = None,
        control_inputs: Sequence[Operation] = (),
    ) -> Operation:
        """Adds an operation (used by op constructors; users call ``cs.matmul`` etc.).

        Raises:
            RuntimeError: the graph is finalized.
            ValueError: an input belongs to another graph, or ``name`` is invalid.
        """
        with self._lock:
            self._check_not_finalized()
            for t in inputs:
                if t.graph is not self:
                    raise CkptsyncValueError(
                        f"Tensor {t.name} must be from the same graph as the op being created "
                        f"({op_type} {name or ''})."
                    )
            base = name or op_type
            if not _VALID_OP_NAME.match(base.rstrip("/")):
                raise CkptsyncValueError(f"'{base}' is not a valid node name")
            if base.endswith("/"):
                # An exact name (as TF1 for a name scope string): used as is.
                full = base[:-1]
                if full in self._ops_by_name:
                    raise CkptsyncValueError(f"Duplicate node name in graph: '{full}'")
                self._names_in_use.setdefault(full.lower(), 1)
            else:
                full = self.unique_name(base)
            ctrl = [*self._current_control_inputs(), *control_inputs]
            hook = self._func_hook
            if hook is not None:
                inputs, ctrl = hook.capture_inputs(op_type, inputs, ctrl)
            op = Operation(self, op_type, full, inputs, output_dtypes, output_shapes, attrs,
                           ctrl, self._current_device())
            self._ops.append(op)
            self._ops_by_name[full] = op
            if hook is not None:
                hook.created(op)
            return op

    def get_operations(self) -> list[Operation]:
        return list(self._ops)

    def get_operation_by_name(self, name: str) -> Operation:
        try:
            return self._ops_by_name[name]
        except KeyError:
            raise KeyError(f"The name '{name}' refers to an Operation not in the graph.") from None

    def get_tensor_by_name(self, name: str) -> Tensor:
        el = self.as_graph_element(name, allow_tensor=True, allow_operation=False)
        assert isinstance(el, Tensor)
        return el

    def as_graph_element(self, obj: Any, allow_tensor: bool = True,
                         allow_operation: bool = True) -> Tensor | Operation:
        """Resolves a Tensor, Operation, Variable or name (``"w:0"`` / ``"train"``).

        Raises:
            ValueError: a name that names nothing in this graph.
            TypeError: an object that cannot be a graph element.
        """
        if hasattr(obj, "_as_graph_element"):
            obj = obj._as_graph_element()
        if isinstance(obj, Tensor) and allow_tensor:
            if obj.graph is not self:
                raise CkptsyncValueError(f"Tensor {obj.name} is not an element of this graph.")
            return obj
        if isinstance(obj, Operation) and allow_operation:
            if obj.graph is not self:
                raise CkptsyncValueError(f"Operation {obj.name} is not an element of this graph.")
            return obj
        if isinstance(obj, str):
            if ":" in obj and allow_tensor:
                op_name, _, idx = obj.rpartition(":")
                op = self._ops_by_name.get(op_name)
                if op is None:
                    raise KeyError(
                        f"The name '{obj}' refers to a Tensor which does not exist. The operation, "
                        f"'{op_name}', does not exist in the graph."
                    )
                try:
                    return op.outputs[int(idx)]
                except (ValueError, IndexError):
                    raise KeyError(
                        f"The name '{obj}' refers to a Tensor which does not exist. The operation, "
                        f"'{op_name}', exists but only has {len(op.outputs)} outputs."
                    ) from None
            if allow_operation:
                op = self._ops_by_name.get(obj)
                if op is None:
                    raise KeyError(f"The name '{obj}' refers to an Operation not in the graph.")
                return op
            raise CkptsyncValueError(
                f"The name '{obj}' looks like an (invalid) Operation name, not a Tensor. "
                "Tensor names must be of the form \"<op_name>:<output_index>\"."
            )
        types = " or ".join(n for n, ok in (("Tensor", allow_tensor),
                                           ("Operation", allow_operation)) if ok)
        raise CkptsyncTypeError(f"Can not convert a {type(obj).__name__} into a {types}.")

    # ----------------------------------------------------------------- collections
    def add_to_collection(self, name: str, value: Any) -> None:
        self._check_not_finalized()
        self._collections.setdefault(name, []).append(value)

    def add_to_collections(self, names: Any, value: Any) -> None:
        if isinstance(names, str):
            names = [names]
        for n in dict.fromkeys(names):
            self.add_to_collection(n, value)

    def get_collection_ref(self, name: str) -> list[Any]:
        return self._collections.setdefault(name, [])

    def get_collection(self, name: str, scope: str | None = None) -> list[Any]:
        """Items of collection ``name`` in creation order, filtered by ``scope`` prefix.

        As TF1, ``scope`` matches names starting with it (a regex match on ``name``).
        """
        items = self._collections.get(name, [])
        if scope is None:
            return list(items)
        pattern = re.compile(scope)
        return [it for it in items if hasattr(it, "name") and pattern.match(it.name)]

    def get_all_collection_keys(self) -> list[str]:
        return [k for k, v in self._collections.items() if v]

    def clear_collection(self, name: str) -> None:
        self._collections.pop(name, None)


# --------------------------------------------------------------------- default graph
_DEFAULT = threading.local()
_GLOBAL_DEFAULT: list[Graph] = []


def _graph_stack() -> list[Graph]:
    stack = getattr(_DEFAULT, "stack", None)
    if stack is None:
        stack = _DEFAULT.stack = []
    return stack


def get_default_graph() -> Graph:
    """The innermost ``as_default`` graph of this thread, else the global default graph."""
    stack = _graph_stack()
    if stack:
        return stack[-1]
    if not _GLOBAL_DEFAULT:
        _GLOBAL_DEFAULT.append(Graph())
    return _GLOBAL_DEFAULT[0]


def reset_default_graph() -> None:
    """Clears the global default graph, as ``tf.reset_default_graph``.

    Raises:
        AssertionError: called inside a ``with graph.as_default()`` block (as TF1).
    """
    if _graph_stack():
        raise AssertionError(
            "Do not use tf.reset_default_graph() to clear nested graphs. If you need a cleared "
            "graph, exit the nesting and create a new graph."
        )
    _GLOBAL_DEFAULT.clear()


# --------------------------------------------------------------------- default session
# Beside the default graph, as TF's ``ops.py``: ``Session.as_default`` pushes here, and
# ``Tensor.eval``/``Operation.run`` read it, without importing the session package.
_SESSIONS = threading.local()


def _session_stack() -> list[Session]:
    stack = getattr(_SESSIONS, "stack", None)
    if stack is None:
        stack = _SESSIONS.stack = []
    return stack


@contextlib.contextmanager
def default_session(session: Session) -> Iterator[Session]:
    """Makes ``session`` this thread's default session in the ``with`` block (not its
    graph the default graph: ``Session.as_default`` does both), as TF's
    ``ops.default_session``.

    Thread-safety: the stack is per thread.
    """
    stack = _session_stack()
    stack.append(session)
    try:
        yield session
    finally:
        stack.pop()


def get_default_session() -> Session | None:
    """The innermost ``with sess.as_default()`` session in this thread, or None."""
    s = _session_stack()
    return s[-1] if s else None


def name_scope(name: str | None, default_name: str | None = None, values: Any = None) -> Any:
    """``tf.name_scope`` on the default graph (or the graph of ``values``)."""
    g = get_default_graph()
    if values:
        for v in values:
            el = getattr(v, "graph", None)
            if isinstance(el, Graph):
                g = el
                break
    return g.name_scope(name if name is not None else default_name)


def device(device_name: str | None) -> Any:
    """``tf.device`` on the default graph."""
    return get_default_graph().device(device_name)


def control_dependencies(control_inputs: Sequence[Any] | None) -> Any:
    """``tf.control_dependencies`` on the default graph."""
    return get_default_graph().control_dependencies(control_inputs)


__all__ += ["DeviceSpec"]


# --------------------------------------------------------------------- collections
def add_to_collection(name: str, value: Any) -> None:
    """Adds ``value`` to collection ``name`` of the default graph, as
    ``tf.add_to_collection``."""
    get_default_graph().add_to_collection(name, value)


def add_to_collections(names: Any, value: Any) -> None:
    """Adds ``value`` to each collection of ``names`` (once each), as
    ``tf.add_to_collections``."""
    get_default_graph().add_to_collections(names, value)


def get_collection(key: str, scope: str | None = None) -> list[Any]:
    """A copy of the default graph's collection ``key`` (``[]`` if there is none), items
    whose ``name`` matches the regex ``scope`` from its start when given, as
    ``tf.get_collection``."""
    return get_default_graph().get_collection(key, scope)


def get_collection_ref(key: str) -> list[Any]:
    """The default graph's collection ``key`` itself (created empty if missing): changing
    the list changes the collection, as ``tf.get_collection_ref``."""
    return get_default_graph().get_collection_ref(key)
