"""``variable_scope`` and ``get_variable``, with TF1's sharing rules.

One store per graph maps full names (variable-scope name + ``/`` + name) to variables.
Reuse: the root scope has ``reuse=False``; ``reuse=True`` or ``AUTO_REUSE`` is inherited by
every sub-scope and cannot be switched off below (``reuse=False`` means "inherit").
Explicit string scopes are never made unique (entering ``"tower"`` twice gives the same
variable names) while their auxiliary name scope is (``tower``, ``tower_1``), so ops
differ. ``default_name`` scopes are made unique among siblings (``d``, ``d_1``, ...).
``cs.name_scope`` never changes ``get_variable`` names. See TF1_SEMANTICS.md §1.

Example:
    >>> import ckptsync as cs
    >>> g = cs.Graph()
    >>> with g.as_default():
    ...     with cs.variable_scope("dense0"):
    ...         w = cs.get_variable("w", [64, 128])
    ...     with cs.variable_scope("dense0", reuse=True):
    ...         w2 = cs.get_variable("w")
    >>> w.name, w is w2
    ('dense0/w:0', True)
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import dtypes as _dtypes
from . import initializers as _init
from .errors import CkptsyncRuntimeError, CkptsyncTypeError, CkptsyncValueError
from .graph import Graph, GraphKeys, Tensor, get_default_graph
from .tensor_shape import TensorShape
from .variables import Variable

__all__ = [
    "AUTO_REUSE", "VariableScope", "variable_scope", "get_variable", "get_local_variable",
    "get_variable_scope", "VariableStore", "get_variable_store",
]


class _ReuseMode:
    def __repr__(self) -> str:
        return "AUTO_REUSE"


AUTO_REUSE: Any = _ReuseMode()
"""Get-or-create, as ``tf.AUTO_REUSE``."""


class VariableScope:
    """A variable scope's settings, as ``tf.VariableScope``. Yielded by ``variable_scope``."""

    def __init__(self, reuse: Any, name: str = "", initializer: Any = None,
                 regularizer: Any = None, dtype: Any = _dtypes.float32,
                 name_scope: str = ""):
        self._reuse = reuse
        self._name = name
        self._initializer = initializer
        self._regularizer = regularizer
        self._dtype = _dtypes.as_dtype(dtype)
        self._name_scope = name_scope

    @property
    def name(self) -> str:
        return self._name

    @property
    def original_name_scope(self) -> str:
        return self._name_scope

    @property
    def reuse(self) -> Any:
        return self._reuse

    @property
    def initializer(self) -> Any:
        return self._initializer

    @property
    def dtype(self) -> _dtypes.DType:
        return self._dtype

    @property
    def regularizer(self) -> Any:
        return self._regularizer

    def reuse_variables(self) -> None:
        """Reuse variables in this scope from now on (cannot be undone), as TF1."""
        self._reuse = True

    def set_initializer(self, initializer: Any) -> None:
        self._initializer = initializer

    def set_dtype(self, dtype: Any) -> None:
        self._dtype = _dtypes.as_dtype(dtype)

    def set_regularizer(self, regularizer: Any) -> None:
        self._regularizer = regularizer

    def get_variable(self, name: str, shape: Any = None, dtype: Any = None,
                     initializer: Any = None, regularizer: Any = None, reuse: Any = None,
                     trainable: bool | None = None, collections: Any = None,
                     **kwargs: Any) -> Variable:
        full = f"{self._name}/{name}" if self._name else name
        return get_variable_store(get_default_graph()).get_variable(
            full, shape, dtype if dtype is not None else _ScopeDtype(self._dtype),
            initializer if initializer is not None else self._initializer,
            regularizer if regularizer is not None else self._regularizer,
            reuse if reuse else self._reuse, trainable, collections,
            kwargs.get("validate_shape", True))

    def get_collection(self, name: str) -> list[Any]:
        """Items of collection ``name`` under this scope (prefix ``"<name>/"``)."""
        items = get_default_graph().get_collection(name)
        if not self._name:
            return items
        prefix = self._name + "/"
        return [it for it in items if getattr(it, "name", "").startswith(prefix)]

    def global_variables(self) -> list[Any]:
        return self.get_collection(GraphKeys.GLOBAL_VARIABLES)

    def trainable_variables(self) -> list[Any]:
        return self.get_collection(GraphKeys.TRAINABLE_VARIABLES)

    def local_variables(self) -> list[Any]:
        return self.get_collection(GraphKeys.LOCAL_VARIABLES)

    def __repr__(self) -> str:
        return f"<VariableScope '{self._name}' reuse={self._reuse}>"


class _ScopeDtype:
    """A dtype inherited from the scope (not given explicitly to get_variable)."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: _dtypes.DType):
        self.dtype = dtype


class VariableStore:
    """One graph's ``get_variable`` state, as TF1's ``_VariableStore`` with its scope
    stack: get it with :func:`get_variable_store`.

    Attributes:
        vars: variables by full name (``"dense0/w"``), those ``get_variable`` made.
        stack: the open variable scopes, the root scope (name ``""``) first.
        counts: how often each default scope name was used (for ``"dense_1"``).

    Thread-safety: as graph building (not thread-safe).
    """

    def __init__(self) -> None:
        self.vars: dict[str, Variable] = {}
        self.stack: list[VariableScope] = [VariableScope(False)]
        self.counts: dict[str, int] = {}

    @property
    def root_scope(self) -> VariableScope:
        """The graph's outermost variable scope (name ``""``): entering it (with
        ``auxiliary_name_scope=False``) creates variables at the top level, as the
        global step and the optimizers' slots are."""
        return self.stack[0]

    def get_variable(self, name: str, shape: Any, dtype: Any, initializer: Any,
                     regularizer: Any, reuse: Any, trainable: bool | None, collections: Any,
                     validate_shape: bool = True) -> Variable:
        explicit = dtype is not None and not isinstance(dtype, _ScopeDtype)
        if isinstance(dtype, _ScopeDtype):
            dtype = dtype.dtype
        dt = _dtypes.as_dtype(dtype) if dtype is not None else _dtypes.float32
        shp = TensorShape(shape) if shape is not None else None
        found = self.vars.get(name)
        if found is not None:
            if reuse is False or reuse is None:
                raise CkptsyncValueError(
                    f"Variable {name} already exists, disallowed. Did you mean to set reuse=True "
                    "or reuse=tf.AUTO_REUSE in VarScope?")
            if shp is not None and not shp.is_compatible_with(found.shape):
                raise CkptsyncValueError(
                    f"Trying to share variable {name}, but specified shape {shp} and found shape "
                    f"{found.shape}.")
            if explicit and dt != found.dtype:
                raise CkptsyncValueError(
                    f"Trying to share variable {name}, but specified dtype {dt.name} and found "
                    f"dtype {found.dtype.name}.")
            return found
        if reuse is True:
            raise CkptsyncValueError(
                f"Variable {name} does not exist, or was not created with tf.get_variable(). "
                "Did you mean to set reuse=tf.AUTO_REUSE in VarScope?")
        init_value = _initial_value(name, shp, dt, initializer, dtype_given=explicit)
        v = Variable(init_value, trainable=trainable, collections=collections, name=name,
                     validate_shape=validate_shape, _exact_name=True,
                     _initializer_scope="Initializer")
        self.vars[name] = v
        if regularizer is not None:
            with get_default_graph().name_scope(f"{name}/Regularizer/"):
                loss = regularizer(v)
            if loss is not None:
                get_default_graph().add_to_collection("regularization_losses", loss)
        return v


def _is_constant(init: Any) -> bool:
    return isinstance(init, (Tensor, np.ndarray, np.generic, int, float, bool, list, tuple))


def _initial_value(name: str, shape: TensorShape | None, dtype: _dtypes.DType, init: Any,
                   dtype_given: bool) -> Any:
    if init is not None and _is_constant(init):
        if shape is not None:
            raise CkptsyncValueError(
                f"If initializer is a constant, do not specify shape (variable {name}).")
        if isinstance(init, Tensor):
            if dtype_given and init.dtype != dtype:
                raise CkptsyncValueError(
                    f"Initializer type '{init.dtype.name}' and explicit dtype '{dtype.name}' "
                    f"don't match (variable {name}).")
            return init
        arr = np.asarray(init)
        if isinstance(init, (np.ndarray, np.generic)):
            if dtype_given and _dtypes.as_dtype(arr.dtype) != dtype:
                raise CkptsyncValueError(
                    f"Initializer type '{_dtypes.as_dtype(arr.dtype).name}' and explicit dtype "
                    f"'{dtype.name}' don't match (variable {name}).")
            return lambda: arr
        return lambda: np.asarray(init, dtype.np)
    if init is None:
        if dtype.is_floating:
            init = _init.glorot_uniform_initializer()
        elif dtype.is_integer or dtype.is_bool:
            init = _init.zeros_initializer()
        else:
            raise CkptsyncValueError(
                f"An initializer for variable {name} of {dtype.name} is required")
    if isinstance(init, type) and issubclass(init, _init.Initializer):
        init = init()
    if callable(init) and not isinstance(init, _init.Initializer):
        import inspect

        try:
            nparams = len(inspect.signature(init).parameters)
        except (TypeError, ValueError):
            nparams = 1
        if nparams == 0:
            return init
    if shape is None or not shape.is_fully_defined():
        raise CkptsyncValueError(
            f"Shape of a new variable ({name}) must be fully defined, but instead was {shape}; "
            "the shape should be fully defined for this initializer.")
    dims = shape.as_list()
    return lambda: init(dims, dtype=dtype)


def get_variable_store(graph: Graph) -> VariableStore:
    """``graph``'s variable store (made on first use).

    Thread-safety: as graph building (not thread-safe).
    """
    if graph._scope_state is None:
        graph._scope_state = VariableStore()
    return graph._scope_state  # type: ignore[no-any-return]


def get_variable_scope() -> VariableScope:
    """The current variable scope object, as ``tf.get_variable_scope``."""
    return get_variable_store(get_default_graph()).stack[-1]


@contextlib.contextmanager
def variable_scope(name_or_scope: Any = None, default_name: str | None = None,
                   values: Any = None, initializer: Any = None, regularizer: Any = None,
                   caching_device: Any = None, partitioner: Any = None, custom_getter: Any = None,
                   reuse: Any = None, dtype: Any = None, use_resource: Any = None,
                   constraint: Any = None, auxiliary_name_scope: bool = True
                   ) -> Iterator[VariableScope]:
    """Opens a variable scope (and, unless told not to, a name scope), as TF1.

    Raises:
        ValueError: ``reuse`` is not True/False/None/AUTO_REUSE, or ``reuse=True`` without a
            name.
        TypeError: neither ``name_or_scope`` nor ``default_name``; a non-bool
            ``auxiliary_name_scope``.
        RuntimeError: scopes exited out of order ("Improper nesting of variable_scope.").
    """
    if reuse is False:
        reuse = None
    if reuse not in (True, None) and reuse is not AUTO_REUSE:
        raise CkptsyncValueError(f"The reuse parameter must be True or False or None, got {reuse!r}.")
    if not isinstance(auxiliary_name_scope, bool):
        raise CkptsyncTypeError(
            f"The auxiliary_name_scope must be `True` or `False`, got {auxiliary_name_scope!r}.")
    if name_or_scope is None and default_name is None:
        raise CkptsyncTypeError("If default_name is None then name_or_scope is required")
    if reuse is True and name_or_scope is None:
        raise CkptsyncValueError("reuse=True cannot be used without a name_or_scope")
    graph = get_default_graph()
    st = get_variable_store(graph)
    parent = st.stack[-1]
    saved_counts: dict[str, int] | None = None
    if isinstance(name_or_scope, VariableScope):
        captured = name_or_scope
        full = captured.name
        new_reuse = reuse if reuse else captured.reuse
        ns_name = full.rsplit("/", 1)[-1] if full else None
        scope_name_scope = captured.original_name_scope
        saved_counts = copy.copy(st.counts)
        base = captured
    else:
        if name_or_scope is not None:
            if not isinstance(name_or_scope, str):
                raise CkptsyncTypeError(f"VariableScope: name_or_scope must be a string or "
                                        f"VariableScope, got {type(name_or_scope).__name__}.")
            short = name_or_scope
        else:
            assert default_name is not None
            short = _unique_default(st, parent.name, default_name)
        full = f"{parent.name}/{short}" if parent.name else short
        new_reuse = reuse if reuse else parent.reuse
        ns_name = short
        scope_name_scope = ""
        base = parent
    key = full
    st.counts[key] = st.counts.get(key, 0) + 1
    with contextlib.ExitStack() as stack:
        ns = ""
        if auxiliary_name_scope and ns_name is not None:
            ns = stack.enter_context(graph.name_scope(ns_name))
        elif not auxiliary_name_scope:
            ns = graph.get_name_scope() + "/" if graph.get_name_scope() else ""
        scope = VariableScope(
            new_reuse, full,
            initializer if initializer is not None else base.initializer,
            regularizer if regularizer is not None else base.regularizer,
            dtype if dtype is not None else base.dtype,
            name_scope=scope_name_scope or ns)
        st.stack.append(scope)
        try:
            yield scope
        finally:
            if not st.stack or st.stack[-1] is not scope:
                raise CkptsyncRuntimeError("Improper nesting of variable_scope.")
            st.stack.pop()
            if saved_counts is not None:
                st.counts = saved_counts
            elif name_or_scope is not None:
                prefix = full + "/"
                for k in list(st.counts):
                    if k.startswith(prefix):
                        st.counts[k] = 0


def _unique_default(st: VariableStore, parent: str, prefix: str) -> str:
    def count(n: str) -> int:
        return st.counts.get(f"{parent}/{n}" if parent else n, 0)

    name, idx = prefix, 1
    while count(name) > 0:
        name = f"{prefix}_{idx}"
        idx += 1
    return name


def get_variable(name: str, shape: Any = None, dtype: Any = None, initializer: Any = None,
                 regularizer: Any = None, trainable: bool | None = None, collections: Any = None,
                 caching_device: Any = None, partitioner: Any = None, validate_shape: bool = True,
                 use_resource: Any = None, custom_getter: Any = None, constraint: Any = None,
                 synchronization: Any = None, aggregation: Any = None) -> Variable:
    """Gets or creates the variable ``<scope>/<name>``, as ``tf.get_variable``.

    Args:
        name: the short name; the full name is the current variable scope's name + "/".
        shape: e.g. ``[64, 128]``; omitted when ``initializer`` is a constant.
        dtype: default the scope's dtype (float32).
        initializer: argument > scope initializer > default (glorot-uniform for floats,
            zeros for ints and bools).

    Raises:
        ValueError: "already exists, disallowed" (exists, not reusing); "does not exist,
            or was not created with tf.get_variable()" (reuse=True, missing); "Trying to
            share variable" (shape or dtype mismatch); a constant initializer together with
            a shape; a shape that is not fully defined for a shape-needing initializer.
    """
    return get_variable_scope().get_variable(
        name, shape=shape, dtype=dtype, initializer=initializer, regularizer=regularizer,
        trainable=trainable, collections=collections, validate_shape=validate_shape)


def get_local_variable(name: str, shape: Any = None, dtype: Any = None, initializer: Any = None,
                       collections: Any = None, **kwargs: Any) -> Variable:
    """As ``get_variable`` but in ``LOCAL_VARIABLES`` and never trainable."""
    cols = [GraphKeys.LOCAL_VARIABLES] + list(collections or [])
    return get_variable(name, shape, dtype, initializer, trainable=False, collections=cols,
                        **kwargs)
