"""Copy-on-write swaps: the next version made from the served one plus what changed.

An incremental checkpoint names its predecessor (``parent`` and its index hash) and
records, per variable, what changed since it (``checkpoint.read_changes``). When that
predecessor is exactly the served version's checkpoint, the load thread builds the new
:class:`~.loader.Snapshot` from the served one instead of reading the whole model:

- an unchanged variable is the same array object in both snapshots;
- a table that only gathers read (``Servable.row_gathered_variables``, 64 KiB or more)
  is a :class:`~ckptsync.blocked_array.BlockedArray`: a row change copies only the
  touched blocks (``checkpoint.block_rows`` rows each) and shares the rest;
- any other changed variable is a new plain array (its changed rows written into a copy).

Each changed variable's block-digest vector is updated (only the touched blocks are
hashed) and every variable's digest compared with the one the checkpoint records after
applying; only the changed values are checked for NaN/Inf. Any mismatch or error refuses
this path and the manager loads the version in full (``load_snapshot``, which composes a
chain), so a mixed model is never served. A server behind by a few versions applies each
one's changes in turn when the chain of parents reaches the served version (at most
:data:`MAX_STEPS`, reading no more than the model's size); otherwise (started late, a
plain full checkpoint between, pinned elsewhere, ``free_before_load``) a full load.

Who calls what (the manager's load thread only)::

    snap = cow.load(target, served)      # copy-on-write, else load_snapshot(...)
    book.swap(rec, snap); cow.served(snap)   # after a full load: digests, off the
                                             # request path (requests already run on it)

Thread-safety: one load thread calls :class:`CopyOnWrite`; the snapshots it makes are
immutable and shared by requests on any thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
import types
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import xxhash

from .. import checkpoint as ckpt
from ..blocked_array import BlockedArray
from ..errors import DataLossError, InvalidArgumentError
from ..workers.read_process import APPLY_MAX_ARENAS, AppliedRows
from ..workers.shared_arrays import shared_array
from .loader import Snapshot, load_snapshot
from .servable import Servable
from .source import AspiredVersion, parse_version

__all__ = ["CopyOnWrite", "apply_changes", "version_digests"]

logger = logging.getLogger("ckptsync.serving.manager")

#: Row-gathered variables at least this big are stored in blocks (smaller: plain).
MIN_BLOCKED_BYTES = 64 * 1024
LOAD_FULL, LOAD_COW = "full", "copy_on_write"
#: Most checkpoints a server behind the trainer applies in one go (else: a full load).
MAX_STEPS = 32


@dataclass
class _Served:
    """What the copy-on-write path knows of the served version (weakly: the book owns
    the snapshot)."""

    snapshot: weakref.ref[Snapshot]
    index_xxh3: str
    digests: dict[str, np.ndarray]  # name -> uint64 [n_blocks]


def block_tables(params: Mapping[str, Any], names: frozenset[str],
                 handles: Mapping[str, tuple[np.ndarray, Any]] | None = None,
                 new_arena: Any = None) -> dict[str, Any]:
    """``params`` with each of ``names`` that is an ndarray of >= 64 KiB and rank >= 1
    stored in blocks (no copy where its memory is writable); ``handles``: name -> (the
    array read, its shared file and offset) for the pools' arena 0, ``new_arena`` as
    ``BlockPool``'s (both for the read process to apply deltas into)."""
    out = dict(params)
    for name in names:
        arr = out.get(name)
        if type(arr) is np.ndarray and arr.ndim >= 1 and arr.nbytes >= MIN_BLOCKED_BYTES:
            read, handle = (handles or {}).get(name, (None, None))
            shared = read is arr and handle is not None
            out[name] = BlockedArray.adopt(
                arr, ckpt.block_rows(arr.shape, arr.dtype.itemsize),
                handle=handle if shared else None, new_arena=new_arena if shared else None)
    return out


def _le(arr: np.ndarray) -> np.ndarray:
    """``arr``'s values in little-endian byte order (the format's; a view if already)."""
    return arr if arr.dtype.byteorder != ">" else arr.astype(arr.dtype.newbyteorder("<"))


def _table_digests(table: BlockedArray) -> np.ndarray:
    """The block digests of a blocked table (as ``block_digests`` of its value)."""
    slots = table.slots
    arena = table.pool.arenas[0]
    if len(table.pool.arenas) == 1 and np.array_equal(slots, np.arange(slots.size)):
        return ckpt.block_digests(arena[: table.shape[0]])  # a fresh full load: in order
    return _updated(np.zeros(slots.size, np.uint64), table, np.arange(slots.size))


def version_digests(params: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """name -> block-digest vector (uint64 ``[n_blocks]``) of every value of ``params``."""
    return {name: _table_digests(v) if isinstance(v, BlockedArray) else ckpt.block_digests(v)
            for name, v in params.items()}


def _entry(changes: Any, name: str) -> Any:
    variables = getattr(changes, "variables", None)
    return variables[name] if variables is not None else changes[name]


_NONFINITE = "{}: variable '{}' holds NaN/Inf in its changed values; refusing to serve it"


def _check_finite(path: str, name: str, values: np.ndarray, allow_nonfinite: bool) -> None:
    if allow_nonfinite or values.dtype.kind not in "fc" or not values.size:
        return
    with np.errstate(over="ignore", invalid="ignore"):  # a finite sum: all finite
        bad = not np.isfinite(np.add.reduce(values, axis=None)) and \
            not np.isfinite(values).all()
    if bad:
        raise InvalidArgumentError(None, None, _NONFINITE.format(path, name))


def apply_changes(served: Snapshot, digests: Mapping[str, np.ndarray], changes: Any,
                  servable: Servable, prefix: str, version: int,
                  allow_nonfinite: bool = False,
                  applied: Mapping[str, tuple[AppliedRows, np.ndarray]] | None = None,
                  ) -> tuple[Snapshot, dict[str, np.ndarray], int]:
    """The snapshot of checkpoint ``prefix`` made from ``served`` (its predecessor) plus
    ``changes`` (a ``checkpoint.read_changes`` result), verified.

    Args:
        served: the snapshot of the predecessor checkpoint.
        digests: name -> uint64 ``[n_blocks]`` block digests of ``served``'s values.
        changes: per variable an entry with ``kind`` ('same'|'rows'|'full'), ``rows``
            (int64 ``[k]`` or None), ``values`` (``[k, *shape[1:]]`` or the value),
            ``digest`` (hex, after applying), ``shape``, ``dtype``.
        servable: says which variables there must be.
        prefix, version: of the new checkpoint.
        allow_nonfinite: accept NaN/Inf in the changed values.
        applied: name -> (the read process's :class:`AppliedRows`, the free blocks it
            wrote them to): tables whose row changes are already in their pool.

    Returns:
        ``(snapshot, its digests, bytes of values read)``. Nothing is shared mutably: the
        served snapshot is unchanged.

    Raises:
        DataLossError: a variable's digest after applying is not the recorded one, or an
            entry disagrees with the served variable's shape or dtype.
        InvalidArgumentError: a changed value holds NaN/Inf.
        KeyError: a variable of the model has no entry.
    """
    start = time.perf_counter()
    path = prefix + ".h5"
    params: dict[str, Any] = {}
    new_digests: dict[str, np.ndarray] = {}
    read_bytes = 0
    for name in servable.variable_specs:
        entry = _entry(changes, name)
        old = served.params[name]
        if tuple(entry.shape) != tuple(old.shape) or np.dtype(entry.dtype) != old.dtype:
            raise DataLossError(None, None, f"{path}: variable '{name}' is {entry.dtype} "
                                f"{list(entry.shape)} but the served one {old.dtype} "
                                f"{list(old.shape)}")
        vec = digests[name]
        kind = entry.kind
        done = (applied or {}).get(name)
        if done is not None and isinstance(old, BlockedArray):
            rows_done, free = done
            if not (rows_done.finite or allow_nonfinite):
                raise InvalidArgumentError(None, None, _NONFINITE.format(path, name))
            blocks = np.asarray(rows_done.blocks, np.int64)
            new = old.with_blocks(blocks, free[:blocks.size])
            vec = vec.copy()
            vec[blocks] = rows_done.digests
            read_bytes += rows_done.bytes_read
        elif kind == "rows" and entry.rows is not None and len(entry.rows):
            rows = np.asarray(entry.rows, np.int64)
            values = np.asarray(entry.values)
            read_bytes += rows.nbytes + values.nbytes
            _check_finite(path, name, values, allow_nonfinite)
            if isinstance(old, BlockedArray):
                new, blocks = old.with_rows(rows, values)
                vec = _updated(vec, new, blocks)
            else:
                new = np.array(old, order="C")
                new[rows] = values
                new.setflags(write=False)
                vec = ckpt.update_block_digests(new, vec, rows)
        elif kind == "full" or (kind == "rows" and entry.rows is None):
            value = np.asarray(entry.values)
            read_bytes += value.nbytes
            _check_finite(path, name, value, allow_nonfinite)
            new = np.array(value, order="C", copy=not value.flags.c_contiguous)
            vec = ckpt.block_digests(new)
            if isinstance(old, BlockedArray) and old.pool.handles[0] is not None:
                arr, handle = shared_array(new.shape, new.dtype)  # the read process's too
                arr[...] = new
                new = BlockedArray.adopt(arr, old.block_rows, handle=handle,
                                         new_arena=shared_array)
            elif isinstance(old, BlockedArray):
                new = BlockedArray.adopt(new, old.block_rows)
            else:
                new.setflags(write=False)
        elif kind in ("same", "rows"):  # 'rows' with no row changed
            new = old
        else:
            raise DataLossError(None, None, f"{path}: variable '{name}' has kind {kind!r}; "
                                "expected 'same', 'rows' or 'full'")
        if ckpt.variable_digest(vec) != entry.digest:
            raise DataLossError(None, None, f"{path}: variable '{name}' after applying the "
                                f"changes to version {served.version} has block digest "
                                f"{ckpt.variable_digest(vec)}, the checkpoint records "
                                f"{entry.digest}")
        params[name] = new
        new_digests[name] = vec
    try:
        created_unix_s = os.stat(path).st_mtime
    except OSError:
        created_unix_s = 0.0
    snap = Snapshot(version=version, prefix=prefix, params=types.MappingProxyType(params),
                    loaded_unix_s=time.time(), load_duration_s=time.perf_counter() - start,
                    created_unix_s=created_unix_s, load_kind=LOAD_COW, bytes_read=read_bytes)
    return snap, new_digests, read_bytes


def _updated(vec: np.ndarray, table: BlockedArray, blocks: np.ndarray) -> np.ndarray:
    """``vec`` with the digests of ``blocks`` replaced by those of ``table``'s."""
    out = vec.copy()
    h = xxhash.xxh3_64_intdigest
    if table.dtype.byteorder == ">":  # hash the format's little-endian bytes
        got = [h(_le(table.block_view(j)).data) for j in blocks.tolist()]
        out[blocks] = np.array(got, dtype=np.uint64)
    else:
        out[blocks] = ckpt.hash_blocks(table.block_bytes(blocks))
    return out


class CopyOnWrite:
    """The manager's copy-on-write path: keeps the served version's block digests and
    index hash, and makes the next snapshot from it when a checkpoint's parent is it.

    Args:
        servable: the model.
        allow_nonfinite: as the manager's option.
        read: ``read(prefix, names) -> arrays`` for a full load (None: in process).
        read_changes: ``read_changes(prefix, names, only_after=None) -> (changes,
            index_xxh3)``: the checkpoint's ``checkpoint.read_changes(prefix, names,
            verify=True, only_after=...)`` and its own index hash (None: both read in
            this process).
        index_xxh3: ``index_xxh3(prefix) -> str`` of a checkpoint (None: its
            ``CheckpointReader.index_xxh3`` in this process).
        load: the full load, as :func:`~.loader.load_snapshot` (the default).

    Thread-safety: the load thread only.
    """

    def __init__(self, servable: Servable, allow_nonfinite: bool = False,
                 read: Callable[[str, list[str]], Mapping[str, np.ndarray]] | None = None,
                 read_changes: Callable[..., tuple[Any, str]] | None = None,
                 index_xxh3: Callable[[str], str] | None = None,
                 load: Callable[..., Snapshot] = load_snapshot):
        self.servable = servable
        self.allow_nonfinite = allow_nonfinite
        self.read = read
        self.read_changes = read_changes or _read_changes_here
        self.index_xxh3 = index_xxh3 or _index_xxh3_here
        self._load = load
        self._reader: Any = None  # a CheckpointReadProcess: deltas applied in it
        self._read_handles: dict[str, tuple[np.ndarray, Any]] = {}  # of the last full read
        self._served: _Served | None = None
        # The last snapshot made: (it, its index hash, its digests or None after a full load).
        self._made: tuple[weakref.ref[Snapshot], str, dict[str, np.ndarray] | None] | None = None

    def use_reader(self, reader: Any, apply: bool = True) -> None:
        """Reads go through ``reader`` (a ``CheckpointReadProcess``, or None: in this
        process), so that a stuck read stalls no request either; ``apply``: the reader
        also applies the row changes of the blocked tables, in their shared arenas
        (copying blocks and hashing them never hold this process's interpreter lock:
        ``ManagerOptions.apply_in_subprocess``); False applies them on the load thread,
        the reference path."""
        self._reader = reader if apply else None
        if reader is None:
            self.read = None
            return
        self.read = partial(_read_split, reader, self.servable.row_gathered_variables,
                            self._read_handles)
        self.read_changes = partial(reader.read_changes, writable=True)
        self.index_xxh3 = lambda prefix: reader.read_changes(prefix, [])[1]

    def load(self, target: AspiredVersion, served: Snapshot | None) -> Snapshot:
        """The snapshot of ``target``: copy-on-write from ``served`` when ``target``'s
        parent is exactly it, else a full load (raising as :func:`load_snapshot`)."""
        snap = self._try_apply(target, served)
        if snap is not None:
            return snap
        try:
            snap = self._load(target.prefix, self.servable, self.allow_nonfinite,
                              version=target.version, read=self.read)
        finally:  # (a refused load must not keep the block it read)
            handles = dict(self._read_handles)  # the read just made, if through the reader
            self._read_handles.clear()
        names = self.servable.row_gathered_variables
        if names:
            snap = dataclasses.replace(snap, params=types.MappingProxyType(block_tables(
                snap.params, names, handles, shared_array if handles else None)))
        try:  # read now, not after the swap: the reader is idle once a version is served
            index = self.index_xxh3(snap.prefix)
        except Exception as e:  # a vanished file, a damaged index: the next load is full
            logger.info("no copy-on-write swaps onto version %d (%s)", snap.version, e)
            index = None
        if index not in (None, "None"):  # (TF's checkpoints have no index hash)
            self._made = (weakref.ref(snap), str(index), None)
        return snap

    def served(self, snap: Snapshot | None) -> None:
        """After a load (swapped or not): ``snap`` is the one served now. If :meth:`load`
        made it, remember its digests (computed here after a full load, off the request
        path) and its checkpoint's index hash; without them the next version is loaded
        in full. Never raises."""
        made, self._made = self._made, None
        state = self._served
        if state is not None and snap is not None and state.snapshot() is snap:
            return  # still the one we know (the load failed or was refused)
        self._served = None
        if snap is None or made is None or made[0]() is not snap:
            return
        try:
            digests = made[2]
            if digests is None:  # a full load: hash it now (CPU only; requests run on it)
                digests = version_digests(snap.params)
        except Exception as e:  # e.g. MemoryError: no copy-on-write onto this version
            logger.warning("no copy-on-write swaps onto version %d (%s)", snap.version, e)
            return
        self._served = _Served(made[0], made[1], digests)

    def _try_apply(self, target: AspiredVersion, served: Snapshot | None) -> Snapshot | None:
        state = self._served
        if served is None or state is None or state.snapshot() is not served:
            return None
        names = list(self.servable.variable_specs)
        start = time.perf_counter()
        try:
            # One read (and, through the read process, the row changes applied) when the
            # checkpoint names the served one; else only its links, then the versions
            # between, if its chain reaches back to the served one (else a full load).
            steps, at = [target.prefix], 0
            snap, digests, index, total = served, state.digests, state.index_xxh3, 0
            while at < len(steps):  # one step's changes in memory at a time
                prefix = steps[at]
                with contextlib.ExitStack() as held:
                    changes, own, applied = self._read_step(prefix, names, snap, index, held)
                    if not _links(changes, snap.prefix, index):
                        between = None if len(steps) > 1 else \
                            self._between(changes, served.prefix, state.index_xxh3)
                        if between is None:
                            return None  # not a chain to the served one, or replaced
                        steps = between + steps
                        continue
                    version = target.version if prefix == target.prefix else \
                        parse_version(prefix) or 0
                    snap, digests, nbytes = apply_changes(
                        snap, digests, changes, self.servable, prefix, version,
                        self.allow_nonfinite, applied)
                index, total, at = own, total + nbytes, at + 1
                del changes, applied
                if total > served.nbytes and prefix != target.prefix:
                    return None  # a full load reads less
        except Exception as e:
            logger.warning("copy-on-write apply of version %d onto version %d refused (%s); "
                           "loading it in full", target.version, served.version, e)
            return None
        snap = dataclasses.replace(snap, bytes_read=total,
                                   load_duration_s=time.perf_counter() - start)
        self._made = (weakref.ref(snap), own, digests)
        return snap

    def _read_step(self, prefix: str, names: list[str], snap: Snapshot, index: str,
                   held: contextlib.ExitStack) -> tuple[Any, str, dict[str, Any]]:
        """Checkpoint ``prefix``'s changes against ``snap`` (whose checkpoint's index hash
        is ``index``): ``(changes, its index hash, applied)``. With a read process and
        tables in shared arenas, the read process also writes their row changes into
        free blocks (``applied``: name -> (AppliedRows, those free blocks)), and their
        pools' locks are taken (``held``) until the caller made the next version."""
        only_after = (os.path.basename(snap.prefix), index)
        tables = _shared_tables(snap) if self._reader is not None else {}
        if not tables:
            changes, own = self.read_changes(prefix, names, only_after=only_after)
            return changes, own, {}
        for table in tables.values():
            held.enter_context(table.pool.lock)
        need: dict[str, int] = {}
        for _ in range(2):  # a pool short of free blocks grows, once
            free = {n: t.pool.free_blocks(need.get(n, 0)) for n, t in tables.items()}
            if sum(len(t.pool.arenas) for t in tables.values()) > APPLY_MAX_ARENAS:
                held.close()  # grown past what one request carries: apply here
                changes, own = self.read_changes(prefix, names, only_after=only_after)
                return changes, own, {}
            got = self._reader.apply_changes(prefix, names, only_after,
                                             {n: (t, free[n]) for n, t in tables.items()})
            if not got.short:
                return got.changes, got.index_xxh3, {
                    n: (rows, free[n]) for n, rows in got.applied.items()}
            need = got.short
        raise DataLossError(None, None, f"{prefix}.h5: the read process still found too few "
                            f"free blocks ({need}) after the pools grew")

    def _between(self, changes: Any, served_prefix: str, served_index: str
                 ) -> list[str] | None:
        """The prefixes from the served version's successor up to ``changes``' parent,
        oldest first, when following parents from ``changes`` reaches the served version
        within :data:`MAX_STEPS` checkpoints; else None."""
        found: list[str] = []
        while len(found) < MAX_STEPS:
            parent = getattr(changes, "parent", None)
            if parent is None:
                return None
            found.append(parent)
            changes, _ = self.read_changes(parent, [])  # its links only
            if _links(changes, served_prefix, served_index):
                return found[::-1]
        return None


def _links(changes: Any, prefix: str, index_xxh3: str) -> bool:
    """True when ``changes`` names ``prefix`` (with that index hash) as its predecessor."""
    parent = getattr(changes, "parent", None)
    return parent is not None and _file_name(parent) == _file_name(prefix) \
        and changes.parent_index_xxh3 == index_xxh3


def _file_name(prefix: str) -> str:
    """A checkpoint's name as read_changes' ``only_after`` compares it."""
    return os.path.basename(prefix).removesuffix(".h5")


def _shared_tables(snap: Snapshot) -> dict[str, BlockedArray]:
    """The blocked tables of ``snap`` when every one lies in shared arenas (in the
    format's little-endian byte order, and no more arenas than one request carries),
    else {} (applied in this process)."""
    out: dict[str, BlockedArray] = {}
    for name, value in snap.params.items():
        if isinstance(value, BlockedArray):
            if value.dtype.byteorder == ">" or any(h is None for h in value.pool.handles):
                return {}
            out[name] = value
    if sum(len(t.pool.arenas) for t in out.values()) > APPLY_MAX_ARENAS:
        return {}
    return out


def _read_split(reader: Any, tables: frozenset[str], handles: dict[str, Any], prefix: str,
                names: list[str]) -> dict[str, np.ndarray]:
    """A full read in two shared blocks: the gathered-only tables mapped writable (their
    blocks are reused in place for later versions, so that block stays mapped while
    they are served; ``handles`` gets name -> (array, (its file, offset)) so that the
    read process can apply deltas there) and the other variables read-only (freed once
    replaced)."""
    mine = [n for n in names if n in tables]
    if not mine:
        return dict(reader.read(prefix, names))
    rest = [n for n in names if n not in tables]
    arrays, files = reader.read_shared(prefix, mine)
    handles.clear()
    handles.update({n: (arrays[n], files[n]) for n in files})
    return {**arrays, **(reader.read(prefix, rest) if rest else {})}


def _read_changes_here(prefix: str, names: list[str],
                       only_after: tuple[str, str] | None = None) -> tuple[Any, str]:
    changes = ckpt.read_changes(prefix, names=names, verify=True, only_after=only_after)
    return changes, str(changes.index_xxh3)


def _index_xxh3_here(prefix: str) -> str:
    with ckpt.CheckpointReader(prefix) as reader:
        return str(reader.index_xxh3)
