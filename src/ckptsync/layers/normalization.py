"""``BatchNormalization`` and ``batch_normalization``, as TF1's ``tf.layers``.

Variables (``[C]``, ``C`` the size of ``axis``): ``gamma`` (ones, if ``scale``), ``beta``
(zeros, if ``center``), both trainable; ``moving_mean`` (zeros) and ``moving_variance``
(ones), in ``GLOBAL_VARIABLES`` only. A 4-D input normalized over axis 3 (-1) or 1 runs
one ``FusedBatchNormV3`` (NHWC or NCHW); other inputs the ``moments`` /
``tf.nn.batch_normalization`` ops. In training the batch's statistics normalize (biased
variance) and ``var -= (var - batch_stat) * (1 - momentum)`` is added to
``GraphKeys.UPDATE_OPS`` (ops ``AssignMovingAvg``, ``AssignMovingAvg_1``) — as TF, the
fused path feeds the moving variance the Bessel-corrected batch variance
(``n / (n - 1)``), the other path the biased one. A static ``training=False`` adds no
updates. A bool tensor ``training`` selects the output with a ``cond`` and scales the
update by ``0`` when false (TF wraps the assigns in a ``cond``; the values agree).
As ``tf_keras``' ``BatchNormalization`` in TF1 graph mode.
"""

from __future__ import annotations

from typing import Any

from .. import dtypes as _dtypes
from ..errors import CkptsyncValueError
from ..graph import Tensor, name_scope
from ..initializers import ones_initializer, zeros_initializer
from ..ops.array_ops import constant, convert_to_tensor, reshape
from ..ops.control_flow_ops import cond
from ..ops.math_ops import cast, multiply, subtract
from ..ops.nn_norm import batch_normalization as _nn_batch_norm
from ..ops.nn_norm import fused_batch_norm, moments
from ..ops.selection_ops import where_v2
from ..ops.state_ops import assign_sub
from .base import InputSpec, Layer
from .core import _is_tensor

__all__ = ["BatchNormalization", "batch_normalization", "BatchNorm"]


class BatchNormalization(Layer):
    """Batch normalization, as ``tf.layers.BatchNormalization``; ``call(inputs,
    training=False)`` with ``training`` a bool or a scalar bool tensor.

    Raises:
        ValueError: ``axis`` out of range or on an unknown dimension; ``renorm`` or
            ``virtual_batch_size`` (not supported here); a list of several axes.
    """

    def __init__(self, axis: Any = -1, momentum: float = 0.99, epsilon: float = 1e-3,
                 center: bool = True, scale: bool = True, beta_initializer: Any = None,
                 gamma_initializer: Any = None, moving_mean_initializer: Any = None,
                 moving_variance_initializer: Any = None, beta_regularizer: Any = None,
                 gamma_regularizer: Any = None, beta_constraint: Any = None,
                 gamma_constraint: Any = None, renorm: bool = False,
                 renorm_clipping: Any = None, renorm_momentum: float = 0.99,
                 fused: Any = None, trainable: bool = True, virtual_batch_size: Any = None,
                 adjustment: Any = None, name: str | None = None, **kwargs: Any):
        super().__init__(trainable=trainable, name=name, **kwargs)
        if renorm or virtual_batch_size is not None or adjustment is not None:
            raise CkptsyncValueError("BatchNormalization: renorm, virtual_batch_size and "
                                     "adjustment are not supported by ckptsync.")
        if isinstance(axis, (list, tuple)):
            if len(axis) != 1:
                raise CkptsyncValueError("BatchNormalization: only a single axis is supported "
                                         f"by ckptsync, got axis={axis!r}.")
            axis = axis[0]
        self.axis = int(axis)
        self.momentum, self.epsilon = momentum, float(epsilon)
        self.center, self.scale = center, scale
        self.beta_initializer = beta_initializer or zeros_initializer()
        self.gamma_initializer = gamma_initializer or ones_initializer()
        self.moving_mean_initializer = moving_mean_initializer or zeros_initializer()
        self.moving_variance_initializer = moving_variance_initializer or ones_initializer()
        self.beta_regularizer, self.gamma_regularizer = beta_regularizer, gamma_regularizer
        self.beta_constraint, self.gamma_constraint = beta_constraint, gamma_constraint
        self.fused = fused
        self.gamma: Any = None
        self.beta: Any = None
        self.moving_mean: Any = None
        self.moving_variance: Any = None

    def build(self, input_shape: Any) -> None:
        nd = input_shape.ndims
        if nd is None:
            raise CkptsyncValueError(f"Input has undefined rank. Received: input_shape="
                                     f"{input_shape}.")
        axis = self.axis + nd if self.axis < 0 else self.axis
        if not 0 <= axis < nd:
            raise CkptsyncValueError(f"Invalid axis: {self.axis}. Expected -{nd} <= axis < {nd}")
        self._axis = axis
        c = input_shape.as_list()[axis]
        if c is None:
            raise CkptsyncValueError(f"Input has undefined `axis` dimension. Received input "
                                     f"with shape {input_shape} and axis={self.axis}")
        self.input_spec = InputSpec(ndim=nd, axes={axis: c})
        can_fuse = nd == 4 and axis in (1, 3)
        if self.fused and not can_fuse:
            raise CkptsyncValueError(f"Batch normalization layer {self.name}: fused=True only "
                                     "for 4-D inputs normalized over axis 1 or 3.")
        self._fused = can_fuse if self.fused is None else bool(self.fused)
        dt = self._dtype or _dtypes.float32
        pdt = _dtypes.float32 if dt == _dtypes.float16 else dt
        if self._fused and pdt != _dtypes.float32:
            self._fused = False  # FusedBatchNormV3 is float16/float32 only
        self._param_dtype = pdt
        if self.scale:
            self.gamma = self.add_weight("gamma", [c], dtype=pdt,
                                         initializer=self.gamma_initializer,
                                         regularizer=self.gamma_regularizer,
                                         constraint=self.gamma_constraint, trainable=True)
        if self.center:
            self.beta = self.add_weight("beta", [c], dtype=pdt, initializer=self.beta_initializer,
                                        regularizer=self.beta_regularizer,
                                        constraint=self.beta_constraint, trainable=True)
        self.moving_mean = self.add_weight("moving_mean", [c], dtype=pdt,
                                           initializer=self.moving_mean_initializer,
                                           trainable=False)
        self.moving_variance = self.add_weight("moving_variance", [c], dtype=pdt,
                                               initializer=self.moving_variance_initializer,
                                               trainable=False)
        self.built = True

    def _assign_moving_average(self, variable: Any, value: Tensor, training: Any) -> Tensor:
        with name_scope("AssignMovingAvg") as scope:
            decay: Any = convert_to_tensor(1.0 - self.momentum, name="decay")
            if decay.dtype != variable.dtype.base_dtype:
                decay = cast(decay, variable.dtype.base_dtype)
            if training is not True:
                decay = where_v2(training, decay, constant(0.0, dtype=decay.dtype))
            delta = multiply(subtract(variable, cast(value, variable.dtype.base_dtype)), decay)
            return assign_sub(variable, delta, name=scope)

    def _add_updates(self, mean: Tensor, variance: Tensor, training: Any) -> None:
        # The collection holds the assign ops (as TF's), not their output tensors.
        self.add_update(self._assign_moving_average(self.moving_mean, mean, training).op)
        self.add_update(self._assign_moving_average(self.moving_variance, variance,
                                                    training).op)

    def _fused_call(self, x: Tensor, training: Any) -> Tensor:
        fmt = "NHWC" if self._axis == 3 else "NCHW"
        c = self.moving_mean.shape.as_list()[0]
        gamma = self.gamma if self.scale else constant(1.0, _dtypes.float32, [c])
        beta = self.beta if self.center else constant(0.0, _dtypes.float32, [c])

        def train() -> tuple[Tensor, Tensor, Tensor]:
            return fused_batch_norm(x, gamma, beta, epsilon=self.epsilon, data_format=fmt,
                                    is_training=True)

        def infer() -> tuple[Tensor, Tensor, Tensor]:
            return fused_batch_norm(x, gamma, beta, mean=self.moving_mean,
                                    variance=self.moving_variance, epsilon=self.epsilon,
                                    data_format=fmt, is_training=False)

        if training is True:
            out, mean, var = train()
        elif training is False:
            return infer()[0]
        else:
            out, mean, var = cond(training, train, infer)
        self._add_updates(mean, var, training)
        return out

    def _plain_call(self, x: Tensor, training: Any) -> Tensor:
        nd = int(x.shape.ndims or 0)
        axes = [i for i in range(nd) if i != self._axis]
        shape = [1] * nd
        shape[self._axis] = self.moving_mean.shape.as_list()[0]
        last = self._axis == nd - 1

        def bcast(v: Any) -> Any:
            return v if v is None or last else reshape(v, shape)

        if training is False:
            mean: Any = self.moving_mean
            var: Any = self.moving_variance
        else:
            mean, var = moments(cast(x, self._param_dtype), axes)
            if training is not True:
                bmean, bvar = mean, var
                mean, var = cond(training, lambda: (bmean, bvar),
                                 lambda: (convert_to_tensor(self.moving_mean),
                                          convert_to_tensor(self.moving_variance)))
            self._add_updates(mean, var, training)
        mean, var = cast(mean, x.dtype), cast(var, x.dtype)
        offset = None if self.beta is None else cast(self.beta, x.dtype)
        scale = None if self.gamma is None else cast(self.gamma, x.dtype)
        return _nn_batch_norm(x, bcast(mean), bcast(var), bcast(offset), bcast(scale),
                              self.epsilon)

    def call(self, inputs: Tensor, training: Any = False) -> Tensor:
        if not (isinstance(training, bool) or _is_tensor(training)):
            training = bool(training)
        if self._fused:
            return self._fused_call(inputs, training)
        return self._plain_call(inputs, training)


BatchNorm = BatchNormalization


def batch_normalization(inputs: Any, axis: int = -1, momentum: float = 0.99,
                        epsilon: float = 1e-3, center: bool = True, scale: bool = True,
                        beta_initializer: Any = None, gamma_initializer: Any = None,
                        moving_mean_initializer: Any = None,
                        moving_variance_initializer: Any = None, beta_regularizer: Any = None,
                        gamma_regularizer: Any = None, beta_constraint: Any = None,
                        gamma_constraint: Any = None, training: Any = False,
                        trainable: bool = True, name: str | None = None, reuse: Any = None,
                        renorm: bool = False, renorm_clipping: Any = None,
                        renorm_momentum: float = 0.99, fused: Any = None,
                        virtual_batch_size: Any = None, adjustment: Any = None) -> Tensor:
    """Batch normalization of ``inputs`` (any rank, normalized over all axes but
    ``axis``), as ``tf.layers.batch_normalization``; see :class:`BatchNormalization`.
    Run the ops in ``tf.get_collection(tf.GraphKeys.UPDATE_OPS)`` with the train op
    (``tf.control_dependencies``) to update the moving statistics."""
    layer = BatchNormalization(
        axis=axis, momentum=momentum, epsilon=epsilon, center=center, scale=scale,
        beta_initializer=beta_initializer, gamma_initializer=gamma_initializer,
        moving_mean_initializer=moving_mean_initializer,
        moving_variance_initializer=moving_variance_initializer,
        beta_regularizer=beta_regularizer, gamma_regularizer=gamma_regularizer,
        beta_constraint=beta_constraint, gamma_constraint=gamma_constraint, renorm=renorm,
        renorm_clipping=renorm_clipping, renorm_momentum=renorm_momentum, fused=fused,
        trainable=trainable, virtual_batch_size=virtual_batch_size, adjustment=adjustment,
        name=name, _reuse=reuse, _scope=name)
    return layer.apply(inputs, training=training)
