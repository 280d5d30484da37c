"""``cs.contrib.layers``: TF1's ``tf.contrib.layers`` initializers.

Their fans are contrib's own: ``fan_in = shape[-2]`` (``shape[-1]`` for a vector) and
``fan_out = shape[-1]``, both times the receptive field (the product of ``shape[:-2]``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import GraphKeys, Tensor, add_to_collection, get_collection, name_scope
from ..initializers import Initializer
from ..ops import random_ops
from ..ops.array_ops import constant, convert_to_tensor, identity, reshape, shape
from ..ops.math_ops import abs as abs_
from ..ops.math_ops import add_n, multiply
from ..ops.nn_impl import l2_loss
from ..ops.reduction_ops import reduce_sum

__all__ = ["variance_scaling_initializer", "xavier_initializer"]


def _contrib_fans(shape: Any) -> tuple[float, float]:
    shape = [int(d) for d in shape]
    if not shape:
        return 1.0, 1.0
    fan_in = float(shape[-2]) if len(shape) > 1 else float(shape[-1])
    fan_out = float(shape[-1])
    receptive = float(np.prod(shape[:-2])) if len(shape) > 2 else 1.0
    return fan_in * receptive, fan_out * receptive


class _ContribVarianceScaling(Initializer):
    def __init__(self, factor: float, mode: str, uniform: bool, seed: int | None,
                 dtype: Any):
        self.factor, self.mode, self.uniform, self.seed = factor, mode, uniform, seed
        self.dtype = _dtypes.as_dtype(dtype)

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        dt = self._dt(dtype)
        if not dt.is_floating:
            raise CkptsyncTypeError("Cannot create initializer for non-floating point type.")
        fan_in, fan_out = _contrib_fans(shape)
        n = {"FAN_IN": fan_in, "FAN_OUT": fan_out, "FAN_AVG": (fan_in + fan_out) / 2.0}[self.mode]
        if self.uniform:
            limit = math.sqrt(3.0 * self.factor / n)
            return random_ops.random_uniform(shape, -limit, limit, dt, seed=self.seed)
        stddev = math.sqrt(1.3 * self.factor / n)
        return random_ops.truncated_normal(shape, 0.0, stddev, dt, seed=self.seed)


def variance_scaling_initializer(factor: float = 2.0, mode: str = "FAN_IN",
                                 uniform: bool = False, seed: int | None = None,
                                 dtype: Any = _dtypes.float32) -> Initializer:
    """He et al.'s initializer by default, as ``tf.contrib.layers.variance_scaling_initializer``:
    ``U(-sqrt(3 f / n), sqrt(3 f / n))`` when ``uniform``, else a truncated normal with
    ``stddev = sqrt(1.3 f / n)``, where ``n`` is the fan given by ``mode``.

    Raises:
        TypeError: ``dtype`` is not floating point.
        ValueError: ``mode`` is not ``FAN_IN``, ``FAN_OUT`` or ``FAN_AVG``.
    """
    if not _dtypes.as_dtype(dtype).is_floating:
        raise CkptsyncTypeError("Cannot create initializer for non-floating point type.")
    if mode not in ("FAN_IN", "FAN_OUT", "FAN_AVG"):
        raise CkptsyncValueError(f"Unknown mode {mode} [FAN_IN, FAN_OUT, FAN_AVG]")
    return _ContribVarianceScaling(factor, mode, uniform, seed, dtype)


def xavier_initializer(uniform: bool = True, seed: int | None = None,
                       dtype: Any = _dtypes.float32) -> Initializer:
    """Glorot & Bengio's initializer, as ``tf.contrib.layers.xavier_initializer``:
    ``variance_scaling_initializer(factor=1.0, mode="FAN_AVG", uniform=uniform)``."""
    return variance_scaling_initializer(1.0, "FAN_AVG", uniform, seed, dtype)


xavier_initializer_conv2d = xavier_initializer
__all__.append("xavier_initializer_conv2d")


# ----------------------------------------------------------------------- regularizers
def _check_scale(scale: Any, which: str) -> bool:
    """Whether a regularizer of ``scale`` contributes (``scale`` 0 gives none)."""
    if isinstance(scale, numbers.Integral) and not isinstance(scale, bool):
        raise CkptsyncValueError(f"scale cannot be an integer: {scale}")
    if isinstance(scale, numbers.Real):
        if scale < 0.0:
            raise CkptsyncValueError(f"Setting a scale less than 0 on a regularizer: {scale}")
        return scale != 0.0
    raise CkptsyncValueError(f"{which}: scale must be a float, got {scale!r}")


def l1_regularizer(scale: float, scope: str | None = None) -> Callable[[Any], Any]:
    """``weights -> scale * reduce_sum(abs(weights))`` (op ``l1_regularizer``), as
    ``tf.contrib.layers.l1_regularizer``; a scale of 0 gives a function returning None.

    Raises:
        ValueError: an integer or negative ``scale``.
    """
    if not _check_scale(scale, "l1_regularizer"):
        return lambda _: None

    def l1(weights: Any) -> Tensor:
        with name_scope(scope, "l1_regularizer", [weights]) as name:
            my_scale = convert_to_tensor(scale, dtype=weights.dtype.base_dtype, name="scale")
            return multiply(my_scale, reduce_sum(abs_(weights)), name=name)

    return l1


def l2_regularizer(scale: float, scope: str | None = None) -> Callable[[Any], Any]:
    """``weights -> scale * l2_loss(weights)`` (``scale * sum(w ** 2) / 2``, op
    ``l2_regularizer``), as ``tf.contrib.layers.l2_regularizer``; a scale of 0 gives a
    function returning None.

    Raises:
        ValueError: an integer or negative ``scale``.
    """
    if not _check_scale(scale, "l2_regularizer"):
        return lambda _: None

    def l2(weights: Any) -> Tensor:
        with name_scope(scope, "l2_regularizer", [weights]) as name:
            my_scale = convert_to_tensor(scale, dtype=weights.dtype.base_dtype, name="scale")
            return multiply(my_scale, l2_loss(weights), name=name)

    return l2


def sum_regularizer(regularizer_list: Any, scope: str | None = None) -> Any:
    """The sum (``add_n``, op ``sum_regularizer``) of the given regularizers, as
    ``tf.contrib.layers.sum_regularizer``; None when the list is empty."""
    regs = [r for r in regularizer_list if r is not None]
    if not regs:
        return None

    def sum_reg(weights: Any) -> Any:
        with name_scope(scope, "sum_regularizer", [weights]) as name:
            parts = [t for t in (r(weights) for r in regs) if t is not None]
            return add_n(parts, name=name) if parts else None

    return sum_reg


def l1_l2_regularizer(scale_l1: float = 1.0, scale_l2: float = 1.0,
                      scope: str | None = None) -> Any:
    """``l1_regularizer(scale_l1)`` plus ``l2_regularizer(scale_l2)`` (op
    ``l1_l2_regularizer``), as ``tf.contrib.layers.l1_l2_regularizer``.

    Raises:
        ValueError: an integer or negative scale.
    """
    if isinstance(scale_l1, numbers.Integral) and not isinstance(scale_l1, bool):
        raise CkptsyncValueError(f"scale_l1 cannot be an integer: {scale_l1}")
    if isinstance(scale_l2, numbers.Integral) and not isinstance(scale_l2, bool):
        raise CkptsyncValueError(f"scale_l2 cannot be an integer: {scale_l2}")
    scope = scope or "l1_l2_regularizer"
    if scale_l1 == 0.0:
        return l2_regularizer(scale_l2, scope)
    if scale_l2 == 0.0:
        return l1_regularizer(scale_l1, scope)
    return sum_regularizer([l1_regularizer(scale_l1), l2_regularizer(scale_l2)], scope=scope)


def apply_regularization(regularizer: Any, weights_list: Any = None) -> Tensor:
    """The sum of ``regularizer(w)`` over ``weights_list`` (default: the ``WEIGHTS``
    collection), op ``get_regularization_penalty``, added to ``REGULARIZATION_LOSSES``; as
    ``tf.contrib.layers.apply_regularization``.

    Raises:
        ValueError: no weights; a regularizer returning a non-scalar.
    """
    if not weights_list:
        weights_list = get_collection(GraphKeys.WEIGHTS)
    if not weights_list:
        raise CkptsyncValueError("No weights to regularize.")
    with name_scope("get_regularization_penalty", values=weights_list) as scope:
        penalties = [regularizer(w) for w in weights_list]
        penalties = [constant(0.0) if p is None else p for p in penalties]
        for p in penalties:
            if p.get_shape().ndims != 0:
                raise CkptsyncValueError(f"regularizer must return a scalar Tensor instead of a "
                                         f"Tensor with rank {p.get_shape().ndims}.")
        # TF's add_n of one named input is an Identity of that name.
        total = (identity(penalties[0], name=scope) if len(penalties) == 1
                 else add_n(penalties, name=scope))
    add_to_collection(GraphKeys.REGULARIZATION_LOSSES, total)
    return total


def flatten(inputs: Any, outputs_collections: Any = None, scope: str | None = None) -> Tensor:
    """``[batch, ...]`` -> ``[batch, k]``, as ``tf.contrib.layers.flatten`` (under the
    ``Flatten`` name scope).

    Raises:
        ValueError: an input of unknown rank or rank < 2.
    """
    with name_scope(scope, "Flatten", [inputs]):
        t = convert_to_tensor(inputs)
        if t.shape.ndims is None or t.shape.ndims < 2:
            raise CkptsyncValueError(f"Inputs must have a least 2 dimensions, got shape "
                                     f"{t.shape}.")
        out = _flatten_op(t)
        for c in outputs_collections or []:
            add_to_collection(c, out)
        return out


def _flatten_op(t: Tensor) -> Tensor:
    dims = t.shape.as_list()
    if all(d is not None for d in dims[1:]):
        return reshape(t, [-1, math.prod(int(d or 0) for d in dims[1:])])
    return reshape(t, [shape(t)[0], -1])


__all__ += ["l1_regularizer", "l2_regularizer", "l1_l2_regularizer", "sum_regularizer",
            "apply_regularization", "flatten"]
