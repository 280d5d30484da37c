"""Low-level reading for :class:`~ckptsync.checkpoint.reader.CheckpointReader`.

Holds the attribute and dataset fast paths (h5py's low-level API, no high-level
wrappers), the checks of a dataset against its index entry, and the tensor reads:
``preadv`` on HDF5's own descriptor (:mod:`._bulk_read`: through a cache-sized buffer,
hashed there), or from one region read, with ``verify``. :class:`_ReadIO` is the base of ``CheckpointReader``, which sets the
attributes it declares; nothing else uses this module.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any, NamedTuple

import h5py
import numpy as np
import xxhash

from ..errors import CkptsyncError, CkptsyncRuntimeError, DataLossError, OpError
from . import _bulk_read, _format, _pack

# Data bytes on disk are little-endian C order; on little-endian hosts they are read
# into the output array (through a buffer small enough to hash from the CPU cache).
_RAW_READS = sys.byteorder == "little" and hasattr(os, "preadv")
# Variables whose data lies within this many bytes of each other (and fill at least half
# of the span, give or take the slack) are read with one preadv and hashed from memory.
_REGION_BYTES = 4 << 20
_REGION_SLACK = 64 << 10
_INT64 = np.dtype("<i8")
_FLOAT64 = np.dtype("<f8")
_HASH_DTYPE = h5py.string_dtype("utf-8", 16)
_ATTR_TYPES: dict[tuple[str, int | None], tuple[Any, Any]] = {}


_TYPES_BY_ID: dict[int, tuple[np.dtype, tuple[Any, Any]]] = {}


def _attr_types(dtype: np.dtype) -> tuple[Any, Any]:
    """(file type, memory type) h5py uses for an attribute of ``dtype``, made once.

    Looked up by the dtype object first (numpy's builtin dtypes and this module's
    constants are singletons; the entry keeps its dtype alive, so the id is not reused):
    ``check_string_dtype`` costs ~10 us, per variable that was a tenth of a read."""
    hit = _TYPES_BY_ID.get(id(dtype))
    if hit is not None and hit[0] is dtype:
        return hit[1]
    info = h5py.check_string_dtype(dtype)
    key = (dtype.str, None) if info is None else (info.encoding, info.length)
    found = _ATTR_TYPES.get(key)
    if found is None:
        found = (h5py.h5t.py_create(dtype, logical=True), h5py.h5t.py_create(dtype))
        _ATTR_TYPES[key] = found
    if len(_TYPES_BY_ID) < 256:
        _TYPES_BY_ID[id(dtype)] = (dtype, found)
    return found


class _Plan(NamedTuple):
    """A checked dataset: its entry, the file offset of its bytes (None when it has
    none), and its low-level id when HDF5 itself must read it (else None)."""

    name: str
    entry: _format.IndexEntry
    offset: int | None
    ds: Any


class _LowLevelParent(NamedTuple):
    """What h5py.AttributeManager needs of its parent: the low-level id."""

    id: Any


class _ReadIO:
    """The reading half of ``CheckpointReader``: methods over the open file's state."""

    _path: str
    _file: h5py.File | None
    _fd: int | None
    _size_bytes: int
    _stored: dict[str, _format.IndexEntry]  # what the file stores (the index's entries)
    _paths: dict[str, bytes]
    _pack_at: int | None  # file offset of the pack's bytes (format 2), else None

    def _loss(self, what: str, name: str | None = None) -> OpError:
        var = f" variable {name!r}:" if name is not None else ""
        return DataLossError(None, None, f"Checkpoint file {self._path} is corrupt:{var} {what}")

    def _attr(self, loc: Any, name: str, expect: np.dtype | None = None) -> Any:
        """Returns attribute ``name`` of ``loc`` (a low-level id) as h5py's ``attrs.get``
        does, or None when absent.

        An attribute that is a scalar of exactly the HDF5 type h5py makes for ``expect``
        (or, for ``expect`` None, any fixed-length UTF-8 string) is read without the
        high-level wrappers; anything else goes through h5py.AttributeManager.
        """
        key = name.encode("ascii")
        try:
            attr = h5py.h5a.open(loc, key)
        except KeyError:  # absent (one call instead of H5Aexists + H5Aopen)
            return None
        try:
            tid = attr.get_type()
            if expect is None and tid.get_class() == h5py.h5t.STRING and not tid.is_variable_str():
                expect = h5py.string_dtype("utf-8", tid.get_size())
            if expect is not None:
                ftype, mtype = _attr_types(expect)
                if (
                    tid.equal(ftype)
                    and attr.get_space().get_simple_extent_type() == h5py.h5s.SCALAR
                ):
                    arr = np.zeros((), dtype=expect)
                    attr.read(arr, mtype=mtype)
                    return arr[()]
        finally:
            attr.close()
        return h5py.AttributeManager(_LowLevelParent(loc)).get(name)

    def _open_dataset(self, path: bytes) -> Any:
        """Returns the low-level dataset id at ``path``, or None if there is no dataset
        there (as ``Group.get`` returning something other than a Dataset)."""
        assert self._file is not None
        try:
            # H5Dopen: one call, half the cost of H5Oopen plus a type check; it raises
            # KeyError for a group as for nothing.
            return h5py.h5d.open(self._file.id, path)
        except KeyError:
            return None

    def _hash_attr(self, ds: Any, name: str | None) -> str:
        digest = self._attr(ds, _format.HASH_ATTR, _HASH_DTYPE)
        if isinstance(digest, bytes):
            digest = digest.decode("ascii", "replace")
        if not isinstance(digest, str):
            raise self._loss("dataset has no xxh3_64 attribute", name)
        return digest

    def _plan(self, ds: Any, entry: _format.IndexEntry, verify: bool, name: str) -> _Plan:
        """Checks a dataset against its index entry; returns where its bytes are.

        ``ds`` is a low-level dataset id; it is only needed again when the data cannot
        be read with ``preadv`` (then ``offset`` is None and ``ds`` is kept).
        """
        shape = ds.shape
        if shape != entry.shape:
            raise self._loss(
                f"dataset shape {list(shape or ())} != index {list(entry.shape)}", name
            )
        # The HDF5 type the writer (and h5py) makes for the index's dtype, compared in
        # HDF5: converting the dataset's type to numpy costs twice as much.
        if not ds.get_type().equal(_attr_types(entry.dtype)[0]):
            dtype = ds.dtype
            if dtype.name != entry.dtype.name or dtype.byteorder == ">":
                raise self._loss(f"dataset dtype {dtype.str} != index {entry.dtype.name}", name)
        offset = None
        if entry.nbytes:
            # H5Dget_offset is defined only for contiguous storage in this file (no
            # chunks, so no filters; no external files): None means anything else.
            # (Asking the creation property list instead costs ~100 us per dataset.)
            offset = ds.get_offset()
            if offset is None:
                plist = ds.get_create_plist()
                if plist.get_layout() != h5py.h5d.CONTIGUOUS or plist.get_nfilters():
                    raise self._loss("dataset is not stored contiguously and unfiltered", name)
            if offset is None or offset + entry.nbytes > self._size_bytes:
                raise self._loss(
                    f"data at offset {offset} + {entry.nbytes} bytes lies outside the "
                    f"{self._size_bytes}-byte file (truncated?)",
                    name,
                )
        if verify and self._hash_attr(ds, name) != entry.xxh3_64:
            raise self._loss("xxh3_64 attribute disagrees with the index", name)
        direct = self._fd is not None or not entry.nbytes
        return _Plan(name, entry, offset, None if direct else ds)

    def _read_planned(self, plans: list[_Plan], verify: bool,
                      outs: list[np.ndarray] | None = None,
                      verify_first: bool = False) -> list[np.ndarray]:
        """Reads and (with ``verify``) checks planned datasets, in order.

        When the data of all of them lies in a small region of the file, the region is
        read with one ``preadv`` and each variable copied and hashed from memory; larger
        data is read through :mod:`._bulk_read` (hashed in cache-sized chunks). With
        ``verify_first`` (and ``verify``) every variable is checked before any byte of
        ``outs`` is written.
        """
        if outs is None:
            outs = [np.empty(p.entry.shape, dtype=p.entry.dtype) for p in plans]
        region: tuple[int, memoryview] | None = None
        spans = [(p.offset, p.entry.nbytes) for p in plans if p.offset is not None and p.ds is None]
        if len(spans) > 1:
            lo = min(off for off, _ in spans)
            hi = max(off + n for off, n in spans)
            total = sum(n for _, n in spans)
            if hi - lo <= _REGION_BYTES and hi - lo <= 2 * total + _REGION_SLACK:
                buf = _bulk_read.aligned_buffer(hi - lo, lo)  # a fast kernel copy
                try:
                    if self._pread_into(buf, lo) == hi - lo:
                        region = (lo, buf)
                except OSError:  # read each variable on its own; errors name it
                    region = None
        if region is None and self._fd is not None:
            self._read_bulk(plans, outs, verify, verify_first)
            return outs
        hash_now = verify and not verify_first
        if verify and verify_first:
            for plan in plans:
                self._check_first(plan, region)
        for plan, out in zip(plans, outs):
            try:
                digest = self._read_one(plan, out, region, hash_now)
            except CkptsyncError:
                raise
            except Exception as e:
                raise self._loss(f"HDF5 read failed ({type(e).__name__}: {e})", plan.name) from e
            if hash_now:
                entry = plan.entry
                actual = digest if digest is not None else _format.hash_array(out)
                if actual != entry.xxh3_64:
                    raise self._mismatch(plan, actual)
        return outs

    def _mismatch(self, plan: _Plan, actual: str) -> OpError:
        entry = plan.entry
        return self._loss(
            f"checksum mismatch: xxh3_64 {actual} != expected {entry.xxh3_64} "
            f"({entry.nbytes} bytes of {entry.dtype.name} {list(entry.shape)})",
            plan.name,
        )

    def _read_bulk(self, plans: list[_Plan], outs: list[np.ndarray], verify: bool,
                   verify_first: bool) -> None:
        """Reads every plan with ``preadv`` through :func:`._bulk_read.read_spans`."""
        assert self._fd is not None
        spans = [_bulk_read.Span(p.offset or 0,
                                 memoryview(out.reshape(-1).view(np.uint8)),  # type: ignore[arg-type]
                                 p.entry.xxh3_64 if verify else None)
                 for p, out in zip(plans, outs)]
        try:
            _bulk_read.read_spans(self._fd, spans, verify_first and verify)
        except _bulk_read.ShortRead as e:
            raise self._loss(f"file ends inside the data at byte {e.at}",
                             plans[e.index].name) from None
        except _bulk_read.Mismatch as e:
            raise self._mismatch(plans[e.index], e.actual) from None
        except _bulk_read.Changed:
            raise self._loss("the file changed while it was read (modified in place?)") from None
        except OSError as e:
            raise self._loss(f"read failed ({type(e).__name__}: {e})") from e

    def _check_first(self, plan: _Plan, region: tuple[int, memoryview] | None) -> None:
        """Checks one planned variable's hash without writing its output (the first pass
        of ``verify_first`` where HDF5 reads, or where the region is in memory)."""
        entry = plan.entry
        try:
            if plan.offset is None:  # zero-size
                actual = xxhash.xxh3_64_hexdigest(b"")
            elif plan.ds is not None:  # HDF5 reads (and converts) it
                tmp = np.empty(entry.shape, entry.dtype)
                plan.ds.read(h5py.h5s.ALL, h5py.h5s.ALL, tmp)
                actual = _format.hash_array(tmp)
            else:
                assert region is not None
                start = plan.offset - region[0]
                actual = xxhash.xxh3_64_hexdigest(region[1][start : start + entry.nbytes])
        except Exception as e:
            raise self._loss(f"HDF5 read failed ({type(e).__name__}: {e})", plan.name) from e
        if actual != entry.xxh3_64:
            raise self._mismatch(plan, actual)

    def _read_one(
        self,
        plan: _Plan,
        out: np.ndarray,
        region: tuple[int, memoryview] | None,
        verify: bool,
    ) -> str | None:
        """Fills ``out`` (HDF5 reads it, or from the region read); returns the digest
        of the bytes read, or None if not hashed."""
        offset = plan.offset
        if offset is None:  # zero-size
            return None
        if plan.ds is not None:  # no preadv here: HDF5 reads (and converts) it
            plan.ds.read(h5py.h5s.ALL, h5py.h5s.ALL, out)
            return None
        assert region is not None
        start = offset - region[0]
        src = region[1][start : start + plan.entry.nbytes]
        out.reshape(-1).view(np.uint8)[:] = src
        return xxhash.xxh3_64_hexdigest(src) if verify else None

    def _pread_into(self, view: memoryview, offset: int) -> int:
        """Fills ``view`` from the file at ``offset``; returns the bytes read (fewer only
        at the end of the file)."""
        assert self._fd is not None
        pos, total = 0, len(view)
        while pos < total:
            got = os.preadv(self._fd, [view[pos:]], offset + pos)
            if got <= 0:
                break
            pos += got
        return pos

    def _read_tensors(self, names: list[str], verify: bool,
                      outs: list[np.ndarray] | None = None,
                      verify_first: bool = False) -> list[np.ndarray]:
        """Reads listed variables in order; the first damaged one raises (as reading
        them one by one with get_tensor would; in a format-2 file, the packed variables
        are read and checked first). ``outs``: C-contiguous arrays of the index's shapes
        and dtypes to read into, instead of new ones; with ``verify_first`` nothing is
        written into them unless every variable checks."""
        if self._file is None:
            raise CkptsyncRuntimeError(f"Checkpoint reader for {self._path} is closed.")
        if self._pack_at is None:
            return self._read_datasets(names, verify, outs, verify_first)
        index = self._stored
        entries = [index[n] for n in names]
        if outs is None:
            outs = [np.empty(e.shape, e.dtype) for e in entries]
        at = [i for i, e in enumerate(entries) if e.pack is not None]
        packed, packed_outs = [entries[i] for i in at], [outs[i] for i in at]
        staged = verify and verify_first
        # verify_first: the packed variables are read into new arrays and checked, the
        # datasets read (checked first too), and only then the packed values copied.
        into = [np.empty(e.shape, e.dtype) for e in packed] if staged else packed_outs
        if packed:
            self._read_pack(packed, into, verify)
        stored = [i for i, e in enumerate(entries) if e.pack is None]
        if stored:
            self._read_datasets([names[i] for i in stored], verify,
                                [outs[i] for i in stored], verify_first)
        if staged:
            for out, src in zip(packed_outs, into):
                out[...] = src
        return outs

    def _read_pack(self, entries: list[_format.IndexEntry], outs: list[np.ndarray],
                   verify: bool) -> None:
        """Reads packed variables (format 2, ``_pack``) into ``outs``: ``preadv`` runs
        on HDF5's descriptor, or HDF5 reads the whole pack where there is none."""
        assert self._pack_at is not None
        try:
            if self._fd is not None:
                if not _pack.read_packed(self._fd, self._pack_at, entries, outs):
                    raise self._loss("file ends inside the packed variables (truncated?)",
                                     _format.PACK_DATASET)
            else:
                ds = self._open_dataset(_format.PACK_DATASET.encode("ascii"))
                if ds is None:
                    raise self._loss("no such dataset", _format.PACK_DATASET)
                try:
                    buf = np.empty(ds.shape, np.uint8)
                    if buf.size:
                        ds.read(h5py.h5s.ALL, h5py.h5s.ALL, buf)
                finally:
                    ds.close()
                for e, out in zip(entries, outs):
                    stored = e.dtype.newbyteorder("<")
                    out[...] = np.frombuffer(buf, stored, math.prod(e.shape),
                                             e.pack or 0).reshape(e.shape)
        except CkptsyncError:
            raise
        except Exception as exc:
            raise self._loss(f"reading the pack failed ({type(exc).__name__}: {exc})",
                             _format.PACK_DATASET) from exc
        if verify:
            # The arrays' memory is their stored bytes on a little-endian host.
            hasher: Any = xxhash.xxh3_64_hexdigest if _RAW_READS else _format.hash_array
            if list(map(hasher, outs)) == [e.xxh3_64 for e in entries]:
                return
            for entry, out in zip(entries, outs):
                actual = _format.hash_array(out)
                if actual != entry.xxh3_64:
                    raise self._loss(
                        f"checksum mismatch: xxh3_64 {actual} != expected {entry.xxh3_64} "
                        f"({entry.nbytes} packed bytes of {entry.dtype.name} "
                        f"{list(entry.shape)})", entry.name)

    def _read_datasets(self, names: list[str], verify: bool,
                       outs: list[np.ndarray] | None = None,
                       verify_first: bool = False) -> list[np.ndarray]:
        """:meth:`_read_tensors` of variables stored as datasets."""
        plans: list[_Plan] = []
        failure: CkptsyncError | None = None
        try:
            for name in names:
                entry = self._stored[name]
                try:
                    ds = self._open_dataset(self._paths[name])
                    if ds is None:
                        raise self._loss("listed in the index but no such dataset", name)
                    plan: _Plan | None = None
                    try:
                        plan = self._plan(ds, entry, verify, name)
                    finally:
                        if plan is None or plan.ds is None:
                            ds.close()
                    plans.append(plan)
                except CkptsyncError as e:
                    failure = e
                    break
                except Exception as e:
                    failure = self._loss(f"HDF5 read failed ({type(e).__name__}: {e})", name)
                    failure.__cause__ = e
                    break
            if failure is None:
                outs = self._read_planned(plans, verify, outs, verify_first)
        finally:
            for plan in plans:
                if plan.ds is not None:
                    plan.ds.close()
        if failure is not None:
            raise failure
        assert outs is not None
        return outs
