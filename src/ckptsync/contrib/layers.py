"""``cs.contrib.layers``: TF1's ``tf.contrib.layers`` initializers.

Their fans are contrib's own: ``fan_in = shape[-2]`` (``shape[-1]`` for a vector) and
``fan_out = shape[-1]``, both times the receptive field (the product of ``shape[:-2]``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Tensor
from ..initializers import Initializer
from ..ops import random_ops

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
