"""Normalization: ``l2_normalize``, ``moments``, ``batch_normalization`` and
``fused_batch_norm``, as TF1's tf.nn.

``l2_normalize``, ``moments`` and ``batch_normalization`` are built from elementwise ops
and reductions under TF's name scopes (``l2_normalize``, ``moments``, ``batchnorm``), so
their gradients follow from those ops'. ``fused_batch_norm`` is one ``FusedBatchNormV3``
op with its own gradient (``FusedBatchNormGradV3``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Tensor, name_scope
from .array_ops import convert_to_tensor, squeeze, stop_gradient
from .elementwise_ops import rsqrt, squared_difference
from .math_ops import (
    add,
    cast,
    maximum,
    multiply,
    negative,
    reduce_mean,
    reduce_sum,
    square,
    subtract,
)
from .registry import register

__all__: list[str] = []
NN_EXPORTS: tuple[str, ...] = ("l2_normalize", "moments", "batch_normalization",
                               "fused_batch_norm")


def _floating(op: str, t: Tensor) -> None:
    if not t.dtype.is_floating:
        raise CkptsyncTypeError(f"{op}: expected a floating-point tensor, got {t.dtype.name} "
                                f"for {t.name}.")


def _cast_to(t: Tensor, dtype: _dtypes.DType) -> Tensor:
    return t if t.dtype == dtype else cast(t, dtype)


# --------------------------------------------------------------------- l2_normalize
def l2_normalize(x: Any, axis: Any = None, epsilon: float = 1e-12, name: str | None = None,
                 dim: Any = None) -> Tensor:
    """``x / sqrt(max(sum(x ** 2, axis), epsilon))``, as ``tf.nn.l2_normalize``.

    ``axis`` (or its deprecated spelling ``dim``): an int or list of ints, ``None`` for
    all axes. Output: ``x``'s shape and (float) dtype; the output op is ``l2_normalize``.

    Raises:
        ValueError: both ``axis`` and ``dim`` given.
        TypeError: a non-float ``x``.
    """
    if axis is not None and dim is not None:
        raise CkptsyncValueError("l2_normalize: cannot specify both 'axis' and 'dim'.")
    axis = dim if axis is None else axis
    with name_scope(name, "l2_normalize", [x]) as scope:
        t = convert_to_tensor(x, name="x")
        _floating("l2_normalize", t)
        square_sum = reduce_sum(square(t), axis, keepdims=True)
        inv_norm = rsqrt(maximum(square_sum, epsilon))
        return multiply(t, inv_norm, name=scope)


# --------------------------------------------------------------------- moments
def moments(x: Any, axes: Any, shift: Any = None, name: str | None = None,
            keep_dims: bool | None = None, keepdims: bool | None = None
            ) -> tuple[Tensor, Tensor]:
    """``(mean, variance)`` of ``x`` over ``axes``, as ``tf.nn.moments``.

    The variance is the biased one (divides by the count), computed as
    ``mean(square(x - stop_gradient(mean)))`` (as TF, so the gradient does not flow back
    through the mean). ``keep_dims``/``keepdims`` keep the reduced axes as 1; otherwise
    they are squeezed (``[batch, 64]`` over ``[0]`` gives two ``[64]`` tensors). float16
    input is reduced in float32 and cast back, as TF. ``shift`` is ignored, as in TF.

    Raises:
        ValueError: both ``keep_dims`` and ``keepdims`` given.
        TypeError: a non-float ``x``.
    """
    del shift
    if keep_dims is not None and keepdims is not None:
        raise CkptsyncValueError("moments: cannot specify both 'keep_dims' and 'keepdims'.")
    keep = bool(keepdims if keep_dims is None else keep_dims)
    with name_scope(name, "moments", [x]):
        t = convert_to_tensor(x)
        _floating("moments", t)
        y = cast(t, _dtypes.float32) if t.dtype == _dtypes.float16 else t
        mean = reduce_mean(y, axes, keepdims=True, name="mean")
        diff = squared_difference(y, stop_gradient(mean))
        variance = reduce_mean(diff, axes, keepdims=True, name="variance")
        if not keep:
            mean = squeeze(mean, axes)
            variance = squeeze(variance, axes)
        if t.dtype == _dtypes.float16:
            return cast(mean, _dtypes.float16), cast(variance, _dtypes.float16)
        return mean, variance


# --------------------------------------------------------------------- batch_normalization
def batch_normalization(x: Any, mean: Any, variance: Any, offset: Any, scale: Any,
                        variance_epsilon: float, name: str | None = None) -> Tensor:
    """``(x - mean) * scale / sqrt(variance + variance_epsilon) + offset``, as
    ``tf.nn.batch_normalization`` (``offset`` and ``scale`` may be None).

    ``mean``, ``variance``, ``offset``, ``scale`` broadcast against ``x`` (``[C]`` against
    ``[batch, H, W, C]``, or the keep-dims moments). Built as TF builds it (``batchnorm/``
    ``Rsqrt``, ``mul``, ``add``), output ``batchnorm/add_1`` of ``x``'s shape and dtype.

    Raises:
        ValueError: shapes that do not broadcast.
        TypeError: a non-float ``x`` or mixed dtypes.
    """
    with name_scope(name, "batchnorm", [x, mean, variance, scale, offset]):
        t = convert_to_tensor(x)
        _floating("batch_normalization", t)
        m = convert_to_tensor(mean, dtype=None if isinstance(mean, Tensor) else t.dtype)
        v = convert_to_tensor(variance, dtype=None if isinstance(variance, Tensor) else m.dtype)
        inv = rsqrt(add(v, variance_epsilon, name="add"))
        if scale is not None:
            inv = multiply(inv, scale, name="mul")
        scaled = multiply(t, _cast_to(inv, t.dtype), name="mul")
        if offset is not None:
            shift = subtract(offset, multiply(m, inv, name="mul"), name="sub")
        else:
            shift = multiply(negative(m, name="Neg"), inv, name="mul")
        return add(scaled, _cast_to(shift, t.dtype), name="add")


# --------------------------------------------------------------------- fused_batch_norm
_FORMATS = {"NHWC": 4, "NCHW": 4, "NDHWC": 5, "NCDHW": 5}


def _axes(x: np.ndarray, data_format: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the reduced axes, the shape that broadcasts a per-channel vector against x)."""
    c = 1 if data_format.startswith("NC") else x.ndim - 1
    bshape = [1] * x.ndim
    bshape[c] = x.shape[c]
    return tuple(i for i in range(x.ndim) if i != c), tuple(bshape)


def _fbn_grad(op: Any, g: Tensor, *_ignored: Any) -> list[Any]:
    # As TF: only y's gradient is used; mean and variance get none.
    x, scale, _offset, mean, variance = op.inputs
    dx, dscale, doffset = op.graph.create_op(
        "FusedBatchNormGradV3", [g, x, scale, mean, variance],
        [x.dtype, scale.dtype, scale.dtype], [x.shape, scale.shape, scale.shape],
        name="FusedBatchNormGradV3", attrs=dict(op.attrs)).outputs
    return [dx, dscale, doffset, None, None]


def _work_dtype(x: np.ndarray) -> Any:
    # Elementwise work in float32 for float16/float32 input (as TF's kernel); the
    # per-channel sums accumulate in float64.
    return np.float64 if x.dtype == np.float64 else np.float32


def _count(x: np.ndarray, axes: tuple[int, ...]) -> int:
    return int(np.prod([x.shape[a] for a in axes]))


@register("FusedBatchNormV3", grad=_fbn_grad)
def _fbn_kernel(x: np.ndarray, scale: np.ndarray, offset: np.ndarray, mean: np.ndarray,
                variance: np.ndarray, *, epsilon: float, is_training: bool,
                data_format: str, exponential_avg_factor: float
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    axes, bshape = _axes(x, data_format)
    wd = _work_dtype(x)
    xw = x.astype(wd, copy=False)
    if is_training:
        n = _count(x, axes)
        m = xw.mean(axis=axes, dtype=np.float64)
        d = xw - m.astype(wd).reshape(bshape)
        v = np.square(d).mean(axis=axes, dtype=np.float64)
        out_var = v * (n / (n - 1) if n > 1 else 1.0)  # Bessel-corrected, as TF's kernel
        out_mean = m
        f = exponential_avg_factor
        if f != 1.0:
            out_mean = (1 - f) * mean + f * m
            out_var = (1 - f) * variance + f * out_var
    else:
        m, v = mean.astype(np.float64), variance.astype(np.float64)
        d = xw - m.astype(wd).reshape(bshape)
        out_mean, out_var = mean, variance
    inv = 1.0 / np.sqrt(v + epsilon)
    d *= (scale * inv).astype(wd).reshape(bshape)
    d += offset.astype(wd).reshape(bshape)
    return (d.astype(x.dtype, copy=False), np.asarray(out_mean, scale.dtype),
            np.asarray(out_var, scale.dtype))


@register("FusedBatchNormGradV3")
def _fbn_grad_kernel(g: np.ndarray, x: np.ndarray, scale: np.ndarray, mean: np.ndarray,
                     variance: np.ndarray, *, epsilon: float, is_training: bool,
                     data_format: str, exponential_avg_factor: float
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    del exponential_avg_factor
    axes, bshape = _axes(x, data_format)
    wd = _work_dtype(x)
    xw, gw = x.astype(wd, copy=False), g.astype(wd, copy=False)
    if is_training:
        m = xw.mean(axis=axes, dtype=np.float64)
        xhat = xw - m.astype(wd).reshape(bshape)
        v = np.square(xhat).mean(axis=axes, dtype=np.float64)
    else:
        m, v = mean.astype(np.float64), variance.astype(np.float64)
        xhat = xw - m.astype(wd).reshape(bshape)
    inv = 1.0 / np.sqrt(v + epsilon)
    xhat *= inv.astype(wd).reshape(bshape)
    doffset = gw.sum(axis=axes, dtype=np.float64)
    dscale = (gw * xhat).sum(axis=axes, dtype=np.float64)
    k = (scale * inv).astype(wd).reshape(bshape)
    if is_training:
        n = max(_count(x, axes), 1)
        xhat *= (dscale / n).astype(wd).reshape(bshape)
        xhat += (doffset / n).astype(wd).reshape(bshape)
        dx = gw - xhat
        dx *= k
    else:
        dx = gw * k
    return dx.astype(x.dtype, copy=False), dscale.astype(scale.dtype), doffset.astype(scale.dtype)


def fused_batch_norm(x: Any, scale: Any, offset: Any, mean: Any = None, variance: Any = None,
                     epsilon: float = 0.001, data_format: str = "NHWC",
                     is_training: bool = True, name: str | None = None,
                     exponential_avg_factor: float = 1.0) -> tuple[Tensor, Tensor, Tensor]:
    """Batch normalization in one op, as ``tf.nn.fused_batch_norm`` (``FusedBatchNormV3``).

    ``x``: ``[N, H, W, C]`` (``NHWC``; also ``NCHW``, ``NDHWC``, ``NCDHW``), float16 or
    float32; ``scale``, ``offset``, ``mean``, ``variance``: float32 ``[C]``.
    Returns ``(y, batch_mean, batch_var)``: ``y`` like ``x``; with ``is_training`` the
    statistics are the batch's, ``y`` uses the biased variance and ``batch_var`` is the
    Bessel-corrected one (``n / (n - 1)``), as TF's kernel; with ``exponential_avg_factor``
    ``f != 1`` they are ``(1 - f) * mean + f * batch`` (likewise the variance). Without
    ``is_training`` the given ``mean``/``variance`` normalize and are returned as is.
    The gradient flows into ``x``, ``scale`` and ``offset`` from ``y`` only (as TF).

    Raises:
        ValueError: ``mean``/``variance`` missing when not training (or ``f != 1``), a bad
            ``data_format``, or shapes that do not fit.
        TypeError: ``x`` not float16/float32, or ``scale``/``offset``/``mean``/``variance``
            not float32.
    """
    if (not is_training or exponential_avg_factor != 1.0) and (mean is None or variance is None):
        raise CkptsyncValueError(
            "Both `mean` and `variance` must be a 1D tensor when `is_training` is False or "
            f"`exponential_avg_factor` != 1.0. Received: `mean` {mean!r} and `variance` "
            f"{variance!r}")
    if data_format not in _FORMATS:
        raise CkptsyncValueError(f"FusedBatchNormV3: data_format must be one of "
                                 f"{sorted(_FORMATS)}, got {data_format!r}.")
    t = convert_to_tensor(x, name="input")
    if t.dtype not in (_dtypes.float16, _dtypes.float32):
        raise CkptsyncTypeError(f"FusedBatchNormV3: x must be float16 or float32, got "
                                f"{t.dtype.name}.")
    vecs = [convert_to_tensor(v, dtype=None if isinstance(v, Tensor) else _dtypes.float32)
            for v in (scale, offset, mean if mean is not None else [],
                      variance if variance is not None else [])]
    rank = _FORMATS[data_format]
    if t.shape.ndims is not None and t.shape.ndims != rank:
        raise CkptsyncValueError(f"FusedBatchNormV3: x must be {rank}-D for {data_format}, got "
                                 f"shape {t.shape}.")
    xdims = t.shape.dims
    chan = None if xdims is None else xdims[1 if data_format.startswith("NC") else -1]
    for label, v in zip(("scale", "offset", "mean", "variance"), vecs):
        if v.dtype != _dtypes.float32:
            raise CkptsyncTypeError(f"FusedBatchNormV3: {label} must be float32, got "
                                    f"{v.dtype.name}.")
        if label in ("mean", "variance") and is_training and exponential_avg_factor == 1.0:
            continue
        if v.shape.ndims is not None and v.shape.ndims != 1:
            raise CkptsyncValueError(f"FusedBatchNormV3: {label} must be 1-D, got shape "
                                     f"{v.shape}.")
        vdims = v.shape.dims
        n = vdims[0] if vdims else None
        if chan is not None and n is not None and n != chan:
            raise CkptsyncValueError(f"FusedBatchNormV3: {label} must have {chan} elements "
                                     f"(the channels of x {t.shape}), got shape {v.shape}.")
    stat = [chan]
    op = t.graph.create_op(
        "FusedBatchNormV3", [t, *vecs], [t.dtype, _dtypes.float32, _dtypes.float32],
        [t.shape, stat, stat], name=name or "FusedBatchNormV3",
        attrs={"epsilon": float(epsilon), "is_training": bool(is_training),
               "data_format": data_format,
               "exponential_avg_factor": float(exponential_avg_factor)})
    return op.outputs[0], op.outputs[1], op.outputs[2]
