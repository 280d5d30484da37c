"""write_checkpoint: a dict of named numpy arrays → one immutable HDF5 file.

The layout is pinned in docs/checkpoint-format.md and by tests/checkpoint/test_layout.py
and test_pack.py. One write path: the metadata of a (format-1) layout saved before is
written from its image (``_image``, the same bytes HDF5 writes; tests compare both), all
other files through HDF5 (``_h5layout``), a large layout's small variables packed into
one dataset (``_pack``); the data is written straight from the arrays either way.

Also the checks a caller that hands arrays on to a writer later (the async writer)
runs up front: :func:`prepare_arrays`, :func:`check_global_step`,
:func:`metadata_json`, :func:`first_nonfinite`.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import h5py
import numpy as np

from ..errors import CkptsyncTypeError, CkptsyncValueError
from . import _format, _image, _pack
from ._atomic import publish
from ._format import first_nonfinite
from ._h5layout import H5Writer, RootValues, write_layout

__all__ = ["check_global_step", "first_nonfinite", "metadata_json", "prepare_arrays",
           "write_checkpoint"]


def _writer_name() -> str:
    try:
        return f"ckptsync {importlib.metadata.version('ckptsync')}"
    except importlib.metadata.PackageNotFoundError:
        return "ckptsync unknown"


WRITER = _writer_name()
MAX_METADATA_BYTES = 60 * 1024
METADATA_PAD_BYTES = 64


def check_global_step(global_step: Any) -> int | None:
    """``global_step`` as an int (None stays None).

    Raises:
        CkptsyncTypeError: not an int (bool included) or None.
        CkptsyncValueError: outside int64.
    """
    if global_step is None:
        return None
    if isinstance(global_step, (bool, np.bool_)) or not isinstance(global_step, (int, np.integer)):
        raise CkptsyncTypeError(
            f"global_step must be an int or None; got {type(global_step).__name__} {global_step!r}."
        )
    if not -(2**63) <= int(global_step) < 2**63:
        raise CkptsyncValueError(f"global_step {global_step} does not fit in int64.")
    return int(global_step)


def metadata_json(metadata: Mapping[str, Any] | None) -> str:
    """``metadata`` as the JSON text stored in the file (``"{}"`` for None).

    Raises:
        CkptsyncTypeError: not a mapping with str keys, or not JSON-serializable.
        CkptsyncValueError: over 60 KiB as JSON.
    """
    if metadata is None:
        return "{}"
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
        raise CkptsyncTypeError(
            f"metadata must be a mapping with str keys; got {type(metadata).__name__}."
        )
    try:
        text = json.dumps(dict(metadata), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise CkptsyncTypeError(f"metadata is not JSON-serializable: {e}") from e
    if len(text.encode("utf-8")) > MAX_METADATA_BYTES:
        raise CkptsyncValueError(
            f"metadata is {len(text.encode('utf-8'))} bytes as JSON; at most "
            f"{MAX_METADATA_BYTES} fit in an HDF5 attribute. Store large data as arrays."
        )
    return text


def _raw_writes_are_safe() -> bool:
    """False under a finite RLIMIT_FSIZE.

    Raw writes leave the data regions as holes when HDF5 closes the file, so HDF5 extends
    the file with ``ftruncate``. Only a file-size limit makes that fail (EFBIG; a full
    disk does not, holes take no space), and a failed close leaves HDF5 in a state that
    can crash the process later. There, HDF5 writes the data itself (slower, and it
    fails cleanly).
    """
    try:
        import resource
    except ImportError:  # not POSIX
        return False
    return resource.getrlimit(resource.RLIMIT_FSIZE)[0] == resource.RLIM_INFINITY


def _write_raw(path: str, offsets: list[tuple[int, np.ndarray]],
               pack_at: int | None = None, packed: Sequence[_format.IndexEntry] = (),
               arrays: Mapping[str, np.ndarray] | None = None) -> None:
    """Writes each array's little-endian C-order bytes at its dataset's file offset,
    and the packed variables' at the pack's (``pack_at``).

    One ``pwrite`` per variable (``pwritev`` per run of packed ones) straight from the
    arrays' memory (no copies, no HDF5 type-conversion buffers): as fast as
    ``ndarray.tofile``.
    """
    fd = os.open(path, os.O_WRONLY)
    try:
        for offset, arr in offsets:
            view = _format.le_bytes(arr)
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], offset + done)
        if pack_at is not None and arrays is not None:
            _pack.write_packed(fd, pack_at, packed, arrays)
    finally:
        os.close(fd)


def padded_metadata(meta: str) -> str:
    """``meta`` null-padded to a multiple of 64 bytes (as stored)."""
    return meta + "\0" * (-len(meta.encode("utf-8")) % METADATA_PAD_BYTES)


def prepare_arrays(arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Validates the keys and normalizes the values of ``arrays`` (C-contiguous ndarrays
    of a supported dtype, native byte order), as :func:`write_checkpoint` stores them.

    Raises:
        CkptsyncTypeError, CkptsyncValueError: as :func:`write_checkpoint`.
    """
    if not isinstance(arrays, Mapping):
        raise CkptsyncTypeError(
            f"arrays must be a mapping from key to array; got {type(arrays).__name__}."
        )
    keys = list(arrays)
    if not _format.valid_keys(keys):
        for k in keys:  # raises, naming the first bad key
            _format.validate_key(k)
    normalize = _format.normalize_array
    return {k: normalize(k, v) for k, v in arrays.items()}


def write_checkpoint(
    prefix: str | os.PathLike[str],
    arrays: Mapping[str, np.ndarray],
    global_step: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    sync_directory: bool = True,
) -> str:
    """Writes ``<prefix>.h5`` durably and atomically, as TF1's Saver writes its data files.

    Every key becomes a dataset at its path (``dense0/w`` → group ``dense0``, dataset
    ``w``), contiguous, C order, exact dtype (stored little-endian). A key that is also
    another key's scope (``dense0/w`` beside the slot ``dense0/w/Adam``) is stored as
    dataset ``dense0/w/:value``. In a layout of more than 1,024 variables, those of at
    most 64 KiB are packed into the one dataset ``/_ckptsync/pack`` instead (format
    version 2, ``_pack``; docs/checkpoint-format.md): 100,000 variables save in about a
    second, not a minute. The file is written
    to ``.<basename>.h5.tmp-<pid>-<n>`` in the same directory, flushed, closed, fsynced,
    renamed onto ``<prefix>.h5`` and the directory fsynced. An existing file of that name
    is replaced by a new inode, never rewritten, so open readers keep their old data.

    Args:
        prefix: the checkpoint's identity, e.g. ``"ckpts/model.ckpt-1200"``. A trailing
            ``.h5`` is accepted and not doubled. The directory must exist.
        arrays: key → value. Keys are TF op names (``[A-Za-z0-9.][A-Za-z0-9_.\\-/]*``,
            no empty/``.``/``..`` components); values are arrays of any shape (0-d and
            zero-size included) of bool, int8..int64, uint8..uint64, float16/32/64 or
            complex64/128. Non-contiguous values are written as C-order copies.
        global_step: stored as the int64 root attribute ``global_step``; omitted if None.
        metadata: JSON-serializable mapping with str keys, stored as ``metadata_json``.
        sync_directory: False skips the directory fsync after the rename, for a caller
            that rewrites the state file in the same directory right after (its temp
            file's fsync commits this rename on journaling file systems, and its
            directory fsync makes both durable), as ``Saver`` does.

    Returns:
        ``prefix`` as a str (without ``.h5``), as TF's ``Saver.save`` returns the prefix.

    Raises:
        CkptsyncTypeError: a key that is not a str, a value with an unsupported dtype
            (naming key and dtype), a non-int global_step, non-JSON metadata.
        CkptsyncValueError: an invalid key, oversized metadata or global_step.
        ResourceExhaustedError: disk full, quota, file too large.
        PermissionDeniedError: read-only file system or directory, no permission.
        DataLossError, UnknownError: another I/O failure (e.g. a failed fsync).
        On any failure the temp file is removed and existing files are left untouched.

    Thread-safety: safe to call concurrently for different prefixes.

    Example:
        >>> import numpy as np, ckptsync as cs
        >>> cs.checkpoint.write_checkpoint(
        ...     "ckpts/model.ckpt-5", {"dense0/w": np.ones((2, 3), np.float32)},
        ...     global_step=5)
        'ckpts/model.ckpt-5'
    """
    path = _format.data_path(os.fspath(prefix))
    step = check_global_step(global_step)
    meta = metadata_json(metadata)
    with _format.gc_paused():
        _write(path, arrays, step, meta, sync_directory)
    return path[: -len(_format.DATA_SUFFIX)]


def _write(path: str, arrays: Mapping[str, np.ndarray], step: int | None, meta: str,
           sync_directory: bool) -> None:
    prepared = prepare_arrays(arrays)
    entries, pack_nbytes = _pack.index_entries(sorted(prepared), prepared)
    version = _format.FORMAT_VERSION if pack_nbytes is None else _format.PACKED_FORMAT_VERSION
    index = _format.encode_index(entries, version)
    packed = [e for e in entries if e.pack is not None]
    stored = [e for e in entries if e.pack is None]  # each its own dataset
    names = [e.name for e in stored]
    paths = _format.hdf5_paths(names)

    # Null-padded to a multiple of 64 bytes (an HDF5 fixed-length string's own padding;
    # h5py reads it back without): saves whose metadata differs in length by a few
    # characters share one layout, and so one metadata image.
    meta = padded_metadata(meta)
    values = RootValues(
        global_step=step, created_unix_s=time.time(), writer=WRITER, metadata_json=meta,
        hashes=[e.xxh3_64 for e in stored], index=index,
        index_hash=_format.hash_array(index), format_version=version,
        pack_hash=_pack.pack_hash(packed, prepared) if packed else "")
    raw = _raw_writes_are_safe()
    # Images reproduce the raw-write layout, so they are used only where HDF5 would
    # write that layout too. A new layout is written by HDF5 and its image learnt from
    # that file (one more HDF5 build of the metadata, checked against the file). A
    # packed layout has few datasets: HDF5 writes it fast, every time.
    image = (_image.image_for(values, names, prepared, paths, build_new=False)
             if raw and pack_nbytes is None else None)

    def write(tmp: str) -> None:
        if image is not None:
            image.write(tmp, values, names, prepared)
            return
        write_h5(tmp, values, entries, prepared, raw, pack_nbytes)
        if raw and pack_nbytes is None:
            _image.learn_file(tmp, values, names, prepared, paths)

    publish(path, write, "write checkpoint", sync_directory=sync_directory)


def write_h5(tmp: str, values: RootValues, entries: Sequence[_format.IndexEntry],
             prepared: Mapping[str, np.ndarray], raw: bool, pack_nbytes: int | None) -> None:
    """Creates ``tmp`` through HDF5 (``_h5layout.write_layout``) holding ``entries``
    (sorted; those with a pack offset packed), then, when ``raw``, writes the data with
    ``pwrite`` at the offsets HDF5 allocated. ``values.hashes`` are the non-packed
    entries' hashes. Raises OSError or h5py's errors."""
    packed = [e for e in entries if e.pack is not None]
    names = [e.name for e in entries if e.pack is None]
    paths = _format.hdf5_paths(names)
    pack = None
    if pack_nbytes is not None:
        pack = _pack.stand_in(pack_nbytes) if raw else _pack.joined(packed, prepared)
    w = H5Writer(tmp)
    try:
        offsets, where = write_layout(w, values, names, prepared, paths, raw, pack)
        h5py.h5f.flush(w.fid)
    finally:
        w.close()
    pack_at = where.get(_format.PACK_DATASET) if raw else None
    _write_raw(tmp, offsets, pack_at, packed, prepared)
