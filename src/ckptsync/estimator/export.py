"""``tf.estimator.export``: what a serving input function returns and what a model
exports, as TF 2.15's ``tensorflow_estimator/python/estimator/export/export.py`` and
``tensorflow/python/saved_model/model_utils/export_output.py``.

A ``serving_input_receiver_fn()`` builds the serving graph's inputs and returns a
:class:`ServingInputReceiver`: ``features`` go to ``model_fn(features, None, PREDICT)``,
``receiver_tensors`` are the placeholders a client feeds (``infer serve`` feeds them).

Example:
    >>> import ckptsync as cs
    >>> g = cs.Graph()
    >>> with g.as_default():
    ...     fn = cs.estimator.export.build_raw_serving_input_receiver_fn(
    ...         {"x": cs.placeholder(cs.float32, [None, 64], name="x")})
    ...     receiver = fn()
    >>> sorted(receiver.receiver_tensors), receiver.features["x"].shape.as_list()
    (['x'], [None, 64])
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import CkptsyncValueError
from ..model_fn import (  # noqa: F401 - tf.estimator.export names them
    ClassificationOutput,
    ExportOutput,
    PredictOutput,
    RegressionOutput,
)
from ..ops.array_ops import placeholder
from ..tensor import Tensor
from ..tensor_shape import TensorShape

__all__ = [
    "ServingInputReceiver", "TensorServingInputReceiver", "build_raw_serving_input_receiver_fn",
    "ExportOutput", "PredictOutput", "ClassificationOutput", "RegressionOutput",
    "SINGLE_FEATURE_DEFAULT_NAME", "SINGLE_RECEIVER_DEFAULT_NAME", "SINGLE_LABEL_DEFAULT_NAME",
]

#: The dict keys a lone tensor is wrapped under, as TF's ``export_utils``.
SINGLE_FEATURE_DEFAULT_NAME = "feature"
SINGLE_RECEIVER_DEFAULT_NAME = "input"
SINGLE_LABEL_DEFAULT_NAME = "label"

_SINGLE_TENSOR_DEFAULT_NAMES = {
    "feature": SINGLE_FEATURE_DEFAULT_NAME,
    "label": SINGLE_LABEL_DEFAULT_NAME,
    "receiver_tensor": SINGLE_RECEIVER_DEFAULT_NAME,
    "receiver_tensors_alternative": SINGLE_RECEIVER_DEFAULT_NAME,
}


def wrap_and_check_input_tensors(tensors: Any, field_name: str,
                                 allow_int_keys: bool = False) -> dict[Any, Tensor]:
    """``tensors`` as a dict of name -> Tensor (a lone Tensor wrapped under its default
    name: ``"feature"``, ``"input"``, ``"label"``), as TF's function of that name.

    Raises:
        ValueError: ``tensors`` is None ("features must be defined."), a key is not a
            string (or int, with ``allow_int_keys``), or a value is not a Tensor; TF's
            messages.
    """
    if tensors is None:
        raise CkptsyncValueError(f"{field_name}s must be defined.")
    if not isinstance(tensors, dict):
        tensors = {_SINGLE_TENSOR_DEFAULT_NAMES[field_name]: tensors}
    for name, tensor in tensors.items():
        _check_tensor_key(name, field_name, allow_int_keys)
        _check_tensor(tensor, name, field_name)
    return tensors


def _check_tensor(tensor: Any, name: Any, error_label: str = "feature") -> None:
    if not isinstance(tensor, Tensor):
        fmt_name = f" {name}" if name else ""
        raise CkptsyncValueError(
            f"{error_label}{fmt_name} must be a Tensor, SparseTensor, or RaggedTensor.")


def _check_tensor_key(name: Any, error_label: str = "feature", allow_ints: bool = False) -> None:
    if not isinstance(name, str):
        if not allow_ints:
            raise CkptsyncValueError(f"{error_label} keys must be strings: {name}.")
        if not isinstance(name, int):
            raise CkptsyncValueError(f"{error_label} keys must be strings or ints: {name}.")


class ServingInputReceiver(collections.namedtuple(
        "ServingInputReceiver",
        ["features", "receiver_tensors", "receiver_tensors_alternatives"])):
    """What a ``serving_input_receiver_fn`` returns, as TF's
    ``tf.estimator.export.ServingInputReceiver``.

    Attributes:
        features: dict of name (str or int) -> Tensor passed to ``model_fn`` (a lone
            Tensor is wrapped as ``{"feature": tensor}``, as TF).
        receiver_tensors: dict of name -> Tensor a client feeds (a lone Tensor is
            wrapped as ``{"input": tensor}``).
        receiver_tensors_alternatives: dict of name -> (Tensor or dict) further groups
            of inputs, or None.

    Raises:
        ValueError: as :func:`wrap_and_check_input_tensors`, or
            ``receiver_tensors_alternatives`` that is not a dict.
    """

    def __new__(cls, features: Any, receiver_tensors: Any,
                receiver_tensors_alternatives: Any = None) -> ServingInputReceiver:
        features = wrap_and_check_input_tensors(features, "feature", allow_int_keys=True)
        receiver_tensors = wrap_and_check_input_tensors(receiver_tensors, "receiver_tensor")
        if receiver_tensors_alternatives is not None:
            if not isinstance(receiver_tensors_alternatives, dict):
                raise CkptsyncValueError(
                    f"receiver_tensors_alternatives must be a dict: "
                    f"{receiver_tensors_alternatives}.")
            for alt_name, alt in list(receiver_tensors_alternatives.items()):
                receiver_tensors_alternatives[alt_name] = wrap_and_check_input_tensors(
                    alt, "receiver_tensors_alternative")
        return super().__new__(cls, features, receiver_tensors, receiver_tensors_alternatives)


class TensorServingInputReceiver(collections.namedtuple(
        "TensorServingInputReceiver",
        ["features", "receiver_tensors", "receiver_tensors_alternatives"])):
    """A :class:`ServingInputReceiver` whose ``features`` is one Tensor passed to
    ``model_fn`` as is (not wrapped in a dict), as TF's class of that name.

    Raises:
        ValueError: ``features`` is None or not a Tensor; as :class:`ServingInputReceiver`.
    """

    def __new__(cls, features: Any, receiver_tensors: Any,
                receiver_tensors_alternatives: Any = None) -> TensorServingInputReceiver:
        if features is None:
            raise CkptsyncValueError("features must be defined.")
        _check_tensor(features, None)
        receiver = ServingInputReceiver(features, receiver_tensors,
                                        receiver_tensors_alternatives)
        return super().__new__(cls, receiver.features[SINGLE_FEATURE_DEFAULT_NAME],
                               receiver.receiver_tensors,
                               receiver.receiver_tensors_alternatives)


def _placeholder_from_tensor(t: Tensor, default_batch_size: int | None = None) -> Tensor:
    """A placeholder of ``t``'s dtype and shape (first dimension ``default_batch_size``),
    named as ``t``'s op, as TF."""
    shape = TensorShape([default_batch_size]).concatenate(t.get_shape()[1:])
    return placeholder(t.dtype, shape, name=t.op.name)


def build_raw_serving_input_receiver_fn(
        features: Mapping[str, Tensor],
        default_batch_size: int | None = None) -> Callable[[], ServingInputReceiver]:
    """A ``serving_input_receiver_fn`` whose features are fed directly, as TF's
    ``tf.estimator.export.build_raw_serving_input_receiver_fn``.

    Each call makes, in the default graph, one placeholder per entry of ``features``
    (same dtype, shape ``[default_batch_size] + shape[1:]``, named as that tensor's op)
    and returns ``ServingInputReceiver(placeholders, placeholders)``.

    Args:
        features: dict of name -> Tensor (e.g. ``{"x": <[None, 64] float32>}``) giving
            each input's dtype and shape; only those are used.
        default_batch_size: the batch dimension; None (recommended) for any size.
    """

    def serving_input_receiver_fn() -> ServingInputReceiver:
        receiver_tensors = {name: _placeholder_from_tensor(t, default_batch_size)
                            for name, t in features.items()}
        return ServingInputReceiver(receiver_tensors, receiver_tensors)

    return serving_input_receiver_fn
