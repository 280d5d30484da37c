"""Variables, as TF1's ``tf.Variable`` (ref variables): a graph node whose value lives in
each :class:`~ckptsync.session.Session`.

``v.name`` is ``"<op name>:0"``; ``v.op.name`` is the checkpoint key. Variables join the
collections they are created with (``GLOBAL_VARIABLES`` by default, plus
``TRAINABLE_VARIABLES`` when trainable). A duplicate ``cs.Variable`` name is made unique
(``v_1``), as TF1; ``cs.get_variable`` names are governed by variable scopes
(:mod:`ckptsync.variable_scope`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import dtypes as _dtypes
from .errors import CkptsyncValueError
from .graph import GraphKeys, Operation, Tensor, get_default_graph, get_default_session
from .ops.array_ops import convert_to_tensor, identity
from .ops.registry import register_special
from .ops.state_ops import assign, assign_add, assign_sub, group
from .tensor import OVERLOADABLE_OPERATORS

__all__ = [
    "Variable", "global_variables", "trainable_variables", "local_variables", "model_variables",
    "global_variables_initializer", "local_variables_initializer", "variables_initializer",
    "report_uninitialized_variables", "moving_average_variables", "all_variables",
    "initialize_all_variables", "initialize_local_variables", "initialize_variables",
]

register_special("VariableV2", "variable")


class Variable:
    """A mutable tensor whose value is kept by the session, as ``tf.Variable``.

    Args:
        initial_value: a Tensor, array, Python value, or a zero-argument callable returning
            one; its shape becomes the variable's.
        trainable: add to ``TRAINABLE_VARIABLES`` (default True).
        collections: replaces the default ``[GLOBAL_VARIABLES]``.
        name: the op name under the current name scope (made unique).
        dtype: converts ``initial_value``.

    Raises:
        ValueError: no ``initial_value``.
    """

    def __init__(self, initial_value: Any = None, trainable: bool | None = None,
                 collections: Any = None, validate_shape: bool = True,
                 caching_device: Any = None, name: str | None = None, dtype: Any = None,
                 expected_shape: Any = None, import_scope: Any = None,
                 constraint: Any = None, use_resource: Any = None, synchronization: Any = None,
                 aggregation: Any = None, shape: Any = None, *, _exact_name: bool = False,
                 _initializer_scope: str = "initial_value"):
        if initial_value is None:
            raise CkptsyncValueError("initial_value must be specified.")
        trainable = True if trainable is None else bool(trainable)
        if collections is None:
            collections = [GraphKeys.GLOBAL_VARIABLES]
        collections = list(collections)
        if trainable and GraphKeys.TRAINABLE_VARIABLES not in collections:
            collections.append(GraphKeys.TRAINABLE_VARIABLES)
        graph = get_default_graph()
        base = (name or "Variable").rstrip("/")
        # get_variable's exact name; one another op already took is uniquified ("v_1"), as
        # TF1 (whose variable store still finds it under the name asked for).
        if _exact_name and graph.is_name_used(base):
            with graph.name_scope(None):  # unique from the root, as the exact name was
                base = graph.unique_name(base)
        scope_name = base + ("/" if _exact_name else "")
        with graph.control_dependencies(None), graph.name_scope(scope_name) as scope:
            with graph.name_scope(_initializer_scope):
                init = initial_value() if callable(initial_value) else initial_value
                dt = _dtypes.as_dtype(dtype) if dtype is not None else None
                self._initial_value = convert_to_tensor(init, dtype=dt)
            var_shape = self._initial_value.shape if validate_shape else None
            if validate_shape and not self._initial_value.shape.is_fully_defined():
                raise CkptsyncValueError(
                    f"initial_value must have a shape specified: {self._initial_value}")
            self._variable: Tensor = graph.create_op(
                "VariableV2", [], [self._initial_value.dtype], [var_shape], name=scope,
                attrs={"shape": var_shape, "dtype": self._initial_value.dtype}).outputs[0]
            self._initializer_op = assign(self._variable, self._initial_value,
                                          validate_shape=validate_shape, name="Assign").op
        self._trainable = trainable
        self._constraint = constraint
        graph.add_to_collections(collections, self)

    # ---------------------------------------------------------------- graph element
    def _as_graph_element(self) -> Tensor:
        return self._variable

    @property
    def name(self) -> str:
        """``"<op name>:0"``, e.g. ``"dense0/w:0"``."""
        return self._variable.name

    @property
    def op(self) -> Operation:
        return self._variable.op

    @property
    def graph(self) -> Any:
        return self._variable.graph

    @property
    def dtype(self) -> _dtypes.DType:
        return self._variable.dtype

    @property
    def shape(self) -> Any:
        return self._variable.shape

    @property
    def device(self) -> str:
        return self._variable.device

    @property
    def trainable(self) -> bool:
        return self._trainable

    @property
    def initializer(self) -> Operation:
        """The op that assigns the initial value."""
        return self._initializer_op

    @property
    def initial_value(self) -> Tensor:
        return self._initial_value

    def get_shape(self) -> Any:
        return self._variable.shape

    def value(self) -> Tensor:
        """The variable's tensor (the ``VariableV2`` op's output, of its dtype and shape),
        as TF1's ref variable's ``value()``: an op reading it sees every write of the
        variable ordered before that op (a data or control dependency), as TF1; as the
        ref input of an assign or an optimizer's apply op, it names the variable that op
        writes. No op is added (fetched alone it runs nothing, as TF1's snapshot)."""
        return self._variable

    def read_value(self) -> Tensor:
        """A new ``Identity`` op (``read``, in the current name scope) of the variable's
        value, under the current control dependencies, as TF1's ``read_value``:
        ``with tf.control_dependencies([assign]): v.read_value()`` gives the assigned
        value."""
        return identity(self._variable, name="read")

    def initialized_value(self) -> Tensor:
        return self._initial_value

    def eval(self, session: Any = None) -> Any:
        return self._variable.eval(session=session)

    def load(self, value: Any, session: Any = None) -> None:
        """Writes ``value`` into the variable in ``session`` (no op is added)."""
        sess = session or get_default_session()
        if sess is None:
            raise CkptsyncValueError("Variable.load needs a session or a default session.")
        sess.write_variables({self.op.name: value})

    def assign(self, value: Any, use_locking: Any = None, name: str | None = None,
               read_value: bool = True) -> Tensor:
        return assign(self, value, name=name)

    def assign_add(self, delta: Any, use_locking: Any = None, name: str | None = None,
                   read_value: bool = True) -> Tensor:
        return assign_add(self, delta, name=name)

    def assign_sub(self, delta: Any, use_locking: Any = None, name: str | None = None,
                   read_value: bool = True) -> Tensor:
        return assign_sub(self, delta, name=name)

    def __repr__(self) -> str:
        return f"<cs.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}>"

    # Tensor-like arithmetic delegates to the variable's tensor.
    def __getattr__(self, item: str) -> Any:
        if item.startswith("__") or item.startswith("_"):
            raise AttributeError(item)
        return getattr(self._variable, item)


def _binop(name: str) -> Callable[..., Any]:
    def f(self: Variable, *args: Any) -> Any:
        return getattr(self._variable, name)(*args)

    f.__name__ = name
    return f


# Every operator a Tensor has (tensor.OVERLOADABLE_OPERATORS), as TF1's Variable: the
# arithmetic ones, //, %, &, |, ^, ~ and indexing (v[0], v[:, 1:]).
for _op in sorted(OVERLOADABLE_OPERATORS):
    setattr(Variable, _op, _binop(_op))
Variable.__array_priority__ = 100  # type: ignore[attr-defined]


# --------------------------------------------------------------------- collections
def global_variables(scope: str | None = None) -> list[Variable]:
    """Variables in ``GLOBAL_VARIABLES`` (saved by default), in creation order."""
    return get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES, scope)


def trainable_variables(scope: str | None = None) -> list[Variable]:
    return get_default_graph().get_collection(GraphKeys.TRAINABLE_VARIABLES, scope)


def local_variables(scope: str | None = None) -> list[Variable]:
    return get_default_graph().get_collection(GraphKeys.LOCAL_VARIABLES, scope)


def model_variables(scope: str | None = None) -> list[Variable]:
    return get_default_graph().get_collection(GraphKeys.MODEL_VARIABLES, scope)


def moving_average_variables(scope: str | None = None) -> list[Variable]:
    """Variables in ``MOVING_AVERAGE_VARIABLES`` (those ``ExponentialMovingAverage.apply``
    averaged), as ``tf.moving_average_variables``."""
    return get_default_graph().get_collection(GraphKeys.MOVING_AVERAGE_VARIABLES, scope)


def variables_initializer(var_list: Any, name: str = "init") -> Operation:
    """One op running every listed variable's initializer, as ``tf.variables_initializer``."""
    return group(*[v.initializer for v in var_list], name=name)


def global_variables_initializer() -> Operation:
    """Initializes ``global_variables()``, as ``tf.global_variables_initializer``."""
    return variables_initializer(global_variables(), name="init")


def local_variables_initializer() -> Operation:
    return variables_initializer(local_variables(), name="init_1")


def report_uninitialized_variables(var_list: Any = None, session: Any = None) -> list[str]:
    """Names of variables without a value in ``session`` (a host-side check, not an op)."""
    sess = session or get_default_session()
    vs = global_variables() + local_variables() if var_list is None else list(var_list)
    if sess is None:
        return [v.op.name for v in vs]
    return [v.op.name for v in vs if not sess.has_variable(v.op.name)]


# TF1's deprecated spellings (still in many programs), the same functions.
all_variables = global_variables
initialize_all_variables = global_variables_initializer
initialize_local_variables = local_variables_initializer
initialize_variables = variables_initializer
