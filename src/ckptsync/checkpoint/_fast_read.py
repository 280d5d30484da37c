"""Reading a checkpoint of a known layout without HDF5: the reading half of ``_image``.

After HDF5 has read a file (``CheckpointReader``), :func:`learn` builds (or finds) the
metadata image of that file's layout and keeps it if the file matches it. A later file
of the same size is read by :func:`read_known`: its metadata pieces are read with
``pread`` and must equal the image's byte for byte once the file's own field values
(step, time, metadata, hashes) are put in and the object-header checksums recomputed
with HDF5's own function; a file that differs anywhere else is left to HDF5. Then the
index is checked against its hash and against the per-dataset hashes, and every variable
is read with ``preadv`` into its array (:mod:`._bulk_read`) and checked against its index
hash.

Whatever is unexpected (no match, a bad hash, a missing key, a short read) returns None,
and the caller reads through HDF5, which reports the problem exactly as it always does.

Thread-safety: both functions may be called from several threads.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import h5py
import numpy as np
import xxhash

from . import _bulk_read, _format, _image
from ._h5layout import RootValues

__all__ = ["learn", "read_known"]

_RECENT = 8
_recent: list[_image.MetadataImage] = []
_lock = threading.Lock()


def learn(reader: Any) -> None:
    """Remembers the image of the layout of the file ``reader`` (an open
    ``CheckpointReader``) has read, if that file matches it. Never raises."""
    if sys.byteorder != "little" or reader.format_version != _format.FORMAT_VERSION \
            or reader.predecessor is not None:
        # Images are of plain format-1 layouts (a packed file has few datasets; one with
        # a parent has more attributes and datasets than the index describes).
        return
    try:
        entries = [reader._index[n] for n in sorted(reader._index)]
        fid = reader._file.id
        meta_len = h5py.h5a.open(fid, b"metadata_json").get_type().get_size()
        arrays = {e.name: np.zeros(e.shape, e.dtype) if not e.shape
                  else np.broadcast_to(np.zeros((), e.dtype), e.shape) for e in entries}
        names = [e.name for e in entries]
        index = _format.encode_index(entries)
        values = RootValues(
            global_step=reader.global_step, created_unix_s=0.0, writer=reader.writer,
            metadata_json="x" * meta_len, hashes=[e.xxh3_64 for e in entries], index=index,
            index_hash=_format.hash_array(index))
        # One HDF5 build, kept only if the file HDF5 wrote (the one just read) matches.
        image = _image.learn_file(reader.path, values, names, arrays, _format.hdf5_paths(names))
        if image is None:
            return
        with _lock:
            _recent[:] = [image, *(i for i in _recent if i is not image)]
            del _recent[_RECENT:]
    except Exception:  # an optimisation only: HDF5 keeps reading such files
        return


def _match(fd: int, image: _image.MetadataImage) -> dict[str, bytes] | None:
    pieces = [os.pread(fd, len(p.data), p.offset) for p in image.pieces]
    return image.match(pieces)


def read_known(
    path: str,
    names: Sequence[str] | None,
    verify: bool,
    outs_for: Callable[[list[_format.IndexEntry]], list[np.ndarray]] | None = None,
    verify_first: bool = False,
) -> dict[str, np.ndarray] | None:
    """Reads ``names`` (None: all, sorted) of data file ``path`` if its layout is a
    learned one; None otherwise (and on any problem: the caller uses HDF5).

    Args:
        path: the ``.h5`` file.
        names: keys to read, in order.
        verify: check each variable's bytes against its index hash.
        outs_for: given the entries to read, returns C-contiguous arrays of their
            shapes and dtypes to read into (default: new arrays).
        verify_first: check every variable before writing into any array (see
            ``read_checkpoint_into``).
    """
    with _lock:
        candidates = list(_recent)
    if not candidates:
        return None
    try:
        # Non-blocking: a FIFO in a checkpoint's place must not hang the reader.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return _read(fd, candidates, names, verify, outs_for, verify_first)
    except (OSError, ValueError, _bulk_read.ShortRead, _bulk_read.Mismatch, _bulk_read.Changed):
        return None
    finally:
        os.close(fd)


def _read(fd: int, candidates: list[_image.MetadataImage], names: Sequence[str] | None,
          verify: bool,
          outs_for: Callable[[list[_format.IndexEntry]], list[np.ndarray]] | None,
          verify_first: bool) -> dict[str, np.ndarray] | None:
    size = os.fstat(fd).st_size
    for image in candidates:
        if image.size_bytes == size:
            raw = _match(fd, image)
            if raw is not None:
                break
    else:
        return None
    # What CheckpointReader refuses in the header, refused here too (then HDF5 says so).
    meta = json.loads(raw["metadata_json"].rstrip(b"\0").decode("utf-8"))
    if not isinstance(meta, dict):
        return None
    offsets = {key: off for off, key in image.regions}
    index_at = offsets.get(_format.INDEX_DATASET)
    if index_at is None:
        return None
    index_len = min([off for off, _ in image.regions if off > index_at]
                    + [p.offset for p in image.pieces if p.offset > index_at] + [size]) - index_at
    index_raw = os.pread(fd, index_len, index_at)
    if xxhash.xxh3_64_hexdigest(index_raw) != raw["index_hash"].decode("ascii"):
        return None
    entries = _format.decode_index(index_raw)
    # (Little-endian hosts only: the image's '<f4' equals the index's native float32.)
    if [(e.name, e.dtype, e.shape) for e in entries.values()] != list(image.variables):
        return None
    if any(e.xxh3_64 != raw["hash:" + n].decode("ascii") for n, e in entries.items()):
        return None
    wanted = sorted(entries) if names is None else list(names)
    if any(n not in entries for n in wanted):
        return None
    chosen = [entries[n] for n in wanted]
    if any(e.nbytes and e.name not in offsets for e in chosen):
        return None
    outs = outs_for(chosen) if outs_for is not None else [
        np.empty(e.shape, e.dtype) for e in chosen]
    _bulk_read.read_spans(fd, [
        _bulk_read.Span(offsets.get(e.name, 0),
                        memoryview(out.reshape(-1).view(np.uint8)),  # type: ignore[arg-type]
                        e.xxh3_64 if verify else None)
        for e, out in zip(chosen, outs)], verify_first and verify)
    return dict(zip(wanted, outs))
