"""``tf.estimator.inputs.numpy_input_fn``, as TF 2.15's
``tensorflow_estimator/python/estimator/inputs/numpy_io.py``, over ``tf.data``.

The batches are TF's: the examples in order (``shuffle=False``) across ``num_epochs``
epochs, batches spanning epoch ends and a smaller last batch, as TF's queue-fed
``dequeue_up_to``. With ``shuffle=True`` the order is a seeded shuffle within a buffer of
``queue_capacity`` examples, each epoch anew; it is not TF's random order (nor is TF's
reproducible).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import numpy as np

from ..data import Dataset, make_one_shot_iterator
from ..errors import CkptsyncTypeError, CkptsyncValueError

__all__ = ["numpy_input_fn"]

_TARGET_KEY = "__target_key__"
_DIRECT_KEY = "__direct_np_input__"


def _validate_and_convert_features(x: Any) -> collections.OrderedDict[str, np.ndarray]:
    if isinstance(x, dict):
        if not x:
            raise CkptsyncValueError("x cannot be an empty dict")
        return collections.OrderedDict(sorted(x.items(), key=lambda t: t[0]))
    if isinstance(x, np.ndarray):
        if x.size == 0:
            raise CkptsyncValueError("x cannot be an empty array")
        return collections.OrderedDict({_DIRECT_KEY: x})
    raise CkptsyncTypeError(f"x must be a dict or array; got {type(x).__name__}")


def numpy_input_fn(x: Any, y: Any = None, batch_size: int = 128, num_epochs: int | None = 1,
                   shuffle: bool | None = None, queue_capacity: int = 1000,
                   num_threads: int = 1) -> Callable[[], Any]:
    """An ``input_fn`` over numpy arrays, as TF's ``tf.estimator.inputs.numpy_input_fn``.

    Args:
        x: a dict of name -> array ``[n, ...]`` (features passed as that dict) or one
            array (passed as a Tensor).
        y: labels: an array ``[n, ...]``, a dict of them, or None (then ``input_fn``
            returns features only).
        batch_size: examples per batch; num_epochs: passes over the data (None: forever).
        shuffle: required, a bool, as TF. queue_capacity: the shuffle buffer.
        num_threads: accepted, as TF (the order is the same at any value).

    Returns:
        ``input_fn()`` returning ``(features, labels)`` (or features) tensors of the next
        batch; the input ends (``OutOfRangeError``) after ``num_epochs`` passes.

    Raises:
        ValueError: ``shuffle`` not a bool; empty ``x``/``y``; keys in both ``x`` and
            ``y``; arrays of different lengths (TF's messages, when ``input_fn`` runs
            for the data checks, as TF).
        TypeError: ``x`` neither a dict nor an array.
    """
    if not isinstance(shuffle, bool):
        raise CkptsyncValueError(
            "shuffle must be provided and explicitly set as boolean (it is recommended to "
            f"set it as True for training); got {shuffle}")

    def input_fn() -> Any:
        data = _validate_and_convert_features(x)
        feature_keys = list(data)
        target_keys: Any
        if y is None:
            target_keys = None
        elif isinstance(y, dict):
            if not y:
                raise CkptsyncValueError("y cannot be empty dict, use None instead.")
            ordered_y = collections.OrderedDict(sorted(y.items(), key=lambda t: t[0]))
            target_keys = list(ordered_y)
            duplicates = set(feature_keys) & set(target_keys)
            if duplicates:
                raise CkptsyncValueError(
                    f"{len(duplicates)} duplicate keys are found in both x and y: {duplicates}")
            data.update(ordered_y)
        else:
            target_keys = _TARGET_KEY
            while target_keys in data:
                target_keys += "_n"
            data[target_keys] = y
        if len({np.shape(v)[0] for v in data.values()}) != 1:
            shapes_x = {k: np.shape(data[k]) for k in feature_keys}
            shapes_y = None if target_keys is None else (
                np.shape(y) if isinstance(target_keys, str)
                else {k: np.shape(data[k]) for k in target_keys})
            raise CkptsyncValueError(
                "Length of tensors in x and y is mismatched. All elements in x and y must "
                f"have the same length.\nShapes in x: {shapes_x}\nShapes in y: {shapes_y}\n")
        ds = Dataset.from_tensor_slices(dict(data))
        if shuffle:
            ds = ds.shuffle(queue_capacity, reshuffle_each_iteration=True)
        batch = make_one_shot_iterator(ds.repeat(num_epochs).batch(batch_size)).get_next()
        features = batch[_DIRECT_KEY] if isinstance(x, np.ndarray) else \
            {k: batch[k] for k in feature_keys}
        if target_keys is None:
            return features
        if isinstance(target_keys, str):
            return features, batch[target_keys]
        return features, {k: batch[k] for k in target_keys}

    return input_fn
