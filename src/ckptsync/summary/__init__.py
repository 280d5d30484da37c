"""``cs.summary``: TensorBoard summaries, as TF1's ``tf.summary``.

Summary ops (``scalar``, ``histogram``, ``image``, ``text``, ``merge``, ``merge_all``)
yield serialized ``Summary`` protos; ``FileWriter`` writes them to event files that
TensorBoard reads. Messages and the event-file writer are the ``tensorboard`` package's
(the ``ckptsync[tensorboard]`` extra), loaded when first needed. ``Summary``, ``Event``,
``SessionLog``, ``SummaryMetadata`` and ``HistogramProto`` are its message classes.
"""

from typing import Any

from . import _tb
from .summary_ops import histogram, image, merge, merge_all, scalar, text
from .writer import FileWriter, FileWriterCache

__all__ = ["scalar", "histogram", "image", "text", "merge", "merge_all", "FileWriter",
           "FileWriterCache", "Summary", "Event", "SessionLog", "SummaryMetadata",
           "HistogramProto"]

_PROTOS = {"Summary": "summary_pb2.Summary", "Event": "event_pb2.Event",
           "SessionLog": "event_pb2.SessionLog",
           "SummaryMetadata": "summary_pb2.SummaryMetadata",
           "HistogramProto": "summary_pb2.HistogramProto"}


def __getattr__(name: str) -> Any:  # message classes load tensorboard on first use
    if name in _PROTOS:
        return _tb.proto(_PROTOS[name])
    raise AttributeError(f"module 'ckptsync.summary' has no attribute {name!r}")
