"""The base of ``cs.layers``: TF1's ``tf.layers.Layer`` (``tf.compat.v1.layers.Layer``).

A layer owns a variable scope, made when it is first called: ``variable_scope(None,
default_name=<snake_case class name>)`` for a layer built as an object (``dense``,
``dense_1``, ...), ``variable_scope(name)`` made at construction for the functions'
``name=`` (and when the object was given ``_scope``). Its variables are made with
``get_variable`` in that scope (``dense/kernel``), its ops under the scope's first name
scope (``dense/MatMul``); calling the same object again reuses its variables. Weight
regularizer losses are built under ``<layer scope>/<weight>/Regularizer/`` and activity
losses under ``<layer scope>/ActivityRegularizer/``, all added to
``GraphKeys.REGULARIZATION_LOSSES``; a layer's ``updates`` (batch norm's moving
averages) go to ``GraphKeys.UPDATE_OPS`` after each call. As ``tf_keras``'s
``legacy_tf_layers/base.py``.
"""

from __future__ import annotations

import re
import weakref
from typing import Any

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import GraphKeys, Tensor, get_default_graph
from ..ops.array_ops import convert_to_tensor, shape
from ..ops.math_ops import cast, divide
from ..variable_scope import VariableScope, get_variable, variable_scope
from ..variables import global_variables

__all__ = ["Layer", "InputSpec"]

# graph -> {base name: count}: the ``layer.name`` counters (keras' per-graph uid map).
_NAME_UIDS: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()


def to_snake_case(name: str) -> str:
    """``"MaxPooling2D"`` -> ``"max_pooling2d"``, as keras' ``to_snake_case``."""
    intermediate = re.sub("(.)([A-Z][a-z0-9]+)", r"\1_\2", name)
    insecure = re.sub("([a-z])([A-Z])", r"\1_\2", intermediate).lower()
    if insecure[0] != "_":
        return insecure
    return "private" + insecure


def _unique_layer_name(base: str) -> str:
    uids = _NAME_UIDS.setdefault(get_default_graph(), {})
    n = uids.get(base, 0)
    uids[base] = n + 1
    return f"{base}_{n + 1}"  # one-based, as the legacy layers' keras uid map


def _add_to_collection(items: list[Any], key: str) -> None:
    ref = get_default_graph().get_collection_ref(key)
    have = {id(e) for e in ref}
    for item in items:
        if id(item) not in have:
            ref.append(item)
            have.add(id(item))


class InputSpec:
    """What a layer accepts, as ``tf.layers.InputSpec``: ``ndim``, ``min_ndim``,
    ``max_ndim`` and ``axes`` (``{axis: size}``), checked on each call."""

    def __init__(self, dtype: Any = None, shape: Any = None, ndim: int | None = None,
                 max_ndim: int | None = None, min_ndim: int | None = None,
                 axes: dict[int, int] | None = None):
        self.dtype, self.shape = dtype, shape
        self.ndim, self.max_ndim, self.min_ndim = ndim, max_ndim, min_ndim
        self.axes = dict(axes or {})

    def check(self, layer: str, t: Tensor) -> None:
        nd = t.shape.ndims
        if nd is None:
            return
        if self.ndim is not None and nd != self.ndim:
            raise CkptsyncValueError(f"Input 0 of layer {layer} is incompatible with the layer: "
                                     f"expected ndim={self.ndim}, found ndim={nd}. Full shape "
                                     f"received: {t.shape}")
        if self.min_ndim is not None and nd < self.min_ndim:
            raise CkptsyncValueError(f"Input 0 of layer {layer} is incompatible with the layer: "
                                     f"expected min_ndim={self.min_ndim}, found ndim={nd}. "
                                     f"Full shape received: {t.shape}")
        if self.max_ndim is not None and nd > self.max_ndim:
            raise CkptsyncValueError(f"Input 0 of layer {layer} is incompatible with the layer: "
                                     f"expected max_ndim={self.max_ndim}, found ndim={nd}. "
                                     f"Full shape received: {t.shape}")
        dims = t.shape.as_list()
        for axis, size in self.axes.items():
            got = dims[axis]
            if size is not None and got is not None and got != size:
                raise CkptsyncValueError(
                    f"Input 0 of layer {layer} is incompatible with the layer: expected axis "
                    f"{axis} of input shape to have value {size}, but received input with "
                    f"shape {t.shape}")


class Layer:
    """A TF1 layer: variables in a variable scope of its own, shared across calls.

    Args:
        trainable: whether its trainable weights go to ``TRAINABLE_VARIABLES``.
        name: the layer's name (default: its snake-case class name numbered from 1 in
            the graph, ``dense_1``, ``dense_2``, as TF1, while its variable scope is
            ``dense``, ``dense_1``).
        dtype: of its variables; by default the dtype of its first input.

    Attributes:
        variables/weights, trainable_variables/trainable_weights, non_trainable_variables,
        losses (regularization tensors), updates (moving-average assigns), built, name,
        scope_name.

    Raises:
        TypeError: an unknown keyword argument.
    """

    def __init__(self, trainable: bool = True, name: str | None = None, dtype: Any = None,
                 activity_regularizer: Any = None, **kwargs: Any):
        scope = kwargs.pop("_scope", None)
        self._reuse = kwargs.pop("_reuse", None)
        for k in kwargs:
            if k not in ("input_shape", "batch_input_shape", "batch_size", "autocast"):
                raise CkptsyncTypeError(f"Keyword argument not understood: {k}")
        self.trainable = bool(trainable)
        self.built = False
        self.activity_regularizer = activity_regularizer
        self.input_spec: InputSpec | None = None
        self._dtype = None if dtype is None else _dtypes.as_dtype(dtype)
        self._trainable_weights: list[Any] = []
        self._non_trainable_weights: list[Any] = []
        self._losses: list[Tensor] = []
        self._updates: list[Any] = []
        self._name: str
        if isinstance(name, VariableScope):
            base = name.name
            self._name = _unique_layer_name(to_snake_case(type(self).__name__))
        elif name:
            base = self._name = str(name)
        else:
            self._name = _unique_layer_name(to_snake_case(type(self).__name__))
            base = to_snake_case(type(self).__name__)
        self._base_name = base
        self._scope: VariableScope | None = None
        if scope:
            with variable_scope(scope) as captured:
                self._scope = captured

    # ------------------------------------------------------------------ properties
    @property
    def name(self) -> str:
        return self._name

    @property
    def dtype(self) -> Any:
        return self._dtype

    @property
    def scope_name(self) -> str:
        if self._scope is None:
            raise CkptsyncValueError("No name available for layer scope because the layer "
                                     f'"{self._name}" has not been used yet. The scope name is '
                                     "determined the first time the layer instance is called.")
        return self._scope.name

    @property
    def trainable_weights(self) -> list[Any]:
        return list(self._trainable_weights) if self.trainable else []

    @property
    def non_trainable_weights(self) -> list[Any]:
        if self.trainable:
            return list(self._non_trainable_weights)
        return self._trainable_weights + self._non_trainable_weights

    @property
    def weights(self) -> list[Any]:
        return self.trainable_weights + self.non_trainable_weights

    trainable_variables = trainable_weights
    non_trainable_variables = non_trainable_weights
    variables = weights

    @property
    def losses(self) -> list[Tensor]:
        return list(self._losses)

    @property
    def updates(self) -> list[Any]:
        return list(self._updates)

    def get_weights(self) -> list[Any]:
        raise CkptsyncValueError("get_weights needs a session in graph mode: run "
                                 "layer.variables with Session.run instead.")

    # ------------------------------------------------------------------ building
    def build(self, input_shape: Any) -> None:
        self.built = True

    def call(self, inputs: Any) -> Any:
        """The layer's computation (subclasses override it; extra keyword arguments such
        as ``training`` come from the call)."""
        return inputs

    def add_loss(self, losses: Any, inputs: Any = None) -> None:
        items = losses if isinstance(losses, (list, tuple)) else [losses]
        items = [convert_to_tensor(x) for x in items if x is not None]
        self._losses.extend(items)
        _add_to_collection(items, GraphKeys.REGULARIZATION_LOSSES)

    def add_update(self, updates: Any, inputs: Any = None) -> None:
        items = updates if isinstance(updates, (list, tuple)) else [updates]
        self._updates.extend(items)

    def _set_scope(self, scope: Any = None) -> None:
        if self._scope is None:
            if self._reuse:
                with variable_scope(scope if scope is not None else self._base_name) as captured:
                    self._scope = captured
            else:
                with variable_scope(scope, default_name=self._base_name) as captured:
                    self._scope = captured

    def add_weight(self, name: str, shape: Any, dtype: Any = None, initializer: Any = None,
                   regularizer: Any = None, trainable: bool | None = None,
                   constraint: Any = None, **kwargs: Any) -> Any:
        """Gets or makes ``<layer scope>/<name>`` with ``get_variable``; a new one's
        ``regularizer(variable)`` is added to the layer's losses (under
        ``<name>/Regularizer/``)."""
        trainable = True if trainable is None else bool(trainable)
        dt = _dtypes.as_dtype(dtype) if dtype is not None else (self._dtype or _dtypes.float32)
        existing = {id(v) for v in global_variables()}
        self._set_scope(None)
        assert self._scope is not None
        reuse = self.built or self._reuse
        graph = get_default_graph()
        with variable_scope(self._scope, reuse=reuse or None, auxiliary_name_scope=False) as sc:
            with graph.name_scope(self._scope.original_name_scope or None):
                if initializer is None:
                    initializer = sc.initializer
                v = get_variable(name, shape, dtype=dt, initializer=initializer,
                                 trainable=trainable and self.trainable, constraint=constraint)
                if regularizer is not None and id(v) not in existing:
                    with graph.name_scope(f"{name}/Regularizer"):
                        loss = regularizer(v)
                    if loss is not None:
                        self.add_loss(loss)
        if v.trainable or (trainable and id(v) in existing):
            if all(w is not v for w in self._trainable_weights):
                self._trainable_weights.append(v)
        elif all(w is not v for w in self._non_trainable_weights):
            self._non_trainable_weights.append(v)
        return v

    add_variable = add_weight

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        """Builds the layer on its first call, then runs :meth:`call` on ``inputs``
        (ops under the layer's name scope)."""
        scope = kwargs.pop("scope", None)
        self._set_scope(scope)
        assert self._scope is not None
        graph = get_default_graph()
        reuse = True if self.built else self._reuse
        with variable_scope(self._scope, reuse=reuse or None, auxiliary_name_scope=False):
            with graph.name_scope(self._scope.original_name_scope or None):
                x = convert_to_tensor(inputs) if not isinstance(inputs, (list, tuple)) else inputs
                if isinstance(x, Tensor):
                    if self._dtype is None:
                        self._dtype = (x.dtype.base_dtype if x.dtype.is_floating
                                       else _dtypes.float32)
                    if self.input_spec is not None:
                        self.input_spec.check(self._name, x)
                if not self.built:
                    self.build(x.shape if isinstance(x, Tensor) else [t.shape for t in x])
                    self.built = True
                outputs = self.call(x, *args, **kwargs)
                if self.activity_regularizer is not None and isinstance(outputs, Tensor):
                    with graph.name_scope("ActivityRegularizer"):
                        loss = self.activity_regularizer(outputs)
                        batch = cast(shape(outputs)[0], loss.dtype)
                        self.add_loss(divide(loss, batch, name="truediv"))
        _add_to_collection(self._updates, GraphKeys.UPDATE_OPS)
        return outputs

    def apply(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        """The same as calling the layer, as ``tf.layers.Layer.apply``."""
        return self(inputs, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__name__} name={self._name!r}>"


def as_tuple(value: Any, n: int, arg: str, layer: str) -> tuple[int, ...]:
    """An int or ``n`` ints as an ``n``-tuple (keras' ``conv_utils.normalize_tuple``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * n
    try:
        out = tuple(int(v) for v in value)
    except TypeError:
        raise CkptsyncValueError(f"{layer}: the `{arg}` argument must be a tuple of {n} "
                                 f"integers. Received: {value!r}") from None
    if len(out) != n:
        raise CkptsyncValueError(f"{layer}: the `{arg}` argument must be a tuple of {n} "
                                 f"integers. Received: {value!r}")
    return out


def padding_of(value: Any, layer: str) -> str:
    p = str(value).lower()
    if p not in ("valid", "same"):
        raise CkptsyncValueError(f"{layer}: the `padding` argument must be one of 'valid', "
                                 f"'same'. Received: {value!r}")
    return p.upper()


def data_format_of(value: Any, layer: str) -> str:
    f = "channels_last" if value is None else str(value).lower()
    if f not in ("channels_last", "channels_first"):
        raise CkptsyncValueError(f"{layer}: the `data_format` argument must be one of "
                                 f"'channels_first', 'channels_last'. Received: {value!r}")
    return f
