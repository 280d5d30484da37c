"""The read process's jobs on a checkpoint's changes, and the block its replies travel in.

- :func:`changes_job` reads what a checkpoint records against its predecessor
  (``checkpoint.read_changes``) into a fresh shared block.
- :func:`apply_job` does that and also applies the row changes of the server's blocked
  tables straight into the server's shared arenas, so that copying the touched blocks,
  writing the rows and hashing the blocks run outside the server's interpreter lock::

    server (load thread, holding each table's pool lock)   read process
    ----------------------------------------------------   ------------
    slot map + free blocks -> a state block; arenas' fds -> maps the arenas (kept mapped
                                                           while the server names them)
                                                           read_changes(only_after)
                                                           per table: copy the touched
                                                           blocks into free ones, write
                                                           the rows, hash those blocks
    old.with_blocks(blocks, free[:t]); digests checked  <- touched blocks, their digests,
    as in process (serving/_cow.py)                        the other variables' changes

The blocks written are free ones (no live version maps them), so a job that fails or
dies half way changes nothing any request can see. Shared by ``read_process``'s worker
loop; runs only there.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..blocked_array import BlockedArray, BlockPool
from ..checkpoint import CheckpointChanges, hash_blocks, read_changes
from .frames import error_reply
from .shared_arrays import ArrayLayout, SharedBuffer

__all__ = ["ReplyBlock", "apply_job", "changes_doc", "changes_job", "forget_arenas"]

# The server's arenas mapped here: (st_dev, st_ino) -> mapping. Kept between jobs (a
# fresh mapping would fault in every touched page again); dropped once a job no longer
# names them, so this process never keeps a dropped table's memory alive.
_ARENAS: dict[tuple[int, int], mmap.mmap] = {}
# The changes of a job answered "short" (the server asks again at once), and its key.
_SHORT: tuple[tuple[Any, ...], CheckpointChanges] | None = None


class ReplyBlock:
    """The arrays of one reply, laid out by :class:`ArrayLayout` in a fresh buffer."""

    def __init__(self) -> None:
        self.layout = ArrayLayout((), 0)
        self.buffer: SharedBuffer | None = None

    def allocate(self, specs: list[tuple[str, np.dtype, tuple[int, ...]]]) -> list[np.ndarray]:
        """Views of a new buffer for ``specs`` (a second call replaces the first's)."""
        self.release(keep_fd=False)
        self.layout = ArrayLayout.of(specs)
        if self.layout.size_bytes:
            self.buffer = SharedBuffer(self.layout.size_bytes, "ckptsync-read")
        return self.layout.views(None if self.buffer is None else self.buffer.mm)

    def fill(self, arrays: Sequence[tuple[str, np.ndarray]]) -> None:
        """A new buffer holding copies of ``arrays``."""
        views = self.allocate([(k, a.dtype, a.shape) for k, a in arrays])
        for view, (_, a) in zip(views, arrays):
            view[...] = a

    def release(self, keep_fd: bool) -> int | None:
        """Unmaps the block here; returns its fd (to send) or closes it."""
        buffer, self.buffer = self.buffer, None
        if buffer is None:
            return None
        buffer.unmap()  # a failed read's traceback may hold views: they keep it mapped
        fd = buffer.take_fd()
        if not keep_fd and fd is not None:
            os.close(fd)
            return None
        return fd

    def reply(self) -> dict[str, Any]:
        return {"ok": True, "size": self.layout.size_bytes, "variables": self.layout.to_doc()}


def changes_doc(changes: CheckpointChanges) -> dict[str, Any]:
    """The reply's description of ``changes`` (its arrays travel in the block)."""
    return {
        "prefix": changes.prefix, "parent": changes.parent,
        "parent_index_xxh3": changes.parent_index_xxh3, "index_xxh3": changes.index_xxh3,
        "global_step": None if changes.global_step is None else int(changes.global_step),
        "is_full": bool(changes.is_full),
        "entries": [[c.name, c.kind, c.digest, list(c.shape), c.dtype.str]
                    for c in changes.values()]}


def _arrays(changes: CheckpointChanges, skip: frozenset[str] = frozenset()
            ) -> list[tuple[str, np.ndarray]]:
    out: list[tuple[str, np.ndarray]] = []
    for name, c in changes.items():
        if name not in skip:
            out += [(name + "\0rows", a) for a in [c.rows] if a is not None]
            out += [(name + "\0values", np.asarray(a)) for a in [c.values] if a is not None]
    return out


def _read(request: dict[str, Any]) -> CheckpointChanges:
    after = request.get("only_after")
    return read_changes(request["prefix"], list(request["names"]), verify=True,
                        only_after=None if after is None else (after[0], after[1]))


def changes_job(request: dict[str, Any], fds: Sequence[int] = ()
                ) -> tuple[dict[str, Any], int | None]:
    """Reads a request's changes (``read_changes``), their arrays into a fresh block."""
    global _SHORT
    _SHORT = None  # (only the very next apply job may use it)
    block = ReplyBlock()
    try:
        changes = _read(request)
        block.fill(_arrays(changes))
        reply = block.reply()
        reply["changes"] = changes_doc(changes)
    except Exception as e:
        block.release(keep_fd=False)
        return error_reply(e), None
    return reply, block.release(keep_fd=True)


def apply_job(request: dict[str, Any], fds: Sequence[int]) -> tuple[dict[str, Any], int | None]:
    """Reads a request's changes and applies the row changes of its ``tables`` into their
    arenas (see the module's docstring); ``fds``: the state block, then the arenas.

    The reply is :func:`changes_job`'s, except that for each table applied it holds
    ``<name>\\0blocks`` (the touched logical blocks, int64) and ``<name>\\0digests``
    (their digests, uint64) instead of its rows and values, and ``applied[name]``
    (``{"finite": bool}``); or, when a table has fewer free blocks than it touches,
    only ``short`` (name -> blocks needed), nothing written.
    """
    global _SHORT
    block = ReplyBlock()
    try:
        tables = _tables(request, fds)
        key = (request["prefix"], tuple(request["names"]), tuple(request["only_after"]))
        cached, _SHORT = _SHORT, None
        changes = cached[1] if cached is not None and cached[0] == key else _read(request)
        plans = {name: (c.rows, c) for name, c in changes.items()
                 if name in tables and c.kind == "rows" and c.rows is not None and len(c.rows)}
        short = {}
        for name, (rows, _) in plans.items():  # (rows increasing, as read_changes checks)
            need = int(np.count_nonzero(np.diff(rows // tables[name][0].block_rows)) + 1)
            if need > tables[name][1].size:
                short[name] = need
        if short:  # the server grows its pools and asks again: not read twice
            _SHORT = (key, changes)
            return {"ok": True, "short": short}, None
        arrays = _arrays(changes, skip=frozenset(plans))
        applied = {}
        for name, (rows, c) in plans.items():
            old, free = tables[name]
            values = np.asarray(c.values)
            new, touched = old.with_rows(rows, values, fresh=free)
            arrays += [(name + "\0blocks", touched),
                       (name + "\0digests", hash_blocks(new.block_bytes(touched)))]
            applied[name] = {"finite": values.dtype.kind not in "fc"
                             or bool(np.isfinite(values).all()),
                             "bytes": int(rows.nbytes + values.nbytes)}
            del new, old
        block.fill(arrays)
        reply = block.reply()
        reply["changes"] = changes_doc(changes)
        reply["applied"] = applied
    except Exception as e:
        block.release(keep_fd=False)
        return error_reply(e), None
    return reply, block.release(keep_fd=True)


def _tables(request: dict[str, Any], fds: Sequence[int]
            ) -> dict[str, tuple[BlockedArray, np.ndarray]]:
    """name -> (the served version over the mapped arenas, its free blocks)."""
    state_doc = request["state"]
    layout = ArrayLayout.from_doc(state_doc["variables"], int(state_doc["size"]))
    state_mm = SharedBuffer.map(fds[0], layout.size_bytes) if layout.size_bytes else None
    state = dict(zip((s.name for s in layout.specs), layout.views(state_mm)))
    forget_arenas(keep={key for t in request["tables"].values() for key in
                        (_key(fds[a[0]]) for a in t["arenas"])})
    out = {}
    for name, t in request["tables"].items():
        dtype, row_shape = np.dtype(t["dtype"]), tuple(t["row_shape"])
        width = math.prod(row_shape)
        arenas = [np.frombuffer(_mapped(fds[a], first=i == 0), dtype, n_rows * width, offset)
                  .reshape(n_rows, *row_shape)
                  for i, (a, offset, n_rows) in enumerate(t["arenas"])]
        pool = BlockPool.over(arenas, int(t["rows"]), int(t["block_rows"]))
        out[name] = (BlockedArray(pool, np.array(state[name + "\0slots"])),
                     np.array(state[name + "\0free"]))
    return out


def forget_arenas(keep: frozenset[tuple[int, int]] | set[tuple[int, int]] = frozenset()
                  ) -> None:
    """Unmaps every arena mapped here but those of ``keep`` ((st_dev, st_ino) keys)."""
    global _SHORT
    if not keep:
        _SHORT = None
    for key in list(_ARENAS):
        if key not in keep:
            with contextlib.suppress(BufferError):  # a view survived: the GC unmaps it
                _ARENAS.pop(key).close()


def _key(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _mapped(fd: int, first: bool) -> mmap.mmap:
    """The mapping of an arena's file; arena 0 (the full read, every page in memory) has
    its page tables filled at once, so that later jobs take no fault on it; a grown
    arena is not, so that its unused blocks take no memory until written."""
    key, size = _key(fd), os.fstat(fd).st_size
    mm = _ARENAS.get(key)
    if mm is None or len(mm) < size:
        flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0) if first else 0)
        mm = _ARENAS[key] = mmap.mmap(fd, size, flags=flags)
    return mm
