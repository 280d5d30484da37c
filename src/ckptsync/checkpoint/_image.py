"""Metadata images: writing a checkpoint of a known layout without HDF5 on the hot path.

A data file's HDF5 metadata depends only on its *layout* (keys, dtypes, shapes, whether
there is a global step, the lengths of the ``writer`` and ``metadata_json`` strings) and
on a few fixed-size values that change from save to save: the root attributes
``global_step``, ``created_unix_s`` and ``metadata_json``, and every dataset's
``xxh3_64`` attribute. A trainer saves the same layout again and again, and building
the metadata through HDF5 costs ~80 µs per variable, which for a small model is most of
a save.

So the first save of a layout is written by HDF5, and then the layout's file is built
once more with HDF5 itself (in a scratch file in RAM, :func:`._h5layout.write_layout`,
exactly what the plain writer does) with random sentinel values, to learn where each
value lies (its sentinel occurs exactly once), which checksummed object-header chunk
(``OHDR``/``OCHK``, ``_ohdr``) holds it, and where each dataset's data lies. The image is
then *checked* against the real file HDF5 wrote (:func:`learn_file`): patched with that
file's values (checksums recomputed with HDF5's own ``H5_checksum_metadata``), it must
give that file byte for byte (:func:`build` can instead check against a second build).
From then on a save of that layout patches the pieces and writes the file with
``writev``: metadata pieces and the arrays' own memory in file order, no data copied.

Anything unexpected (a layout over :data:`MAX_DATA_BYTES` or :data:`MAX_VARIABLES`, a
sentinel not found once, a value outside a verified chunk, a failed check, no
``H5_checksum_metadata``) leaves that layout to the plain writer; it is never an error.

Thread-safety: :func:`image_for` is safe to call from several threads; images are
immutable once built.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import ctypes
import logging
import os
import re
import secrets
import struct
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from . import _format
from ._atomic import _pid_alive
from ._h5layout import H5Writer, RootValues, write_layout
from ._ohdr import Chunk
from ._ohdr import chunks as _ohdr_chunks

__all__ = ["MAX_DATA_BYTES", "MAX_VARIABLES", "MetadataImage", "image_for", "layout_key",
           "learn_file"]

logger = logging.getLogger(__name__)

# Layouts with more data than this are written by HDF5 every time: building an image
# holds two in-memory copies of the file once, and at this size the metadata's few
# milliseconds are small next to writing the data.
MAX_DATA_BYTES = 8 << 20
# Layouts of more variables are written (and read) by HDF5 every time. Building an
# image is linear in the variable count (it once was quadratic: issue #16, 16,000
# scalars took 31 s) but costs one more HDF5 write of the layout's metadata (~0.2 ms
# per variable) on its first save; past this many, that would be seconds. (Layouts of
# more than ``_pack.PACK_MIN_VARIABLES`` are packed, format 2, and have no image: they
# have few datasets, which HDF5 writes fast.)
MAX_VARIABLES = 16384
_CACHE_SIZE = 16
_IOV_MAX = 512  # below every platform's IOV_MAX (1024 on Linux)

LayoutKey = tuple[object, ...]


def layout_key(
    names: Sequence[str],
    arrays: Mapping[str, np.ndarray],
    has_step: bool,
    writer: str,
    metadata_json: str,
) -> LayoutKey:
    """What determines a data file's metadata apart from the per-save values."""
    return (
        tuple((n, arrays[n].dtype.str, arrays[n].shape) for n in names),
        has_step,
        writer,
        len(metadata_json.encode("utf-8")),
    )


# ------------------------------------------------------------------ HDF5's checksum
def _load_checksum() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """HDF5's ``H5_checksum_metadata`` from the library h5py loaded, or None."""
    try:
        import h5py.h5

        fn = ctypes.CDLL(h5py.h5.__file__).H5_checksum_metadata
    except (OSError, AttributeError, ImportError):
        return None
    fn.restype = ctypes.c_uint32
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32]
    return fn


_checksum_fn = _load_checksum()


def _checksum(buf: bytearray, start: int, end: int) -> int:
    assert _checksum_fn is not None
    n = end - start
    return int(_checksum_fn((ctypes.c_char * n).from_buffer(buf, start), n, 0))


# ------------------------------------------------------------------ the image
@dataclass(frozen=True)
class _Piece:
    """A metadata piece of the file: ``data`` belongs at file offset ``offset``."""

    offset: int
    data: bytes


@dataclass(frozen=True, repr=False)
class MetadataImage:
    """Everything of one layout's data file except the per-save values and the arrays.

    Attributes:
        variables: ``(key, dtype, shape)`` of each variable, sorted by key.
        size_bytes: the file's length.
        pieces: the metadata between the data regions, in file order.
        regions: ``(file offset, key)`` of each dataset's data (the index under
            ``_format.INDEX_DATASET``), in file order; pieces and regions tile the file.
        fields: value name → ``(piece index, offset in piece, length)``.
        chunks: ``(piece index, start, end)`` of every object-header chunk a field lies
            in (checksum over ``[start, end)``, stored at ``end``).
    """

    variables: tuple[tuple[str, np.dtype, tuple[int, ...]], ...]
    size_bytes: int
    pieces: tuple[_Piece, ...]
    regions: tuple[tuple[int, str], ...]
    fields: Mapping[str, tuple[int, int, int]]
    chunks: tuple[tuple[int, int, int], ...]

    def __repr__(self) -> str:
        return (f"MetadataImage(size_bytes={self.size_bytes}, pieces={len(self.pieces)}, "
                f"regions={len(self.regions)}, fields={len(self.fields)})")

    def _patched(self, raw_fields: Mapping[str, bytes]) -> dict[int, bytearray]:
        """Copies of the pieces that hold fields, with ``raw_fields`` put in and their
        chunks' checksums recomputed."""
        patched: dict[int, bytearray] = {}
        for field, raw in raw_fields.items():
            index, at, length = self.fields[field]
            if len(raw) != length:
                raise ValueError(f"{field} is {len(raw)} bytes; the image holds {length}")
            buf = patched.get(index)
            if buf is None:
                buf = patched[index] = bytearray(self.pieces[index].data)
            buf[at : at + length] = raw
        for index, start, end in self.chunks:
            buf = patched[index]
            struct.pack_into("<I", buf, end, _checksum(buf, start, end))
        return patched

    def match(self, pieces: Sequence[bytes]) -> dict[str, bytes] | None:
        """The field values of a file whose metadata pieces (read at this image's piece
        offsets) are this image's with those values in, checksums included; None when
        the file differs anywhere else (then only HDF5 may read it)."""
        if len(pieces) != len(self.pieces):
            return None
        raw = {f: bytes(pieces[i][at : at + n]) for f, (i, at, n) in self.fields.items()}
        patched = self._patched(raw)
        for i, (mine, theirs) in enumerate(zip(self.pieces, pieces)):
            if patched.get(i, mine.data) != theirs:
                return None
        return raw

    def buffers(self, values: RootValues, names: Sequence[str],
                arrays: Mapping[str, np.ndarray]) -> list[bytes | bytearray | memoryview]:
        """The file's bytes in order: patched metadata pieces and the arrays' memory."""
        patched = self._patched(_field_bytes(values, names))
        data: dict[str, memoryview] = {
            n: _format.le_bytes(arrays[n]) for n in names if arrays[n].nbytes
        }
        data[_format.INDEX_DATASET] = _format.le_bytes(values.index)
        out: list[bytes | bytearray | memoryview] = []
        regions = iter(self.regions)
        region = next(regions, None)
        for index, piece in enumerate(self.pieces):
            while region is not None and region[0] < piece.offset:
                out.append(data[region[1]])
                region = next(regions, None)
            out.append(patched.get(index, piece.data))
        while region is not None:
            out.append(data[region[1]])
            region = next(regions, None)
        return out

    def write(self, path: str, values: RootValues, names: Sequence[str],
              arrays: Mapping[str, np.ndarray]) -> None:
        """Creates ``path`` exclusively and writes the file. Raises OSError."""
        bufs = self.buffers(values, names, arrays)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                     0o666)
        try:
            _write_all(fd, bufs)
        finally:
            os.close(fd)


def _write_all(fd: int, bufs: list[bytes | bytearray | memoryview]) -> None:
    """``writev`` of ``bufs`` in batches, finishing any short write."""
    for i in range(0, len(bufs), _IOV_MAX):
        batch = bufs[i : i + _IOV_MAX]
        want = sum(len(b) for b in batch)
        done = os.writev(fd, batch)
        if done == want:
            continue
        rest = memoryview(b"".join(bytes(b) for b in batch))[done:]
        while rest:
            rest = rest[os.write(fd, rest) :]


def _field_bytes(values: RootValues, names: Sequence[str]) -> dict[str, bytes]:
    out = {
        "created_unix_s": struct.pack("<d", values.created_unix_s),
        "metadata_json": values.metadata_json.encode("utf-8"),
        "index_hash": values.index_hash.encode("ascii"),
    }
    if values.global_step is not None:
        out["global_step"] = struct.pack("<q", values.global_step)
    for name, digest in zip(names, values.hashes):
        out["hash:" + name] = digest.encode("ascii")
    return out


# ------------------------------------------------------------------ building
def _sentinels(template: RootValues, names: Sequence[str]) -> RootValues:
    """Random values of the same sizes as ``template``'s."""

    def hex16() -> str:
        return secrets.token_hex(8)

    # Hash sentinels: one random prefix and the variable's number, so one scan for the
    # prefix finds them all (one search per sentinel was quadratic: issue #16).
    prefix = hex16()[:8]
    while True:
        created = struct.unpack("<d", secrets.token_bytes(8))[0]
        if np.isfinite(created):
            break
    meta_len = len(template.metadata_json.encode("utf-8"))
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    return RootValues(
        global_step=None if template.global_step is None
        else struct.unpack("<q", secrets.token_bytes(8))[0],
        created_unix_s=created,
        writer=template.writer,
        metadata_json="".join(secrets.choice(alphabet) for _ in range(meta_len)),
        hashes=[f"{prefix}{i:08x}" for i in range(len(names))],
        index=template.index,
        index_hash=hex16(),
    )


def _build_image(values: RootValues, names: Sequence[str], arrays: Mapping[str, np.ndarray],
                 paths: Mapping[str, str]) -> tuple[bytearray, dict[str, int | None]]:
    """The file HDF5 writes for this save, closed (closing trims the unused space at the
    end, as the plain writer's files are), in a scratch file in RAM where possible; the
    data regions stay holes."""
    stand_ins = {n: _stand_in(arrays[n]) for n in names}
    scratch = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    _sweep_scratch(scratch)
    fd, path = tempfile.mkstemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-", suffix=".h5",
                                dir=scratch)
    os.close(fd)
    os.unlink(path)  # H5Writer creates it exclusively
    try:
        w = H5Writer(path)
        try:
            _, where = write_layout(w, values, names, stand_ins, paths, raw=True)
        finally:
            w.close()
        with open(path, "rb") as f:
            return bytearray(f.read()), where
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


_SCRATCH_PREFIX = "ckptsync-image-"


def _sweep_scratch(scratch: str) -> None:
    """Removes the scratch files of processes killed while building an image (named
    ``ckptsync-image-<pid>-*.h5``; a process that is gone cannot have removed its own)."""
    try:
        names = os.listdir(scratch)
    except OSError:
        return
    for name in names:
        if not name.startswith(_SCRATCH_PREFIX):
            continue
        pid = name[len(_SCRATCH_PREFIX):].partition("-")[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(scratch, name))


def _stand_in(arr: np.ndarray) -> np.ndarray:
    """Zeros of ``arr``'s dtype and shape; non-scalars without memory (HDF5 only reads
    their dtype and shape)."""
    zero = np.zeros((), arr.dtype)
    return zero if arr.ndim == 0 else np.broadcast_to(zero, arr.shape)


def _locate(image: bytearray, raw: bytes) -> int | None:
    at = image.find(raw)
    if at < 0 or image.find(raw, at + 1) >= 0:
        return None
    return at


def _locate_all(image: bytearray, fields: Mapping[str, bytes],
                hash_prefix: bytes) -> dict[str, int] | None:
    """Where each field's sentinel lies in ``image`` (found exactly once, else None).
    The hash sentinels all start with ``hash_prefix``: one pass finds every occurrence
    of each (linear, not quadratic); the few root values are searched one by one."""
    out: dict[str, int] = {}
    by_raw: dict[bytes, str] = {}
    for field, raw in fields.items():
        if field.startswith("hash:"):
            by_raw[raw] = field
            continue
        at = _locate(image, raw)
        if at is None:
            return None
        out[field] = at
    if by_raw:
        width = len(next(iter(by_raw)))
        seen: set[str] = set()
        for m in re.finditer(re.escape(hash_prefix), image):
            hit = by_raw.get(bytes(image[m.start() : m.start() + width]))
            if hit is None:
                continue
            if hit in seen:
                return None  # twice: cannot tell which one is the value
            seen.add(hit)
            out[hit] = m.start()
        if len(seen) != len(by_raw):
            return None
    return out


def build(values: RootValues, names: Sequence[str], arrays: Mapping[str, np.ndarray],
          paths: Mapping[str, str], self_check: bool = True) -> MetadataImage | None:
    """Builds and self-checks the image of this layout; None where it cannot be used.
    ``self_check=False`` skips the second build and the comparison with it, for
    :func:`learn_file`, which compares the image with a file HDF5 wrote instead."""
    if _checksum_fn is None:
        return None
    a_values, b_values = _sentinels(values, names), _sentinels(values, names)
    a, where = _build_image(a_values, names, arrays, paths)
    b, where_b = (_build_image(b_values, names, arrays, paths) if self_check
                  else (a, where))
    if len(a) != len(b) or where != where_b:
        return None
    # Data regions, in file order.
    regions = sorted((off, key) for key, off in where.items() if off is not None)
    sizes = {n: arrays[n].nbytes for n in names}
    sizes[_format.INDEX_DATASET] = values.index.nbytes
    # Metadata pieces: the gaps between data regions.
    pieces: list[_Piece] = []
    at = 0
    for off, key in regions:
        if off < at:
            return None  # overlapping regions: not a layout we understand
        if off > at:
            pieces.append(_Piece(at, bytes(a[at:off])))
        at = off + sizes[key]
    if at > len(a):
        return None
    if at < len(a):
        pieces.append(_Piece(at, bytes(a[at:])))
    chunks = sorted(_ohdr_chunks(a, _checksum), key=lambda c: c.start)
    chunk_starts = [c.start for c in chunks]
    piece_starts = [p.offset for p in pieces]

    def chunk_of(start: int, end: int) -> Chunk | None:
        i = bisect.bisect_right(chunk_starts, start) - 1
        return chunks[i] if i >= 0 and end <= chunks[i].end else None

    def piece_of(start: int, end: int) -> int | None:
        i = bisect.bisect_right(piece_starts, start) - 1
        if i >= 0 and end <= pieces[i].offset + len(pieces[i].data):
            return i
        return None

    wanted = _field_bytes(a_values, names)
    found_at = _locate_all(a, wanted, a_values.hashes[0][:8].encode("ascii") if names else b"")
    if found_at is None:
        return None
    fields: dict[str, tuple[int, int, int]] = {}
    field_chunks: set[tuple[int, int, int]] = set()
    for field, raw in wanted.items():
        found = found_at[field]
        chunk = chunk_of(found, found + len(raw))
        if chunk is None:
            return None
        index = piece_of(chunk.start, chunk.end + 4)
        if index is None:
            return None
        piece_start = pieces[index].offset
        fields[field] = (index, found - piece_start, len(raw))
        field_chunks.add((index, chunk.start - piece_start, chunk.end - piece_start))
    variables = tuple((n, arrays[n].dtype, tuple(arrays[n].shape)) for n in names)
    image = MetadataImage(variables, len(a), tuple(pieces), tuple(regions), fields,
                          tuple(sorted(field_chunks)))
    if not self_check:
        return image
    # Self-check: image A with B's values must be HDF5's image B, byte for byte (data
    # regions aside: those are the arrays').
    zeros = {n: np.zeros(arrays[n].shape, arrays[n].dtype) for n in names}
    mine = b"".join(bytes(x) for x in image.buffers(b_values, names, zeros))
    theirs = bytearray(b)
    for off, key in regions:
        if key != _format.INDEX_DATASET:
            theirs[off : off + sizes[key]] = bytes(sizes[key])
    if mine != bytes(theirs):
        logger.debug("Metadata image self-check failed; this layout is written by HDF5.")
        return None
    return image


_cache: collections.OrderedDict[LayoutKey, MetadataImage | None] = collections.OrderedDict()
_cache_lock = threading.Lock()


def image_for(values: RootValues, names: Sequence[str], arrays: Mapping[str, np.ndarray],
              paths: Mapping[str, str], self_check: bool = True,
              build_new: bool = True) -> MetadataImage | None:
    """The (cached) image of this save's layout, building it on first use; None where
    the layout is written by HDF5 (too large, or an image could not be verified).
    ``self_check``: as :func:`build` (False only for a caller that matches the image
    against a file HDF5 wrote before using it); ``build_new=False``: only a cached,
    checked image, never a build."""
    if len(names) > MAX_VARIABLES or sum(arrays[n].nbytes for n in names) > MAX_DATA_BYTES:
        return None
    key = layout_key(names, arrays, values.global_step is not None, values.writer,
                     values.metadata_json)
    if not build_new:
        with _cache_lock:
            return _cache.get(key)
    # An unchecked image is cached apart (the writer never uses one); a checked one
    # serves both.
    keys = [key] if self_check else [key, (*key, "unchecked")]
    with _cache_lock:
        for k in keys:
            if k in _cache:
                _cache.move_to_end(k)
                return _cache[k]
    key = keys[-1]
    try:
        image = build(values, names, arrays, paths, self_check)
    except Exception as e:  # HDF5 refused something: the plain writer will say what
        logger.debug("No metadata image for this layout: %s", e)
        image = None
    with _cache_lock:
        _cache[key] = image
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return image


def learn_file(path: str, values: RootValues, names: Sequence[str],
               arrays: Mapping[str, np.ndarray], paths: Mapping[str, str]) -> MetadataImage | None:
    """The image of the layout of ``path`` (a file HDF5 wrote) if that file is the image
    with its own values put in, byte for byte (the check against a real file: one build,
    not two); then cached as checked, for the writer too. Else None. Never raises."""
    try:
        image = image_for(values, names, arrays, paths, self_check=False)
        if image is None:
            return None
        with open(path, "rb") as f:
            fd = f.fileno()
            if os.fstat(fd).st_size != image.size_bytes or image.match(
                    [os.pread(fd, len(p.data), p.offset) for p in image.pieces]) is None:
                return None
        key = layout_key(names, arrays, values.global_step is not None, values.writer,
                         values.metadata_json)
        with _cache_lock:
            _cache.pop((*key, "unchecked"), None)  # promoted: one entry per layout
            if _cache.get(key) is None:
                _cache[key] = image
                while len(_cache) > _CACHE_SIZE:
                    _cache.popitem(last=False)
        return image
    except Exception:  # an optimisation only: HDF5 keeps writing and reading the layout
        return None
