"""Variable initializers, as TF1's ``tf.*_initializer`` classes.

An initializer is called as ``init(shape, dtype=None, partition_info=None)`` and returns
a graph tensor that computes the initial value when it runs: building a graph allocates no
initial value (``Zeros``, ``Ones`` and scalar ``Constant`` are ``Fill`` ops, the random
initializers random ops), so a server that restores every variable never allocates them. ``glorot_uniform_initializer`` is the default
for floating-point variables; its fans follow TF1 (rank 0: 1/1, rank 1: n/n, rank 2:
``shape[0]``/``shape[1]``, rank >= 3: receptive field times the last two dims).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import dtypes as _dtypes
from .errors import CkptsyncValueError
from .graph import Tensor
from .ops import random_ops
from .ops.array_ops import constant as _constant_tensor
from .ops.array_ops import fill, reshape, transpose
from .ops.registry import make_op, register

__all__ = [
    "Initializer", "Zeros", "Ones", "Constant", "RandomUniform", "RandomNormal",
    "TruncatedNormal", "GlorotUniform", "GlorotNormal", "zeros_initializer", "ones_initializer",
    "constant_initializer", "random_uniform_initializer", "random_normal_initializer",
    "truncated_normal_initializer", "glorot_uniform_initializer", "glorot_normal_initializer",
    "compute_fans", "VarianceScaling", "Orthogonal", "variance_scaling_initializer",
    "orthogonal_initializer", "he_normal", "he_uniform", "lecun_normal", "lecun_uniform",
]


def compute_fans(shape: Any) -> tuple[float, float]:
    """``(fan_in, fan_out)`` for a weight of ``shape``, as TF1's ``_compute_fans``."""
    shape = list(shape)
    if len(shape) < 1:
        return 1.0, 1.0
    if len(shape) == 1:
        return float(shape[0]), float(shape[0])
    if len(shape) == 2:
        return float(shape[0]), float(shape[1])
    receptive = float(np.prod(shape[:-2]))
    return shape[-2] * receptive, shape[-1] * receptive


def _filled(shape: Any, value: np.ndarray, name: str) -> Tensor:
    """A ``Fill`` op of ``shape`` with the 0-d ``value``: the array is made when the
    initializer op runs, not held by the graph (a server that restores every variable
    from a checkpoint never runs it, so never allocates it)."""
    return fill([int(d) for d in shape], value, name=name)


class Initializer:
    """Base class: ``__call__(shape, dtype=None, partition_info=None) -> Tensor``."""

    dtype: _dtypes.DType | None = None

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        raise NotImplementedError

    def _dt(self, dtype: Any) -> _dtypes.DType:
        if dtype is not None:
            return _dtypes.as_dtype(dtype)
        return self.dtype or _dtypes.float32

    def get_config(self) -> dict[str, Any]:
        return {}


class Zeros(Initializer):
    """All zeros (also ``False`` for bool)."""

    def __init__(self, dtype: Any = None):
        self.dtype = _dtypes.as_dtype(dtype) if dtype is not None else None

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        return _filled(shape, np.zeros((), self._dt(dtype).np), "zeros")


class Ones(Initializer):
    """All ones."""

    def __init__(self, dtype: Any = None):
        self.dtype = _dtypes.as_dtype(dtype) if dtype is not None else None

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        return _filled(shape, np.ones((), self._dt(dtype).np), "ones")


class Constant(Initializer):
    """A scalar (broadcast) or a value with exactly ``prod(shape)`` elements."""

    def __init__(self, value: Any = 0, dtype: Any = None, verify_shape: bool = False):
        self.value = np.asarray(value)
        self.dtype = _dtypes.as_dtype(dtype) if dtype is not None else None
        self.verify_shape = verify_shape

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        dt = self._dt(dtype)
        shp = list(shape)
        n = int(np.prod(shp)) if shp else 1
        if self.value.size == 1:
            return _filled(shp, np.asarray(self.value.reshape(()), dt.np), "Const")
        if self.value.size == n and not self.verify_shape or list(self.value.shape) == shp:
            # The value is the initializer's own; no copy unless the dtype differs.
            arr = self.value.astype(dt.np, copy=False).reshape(shp)
        else:
            raise CkptsyncValueError(
                f"constant_initializer: {self.value.size} values cannot fill shape {shp}.")
        return _constant_tensor(arr, name="Const")


class RandomUniform(Initializer):
    def __init__(self, minval: float = 0.0, maxval: float | None = None, seed: int | None = None,
                 dtype: Any = None):
        self.minval, self.maxval = minval, (1.0 if maxval is None else maxval)
        self.seed = seed
        self.dtype = _dtypes.as_dtype(dtype) if dtype is not None else None

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        return random_ops.random_uniform(shape, self.minval, self.maxval, self._dt(dtype),
                                         seed=self.seed)


class RandomNormal(Initializer):
    def __init__(self, mean: float = 0.0, stddev: float = 1.0, seed: int | None = None,
                 dtype: Any = None):
        self.mean, self.stddev, self.seed = mean, stddev, seed
        self.dtype = _dtypes.as_dtype(dtype) if dtype is not None else None

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        return random_ops.random_normal(shape, self.mean, self.stddev, self._dt(dtype),
                                        seed=self.seed)


class TruncatedNormal(RandomNormal):
    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        return random_ops.truncated_normal(shape, self.mean, self.stddev, self._dt(dtype),
                                           seed=self.seed)


class GlorotUniform(Initializer):
    """U(-limit, limit), ``limit = sqrt(6 / (fan_in + fan_out))``."""

    def __init__(self, seed: int | None = None, dtype: Any = None):
        self.seed = seed
        self.dtype = _dtypes.as_dtype(dtype) if dtype is not None else None

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        fan_in, fan_out = compute_fans(shape)
        limit = math.sqrt(6.0 / max(1.0, fan_in + fan_out))
        return random_ops.random_uniform(shape, -limit, limit, self._dt(dtype), seed=self.seed)


class GlorotNormal(Initializer):
    """Truncated normal with ``stddev = sqrt(2 / (fan_in + fan_out)) / 0.8796``."""

    def __init__(self, seed: int | None = None, dtype: Any = None):
        self.seed = seed
        self.dtype = _dtypes.as_dtype(dtype) if dtype is not None else None

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        fan_in, fan_out = compute_fans(shape)
        stddev = math.sqrt(2.0 / max(1.0, fan_in + fan_out)) / 0.87962566103423978
        return random_ops.truncated_normal(shape, 0.0, stddev, self._dt(dtype), seed=self.seed)


zeros_initializer = Zeros
ones_initializer = Ones
constant_initializer = Constant
random_uniform_initializer = RandomUniform
random_normal_initializer = RandomNormal
truncated_normal_initializer = TruncatedNormal
glorot_uniform_initializer = GlorotUniform
glorot_normal_initializer = GlorotNormal


class VarianceScaling(Initializer):
    """Samples scaled to the weight's fans, as TF1's ``tf.variance_scaling_initializer``.

    ``n`` is ``fan_in``, ``fan_out`` or their mean (``mode``); with ``s = scale / max(1, n)``
    the values are a truncated normal with ``stddev = sqrt(s) / 0.8796...`` (``"normal"``,
    ``"truncated_normal"``), a normal with ``stddev = sqrt(s)`` (``"untruncated_normal"``)
    or ``U(-sqrt(3 s), sqrt(3 s))`` (``"uniform"``).

    Raises:
        ValueError: ``scale <= 0``, or an unknown ``mode``/``distribution`` (named).
    """

    def __init__(self, scale: float = 1.0, mode: str = "fan_in",
                 distribution: str = "truncated_normal", seed: int | None = None,
                 dtype: Any = None):
        if scale <= 0.0:
            raise CkptsyncValueError(f"`scale` must be positive float, got {scale}.")
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise CkptsyncValueError(f"Invalid `mode` argument: {mode!r} (expected fan_in, "
                                     "fan_out or fan_avg).")
        distribution = distribution.lower()
        if distribution not in ("normal", "uniform", "truncated_normal", "untruncated_normal"):
            raise CkptsyncValueError(f"Invalid `distribution` argument: {distribution!r} (expected "
                                     "truncated_normal, untruncated_normal, normal or uniform).")
        self.scale, self.mode, self.distribution, self.seed = scale, mode, distribution, seed
        self.dtype = _dtypes.as_dtype(dtype) if dtype is not None else None

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        fan_in, fan_out = compute_fans(shape)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[self.mode]
        s = self.scale / max(1.0, n)
        dt = self._dt(dtype)
        if self.distribution in ("normal", "truncated_normal"):
            return random_ops.truncated_normal(shape, 0.0, math.sqrt(s) / 0.87962566103423978,
                                               dt, seed=self.seed)
        if self.distribution == "untruncated_normal":
            return random_ops.random_normal(shape, 0.0, math.sqrt(s), dt, seed=self.seed)
        limit = math.sqrt(3.0 * s)
        return random_ops.random_uniform(shape, -limit, limit, dt, seed=self.seed)


@register("Qr", not_differentiable=True)
def _qr(a: np.ndarray, full_matrices: bool = False) -> tuple[np.ndarray, np.ndarray]:
    q, r = np.linalg.qr(a, mode="complete" if full_matrices else "reduced")
    return q.astype(a.dtype, copy=False), r.astype(a.dtype, copy=False)


@register("SignCorrectQ", not_differentiable=True)
def _sign_correct(q: np.ndarray, r: np.ndarray) -> np.ndarray:
    d = np.sign(np.diagonal(r))
    return q * np.where(d == 0, 1, d)


class Orthogonal(Initializer):
    """A (semi-)orthogonal matrix times ``gain``, as TF1's ``tf.orthogonal_initializer``:
    the Q of a random normal ``[max(rows, cols), min(rows, cols)]`` matrix's QR
    decomposition (signs fixed by R's diagonal), transposed when there are fewer rows than
    columns, reshaped to ``shape`` (rows: the product of all but the last dim).

    Raises:
        ValueError: ``shape`` has fewer than 2 dims.
    """

    def __init__(self, gain: float = 1.0, seed: int | None = None, dtype: Any = None):
        self.gain, self.seed = gain, seed
        self.dtype = _dtypes.as_dtype(dtype) if dtype is not None else None

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Tensor:
        shp = [int(d) for d in shape]
        if len(shp) < 2:
            raise CkptsyncValueError("The tensor to initialize must be at least "
                                     f"two-dimensional, got shape {shp}.")
        dt = self._dt(dtype)
        rows, cols = int(np.prod(shp[:-1])), shp[-1]
        flat = (cols, rows) if rows < cols else (rows, cols)
        a = random_ops.random_normal(list(flat), dtype=dt, seed=self.seed)
        k = min(flat)
        q, r = make_op("Qr", [a], [dt, dt], [[flat[0], k], [k, flat[1]]],
                       attrs={"full_matrices": False}).outputs
        q = make_op("SignCorrectQ", [q, r], [dt], [[flat[0], k]]).outputs[0]
        if rows < cols:
            q = transpose(q)
        return reshape(q, shp) * np.asarray(self.gain, dt.np)


def he_normal(seed: int | None = None) -> VarianceScaling:
    """``VarianceScaling(2.0, "fan_in", "truncated_normal")``, as ``tf.initializers.he_normal``."""
    return VarianceScaling(2.0, "fan_in", "truncated_normal", seed)


def he_uniform(seed: int | None = None) -> VarianceScaling:
    """``VarianceScaling(2.0, "fan_in", "uniform")``, as ``tf.initializers.he_uniform``."""
    return VarianceScaling(2.0, "fan_in", "uniform", seed)


def lecun_normal(seed: int | None = None) -> VarianceScaling:
    """``VarianceScaling(1.0, "fan_in", "truncated_normal")``, as ``tf.initializers.lecun_normal``."""
    return VarianceScaling(1.0, "fan_in", "truncated_normal", seed)


def lecun_uniform(seed: int | None = None) -> VarianceScaling:
    """``VarianceScaling(1.0, "fan_in", "uniform")``, as ``tf.initializers.lecun_uniform``."""
    return VarianceScaling(1.0, "fan_in", "uniform", seed)


variance_scaling_initializer = VarianceScaling
orthogonal_initializer = Orthogonal
# ``tf.initializers.<name>``: this module is ``cs.initializers``.
zeros, ones, constant = Zeros, Ones, Constant
random_uniform, random_normal, truncated_normal = RandomUniform, RandomNormal, TruncatedNormal
glorot_uniform, glorot_normal = GlorotUniform, GlorotNormal
variance_scaling, orthogonal = VarianceScaling, Orthogonal
