"""HDF5 1.8 object headers in a file image: the chunks whose checksums verify.

Used by ``_image`` to learn which checksummed chunk holds each per-save value. The
checksum function is passed in (``_image._checksum``: HDF5's ``H5_checksum_metadata``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Checksum", "Chunk", "chunks"]

#: ``checksum(buf, start, end)``: HDF5's metadata checksum of ``buf[start:end]``.
Checksum = Callable[[bytearray, int, int], int]

@dataclass(frozen=True)
class Chunk:
    """An object-header chunk: checksum over ``[start, end)``, stored at ``end``."""

    start: int
    end: int


def chunks(image: bytearray, checksum: Checksum) -> list[Chunk]:
    """Every HDF5 1.8 object-header chunk (``OHDR`` and its ``OCHK`` continuations)
    whose checksum verifies."""
    if image[9:10] != b"\x08" or image[10:11] != b"\x08":
        return []  # offsets and lengths other than 8 bytes: not what we write
    found: list[Chunk] = []
    pos = image.find(b"OHDR")
    while pos >= 0:
        if image[pos + 4 : pos + 5] == b"\x02":
            flags = image[pos + 5]
            head = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
            width = 1 << (flags & 0x03)
            start = pos + head + width
            end = start + int.from_bytes(image[pos + head : start], "little")
            if _verifies(image, pos, end, checksum):
                found.append(Chunk(pos, end))
                found.extend(_continuations(image, start, end, 6 if flags & 0x04 else 4,
                                          checksum))
        pos = image.find(b"OHDR", pos + 1)
    return found


def _continuations(image: bytearray, start: int, end: int, msg_head: int,
                   checksum: Checksum) -> list[Chunk]:
    """The ``OCHK`` chunks named by continuation messages (type 0x10) among the
    messages in ``[start, end)``, and theirs."""
    out: list[Chunk] = []
    at = start
    while at + msg_head <= end:
        mtype, msize = image[at], int.from_bytes(image[at + 1 : at + 3], "little")
        body = at + msg_head
        if mtype == 0x10 and msize >= 16:
            addr, length = struct.unpack_from("<QQ", image, body)
            cend = addr + length - 4
            if image[addr : addr + 4] == b"OCHK" and _verifies(image, addr, cend, checksum):
                out.append(Chunk(addr, cend))
                out.extend(_continuations(image, addr + 4, cend, msg_head, checksum))
        at = body + msize
    return out


def _verifies(image: bytearray, start: int, end: int, checksum: Checksum) -> bool:
    return 0 <= start < end <= len(image) - 4 and checksum(image, start, end) == _u32(image, end)


def _u32(buf: bytearray, at: int) -> int:
    return int(struct.unpack_from("<I", buf, at)[0])
