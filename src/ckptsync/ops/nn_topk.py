"""``top_k`` and ``in_top_k``, as TF1's tf.nn (op types ``TopKV2`` and ``InTopKV2``).

Ties as TF: ``top_k`` puts the lower index first among equal values; ``in_top_k`` counts
a target as in the top ``k`` when fewer than ``k`` classes score strictly higher, so ties
count in its favour, and says False for a row with a non-finite score or a target outside
``[0, classes)``.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError, InvalidArgumentError
from ..graph import Tensor, name_scope
from .array_ops import convert_to_tensor
from .const_fold import constant_value
from .registry import register, single

__all__: list[str] = []
NN_EXPORTS: tuple[str, ...] = ("top_k", "in_top_k")

TopKV2 = namedtuple("TopKV2", ["values", "indices"])


def _static_int(t: Tensor) -> int | None:
    v = constant_value(t)
    return None if v is None else int(v)


def _first_dim(t: Tensor) -> int | None:
    dims = t.shape.dims
    return dims[0] if dims else None


# --------------------------------------------------------------------- top_k
def _grad_top_k(op: Any, g_values: Tensor | None, _g_indices: Any = None) -> list[Any]:
    if g_values is None:
        return [None, None]
    x = op.inputs[0]
    return [single("TopKGrad", [g_values, op.outputs[1], x], g_values.dtype, x.shape), None]


@register("TopKV2", grad=_grad_top_k)
def _top_k_kernel(x: np.ndarray, k: np.ndarray, *, sorted: bool, index_type: Any  # noqa: A002
                  ) -> tuple[np.ndarray, np.ndarray]:
    del sorted  # always sorted (TF leaves the order unspecified otherwise)
    kk = int(k)
    n = x.shape[-1] if x.ndim else 0
    if kk < 0:
        raise InvalidArgumentError(None, None, f"TopKV2: need k >= 0, got {kk}.")
    if x.ndim < 1 or n < kk:
        raise InvalidArgumentError(None, None, f"TopKV2: input must have at least k columns. "
                                   f"Had {n}, needed {kk}.")
    idx = _top_indices(x, kk)
    return np.take_along_axis(x, idx, axis=-1), idx.astype(index_type.np)


def _stable_descending(x: np.ndarray) -> np.ndarray:
    """Positions of a stable descending sort of the last axis (lower index first among
    ties, NaN as the largest): a stable ascending sort of the reversed rows, read
    backwards."""
    n = x.shape[-1]
    return (n - 1) - np.argsort(x[..., ::-1], axis=-1, kind="stable")[..., ::-1]


def _top_indices(x: np.ndarray, k: int) -> np.ndarray:
    n = x.shape[-1]
    if k == 0 or n < 64 or 8 * k > n or x.size == 0 or (
            x.dtype.kind == "f" and np.isnan(x).any()):
        return _stable_descending(x)[..., :k]
    # Few of many: only the m largest of each row can be in its top k, where m counts,
    # over the rows, the entries >= the row's k-th largest value (ties included).
    part = np.argpartition(x, n - k, axis=-1)
    kth = np.take_along_axis(x, part[..., n - k:n - k + 1], axis=-1)
    m = int((x >= kth).sum(axis=-1).max())
    if 2 * m > n:
        return _stable_descending(x)[..., :k]
    if m > k:  # ties at the k-th value: widen to every candidate
        part = np.argpartition(x, n - m, axis=-1)
    cand = np.sort(part[..., n - m:], axis=-1)
    order = _stable_descending(np.take_along_axis(x, cand, axis=-1))[..., :k]
    return np.take_along_axis(cand, order, axis=-1)


@register("TopKGrad")
def _top_k_grad_kernel(g: np.ndarray, idx: np.ndarray, x: np.ndarray) -> np.ndarray:
    out = np.zeros(x.shape, g.dtype)
    np.put_along_axis(out, idx.astype(np.intp), g, axis=-1)
    return out


def top_k(input: Any, k: Any = 1, sorted: bool = True, index_type: Any = _dtypes.int32,  # noqa: A002
          name: str | None = None) -> TopKV2:
    """The ``k`` largest entries of the last axis and their indices, as ``tf.nn.top_k``.

    ``input [..., n]`` (a real dtype) -> ``values [..., k]`` (its dtype) and ``indices
    [..., k]`` (``index_type``, int32 by default), in descending order; among equal values
    the lower index comes first. ``sorted=False`` also returns them sorted (TF leaves that
    order unspecified). ``k`` may be a scalar int32 tensor. The gradient of ``values``
    goes to the entries it came from; ``indices`` have none. NaN sorts as the largest
    (TF's order with NaN is not a total order and is not reproduced).

    Raises:
        ValueError: ``input`` of rank 0, or a static ``k`` negative or larger than ``n``.
        TypeError: a non-real ``input``, or an ``index_type`` that is not int16/32/64.
        InvalidArgumentError: at run time, ``k`` negative or larger than ``n``.
    """
    x = convert_to_tensor(input)
    if not (x.dtype.is_floating or x.dtype.is_integer):
        raise CkptsyncTypeError(f"TopKV2: expected a real tensor, got {x.dtype.name}.")
    it = _dtypes.as_dtype(index_type)
    if it not in (_dtypes.int16, _dtypes.int32, _dtypes.int64):
        raise CkptsyncTypeError(f"TopKV2: index_type must be int16, int32 or int64, got "
                                f"{it.name}.")
    kt = convert_to_tensor(k, dtype=None if isinstance(k, Tensor) else _dtypes.int32)
    if not kt.dtype.is_integer:
        raise CkptsyncTypeError(f"TopKV2: k must be an int tensor, got {kt.dtype.name}.")
    kv = _static_int(kt)
    dims = x.shape.dims
    if dims is not None and len(dims) < 1:
        raise CkptsyncValueError(f"TopKV2: input must be at least 1-D, got shape {x.shape}.")
    if kv is not None and kv < 0:
        raise CkptsyncValueError(f"TopKV2: need k >= 0, got {kv}.")
    if kv is not None and dims is not None and dims[-1] is not None and dims[-1] < kv:
        raise CkptsyncValueError(f"TopKV2: input must have last dimension >= k = {kv} but is "
                                 f"{dims[-1]} for shape {x.shape}.")
    out_shape = None if dims is None else [*dims[:-1], kv]
    op = x.graph.create_op("TopKV2", [x, kt], [x.dtype, it], [out_shape, out_shape],
                           name=name or "TopKV2", attrs={"sorted": bool(sorted),
                                                         "index_type": it})
    return TopKV2(op.outputs[0], op.outputs[1])


# --------------------------------------------------------------------- in_top_k
@register("InTopKV2", not_differentiable=True)
def _in_top_k_kernel(p: np.ndarray, t: np.ndarray, k: np.ndarray) -> np.ndarray:
    if p.ndim != 2 or t.ndim != 1 or t.shape[0] != p.shape[0]:
        raise InvalidArgumentError(None, None, f"InTopKV2: predictions must be [batch, classes] "
                                   f"and targets [batch], got {p.shape} and {t.shape}.")
    n = p.shape[1]
    valid = (t >= 0) & (t < n)
    target = p[np.arange(p.shape[0]), np.where(valid, t, 0)] if n else np.zeros(t.shape, p.dtype)
    finite = np.isfinite(p).all(axis=1) & np.isfinite(target)
    more = (p > target[:, None]).sum(axis=1)
    return valid & finite & (more < int(k))


def in_top_k(predictions: Any, targets: Any, k: Any, name: str | None = None) -> Tensor:
    """Whether each target class is among the ``k`` top predictions, as ``tf.nn.in_top_k``.

    ``predictions [batch, classes]`` float32, ``targets [batch]`` int32/int64 -> bool
    ``[batch]``. A target is in the top ``k`` when fewer than ``k`` classes score strictly
    higher (ties count in its favour); a row with a non-finite score, or a target outside
    ``[0, classes)``, gives False. The op is ``in_top_k/InTopKV2``.

    Raises:
        ValueError: ranks other than 2 and 1, or batch sizes that differ.
        TypeError: non-float32 predictions or non-integer targets.
    """
    with name_scope(name, "in_top_k"):
        p = convert_to_tensor(predictions, dtype=None if isinstance(predictions, Tensor)
                              else _dtypes.float32)
        t = convert_to_tensor(targets, dtype=None if isinstance(targets, Tensor)
                              else _dtypes.int32)
        if p.dtype != _dtypes.float32:
            raise CkptsyncTypeError(f"InTopKV2: predictions must be float32, got {p.dtype.name}.")
        if t.dtype not in (_dtypes.int32, _dtypes.int64):
            raise CkptsyncTypeError(f"InTopKV2: targets must be int32 or int64, got "
                                    f"{t.dtype.name}.")
        kt = convert_to_tensor(k, dtype=None if isinstance(k, Tensor) else t.dtype)
        if p.shape.ndims is not None and p.shape.ndims != 2:
            raise CkptsyncValueError(f"InTopKV2: predictions must be 2-D, got shape {p.shape}.")
        if t.shape.ndims is not None and t.shape.ndims != 1:
            raise CkptsyncValueError(f"InTopKV2: targets must be 1-D, got shape {t.shape}.")
        batch, tb = _first_dim(p), _first_dim(t)
        if batch is not None and tb is not None and batch != tb:
            raise CkptsyncValueError(f"InTopKV2: predictions {p.shape} and targets {t.shape} "
                                     f"must have the same batch size.")
        return single("InTopKV2", [p, t, kt], _dtypes.bool, [batch if batch is not None else tb],
                      name=name or "InTopKV2")
