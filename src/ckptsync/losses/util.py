"""The loss collections: ``add_loss``, ``get_losses``, ``get_regularization_losses``,
``get_regularization_loss`` and ``get_total_loss``, as TF1's ``tf.losses`` (``losses/util``).
"""

from __future__ import annotations

from typing import Any

from ..graph import GraphKeys, Tensor, add_to_collection, get_collection
from ..ops.array_ops import constant, identity
from ..ops.math_ops import add_n

__all__ = ["add_loss", "get_losses", "get_regularization_losses", "get_regularization_loss",
           "get_total_loss"]


def add_loss(loss: Any, loss_collection: str | None = GraphKeys.LOSSES) -> None:
    """Adds ``loss`` to ``loss_collection`` (nothing for None), as ``tf.losses.add_loss``."""
    if loss_collection:
        add_to_collection(loss_collection, loss)


def _add_n(losses: list, name: str) -> Tensor:
    # TF's add_n names a single input's Identity ``name`` (ckptsync's add_n returns it).
    if len(losses) == 1:
        return identity(losses[0], name=name)
    return add_n(losses, name=name)


def get_losses(scope: str | None = None, loss_collection: str = GraphKeys.LOSSES) -> list:
    """The tensors in ``loss_collection`` (those whose name matches ``scope``)."""
    return get_collection(loss_collection, scope)


def get_regularization_losses(scope: str | None = None) -> list:
    """The tensors in ``GraphKeys.REGULARIZATION_LOSSES`` (filtered by ``scope``)."""
    return get_collection(GraphKeys.REGULARIZATION_LOSSES, scope)


def get_regularization_loss(scope: str | None = None,
                            name: str = "total_regularization_loss") -> Tensor:
    """The sum of the regularization losses (op ``name``, an ``AddN``), or a constant 0.0
    where there are none, as ``tf.losses.get_regularization_loss``."""
    losses = get_regularization_losses(scope)
    if losses:
        return _add_n(losses, name)
    return constant(0.0)


def get_total_loss(add_regularization_losses: bool = True, name: str = "total_loss",
                   scope: str | None = None) -> Tensor:
    """The sum (``AddN`` named ``name``) of ``GraphKeys.LOSSES`` and, by default, the
    regularization losses, as ``tf.losses.get_total_loss``.

    Raises:
        ValueError: no losses at all (``add_n`` of an empty list), as TF.
    """
    losses = get_losses(scope=scope)
    if add_regularization_losses:
        losses += get_regularization_losses(scope=scope)
    return _add_n(losses, name)
