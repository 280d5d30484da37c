"""Block digests of a variable: one xxh3_64 per block of dim-0 rows.

An incremental checkpoint (format version 3, docs/checkpoint-format.md) records, per
variable, the digest of its value *after* the delta is applied. Hashing a 256 MB table
on every save would cost what the delta saves, so the digest is built from per-block
hashes: a block is ``block_rows(shape, itemsize)`` consecutive rows of dim 0 (about
4 KiB), and a row update rehashes only the blocks it touched
(:func:`update_block_digests`). :func:`variable_digest` folds the block vector into the
one hex string the index stores.

Bytes hashed are the format's: C-order little-endian, ``bool`` one byte 0/1 per
element, complex real then imaginary (``_format.le_bytes``).

Every function here is pure and thread-safe (it reads its inputs, allocates its output).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import xxhash

from ..errors import CkptsyncValueError
from ._format import le_bytes

BLOCK_BYTES = 4096  # target bytes per block: rows of dim 0 per block = 4096 // row bytes

__all__ = ["BLOCK_BYTES", "block_rows", "block_digests", "hash_blocks", "update_block_digests",
           "variable_digest"]


def block_rows(shape: tuple[int, ...], itemsize: int) -> int:
    """Rows of dim 0 per block for a variable of ``shape`` and ``itemsize`` bytes.

    ``max(1, 4096 // row_nbytes)`` with ``row_nbytes = prod(shape[1:]) * itemsize``
    (a row of zero bytes counts as one byte). For a 0-d value the result is 1: the whole
    value is one block. A 0-row variable has zero blocks whatever this returns.

    Raises:
        CkptsyncValueError: ``itemsize`` is not positive or a dimension is negative.
    """
    if itemsize <= 0 or any(d < 0 for d in shape):
        raise CkptsyncValueError(
            f"block_rows: shape {tuple(shape)} / itemsize {itemsize} is not a valid "
            f"variable layout; expected non-negative dims and a positive itemsize.")
    if not shape:
        return 1
    row_nbytes = math.prod(shape[1:]) * itemsize
    return max(1, BLOCK_BYTES // max(1, row_nbytes))


def _layout(arr: np.ndarray) -> tuple[memoryview, int, int, int]:
    """(flat little-endian bytes, number of blocks, bytes per block, total bytes)."""
    data = le_bytes(arr)
    total = len(data)
    if arr.ndim == 0:
        return data, 1, total, total
    rows = arr.shape[0]
    per = block_rows(arr.shape, arr.dtype.itemsize)
    row_nbytes = (total // rows) if rows else 0
    return data, -(-rows // per), per * row_nbytes, total


def _as_array(arr: Any) -> np.ndarray:
    return arr if type(arr) is np.ndarray else np.asarray(arr)


def block_digests(arr: Any) -> np.ndarray:
    """The block digests of ``arr``: uint64 ``[n_blocks]``.

    Block ``i`` is rows ``[i * b, (i + 1) * b)`` of dim 0 (``b = block_rows(...)``; the
    last block may be short), hashed with ``xxhash.xxh3_64_intdigest`` over its C-order
    little-endian bytes. A 0-d value is one block; a 0-row array gives ``[0]`` digests.
    O(nbytes); no copy of a C-contiguous little-endian array.
    """
    arr = _as_array(arr)
    data, n, step, _ = _layout(arr)
    h = xxhash.xxh3_64_intdigest
    return np.fromiter((h(data[i * step:(i + 1) * step]) for i in range(n)),
                       dtype=np.uint64, count=n)


def hash_blocks(blocks: Sequence[Any]) -> np.ndarray:
    """uint64 ``[len(blocks)]``: each buffer (a block's C-order little-endian bytes, e.g.
    ``BlockedArray.block_bytes``) hashed as :func:`block_digests` hashes a block."""
    h = xxhash.xxh3_64_intdigest
    return np.fromiter((h(b) for b in blocks), dtype=np.uint64, count=len(blocks))


def update_block_digests(arr: Any, digests: np.ndarray, rows: Any) -> np.ndarray:
    """A NEW digest vector equal to ``block_digests(arr)``, given that only rows ``rows``
    of dim 0 changed since ``digests`` was computed (of an array of the same shape).

    Args:
        arr: the current value.
        digests: uint64 ``[n_blocks]``, the block digests before the change (not
            modified).
        rows: int64 indices of dim 0 (any order, duplicates allowed, may be empty).

    Returns:
        uint64 ``[n_blocks]``; only the touched blocks are rehashed (O(rows + touched
        blocks x block bytes)).

    Raises:
        CkptsyncValueError: ``digests`` has the wrong length or a row is out of range.
    """
    arr = _as_array(arr)
    data, n, step, _ = _layout(arr)
    old = np.asarray(digests)
    if old.shape != (n,):
        raise CkptsyncValueError(
            f"update_block_digests: digests have shape {old.shape}; expected ({n},) "
            f"for an array of shape {arr.shape} and dtype {arr.dtype}.")
    out = old.astype(np.uint64, copy=True)
    idx = np.asarray(rows, dtype=np.int64).reshape(-1)
    if idx.size == 0:
        return out
    if arr.ndim == 0:
        out[0] = xxhash.xxh3_64_intdigest(data)
        return out
    nrows = arr.shape[0]
    if int(idx.min()) < 0 or int(idx.max()) >= nrows:
        raise CkptsyncValueError(
            f"update_block_digests: rows must lie in [0, {nrows}) for an array of shape "
            f"{arr.shape}; got rows from {int(idx.min())} to {int(idx.max())}.")
    per = block_rows(arr.shape, arr.dtype.itemsize)
    h = xxhash.xxh3_64_intdigest
    blocks = np.unique(idx // per)
    out[blocks] = np.fromiter((h(data[b * step:(b + 1) * step]) for b in blocks.tolist()),
                              dtype=np.uint64, count=len(blocks))
    return out


def variable_digest(digests: np.ndarray) -> str:
    """The block digest of a variable as the index records it: the
    ``xxh3_64_hexdigest`` (16 lowercase hex chars) of ``digests.astype('<u8')``'s
    bytes."""
    vec = np.ascontiguousarray(np.asarray(digests).astype("<u8", copy=False))
    return xxhash.xxh3_64_hexdigest(vec.tobytes())
