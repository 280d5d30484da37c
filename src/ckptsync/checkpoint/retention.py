"""CheckpointRetention: which checkpoints to keep, with TF1 Saver's rules.

The policy only decides; the caller (``train.Saver``) deletes the prefixes that
:meth:`CheckpointRetention.record` returns, after it has rewritten the state file.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable

from ..errors import CkptsyncTypeError, CkptsyncValueError
from .management import get_checkpoint_mtimes

__all__ = ["CheckpointRetention"]


class CheckpointRetention:
    """Keeps the newest ``max_to_keep`` checkpoints, plus one every N hours.

    TF1's ``Saver._RecordLastCheckpoint`` / ``_MaybeDeleteOldCheckpoints``, exactly:

    - ``max_to_keep`` falsy (None or 0): nothing is recorded, nothing ever deleted.
    - Else ``record(p, t)`` drops any earlier entry for ``p``, appends ``(p, t)`` and, if
      more than ``max_to_keep`` are recorded, evicts the oldest into a queue.
    - Each ``record`` then takes at most one evicted entry from the queue: if its time is
      later than the next keep time (``start_time + N h`` at first) it is preserved (kept
      on disk, no longer tracked) and the next keep time advances by N h; otherwise it is
      returned for deletion.

    Args:
        max_to_keep: how many recent checkpoints to keep; None or 0 keeps all.
        keep_checkpoint_every_n_hours: additionally preserve one checkpoint per this
            many hours (default 10000: effectively never).
        start_time: seconds since the epoch the N-hour clock starts from; default now.

    Raises:
        CkptsyncTypeError, CkptsyncValueError: a negative or non-int ``max_to_keep``,
            or a negative or NaN ``keep_checkpoint_every_n_hours``.

    Thread-safety: not thread-safe; one Saver owns one policy.

    Example:
        >>> r = CheckpointRetention(max_to_keep=2, start_time=0.0)
        >>> [r.record(f"m-{i}", timestamp=float(i)) for i in range(4)]
        [[], [], ['m-0'], ['m-1']]
        >>> r.last_checkpoints
        ['m-2', 'm-3']
    """

    def __init__(
        self,
        max_to_keep: int | None = 5,
        keep_checkpoint_every_n_hours: float = 10000.0,
        start_time: float | None = None,
    ):
        if max_to_keep is not None and (
            isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int)
        ):
            raise CkptsyncTypeError(f"max_to_keep must be an int or None; got {max_to_keep!r}.")
        if max_to_keep is not None and max_to_keep < 0:
            raise CkptsyncValueError(f"max_to_keep must be >= 0 or None; got {max_to_keep}.")
        hours = float(keep_checkpoint_every_n_hours)
        if math.isnan(hours) or hours < 0:
            raise CkptsyncValueError(
                f"keep_checkpoint_every_n_hours must be >= 0; got {keep_checkpoint_every_n_hours}."
            )
        self._max_to_keep = max_to_keep or 0
        self._keep_every_s = hours * 3600.0
        start = time.time() if start_time is None else float(start_time)
        self._next_keep_time = start + self._keep_every_s
        self._last: list[tuple[str, float]] = []
        self._to_delete: list[tuple[str, float]] = []

    def copy(self) -> CheckpointRetention:
        """An independent copy (e.g. to roll back to if a save fails)."""
        # Every field is immutable or a list of immutable pairs: copy the lists.
        other = type(self).__new__(type(self))
        other.__dict__.update(self.__dict__)
        other._last, other._to_delete = list(self._last), list(self._to_delete)
        return other

    @property
    def max_to_keep(self) -> int:
        """The limit; 0 means keep all (None is stored as 0, as TF does)."""
        return self._max_to_keep

    @property
    def keep_checkpoint_every_n_hours(self) -> float:
        return self._keep_every_s / 3600.0

    @property
    def next_keep_time(self) -> float:
        """Seconds since the epoch after which the next evicted checkpoint is preserved."""
        return self._next_keep_time

    @property
    def last_checkpoints(self) -> list[str]:
        """Recorded prefixes, oldest first (a copy)."""
        return [p for p, _ in self._last]

    @property
    def last_checkpoints_with_time(self) -> list[tuple[str, float]]:
        """Recorded ``(prefix, timestamp)`` pairs, oldest first (a copy)."""
        return list(self._last)

    def set_last_checkpoints_with_time(
        self, last_checkpoints_with_time: Iterable[tuple[str, float]]
    ) -> None:
        """Replaces the record, e.g. after restoring (as TF's Saver method)."""
        pairs = [(str(p), float(t)) for p, t in last_checkpoints_with_time]
        self._last = pairs

    def set_last_checkpoints(self, last_checkpoints: Iterable[str]) -> None:
        """Deprecated TF form: timestamps are +inf, so these are never deleted."""
        self._last = [(str(p), math.inf) for p in last_checkpoints]

    def recover_last_checkpoints(self, checkpoint_prefixes: Iterable[str]) -> None:
        """Records the prefixes whose ``.h5`` exists, each timestamped with its mtime.

        As TF's ``Saver.recover_last_checkpoints``; missing checkpoints are dropped
        (TF misaligns paths and mtimes there; ckptsync pairs them correctly).
        """
        pairs = []
        for prefix in checkpoint_prefixes:
            mtimes = get_checkpoint_mtimes([prefix])
            if mtimes:
                pairs.append((os.fspath(prefix), mtimes[0]))
        self._last = pairs

    def record(self, prefix: str, timestamp: float | None = None) -> list[str]:
        """Records a new checkpoint; returns the prefixes the caller should delete.

        Args:
            prefix: the checkpoint just saved.
            timestamp: its save time, seconds since the epoch; default now.

        Returns:
            ``[]`` or one prefix: the evicted checkpoint unless N-hour preservation
            keeps it.
        """
        if not self._max_to_keep:
            return []
        now = time.time() if timestamp is None else float(timestamp)
        self._last = [(p, t) for p, t in self._last if p != prefix]
        self._last.append((prefix, now))
        if len(self._last) > self._max_to_keep:
            self._to_delete.append(self._last.pop(0))
        if not self._to_delete:
            return []
        evicted, evicted_time = self._to_delete.pop(0)
        if evicted_time > self._next_keep_time:
            self._next_keep_time += self._keep_every_s
            return []
        return [evicted]
