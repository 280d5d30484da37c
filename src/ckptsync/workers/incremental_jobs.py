"""Incremental checkpoints in the async writer (``Saver(incremental=True,
async_save=True)``): the owner copies into shared memory only what the checkpoint
stores, and the writer process calls ``checkpoint.write_incremental_checkpoint``.

The shared buffer keeps the layout of every variable at full size (so the writer sees
arrays of the variables' shapes); for a delta only the changed rows of a ``rows``
variable and the value of a ``full`` one are copied in, the rest of the buffer holds
older values that the writer never reads (an unchanged variable's digest comes from the
owner). The changed rows' indices travel in the job itself (int64, base64).

A ckptsync extension: TF1 writes every variable on every save.

Thread-safety: :class:`IncrementalJob` is immutable; its methods run in one thread.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import checkpoint as ckpt
from ..checkpoint import writer
from ..errors import InvalidArgumentError

__all__ = ["IncrementalJob", "write_job"]


@dataclass(frozen=True)
class IncrementalJob:
    """What an incremental save adds to an async job.

    Attributes:
        parent: the predecessor's absolute prefix, or None (a full checkpoint).
        full: write every value (a full checkpoint, with ``parent`` if given).
        changes: key -> None (changed as a whole) or sorted unique int64 rows ``[k]``; a
            key absent is unchanged since ``parent``.
        digests: key -> block digest (16 hex digits) of every variable after applying.
    """

    parent: str | None
    full: bool
    changes: Mapping[str, np.ndarray | None]
    digests: Mapping[str, str]

    def copy_in(self, targets: list[np.ndarray], arrays: Mapping[str, np.ndarray]) -> None:
        """Copies what the checkpoint stores of ``arrays`` into ``targets`` (views of the
        slot, in ``arrays``' order): every value of a full checkpoint, else each changed
        variable's rows or value."""
        copyto = np.copyto
        changes = self.changes
        for dst, (key, src) in zip(targets, arrays.items()):
            if self.full:
                copyto(dst, src)
                continue
            if key not in changes:
                continue
            rows = changes[key]
            if rows is None:
                copyto(dst, src)
            else:
                dst[rows] = src[rows]

    def to_doc(self) -> dict[str, Any]:
        """The job's JSON part."""
        rows = {k: base64.b64encode(np.ascontiguousarray(r, dtype="<i8").tobytes()).decode()
                for k, r in self.changes.items() if r is not None}
        return {"parent": self.parent, "full": self.full, "digests": dict(self.digests),
                "whole": [k for k, r in self.changes.items() if r is None], "rows": rows}


def _changes(doc: Mapping[str, Any]) -> dict[str, np.ndarray | None]:
    changes: dict[str, np.ndarray | None] = dict.fromkeys(doc["whole"])
    for k, text in doc["rows"].items():
        changes[k] = np.frombuffer(base64.b64decode(text), dtype="<i8").astype(np.int64)
    return changes


def write_job(job: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
    """Runs an incremental job's write in the writer process (``job["incremental"]`` as
    :meth:`IncrementalJob.to_doc` made it); with ``require_finite``, only the stored
    values are checked.

    Raises:
        InvalidArgumentError: a stored value holds NaN or Inf (``require_finite``).
        OpError: the write failed (as ``write_incremental_checkpoint``).
    """
    inc = job["incremental"]
    changes = _changes(inc)
    if job.get("require_finite"):
        stored = arrays if inc["full"] else {
            k: arrays[k] if r is None else arrays[k][r] for k, r in changes.items()}
        bad = writer.first_nonfinite(stored)
        if bad is not None:
            raise InvalidArgumentError(
                None, None, f"Variable {bad} holds NaN or Inf; refusing to save "
                f"checkpoint {job['prefix']} (require_finite).")
    metadata = job["metadata"]
    ckpt.write_incremental_checkpoint(
        job["prefix"], arrays, changes, inc["parent"], inc["digests"], inc["full"],
        global_step=job["global_step"],
        metadata=None if metadata is None else json.loads(metadata),
        sync_directory=job["state"] is None)
