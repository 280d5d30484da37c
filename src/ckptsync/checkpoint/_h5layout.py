"""The HDF5 objects of one checkpoint, written through h5py's low-level API.

:func:`write_layout` is the one place that says what a data file contains (the root
attributes, one dataset per variable with its ``xxh3_64`` attribute, the index); both the
plain writer (``writer.write_checkpoint``) and the metadata images (``_image``) call it,
so the two cannot drift apart. The layout is specified in docs/checkpoint-format.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from . import _format

__all__ = ["H5Writer", "RootValues", "write_layout"]

_LIBVER_CONST = {
    "earliest": h5py.h5f.LIBVER_EARLIEST,
    "v108": h5py.h5f.LIBVER_V18,
    "v110": h5py.h5f.LIBVER_V110,
    "latest": h5py.h5f.LIBVER_LATEST,
}


class H5Writer:
    """Writes the HDF5 metadata of one checkpoint through h5py's low-level API.

    The file is the one ``h5py.File(path, "w-", libver=LIBVER, locking=False)`` plus
    ``create_dataset`` / ``attrs.create`` produce, call for call (same property lists,
    types, dataspaces, groups created in the same order), without the high-level
    wrappers' per-call overhead: property lists and HDF5 types are made once per file,
    and the groups that exist are tracked in a set instead of asked of HDF5.

    Args:
        path: the file to create exclusively.
    """

    def __init__(self, path: str):
        h5p, h5t = h5py.h5p, h5py.h5t
        fapl = h5p.create(h5p.FILE_ACCESS)
        low, high = (_LIBVER_CONST[v] for v in _format.LIBVER)
        fapl.set_libver_bounds(low, high)
        fapl.set_alignment(1, 1)
        fapl.set_file_locking(False, ignore_when_disabled=False)
        # Closing the file closes every object still open in it (an exception path may
        # leave some), so the raw writes below always follow HDF5's last write.
        fapl.set_fclose_degree(h5py.h5f.CLOSE_STRONG)
        # No sieve buffer: what HDF5 writes of a dataset's data it writes in H5Dwrite,
        # so a full disk fails that call. With one, the data was written when the
        # dataset closed, and a close failing there left an identifier HDF5 could not
        # free: the process crashed (SIGSEGV) when it was collected or at exit. (Big
        # arrays are written by ``pwrite`` or in one H5Dwrite each either way.)
        fapl.set_sieve_buf_size(0)
        fcpl = h5p.create(h5p.FILE_CREATE)
        fcpl.set_obj_track_times(False)
        self.fid = h5py.h5f.create(os.fsencode(path), h5py.h5f.ACC_EXCL, fapl=fapl, fcpl=fcpl)
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
        # metadata, and the caller puts the bytes at the offsets it allocated.
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


@dataclass(frozen=True)
class RootValues:
    """What a data file holds besides its arrays (docs/checkpoint-format.md).

    Attributes:
        global_step: the int64 root attribute, or None to omit it.
        created_unix_s: the float64 root attribute (seconds since the epoch).
        writer: the ``writer`` string, e.g. ``"ckptsync 0.1.0"``.
        metadata_json: the ``metadata_json`` string.
        hashes: each variable's ``xxh3_64`` attribute, in ``entries`` order.
        index: the index document's bytes, uint8 ``[n]``.
        index_hash: the index dataset's ``xxh3_64`` attribute.
        format_version: the ``ckptsync_format_version`` attribute (2 with a pack).
        pack_hash: the pack dataset's ``xxh3_64`` attribute (format 2 only).
        links: more root string attributes, ``(name, value)``, after ``metadata_json``
            (an incremental checkpoint's ``base``/``parent`` and their index hashes).
        extra: more datasets ``(path, array, xxh3_64)`` written by HDF5 after the pack
            and before the index (an incremental checkpoint's ``/_ckptsync/rows`` and
            ``/_ckptsync/changes``).
    """

    global_step: int | None
    created_unix_s: float
    writer: str
    metadata_json: str
    hashes: Sequence[str]
    index: np.ndarray
    index_hash: str
    format_version: int = _format.FORMAT_VERSION
    pack_hash: str = ""
    links: tuple[tuple[str, str], ...] = ()
    extra: tuple[tuple[str, np.ndarray, str], ...] = ()


def write_layout(
    w: H5Writer,
    values: RootValues,
    names: Sequence[str],
    arrays: Mapping[str, np.ndarray],
    paths: Mapping[str, str],
    raw: bool,
    pack: np.ndarray | None = None,
) -> tuple[list[tuple[int, np.ndarray]], dict[str, int | None]]:
    """Creates every object of one checkpoint in ``w``, in the documented order.

    Args:
        w: the open file.
        values: root attributes, hashes and index.
        names: the keys of the variables stored as datasets, sorted (the index order).
        arrays: key → normalized array (for ``raw`` non-scalars only dtype and shape
            are used: their bytes are left for the caller).
        paths: key → HDF5 dataset path (``_format.hdf5_paths``).
        raw: leave non-scalar variables' data unwritten (allocated, not filled).
        pack: format 2's uint8 pack (``_pack``), created after the variables: its bytes
            are written by HDF5 unless ``raw`` (then a stand-in whose bytes the caller
            writes at the returned offset); None for none.

    Returns:
        (the ``(file offset, array)`` pairs the caller must write, each dataset's data
        offset by key, with the index under ``_format.INDEX_DATASET`` and the pack under
        ``_format.PACK_DATASET``; None where a dataset has no data).
    """
    offsets: list[tuple[int, np.ndarray]] = []
    where: dict[str, int | None] = {}
    root = w.fid
    w.attr(root, b"ckptsync_format_version", np.asarray(np.int64(values.format_version)))
    if values.global_step is not None:
        w.attr(root, b"global_step", np.asarray(np.int64(values.global_step)))
    w.attr(root, b"created_unix_s", np.asarray(np.float64(values.created_unix_s)))
    w.str_attr(root, b"writer", values.writer)
    w.str_attr(root, b"metadata_json", values.metadata_json)
    for attr_name, text in values.links:
        w.str_attr(root, attr_name.encode("ascii"), text)
    hash_attr = _format.HASH_ATTR.encode("ascii")
    for name, digest in zip(names, values.hashes):
        arr = arrays[name]
        direct = raw and arr.ndim > 0  # scalars are written by HDF5
        dsid = w.dataset(paths[name].encode("ascii"), arr, direct)
        try:
            where[name] = dsid.get_offset() if arr.nbytes else None
            if direct and arr.nbytes:
                offsets.append((where[name], arr))  # type: ignore[arg-type]
            w.str_attr(dsid, hash_attr, digest)
        finally:
            dsid.close()
    if pack is not None:
        dsid = w.dataset(_format.PACK_DATASET.encode("ascii"), pack, raw and pack.nbytes > 0)
        try:
            where[_format.PACK_DATASET] = dsid.get_offset() if pack.nbytes else None
            w.str_attr(dsid, hash_attr, values.pack_hash)
        finally:
            dsid.close()
    for path, arr, digest in values.extra:
        dsid = w.dataset(path.encode("ascii"), arr, False)
        try:
            where[path] = dsid.get_offset() if arr.nbytes else None
            w.str_attr(dsid, hash_attr, digest)
        finally:
            dsid.close()
    dsid = w.dataset(_format.INDEX_DATASET.encode("ascii"), values.index, False)
    try:
        where[_format.INDEX_DATASET] = dsid.get_offset()
        w.str_attr(dsid, hash_attr, values.index_hash)
    finally:
        dsid.close()
    return offsets, where
