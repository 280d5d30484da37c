"""Bulk data reads: a variable's bytes from the file into its array, hashed on the way.

The kernel's copy from the page cache into user memory (``preadv``) is fast only when
the destination address and the file offset agree modulo 64 bytes (or the destination
is 64-byte aligned): on the project's VM (AMD EPYC, kernel 6.18) a 2 GiB read into
numpy arrays, which sit 16 bytes into their pages, ran at 1.6 GB/s where an aligned one
ran at 8 GB/s. So each variable is read with ``preadv`` straight into its array when
the two agree, and otherwise through a per-thread bounce buffer placed to agree with
the file offset (1 MiB, so hashing and the ``memcpy`` out of it hit the CPU cache):
2.5 GB/s more than a direct read then, 0.7x an aligned one.

``verify_first`` reads twice: the first pass only hashes (so a damaged file is refused
before any destination byte changes; the destinations may be values in use), the
second only copies. The second pass reads the same descriptor, so the same inode; a
file changed in place between the two passes (checkpoints are immutable: only a
process ignoring the format would do that) is caught by comparing ``fstat`` before and
after, and then the destinations may hold part of the new bytes.

Nothing here raises an ``OpError``: the callers turn :class:`ShortRead` and
:class:`Mismatch` into their own messages (or into "read it through HDF5").

Thread-safety: all functions may be called from several threads (one buffer each).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence
from typing import NamedTuple

import xxhash

__all__ = ["Changed", "Mismatch", "ShortRead", "Span", "aligned_buffer", "hash_span",
           "read_spans"]

#: Bytes per ``preadv`` through the bounce buffer (256 KiB-1 MiB measured the same; the
#: larger means fewer system calls).
CHUNK_BYTES = 1 << 20
#: Destination and file offset must agree modulo this for a fast kernel copy.
ALIGN = 64
_PAGE = 4096

_local = threading.local()


class Span(NamedTuple):
    """One variable's bytes: ``len(out)`` bytes at file ``offset``, to copy into ``out``
    (a writable byte view); ``digest`` is their expected xxh3_64 hex digest, or None
    when not verified."""

    offset: int
    out: memoryview
    digest: str | None


class ShortRead(Exception):
    """Span ``index`` ends past the end of the file (at file byte ``at``)."""

    def __init__(self, index: int, at: int):
        super().__init__(index, at)
        self.index, self.at = index, at


class Mismatch(Exception):
    """Span ``index``'s bytes hash to ``actual``, not its ``digest``."""

    def __init__(self, index: int, actual: str):
        super().__init__(index, actual)
        self.index, self.actual = index, actual


class Changed(Exception):
    """The file was modified (size or mtime) while it was read."""


def _address(view: memoryview) -> int:
    """The address of a writable, non-empty byte view's first byte."""
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def aligned_buffer(nbytes: int, offset: int) -> memoryview:
    """A new writable ``nbytes`` view whose address agrees with file ``offset`` modulo
    the page size (for one ``preadv`` of ``nbytes`` at ``offset``)."""
    raw = memoryview(bytearray(nbytes + _PAGE))
    shift = (offset - _address(raw)) % _PAGE
    return raw[shift:shift + nbytes]


def _bounce() -> tuple[memoryview, int]:
    """This thread's bounce buffer (a page more than a chunk) and its page shift."""
    got = getattr(_local, "buf", None)
    if got is None:
        raw = memoryview(bytearray(CHUNK_BYTES + _PAGE))
        got = _local.buf = (raw, -_address(raw) % _PAGE)
    return got


def _pass(fd: int, index: int, offset: int, nbytes: int, out: memoryview | None,
          hasher: xxhash.xxh3_64 | None) -> None:
    """Reads ``nbytes`` at ``offset``: hashes them and/or copies them into ``out``,
    straight into ``out`` when its address agrees with ``offset``, else through the
    bounce buffer."""
    if out is not None and nbytes and (_address(out) - offset) % ALIGN == 0:
        pos = 0
        while pos < nbytes:
            got = os.preadv(fd, [out[pos:pos + CHUNK_BYTES]], offset + pos)
            if got <= 0:
                raise ShortRead(index, offset + pos)
            if hasher is not None:
                hasher.update(out[pos:pos + got])
            pos += got
        return
    raw, shift = _bounce()
    pos = 0
    while pos < nbytes:
        at = offset + pos
        start = shift + at % _PAGE
        want = min(CHUNK_BYTES, nbytes - pos)
        buf = raw[start:start + want]
        got = os.preadv(fd, [buf], at)
        if got <= 0:
            raise ShortRead(index, at)
        if got < want:
            buf = buf[:got]
        if hasher is not None:
            hasher.update(buf)
        if out is not None:
            out[pos:pos + got] = buf
        pos += got


def hash_span(fd: int, offset: int, nbytes: int, index: int = 0) -> str:
    """The xxh3_64 hex digest of ``nbytes`` at ``offset``; raises :class:`ShortRead`."""
    hasher = xxhash.xxh3_64()
    _pass(fd, index, offset, nbytes, None, hasher)
    return hasher.hexdigest()


def read_spans(fd: int, spans: Sequence[Span], verify_first: bool = False) -> None:
    """Fills each span's ``out`` from the file and checks its ``digest`` (when given).

    Without ``verify_first`` every span is hashed while it is copied; a mismatch raises
    after that span's ``out`` was written (earlier ones stay written). With it, every
    digest is checked before any ``out`` is written.

    Raises:
        ShortRead: a span lies past the end of the file.
        Mismatch: a span's bytes do not match its digest.
        Changed: (``verify_first``) the file changed between the two passes.
    """
    if verify_first:
        before = os.fstat(fd)
        for i, span in enumerate(spans):
            if span.digest is not None:
                actual = hash_span(fd, span.offset, len(span.out), i)
                if actual != span.digest:
                    raise Mismatch(i, actual)
        for i, span in enumerate(spans):
            _pass(fd, i, span.offset, len(span.out), span.out, None)
        after = os.fstat(fd)
        if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            raise Changed()
        return
    for i, span in enumerate(spans):
        hasher = xxhash.xxh3_64() if span.digest is not None else None
        _pass(fd, i, span.offset, len(span.out), span.out, hasher)
        if hasher is not None and hasher.hexdigest() != span.digest:
            raise Mismatch(i, hasher.hexdigest())
