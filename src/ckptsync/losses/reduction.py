"""``tf.losses.Reduction`` and ``compute_weighted_loss``, as TF1's ``losses_impl``.

A loss function computes elementwise losses (``[batch]`` or ``[batch, d, ...]``), then
:func:`compute_weighted_loss` multiplies them by ``weights``, reduces them as
``reduction`` says, casts back to the input dtype and adds the result to
``loss_collection``. TF's default, ``SUM_BY_NONZERO_WEIGHTS``, is the weighted sum over the
number of non-zero weights (broadcast to the losses); the reduced loss is the op
``<scope>/value`` (``div_no_nan``: zero where nothing is weighted).
"""

from __future__ import annotations

from typing import Any

from .. import dtypes as _dtypes
from ..errors import CkptsyncValueError
from ..graph import GraphKeys, Tensor, get_default_graph, name_scope
from ..ops.array_ops import convert_to_tensor, ones_like, zeros_like
from ..ops.elementwise_ops import div_no_nan
from ..ops.manip_ops import size
from ..ops.math_ops import cast, equal, multiply, reduce_sum
from ..ops.selection_ops import where
from .util import add_loss
from .weights_broadcast import assert_broadcastable, broadcast_weights

__all__ = ["Reduction", "compute_weighted_loss"]


class Reduction:
    """How a loss is reduced, as ``tf.losses.Reduction`` (the same strings).

    ``NONE``: the weighted losses, unreduced; ``SUM``: their sum; ``MEAN``: the sum over
    the sum of the (broadcast) weights; ``SUM_OVER_BATCH_SIZE``: the sum over the number
    of loss elements; ``SUM_OVER_NONZERO_WEIGHTS`` / ``SUM_BY_NONZERO_WEIGHTS`` (the
    default): the sum over the number of non-zero weights.
    """

    NONE = "none"
    SUM = "weighted_sum"
    SUM_OVER_BATCH_SIZE = "weighted_sum_over_batch_size"
    MEAN = "weighted_mean"
    SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"
    SUM_OVER_NONZERO_WEIGHTS = SUM_BY_NONZERO_WEIGHTS

    @classmethod
    def all(cls) -> tuple[str, ...]:
        return (cls.NONE, cls.SUM, cls.MEAN, cls.SUM_OVER_BATCH_SIZE,
                cls.SUM_OVER_NONZERO_WEIGHTS, cls.SUM_BY_NONZERO_WEIGHTS)

    @classmethod
    def validate(cls, key: str) -> None:
        """Raises ``ValueError`` for a string that is not a reduction."""
        if key not in cls.all():
            raise CkptsyncValueError(f"Invalid Reduction Key {key}. Key should be one of "
                                     f"{cls.all()}.")


def _safe_mean(losses: Tensor, num_present: Tensor) -> Tensor:
    return div_no_nan(reduce_sum(losses), num_present, name="value")


def _num_elements(losses: Tensor) -> Tensor:
    with name_scope(None, "num_elements", [losses]) as scope:
        return cast(size(losses, name=scope), losses.dtype)


def _num_present(losses: Tensor, weights: Any) -> Tensor:
    """The number of non-zero weights, broadcast to ``losses`` (a scalar float32)."""
    if isinstance(weights, float) and weights != 0.0:
        return _num_elements(losses)
    with name_scope(None, "num_present", [losses, weights]) as scope:
        w = cast(weights, _dtypes.float32)
        present = where(equal(w, 0.0), zeros_like(w), ones_like(w))
        present = broadcast_weights(present, losses)
        return reduce_sum(present, name=scope)


def compute_weighted_loss(losses: Any, weights: Any = 1.0, scope: str | None = None,
                          loss_collection: str | None = GraphKeys.LOSSES,
                          reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """``losses * weights`` reduced by ``reduction``, as ``tf.losses.compute_weighted_loss``.

    Args:
        losses: float tensor ``[batch, d1, ..., dN]``.
        weights: a scalar, or a tensor of ``losses``' rank whose dims are 1 or
            ``losses``' (``[batch, 1]``: per example).
        scope: the name scope (default ``weighted_loss``).
        loss_collection: where the loss is added (None: nowhere).
        reduction: a :class:`Reduction`.

    Returns:
        A scalar of ``losses``' dtype, or the weighted losses (their shape) for ``NONE``.

    Raises:
        ValueError: an unknown reduction, or weights that cannot broadcast to the losses.
    """
    Reduction.validate(reduction)
    with name_scope(scope, "weighted_loss", [losses, weights]):
        get_default_graph()._last_loss_reduction = reduction  # type: ignore[attr-defined]  # noqa: SLF001 - as TF
        losses = convert_to_tensor(losses)
        input_dtype = losses.dtype
        losses = cast(losses, _dtypes.float32)
        w = cast(weights, _dtypes.float32)
        assert_broadcastable(w, losses)
        weighted = multiply(losses, w)
        if reduction == Reduction.NONE:
            loss = weighted
        else:
            loss = reduce_sum(weighted)
            if reduction == Reduction.MEAN:
                loss = _safe_mean(loss, reduce_sum(multiply(ones_like(losses), w)))
            elif reduction == Reduction.SUM_BY_NONZERO_WEIGHTS:
                loss = _safe_mean(loss, _num_present(losses, weights))
            elif reduction == Reduction.SUM_OVER_BATCH_SIZE:
                loss = _safe_mean(loss, _num_elements(losses))
        loss = cast(loss, input_dtype)
        add_loss(loss, loss_collection)
        return loss
