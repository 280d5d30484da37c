"""Incremental saves of ``Saver(incremental=True)``: what changed since the last
checkpoint, and only that, is written (a ckptsync extension; TF1's Saver always writes
every variable).

Per Saver, for the session it saves from:

- a :class:`~ckptsync.session.changes.ChangeTracker` (``sess.track_changes()``, made at
  the first save or restore in that session) says which variables, and which rows of
  them, runs changed since the last save; nothing compares or copies parameters;
- one block-digest vector per variable (``checkpoint.block_digests``), of the values as
  the last checkpoint holds them, updated for the touched blocks only
  (``update_block_digests``); each checkpoint records every variable's digest after
  applying, so a reader composing a chain verifies it;
- the *predecessor*: the last checkpoint this Saver wrote in this session's lifetime,
  or the one just restored.

Each save writes (``checkpoint.write_incremental_checkpoint``):

- a **delta** on the predecessor when it is usable (same directory, another prefix,
  still the file this Saver wrote or restored, or queued before this save): per variable
  nothing, the changed rows, or the full value, whichever is smaller;
- a **full checkpoint with a parent** (every value, plus the changes since the
  predecessor, for a server at it) every ``full_checkpoint_every_n``-th checkpoint,
  after a restore, and when the delta would store more than half of a full one;
- a **full checkpoint** (no parent) when no predecessor is usable (the first save, a new
  session, another directory, a predecessor gone or replaced, ``write_state=False``).

Saveables (a ``tf.data`` iterator's state, ...) are always stored whole. A save that
fails gives its changes back to the tracker (the next save writes them) and keeps the
digests and predecessor it had; with ``async_save`` a failure surfaced later rolls back
the failed save and those queued after it the same way.

Cost per save: O(rows changed) to take the changes and rehash the touched blocks, plus
the stored values' bytes to write (to copy into shared memory with ``async_save``); a
whole change rehashes its variable (xxh3, several GB/s). No second copy of parameters
is kept: the digest vectors are 8 bytes per 4 KiB block (0.2 %).

Thread-safety: as the Saver's (one thread at a time).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .. import checkpoint as ckpt
from .. import errors
from ..checkpoint.management import remove_evicted
from ..checkpoint.writer import first_nonfinite
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..workers import StateUpdate
from ..workers.incremental_jobs import IncrementalJob

if TYPE_CHECKING:
    from .saver import Saver

__all__ = ["IncrementalSaves", "SavePlan", "SavedCheckpoint", "save_incremental"]

Changes = dict[str, "np.ndarray | None"]


class SavedCheckpoint(NamedTuple):
    """What an incremental save wrote: its absolute ``prefix``, ``kind`` (``"delta"``,
    ``"full"`` for a full checkpoint with a parent, ``"full (no parent)"``), its
    ``parent`` (absolute prefix or None) and ``stored_bytes``: the bytes of the values
    it stores (rows and row indices of a delta; every value of a full one)."""

    prefix: str
    kind: str
    parent: str | None
    stored_bytes: int


@dataclass(frozen=True)
class _Digest:
    """A variable's block digests as the last checkpoint holds it; ``vector`` and
    ``hex`` None: not computed (after a plain full checkpoint, which records none), to be
    computed from the value when a later checkpoint needs them."""

    shape: tuple[int, ...]
    dtype: np.dtype
    vector: np.ndarray | None  # uint64 [n_blocks]
    hex: str | None


@dataclass(frozen=True)
class _Predecessor:
    prefix: str  # absolute
    identity: tuple[int, ...] | None  # of its data file, when this process saw it


class SavePlan(NamedTuple):
    """One save, decided: ``parent`` (absolute prefix or None), ``full``, the writer's
    ``changes`` (key -> None or rows; a key absent: unchanged), ``digests`` (key -> hex)
    and the new digest ``vectors``, ``taken`` (what the tracker gave, by op name, to give
    back on failure) and ``stored_bytes``."""

    parent: str | None
    full: bool
    changes: Changes
    digests: dict[str, _Digest]
    taken: Changes
    stored_bytes: int

    @property
    def kind(self) -> str:
        if not self.full:
            return "delta"
        return "full" if self.parent is not None else "full (no parent)"

    def hex_digests(self) -> dict[str, str]:
        """key -> digest hex for the writer (empty for a plain checkpoint, no parent:
        it records none)."""
        if self.parent is None:
            return {}
        return {k: d.hex for k, d in self.digests.items() if d.hex is not None}


def _identity(prefix: str) -> tuple[int, ...] | None:
    try:
        st = os.stat(ckpt.data_path(prefix))
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def rows_cost(arr: np.ndarray, rows: np.ndarray) -> int:
    """Bytes a delta stores for ``rows`` of ``arr``: the rows' values and their int64
    indices."""
    row_nbytes = arr.nbytes // arr.shape[0] if arr.shape and arr.shape[0] else 0
    return int(rows.size) * (row_nbytes + 8)


class IncrementalSaves:
    """The incremental state of one Saver (see the module docstring).

    Args:
        full_checkpoint_every_n: every this many checkpoints one is full (>= 1; 1 makes
            every checkpoint full, each naming its parent).

    Raises:
        CkptsyncTypeError: ``full_checkpoint_every_n`` is not an int (a bool, a str, a
            float).
        CkptsyncValueError: ``full_checkpoint_every_n`` is < 1.
    """

    def __init__(self, full_checkpoint_every_n: int = 16):
        if isinstance(full_checkpoint_every_n, bool) or not isinstance(
                full_checkpoint_every_n, (int, np.integer)):
            raise CkptsyncTypeError(
                f"full_checkpoint_every_n must be an int >= 1; got {full_checkpoint_every_n!r}.")
        if full_checkpoint_every_n < 1:
            raise CkptsyncValueError(
                f"full_checkpoint_every_n must be an int >= 1; got {full_checkpoint_every_n!r}.")
        self.full_every_n = int(full_checkpoint_every_n)
        self._tracker: Any = None
        self._digests: dict[str, _Digest] = {}
        self._pred: _Predecessor | None = None
        self._since_full = 0  # deltas written since the last full checkpoint
        self._force_full = False

    # -- state, for the async path's rollback -------------------------------------------
    def snapshot(self) -> tuple[Any, ...]:
        """The state to roll back to if the saves after this point fail."""
        return (self._digests, self._pred, self._since_full, self._force_full)

    def roll_back(self, saves: list[tuple[tuple[Any, ...], Changes] | None]) -> None:
        """Forgets failed async saves, oldest first, each ``(snapshot before it, changes
        it took)`` (None: not an incremental save): back to the first one's snapshot,
        their changes given back to the tracker."""
        incremental = [s for s in saves if s is not None]
        if incremental:
            self._digests, self._pred, self._since_full, self._force_full = incremental[0][0]
        for _, taken in incremental:
            self.give_back(taken)

    def give_back(self, taken: Changes) -> None:
        """Puts a failed save's changes back into the tracker (nothing is lost)."""
        if taken and self._tracker is not None:
            self._tracker.put_back(taken)

    @property
    def predecessor(self) -> str | None:
        """The absolute prefix the next save may be a delta on, or None."""
        return self._pred.prefix if self._pred is not None else None

    # -- reading ------------------------------------------------------------------------
    def _tracker_for(self, sess: Any) -> Any:
        tracker = self._tracker
        if tracker is None or not tracker.owned_by(sess):
            track = getattr(sess, "track_changes", None)
            if track is None:
                raise errors.UnimplementedError(
                    None, None, f"Saver(incremental=True) needs a ckptsync Session (with "
                    f"track_changes()); got {type(sess).__name__}.")
            # Another session: what its runs changed since our checkpoints is unknown.
            self._tracker = tracker = track()
            self._digests, self._pred, self._since_full = {}, None, 0
        return tracker

    def restored(self, sess: Any, prefix: str) -> None:
        """``sess`` was just restored from ``prefix`` (absolute): the next save is full
        and names ``prefix`` as its parent (when in the same directory)."""
        if getattr(sess, "track_changes", None) is not None:  # else the next save raises
            self._tracker_for(sess)
        self._digests = {}
        self._pred = _Predecessor(prefix, _identity(prefix))
        self._since_full = 0
        self._force_full = True

    def read(self, sess: Any, keys: list[str], op_names: list[str],
             saveables: list[tuple[str, Any]]) -> tuple[dict[str, np.ndarray], Changes, Changes]:
        """``(values by key, changes by key, taken by op name)``: the values and what
        changed since the last save, taken together between two runs."""
        tracker = self._tracker_for(sess)
        values, taken = sess.read_variables_and_changes(op_names, tracker)
        named = dict(zip(keys, values.values()))
        changes: Changes = {}
        if taken:
            for k, n in zip(keys, op_names):
                if n in taken:
                    changes[k] = taken[n]
        for k, v in saveables:
            named[k] = v.save_value(sess)
            changes[k] = None
        return named, changes, taken

    # -- deciding -----------------------------------------------------------------------
    def plan(self, prefix: str, named: Mapping[str, np.ndarray], changes: Changes,
             taken: Changes, pending: Collection[str] = ()) -> SavePlan:
        """Decides one save of ``named`` at ``prefix`` (absolute); ``pending``: absolute
        prefixes queued for writing (an async predecessor not yet on disk)."""
        writer_changes: Changes = {}
        full_bytes = delta_bytes = 0
        same = object()
        kinds: dict[str, Any] = {}  # key -> same, None (whole) or rows
        for k, arr in named.items():
            arr = np.asarray(arr)
            nbytes = arr.nbytes
            full_bytes += nbytes
            old = self._digests.get(k)
            ch: Any = changes.get(k, same)
            if old is None or old.shape != arr.shape or old.dtype != arr.dtype or (
                    arr.ndim == 0 and ch is not same):
                ch = None
            kinds[k] = ch
            if ch is same:
                continue
            if isinstance(ch, np.ndarray) and rows_cost(arr, ch) >= nbytes:
                ch = None  # the whole value is smaller
            writer_changes[k] = ch
            delta_bytes += nbytes if ch is None else rows_cost(arr, ch)
        pred = self._pred
        usable = pred is not None and pred.prefix != prefix and \
            os.path.dirname(pred.prefix) == os.path.dirname(prefix) and \
            (pred.prefix in pending or (pred.identity is not None
                                        and _identity(pred.prefix) == pred.identity))
        parent = pred.prefix if usable and pred is not None else None
        full = parent is None or self._force_full or self._since_full + 1 >= self.full_every_n \
            or 2 * delta_bytes > full_bytes
        if full and len(writer_changes) == len(named) and \
                all(ch is None for ch in writer_changes.values()):
            # Every variable changed as a whole (a dense model): naming the parent would
            # tell a server nothing (it reads every value either way), so this is a plain
            # full checkpoint, written as fast as a plain Saver's (its metadata image).
            parent = None
        if parent is None:  # a plain checkpoint records no digests: computed when needed
            writer_changes = dict.fromkeys(named)
            digests = {k: _Digest(np.shape(arr), np.asarray(arr).dtype, None, None)
                       for k, arr in named.items()}
        else:
            digests = {k: self._digest(np.asarray(named[k]), self._digests.get(k), ch, same)
                       for k, ch in kinds.items()}
        return SavePlan(parent, full, writer_changes, digests, taken,
                        full_bytes if full else delta_bytes)

    @staticmethod
    def _digest(arr: np.ndarray, old: _Digest | None, ch: Any, same: object) -> _Digest:
        """``arr``'s digest: ``old`` when unchanged (``ch`` is ``same``), ``old``'s vector
        updated for the changed rows ``ch``, else computed whole (also when ``old`` was
        left to be computed: the value is the one ``old`` stands for, plus ``ch``)."""
        if old is not None and old.vector is not None:
            if ch is same:
                return old
            if isinstance(ch, np.ndarray):
                vector = ckpt.update_block_digests(arr, old.vector, ch)
                return _Digest(arr.shape, arr.dtype, vector, ckpt.variable_digest(vector))
        vector = ckpt.block_digests(arr)
        return _Digest(arr.shape, arr.dtype, vector, ckpt.variable_digest(vector))

    def saved(self, plan: SavePlan, prefix: str, on_disk: bool) -> None:
        """Commits ``plan``, written at ``prefix`` (absolute); ``on_disk``: written now
        (sync; else queued)."""
        self._digests = plan.digests
        self._pred = _Predecessor(prefix, _identity(prefix) if on_disk else None)
        self._since_full = 0 if plan.full else self._since_full + 1
        self._force_full = False

    def confirmed(self, prefix: str) -> None:
        """An async save of ``prefix`` reached the disk: remember its file's identity."""
        if self._pred is not None and self._pred.prefix == prefix and \
                self._pred.identity is None:
            self._pred = _Predecessor(prefix, _identity(prefix))


def stored_nonfinite(named: Mapping[str, np.ndarray], plan: SavePlan) -> str | None:
    """The first key whose stored part (every value of a full checkpoint; the changed
    rows or value of a delta) holds NaN or Inf, else None."""
    if plan.full:
        return first_nonfinite(named)
    for k, ch in plan.changes.items():
        arr = named[k]
        if first_nonfinite({k: arr if ch is None else arr[ch]}) is not None:
            return k
    return None


def save_incremental(saver: Saver, sess: Any, prefix: str, save_dir: str,
                     latest_filename: str, gs: int | None,
                     metadata: Mapping[str, Any] | None) -> SavedCheckpoint:
    """``Saver.save`` of an incremental Saver (``write_state=True``), sync or async."""
    inc = saver._incremental
    assert inc is not None
    keys, op_names, saveables = saver._names()
    named, changes, taken = inc.read(sess, keys, op_names, saveables)
    absolute = saver._absolute
    target = absolute(prefix)
    try:
        writer = saver._writer
        pending = writer.pending if writer is not None else ()
        plan = inc.plan(target, named, changes, taken, pending)
        if writer is not None:
            return _save_async(saver, prefix, save_dir, latest_filename, named, gs, metadata,
                               plan)
        if saver._require_finite:
            bad = stored_nonfinite(named, plan)
            if bad is not None:
                raise errors.InvalidArgumentError(None, None, (
                    f"Variable {bad} holds NaN or Inf; refusing to save checkpoint {prefix} "
                    f"(Saver(require_finite=True))."))
        ckpt.write_incremental_checkpoint(
            prefix, named, plan.changes, plan.parent, plan.hex_digests(), plan.full,
            global_step=gs, metadata=metadata, sync_directory=False)
        before = saver._retention.copy()
        try:
            evicted, kept = saver._record(prefix, None if plan.full else plan.parent)
            ckpt.update_checkpoint_state(save_dir, prefix, all_model_checkpoint_paths=kept,
                                         latest_filename=latest_filename)
        except BaseException:
            saver._retention = before  # the data file stays, named by no state file
            raise
    except BaseException:
        inc.give_back(taken)
        raise
    inc.saved(plan, target, on_disk=True)
    remove_evicted(evicted)
    return SavedCheckpoint(target, plan.kind, plan.parent, plan.stored_bytes)




def _save_async(saver: Saver, prefix: str, save_dir: str, latest_filename: str,
                named: dict[str, np.ndarray], gs: int | None,
                metadata: Mapping[str, Any] | None, plan: SavePlan) -> SavedCheckpoint:
    """Queues ``plan`` with the Saver's writer process (as ``Saver._save_async``);
    the caller gives this save's changes back if it raises."""
    writer, inc = saver._writer, saver._incremental
    assert writer is not None and inc is not None
    absolute = saver._absolute
    target = absolute(prefix)
    before, inc_before = saver._retention.copy(), inc.snapshot()
    evicted, kept = saver._record(prefix, None if plan.full else plan.parent)
    state = StateUpdate(absolute(save_dir), target, [absolute(p) for p in kept],
                        latest_filename)
    job = IncrementalJob(plan.parent, plan.full, plan.changes, plan.hex_digests())
    writer.failed_prefix, writer.failed_count = None, 0
    try:
        writer.submit(target, named, global_step=gs, metadata=metadata, state=state,
                      delete=[absolute(p) for p in evicted],
                      require_finite=saver._require_finite,
                      rewrites=any(absolute(p) == target for p in before.last_checkpoints),
                      incremental=job)
    except BaseException:
        if writer.failed_prefix is not None:  # an earlier queued save failed
            saver._roll_back()
        else:  # this save was refused before anything was sent
            saver._retention = before
        raise
    saver._rollback.append((target, before, (inc_before, plan.taken)))
    inc.saved(plan, target, on_disk=False)
    saver._trim_rollback()
    return SavedCheckpoint(target, plan.kind, plan.parent, plan.stored_bytes)
