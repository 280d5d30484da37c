"""CheckpointRetention: which checkpoints to keep, with TF1 Saver's rules, and never
one that a kept checkpoint depends on.

The policy only decides; the caller (``train.Saver``) deletes the prefixes that
:meth:`CheckpointRetention.record` returns, after it has rewritten the state file with
:attr:`CheckpointRetention.last_checkpoints`.

Dependencies (ckptsync extension, for incremental checkpoints): a delta checkpoint
composes from its base (``base`` root attribute, docs/checkpoint-format.md), which may be
a delta itself. TF1 has no such checkpoints and so no such rule.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable

import h5py

from ..errors import CkptsyncTypeError, CkptsyncValueError
from ._format import data_path
from .management import get_checkpoint_mtimes

__all__ = ["CheckpointRetention", "checkpoint_base"]


def checkpoint_base(prefix: str) -> str | None:
    """The prefix a checkpoint composes from (a delta's ``base`` root attribute, in the
    same directory as ``prefix``), or None: a full checkpoint (with or without a
    ``parent``: those compose alone), a missing or unreadable file, a TF checkpoint.

    Never raises; reads one attribute of ``<prefix>.h5``. Thread-safe.
    """
    try:
        with h5py.File(data_path(os.fspath(prefix)), "r", locking=False) as f:
            base = f.attrs.get("base")
    except Exception:  # noqa: BLE001 - no readable file: nothing to keep for it
        return None
    if isinstance(base, bytes):
        base = base.decode("utf-8", "replace")
    if not isinstance(base, str) or not base:
        return None
    return os.path.join(os.path.dirname(os.fspath(prefix)), base)


def _deps_tuple(depends_on: str | Iterable[str] | None) -> tuple[str, ...]:
    if depends_on is None:
        return ()
    if isinstance(depends_on, (str, os.PathLike)):
        return (os.fspath(depends_on),)
    try:
        deps = tuple(os.fspath(d) for d in depends_on)
    except TypeError:  # not iterable, or an item that is no path
        deps = None
    if deps is None or not all(isinstance(d, str) for d in deps):
        raise CkptsyncTypeError(
            f"depends_on must be a checkpoint prefix, prefixes or None; got {depends_on!r}.")
    return deps

class CheckpointRetention:
    """Keeps the newest ``max_to_keep`` checkpoints, plus one every N hours, plus what
    any of those depends on.

    TF1's ``Saver._RecordLastCheckpoint`` / ``_MaybeDeleteOldCheckpoints``, exactly, for
    checkpoints that depend on nothing:

    - ``max_to_keep`` falsy (None or 0): nothing is recorded, nothing ever deleted.
    - Else ``record(p, t)`` drops any earlier entry for ``p``, appends ``(p, t)`` and, if
      more than ``max_to_keep`` are recorded, evicts the oldest into a queue.
    - Each ``record`` then takes at most one evicted entry from the queue: if its time is
      later than the next keep time (``start_time + N h`` at first) it is preserved (kept
      on disk, no longer tracked) and the next keep time advances by N h; otherwise it is
      returned for deletion.

    Dependencies (ckptsync extension): ``record(p, t, depends_on=b)`` says ``p`` composes
    from ``b`` (an incremental checkpoint's base). An evicted checkpoint that a recorded
    one needs (transitively) is not deleted: it is *held*, still listed in
    :attr:`last_checkpoints` (so the state file names it, oldest first, before the
    ``max_to_keep`` newest) and not counted in ``max_to_keep``, until no recorded
    checkpoint needs it; the ``record`` that frees it returns it for deletion (so one
    ``record`` may return several prefixes). What an N-hour-preserved checkpoint needs
    is preserved with it (never deleted, no longer tracked). Crash safety: the caller
    rewrites the state file before deleting, and nothing the new state file names needs
    a returned prefix.

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
        >>> r.record("d-4", 4.0, depends_on="m-3"), r.record("d-5", 5.0, depends_on="d-4")
        (['m-2'], [])
        >>> r.record("m-6", 6.0)
        []
        >>> r.last_checkpoints  # m-3 and d-4 are held: d-5 composes from them
        ['m-3', 'd-4', 'd-5', 'm-6']
        >>> r.record("m-7", 7.0)  # d-5 is evicted: its chain goes with it
        ['m-3', 'd-4', 'd-5']
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
        # Evicted by TF's rules but needed by a tracked checkpoint, oldest first.
        self._held: list[tuple[str, float]] = []
        # prefix -> the prefixes it composes from (directly), for tracked prefixes.
        self._deps: dict[str, tuple[str, ...]] = {}
        # Needed by an N-hour-preserved checkpoint: never deleted.
        self._preserved: set[str] = set()

    def copy(self) -> CheckpointRetention:
        """An independent copy (e.g. to roll back to if a save fails)."""
        # Every field is immutable or a container of immutables: copy the containers.
        other = type(self).__new__(type(self))
        other.__dict__.update(self.__dict__)
        other._last, other._to_delete = list(self._last), list(self._to_delete)
        other._held, other._deps = list(self._held), dict(self._deps)
        other._preserved = set(self._preserved)
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
        """Recorded prefixes, oldest first (a copy): the held bases, then the newest
        ``max_to_keep``."""
        return [p for p, _ in self._held] + [p for p, _ in self._last]

    @property
    def last_checkpoints_with_time(self) -> list[tuple[str, float]]:
        """Recorded ``(prefix, timestamp)`` pairs, oldest first (a copy), as
        :attr:`last_checkpoints`."""
        return self._held + self._last

    def depends_on(self, prefix: str) -> tuple[str, ...]:
        """The prefixes ``prefix`` composes from directly, as recorded (``()``: none or
        unknown)."""
        return self._deps.get(prefix, ())

    def set_last_checkpoints_with_time(
        self, last_checkpoints_with_time: Iterable[tuple[str, float]]
    ) -> None:
        """Replaces the record, e.g. after restoring (as TF's Saver method).

        The dependencies of prefixes not recorded before are read from their files
        (:func:`checkpoint_base`); older entries that the newest ``max_to_keep`` need
        are held (see the class docstring)."""
        self._adopt([(os.fspath(p), float(t)) for p, t in last_checkpoints_with_time])

    def set_last_checkpoints(self, last_checkpoints: Iterable[str]) -> None:
        """Deprecated TF form: timestamps are +inf, so these are never deleted."""
        self._adopt([(os.fspath(p), math.inf) for p in last_checkpoints])

    def recover_last_checkpoints(self, checkpoint_prefixes: Iterable[str]) -> None:
        """Records the prefixes whose ``.h5`` exists, each timestamped with its mtime.

        As TF's ``Saver.recover_last_checkpoints``; missing checkpoints are dropped
        (TF misaligns paths and mtimes there; ckptsync pairs them correctly). Each
        one's dependencies are read from its file (a delta's ``base``), so that the
        bases of recovered deltas are held, never deleted, while a delta needs them.
        """
        pairs = []
        for prefix in checkpoint_prefixes:
            mtimes = get_checkpoint_mtimes([prefix])
            if mtimes:
                pairs.append((os.fspath(prefix), mtimes[0]))
        self._adopt(pairs)

    def forget_missing(self) -> None:
        """Drops the recorded prefixes whose checkpoint file is gone (e.g. after a
        writer died having deleted an evicted one)."""
        keep = {p for p in self.last_checkpoints if get_checkpoint_mtimes([p])}
        self._last = [(p, t) for p, t in self._last if p in keep]
        self._held = [(p, t) for p, t in self._held if p in keep]
        self._deps = {p: d for p, d in self._deps.items() if p in keep}

    def _adopt(self, pairs: list[tuple[str, float]]) -> None:
        deps = {p: self._deps[p] if p in self._deps else _deps_tuple(checkpoint_base(p))
                for p, _ in pairs}
        self._deps = deps
        self._held, self._to_delete = [], []
        if not self._max_to_keep or len(pairs) <= self._max_to_keep:
            self._last = pairs
            return
        # TF keeps every adopted entry in its list (one evicted per later record); those
        # older than the newest max_to_keep that a newer one needs are held instead.
        window = pairs[-self._max_to_keep:]
        older = pairs[:-self._max_to_keep]
        needed = self._needed_by(p for p, _ in window)
        self._held = [(p, t) for p, t in older if p in needed]
        self._last = [(p, t) for p, t in older if p not in needed] + window

    def _needed_by(self, prefixes: Iterable[str]) -> set[str]:
        """Every prefix that ``prefixes`` compose from, transitively (not themselves,
        unless one is another's base)."""
        needed: set[str] = set()
        todo = [d for p in prefixes for d in self._deps.get(p, ())]
        while todo:
            p = todo.pop()
            if p not in needed:
                needed.add(p)
                todo.extend(self._deps.get(p, ()))
        return needed

    def record(self, prefix: str, timestamp: float | None = None,
               depends_on: str | Iterable[str] | None = None) -> list[str]:
        """Records a new checkpoint; returns the prefixes the caller should delete.

        Args:
            prefix: the checkpoint just saved.
            timestamp: its save time, seconds since the epoch; default now.
            depends_on: the prefix (or prefixes) ``prefix`` composes from: an
                incremental checkpoint's base (ckptsync extension); None for a
                checkpoint that composes alone.

        Returns:
            The prefixes to delete, oldest first: ``[]`` or the evicted checkpoint
            (unless N-hour preservation keeps it, or a recorded checkpoint needs it),
            plus any held base that no recorded checkpoint needs any more, and (first)
            any recorded checkpoint composed through an earlier ``prefix``: saving
            ``prefix`` again replaced the file it composes from.

        Raises:
            CkptsyncTypeError: ``depends_on`` is not a prefix or prefixes.
        """
        deps = _deps_tuple(depends_on)
        if not self._max_to_keep:
            return []
        now = time.time() if timestamp is None else float(timestamp)
        prefix = os.fspath(prefix)
        # Saved again: what composed through the old file no longer reads (its base's
        # index hash changed); such checkpoints are dropped and deleted.
        broken = [p for p, _ in self._last + self._held
                  if p != prefix and prefix in self._needed_by([p])]
        self._last = [(p, t) for p, t in self._last if p != prefix and p not in broken]
        self._held = [(p, t) for p, t in self._held if p != prefix and p not in broken]
        self._last.append((prefix, now))
        self._deps[prefix] = deps
        if len(self._last) > self._max_to_keep:
            self._to_delete.append(self._last.pop(0))
        candidates: list[tuple[str, float]] = []
        if self._to_delete:
            evicted, evicted_time = self._to_delete.pop(0)
            if evicted_time > self._next_keep_time:
                self._next_keep_time += self._keep_every_s
                self._preserve(evicted)
            elif evicted in self._preserved:
                self._untrack(evicted)
            else:
                candidates.append((evicted, evicted_time))
        # Held bases and the evicted one: delete what none of the newest needs now.
        needed = self._needed_by(p for p, _ in self._last)
        keep_held, delete = [], []
        for p, t in self._held + candidates:
            if p in needed:
                keep_held.append((p, t))
            elif p in self._preserved:
                self._deps.pop(p, None)
            else:
                delete.append(p)
        self._held = keep_held
        delete = broken + delete
        for p in delete:
            self._deps.pop(p, None)
        return delete

    def _preserve(self, prefix: str) -> None:
        """N-hour keep of ``prefix``: it and what it needs are never deleted."""
        needs = self._needed_by([prefix])
        self._preserved.update(needs)
        self._held = [(p, t) for p, t in self._held if p not in needs]
        self._untrack(prefix)
        for p in needs:
            if p not in {q for q, _ in self._last}:
                self._deps.pop(p, None)

    def _untrack(self, prefix: str) -> None:
        if prefix not in {p for p, _ in self._last + self._held}:
            self._deps.pop(prefix, None)
