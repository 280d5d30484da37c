"""Reductions (``reduce_*``, ``argmax``/``argmin``, ``cumsum``), as TF1.

Every reduction takes TF1's spellings too: ``keep_dims=`` for ``keepdims=`` and
``reduction_indices=`` for ``axis=`` (``argmax``/``argmin``: ``dimension=``). ``axis`` is
an int, a list of ints or a constant tensor; ``None`` reduces every axis. Results keep the
input's dtype (an int32 sum is int32, a mean of ints divides with truncation, as TF).
Empty reductions are as TF: sum 0, product 1, mean of floats NaN and of ints 0, max the
dtype's lowest value (``-inf``), min its highest, any False, all True, logsumexp
``-inf``. ``argmax``/``argmin`` skip NaN (as TF's CPU kernel) and raise
``InvalidArgumentError`` at run time over an empty axis.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Tensor, get_default_graph
from ..tensor_shape import TensorShape
from .array_ops import convert_to_tensor
from .const_fold import constant_value
from .registry import register, single

__all__ = [
    "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_any",
    "reduce_all", "reduce_logsumexp", "argmax", "argmin", "cumsum", "cumprod", "count_nonzero",
    "accumulate_n",
]
# Names also (or only) exported as ``cs.nn.<name>``.
NN_EXPORTS: tuple[str, ...] = ()


# --------------------------------------------------------------------- arguments
def _const_value(v: Any) -> Any:
    """The build-time value of a tensor given as an axis (a constant, or shape arithmetic
    TF would fold); other values pass through.

    Raises:
        ValueError: the axis tensor's value is only known at run time.
    """
    if isinstance(v, Tensor):
        value = constant_value(v)
        if value is None:
            raise CkptsyncValueError(
                f"reduction axis {v.name}: only axes known while the graph is built are "
                f"supported (the static output shape depends on them).")
        return value
    return v


def _deprecated(op: str, new: Any, new_name: str, old: Any, old_name: str) -> Any:
    if old is None:
        return new
    if new is not None:
        raise CkptsyncValueError(f"{op}: cannot specify both '{new_name}' and '{old_name}'.")
    return old


def norm_axis(axis: Any, ndims: int | None) -> tuple[int, ...] | None:
    """``axis`` as sorted, non-negative ints (None: every axis).

    Raises:
        ValueError: an axis is out of range for a rank-``ndims`` tensor.
    """
    axis = _const_value(axis)
    if axis is None:
        return None
    axes = [int(a) for a in np.atleast_1d(np.asarray(axis)).reshape(-1)]
    if ndims is None:
        if any(a < 0 for a in axes):
            raise CkptsyncValueError("Negative reduction axes need a tensor of known rank.")
        return tuple(sorted(set(axes)))
    for a in axes:
        if not -ndims <= a < max(ndims, 1):
            raise CkptsyncValueError(f"Invalid reduction axis {a} for a tensor of rank {ndims}.")
    return tuple(sorted({a % ndims if ndims else 0 for a in axes}))


def _single_axis(axis: Any, t: Tensor) -> tuple[int, ...] | None:
    """One axis; a negative one of an unknown-rank tensor is resolved at run time."""
    value = _const_value(axis)
    if t.shape.ndims is None and value is not None and np.size(value) == 1:
        return (int(np.asarray(value).reshape(())),)
    return norm_axis(value, t.shape.ndims)


def reduced_shape(s: TensorShape, axes: tuple[int, ...] | None, keepdims: bool) -> Any:
    if s.dims is None:
        return None
    if axes is None:
        return [1] * len(s.dims) if keepdims else []
    return [1 if i in axes else d for i, d in enumerate(s.dims) if keepdims or i not in axes]


def _reduce(op_type: str, x: Any, axis: Any, keepdims: Any, name: str | None,
            reduction_indices: Any, keep_dims: Any, kinds: str, what: str) -> Tensor:
    t = convert_to_tensor(x)
    if t.dtype.np.kind not in kinds:
        raise CkptsyncTypeError(f"{op_type}: expected {what} input, got {t.dtype.name} for "
                                f"{t.name}.")
    axis = _deprecated(op_type, axis, "axis", reduction_indices, "reduction_indices")
    keepdims = bool(_deprecated(op_type, keepdims, "keepdims", keep_dims, "keep_dims"))
    axes = norm_axis(axis, t.shape.ndims)
    return single(op_type, [t], t.dtype, reduced_shape(t.shape, axes, keepdims), name=name,
                  attrs={"axis": axes, "keepdims": keepdims})


NUMERIC = "iufc"


# --------------------------------------------------------------------- kernels
@register("Sum", grad=lambda op, g: _grad_reduce(op, g))
def _sum_kernel(x: np.ndarray, *, axis: Any, keepdims: bool) -> np.ndarray:
    # In the input's dtype, as TF (numpy would widen int32 to int64).
    return np.asarray(np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype))


@register("Mean", grad=lambda op, g: _grad_reduce(op, g))
def _mean_kernel(x: np.ndarray, *, axis: Any, keepdims: bool) -> np.ndarray:
    count = x.size if axis is None else int(np.prod([x.shape[a] for a in axis]))
    if x.dtype.kind in "iu":  # TF: the sum in the dtype, divided with truncation; 0 if empty
        s = np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)
        if count == 0:
            return np.zeros(np.shape(s), x.dtype)
        q = np.abs(s) // count
        return np.asarray(np.where(s < 0, -q, q), dtype=x.dtype)
    s = np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)
    return np.asarray(s / np.asarray(count, x.dtype) if count else np.full(np.shape(s), np.nan),
                      dtype=x.dtype)


def _lowest(dt: np.dtype) -> Any:
    return -np.inf if dt.kind in "fc" else np.iinfo(dt).min


def _highest(dt: np.dtype) -> Any:
    return np.inf if dt.kind in "fc" else np.iinfo(dt).max


@register("Max", grad=lambda op, g: _grad_max(op, g))
def _max_kernel(x: np.ndarray, *, axis: Any, keepdims: bool) -> np.ndarray:
    return np.asarray(np.max(x, axis=axis, keepdims=keepdims, initial=_lowest(x.dtype)))


@register("Min", grad=lambda op, g: _grad_max(op, g))
def _min_kernel(x: np.ndarray, *, axis: Any, keepdims: bool) -> np.ndarray:
    return np.asarray(np.min(x, axis=axis, keepdims=keepdims, initial=_highest(x.dtype)))


@register("Prod", grad=lambda op, g: _grad_prod(op, g))
def _prod_kernel(x: np.ndarray, *, axis: Any, keepdims: bool) -> np.ndarray:
    return np.asarray(np.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype))


@register("Any", not_differentiable=True)
def _any_kernel(x: np.ndarray, *, axis: Any, keepdims: bool) -> np.ndarray:
    return np.asarray(np.any(x, axis=axis, keepdims=keepdims))


@register("All", not_differentiable=True)
def _all_kernel(x: np.ndarray, *, axis: Any, keepdims: bool) -> np.ndarray:
    return np.asarray(np.all(x, axis=axis, keepdims=keepdims))


@register("ReduceLogSumExp", grad=lambda op, g: _grad_lse(op, g))
def _lse_kernel(x: np.ndarray, *, axis: Any, keepdims: bool) -> np.ndarray:
    # As TF: shifted by the max where it is finite (else by 0).
    m = np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, np.zeros((), x.dtype))
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    if not keepdims:
        out = out.reshape(()) if axis is None else np.squeeze(out, axis=axis)
    return np.asarray(out, dtype=x.dtype)


# --------------------------------------------------------------------- gradients
def _keep(g: np.ndarray, x: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    if keepdims or axis is None:
        return g.reshape([1] * x.ndim) if axis is None else g
    return np.expand_dims(g, axis)


def _grad_op(op_type: str, op: Any, g: Tensor, *extra: Tensor, **attrs: Any) -> list[Any]:
    x = op.inputs[0]
    return [single(op_type, [g, x, *extra], g.dtype, x.shape,
                   attrs={"axis": op.attrs["axis"], "keepdims": op.attrs["keepdims"], **attrs})]


def _grad_reduce(op: Any, g: Tensor) -> list[Any]:
    return _grad_op("ReduceGrad", op, g, mean=op.type == "Mean")


def _grad_max(op: Any, g: Tensor) -> list[Any]:
    return _grad_op("MaxGrad", op, g, op.outputs[0])


def _grad_prod(op: Any, g: Tensor) -> list[Any]:
    return _grad_op("ProdGrad", op, g)


def _grad_lse(op: Any, g: Tensor) -> list[Any]:
    return _grad_op("LogSumExpGrad", op, g, op.outputs[0])


@register("ReduceGrad")
def _reduce_grad_kernel(g: np.ndarray, x: np.ndarray, *, axis: Any, keepdims: bool,
                        mean: bool) -> np.ndarray:
    gk = _keep(g, x, axis, keepdims)
    if mean:
        count = x.size if axis is None else int(np.prod([x.shape[a] for a in axis]))
        gk = gk / np.asarray(max(count, 1), dtype=g.dtype)
    return np.broadcast_to(gk, x.shape).astype(g.dtype, copy=True)


@register("MaxGrad")
def _max_grad_kernel(g: np.ndarray, x: np.ndarray, y: np.ndarray, *, axis: Any,
                     keepdims: bool) -> np.ndarray:
    # Split equally among the ties, as TF's Max/Min gradient.
    yk, gk = _keep(y, x, axis, keepdims), _keep(g, x, axis, keepdims)
    mask = (x == yk).astype(g.dtype)
    count = mask.sum(axis=axis, keepdims=True)
    return (mask / count * gk).astype(g.dtype)


@register("ProdGrad")
def _prod_grad_kernel(g: np.ndarray, x: np.ndarray, *, axis: Any, keepdims: bool
                      ) -> np.ndarray:
    # The product of all the other elements (exclusive cumprods from both ends: exact with
    # zeros in x, as TF's).
    axes = tuple(range(x.ndim)) if axis is None else tuple(axis)
    rest = tuple(i for i in range(x.ndim) if i not in axes)
    perm = rest + axes
    xt = np.transpose(x, perm)
    lead = xt.shape[:len(rest)]
    flat = xt.reshape(lead + (-1,))
    one = np.ones(lead + (1,), x.dtype)
    left = np.cumprod(np.concatenate([one, flat[..., :-1]], axis=-1), axis=-1)
    right = np.cumprod(np.concatenate([one, flat[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]
    others = (left * right).reshape(xt.shape).transpose(np.argsort(perm))
    return (_keep(g, x, axis, keepdims) * others).astype(g.dtype)


@register("LogSumExpGrad")
def _lse_grad_kernel(g: np.ndarray, x: np.ndarray, y: np.ndarray, *, axis: Any,
                     keepdims: bool) -> np.ndarray:
    yk, gk = _keep(y, x, axis, keepdims), _keep(g, x, axis, keepdims)
    return (gk * np.exp(x - yk)).astype(g.dtype)


# --------------------------------------------------------------------- constructors
def reduce_sum(input_tensor: Any, axis: Any = None, keepdims: Any = None,
               name: str | None = None, reduction_indices: Any = None,
               keep_dims: Any = None) -> Tensor:
    """Sum over ``axis`` (every axis when None) in the input's dtype, as ``tf.reduce_sum``.

    Raises:
        ValueError: an axis is out of range; both ``axis`` and ``reduction_indices``.
        TypeError: a bool input.
    """
    return _reduce("Sum", input_tensor, axis, keepdims, name, reduction_indices, keep_dims,
                   NUMERIC, "a numeric")


def reduce_mean(input_tensor: Any, axis: Any = None, keepdims: Any = None,
                name: str | None = None, reduction_indices: Any = None,
                keep_dims: Any = None) -> Tensor:
    """Mean over ``axis`` in the input's dtype (ints: truncated; empty: NaN or 0), as
    ``tf.reduce_mean``."""
    return _reduce("Mean", input_tensor, axis, keepdims, name, reduction_indices, keep_dims,
                   NUMERIC, "a numeric")


def reduce_max(input_tensor: Any, axis: Any = None, keepdims: Any = None,
               name: str | None = None, reduction_indices: Any = None,
               keep_dims: Any = None) -> Tensor:
    """Max over ``axis`` (empty: the dtype's lowest value); the gradient is split among
    ties, as ``tf.reduce_max``."""
    return _reduce("Max", input_tensor, axis, keepdims, name, reduction_indices, keep_dims,
                   "iuf", "a real numeric")


def reduce_min(input_tensor: Any, axis: Any = None, keepdims: Any = None,
               name: str | None = None, reduction_indices: Any = None,
               keep_dims: Any = None) -> Tensor:
    """Min over ``axis`` (empty: the dtype's highest value); the gradient is split among
    ties, as ``tf.reduce_min``."""
    return _reduce("Min", input_tensor, axis, keepdims, name, reduction_indices, keep_dims,
                   "iuf", "a real numeric")


def reduce_prod(input_tensor: Any, axis: Any = None, keepdims: Any = None,
                name: str | None = None, reduction_indices: Any = None,
                keep_dims: Any = None) -> Tensor:
    """Product over ``axis`` in the input's dtype (empty: 1), as ``tf.reduce_prod``; the
    gradient is exact where elements are zero."""
    return _reduce("Prod", input_tensor, axis, keepdims, name, reduction_indices, keep_dims,
                   NUMERIC, "a numeric")


def reduce_any(input_tensor: Any, axis: Any = None, keepdims: Any = None,
               name: str | None = None, reduction_indices: Any = None,
               keep_dims: Any = None) -> Tensor:
    """Logical or over ``axis`` of a bool tensor, as ``tf.reduce_any``.

    Raises:
        TypeError: the input is not bool.
    """
    return _reduce("Any", input_tensor, axis, keepdims, name, reduction_indices, keep_dims,
                   "b", "a bool")


def reduce_all(input_tensor: Any, axis: Any = None, keepdims: Any = None,
               name: str | None = None, reduction_indices: Any = None,
               keep_dims: Any = None) -> Tensor:
    """Logical and over ``axis`` of a bool tensor, as ``tf.reduce_all``.

    Raises:
        TypeError: the input is not bool.
    """
    return _reduce("All", input_tensor, axis, keepdims, name, reduction_indices, keep_dims,
                   "b", "a bool")


def reduce_logsumexp(input_tensor: Any, axis: Any = None, keepdims: Any = None,
                     name: str | None = None, reduction_indices: Any = None,
                     keep_dims: Any = None) -> Tensor:
    """``log(sum(exp(x)))`` over ``axis``, computed stably (shifted by the max), as
    ``tf.reduce_logsumexp``; the gradient is the softmax over ``axis``.

    Raises:
        TypeError: the input is not floating point.
    """
    return _reduce("ReduceLogSumExp", input_tensor, axis, keepdims, name or "ReduceLogSumExp",
                   reduction_indices, keep_dims, "f", "a floating-point")


# --------------------------------------------------------------------- argmax / argmin
def _arg_kernel(x: np.ndarray, axis: int, output_type: Any, is_max: bool) -> np.ndarray:
    if x.shape[axis] == 0:
        raise ValueError(f"Reduction axis {axis} is empty in shape {list(x.shape)}")
    if x.dtype.kind == "f":  # TF's CPU kernel never picks a NaN
        x = np.where(np.isnan(x), -np.inf if is_max else np.inf, x)
    out = x.argmax(axis=axis) if is_max else x.argmin(axis=axis)
    return np.asarray(out).astype(output_type.np, copy=False)


@register("ArgMax", not_differentiable=True)
def _argmax_kernel(x: np.ndarray, *, axis: int, output_type: Any) -> np.ndarray:
    return _arg_kernel(x, axis, output_type, True)


@register("ArgMin", not_differentiable=True)
def _argmin_kernel(x: np.ndarray, *, axis: int, output_type: Any) -> np.ndarray:
    return _arg_kernel(x, axis, output_type, False)


def _arg(op_type: str, input: Any, axis: Any, name: str | None, dimension: Any,  # noqa: A002
         output_type: Any) -> Tensor:
    t = convert_to_tensor(input)
    if t.dtype.np.kind not in "iuf":
        raise CkptsyncTypeError(f"{op_type}: expected a real numeric input, got "
                                f"{t.dtype.name} for {t.name}.")
    axis = _deprecated(op_type, axis, "axis", dimension, "dimension")
    ax = _single_axis(0 if axis is None else axis, t)
    assert ax is not None
    if len(ax) != 1:
        raise CkptsyncValueError(f"{op_type}: axis must be a single int, got {axis!r}.")
    dt = _dtypes.as_dtype(output_type)
    if dt not in (_dtypes.int32, _dtypes.int64):
        raise CkptsyncTypeError(f"{op_type}: output_type must be int32 or int64, got {dt.name}.")
    return single(op_type, [t], dt, reduced_shape(t.shape, ax, False), name=name,
                  attrs={"axis": ax[0], "output_type": dt})


def argmax(input: Any, axis: Any = None, name: str | None = None,  # noqa: A002
           dimension: Any = None, output_type: Any = _dtypes.int64) -> Tensor:
    """Index of the max along ``axis`` (default 0; NaN never chosen), int64 by default,
    as TF1's ``tf.argmax``. Raises ``InvalidArgumentError`` at run time over an empty axis.
    """
    return _arg("ArgMax", input, axis, name, dimension, output_type)


def argmin(input: Any, axis: Any = None, name: str | None = None,  # noqa: A002
           dimension: Any = None, output_type: Any = _dtypes.int64) -> Tensor:
    """Index of the min along ``axis`` (default 0; NaN never chosen), as TF1's
    ``tf.argmin``."""
    return _arg("ArgMin", input, axis, name, dimension, output_type)


# --------------------------------------------------------------------- cumsum
@register("Cumsum", grad=lambda op, g: [cumsum(g, op.attrs["axis"], op.attrs["exclusive"],
                                               not op.attrs["reverse"])])
def _cumsum_kernel(x: np.ndarray, *, axis: int, exclusive: bool, reverse: bool
                   ) -> np.ndarray:
    if reverse:
        x = np.flip(x, axis)
    if exclusive:  # the sums of the elements before each one, exactly (no out - x)
        out = np.zeros(x.shape, x.dtype)
        src = np.moveaxis(x, axis, 0)
        np.cumsum(src[:-1], axis=0, dtype=x.dtype, out=np.moveaxis(out, axis, 0)[1:])
    else:
        out = np.cumsum(x, axis=axis, dtype=x.dtype)
    return np.flip(out, axis) if reverse else out


def cumsum(x: Any, axis: Any = 0, exclusive: bool = False, reverse: bool = False,
           name: str | None = None) -> Tensor:
    """Cumulative sum along ``axis`` (``exclusive``: each output leaves its own element
    out; ``reverse``: from the end), in ``x``'s dtype and shape, as ``tf.cumsum``.

    Raises:
        ValueError: ``axis`` is out of range.
        TypeError: a bool input.
    """
    t = convert_to_tensor(x)
    if t.dtype.np.kind not in NUMERIC:
        raise CkptsyncTypeError(f"Cumsum: expected a numeric input, got {t.dtype.name}.")
    ax = _single_axis(axis, t)
    if ax is None or len(ax) != 1:
        raise CkptsyncValueError(f"Cumsum: axis must be a single int, got {axis!r}.")
    return single("Cumsum", [t], t.dtype, t.shape, name=name,
                  attrs={"axis": ax[0], "exclusive": bool(exclusive), "reverse": bool(reverse)})


# --------------------------------------------------------------------- cumprod
def _grad_cumprod(op: Any, g: Tensor) -> list[Any]:
    # As TF's (exact only where x has no zeros): cumsum(y * g, reversed) / x.
    from .math_ops import divide, multiply  # math_ops imports this module

    ax, ex, rev = op.attrs["axis"], op.attrs["exclusive"], op.attrs["reverse"]
    return [divide(cumsum(multiply(op.outputs[0], g), ax, ex, not rev), op.inputs[0])]


@register("Cumprod", grad=_grad_cumprod)
def _cumprod_kernel(x: np.ndarray, *, axis: int, exclusive: bool, reverse: bool
                    ) -> np.ndarray:
    if reverse:
        x = np.flip(x, axis)
    if exclusive:
        out = np.ones(x.shape, x.dtype)
        src = np.moveaxis(x, axis, 0)
        np.cumprod(src[:-1], axis=0, dtype=x.dtype, out=np.moveaxis(out, axis, 0)[1:])
    else:
        out = np.cumprod(x, axis=axis, dtype=x.dtype)
    return np.flip(out, axis) if reverse else out


def cumprod(x: Any, axis: Any = 0, exclusive: bool = False, reverse: bool = False,
            name: str | None = None) -> Tensor:
    """Cumulative product along ``axis`` (``exclusive``, ``reverse`` as :func:`cumsum`),
    as ``tf.cumprod``."""
    t = convert_to_tensor(x)
    if t.dtype.np.kind not in NUMERIC:
        raise CkptsyncTypeError(f"Cumprod: expected a numeric input, got {t.dtype.name}.")
    ax = _single_axis(axis, t)
    if ax is None or len(ax) != 1:
        raise CkptsyncValueError(f"Cumprod: axis must be a single int, got {axis!r}.")
    return single("Cumprod", [t], t.dtype, t.shape, name=name,
                  attrs={"axis": ax[0], "exclusive": bool(exclusive), "reverse": bool(reverse)})


def count_nonzero(input_tensor: Any, axis: Any = None, keepdims: Any = None,
                  dtype: Any = _dtypes.int64, name: str | None = None,
                  reduction_indices: Any = None, keep_dims: Any = None) -> Tensor:
    """The number of non-zero (True) elements over ``axis``, in ``dtype`` (int64 by
    default), as TF1's ``tf.count_nonzero``."""
    from .math_ops import cast, not_equal  # math_ops imports this module

    t = convert_to_tensor(input_tensor)
    with get_default_graph().name_scope(name or "count_nonzero"):
        nz = cast(not_equal(t, np.zeros((), t.dtype.np)), _dtypes.int64)
        total = _reduce("Sum", nz, axis, keepdims, None, reduction_indices, keep_dims,
                        NUMERIC, "a numeric")
        return cast(total, dtype)


def accumulate_n(inputs: Any, shape: Any = None, tensor_dtype: Any = None,
                 name: str | None = None) -> Tensor:
    """Sums a list of same-shaped tensors, as TF1's ``tf.accumulate_n`` (an ``add_n``).

    Raises:
        ValueError: ``shape`` or ``tensor_dtype`` disagrees with the inputs.
    """
    from .math_ops import add_n  # math_ops imports this module

    xs = [convert_to_tensor(x) for x in inputs]
    if tensor_dtype is not None and any(x.dtype != _dtypes.as_dtype(tensor_dtype) for x in xs):
        raise CkptsyncValueError(f"accumulate_n: inputs are not all {tensor_dtype}.")
    out = add_n(xs, name=name)
    if shape is not None:
        out.set_shape(shape)
    return out
