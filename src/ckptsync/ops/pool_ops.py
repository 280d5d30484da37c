"""2-D pooling (NHWC): ``max_pool`` and ``avg_pool``, as TF1's ``tf.nn`` (exported by
:mod:`.conv_ops`).

Op types as TF: ``MaxPool``, ``MaxPoolGrad(orig_input, orig_output, grad)``, ``AvgPool``
and ``AvgPoolGrad(orig_input_shape, grad)``. Kernels loop over the ``kh*kw`` window taps,
each a strided slice of the padded input covering every window at once (vectorised over
batch, pixels and channels). As TF: ``"SAME"`` pads more at the end; max pooling pads
with the lowest value (padding never wins), average pooling divides by the number of
valid (unpadded) elements of each window; ``MaxPoolGrad`` sends each window's gradient to
the first maximum in row-major order (ties as TF's CPU kernel).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Tensor
from .array_ops import convert_to_tensor, shape
from .registry import register, single
from .windows import (
    check_data_format,
    geometry,
    hw_arg,
    padded,
    padding_arg,
    static_out_size,
    tap_slices,
)

__all__ = ["max_pool", "avg_pool"]

_ONE = (1, 1)
_MAX_DTYPES = (_dtypes.float16, _dtypes.float32, _dtypes.float64, _dtypes.int32, _dtypes.int64,
               _dtypes.uint8, _dtypes.int8, _dtypes.int16)
_AVG_DTYPES = (_dtypes.float16, _dtypes.float32, _dtypes.float64)


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _windows(op: str, x_shape: tuple[int, ...], ksize: tuple[int, int],
             strides: tuple[int, int], padding: Any) -> tuple[int, int, tuple[int, ...], list]:
    oh, ow, pads = geometry(op, x_shape[1], x_shape[2], ksize, strides, _ONE, padding)
    return oh, ow, pads, tap_slices(ksize, strides, _ONE, oh, ow)


def _crop(xp: np.ndarray, pads: tuple[int, ...], h: int, w: int) -> np.ndarray:
    if not any(pads):
        return xp
    return np.ascontiguousarray(xp[:, pads[0]:pads[0] + h, pads[2]:pads[2] + w])


# --------------------------------------------------------------------- max pool
@register("MaxPool", grad=lambda op, g: [single(
    "MaxPoolGrad", [op.inputs[0], op.outputs[0], g], g.dtype, op.inputs[0].shape,
    attrs=dict(op.attrs))])
def _max_pool_kernel(x: np.ndarray, *, ksize: tuple[int, int], strides: tuple[int, int],
                     padding: Any) -> np.ndarray:
    _, _, pads, taps = _windows("MaxPool", x.shape, ksize, strides, padding)
    xp = padded(x, pads, _lowest(x.dtype))
    out = xp[taps[0][2]].copy()
    for _, _, s in taps[1:]:
        np.maximum(out, xp[s], out=out)
    return out


def _grad_max_pool_grad(op: Any, gg: Tensor) -> list[Any]:
    x, y, _ = op.inputs
    return [None, None, single("MaxPoolGradGrad", [x, y, gg], gg.dtype, y.shape,
                               attrs=dict(op.attrs))]


def _first_max_taps(x: np.ndarray, y: np.ndarray, ksize: tuple[int, int],
                    strides: tuple[int, int], padding: Any, op: str) -> Any:
    """Yields ``(slice, hit, padded x, pads)`` per tap: ``hit`` marks the windows whose
    first maximum (row-major) is that tap. ``hit`` is one buffer, rewritten per tap."""
    _, _, pads, taps = _windows(op, x.shape, ksize, strides, padding)
    xp = padded(x, pads, _lowest(x.dtype))
    taken = np.zeros(y.shape, dtype=bool)
    hit = np.empty(y.shape, dtype=bool)
    for k, (_, _, s) in enumerate(taps):
        np.equal(xp[s], y, out=hit)
        np.greater(hit, taken, out=hit)  # hit and not taken
        if k + 1 < len(taps):
            taken |= hit
        yield s, hit, xp, pads


@register("MaxPoolGrad", grad=_grad_max_pool_grad)
def _max_pool_grad_kernel(x: np.ndarray, y: np.ndarray, g: np.ndarray, *,
                          ksize: tuple[int, int], strides: tuple[int, int],
                          padding: Any) -> np.ndarray:
    # Disjoint windows write their taps; windows that tile the padded input cover it all.
    disjoint = ksize[0] <= strides[0] and ksize[1] <= strides[1]
    dxp: np.ndarray | None = None
    pads: tuple[int, ...] = (0, 0, 0, 0)
    for s, hit, xp, tap_pads in _first_max_taps(x, y, ksize, strides, padding, "MaxPoolGrad"):
        if dxp is None:
            pads = tap_pads
            tiles = ksize == strides and xp.shape[1:3] == (y.shape[1] * strides[0],
                                                           y.shape[2] * strides[1])
            dxp = (np.empty if tiles else np.zeros)(xp.shape, dtype=g.dtype)
        if disjoint:
            np.multiply(g, hit, out=dxp[s])
        else:
            dxp[s] += g * hit
    assert dxp is not None
    return _crop(dxp, pads, x.shape[1], x.shape[2])


@register("MaxPoolGradGrad")
def _max_pool_grad_grad_kernel(x: np.ndarray, y: np.ndarray, gg: np.ndarray, *,
                               ksize: tuple[int, int], strides: tuple[int, int],
                               padding: Any) -> np.ndarray:
    out = np.zeros(y.shape, dtype=gg.dtype)
    ggp = None
    for s, hit, _, pads in _first_max_taps(x, y, ksize, strides, padding, "MaxPoolGradGrad"):
        if ggp is None:
            ggp = padded(gg, pads, 0)
        out[hit] = ggp[s][hit]
    return out


# --------------------------------------------------------------------- avg pool
def _counts(h: int, w: int, ksize: tuple[int, int], strides: tuple[int, int], oh: int, ow: int,
            pads: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``[out_h, out_w, 1]``: how many unpadded elements each window covers."""
    def one(size: int, k: int, s: int, o: int, before: int) -> np.ndarray:
        start = np.arange(o) * s - before
        return np.minimum(start + k, size) - np.maximum(start, 0)

    ch = one(h, ksize[0], strides[0], oh, pads[0])
    cw = one(w, ksize[1], strides[1], ow, pads[2])
    return np.multiply.outer(ch, cw).astype(dtype)[:, :, None]


def _grad_avg_pool(op: Any, g: Tensor) -> list[Any]:
    x = op.inputs[0]
    return [single("AvgPoolGrad", [shape(x), g], g.dtype, x.shape, attrs=dict(op.attrs))]


@register("AvgPool", grad=_grad_avg_pool)
def _avg_pool_kernel(x: np.ndarray, *, ksize: tuple[int, int], strides: tuple[int, int],
                     padding: Any) -> np.ndarray:
    oh, ow, pads, taps = _windows("AvgPool", x.shape, ksize, strides, padding)
    xp = padded(x, pads, 0)
    out = xp[taps[0][2]].copy()
    for _, _, s in taps[1:]:
        out += xp[s]
    out /= _counts(x.shape[1], x.shape[2], ksize, strides, oh, ow, pads, x.dtype)
    return out


@register("AvgPoolGrad", grad=lambda op, gg: [None, single(
    "AvgPool", [gg], gg.dtype, op.inputs[1].shape, attrs=dict(op.attrs))])
def _avg_pool_grad_kernel(sizes: np.ndarray, g: np.ndarray, *, ksize: tuple[int, int],
                          strides: tuple[int, int], padding: Any) -> np.ndarray:
    n, h, w, c = (int(v) for v in sizes)
    oh, ow, pads, taps = _windows("AvgPoolGrad", (n, h, w, c), ksize, strides, padding)
    gs = g / _counts(h, w, ksize, strides, oh, ow, pads, g.dtype)
    dxp = np.zeros((n, h + pads[0] + pads[1], w + pads[2] + pads[3], c), dtype=g.dtype)
    for _, _, s in taps:
        dxp[s] += gs
    return _crop(dxp, pads, h, w)


# --------------------------------------------------------------------- constructors
def _pool(op: str, allowed: tuple[_dtypes.DType, ...], value: Any, ksize: Any, strides: Any,
          padding: Any, data_format: Any, name: str | None) -> Tensor:
    check_data_format(op, data_format)
    x = convert_to_tensor(value)
    if x.dtype not in allowed:
        raise CkptsyncTypeError(f"{op}: input must be one of "
                                f"{', '.join(d.name for d in allowed)}, got {x.dtype.name} for "
                                f"{x.name}.")
    if x.shape.ndims is not None and x.shape.ndims != 4:
        raise CkptsyncValueError(
            f"Shape must be rank 4 but is rank {x.shape.ndims} for '{op}': the input {x.name} "
            f"has shape {x.shape}, expected [batch, height, width, channels].")
    k = hw_arg(op, "ksize", ksize)
    st = hw_arg(op, "strides", strides)
    pad = padding_arg(op, padding, explicit_ok=False)
    n, h, w, c = list(x.shape.dims) if x.shape.dims is not None else [None] * 4
    out = [n, static_out_size(op, h, k[0], st[0], 1, pad, 0),
           static_out_size(op, w, k[1], st[1], 1, pad, 1), c]
    return single(op, [x], x.dtype, out, name=name,
                  attrs={"ksize": k, "strides": st, "padding": pad})


def max_pool(value: Any, ksize: Any, strides: Any, padding: Any, data_format: str = "NHWC",
             name: str | None = None, input: Any = None) -> Tensor:  # noqa: A002 - TF's name
    """Max over ``ksize`` windows of ``value [batch, h, w, C]``, as TF1's ``tf.nn.max_pool``.

    Output ``[batch, out_h, out_w, C]`` of the input's dtype (floats and ints), sizes as
    :func:`~ckptsync.ops.conv_ops.conv2d`; ``ksize``/``strides`` are an int or 1, 2 or 4
    ints (batch and depth entries 1); ``padding`` ``"SAME"`` or ``"VALID"``. The gradient
    (``MaxPoolGrad``) goes to the first maximum of each window in row-major order.

    Example::

        p = cs.nn.max_pool(h, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME")

    Raises:
        ValueError: rank other than 4, bad ``ksize``/``strides``/``padding``/``data_format``,
            a window larger than the input with ``"VALID"``.
        TypeError: an unsupported dtype.
    """
    value = input if value is None else value
    return _pool("MaxPool", _MAX_DTYPES, value, ksize, strides, padding, data_format, name)


def avg_pool(value: Any, ksize: Any, strides: Any, padding: Any, data_format: str = "NHWC",
             name: str | None = None, input: Any = None) -> Tensor:  # noqa: A002 - TF's name
    """Mean over ``ksize`` windows of ``value [batch, h, w, C]``, as TF1's ``tf.nn.avg_pool``.

    As :func:`max_pool`, floats only; with ``"SAME"`` each window's sum is divided by the
    number of elements inside the input (padding is not counted). Gradient ``AvgPoolGrad``.

    Raises:
        ValueError, TypeError: as :func:`max_pool`.
    """
    value = input if value is None else value
    return _pool("AvgPool", _AVG_DTYPES, value, ksize, strides, padding, data_format, name)
