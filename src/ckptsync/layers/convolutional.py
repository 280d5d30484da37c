"""``Conv1D``, ``Conv2D``, ``MaxPooling2D``/``AveragePooling2D`` (and 1-D pools) with their
functions, as TF1's ``tf.layers``.

Kernels are ``[kh, kw, in, filters]`` (``[k, in, filters]`` for 1-D) whatever the data
format; ``channels_first`` inputs are transposed to channels-last around the op (TF runs
NCHW kernels natively; values agree, op names inside differ).
"""

from __future__ import annotations

from typing import Any

from ..errors import CkptsyncValueError
from ..graph import Tensor, name_scope
from ..initializers import zeros_initializer
from ..ops.array_ops import expand_dims, shape, squeeze, transpose
from ..ops.conv_ops import conv2d as _nn_conv2d
from ..ops.conv_ops import conv2d_transpose as _nn_conv2d_transpose
from ..ops.nn_ops import bias_add
from ..ops.pool_ops import avg_pool, max_pool
from .base import InputSpec, Layer, as_tuple, data_format_of, padding_of

__all__ = [
    "Conv1D", "conv1d", "Conv2D", "conv2d", "Convolution1D", "Convolution2D",
    "MaxPooling1D", "max_pooling1d", "MaxPooling2D", "max_pooling2d",
    "AveragePooling1D", "average_pooling1d", "AveragePooling2D", "average_pooling2d",
    "MaxPool1D", "MaxPool2D", "AveragePooling", "AvgPool2D",
]

_TO_LAST = {3: [0, 2, 1], 4: [0, 2, 3, 1]}
_TO_FIRST = {3: [0, 2, 1], 4: [0, 3, 1, 2]}


class _Conv(Layer):
    rank = 2

    def __init__(self, filters: int, kernel_size: Any, strides: Any = 1,
                 padding: str = "valid", data_format: str = "channels_last",
                 dilation_rate: Any = 1, activation: Any = None, use_bias: bool = True,
                 kernel_initializer: Any = None, bias_initializer: Any = None,
                 kernel_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, trainable: bool = True, name: str | None = None,
                 **kwargs: Any):
        super().__init__(trainable=trainable, name=name,
                         activity_regularizer=activity_regularizer, **kwargs)
        layer = type(self).__name__
        self.filters = int(filters)
        if self.filters <= 0:
            raise CkptsyncValueError(f"Invalid value for argument `filters`. Expected a strictly "
                                     f"positive value. Received filters={filters}.")
        self.kernel_size = as_tuple(kernel_size, self.rank, "kernel_size", layer)
        self.strides = as_tuple(strides, self.rank, "strides", layer)
        self.padding = padding_of(padding, layer)
        self.data_format = data_format_of(data_format, layer)
        self.dilation_rate = as_tuple(dilation_rate, self.rank, "dilation_rate", layer)
        if max(self.strides) > 1 and max(self.dilation_rate) > 1:
            raise CkptsyncValueError(f"{layer}: `strides > 1` not supported in conjunction with "
                                     f"`dilation_rate > 1`. Received: strides={self.strides} "
                                     f"and dilation_rate={self.dilation_rate}")
        self.activation, self.use_bias = activation, use_bias
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = zeros_initializer() if bias_initializer is None else bias_initializer
        self.kernel_regularizer, self.bias_regularizer = kernel_regularizer, bias_regularizer
        self.kernel_constraint, self.bias_constraint = kernel_constraint, bias_constraint
        self.input_spec = InputSpec(ndim=self.rank + 2)
        self.kernel: Any = None
        self.bias: Any = None

    def _channel_axis(self) -> int:
        return 1 if self.data_format == "channels_first" else -1

    def build(self, input_shape: Any) -> None:
        c = input_shape.as_list()[self._channel_axis()]
        if c is None:
            raise CkptsyncValueError("The channel dimension of the inputs should be defined. "
                                     f"The input_shape received is {input_shape}, where axis "
                                     f"{self._channel_axis()} (0-based) is the channel "
                                     "dimension, which found to be `None`.")
        self.input_spec = InputSpec(ndim=self.rank + 2, axes={self._channel_axis(): c})
        self.kernel = self.add_weight("kernel", [*self.kernel_size, c, self.filters],
                                      initializer=self.kernel_initializer,
                                      regularizer=self.kernel_regularizer,
                                      constraint=self.kernel_constraint, trainable=True)
        if self.use_bias:
            self.bias = self.add_weight("bias", [self.filters], initializer=self.bias_initializer,
                                        regularizer=self.bias_regularizer,
                                        constraint=self.bias_constraint, trainable=True)
        self.built = True

    def _conv(self, x: Tensor) -> Tensor:
        if self.rank == 2:
            return _nn_conv2d(x, self.kernel, strides=[1, *self.strides, 1],
                              padding=self.padding, dilations=[1, *self.dilation_rate, 1],
                              name="Conv2D")
        # As tf.nn.conv1d: a Conv2D over [batch, 1, width, C] under the ``conv1d`` scope.
        with name_scope("conv1d"):
            x4 = expand_dims(x, 1, name="ExpandDims")
            w4 = expand_dims(self.kernel, 0, name="ExpandDims_1")
            y = _nn_conv2d(x4, w4, strides=[1, 1, self.strides[0], 1], padding=self.padding,
                           dilations=[1, 1, self.dilation_rate[0], 1], name="Conv2D")
            return squeeze(y, [1])

    def call(self, inputs: Tensor) -> Tensor:
        rank = self.rank + 2
        x = inputs
        if self.data_format == "channels_first":
            x = transpose(x, _TO_LAST[rank])
        out = self._conv(x)
        if self.use_bias:
            out = bias_add(out, self.bias)
        if self.data_format == "channels_first":
            out = transpose(out, _TO_FIRST[rank])
        if self.activation is not None:
            out = self.activation(out)
        return out


class Conv2D(_Conv):
    """2-D convolution, as ``tf.layers.Conv2D``: inputs ``[batch, h, w, C]`` (or
    ``[batch, C, h, w]`` with ``channels_first``), kernel ``[kh, kw, C, filters]``
    (glorot-uniform), bias ``[filters]`` (zeros); ``padding`` ``"valid"`` or ``"same"``.

    Raises:
        ValueError: input rank other than 4, unknown channels, bad sizes or padding.
    """

    rank = 2


class Conv1D(_Conv):
    """1-D convolution, as ``tf.layers.Conv1D``: inputs ``[batch, width, C]``, kernel
    ``[k, C, filters]``; a ``Conv2D`` on ``[batch, 1, width, C]`` as ``tf.nn.conv1d``."""

    rank = 1


Convolution1D, Convolution2D = Conv1D, Conv2D


def _conv_fn(cls: type, inputs: Any, filters: int, kernel_size: Any, strides: Any,
             padding: str, data_format: str, dilation_rate: Any, activation: Any,
             use_bias: bool, kernel_initializer: Any, bias_initializer: Any,
             kernel_regularizer: Any, bias_regularizer: Any, activity_regularizer: Any,
             kernel_constraint: Any, bias_constraint: Any, trainable: bool, name: Any,
             reuse: Any) -> Tensor:
    layer = cls(filters, kernel_size, strides=strides, padding=padding, data_format=data_format,
                dilation_rate=dilation_rate, activation=activation, use_bias=use_bias,
                kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
                kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
                bias_constraint=bias_constraint, trainable=trainable, name=name, _reuse=reuse,
                _scope=name)
    return layer.apply(inputs)


def conv2d(inputs: Any, filters: int, kernel_size: Any, strides: Any = (1, 1),
           padding: str = "valid", data_format: str = "channels_last",
           dilation_rate: Any = (1, 1), activation: Any = None, use_bias: bool = True,
           kernel_initializer: Any = None, bias_initializer: Any = None,
           kernel_regularizer: Any = None, bias_regularizer: Any = None,
           activity_regularizer: Any = None, kernel_constraint: Any = None,
           bias_constraint: Any = None, trainable: bool = True, name: str | None = None,
           reuse: Any = None) -> Tensor:
    """A 2-D convolution layer on ``inputs [batch, h, w, C]``, as ``tf.layers.conv2d`` (see
    :class:`Conv2D`): ``[batch, out_h, out_w, filters]``."""
    return _conv_fn(Conv2D, inputs, filters, kernel_size, strides, padding, data_format,
                    dilation_rate, activation, use_bias, kernel_initializer, bias_initializer,
                    kernel_regularizer, bias_regularizer, activity_regularizer,
                    kernel_constraint, bias_constraint, trainable, name, reuse)


def conv1d(inputs: Any, filters: int, kernel_size: Any, strides: Any = 1,
           padding: str = "valid", data_format: str = "channels_last",
           dilation_rate: Any = 1, activation: Any = None, use_bias: bool = True,
           kernel_initializer: Any = None, bias_initializer: Any = None,
           kernel_regularizer: Any = None, bias_regularizer: Any = None,
           activity_regularizer: Any = None, kernel_constraint: Any = None,
           bias_constraint: Any = None, trainable: bool = True, name: str | None = None,
           reuse: Any = None) -> Tensor:
    """A 1-D convolution layer on ``inputs [batch, width, C]``, as ``tf.layers.conv1d``
    (see :class:`Conv1D`): ``[batch, out_width, filters]``."""
    return _conv_fn(Conv1D, inputs, filters, kernel_size, strides, padding, data_format,
                    dilation_rate, activation, use_bias, kernel_initializer, bias_initializer,
                    kernel_regularizer, bias_regularizer, activity_regularizer,
                    kernel_constraint, bias_constraint, trainable, name, reuse)


class _Pool(Layer):
    rank = 2
    op = "MaxPool"

    def __init__(self, pool_size: Any, strides: Any = None, padding: str = "valid",
                 data_format: str = "channels_last", name: str | None = None, **kwargs: Any):
        super().__init__(name=name, **kwargs)
        layer = type(self).__name__
        self.pool_size = as_tuple(pool_size, self.rank, "pool_size", layer)
        self.strides = as_tuple(pool_size if strides is None else strides, self.rank,
                                "strides", layer)
        self.padding = padding_of(padding, layer)
        self.data_format = data_format_of(data_format, layer)
        self.input_spec = InputSpec(ndim=self.rank + 2)

    def call(self, inputs: Tensor) -> Tensor:
        rank = self.rank + 2
        x = inputs
        if self.data_format == "channels_first":
            x = transpose(x, _TO_LAST[rank])
        fn = max_pool if self.op == "MaxPool" else avg_pool
        if self.rank == 2:
            out = fn(x, [1, *self.pool_size, 1], [1, *self.strides, 1], self.padding,
                     name=self.op)
        else:
            x4 = expand_dims(x, 1)
            out = squeeze(fn(x4, [1, 1, self.pool_size[0], 1], [1, 1, self.strides[0], 1],
                             self.padding, name=self.op), [1])
        if self.data_format == "channels_first":
            out = transpose(out, _TO_FIRST[rank])
        return out


class MaxPooling2D(_Pool):
    """Max over ``pool_size`` windows, as ``tf.layers.MaxPooling2D`` (op ``MaxPool``):
    ``[batch, h, w, C]`` -> ``[batch, out_h, out_w, C]``; ``strides`` default
    ``pool_size``."""


class AveragePooling2D(_Pool):
    """Mean over ``pool_size`` windows, as ``tf.layers.AveragePooling2D`` (op ``AvgPool``;
    ``"same"`` padding averages over the valid taps only)."""

    op = "AvgPool"


class MaxPooling1D(_Pool):
    """Max over windows of ``[batch, width, C]``, as ``tf.layers.MaxPooling1D``."""

    rank = 1


class AveragePooling1D(_Pool):
    """Mean over windows of ``[batch, width, C]``, as ``tf.layers.AveragePooling1D``."""

    rank, op = 1, "AvgPool"


MaxPool1D, MaxPool2D, AvgPool2D = MaxPooling1D, MaxPooling2D, AveragePooling2D
AveragePooling = AveragePooling2D


def max_pooling2d(inputs: Any, pool_size: Any, strides: Any, padding: str = "valid",
                  data_format: str = "channels_last", name: str | None = None) -> Tensor:
    """Max pooling, as ``tf.layers.max_pooling2d`` (see :class:`MaxPooling2D`)."""
    return MaxPooling2D(pool_size, strides, padding, data_format, name=name).apply(inputs)


def average_pooling2d(inputs: Any, pool_size: Any, strides: Any, padding: str = "valid",
                      data_format: str = "channels_last", name: str | None = None) -> Tensor:
    """Average pooling, as ``tf.layers.average_pooling2d`` (see :class:`AveragePooling2D`)."""
    return AveragePooling2D(pool_size, strides, padding, data_format, name=name).apply(inputs)


def max_pooling1d(inputs: Any, pool_size: Any, strides: Any, padding: str = "valid",
                  data_format: str = "channels_last", name: str | None = None) -> Tensor:
    """1-D max pooling, as ``tf.layers.max_pooling1d``."""
    return MaxPooling1D(pool_size, strides, padding, data_format, name=name).apply(inputs)


def average_pooling1d(inputs: Any, pool_size: Any, strides: Any, padding: str = "valid",
                      data_format: str = "channels_last", name: str | None = None) -> Tensor:
    """1-D average pooling, as ``tf.layers.average_pooling1d``."""
    return AveragePooling1D(pool_size, strides, padding, data_format, name=name).apply(inputs)


class Conv2DTranspose(Conv2D):
    """Transposed 2-D convolution, as ``tf.layers.Conv2DTranspose``: inputs
    ``[batch, h, w, C]``, kernel ``[kh, kw, filters, C]``, output
    ``[batch, h * stride + max(kh - stride, 0), ..., filters]`` (``"valid"``) or
    ``[batch, h * stride, w * stride, filters]`` (``"same"``); a
    ``Conv2DBackpropInput`` op (``conv2d_transpose``).

    Raises:
        ValueError: input rank other than 4, unknown channels, a ``dilation_rate`` other
            than 1 (not supported here).
    """

    def __init__(self, filters: int, kernel_size: Any, strides: Any = (1, 1),
                 padding: str = "valid", data_format: str = "channels_last",
                 **kwargs: Any):
        super().__init__(filters, kernel_size, strides=strides, padding=padding,
                         data_format=data_format, **kwargs)
        if max(self.dilation_rate) > 1:
            raise CkptsyncValueError("Conv2DTranspose: dilation_rate > 1 is not supported by "
                                     "ckptsync.")

    def build(self, input_shape: Any) -> None:
        c = input_shape.as_list()[self._channel_axis()]
        if c is None:
            raise CkptsyncValueError("The channel dimension of the inputs to `Conv2DTranspose` "
                                     f"should be defined. Found `None`: {input_shape}")
        self.input_spec = InputSpec(ndim=4, axes={self._channel_axis(): c})
        self.kernel = self.add_weight("kernel", [*self.kernel_size, self.filters, c],
                                      initializer=self.kernel_initializer,
                                      regularizer=self.kernel_regularizer,
                                      constraint=self.kernel_constraint, trainable=True)
        if self.use_bias:
            self.bias = self.add_weight("bias", [self.filters], initializer=self.bias_initializer,
                                        regularizer=self.bias_regularizer,
                                        constraint=self.bias_constraint, trainable=True)
        self.built = True

    def _conv(self, x: Tensor) -> Tensor:
        dyn = shape(x)
        dims = x.shape.as_list()
        out: list[Any] = [dyn[0]]
        for i, (k, s) in enumerate(zip(self.kernel_size, self.strides)):
            n = dims[1 + i]
            size = n if n is not None else dyn[1 + i]
            out.append(size * s + max(k - s, 0) if self.padding == "VALID" else size * s)
        out.append(self.filters)
        return _nn_conv2d_transpose(x, self.kernel, out, strides=[1, *self.strides, 1],
                                padding=self.padding, name="conv2d_transpose")


Convolution2DTranspose = Conv2DTranspose


def conv2d_transpose(inputs: Any, filters: int, kernel_size: Any, strides: Any = (1, 1),
                     padding: str = "valid", data_format: str = "channels_last",
                     activation: Any = None, use_bias: bool = True, kernel_initializer: Any = None,
                     bias_initializer: Any = None, kernel_regularizer: Any = None,
                     bias_regularizer: Any = None, activity_regularizer: Any = None,
                     kernel_constraint: Any = None, bias_constraint: Any = None,
                     trainable: bool = True, name: str | None = None, reuse: Any = None
                     ) -> Tensor:
    """A transposed 2-D convolution layer, as ``tf.layers.conv2d_transpose`` (see
    :class:`Conv2DTranspose`)."""
    layer = Conv2DTranspose(filters, kernel_size, strides=strides, padding=padding,
                            data_format=data_format, activation=activation, use_bias=use_bias,
                            kernel_initializer=kernel_initializer,
                            bias_initializer=bias_initializer,
                            kernel_regularizer=kernel_regularizer,
                            bias_regularizer=bias_regularizer,
                            activity_regularizer=activity_regularizer,
                            kernel_constraint=kernel_constraint,
                            bias_constraint=bias_constraint, trainable=trainable, name=name,
                            _reuse=reuse, _scope=name)
    return layer.apply(inputs)


__all__ += ["Conv2DTranspose", "Convolution2DTranspose", "conv2d_transpose"]
