"""Sliding-window arithmetic shared by convolution and pooling (NHWC), as TF1.

Build-time argument checks (``strides``, ``ksize``, ``dilations``, ``padding``) and the
numpy side: output sizes and TF's padding split, padded copies, the strided patch view
that im2col turns into one matmul, and the per-tap slices col2im adds into.

TF's padding (``tensorflow/core/framework/kernel_shape_util.cc``), per spatial dim, with
``k_eff = (k - 1) * dilation + 1``:
    VALID     ``out = (in - k_eff) // stride + 1``, no padding.
    SAME      ``out = ceil(in / stride)``; ``total = max((out - 1) * stride + k_eff - in, 0)``,
              ``before = total // 2`` and ``after = total - before`` (more at the end).
    explicit  ``[[0, 0], [top, bottom], [left, right], [0, 0]]``:
              ``out = (in + top + bottom - k_eff) // stride + 1``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import CkptsyncValueError, InvalidArgumentError

__all__ = ["hw_arg", "padding_arg", "check_data_format", "out_size", "static_out_size",
           "geometry", "padded", "patches", "tap_slices"]

# (top, bottom), (left, right) for explicit padding, else "SAME" / "VALID".
Padding = Any


def hw_arg(op: str, arg: str, value: Any, default: int | None = None) -> tuple[int, int]:
    """``(h, w)`` from an int or a list of 1, 2 or 4 ints (NHWC), as TF's ``strides``.

    Raises:
        ValueError: another length, a value < 1, or a 4-list with a batch or channel
            entry other than 1 (names ``op`` and ``arg``).
    """
    if value is None:
        if default is None:
            raise CkptsyncValueError(f"{op}: {arg} is required (an int or a list of 1, 2 or 4 "
                                     "ints).")
        return default, default
    vals = [int(v) for v in np.asarray(value).reshape(-1)]
    if len(vals) == 1:
        h = w = vals[0]
    elif len(vals) == 2:
        h, w = vals
    elif len(vals) == 4:
        if vals[0] != 1 or vals[3] != 1:
            raise CkptsyncValueError(
                f"{op}: {arg} {vals} must be 1 in the batch and depth dimensions (NHWC: "
                "[1, h, w, 1]); the implementation does not support others, as TF1's CPU "
                "kernels.")
        h, w = vals[1], vals[2]
    else:
        raise CkptsyncValueError(f"{op}: {arg} should be of length 1, 2 or 4, got {vals}.")
    if h < 1 or w < 1:
        raise CkptsyncValueError(f"{op}: {arg} must be positive, got {vals}.")
    return h, w


def padding_arg(op: str, padding: Any, explicit_ok: bool = True) -> Padding:
    """``"SAME"``, ``"VALID"`` or, for explicit padding, ``((top, bottom), (left, right))``.

    Raises:
        ValueError: another string, or an explicit list that is not ``[[0, 0], [t, b],
            [l, r], [0, 0]]`` of non-negative ints.
    """
    if isinstance(padding, (str, bytes)):
        p = padding.decode() if isinstance(padding, bytes) else padding
        if p.upper() in ("SAME", "VALID"):
            return p.upper()
        raise CkptsyncValueError(f"{op}: padding must be 'SAME' or 'VALID'"
                                 f"{' or an explicit list' if explicit_ok else ''}, got {p!r}.")
    if not explicit_ok or padding is None:
        raise CkptsyncValueError(f"{op}: padding must be 'SAME' or 'VALID', got {padding!r}.")
    arr = np.asarray(padding)
    if arr.shape != (4, 2) or arr.dtype.kind not in "iu" or (arr < 0).any() \
            or arr[0].any() or arr[3].any():
        raise CkptsyncValueError(
            f"{op}: explicit padding must be [[0, 0], [top, bottom], [left, right], [0, 0]] of "
            f"non-negative ints (NHWC), got {padding!r}.")
    return (int(arr[1, 0]), int(arr[1, 1])), (int(arr[2, 0]), int(arr[2, 1]))


def check_data_format(op: str, data_format: Any) -> None:
    """Only NHWC is supported, as TF1's CPU kernels (TF fails NCHW at run time).

    Raises:
        ValueError: ``data_format`` is not ``"NHWC"``.
    """
    fmt = data_format.decode() if isinstance(data_format, bytes) else data_format
    if fmt not in ("NHWC", None):
        raise CkptsyncValueError(
            f"{op}: data_format {fmt!r} is not supported; only 'NHWC' is (as TF1's CPU "
            "kernels). Transpose the input to [batch, height, width, channels].")


def out_size(size: int, k: int, stride: int, dilation: int, padding: Padding, axis: int
             ) -> tuple[int, int, int]:
    """``(out, before, after)`` for one spatial dim (``axis`` 0: height, 1: width)."""
    k_eff = (k - 1) * dilation + 1
    if padding == "VALID":
        return (size - k_eff) // stride + 1 if size >= k_eff else 0, 0, 0
    if padding == "SAME":
        out = -(-size // stride)
        total = max((out - 1) * stride + k_eff - size, 0)
        return out, total // 2, total - total // 2
    before, after = padding[axis]
    span = size + before + after
    return (span - k_eff) // stride + 1 if span >= k_eff else 0, before, after


def static_out_size(op: str, size: int | None, k: int | None, stride: int, dilation: int,
                    padding: Padding, axis: int) -> int | None:
    """The static output size, or None when unknown.

    Raises:
        ValueError: the window does not fit (TF's "Negative dimension size" message).
    """
    if size is None or k is None:
        return None
    k_eff = (k - 1) * dilation + 1
    span = size + (sum(padding[axis]) if isinstance(padding, tuple) else 0)
    if padding != "SAME" and span < k_eff:
        raise CkptsyncValueError(
            f"Negative dimension size caused by subtracting {k_eff} from {span} for '{op}' "
            f"(window {k}, dilation {dilation}, padding {padding}).")
    return out_size(size, k, stride, dilation, padding, axis)[0]


def geometry(op: str, h: int, w: int, ksize: tuple[int, int], strides: tuple[int, int],
             dilations: tuple[int, int], padding: Padding) -> tuple[int, int, tuple[int, ...]]:
    """``(out_h, out_w, (top, bottom, left, right))`` at run time.

    Raises:
        InvalidArgumentError: the window does not fit the input.
    """
    oh, top, bottom = out_size(h, ksize[0], strides[0], dilations[0], padding, 0)
    ow, left, right = out_size(w, ksize[1], strides[1], dilations[1], padding, 1)
    if oh <= 0 or ow <= 0:
        raise InvalidArgumentError(
            None, None, f"{op}: the {ksize[0]}x{ksize[1]} window (dilations {dilations}) does "
            f"not fit the {h}x{w} input with padding {padding}; the output would be empty.")
    return oh, ow, (top, bottom, left, right)


def padded(x: np.ndarray, pads: tuple[int, ...], value: Any = 0) -> np.ndarray:
    """``x [N, H, W, C]`` with ``pads = (top, bottom, left, right)`` of ``value`` around it."""
    top, bottom, left, right = pads
    if not any(pads):
        return x
    n, h, w, c = x.shape
    out = np.full((n, h + top + bottom, w + left + right, c), value, dtype=x.dtype)
    out[:, top:top + h, left:left + w] = x
    return out


def patches(xp: np.ndarray, ksize: tuple[int, int], strides: tuple[int, int],
            dilations: tuple[int, int], oh: int, ow: int) -> np.ndarray:
    """A read-only view ``[N, out_h, out_w, kh, kw, C]`` of the padded input's windows."""
    sn, sh, sw, sc = xp.strides
    n, c = xp.shape[0], xp.shape[3]
    return as_strided(xp, (n, oh, ow, ksize[0], ksize[1], c),
                      (sn, sh * strides[0], sw * strides[1], sh * dilations[0],
                       sw * dilations[1], sc), writeable=False)


def tap_slices(ksize: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int],
               oh: int, ow: int) -> list[tuple[int, int, tuple[slice, slice, slice]]]:
    """For each window tap ``(i, j)`` (row-major), the slice of the padded input it reads.

    ``xp[s]`` is ``[N, out_h, out_w, C]``: tap ``(i, j)`` of every window at once.
    """
    out = []
    for i in range(ksize[0]):
        for j in range(ksize[1]):
            r0, c0 = i * dilations[0], j * dilations[1]
            out.append((i, j, (slice(None), slice(r0, r0 + strides[0] * (oh - 1) + 1, strides[0]),
                               slice(c0, c0 + strides[1] * (ow - 1) + 1, strides[1]))))
    return out
