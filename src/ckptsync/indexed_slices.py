"""``IndexedSlices``: a sparse gradient, as TF1's ``tf.IndexedSlices``.

The gradient of ``gather``/``embedding_lookup`` with respect to its ``params`` touches only
the rows looked up: ``values[i]`` is the gradient of row ``indices[i]`` of a tensor of
shape ``dense_shape``. Indices may repeat (the rows' gradients add up). Optimizers apply it
to only those rows (``Optimizer._apply_sparse``, as TF1); anything that needs a dense
tensor converts it with ``convert_to_tensor`` (an ``UnsortedSegmentSum`` of the values
into zeros of ``dense_shape``), as TF1 does, with TF1's warning from 100,000,000 elements.
"""

from __future__ import annotations

from typing import Any

from .graph import Tensor
from .tensor_shape import TensorShape

__all__ = ["IndexedSlices", "IndexedSlicesValue"]


class IndexedSlices:
    """A sparse slice of a tensor's first dimension, as ``tf.IndexedSlices``.

    Attributes:
        values: ``Tensor`` ``[n, *dense_shape[1:]]``, the rows' values.
        indices: ``Tensor`` ``[n]`` of int32 or int64, row numbers into ``dense_shape[0]``
            (they may repeat; repeated rows add up).
        dense_shape: ``Tensor`` ``[rank]`` int32/int64, or ``None`` where unknown (then
            it cannot be converted to a dense tensor: ``ValueError``, as TF).

    ``convert_to_tensor(slices)`` (and every op given one) gives the dense tensor; it is
    built once per object. Immutable otherwise; thread-safe to share once built.
    """

    __slots__ = ("_values", "_indices", "_dense_shape", "_dense")

    def __init__(self, values: Tensor, indices: Tensor, dense_shape: Tensor | None = None):
        self._values = values
        self._indices = indices
        self._dense_shape = dense_shape
        self._dense: Tensor | None = None

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

    @property
    def shape(self) -> TensorShape:
        """The static dense shape: ``dense_shape``'s constant value where it is a constant,
        else the values' shape with an unknown first dimension."""
        ds = self._dense_shape
        if ds is not None and ds.op.type == "Const":
            return TensorShape([int(d) for d in ds.op.attrs["value"]])
        rest = self._values.shape
        if rest.dims is None:
            return TensorShape(None)
        return TensorShape([None] + rest.as_list()[1:])

    def get_shape(self) -> TensorShape:
        return self.shape

    def _as_graph_element(self) -> Tensor:
        """The dense tensor (what ``convert_to_tensor`` and ops given this object use)."""
        if self._dense is None:
            # Imported here: ops.scatter_ops imports this module (a cycle at import time).
            from .ops.scatter_ops import indexed_slices_to_dense
            self._dense = indexed_slices_to_dense(self)
        return self._dense

    def __neg__(self) -> IndexedSlices:
        # Imported here: ops.math_ops sits above this module's imports (cycle).
        from .ops.math_ops import negative
        return IndexedSlices(negative(self._values), self._indices, self._dense_shape)

    def __repr__(self) -> str:
        return (f"IndexedSlices(indices={self._indices!r}, values={self._values!r}, "
                f"dense_shape={self._dense_shape!r})")


class IndexedSlicesValue:
    """The value of an ``IndexedSlices`` (numpy arrays), as ``tf.IndexedSlicesValue``."""

    __slots__ = ("values", "indices", "dense_shape")

    def __init__(self, values: Any, indices: Any, dense_shape: Any = None):
        self.values = values
        self.indices = indices
        self.dense_shape = dense_shape

    def __repr__(self) -> str:
        return (f"IndexedSlicesValue(values={self.values!r}, indices={self.indices!r}, "
                f"dense_shape={self.dense_shape!r})")
