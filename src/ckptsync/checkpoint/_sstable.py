"""LevelDB-format sorted tables, as TensorFlow writes a checkpoint's ``.index`` file.

The container of TF's ``tensorflow/core/lib/io/table.cc``, ``block.cc``,
``block_builder.cc`` and ``format.cc`` (LevelDB's table format), uncompressed only::

    data block 0 | trailer | ... | metaindex block | trailer | index block | trailer | footer

- block: entries ``varint32 shared | varint32 non_shared | varint32 value_len |
  key[shared:] | value``, then ``fixed32 restart[n]``, then ``fixed32 n``; every 16th
  entry is a restart point (``shared == 0``).
- trailer (5 bytes): compression type (0 = none) and the masked crc32c of the block's
  bytes plus that type byte.
- index block: for each data block, a key ``>=`` its last key and ``<`` the next block's
  first key → the block's handle (``varint64 offset | varint64 size``).
- footer (48 bytes): metaindex handle, index handle, zero padding to 40 bytes, the
  fixed64 magic ``0xdb4775248b80fb57``.

Every structural problem raises :class:`TableError`; the caller names the file.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

import google_crc32c

__all__ = ["TableError", "mask_crc", "unmask_crc", "crc32c", "read_table", "build_table"]

MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
TRAILER_SIZE = 5
RESTART_INTERVAL = 16
BLOCK_SIZE = 256 * 1024  # TF's tensor bundle writes 256 KiB blocks
_MASK_DELTA = 0xA282EAD8


class TableError(ValueError):
    """The bytes are not a well-formed, uncompressed LevelDB table."""


def crc32c(data: bytes | memoryview) -> int:
    """The CRC-32C (Castagnoli) of ``data``."""
    return int(google_crc32c.value(bytes(data)))


def mask_crc(crc: int) -> int:
    """LevelDB's masked crc: rotate right by 15 bits, add 0xa282ead8 (mod 2**32)."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def unmask_crc(masked: int) -> int:
    """The inverse of :func:`mask_crc`."""
    rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


def _varint(buf: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise TableError(f"truncated varint in {what}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise TableError(f"varint too long in {what}")


def _put_varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _handle(buf: bytes, pos: int, end: int, what: str) -> tuple[tuple[int, int], int]:
    offset, pos = _varint(buf, pos, end, what)
    size, pos = _varint(buf, pos, end, what)
    return (offset, size), pos


def _block(buf: bytes, handle: tuple[int, int], limit: int, what: str) -> bytes:
    """The checked contents of the block at ``handle`` (its trailer verified)."""
    offset, size = handle
    if offset + size + TRAILER_SIZE > limit:
        raise TableError(f"{what} at offset {offset} size {size} lies past the end of the table")
    contents = buf[offset:offset + size]
    kind = buf[offset + size]
    (stored,) = struct.unpack_from("<I", buf, offset + size + 1)
    actual = crc32c(buf[offset:offset + size + 1])
    if unmask_crc(stored) != actual:
        raise TableError(f"{what} at offset {offset}: block checksum mismatch")
    if kind != 0:
        raise TableError(f"{what} at offset {offset} is compressed (type {kind}); only "
                         "uncompressed tables (as TF writes checkpoints) are supported")
    return contents


def _entries(block: bytes, what: str) -> Iterator[tuple[bytes, bytes]]:
    n = len(block)
    if n < 4:
        raise TableError(f"{what} is too short ({n} bytes)")
    (num_restarts,) = struct.unpack_from("<I", block, n - 4)
    if num_restarts == 0 or num_restarts > (n - 4) // 4:
        raise TableError(f"{what} has a bad restart count {num_restarts}")
    end = n - 4 - 4 * num_restarts
    restarts = struct.unpack_from(f"<{num_restarts}I", block, end)
    if any(r > end for r in restarts) or (end > 0 and restarts[0] != 0):
        raise TableError(f"{what} has restart points outside its entries")
    restart_set = set(restarts)
    pos, key = 0, b""
    while pos < end:
        start = pos
        shared, pos = _varint(block, pos, end, what)
        non_shared, pos = _varint(block, pos, end, what)
        value_len, pos = _varint(block, pos, end, what)
        if shared > len(key) or (start in restart_set and shared) or \
                pos + non_shared + value_len > end:
            raise TableError(f"{what} has a corrupt entry at offset {start}")
        key = key[:shared] + block[pos:pos + non_shared]
        pos += non_shared
        yield key, block[pos:pos + value_len]
        pos += value_len


def read_table(buf: bytes) -> list[tuple[bytes, bytes]]:
    """All ``(key, value)`` pairs of a table, in order.

    Raises:
        TableError: no footer or magic, a handle past the end, a checksum mismatch, a
            compressed block, a corrupt block, or keys out of order.
    """
    if len(buf) < FOOTER_SIZE:
        raise TableError(f"the file is too short ({len(buf)} bytes) to hold a table footer")
    foot = len(buf) - FOOTER_SIZE
    (magic,) = struct.unpack_from("<Q", buf, foot + 40)
    if magic != MAGIC:
        raise TableError(f"bad table magic number {magic:#018x} (expected {MAGIC:#018x})")
    meta_handle, pos = _handle(buf, foot, foot + 40, "footer")
    index_handle, pos = _handle(buf, pos, foot + 40, "footer")
    if any(buf[pos:foot + 40]):
        raise TableError("the footer's padding is not zero")
    # The metaindex (TF stores nothing there) is checked, so no byte goes unchecked.
    for key, _ in _entries(_block(buf, meta_handle, foot, "metaindex block"), "metaindex"):
        raise TableError(f"unexpected metaindex entry {key!r} (filters are not supported)")
    index = _block(buf, index_handle, foot, "index block")
    out: list[tuple[bytes, bytes]] = []
    for sep, value in _entries(index, "index block"):
        handle, used = _handle(value, 0, len(value), "index entry")
        if used != len(value):
            raise TableError("index entry has trailing bytes")
        what = f"data block for keys up to {sep!r}"
        for key, val in _entries(_block(buf, handle, foot, what), what):
            if (out and key <= out[-1][0]) or key > sep:
                raise TableError(f"keys are out of order at {key!r}")
            out.append((key, val))
    return out


class _BlockBuilder:
    def __init__(self) -> None:
        self.buf = bytearray()
        self.restarts = [0]
        self.count = 0
        self.last = b""

    def add(self, key: bytes, value: bytes) -> None:
        shared = 0
        if self.count < RESTART_INTERVAL:
            limit = min(len(key), len(self.last))
            while shared < limit and key[shared] == self.last[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buf))
            self.count = 0
        for n in (shared, len(key) - shared, len(value)):
            _put_varint(self.buf, n)
        self.buf += key[shared:]
        self.buf += value
        self.last = key
        self.count += 1

    def finish(self) -> bytes:
        return bytes(self.buf) + struct.pack(f"<{len(self.restarts)}I", *self.restarts) + \
            struct.pack("<I", len(self.restarts))


def _put_block(out: bytearray, contents: bytes) -> bytes:
    """Appends a block and its trailer; returns the encoded handle."""
    handle = bytearray()
    _put_varint(handle, len(out))
    _put_varint(handle, len(contents))
    out += contents
    out.append(0)
    out += struct.pack("<I", mask_crc(crc32c(contents + b"\0")))
    return bytes(handle)


def _separator(start: bytes, limit: bytes) -> bytes:
    """LevelDB's BytewiseComparator::FindShortestSeparator: a short key in [start, limit)."""
    n = min(len(start), len(limit))
    i = 0
    while i < n and start[i] == limit[i]:
        i += 1
    if i < n and start[i] < 0xFF and start[i] + 1 < limit[i]:
        return start[:i] + bytes([start[i] + 1])
    return start


def _successor(key: bytes) -> bytes:
    """LevelDB's FindShortSuccessor: a short key >= ``key``."""
    for i, b in enumerate(key):
        if b != 0xFF:
            return key[:i] + bytes([b + 1])
    return key


def build_table(items: Iterable[tuple[bytes, bytes]]) -> bytes:
    """The bytes of an uncompressed table of ``items`` (keys strictly increasing).

    As TF's ``TableBuilder``: a block closes once it holds about 256 KiB; its index key
    is the shortest separator between its last key and the next block's first (the
    shortest successor for the last block). For the same entries the bytes are TF's.

    Raises:
        ValueError: keys not strictly increasing.
    """
    out = bytearray()
    index = _BlockBuilder()
    block = _BlockBuilder()
    last: bytes | None = None
    pending: bytes | None = None  # the handle of a closed block awaiting its index key
    for key, value in items:
        if last is not None and key <= last:
            raise ValueError(f"table keys must be strictly increasing: {key!r} after {last!r}")
        if pending is not None and last is not None:
            index.add(_separator(last, key), pending)
            pending = None
        block.add(key, value)
        last = key
        if len(block.buf) + 4 * len(block.restarts) + 4 >= BLOCK_SIZE:
            pending = _put_block(out, block.finish())
            block = _BlockBuilder()
    if block.count:
        pending = _put_block(out, block.finish())
    if pending is not None and last is not None:
        index.add(_successor(last), pending)
    meta = _put_block(out, _BlockBuilder().finish())
    footer = bytearray(meta + _put_block(out, index.finish()))
    footer += b"\0" * (40 - len(footer))
    out += footer + struct.pack("<Q", MAGIC)
    return bytes(out)
