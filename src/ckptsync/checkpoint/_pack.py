"""The pack: the small variables of a large layout stored in one dataset (format 2).

HDF5 costs ~0.1-0.2 ms per dataset to create and as much to open and check, whatever
its size: 100,000 scalars took ~60 s to save and ~35 s to load as 100,000 datasets
(issue #16). So a layout of more than :data:`PACK_MIN_VARIABLES` variables stores each
variable of at most :data:`PACK_MAX_BYTES` bytes in the uint8 dataset
``/_ckptsync/pack`` instead of a dataset of its own: its C-order little-endian bytes lie
at the offset its index entry gives (``"pack"``), the packed variables back to back in
index (name) order from offset 0. Larger variables stay datasets at their keys. Such a
file has ``ckptsync_format_version`` 2; every other file is byte for byte the format-1
file it always was. docs/checkpoint-format.md describes both.

This module is the one place that decides what is packed (:func:`index_entries`) and moves
packed bytes (:func:`write_packed`, :func:`read_packed`); the writer and the reader
call it, and with :data:`PACK_MIN_VARIABLES` patched high every file is format 1 (the
plain layout, the tests' reference).

Thread-safety: pure functions; safe from any thread.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence

import numpy as np
import xxhash

from ._format import IndexEntry, native_dtype

__all__ = ["PACK_MAX_BYTES", "PACK_MIN_VARIABLES", "index_entries", "joined", "pack_hash",
           "read_packed", "stand_in", "write_packed"]

#: A layout of more variables than this packs its small ones. At ~0.2 ms per dataset,
#: 1,024 datasets cost ~0.2 s to write and as much to read.
PACK_MIN_VARIABLES = 1024
#: Variables of at most this many bytes are packed (larger ones stay datasets, which
#: h5py reads by key; their data dwarfs the per-dataset cost).
PACK_MAX_BYTES = 64 << 10
# Buffers per pwritev/preadv: below every platform's IOV_MAX (1024 on Linux).
_IOV_MAX = 512


def index_entries(names: Sequence[str], arrays: Mapping[str, np.ndarray]
                  ) -> tuple[list[IndexEntry], int | None]:
    """The index entries of the (normalized) ``arrays`` named ``names`` (sorted), with
    pack offsets given to the packed ones, and the pack's length in bytes; the pack
    length is None when the layout is not packed (:data:`PACK_MIN_VARIABLES` or fewer
    variables)."""
    # Column by column, the per-variable work in C where it can be (a normalized
    # array's memory is its C-order little-endian bytes: xxhash reads it directly).
    arrs = [arrays[k] for k in names]
    hashes = list(map(xxhash.xxh3_64_hexdigest, arrs))  # type: ignore[arg-type]
    nbytes = [a.nbytes for a in arrs]
    dtypes = [native_dtype(a.dtype) for a in arrs]
    shapes = [a.shape for a in arrs]
    total: int | None = None
    if len(names) <= PACK_MIN_VARIABLES:
        packs: list[int | None] = [None] * len(names)
    else:
        packs, total = [], 0
        for n in nbytes:
            if n <= PACK_MAX_BYTES:
                packs.append(total)
                total += n
            else:
                packs.append(None)
    fields = zip(names, dtypes, shapes, nbytes, hashes, packs)
    return list(map(tuple.__new__, itertools.repeat(IndexEntry), fields)), total


def pack_hash(packed: Sequence[IndexEntry], arrays: Mapping[str, np.ndarray]) -> str:
    """The xxh3_64 of the pack's bytes (the pack dataset's ``xxh3_64`` attribute), from
    the arrays (normalized: C-contiguous, little-endian) without joining them."""
    h = xxhash.xxh3_64()
    for e in packed:
        if e.nbytes:
            h.update(arrays[e.name])  # type: ignore[arg-type]
    return h.hexdigest()


def stand_in(nbytes: int) -> np.ndarray:
    """A uint8 ``[nbytes]`` array without memory, for creating the pack's dataset when
    the caller writes its bytes itself (:func:`write_packed`)."""
    return np.broadcast_to(np.zeros((), np.uint8), (nbytes,))


def joined(packed: Sequence[IndexEntry], arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """The pack's bytes as one uint8 array (for HDF5 to write, where raw writes are not
    safe)."""
    data = b"".join(arrays[e.name] for e in packed if e.nbytes)  # type: ignore[misc]
    return np.frombuffer(data, np.uint8)


def write_packed(fd: int, at: int, packed: Sequence[IndexEntry],
                 arrays: Mapping[str, np.ndarray]) -> None:
    """Writes the packed variables' bytes at file offset ``at`` (the pack dataset's),
    straight from the arrays' memory with ``pwritev``. Raises OSError."""
    bufs = [arrays[e.name] for e in packed if e.nbytes]
    for i in range(0, len(bufs), _IOV_MAX):
        batch = bufs[i : i + _IOV_MAX]
        want = sum(b.nbytes for b in batch)
        done = os.pwritev(fd, batch, at)  # type: ignore[arg-type]
        if done < want:  # finish a short write from one copy of the batch
            rest = memoryview(b"".join(batch))[done:]  # type: ignore[arg-type]
            pos = at + done
            while rest:
                n = os.pwrite(fd, rest, pos)
                rest, pos = rest[n:], pos + n
        at += want


def read_packed(fd: int, at: int, packed: Sequence[IndexEntry],
                outs: Sequence[np.ndarray]) -> bool:
    """Reads packed variables (file offset of the pack ``at``) into ``outs`` (C-contiguous
    arrays of their shapes and dtypes) with ``preadv``, one call per run of variables
    that lie back to back in the file (all of them, when reading the whole pack in
    order). Returns False when the file ends early (the caller reports it)."""
    run: list[np.ndarray] = []
    run_at = run_end = 0

    def flush() -> bool:
        pos = run_at
        for i in range(0, len(run), _IOV_MAX):
            batch = run[i : i + _IOV_MAX]
            want = sum(b.nbytes for b in batch)
            if os.preadv(fd, batch, pos) != want:  # type: ignore[arg-type]
                return False
            pos += want
        return True

    for e, out in zip(packed, outs):
        if not e.nbytes:
            continue
        assert e.pack is not None
        start = at + e.pack
        if run and start != run_end:
            if not flush():
                return False
            run = []
        if not run:
            run_at = start
        run.append(out)
        run_end = start + e.nbytes
    return flush() if run else True
