"""The weights rules of tf.losses and tf.metrics, as TF1's ``weights_broadcast_ops`` and
``confusion_matrix.remove_squeezable_dimensions``.

``weights`` may be a scalar, or have the rank of the values with each dimension 1 or the
values' own (``[batch, 1]`` for losses of ``[batch, 3]``). Shapes known when the graph is
built are checked then (``ValueError``, as TF); dimensions unknown until run time meet
numpy's broadcasting in the multiply (TF's rule, except that a size-1 values dim is not
refused when it stretches to the weights'); a rank unknown
at build time is not checked (TF adds an ``Assert`` that it is 0 or the values').
"""

from __future__ import annotations

from typing import Any

from ..errors import CkptsyncValueError
from ..graph import Tensor, name_scope
from ..ops.array_ops import convert_to_tensor, expand_dims, ones_like, squeeze
from ..ops.math_ops import multiply

__all__ = ["assert_broadcastable", "broadcast_weights", "remove_squeezable_dimensions"]

_PREFIX = "weights can not be broadcast to values."


def assert_broadcastable(weights: Tensor, values: Tensor) -> None:
    """Raises ``ValueError`` where the static shapes show ``weights`` cannot be broadcast
    to ``values`` under TF's rule (a scalar, or the same rank with each dim 1 or equal)."""
    ws, vs = weights.get_shape(), values.get_shape()
    if ws.ndims is None or vs.ndims is None or ws.ndims == 0:
        return
    if ws.ndims != vs.ndims:
        raise CkptsyncValueError(f"{_PREFIX} values.rank={vs.ndims}. weights.rank="
                                 f"{ws.ndims}. values.shape={vs}. weights.shape={ws}.")
    for i, (w, v) in enumerate(zip(ws.as_list(), vs.as_list())):
        if w is not None and v is not None and w not in (1, v):
            raise CkptsyncValueError(f"{_PREFIX} Mismatch at dim {i}. values.shape={vs}, "
                                     f"weights.shape={ws}.")


def broadcast_weights(weights: Any, values: Tensor) -> Tensor:
    """``weights`` (a float tensor of ``values``' dtype) broadcast to ``values``' shape,
    as TF's ``broadcast_weights`` (op ``broadcast_weights``: ``weights * ones_like``)."""
    with name_scope(None, "broadcast_weights", [weights, values]) as scope:
        values = convert_to_tensor(values, name="values")
        weights = convert_to_tensor(weights, dtype=values.dtype.base_dtype, name="weights")
        ws, vs = weights.get_shape(), values.get_shape()
        if ws.is_fully_defined() and vs.is_fully_defined() and ws.is_compatible_with(vs):
            return weights
        assert_broadcastable(weights, values)
        return multiply(weights, ones_like(values), name=scope)


def remove_squeezable_dimensions(labels: Any, predictions: Any, expected_rank_diff: int = 0
                                 ) -> tuple[Tensor, Tensor]:
    """Squeezes the last dimension (of size 1) of ``predictions`` or ``labels`` where their
    static ranks differ by one more/less than ``expected_rank_diff``, as TF1's
    ``confusion_matrix.remove_squeezable_dimensions`` (unknown ranks are left as they are)."""
    with name_scope(None, "remove_squeezable_dimensions", [labels, predictions]):
        predictions = convert_to_tensor(predictions)
        labels = convert_to_tensor(labels)
        ps, ls = predictions.get_shape(), labels.get_shape()
        if ps.ndims is not None and ls.ndims is not None:
            diff = ps.ndims - ls.ndims
            if diff == expected_rank_diff + 1 and ps.dims[-1] in (None, 1):
                predictions = squeeze(predictions, [-1])
            elif diff == expected_rank_diff - 1 and ls.dims[-1] in (None, 1):
                labels = squeeze(labels, [-1])
        return labels, predictions


def match_weights_rank(weights: Tensor, values: Tensor) -> Tensor:
    """Squeezes or expands the last dimension of ``weights`` where its static rank is one
    more or one less than ``values``' (a scalar is kept), as the metrics' and
    ``sparse_softmax_cross_entropy``'s weights handling in TF1."""
    wr, vr = weights.get_shape().ndims, values.get_shape().ndims
    if wr is None or vr is None or wr == 0:
        return weights
    if wr - vr == 1:
        return squeeze(weights, [-1])
    if vr - wr == 1:
        return expand_dims(weights, -1)
    return weights
