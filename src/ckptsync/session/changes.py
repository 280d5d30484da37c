"""Which variables (and which rows of them) a ``Session``'s runs changed: the
:class:`ChangeTracker` that ``Session.track_changes`` registers.

A run's kernels say how they changed a variable: ``RunContext.write`` (the whole value)
or ``RunContext.write_rows`` (only some rows of dim 0: the scatter ops, the optimizers'
``SparseApply*``, the SGD sparse path). When the run's writes land in the session, each
registered tracker records them: a variable changed as a whole, or the union of the
rows written. ``Session.write_variables`` (restore, ``Variable.load``) records whole
changes. Nothing compares or copies parameters: the cost is O(rows written) per run,
and one check per run when no tracker is registered.

A ckptsync extension (TF1 has no such record); the incremental ``Saver`` reads it with
``Session.read_variables_and_changes``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CkptsyncTypeError, CkptsyncValueError

if TYPE_CHECKING:
    from .plan import RunContext

__all__ = ["ChangeTracker", "Changes", "Trackers", "run_changes"]

#: name -> ``None`` (changed as a whole) or the changed rows (sorted unique int64 ``[k]``).
Changes = dict[str, "np.ndarray | None"]

# Pending row arrays of one variable are merged into one once there are more than this
# many (a tracker nobody takes from holds O(distinct rows), not O(runs)).
_MAX_PENDING = 32


def _unique_rows(parts: list[np.ndarray]) -> np.ndarray:
    """Sorted unique int64 rows ``[k]`` of ``parts`` (integer arrays of any shape), a new
    array. Linear for rows already sorted and unique (a ``SparseApply*``'s indices)."""
    if len(parts) == 1:
        a = np.asarray(parts[0]).reshape(-1).astype(np.int64)  # a copy
    else:
        a = np.concatenate([np.asarray(p).reshape(-1) for p in parts]).astype(
            np.int64, copy=False)
    if a.size > 1 and not (a[1:] > a[:-1]).all():
        a.sort(kind="stable")  # runs of sorted parts: merged, not sorted from scratch
        keep = np.empty(a.size, dtype=bool)
        keep[0] = True
        np.not_equal(a[1:], a[:-1], out=keep[1:])
        a = a[keep]
    return a


def run_changes(ctx: RunContext, names: Iterable[str] | None = None
                ) -> tuple[list[str], dict[str, np.ndarray]]:
    """``(whole, rows)`` of a run's writes (of ``names`` only, if given): the names it
    wrote as a whole, and per name it wrote only rows of, those rows (sorted unique int64
    ``[k]``; a name whose rows are none is left out). New arrays: nothing of the run's
    values is kept."""
    row_writes = ctx.row_writes or {}
    written = ctx.writes if names is None else names
    whole = [n for n in written if n not in row_writes]
    rows: dict[str, np.ndarray] = {}
    for n in written:
        parts = row_writes.get(n)
        if parts is not None:
            r = _unique_rows(parts)
            if r.size:
                rows[n] = r
    return whole, rows


def _compact(parts: list[np.ndarray]) -> None:
    """Merges ``parts`` (``parts[0]`` sorted unique) into at most two sorted unique
    arrays: the tail alone while it is smaller than the head, else all of them (so each
    row is merged O(log) times however long nobody takes)."""
    tail = _unique_rows(parts[1:])
    parts[:] = [_unique_rows([parts[0], tail])] if tail.size >= parts[0].size else [
        parts[0], tail]


class ChangeTracker:
    """The variables, and rows of them, that a session's runs changed since this
    tracker's last take (``Session.read_variables_and_changes``). Made by
    ``Session.track_changes``; records every run committed after that.

    The session holds it weakly: a tracker nobody references is dropped and costs the
    session nothing.

    Thread-safety: recorded by concurrent runs, taken and put back from any thread.
    """

    __slots__ = ("_lock", "_whole", "_rows", "_owner", "__weakref__")

    def __init__(self, owner: Any):
        self._lock = threading.Lock()
        self._whole: set[str] = set()
        self._rows: dict[str, list[np.ndarray]] = {}  # names not in _whole: int64 parts
        self._owner = weakref.ref(owner)

    def owned_by(self, session: Any) -> bool:
        """Whether ``session`` made this tracker."""
        return self._owner() is session

    def record(self, whole: Iterable[str], rows: Mapping[str, np.ndarray]) -> None:
        """Adds changes: ``whole`` names changed as a whole, ``rows`` name -> int64 rows
        ``[k]`` (kept by reference: the caller hands them over)."""
        with self._lock:
            for n in whole:
                self._whole.add(n)
                self._rows.pop(n, None)
            for n, r in rows.items():
                if n in self._whole:
                    continue
                parts = self._rows.get(n)
                if parts is None:
                    self._rows[n] = [r]
                else:
                    parts.append(r)
                    if len(parts) > _MAX_PENDING:
                        _compact(parts)

    def take(self, names: Iterable[str]) -> Changes:
        """The changes of ``names`` since the last take, and forgets them (a name not in
        the result: unchanged). ``Session.read_variables_and_changes`` calls this under
        the session's lock, so the take falls between two runs' commits."""
        whole: list[str] = []
        parts: dict[str, list[np.ndarray]] = {}
        with self._lock:
            if not self._whole and not self._rows:
                return {}
            for n in names:
                if n in self._whole:
                    self._whole.discard(n)
                    whole.append(n)
                else:
                    p = self._rows.pop(n, None)
                    if p is not None:
                        parts[n] = p
        out: Changes = dict.fromkeys(whole)
        for n, p in parts.items():
            r = _unique_rows(p)
            if r.size:
                out[n] = r
        return out

    def put_back(self, changes: Mapping[str, np.ndarray | None]) -> None:
        """Merges ``changes`` (as :meth:`take` gave them: name -> ``None`` for a whole
        change, else int rows ``[k]``) back in, so that the next take reports them again,
        unioned with what changed since. For a save that failed after its take.

        Raises:
            TypeError: a value is neither None nor an integer array (names the variable).
            ValueError: rows are not one-dimensional or negative (names the variable).
        """
        whole: list[str] = []
        rows: dict[str, np.ndarray] = {}
        for n, r in changes.items():
            if r is None:
                whole.append(n)
                continue
            arr = np.asarray(r)
            if arr.dtype.kind not in "iu":
                raise CkptsyncTypeError(
                    f"put_back: changes of {n!r} must be None or integer rows, got "
                    f"dtype {arr.dtype}.")
            if arr.ndim != 1:
                raise CkptsyncValueError(
                    f"put_back: rows of {n!r} must be one-dimensional, got shape "
                    f"{list(arr.shape)}.")
            if arr.size and arr.min() < 0:
                raise CkptsyncValueError(f"put_back: rows of {n!r} must be >= 0, got "
                                         f"{int(arr.min())}.")
            rows[n] = arr.astype(np.int64)  # a copy: the caller's array stays its own
        self.record(whole, rows)

    def __repr__(self) -> str:
        with self._lock:
            return (f"<ChangeTracker: {len(self._whole)} whole, {len(self._rows)} by rows "
                    "pending>")


class Trackers:
    """A session's :class:`ChangeTracker` s, weakly referenced. ``refs`` is empty when
    none is registered (the one check a run makes); it is replaced, never changed, with
    the session's lock held."""

    __slots__ = ("refs",)

    def __init__(self) -> None:
        self.refs: tuple[weakref.ref[ChangeTracker], ...] = ()

    def add(self, owner: Any) -> ChangeTracker:
        """A new tracker of session ``owner`` (the session's lock held)."""
        tracker = ChangeTracker(owner)
        self.refs = tuple(r for r in self.refs if r() is not None) + (weakref.ref(tracker),)
        return tracker

    def record(self, whole: list[str], rows: dict[str, np.ndarray]) -> None:
        """Records a landing in every live tracker (the session's lock held, so a take
        falls before or after it); forgets dropped trackers."""
        live = [t for r in self.refs if (t := r()) is not None]
        if len(live) != len(self.refs):
            self.refs = tuple(weakref.ref(t) for t in live)
        for t in live:
            t.record(whole, rows)

    def land(self, ctx: RunContext, variables: dict[str, np.ndarray] | None,
             lock: AbstractContextManager[Any]) -> None:
        """Lands run ``ctx``'s writes in ``variables`` and records them, under ``lock``
        (the session's). ``variables`` None: the run failed, and only the arrays it
        updated in place (``ctx.in_place``) changed: records those."""
        if variables is None:
            whole, rows = run_changes(ctx, sorted(ctx.in_place or ()))
        else:
            whole, rows = run_changes(ctx)  # outside the lock: O(rows written)
        with lock:
            if variables is not None:
                variables.update(ctx.writes)
            self.record(whole, rows)
