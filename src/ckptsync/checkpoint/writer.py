"""write_checkpoint: a dict of named numpy arrays → one immutable HDF5 file.

The layout is pinned in docs/checkpoint-format.md and by tests/checkpoint/test_layout.py.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import time
from collections.abc import Mapping
from typing import Any

import h5py
import numpy as np

from ..errors import CkptsyncTypeError, CkptsyncValueError
from . import _format
from ._atomic import publish

__all__ = ["write_checkpoint"]


def _writer_name() -> str:
    try:
        return f"ckptsync {importlib.metadata.version('ckptsync')}"
    except importlib.metadata.PackageNotFoundError:
        return "ckptsync unknown"


WRITER = _writer_name()
MAX_METADATA_BYTES = 60 * 1024


def check_global_step(global_step: Any) -> int | None:
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
    if metadata is None:
        return "{}"
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
        raise CkptsyncTypeError(
            f"metadata must be a mapping with str keys; got {type(metadata).__name__}."
        )
    try:
        text = json.dumps(dict(metadata), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise CkptsyncTypeError(f"metadata is not JSON-serializable: {e}") from e
    if len(text.encode("utf-8")) > MAX_METADATA_BYTES:
        raise CkptsyncValueError(
            f"metadata is {len(text.encode('utf-8'))} bytes as JSON; at most "
            f"{MAX_METADATA_BYTES} fit in an HDF5 attribute. Store large data as arrays."
        )
    return text


class _H5Writer:
    """Writes the HDF5 metadata of one checkpoint through h5py's low-level API.

    The file is the one ``h5py.File(path, "w-", libver=LIBVER, locking=False)`` plus
    ``create_dataset`` / ``attrs.create`` produce, call for call (same property lists,
    types, dataspaces, groups created in the same order), without the high-level
    wrappers' per-call overhead: property lists and HDF5 types are made once per file,
    and the groups that exist are tracked in a set instead of asked of HDF5.
    """

    def __init__(self, tmp: str):
        h5p, h5t = h5py.h5p, h5py.h5t
        fapl = h5p.create(h5p.FILE_ACCESS)
        low, high = (_LIBVER_CONST[v] for v in _format.LIBVER)
        fapl.set_libver_bounds(low, high)
        fapl.set_alignment(1, 1)
        fapl.set_file_locking(False, ignore_when_disabled=False)
        # Closing the file closes every object still open in it (an exception path may
        # leave some), so the raw writes below always follow HDF5's last write.
        fapl.set_fclose_degree(h5py.h5f.CLOSE_STRONG)
        fcpl = h5p.create(h5p.FILE_CREATE)
        fcpl.set_obj_track_times(False)
        self.fid = h5py.h5f.create(os.fsencode(tmp), h5py.h5f.ACC_EXCL, fapl=fapl, fcpl=fcpl)
        # h5py's create_group: intermediate groups allowed, ASCII link names (keys are
        # ASCII), no timestamps.
        self.lcpl = h5p.create(h5p.LINK_CREATE)
        self.lcpl.set_create_intermediate_group(True)
        self.lcpl.set_char_encoding(h5t.CSET_ASCII)
        self.gcpl = h5p.create(h5p.GROUP_CREATE)
        self.gcpl.set_obj_track_times(False)
        # create_dataset(data=...) (scalars, the index, and everything without raw writes).
        self.dcpl_data = h5p.create(h5p.DATASET_CREATE)
        self.dcpl_data.set_obj_track_times(False)
        # Contiguous, space allocated at creation and never filled: HDF5 writes only the
        # metadata, and _write_raw puts the bytes at the offsets it allocated.
        self.dcpl_raw = h5p.create(h5p.DATASET_CREATE)
        self.dcpl_raw.set_layout(h5py.h5d.CONTIGUOUS)
        self.dcpl_raw.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        self.dcpl_raw.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        self.dcpl_raw.set_obj_track_times(False)
        self.groups: set[bytes] = set()
        self._types: dict[np.dtype, tuple[Any, Any]] = {}
        self._str_types: dict[int, tuple[np.dtype, Any, Any]] = {}
        self._scalar = h5py.h5s.create(h5py.h5s.SCALAR)

    def close(self) -> None:
        self.fid.close()

    def _types_of(self, dtype: np.dtype) -> tuple[Any, Any]:
        """(file type, memory type) as h5py makes them: ``py_create(dt, logical=True)``
        for the file and ``py_create(dt)`` for the memory buffer."""
        found = self._types.get(dtype)
        if found is None:
            h5t = h5py.h5t
            found = self._types[dtype] = (h5t.py_create(dtype, logical=True), h5t.py_create(dtype))
        return found

    def attr(self, loc: Any, name: bytes, value: np.ndarray) -> None:
        """A scalar numeric attribute, as ``attrs[name] = np.int64(...)`` makes it."""
        ftype, mtype = self._types_of(value.dtype)
        attr = h5py.h5a.create(loc, name, ftype, self._scalar)
        try:
            attr.write(value, mtype=mtype)
        finally:
            attr.close()

    def str_attr(self, loc: Any, name: bytes, value: str) -> None:
        # Fixed-length UTF-8, stored in the (checksummed) object header. Variable-length
        # strings would live in the global heap, which has no checksum: a flipped byte
        # there can make HDF5 spin forever.
        data = value.encode("utf-8")
        found = self._str_types.get(len(data))
        if found is None:
            dt = h5py.string_dtype("utf-8", len(data))
            found = (dt, h5py.h5t.py_create(dt, logical=True), h5py.h5t.py_create(dt))
            self._str_types[len(data)] = found
        dt, ftype, mtype = found
        attr = h5py.h5a.create(loc, name, ftype, self._scalar)
        try:
            attr.write(np.asarray(np.bytes_(data), dtype=dt), mtype=mtype)
        finally:
            attr.close()

    def require_parent(self, path: bytes) -> None:
        """Creates the parent group of ``path`` (and its ancestors) unless it exists."""
        parent, sep, _ = path.rpartition(b"/")
        if not sep or parent in self.groups:
            return
        h5py.h5g.create(self.fid, parent, lcpl=self.lcpl, gcpl=self.gcpl).close()
        # Intermediate groups were created with it.
        parts = parent.split(b"/")
        self.groups.update(b"/".join(parts[:i]) for i in range(1, len(parts) + 1))

    def dataset(self, path: bytes, arr: np.ndarray, raw: bool) -> Any:
        """Creates the dataset at ``path``; writes ``arr`` through HDF5 unless ``raw``.
        Returns the open dataset id (the caller closes it)."""
        self.require_parent(path)
        ftype, _ = self._types_of(arr.dtype)
        space = self._scalar if arr.ndim == 0 else h5py.h5s.create_simple(arr.shape)
        dcpl = self.dcpl_raw if raw else self.dcpl_data
        dsid = h5py.h5d.create(self.fid, path, ftype, space, dcpl=dcpl)
        if not raw:
            try:
                dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, arr)
            except BaseException:
                dsid.close()
                raise
        return dsid


_LIBVER_CONST = {
    "earliest": h5py.h5f.LIBVER_EARLIEST,
    "v108": h5py.h5f.LIBVER_V18,
    "v110": h5py.h5f.LIBVER_V110,
    "latest": h5py.h5f.LIBVER_LATEST,
}


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


def _write_raw(path: str, offsets: list[tuple[int, np.ndarray]]) -> None:
    """Writes each array's little-endian C-order bytes at its dataset's file offset.

    One ``pwrite`` per variable straight from the array's memory (no copies, no HDF5
    type-conversion buffers): as fast as ``ndarray.tofile``.
    """
    fd = os.open(path, os.O_WRONLY)
    try:
        for offset, arr in offsets:
            view = _format.le_bytes(arr)
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], offset + done)
    finally:
        os.close(fd)


def _prepare(arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
    if not isinstance(arrays, Mapping):
        raise CkptsyncTypeError(
            f"arrays must be a mapping from key to array; got {type(arrays).__name__}."
        )
    out = {_format.validate_key(k): _format.normalize_array(k, v) for k, v in arrays.items()}
    return out


def write_checkpoint(
    prefix: str | os.PathLike[str],
    arrays: Mapping[str, np.ndarray],
    global_step: int | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> str:
    """Writes ``<prefix>.h5`` durably and atomically, as TF1's Saver writes its data files.

    Every key becomes a dataset at its path (``dense0/w`` → group ``dense0``, dataset
    ``w``), contiguous, C order, exact dtype (stored little-endian). A key that is also
    another key's scope (``dense0/w`` beside the slot ``dense0/w/Adam``) is stored as
    dataset ``dense0/w/:value``. The file is written
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
        ...     str(tmp / "model.ckpt-5"), {"dense0/w": np.ones((2, 3), np.float32)},
        ...     global_step=5)  # doctest: +SKIP
        '.../model.ckpt-5'
    """
    path = _format.data_path(os.fspath(prefix))
    prefix_str = path[: -len(_format.DATA_SUFFIX)]
    step = check_global_step(global_step)
    meta = metadata_json(metadata)
    prepared = _prepare(arrays)
    entries = [_format.entry_for(k, prepared[k]) for k in sorted(prepared)]
    index = _format.encode_index(entries)
    paths = _format.hdf5_paths(list(prepared))

    raw = _raw_writes_are_safe()

    def write(tmp: str) -> None:
        offsets: list[tuple[int, np.ndarray]] = []
        w = _H5Writer(tmp)
        try:
            root = w.fid
            w.attr(root, b"ckptsync_format_version", np.asarray(np.int64(_format.FORMAT_VERSION)))
            if step is not None:
                w.attr(root, b"global_step", np.asarray(np.int64(step)))
            w.attr(root, b"created_unix_s", np.asarray(np.float64(time.time())))
            w.str_attr(root, b"writer", WRITER)
            w.str_attr(root, b"metadata_json", meta)
            hash_attr = _format.HASH_ATTR.encode("ascii")
            for entry in entries:
                arr = prepared[entry.name]
                direct = raw and arr.ndim > 0  # scalars are written by HDF5
                dsid = w.dataset(paths[entry.name].encode("ascii"), arr, direct)
                try:
                    if direct and arr.nbytes:
                        offsets.append((dsid.get_offset(), arr))
                    w.str_attr(dsid, hash_attr, entry.xxh3_64)
                finally:
                    dsid.close()
            dsid = w.dataset(_format.INDEX_DATASET.encode("ascii"), index, False)
            try:
                w.str_attr(dsid, hash_attr, _format.hash_array(index))
            finally:
                dsid.close()
            h5py.h5f.flush(w.fid)
        finally:
            w.close()
        _write_raw(tmp, offsets)

    publish(path, write, "write checkpoint")
    return prefix_str
