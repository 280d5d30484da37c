"""2-D convolution (NHWC): ``conv2d`` and ``conv2d_transpose``, as TF1's ``tf.nn``.

Op types as TF: ``Conv2D(input, filter)``, ``Conv2DBackpropInput(input_sizes, filter,
out_backprop)`` (the input gradient, and ``conv2d_transpose``) and
``Conv2DBackpropFilter(input, filter_sizes, out_backprop)``; each gradient is written with
the others. Kernels are im2col and one matmul: a strided view of the padded input's
windows ``[N, out_h, out_w, kh, kw, C]`` is copied to ``[N*out_h*out_w, kh*kw*C]`` and
multiplied by the filter ``[kh*kw*C, out_C]``; the input gradient multiplies back and adds
each of the ``kh*kw`` taps into the padded input (col2im), vectorised over batch and pixels.
The pooling ops (``max_pool``, ``avg_pool``) live in :mod:`.pool_ops` and are exported here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError, InvalidArgumentError
from ..graph import Tensor
from ..tensor_shape import TensorShape
from .array_ops import convert_to_tensor, shape
from .const_fold import constant_value_as_shape
from .pool_ops import avg_pool, max_pool  # noqa: F401  (exported as cs.nn.*)
from .registry import register, single
from .windows import (
    check_data_format,
    geometry,
    hw_arg,
    padded,
    padding_arg,
    patches,
    static_out_size,
    tap_slices,
)

__all__: list[str] = []
# Names also (or only) exported as ``cs.nn.<name>``.
NN_EXPORTS: tuple[str, ...] = ("conv2d", "conv2d_transpose", "max_pool", "avg_pool")

_CONV_DTYPES = (_dtypes.float16, _dtypes.float32, _dtypes.float64, _dtypes.int32)


# --------------------------------------------------------------------- kernels
def _im2col(x: np.ndarray, ksize: tuple[int, int], strides: tuple[int, int],
            dilations: tuple[int, int], padding: Any, op: str) -> tuple[np.ndarray, int, int]:
    n, h, w, c = x.shape
    oh, ow, pads = geometry(op, h, w, ksize, strides, dilations, padding)
    cols = patches(padded(x, pads), ksize, strides, dilations, oh, ow)
    return cols.reshape(n * oh * ow, ksize[0] * ksize[1] * c), oh, ow


def _check_depth(op: str, c: int, c_filter: int) -> None:
    if c != c_filter:
        raise InvalidArgumentError(
            None, None, f"{op}: input depth must equal the filter's input depth: {c} vs "
            f"{c_filter}.")


@register("Conv2D", grad=lambda op, g: _grad_conv2d(op, g))
def _conv2d_kernel(x: np.ndarray, w: np.ndarray, *, strides: tuple[int, int],
                   dilations: tuple[int, int], padding: Any) -> np.ndarray:
    kh, kw, c, o = w.shape
    _check_depth("Conv2D", x.shape[3], c)
    cols, oh, ow = _im2col(x, (kh, kw), strides, dilations, padding, "Conv2D")
    return (cols @ w.reshape(kh * kw * c, o)).reshape(x.shape[0], oh, ow, o)


@register("Conv2DBackpropFilter", grad=lambda op, g: _grad_backprop_filter(op, g))
def _conv2d_backprop_filter_kernel(x: np.ndarray, filter_sizes: np.ndarray, dy: np.ndarray, *,
                                   strides: tuple[int, int], dilations: tuple[int, int],
                                   padding: Any) -> np.ndarray:
    kh, kw, c, o = (int(s) for s in filter_sizes)
    _check_depth("Conv2DBackpropFilter", x.shape[3], c)
    cols, oh, ow = _im2col(x, (kh, kw), strides, dilations, padding, "Conv2DBackpropFilter")
    _check_out_backprop("Conv2DBackpropFilter", dy, (x.shape[0], oh, ow, o))
    return (cols.T @ dy.reshape(-1, o)).reshape(kh, kw, c, o)


def _check_out_backprop(op: str, dy: np.ndarray, expected: tuple[int, ...]) -> None:
    if tuple(dy.shape) != tuple(expected):
        raise InvalidArgumentError(
            None, None, f"{op}: Size of out_backprop doesn't match computed: actual = "
            f"{list(dy.shape)}, computed = {list(expected)} (input sizes, filter, strides and "
            "padding give the latter).")


@register("Conv2DBackpropInput", grad=lambda op, g: _grad_backprop_input(op, g))
def _conv2d_backprop_input_kernel(input_sizes: np.ndarray, w: np.ndarray, dy: np.ndarray, *,
                                  strides: tuple[int, int], dilations: tuple[int, int],
                                  padding: Any) -> np.ndarray:
    n, h, wd, c = (int(s) for s in input_sizes)
    kh, kw, c_filter, o = w.shape
    if c != c_filter:
        raise InvalidArgumentError(
            None, None, f"Conv2DBackpropInput: input_sizes {list(input_sizes)} must have the "
            f"filter's input depth {c_filter} as their last entry.")
    oh, ow, pads = geometry("Conv2DBackpropInput", h, wd, (kh, kw), strides, dilations, padding)
    _check_out_backprop("Conv2DBackpropInput", dy, (n, oh, ow, o))
    dcols = (dy.reshape(-1, o) @ w.reshape(kh * kw * c, o).T).reshape(n, oh, ow, kh, kw, c)
    top, bottom, left, right = pads
    dxp = np.zeros((n, h + top + bottom, wd + left + right, c), dtype=dcols.dtype)
    for i, j, s in tap_slices((kh, kw), strides, dilations, oh, ow):
        dxp[s] += dcols[:, :, :, i, j]
    if not any(pads):
        return dxp
    return np.ascontiguousarray(dxp[:, top:top + h, left:left + wd])


# --------------------------------------------------------------------- gradients
def _attrs(op: Any) -> dict[str, Any]:
    return {k: op.get_attr(k) for k in ("strides", "dilations", "padding")}


def _backprop_input(sizes: Tensor, w: Tensor, dy: Tensor, attrs: dict[str, Any],
                    static: Any, name: str | None = None) -> Tensor:
    return single("Conv2DBackpropInput", [sizes, w, dy], dy.dtype, static, name=name,
                  attrs=attrs)


def _backprop_filter(x: Tensor, sizes: Tensor, dy: Tensor, attrs: dict[str, Any],
                     static: Any) -> Tensor:
    return single("Conv2DBackpropFilter", [x, sizes, dy], dy.dtype, static, attrs=attrs)


def _grad_conv2d(op: Any, g: Tensor) -> list[Any]:
    x, w = op.inputs
    a = _attrs(op)
    return [_backprop_input(shape(x), w, g, a, x.shape),
            _backprop_filter(x, shape(w), g, a, w.shape)]


def _grad_backprop_input(op: Any, g: Tensor) -> list[Any]:
    _, w, dy = op.inputs
    a = _attrs(op)
    return [None, _backprop_filter(g, shape(w), dy, a, w.shape),
            single("Conv2D", [g, w], g.dtype, dy.shape, attrs=a)]


def _grad_backprop_filter(op: Any, g: Tensor) -> list[Any]:
    x, _, dy = op.inputs
    a = _attrs(op)
    return [_backprop_input(shape(x), g, dy, a, x.shape), None,
            single("Conv2D", [x, g], g.dtype, dy.shape, attrs=a)]


# --------------------------------------------------------------------- constructors
def _operands(op: str, value: Any, flt: Any) -> tuple[Tensor, Tensor]:
    x = convert_to_tensor(value)
    w = convert_to_tensor(flt) if _is_tensor(flt) else convert_to_tensor(flt, dtype=x.dtype)
    if x.dtype not in _CONV_DTYPES:
        raise CkptsyncTypeError(f"{op}: input must be float16, float32, float64 or int32, got "
                                f"{x.dtype.name} for {x.name}.")
    if w.dtype != x.dtype:
        raise CkptsyncTypeError(f"{op}: filter of dtype {w.dtype.name} does not match dtype "
                                f"{x.dtype.name} of the input ({w.name} vs {x.name}).")
    for t, what in ((x, "input"), (w, "filter")):
        if t.shape.ndims is not None and t.shape.ndims != 4:
            raise CkptsyncValueError(
                f"Shape must be rank 4 but is rank {t.shape.ndims} for '{op}': the {what} "
                f"{t.name} has shape {t.shape}, expected [batch, height, width, channels]"
                f"{'' if what == 'input' else ' ([height, width, in, out] for a filter)'}.")
    return x, w


def _dims(t: Tensor) -> list[int | None]:
    return list(t.shape.dims) if t.shape.dims is not None else [None] * 4


def conv2d(input: Any, filter: Any = None, strides: Any = None,  # noqa: A002 - TF's names
           padding: Any = None, use_cudnn_on_gpu: bool = True, data_format: str = "NHWC",
           dilations: Any = (1, 1, 1, 1), name: str | None = None, filters: Any = None
           ) -> Tensor:
    """2-D cross-correlation of ``input [batch, h, w, in_C]`` with ``filter [kh, kw, in_C, out_C]``.

    As TF1's ``tf.nn.conv2d`` (op type ``Conv2D``): output ``[batch, out_h, out_w, out_C]``
    of the input's dtype (float16/32/64 or int32), ``out_h = ceil(h / stride)`` for
    ``"SAME"`` (zero padding, the extra row/column at the end),
    ``(h - (kh - 1) * dilation - 1) // stride + 1`` for ``"VALID"``; ``padding`` may also be
    explicit, ``[[0, 0], [top, bottom], [left, right], [0, 0]]``. ``strides`` and
    ``dilations`` are an int or 1, 2 or 4 ints. ``filters=`` is the TF2 spelling of
    ``filter=``. Gradients: ``Conv2DBackpropInput`` and ``Conv2DBackpropFilter``.

    Example::

        y = cs.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME")  # x [64, 8, 8, 1]

    Raises:
        ValueError: both or neither of ``filter``/``filters``; a rank other than 4; depths
            that differ; a bad ``strides``/``dilations``/``padding``; ``data_format`` other
            than ``"NHWC"``; a window that does not fit (``"VALID"``).
        TypeError: an unsupported dtype, or ``filter``'s dtype differs from ``input``'s.
        InvalidArgumentError: at run time, shapes that disagree.
    """
    del use_cudnn_on_gpu
    if filter is not None and filters is not None:
        raise CkptsyncValueError("Cannot specify both 'filter' and 'filters'.")
    flt = filters if filter is None else filter
    if flt is None:
        raise CkptsyncValueError("conv2d: filter (or filters=) is required: [kh, kw, in, out].")
    check_data_format("Conv2D", data_format)
    x, w = _operands("Conv2D", input, flt)
    st = hw_arg("Conv2D", "strides", strides)
    dl = hw_arg("Conv2D", "dilations", dilations, default=1)
    pad = padding_arg("Conv2D", padding)
    n, h, wd, c = _dims(x)
    kh, kw, cf, o = _dims(w)
    if c is not None and cf is not None and c != cf:
        if c % cf == 0:
            raise CkptsyncValueError(
                f"Conv2D: grouped convolutions are not supported: the input depth {c} must "
                f"equal the filter's input depth {cf}.")
        raise CkptsyncValueError(f"Depth of input ({c}) is not a multiple of input depth of "
                                 f"filter ({cf}) for 'Conv2D' with input shapes {x.shape}, "
                                 f"{w.shape}.")
    out = [n, static_out_size("Conv2D", h, kh, st[0], dl[0], pad, 0),
           static_out_size("Conv2D", wd, kw, st[1], dl[1], pad, 1), o]
    return single("Conv2D", [x, w], x.dtype, out, name=name,
                  attrs={"strides": st, "dilations": dl, "padding": pad})


def _is_tensor(v: Any) -> bool:
    return isinstance(v, Tensor) or hasattr(v, "_as_graph_element")


def _static_sizes(output_shape: Any) -> tuple[Tensor, list[int | None]]:
    """The ``input_sizes`` tensor and what is known of it at build time (as TF's shape
    function: constants, ``tf.stack``/lists mixing ints and tensors, ``tf.shape``)."""
    mixed = isinstance(output_shape, (list, tuple)) and any(_is_tensor(v) for v in output_shape)
    if _is_tensor(output_shape) or mixed:
        t = convert_to_tensor(output_shape)
        if t.dtype not in (_dtypes.int32, _dtypes.int64):
            raise CkptsyncTypeError(f"conv2d_transpose: output_shape must be int32 or int64, got "
                                    f"{t.dtype.name}.")
        dims = t.shape.dims
        if dims is not None and (len(dims) != 1 or dims[0] not in (4, None)):
            raise CkptsyncValueError(f"conv2d_transpose: output_shape must have shape (4,), got "
                                     f"{t.shape}.")
        known = constant_value_as_shape(t).dims
        return t, list(known) if known is not None and len(known) == 4 else [None] * 4
    vals = np.asarray(output_shape)
    if vals.shape != (4,) or vals.dtype.kind not in "iu":
        raise CkptsyncValueError(f"conv2d_transpose: output_shape must have shape (4,), got "
                                 f"{list(vals.shape)} ({output_shape!r}).")
    return convert_to_tensor(vals.astype(np.int32)), [int(v) for v in vals]


def conv2d_transpose(value: Any = None, filter: Any = None,  # noqa: A002 - TF's name
                     output_shape: Any = None, strides: Any = None, padding: Any = "SAME",
                     data_format: str = "NHWC", name: str | None = None, input: Any = None,  # noqa: A002
                     filters: Any = None, dilations: Any = None) -> Tensor:
    """The gradient of ``conv2d`` with respect to its input, as TF1's ``tf.nn.conv2d_transpose``.

    ``value [batch, h, w, in_C]`` with ``filter [kh, kw, out_C, in_C]`` gives
    ``output_shape`` = ``[batch, out_h, out_w, out_C]`` (a list or an int32 tensor): the
    shape whose ``conv2d`` with ``filter``, ``strides``, ``padding`` is ``value``'s. Op type
    ``Conv2DBackpropInput``, default name ``conv2d_transpose``. ``input=``/``filters=`` are
    TF2's spellings of ``value=``/``filter=``.

    Raises:
        ValueError: ``output_shape`` not 4 entries; ``value``'s depth differs from
            ``filter``'s last dimension, or ``output_shape``'s depth from ``filter``'s
            third; bad ``strides``/``padding``/``data_format``.
        TypeError: dtypes as :func:`conv2d`.
        InvalidArgumentError: at run time, ``value``'s shape is not what ``output_shape``
            convolved gives ("Size of out_backprop doesn't match computed").
    """
    if value is not None and input is not None:
        raise CkptsyncValueError("Cannot specify both 'value' and 'input'.")
    if filter is not None and filters is not None:
        raise CkptsyncValueError("Cannot specify both 'filter' and 'filters'.")
    value = input if value is None else value
    flt = filters if filter is None else filter
    if value is None or flt is None or output_shape is None:
        raise CkptsyncValueError("conv2d_transpose: value, filter and output_shape are required.")
    check_data_format("Conv2DBackpropInput", data_format)
    dy, w = _operands("Conv2DBackpropInput", value, flt)
    st = hw_arg("Conv2DBackpropInput", "strides", strides)
    dl = hw_arg("Conv2DBackpropInput", "dilations", dilations, default=1)
    pad = padding_arg("Conv2DBackpropInput", padding)
    sizes, static = _static_sizes(output_shape)
    kh, kw, cout, cin = _dims(w)
    c_value = _dims(dy)[3]
    if c_value is not None and cin is not None and c_value != cin:
        raise CkptsyncValueError(
            f"Dimensions must be equal, but are {c_value} and {cin} for 'conv2d_transpose': "
            f"value {dy.shape} has depth {c_value}, filter {w.shape} expects {cin} (its last "
            "dimension).")
    if static[3] is not None and cout is not None and static[3] != cout:
        raise CkptsyncValueError(
            f"conv2d_transpose: output_shape's depth {static[3]} does not match the filter's "
            f"output channels {cout} (filter {w.shape}, dimension 2).")
    static[0] = _dims(dy)[0]  # as TF's shape function: the batch comes from value
    return single("Conv2DBackpropInput", [sizes, w, dy], dy.dtype, TensorShape(static),
                  name=name or "conv2d_transpose",
                  attrs={"strides": st, "dilations": dl, "padding": pad})
