"""_bulk_read: the data path of every read (direct or bounced, hashed, verify-first)."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import xxhash

from ckptsync.checkpoint import _bulk_read
from ckptsync.checkpoint._bulk_read import Span

CHUNK = _bulk_read.CHUNK_BYTES


@pytest.fixture
def data(tmp_path: Path) -> Iterator[tuple[int, bytes]]:
    raw = np.random.default_rng(0).integers(0, 256, 3 * CHUNK + 4099, np.uint8).tobytes()
    path = tmp_path / "data.bin"
    path.write_bytes(raw)
    fd = os.open(path, os.O_RDONLY)
    try:
        yield fd, raw
    finally:
        os.close(fd)


def _address(view: memoryview) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def _out(nbytes: int, shift: int) -> memoryview:
    """A writable view of ``nbytes`` whose address is ``shift`` mod 4096."""
    raw = memoryview(bytearray(nbytes + 8192))
    start = (shift - _address(raw)) % 4096
    return raw[start:start + nbytes]


@pytest.mark.parametrize("offset,nbytes", [(0, 3 * CHUNK + 4099), (16, CHUNK), (4097, 2 * CHUNK + 5),
                                           (100, 1), (7, 0)])
@pytest.mark.parametrize("aligned", [True, False], ids=["direct", "bounced"])
def test_spans_read_and_hash_the_files_bytes_through_either_path(
        data: tuple[int, bytes], offset: int, nbytes: int, aligned: bool) -> None:
    fd, raw = data
    want = raw[offset:offset + nbytes]
    out = _out(nbytes, offset if aligned else offset + 16)
    digest = xxhash.xxh3_64_hexdigest(want)
    for verify_first in (False, True):
        out[:] = b"\0" * nbytes
        _bulk_read.read_spans(fd, [Span(offset, out, digest)], verify_first)
        assert out.tobytes() == want
    assert _bulk_read.hash_span(fd, offset, nbytes) == digest


def test_aligned_buffer_agrees_with_the_file_offset() -> None:
    for offset in (0, 16, 4095, 123_457):
        buf = _bulk_read.aligned_buffer(1000, offset)
        assert len(buf) == 1000 and (_address(buf) - offset) % 4096 == 0


def test_a_span_past_the_end_is_a_short_read_naming_it(data: tuple[int, bytes]) -> None:
    fd, raw = data
    spans = [Span(0, _out(10, 0), None), Span(len(raw) - 5, _out(10, 1), None)]
    with pytest.raises(_bulk_read.ShortRead) as e:
        _bulk_read.read_spans(fd, spans)
    assert (e.value.index, e.value.at) == (1, len(raw))


def test_verify_first_writes_nothing_when_any_span_mismatches(data: tuple[int, bytes]) -> None:
    fd, raw = data
    outs = [_out(CHUNK + 3, 0), _out(CHUNK + 3, 5)]
    spans = [Span(0, outs[0], xxhash.xxh3_64_hexdigest(raw[:CHUNK + 3])),
             Span(CHUNK + 3, outs[1], "0" * 16)]
    for out in outs:
        out[:] = b"\xaa" * len(out)
    with pytest.raises(_bulk_read.Mismatch) as e:
        _bulk_read.read_spans(fd, spans, verify_first=True)
    assert e.value.index == 1
    assert e.value.actual == xxhash.xxh3_64_hexdigest(raw[CHUNK + 3:2 * CHUNK + 6])
    assert all(out.tobytes() == b"\xaa" * len(out) for out in outs)
    with pytest.raises(_bulk_read.Mismatch):  # one pass: the first span was written
        _bulk_read.read_spans(fd, spans)
    assert outs[0].tobytes() == raw[:CHUNK + 3]


def test_a_file_changed_between_the_two_passes_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"x" * 5000)
    real = _bulk_read.hash_span

    def hash_then_append(fd: int, offset: int, nbytes: int, index: int = 0) -> str:
        digest = real(fd, offset, nbytes, index)
        with open(path, "ab") as f:  # another process writing into the file in place
            f.write(b"y")
        return digest

    monkeypatch.setattr(_bulk_read, "hash_span", hash_then_append)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(_bulk_read.Changed):
            _bulk_read.read_spans(fd, [Span(0, _out(5000, 0), xxhash.xxh3_64_hexdigest(b"x" * 5000))],
                                  verify_first=True)
    finally:
        os.close(fd)
