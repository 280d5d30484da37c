"""``IndexedSlices``: a sparse gradient, as TF1's ``tf.IndexedSlices``.

The gradient of ``gather``/``embedding_lookup`` with respect to its ``params`` touches only
the rows looked up: ``values[i]`` is the gradient of row ``indices[i]`` of a tensor of
shape ``dense_shape``. Indices may repeat (the rows' gradients add up). Optimizers apply it
to only those rows (``Optimizer._apply_sparse``, as TF1); anything that needs a dense
tensor converts it with :func:`convert_to_tensor`, as TF1 does (with a warning above
100,000,000 elements).
"""

from __future__ import annotations

from typing import Any

from .graph import Tensor

__all__ = ["IndexedSlices"]


class IndexedSlices:
    """A sparse slice of a tensor's first dimension, as ``tf.IndexedSlices``.

    Attributes:
        values: ``Tensor`` ``[n, *dense_shape[1:]]``, the rows' values.
        indices: ``Tensor`` ``[n]`` of int32 or int64, row numbers into ``dense_shape[0]``
            (they may repeat; repeated rows add up).
        dense_shape: ``Tensor`` ``[rank]`` int32/int64, or ``None`` where unknown.

    Immutable; thread-safe to share.
    """

    __slots__ = ("_values", "_indices", "_dense_shape")

    def __init__(self, values: Tensor, indices: Tensor, dense_shape: Tensor | None = None):
        self._values = values
        self._indices = indices
        self._dense_shape = dense_shape

    @property
    def values(self) -> Tensor:
        return self._values

    @property
    def indices(self) -> Tensor:
        return self._indices

    @property
    def dense_shape(self) -> Tensor | None:
        return self._dense_shape

    @property
    def dtype(self) -> Any:
        return self._values.dtype

    @property
    def name(self) -> str:
        return self._values.name

    @property
    def op(self) -> Any:
        return self._values.op

    @property
    def graph(self) -> Any:
        return self._values.graph

    @property
    def device(self) -> str:
        return self._values.device

    def __repr__(self) -> str:
        return (f"IndexedSlices(indices={self._indices!r}, values={self._values!r}, "
                f"dense_shape={self._dense_shape!r})")
