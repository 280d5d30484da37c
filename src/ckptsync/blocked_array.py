"""A row-blocked, immutable ``[rows, ...]`` array whose versions share untouched blocks.

The server keeps a big table that only gathers read (an embedding) as a
:class:`BlockedArray`: its rows lie in blocks of ``block_rows`` consecutive rows of dim 0
(the checkpoint format's block, ``checkpoint.block_rows``), and a slot map says where each
block lies in its :class:`BlockPool`, one pool of fixed-size physical blocks shared by every
version made from one another::

    logical row i  ->  block i // B  ->  slot[i // B] (a physical block)  ->  row
                       phys = slot[i // B] * B + i % B   (within the pool's arenas)

A version is immutable once made. :meth:`BlockedArray.with_rows` makes the next version
from it plus changed rows: it copies only the touched blocks into free physical blocks
(blocks that no live version maps), writes the changed rows there, and shares every other
block with its predecessor. A version's blocks become free when it is garbage (no request
holds it), so a server that swaps versions forever reuses the same blocks: the pool grows
only when the versions alive at once need more than it has.

A pool's arenas may lie in shared memory (``new_arena``, ``handles``): the server's read
process then writes a delta's blocks itself (:meth:`BlockedArray.with_rows` with
``fresh`` over :meth:`BlockPool.over`), and the server only makes the version that maps
them (:meth:`BlockedArray.with_blocks`).

Readers: ``GatherV2`` (axis 0) and ``ResourceGather`` call :meth:`BlockedArray.gather`;
any other consumer gets a plain ndarray (:meth:`BlockedArray.to_ndarray`, a copy of the
whole table: correct, slow; ``RunContext.read`` does that for a kernel that reads the
variable's value).

Thread-safety: reads (:meth:`gather`, :meth:`to_ndarray`, :meth:`block_view`) take no
lock and may run on any number of threads while another thread makes a new version;
:meth:`with_rows` takes the pool's lock (one new version at a time per pool).
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .errors import CkptsyncValueError

__all__ = ["BlockPool", "BlockedArray"]

_BLOCK_BYTES = 4096  # as checkpoint.digests.BLOCK_BYTES
_CHUNK_BLOCKS = 256  # blocks copied at a time by with_rows (~1 MiB: in cache)


def default_block_rows(shape: tuple[int, ...], itemsize: int) -> int:
    """``max(1, 4096 // row_nbytes)``: the checkpoint format's rows per block."""
    row_nbytes = math.prod(shape[1:]) * itemsize
    return max(1, _BLOCK_BYTES // max(1, row_nbytes))


class BlockPool:
    """The physical blocks of one table, shared by its versions.

    Storage is a tuple of *arenas*, each ``[capacity_k * block_rows, *row_shape]``
    (arena 0 may be the array a full load read, of exactly ``rows`` rows); physical block
    ``p`` lies in the arena whose range of block numbers holds it. Arenas are added, never
    removed or moved, so a version keeps reading the arenas it was made with.

    Args:
        base: arena 0, ``[rows, *row_shape]``, C-contiguous and writable.
        block_rows: B.
        handle: what :attr:`handles` records for ``base`` (e.g. its shared-memory file).
        new_arena: ``new_arena(shape, dtype) -> (array, handle)`` makes each added arena
            (default: ``np.empty``, handle None), e.g. in shared memory that another
            process can write (serving's reader process applies deltas there).

    Attributes:
        block_rows: rows per block (B). rows: rows of the table. dtype, row_shape: of a row.
        arenas, handles, starts: each arena, its handle and its first physical block.

    Thread-safety: :meth:`BlockedArray.with_rows` holds :attr:`lock` while it takes
    blocks; the attributes a reader uses are replaced (new tuples), never mutated.
    """

    def __init__(self, base: np.ndarray, block_rows: int, handle: Any = None,
                 new_arena: Callable[[tuple[int, ...], np.dtype], tuple[np.ndarray, Any]]
                 | None = None):
        self.block_rows = block_rows
        self.rows = int(base.shape[0])
        self.dtype = base.dtype
        self.row_shape: tuple[int, ...] = tuple(base.shape[1:])
        self.n_blocks = -(-self.rows // block_rows)
        self.arenas: tuple[np.ndarray, ...] = (base,)
        self.handles: tuple[Any, ...] = (handle,)
        self._new_arena = new_arena or _private_arena
        # Each arena's whole blocks as [blocks, B, *row_shape] (arena 0's short last block,
        # if any, is reached through ``arenas`` only).
        full = self.rows // block_rows
        self.block_arenas: tuple[np.ndarray, ...] = (
            base[: full * block_rows].reshape(full, block_rows, *self.row_shape),)
        self.starts: np.ndarray = np.zeros(1, np.int64)  # first block number of each arena
        self.capacity_blocks = self.n_blocks
        # Arena 0's short last block can hold only the table's own last block.
        self._reserved = (np.array([self.n_blocks - 1], np.int64)
                          if self.rows % block_rows else np.zeros(0, np.int64))
        self._live: list[weakref.ref[BlockedArray]] = []
        self._lock = threading.Lock()

    @classmethod
    def over(cls, arenas: Sequence[np.ndarray], rows: int, block_rows: int) -> BlockPool:
        """A pool over existing arenas (arena 0 of ``rows`` rows, the others of whole
        blocks), as another process's pool laid them out: for writing blocks into them
        (:meth:`BlockedArray.with_rows` with ``fresh``)."""
        pool = cls(arenas[0][:rows], block_rows)
        for arena in arenas[1:]:
            pool._add(arena, None)
        return pool

    @property
    def lock(self) -> threading.Lock:
        """Held while a version is made: hold it from :meth:`free_blocks` until the
        version that uses them exists (:meth:`BlockedArray.with_blocks`)."""
        return self._lock

    @property
    def nbytes(self) -> int:
        """Bytes of every arena (the pool's memory)."""
        return sum(a.nbytes for a in self.arenas)

    @property
    def live_versions(self) -> int:
        """Versions of this table still alive (held by a snapshot or a request)."""
        return sum(1 for r in self._live if r() is not None)

    def free_blocks(self, at_least: int = 0) -> np.ndarray:
        """Every physical block that no live version maps (sorted int64), the pool grown
        first where fewer than ``at_least`` are free (by what is missing and 1/64 more:
        few arenas, little slack). Hold :attr:`lock`."""
        live = [v for v in (r() for r in self._live) if v is not None]
        self._live = [weakref.ref(v) for v in live]
        used = np.zeros(self.capacity_blocks, bool)
        used[self._reserved] = True
        for v in live:
            used[v._slots] = True
        free = np.flatnonzero(~used)
        if free.size < at_least:
            grow = max(at_least - free.size + -(-self.capacity_blocks // 64), 8)
            start = self.capacity_blocks
            self._add(*self._new_arena((grow * self.block_rows, *self.row_shape), self.dtype))
            free = np.concatenate([free, np.arange(start, start + grow, dtype=np.int64)])
        return free

    def _add(self, arena: np.ndarray, handle: Any) -> None:
        """Adds ``arena`` (whole blocks) after the last one."""
        blocks = arena.shape[0] // self.block_rows
        self.arenas = (*self.arenas, arena)
        self.handles = (*self.handles, handle)
        self.block_arenas = (*self.block_arenas,
                             arena.reshape(blocks, self.block_rows, *self.row_shape))
        self.starts = np.append(self.starts, self.capacity_blocks)
        self.capacity_blocks += blocks

    def _register(self, version: BlockedArray) -> None:
        self._live.append(weakref.ref(version))

    def _where(self, phys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(arena, block within it) of physical blocks ``phys``."""
        which = np.searchsorted(self.starts, phys, side="right") - 1
        return which, phys - self.starts[which]

    def _copy_blocks(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Physical blocks ``src`` copied onto ``dst`` (none of them arena 0's short last
        block; a ``src`` that is gets its rows copied). Holds the lock."""
        b, views = self.block_rows, self.block_arenas
        s_arena, s_at = self._where(src)
        d_arena, d_at = self._where(dst)
        tail = self._reserved[0] if self._reserved.size else -1
        regular = src != tail
        if len(views) == 1:
            views[0][d_at[regular]] = views[0][s_at[regular]]
        else:
            for a in np.unique(s_arena[regular]).tolist():
                for d in np.unique(d_arena[regular & (s_arena == a)]).tolist():
                    k = regular & (s_arena == a) & (d_arena == d)
                    views[d][d_at[k]] = views[a][s_at[k]]
        for k in np.flatnonzero(~regular).tolist():
            views[d_arena[k]][d_at[k], : self.rows % b] = self.arenas[0][tail * b:]

    def _write_rows(self, phys: np.ndarray, offsets: np.ndarray, values: np.ndarray) -> None:
        """``values[i]`` written to row ``offsets[i]`` of physical block ``phys[i]``
        (never arena 0's short last block). Holds the lock."""
        which, at = self._where(phys)
        local = at * self.block_rows + offsets
        if len(self.arenas) == 1:
            self.arenas[0][local] = values
            return
        for a in np.unique(which).tolist():
            k = which == a
            self.arenas[a][local[k]] = values[k]


class BlockedArray:
    """One immutable version of a ``[rows, *row_shape]`` table stored in blocks.

    Make the first version with :meth:`adopt` (from a full load), the next ones with
    :meth:`with_rows`. Indexing reads go through :meth:`gather`.

    Attributes:
        shape, dtype, ndim, size, nbytes: as the ndarray it stands for (``nbytes`` is
            logical, not the pool's memory).
        block_rows: rows per block. pool: the :class:`BlockPool` it shares.

    Example:
        >>> import numpy as np
        >>> v1 = BlockedArray.adopt(np.zeros((100, 4), np.float32), block_rows=8)
        >>> v2, touched = v1.with_rows([3, 50], np.ones((2, 4), np.float32))
        >>> touched.tolist(), float(v2.gather(np.array([3, 4])).sum()), float(np.asarray(v1).sum())
        ([0, 6], 4.0, 0.0)
        >>> bool(np.shares_memory(v1.block_view(1), v2.block_view(1)))  # untouched: shared
        True
    """

    __slots__ = ("shape", "dtype", "block_rows", "pool", "_slots", "_arenas", "_starts",
                 "__weakref__")

    def __init__(self, pool: BlockPool, slots: np.ndarray):
        self.pool = pool
        self.block_rows = pool.block_rows
        self.shape: tuple[int, ...] = (pool.rows, *pool.row_shape)
        self.dtype: np.dtype = pool.dtype
        slots.setflags(write=False)
        self._slots = slots
        self._arenas = pool.arenas
        self._starts = pool.starts
        pool._register(self)

    @classmethod
    def adopt(cls, arr: np.ndarray, block_rows: int | None = None, *, handle: Any = None,
              new_arena: Callable[[tuple[int, ...], np.dtype], tuple[np.ndarray, Any]]
              | None = None) -> BlockedArray:
        """The first version of a table: ``arr``'s memory becomes the pool's arena 0 (no
        copy when ``arr`` is C-contiguous and its memory writable, e.g. a full load's
        read; else one copy). Do not write into ``arr`` afterwards.

        Args:
            arr: ``[rows, ...]``, rank >= 1.
            block_rows: rows per block; default the checkpoint format's
                (``max(1, 4096 // row_nbytes)``).
            handle, new_arena: as :class:`BlockPool`'s.

        Raises:
            CkptsyncValueError: ``arr`` is 0-d or ``block_rows`` < 1.
        """
        arr = np.asarray(arr)
        if arr.ndim == 0:
            raise CkptsyncValueError("BlockedArray: a 0-d value has no rows to block; "
                                     "expected an array of rank >= 1.")
        b = default_block_rows(arr.shape, arr.dtype.itemsize) if block_rows is None \
            else int(block_rows)
        if b < 1:
            raise CkptsyncValueError(f"BlockedArray: block_rows must be >= 1, got {b}.")
        base = _writable(arr)
        same = base.ctypes.data == arr.ctypes.data  # arr's memory (made writable), not a copy
        pool = BlockPool(base, b, handle if same else None, new_arena)
        return cls(pool, np.arange(pool.n_blocks, dtype=np.int64))

    # -- ndarray-like ------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def slots(self) -> np.ndarray:
        """int64 ``[n_blocks]``, read-only: the physical block of each logical block."""
        return self._slots

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return (f"BlockedArray(shape={self.shape}, dtype={self.dtype.name}, "
                f"block_rows={self.block_rows})")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.to_ndarray()
        return out if dtype is None else out.astype(dtype, copy=False)

    # -- reads ---------------------------------------------------------------------------
    def gather(self, indices: Any) -> np.ndarray:
        """Rows at ``indices``, as ``ndarray[indices]`` (a new array).

        Args:
            indices: integer array ``[*i]``, each in ``[0, rows)`` (negative ids are
                refused, as TF's CPU gather).

        Returns:
            ``[*i, *row_shape]`` of the table's dtype.

        Raises:
            IndexError: an index out of range (names the first, as ``check_indices``).
            TypeError: ``indices`` are not integers.
        """
        idx = np.asarray(indices)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"BlockedArray.gather: indices must be integers, got "
                            f"{idx.dtype.name}")
        flat = idx.reshape(-1)
        n = self.shape[0]
        if flat.size and (flat.min() < 0 or flat.max() >= n):
            k = int(np.flatnonzero((flat < 0) | (flat >= n))[0])
            raise IndexError(f"indices[{k}] = {int(flat[k])} is not in [0, {n})")
        return self._rows(flat.astype(np.int64, copy=False)).reshape(
            idx.shape + self.shape[1:])

    def _rows(self, flat: np.ndarray) -> np.ndarray:
        """Rows ``flat`` (int64, in range) as ``[k, *row_shape]``."""
        b = self.block_rows
        blk = flat // b
        off = flat - blk * b
        phys = self._slots[blk]
        arenas = self._arenas
        if len(arenas) == 1:
            return arenas[0][phys * b + off]
        local = phys * b + off  # the row within its arena, once its start is taken off
        which = np.searchsorted(self._starts, phys, side="right") - 1
        local -= self._starts[which] * b
        out = np.empty((flat.size, *self.shape[1:]), self.dtype)
        for a, arena in enumerate(arenas):
            at = np.flatnonzero(which == a)
            if at.size == flat.size:
                return arena[local]
            if at.size:
                out[at] = arena[local[at]]
        return out

    def to_ndarray(self) -> np.ndarray:
        """The whole table as a new C-contiguous ndarray ``[rows, *row_shape]``."""
        return self._rows(np.arange(self.shape[0], dtype=np.int64))

    def block_view(self, block: int) -> np.ndarray:
        """Logical block ``block``'s rows, a read-only view ``[<= B, *row_shape]`` of the
        pool (valid while this version lives)."""
        b, n = self.block_rows, self.shape[0]
        if not 0 <= block < self._slots.size:
            raise IndexError(f"block {block} is not in [0, {self._slots.size})")
        p = int(self._slots[block])
        a = int(np.searchsorted(self._starts, p, side="right") - 1)
        first = (p - int(self._starts[a])) * b
        view = self._arenas[a][first:first + min(b, n - block * b)]
        view = view.view()
        view.setflags(write=False)
        return view

    # -- the next version ----------------------------------------------------------------
    def with_rows(self, rows: Any, values: Any, fresh: np.ndarray | None = None
                  ) -> tuple[BlockedArray, np.ndarray]:
        """The next version: this one with rows ``rows`` set to ``values``; every block
        no row falls in is shared with this version, each touched block is copied once
        (straight into its new place, a few hundred blocks at a time: no second copy of
        the touched blocks is ever held).

        Args:
            rows: int64 ``[k]`` indices of dim 0, unique (sorted or not).
            values: ``[k, *row_shape]`` of the table's dtype (cast if needed).
            fresh: physical blocks to copy the touched blocks into, the first ones in
                order (each one that no live version maps: the caller's word, as
                :meth:`BlockPool.free_blocks` gave them); default: the pool's.

        Returns:
            ``(new version, the touched blocks: sorted int64 [t])``.

        Raises:
            CkptsyncValueError: a row out of range, ``values`` of the wrong shape, or
                fewer ``fresh`` blocks than touched ones.
        """
        r = np.asarray(rows, dtype=np.int64).reshape(-1)
        vals = np.asarray(values, dtype=self.dtype)
        n, b = self.shape[0], self.block_rows
        if vals.shape != (r.size, *self.shape[1:]):
            raise CkptsyncValueError(
                f"BlockedArray.with_rows: values have shape {list(vals.shape)}; expected "
                f"{[r.size, *self.shape[1:]]} for {r.size} rows of a table {list(self.shape)}.")
        if r.size and (r.min() < 0 or r.max() >= n):
            raise CkptsyncValueError(
                f"BlockedArray.with_rows: rows must lie in [0, {n}); got rows from "
                f"{int(r.min())} to {int(r.max())}.")
        blk = r // b
        if r.size > 1 and not bool(np.all(r[1:] > r[:-1])):  # read_changes' rows are sorted
            order = np.argsort(r, kind="stable")
            r, blk, vals = r[order], blk[order], vals[order]
        first = np.ones(blk.size, bool)
        first[1:] = blk[1:] != blk[:-1]
        blocks = blk[first]
        of_row = np.cumsum(first) - 1  # each row's index into ``blocks``
        pool = self.pool
        if fresh is not None and fresh.size < blocks.size:
            raise CkptsyncValueError(f"BlockedArray.with_rows: {blocks.size} blocks are "
                                     f"touched but only {fresh.size} fresh ones given.")
        with pool._lock:
            fresh = (pool.free_blocks(blocks.size) if fresh is None else fresh)[:blocks.size]
            slots = self._slots.copy()
            slots[blocks] = fresh
            new = BlockedArray(pool, slots)  # not visible to anyone until returned
            for c0 in range(0, blocks.size, _CHUNK_BLOCKS):  # cache-sized temporaries
                pool._copy_blocks(self._slots[blocks[c0:c0 + _CHUNK_BLOCKS]],
                                  fresh[c0:c0 + _CHUNK_BLOCKS])
            pool._write_rows(fresh[of_row], r - blk * b, vals)  # into the copies
        return new, blocks

    def with_blocks(self, blocks: np.ndarray, phys: np.ndarray) -> BlockedArray:
        """The next version: this one with logical ``blocks`` (int64 ``[t]``) at physical
        blocks ``phys`` (``[t]``, which the caller filled, e.g. another process through
        shared arenas, holding :attr:`BlockPool.lock` since it took them from
        :meth:`BlockPool.free_blocks`)."""
        slots = self._slots.copy()
        slots[blocks] = phys
        return BlockedArray(self.pool, slots)

    def block_bytes(self, blocks: Any) -> list[memoryview]:
        """The bytes (C order, the dtype's byte order) of each of the logical ``blocks``,
        memoryviews of the pool: valid while this version lives (for hashing)."""
        b, n = self.block_rows, self.shape[0]
        nbytes = b * math.prod(self.shape[1:]) * self.dtype.itemsize  # of a whole block
        idx = np.asarray(blocks, np.int64).reshape(-1)
        phys = self._slots[idx]
        flat = [a.reshape(-1).view(np.uint8).data for a in self._arenas]
        if len(flat) == 1:
            mem = flat[0]  # (arena 0's short last block ends with the buffer)
            out = [mem[o:o + nbytes] for o in (phys * nbytes).tolist()]
        else:
            which = np.searchsorted(self._starts, phys, side="right") - 1
            at = (phys - self._starts[which]) * nbytes
            out = [flat[a][o:o + nbytes] for a, o in zip(which.tolist(), at.tolist())]
        if n % b:  # the table's short last block, wherever it lies
            short = (n % b) * nbytes // b
            for k in np.flatnonzero(idx == n // b).tolist():
                out[k] = out[k][:short]
        return out


def _private_arena(shape: tuple[int, ...], dtype: np.dtype) -> tuple[np.ndarray, None]:
    return np.empty(shape, dtype), None


def _writable(arr: np.ndarray) -> np.ndarray:
    """``arr`` as a writable C-contiguous array over the same memory where possible (a
    read-only view of writable memory, such as a writable shared mapping, is made
    writable), else a copy."""
    if arr.flags.c_contiguous:
        if arr.flags.writeable:
            return arr
        view = arr.view()
        try:
            view.setflags(write=True)
            return view
        except ValueError:  # read-only memory (a read-only mapping): copy
            pass
    return np.array(arr, order="C", copy=True)
