"""``Dense``, ``Dropout`` and ``Flatten`` with their functions, as TF1's ``tf.layers``."""

from __future__ import annotations

import functools
import operator
from typing import Any

from .. import dtypes as _dtypes
from ..errors import CkptsyncValueError
from ..graph import Tensor
from ..initializers import zeros_initializer
from ..ops.array_ops import constant, expand_dims, identity, reshape, shape, transpose
from ..ops.control_flow_ops import cond
from ..ops.linalg_ops import tensordot
from ..ops.math_ops import cast, matmul
from ..ops.nn_dropout import dropout as _nn_dropout
from ..ops.nn_ops import bias_add
from .base import InputSpec, Layer, data_format_of

__all__ = ["Dense", "dense", "Dropout", "dropout", "Flatten", "flatten"]


class Dense(Layer):
    """``activation(inputs @ kernel + bias)``, as ``tf.layers.Dense``.

    Variables: ``kernel`` ``[in, units]`` (glorot-uniform unless ``kernel_initializer``
    or the variable scope's initializer), ``bias`` ``[units]`` (zeros), both trainable.
    Inputs ``[..., in]`` with ``in`` known; rank 2 is one ``MatMul`` (op ``dense/MatMul``),
    higher ranks a ``Tensordot`` over the last axis; then ``BiasAdd`` and the activation.

    Raises:
        ValueError: the last dimension of the input is unknown, or the input rank < 2.
    """

    def __init__(self, units: int, activation: Any = None, use_bias: bool = True,
                 kernel_initializer: Any = None, bias_initializer: Any = None,
                 kernel_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, trainable: bool = True, name: str | None = None,
                 **kwargs: Any):
        super().__init__(trainable=trainable, name=name,
                         activity_regularizer=activity_regularizer, **kwargs)
        self.units = int(units)
        if self.units <= 0:
            raise CkptsyncValueError(f"Received an invalid value for `units`, expected a "
                                     f"positive integer. Received: units={units}")
        self.activation = activation
        self.use_bias = use_bias
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = zeros_initializer() if bias_initializer is None else bias_initializer
        self.kernel_regularizer, self.bias_regularizer = kernel_regularizer, bias_regularizer
        self.kernel_constraint, self.bias_constraint = kernel_constraint, bias_constraint
        self.input_spec = InputSpec(min_ndim=2)
        self.kernel: Any = None
        self.bias: Any = None

    def build(self, input_shape: Any) -> None:
        last = input_shape.as_list()[-1] if input_shape.ndims else None
        if last is None:
            raise CkptsyncValueError("The last dimension of the inputs to a Dense layer should "
                                     f"be defined. Found None. Full input shape received: "
                                     f"{input_shape}")
        self.input_spec = InputSpec(min_ndim=2, axes={-1: last})
        self.kernel = self.add_weight("kernel", [last, self.units],
                                      initializer=self.kernel_initializer,
                                      regularizer=self.kernel_regularizer,
                                      constraint=self.kernel_constraint, trainable=True)
        if self.use_bias:
            self.bias = self.add_weight("bias", [self.units], initializer=self.bias_initializer,
                                        regularizer=self.bias_regularizer,
                                        constraint=self.bias_constraint, trainable=True)
        self.built = True

    def call(self, inputs: Tensor) -> Tensor:
        if inputs.dtype.base_dtype != self.kernel.dtype.base_dtype:
            inputs = cast(inputs, self.kernel.dtype.base_dtype)
        rank = int(inputs.shape.ndims or 0)
        if rank == 2:
            out = matmul(inputs, self.kernel)
        else:
            out = tensordot(inputs, self.kernel, [[rank - 1], [0]])
        if self.use_bias:
            out = bias_add(out, self.bias)
        if self.activation is not None:
            out = self.activation(out)
        return out


def dense(inputs: Any, units: int, activation: Any = None, use_bias: bool = True,
          kernel_initializer: Any = None, bias_initializer: Any = None,
          kernel_regularizer: Any = None, bias_regularizer: Any = None,
          activity_regularizer: Any = None, kernel_constraint: Any = None,
          bias_constraint: Any = None, trainable: bool = True, name: str | None = None,
          reuse: Any = None) -> Tensor:
    """A densely connected layer on ``inputs [..., in]`` -> ``[..., units]``, as
    ``tf.layers.dense`` (see :class:`Dense`); ``name``/``reuse`` pick and share its
    variable scope."""
    layer = Dense(units, activation=activation, use_bias=use_bias,
                  kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
                  kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                  activity_regularizer=activity_regularizer,
                  kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
                  trainable=trainable, name=name, _scope=name, _reuse=reuse)
    return layer.apply(inputs)


def _is_tensor(v: Any) -> bool:
    return isinstance(v, Tensor) or hasattr(v, "_as_graph_element")


class Dropout(Layer):
    """Drops entries with probability ``rate`` (kept ones scaled by ``1 / (1 - rate)``)
    when ``training``, as ``tf.layers.Dropout``; ``training`` may be a bool or a scalar
    bool tensor (a ``cond`` then picks, as TF's ``smart_cond``). Output like the input.

    Raises:
        ValueError: a rate outside ``[0, 1]``.
    """

    def __init__(self, rate: float = 0.5, noise_shape: Any = None, seed: int | None = None,
                 name: str | None = None, **kwargs: Any):
        super().__init__(name=name, **kwargs)
        if not _is_tensor(rate) and not 0 <= float(rate) <= 1:
            raise CkptsyncValueError(f"Invalid value {rate} received for `rate`, expected a "
                                     "value between 0 and 1.")
        self.rate, self.noise_shape, self.seed = rate, noise_shape, seed

    def call(self, inputs: Tensor, training: Any = False) -> Tensor:
        if not _is_tensor(self.rate) and float(self.rate) == 1.0:
            drop = lambda: inputs * 0.0  # noqa: E731 - keras drops everything
        else:
            def drop() -> Tensor:
                return _nn_dropout(inputs, noise_shape=self.noise_shape, seed=self.seed,
                                   rate=self.rate)
        if not _is_tensor(training):  # a Python or numpy bool, or None
            return drop() if training else identity(inputs)
        return cond(training, drop, lambda: identity(inputs))


def dropout(inputs: Any, rate: float = 0.5, noise_shape: Any = None, seed: int | None = None,
            training: Any = False, name: str | None = None) -> Tensor:
    """Dropout on ``inputs``, as ``tf.layers.dropout``: identity unless ``training`` (default
    False; a bool or a scalar bool tensor). See :class:`Dropout`."""
    return Dropout(rate, noise_shape=noise_shape, seed=seed, name=name).apply(
        inputs, training=training)


class Flatten(Layer):
    """``[batch, d1, d2, ...]`` -> ``[batch, d1 * d2 * ...]``, as ``tf.layers.Flatten``
    (``channels_first`` inputs are moved to channels-last order first; a rank-1 input
    becomes ``[batch, 1]``).

    Raises:
        ValueError: a bad ``data_format``.
    """

    def __init__(self, data_format: str | None = None, name: str | None = None, **kwargs: Any):
        super().__init__(name=name, **kwargs)
        self.data_format = data_format_of(data_format, "Flatten")
        self.input_spec = InputSpec(min_ndim=1)

    def call(self, inputs: Tensor) -> Tensor:
        rank = inputs.shape.ndims
        if self.data_format == "channels_first" and rank is not None and rank > 2:
            inputs = transpose(inputs, [0, *range(2, rank), 1])
        if rank == 1:
            return expand_dims(inputs, 1)
        dims = inputs.shape.as_list() if rank is not None else None
        if dims is not None and all(d is not None for d in dims[1:]):
            last = int(functools.reduce(operator.mul, dims[1:], 1))
            target: Any = constant([-1, last], dtype=_dtypes.int32)
        elif dims is not None and dims[0] is not None:
            target = constant([int(dims[0]), -1], dtype=_dtypes.int32)
        else:
            target = [shape(inputs)[0], -1]
        return reshape(inputs, target)


def flatten(inputs: Any, name: str | None = None, data_format: str = "channels_last") -> Tensor:
    """Flattens all but the first dimension, as ``tf.layers.flatten``: ``[batch, ...]`` ->
    ``[batch, prod(...)]``."""
    return Flatten(name=name, data_format=data_format).apply(inputs)
