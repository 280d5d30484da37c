"""Clipping: ``clip_by_value``, ``clip_by_norm``, ``clip_by_global_norm``, ``global_norm``,
as TF1 (gradient clipping before ``apply_gradients``).

``None`` entries of a list (variables without a gradient) are skipped by ``global_norm``
and stay ``None`` in ``clip_by_global_norm``'s result; :class:`IndexedSlices` entries are
clipped by their values and stay ``IndexedSlices``. An infinite or NaN global norm makes
every clipped value NaN, as TF.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Tensor, get_default_graph
from ..indexed_slices import IndexedSlices
from .array_ops import convert_to_tensor, identity
from .math_ops import add_n, divide, maximum, minimum, multiply, sqrt, subtract
from .reduction_ops import reduce_sum

__all__ = ["clip_by_value", "clip_by_norm", "clip_by_global_norm", "global_norm"]
# Names also (or only) exported as ``cs.nn.<name>``.
NN_EXPORTS: tuple[str, ...] = ()

# sqrt's argument is kept at or above this (its gradient stays finite at a zero tensor);
# the clipped value is unchanged unless clip_norm < 1e-18.
_TINY = 1e-36


def clip_by_value(t: Any, clip_value_min: Any, clip_value_max: Any,
                  name: str | None = None) -> Tensor:
    """``min(max(t, clip_value_min), clip_value_max)`` elementwise, as ``tf.clip_by_value``
    (the bounds broadcast but may not change ``t``'s shape). The gradient reaches ``t``
    where it is inside the bounds (and on ties).

    Raises:
        ValueError: the bounds would broadcast ``t`` to a larger shape.
        TypeError: the dtypes differ (a Python float bound for an integer tensor).
    """
    x = convert_to_tensor(t)
    with get_default_graph().name_scope(name or "clip_by_value") as scope:
        t_min = minimum(x, clip_value_max)
        if not t_min.shape.is_compatible_with(x.shape):
            raise CkptsyncValueError(
                f"clip_by_value: the bounds change the shape of {x.name} from {x.shape} to "
                f"{t_min.shape}.")
        return maximum(t_min, clip_value_min, name=scope)


def clip_by_norm(t: Any, clip_norm: Any, axes: Any = None, name: str | None = None) -> Tensor:
    """Scales ``t`` so that its L2 norm over ``axes`` (every axis when None) is at most
    ``clip_norm``: ``t * clip_norm / max(l2norm(t), clip_norm)``, as ``tf.clip_by_norm``.
    A zero tensor stays zero, with a finite gradient.

    Raises:
        TypeError: ``t`` is not floating point.
    """
    x = convert_to_tensor(t.values if isinstance(t, IndexedSlices) else t)
    if not x.dtype.is_floating:
        raise CkptsyncTypeError(f"clip_by_norm: expected a floating-point tensor, got "
                                f"{x.dtype.name} for {x.name}.")
    with get_default_graph().name_scope(name or "clip_by_norm") as scope:
        l2sum = reduce_sum(x * x, axes, keepdims=True)
        l2norm = sqrt(maximum(l2sum, _TINY))
        cn = convert_to_tensor(clip_norm, dtype=None if isinstance(clip_norm, Tensor) else x.dtype)
        clipped = identity(divide(multiply(x, cn), maximum(l2norm, cn)), name=scope)
    if isinstance(t, IndexedSlices):
        return IndexedSlices(clipped, t.indices, t.dense_shape)  # type: ignore[return-value]
    return clipped


def _values(t_list: Any, op: str) -> list[Any]:
    if isinstance(t_list, (str, bytes, Tensor)) or not isinstance(t_list, Sequence):
        raise CkptsyncTypeError(f"{op}: t_list should be a sequence of tensors, got "
                                f"{type(t_list).__name__}.")
    return [None if t is None else (t.values if isinstance(t, IndexedSlices)
                                    else convert_to_tensor(t)) for t in t_list]


def global_norm(t_list: Any, name: str | None = None) -> Tensor:
    """``sqrt(sum of every squared element of every tensor)`` of a list (``None``
    entries skipped), as ``tf.global_norm``; named ``global_norm/global_norm``.

    Raises:
        TypeError: ``t_list`` is not a sequence, or the dtypes differ.
    """
    values = [v for v in _values(t_list, "global_norm") if v is not None]
    with get_default_graph().name_scope(name or "global_norm") as scope:
        if not values:
            return sqrt(convert_to_tensor(np.float32(0.0)), name="global_norm")
        squares = [reduce_sum(v * v) for v in values]
        total = add_n(squares) if len(squares) > 1 else squares[0]
        del scope
        return sqrt(total, name="global_norm")


def clip_by_global_norm(t_list: Any, clip_norm: Any, use_norm: Any = None,
                        name: str | None = None) -> tuple[list[Any], Tensor]:
    """Scales every tensor of ``t_list`` by ``clip_norm / max(global_norm, clip_norm)``,
    as ``tf.clip_by_global_norm``; returns ``(list_clipped, global_norm)``. ``None``
    entries stay ``None``; ``use_norm`` replaces the computed global norm.

    Raises:
        TypeError: ``t_list`` is not a sequence.
    """
    values = _values(t_list, "clip_by_global_norm")
    norm = global_norm(t_list) if use_norm is None else convert_to_tensor(use_norm)
    with get_default_graph().name_scope(name or "clip_by_global_norm") as scope:
        cn = convert_to_tensor(clip_norm, dtype=None if isinstance(clip_norm, Tensor)
                               else norm.dtype)
        # As TF: clip_norm * min(1 / norm, 1 / clip_norm), NaN when the norm is not finite.
        scale = multiply(cn, minimum(divide(1.0, norm), divide(1.0, cn)))
        scale = scale + subtract(norm, norm)
        out: list[Any] = []
        for i, (t, v) in enumerate(zip(t_list, values)):
            if v is None:
                out.append(None)
                continue
            s = scale if scale.dtype == v.dtype else None
            if s is None:
                raise CkptsyncTypeError(f"clip_by_global_norm: tensor {i} is {v.dtype.name}, "
                                        f"the norm {norm.dtype.name}.")
            c = identity(v * s, name=f"{scope}_{i}")
            out.append(IndexedSlices(c, t.indices, t.dense_shape)
                       if isinstance(t, IndexedSlices) else c)
    return out, norm
