"""``tf.train.summary_iterator``: the ``Event`` protos of one event file, in order, as
TF1's ``summary_iterator`` (read by TensorBoard's own loader, the ``tensorboard``
package: the optional extra ``ckptsync[tensorboard]``).

Example:
    >>> import ckptsync as tf
    >>> for event in tf.train.summary_iterator(path):  # doctest: +SKIP
    ...     for v in event.summary.value:
    ...         print(event.step, v.tag, v.simple_value)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..errors import NotFoundError
from . import _tb

__all__ = ["summary_iterator"]


def summary_iterator(path: str | os.PathLike[str]) -> Iterator[Any]:
    """Yields each ``Event`` (tensorboard's ``event_pb2.Event``: ``wall_time``, ``step``,
    ``file_version``, ``summary``, ``graph_def``...) of the event file at ``path``, the
    first being its ``file_version`` record, as TF1's ``tf.train.summary_iterator``.
    A generator: nothing is read before the first ``next``. Not thread-safe (one reader).

    Raises:
        NotFoundError: (on the first ``next``) ``path`` does not exist.
        ImportError: the tensorboard package is not installed (names the extra).
    """
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise NotFoundError(None, None, f"{p}; No such file or directory")
    loader = _tb._load("tensorboard.backend.event_processing.event_file_loader")
    event = _tb.proto("event_pb2.Event")
    for record in loader.RawEventFileLoader(p).Load():  # the records as written, as TF's
        yield event.FromString(record)
