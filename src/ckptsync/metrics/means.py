"""Streaming means: ``metric_variable``, ``mean``, ``accuracy``, ``mean_squared_error``,
``root_mean_squared_error`` and ``mean_absolute_error``, as TF1's ``tf.metrics``.

Each returns ``(value, update_op)``: ``update_op`` adds a batch to the metric's local
variables (``<name>/total`` and ``<name>/count``, in ``GraphKeys.LOCAL_VARIABLES`` and
``METRIC_VARIABLES``, zeroed by ``local_variables_initializer``) and yields the value
over every batch seen so far, that batch included; ``value`` reads the variables.

Runs: a run reads every variable as at its start, and writes land at its end, so
``sess.run([value, update_op])`` gives ``value`` from before the batch (what TF usually
gives) and ``update_op`` the value after it; ``sess.run(update_op)`` then
``sess.run(value)`` gives the value over all batches, as TF.

Example:
    >>> import ckptsync as cs
    >>> with cs.Graph().as_default():
    ...     acc, update = cs.metrics.accuracy([1, 2, 3], [1, 2, 0])
    ...     sess = cs.Session()
    ...     sess.run(cs.local_variables_initializer())
    ...     _ = sess.run(update)
    ...     print(round(float(sess.run(acc)), 4))
    0.6667
"""

from __future__ import annotations

from typing import Any

from .. import dtypes as _dtypes
from ..errors import CkptsyncValueError
from ..graph import GraphKeys, Tensor, add_to_collections, control_dependencies
from ..losses.weights_broadcast import (
    broadcast_weights,
    match_weights_rank,
    remove_squeezable_dimensions,
)
from ..ops.array_ops import convert_to_tensor, zeros
from ..ops.elementwise_ops import div_no_nan, squared_difference
from ..ops.manip_ops import size
from ..ops.math_ops import abs, cast, equal, maximum, multiply, reduce_sum, sqrt, subtract
from ..ops.state_ops import assign_add
from ..variable_scope import variable_scope
from ..variables import Variable

__all__ = ["accuracy", "mean", "mean_absolute_error", "mean_squared_error", "metric_variable",
           "root_mean_squared_error"]


def metric_variable(shape: Any, dtype: Any, validate_shape: bool = True,
                    name: str | None = None) -> Variable:
    """A zero-initialized, non-trainable variable in ``LOCAL_VARIABLES`` and
    ``METRIC_VARIABLES``, as TF1's ``metrics_impl.metric_variable``."""
    return Variable(lambda: zeros(shape, dtype), trainable=False,
                    collections=[GraphKeys.LOCAL_VARIABLES, GraphKeys.METRIC_VARIABLES],
                    validate_shape=validate_shape, name=name)


def prepare(predictions: Any, labels: Any, weights: Any
            ) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """``predictions``, ``labels`` (their trailing size-1 dim squeezed where ranks differ
    by one) and ``weights`` (squeezed/expanded to the predictions' rank), as TF1's
    ``metrics_impl._remove_squeezable_dimensions`` with static ranks.

    Raises:
        ValueError: predictions and labels of incompatible static shapes.
    """
    predictions = convert_to_tensor(predictions)
    if labels is not None:
        labels, predictions = remove_squeezable_dimensions(labels, predictions)
        if not predictions.get_shape().is_compatible_with(labels.get_shape()):
            raise CkptsyncValueError(f"Shapes {predictions.get_shape()} and "
                                     f"{labels.get_shape()} are incompatible")
    if weights is None:
        return predictions, labels, None
    return predictions, labels, match_weights_rank(convert_to_tensor(weights), predictions)


def collect(collections: Any, t: Tensor) -> None:
    if collections:
        add_to_collections(collections, t)


def mean(values: Any, weights: Any = None, metrics_collections: Any = None,
         updates_collections: Any = None, name: str | None = None) -> tuple[Tensor, Tensor]:
    """The (weighted) mean of ``values`` over every batch, as ``tf.metrics.mean``.

    Args:
        values: a numeric tensor of any shape, cast to float32.
        weights: None, a scalar, or a tensor broadcastable to ``values`` (rank equal, or
            one less/more by a trailing dim).
        metrics_collections, updates_collections: where ``value``/``update_op`` are added.
        name: the variable scope (default ``mean``).

    Returns:
        ``(value, update_op)``: float32 scalars ``<name>/value`` and ``<name>/update_op``,
        ``total / count`` (0 while nothing is counted).
    """
    with variable_scope(name, "mean", [values, weights]):
        values = cast(values, _dtypes.float32)
        total = metric_variable([], _dtypes.float32, name="total")
        count = metric_variable([], _dtypes.float32, name="count")
        if weights is None:
            num_values = cast(size(values), _dtypes.float32)
        else:
            values, _, weights = prepare(values, None, weights)
            weights = broadcast_weights(cast(weights, _dtypes.float32), values)
            values = multiply(values, weights)
            num_values = reduce_sum(weights)
        update_total = assign_add(total, reduce_sum(values))
        with control_dependencies([values]):
            update_count = assign_add(count, num_values)
        value = div_no_nan(total, maximum(count, 0.0), name="value")
        collect(metrics_collections, value)
        update_op = div_no_nan(update_total, maximum(update_count, 0.0), name="update_op")
        collect(updates_collections, update_op)
        return value, update_op


def accuracy(labels: Any, predictions: Any, weights: Any = None,
             metrics_collections: Any = None, updates_collections: Any = None,
             name: str | None = None) -> tuple[Tensor, Tensor]:
    """How often ``predictions`` equals ``labels`` (same shape, e.g. class ids
    ``[batch]``), weighted, over every batch, as ``tf.metrics.accuracy`` (variables
    ``accuracy/total``, ``accuracy/count``).

    Raises:
        ValueError: incompatible shapes.
    """
    predictions, labels, weights = prepare(predictions, labels, weights)
    assert labels is not None
    if labels.dtype != predictions.dtype:
        predictions = cast(predictions, labels.dtype)
    is_correct = cast(equal(predictions, labels), _dtypes.float32)
    return mean(is_correct, weights, metrics_collections, updates_collections,
                name or "accuracy")


def mean_absolute_error(labels: Any, predictions: Any, weights: Any = None,
                        metrics_collections: Any = None, updates_collections: Any = None,
                        name: str | None = None) -> tuple[Tensor, Tensor]:
    """The streaming mean of ``|predictions - labels|``, as ``tf.metrics.mean_absolute_error``."""
    predictions, labels, weights = prepare(predictions, labels, weights)
    return mean(abs(subtract(predictions, labels)), weights, metrics_collections,
                updates_collections, name or "mean_absolute_error")


def mean_squared_error(labels: Any, predictions: Any, weights: Any = None,
                       metrics_collections: Any = None, updates_collections: Any = None,
                       name: str | None = None) -> tuple[Tensor, Tensor]:
    """The streaming mean of ``(labels - predictions)^2``, as ``tf.metrics.mean_squared_error``."""
    predictions, labels, weights = prepare(predictions, labels, weights)
    return mean(squared_difference(labels, predictions), weights, metrics_collections,
                updates_collections, name or "mean_squared_error")


def root_mean_squared_error(labels: Any, predictions: Any, weights: Any = None,
                            metrics_collections: Any = None, updates_collections: Any = None,
                            name: str | None = None) -> tuple[Tensor, Tensor]:
    """``sqrt`` of the streaming mean squared error (ops ``Sqrt``, ``Sqrt_1`` at the root,
    variables ``root_mean_squared_error/total``/``count``), as
    ``tf.metrics.root_mean_squared_error``."""
    predictions, labels, weights = prepare(predictions, labels, weights)
    mse, update_mse = mean_squared_error(labels, predictions, weights, None, None,
                                         name or "root_mean_squared_error")
    rmse = sqrt(mse)
    collect(metrics_collections, rmse)
    update_rmse = sqrt(update_mse)
    collect(updates_collections, update_rmse)
    return rmse, update_rmse
