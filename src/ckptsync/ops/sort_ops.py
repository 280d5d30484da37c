"""``tf.sort`` and ``tf.argsort``, built as TF's ``sort_ops`` builds them: a ``top_k``
over the whole axis (moved last by a transpose when it is not), of the values for
``DESCENDING`` and of their negation for ``ASCENDING`` (``-x - 1`` for signed ints,
``max - x`` for unsigned ones, so no value overflows). So ties keep their order (the
lower index first), both directions, and ``sort``'s gradient is ``top_k``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CkptsyncValueError
from ..graph import Tensor, name_scope
from .array_ops import constant, convert_to_tensor, shape, transpose
from .const_fold import constant_value
from .math_ops import negative, subtract
from .nn_topk import top_k

__all__ = ["sort", "argsort"]
NN_EXPORTS: tuple[str, ...] = ()

_DIRECTIONS = ("ASCENDING", "DESCENDING")


def _descending(x: Tensor, axis: int, return_argsort: bool) -> Tensor:
    nd = x.shape.ndims
    k = shape(x)[axis]
    perm: list[int] | None
    if axis == -1 or (nd is not None and axis + 1 == nd):
        perm = None
        inp = x
    else:
        if nd is None:
            raise CkptsyncValueError(f"sort: axis {axis} (not the last) needs a known rank, "
                                     f"got shape {x.shape}.")
        if axis < 0:
            axis += nd
        perm = [int(p) for p in np.r_[np.arange(axis), [nd - 1], np.arange(axis + 1, nd - 1),
                                      [axis]]]  # swaps axis and the last: its own inverse
        inp = transpose(x, perm)
    values, indices = top_k(inp, k)
    out = indices if return_argsort else values
    return out if perm is None else transpose(out, perm)


def _ascending(x: Tensor, axis: int, return_argsort: bool) -> Tensor:
    dt = x.dtype
    if dt.is_integer and np.iinfo(dt.np).min == 0:
        top = constant(np.iinfo(dt.np).max, dtype=dt)
        r = _descending(subtract(top, x), axis, return_argsort)
        return r if return_argsort else subtract(top, r)
    if dt.is_integer:
        r = _descending(negative(x) - 1, axis, return_argsort)
        return r if return_argsort else negative(r) - 1
    r = _descending(negative(x), axis, return_argsort)
    return r if return_argsort else negative(r)


def _sort_or_argsort(values: Any, axis: Any, direction: str, return_argsort: bool) -> Tensor:
    if direction not in _DIRECTIONS:
        raise CkptsyncValueError(f"Argument `direction` should be one of "
                                 f"{', '.join(_DIRECTIONS)}. Received: direction={direction}")
    a = convert_to_tensor(axis, name="axis")
    a_static = constant_value(a)
    if a.shape.ndims not in (None, 0) or a_static is None:
        raise CkptsyncValueError(f"Argument `axis` must be a constant scalar. Received: "
                                 f"axis={axis}.")
    x = convert_to_tensor(values, name="values")
    impl = _ascending if direction == "ASCENDING" else _descending
    return impl(x, int(a_static), return_argsort)


def sort(values: Any, axis: int = -1, direction: str = "ASCENDING",
         name: str | None = None) -> Tensor:
    """``values`` sorted along ``axis``, as TF's ``tf.sort``: same shape and dtype
    (a real dtype; ``[..., n]`` with ``axis=-1``); equal values keep their order.

    Raises:
        ValueError: ``direction`` is not ``"ASCENDING"``/``"DESCENDING"``; ``axis`` is not
            a constant scalar.
        TypeError: a non-real dtype (as ``top_k``).
    """
    with name_scope(name, "sort"):
        return _sort_or_argsort(values, axis, direction, return_argsort=False)


def argsort(values: Any, axis: int = -1, direction: str = "ASCENDING", stable: bool = False,
            name: str | None = None) -> Tensor:
    """The int32 indices that sort ``values`` along ``axis``, as TF's ``tf.argsort``
    (always stable: ``stable=False`` gives the same order, as TF's).

    Raises:
        ValueError, TypeError: as :func:`sort`.
    """
    del stable  # as TF: the top_k it is built on is stable
    with name_scope(name, "argsort"):
        return _sort_or_argsort(values, axis, direction, return_argsort=True)

