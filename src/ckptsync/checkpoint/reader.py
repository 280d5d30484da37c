"""CheckpointReader and read_checkpoint: one HDF5 checkpoint file → numpy arrays.

A reader trusts nothing in the file. Before h5py sees it the file must start with the
HDF5 signature; the index (``/_ckptsync/index``) must match its own hash and schema; a
dataset must match its index entry's shape and dtype, be stored contiguously and lie
inside the file before it is read; and with ``verify`` its bytes must match the entry's
xxh3_64. Every failure, including any exception raised by h5py, is a DataLossError that
names the file (and the variable when known).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from collections.abc import Iterable
from types import TracebackType
from typing import Any, NamedTuple

import h5py
import numpy as np
import xxhash

from ..errors import (
    CkptsyncError,
    CkptsyncRuntimeError,
    DataLossError,
    NotFoundError,
    OpError,
)
from . import _format
from ._atomic import op_error_from_os_error

__all__ = ["CheckpointReader", "read_checkpoint"]

# Data bytes on disk are little-endian C order; on little-endian hosts they are read
# straight into the output array, in chunks small enough to hash from the CPU cache.
_RAW_READS = sys.byteorder == "little" and hasattr(os, "preadv")
_CHUNK_BYTES = 1 << 20
# Variables whose data lies within this many bytes of each other (and fill at least half
# of the span, give or take the slack) are read with one preadv and hashed from memory.
_REGION_BYTES = 4 << 20
_REGION_SLACK = 64 << 10
_INT64 = np.dtype("<i8")
_FLOAT64 = np.dtype("<f8")
_HASH_DTYPE = h5py.string_dtype("utf-8", 16)
_ATTR_TYPES: dict[tuple[str, int | None], tuple[Any, Any]] = {}


def _attr_types(dtype: np.dtype) -> tuple[Any, Any]:
    """(file type, memory type) h5py uses for an attribute of ``dtype``, made once."""
    info = h5py.check_string_dtype(dtype)
    key = (dtype.str, None) if info is None else (info.encoding, info.length)
    found = _ATTR_TYPES.get(key)
    if found is None:
        found = (h5py.h5t.py_create(dtype, logical=True), h5py.h5t.py_create(dtype))
        _ATTR_TYPES[key] = found
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


def _not_found(prefix: str, path: str) -> OpError:
    return NotFoundError(
        None,
        None,
        f"Unsuccessful TensorSliceReader constructor: Failed to find any matching files "
        f"for {prefix}: checkpoint file not found: {path}",
    )


def _key_not_found(name: str, path: str) -> OpError:
    return NotFoundError(None, None, f"Key {name} not found in checkpoint {path}")


class CheckpointReader:
    """Reads one checkpoint file, as TF1's ``tf.train.NewCheckpointReader``.

    Opening reads the root attributes and the index only; listing shapes and dtypes of
    10,000 variables needs no dataset access. Tensors are read on demand.

    Args:
        prefix: ``"ckpts/model.ckpt-1200"`` or ``"ckpts/model.ckpt-1200.h5"``.

    Raises:
        NotFoundError: the file does not exist ("Failed to find any matching files for
            P ... not found: PATH").
        PermissionDeniedError: the file cannot be opened for reading.
        DataLossError: the file is not a complete, valid ckptsync checkpoint (truncated,
            garbled, not HDF5, zero length, no or bad index, unsupported format version).

    Thread-safety: one reader must not be shared across threads; open one per thread
    (h5py serializes all HDF5 calls under one global lock anyway). Deleting or replacing
    the file while it is open is safe on POSIX: the reader keeps the old inode.

    Example:
        >>> with CheckpointReader("ckpts/model.ckpt-1200") as r:  # doctest: +SKIP
        ...     r.get_variable_to_shape_map()["dense0/w"]
        [64, 10]
    """

    def __init__(self, prefix: str | os.PathLike[str]):
        prefix = os.fspath(prefix)
        self._path = _format.data_path(prefix)
        self._file: h5py.File | None = None
        size = self._check_signature(prefix)
        self._size_bytes = size
        try:
            self._file = h5py.File(self._path, "r", locking=False)
            self._load_header()
        except CkptsyncError:
            self.close()
            raise
        except Exception as e:
            self.close()
            raise self._loss(f"cannot be opened as HDF5 ({type(e).__name__}: {e})") from e

    # -- opening -------------------------------------------------------------------
    def _loss(self, what: str, name: str | None = None) -> OpError:
        var = f" variable {name!r}:" if name is not None else ""
        return DataLossError(None, None, f"Checkpoint file {self._path} is corrupt:{var} {what}")

    def _check_signature(self, prefix: str) -> int:
        try:
            # O_NONBLOCK: a FIFO or device named as a checkpoint must not block the reader.
            fd = os.open(self._path, os.O_RDONLY | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise self._loss(
                        "it is not a regular file (a directory, FIFO, device or socket)"
                    )
                size = st.st_size
                head = fh.read(9)
        except (FileNotFoundError, NotADirectoryError) as e:
            raise _not_found(prefix, self._path) from e
        except IsADirectoryError as e:
            raise self._loss("it is a directory, not a file") from e
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ENOTDIR):
                raise _not_found(prefix, self._path) from e
            raise op_error_from_os_error(e, self._path, "open checkpoint") from e
        if size == 0:
            raise self._loss("the file is empty (0 bytes)")
        if head[:8] != _format.HDF5_SIGNATURE:
            raise self._loss("not an HDF5 file (bad signature)")
        if len(head) < 9 or head[8] not in (2, 3):
            raise self._loss(f"unexpected HDF5 superblock version {head[8:9]!r}")
        return size

    def _attr(self, loc: Any, name: str, expect: np.dtype | None = None) -> Any:
        """Returns attribute ``name`` of ``loc`` (a low-level id) as h5py's ``attrs.get``
        does, or None when absent.

        An attribute that is a scalar of exactly the HDF5 type h5py makes for ``expect``
        (or, for ``expect`` None, any fixed-length UTF-8 string) is read without the
        high-level wrappers; anything else goes through h5py.AttributeManager.
        """
        key = name.encode("ascii")
        if not h5py.h5a.exists(loc, key):
            return None
        attr = h5py.h5a.open(loc, key)
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

    def _load_header(self) -> None:
        f = self._file
        assert f is not None
        fid = f.id
        try:
            self._fd: int | None = int(fid.get_vfd_handle()) if _RAW_READS else None
        except Exception:
            self._fd = None
        if not h5py.h5a.exists(fid, b"ckptsync_format_version"):
            raise self._loss("no 'ckptsync_format_version' attribute; not a ckptsync file")
        version = self._attr(fid, "ckptsync_format_version", _INT64)
        if not isinstance(version, np.integer) or int(version) != _format.FORMAT_VERSION:
            raise self._loss(
                f"format version {version} is not supported (expected "
                f"{_format.FORMAT_VERSION}); upgrade ckptsync"
            )
        self._format_version = int(version)
        step = self._attr(fid, "global_step", _INT64)
        if step is not None and not isinstance(step, np.integer):
            raise self._loss(f"global_step attribute is {step!r}, not an integer")
        self._global_step = None if step is None else int(step)
        created = self._attr(fid, "created_unix_s", _FLOAT64)
        if not isinstance(created, np.floating):
            raise self._loss("created_unix_s attribute is missing or not a float")
        self._created_unix_s = float(created)
        self._writer = self._str_attr("writer")
        try:
            meta = json.loads(self._str_attr("metadata_json"))
        except ValueError as e:
            raise self._loss(f"metadata_json is not valid JSON ({e})") from e
        if not isinstance(meta, dict):
            raise self._loss("metadata_json is not a JSON object")
        self._metadata: dict[str, Any] = meta
        self._index = self._load_index()
        self._paths = {
            k: p.encode("ascii") for k, p in _format.hdf5_paths(list(self._index)).items()
        }

    def _str_attr(self, name: str) -> str:
        assert self._file is not None
        value = self._attr(self._file.id, name)
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        if not isinstance(value, str):
            raise self._loss(f"{name} attribute is missing or not a string")
        return value

    def _open_dataset(self, path: bytes) -> Any:
        """Returns the low-level dataset id at ``path``, or None if there is no dataset
        there (as ``Group.get`` returning something other than a Dataset)."""
        assert self._file is not None
        try:
            oid = h5py.h5o.open(self._file.id, path)
        except KeyError:
            return None
        if not isinstance(oid, h5py.h5d.DatasetID):
            oid.close()
            return None
        return oid

    def _load_index(self) -> dict[str, _format.IndexEntry]:
        name = _format.INDEX_DATASET
        ds = self._open_dataset(name.encode("ascii"))
        if ds is None:
            raise self._loss(f"no index dataset /{name}")
        try:
            shape = ds.shape
            if ds.dtype != np.uint8 or shape is None or len(shape) != 1:
                raise self._loss(f"index has dtype {ds.dtype} shape {shape}; expected uint8 [n]")
            entry = _format.IndexEntry(
                name, np.dtype(np.uint8), shape, int(shape[0]), self._hash_attr(ds, name)
            )
            plan = self._plan(ds, entry, verify=True, name=name)
            raw = self._read_planned([plan], verify=True)[0]
        finally:
            ds.close()
        try:
            return _format.decode_index(raw.tobytes())
        except ValueError as e:  # includes JSON and UTF-8 errors
            raise self._loss(f"index is malformed ({e})") from e

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
        dtype = ds.dtype
        if dtype.name != entry.dtype.name or dtype.byteorder == ">":
            raise self._loss(f"dataset dtype {dtype.str} != index {entry.dtype.name}", name)
        offset = None
        if entry.nbytes:
            plist = ds.get_create_plist()
            if plist.get_layout() != h5py.h5d.CONTIGUOUS or plist.get_nfilters():
                raise self._loss("dataset is not stored contiguously and unfiltered", name)
            offset = ds.get_offset()
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

    def _read_planned(self, plans: list[_Plan], verify: bool) -> list[np.ndarray]:
        """Reads and (with ``verify``) checks planned datasets, in order.

        When the data of all of them lies in a small region of the file, the region is
        read with one ``preadv`` and each variable copied and hashed from memory; larger
        data is read per variable, in cache-sized chunks hashed as they arrive.
        """
        outs = [np.empty(p.entry.shape, dtype=p.entry.dtype) for p in plans]
        region: tuple[int, memoryview] | None = None
        spans = [(p.offset, p.entry.nbytes) for p in plans if p.offset is not None and p.ds is None]
        if len(spans) > 1:
            lo = min(off for off, _ in spans)
            hi = max(off + n for off, n in spans)
            total = sum(n for _, n in spans)
            if hi - lo <= _REGION_BYTES and hi - lo <= 2 * total + _REGION_SLACK:
                buf = bytearray(hi - lo)
                try:
                    got = self._pread_into(memoryview(buf), lo)
                    region = (lo, memoryview(buf)[:got])
                except OSError:  # read each variable on its own; errors name it
                    region = None
        for plan, out in zip(plans, outs):
            try:
                digest = self._read_one(plan, out, region, verify)
            except CkptsyncError:
                raise
            except Exception as e:
                raise self._loss(f"HDF5 read failed ({type(e).__name__}: {e})", plan.name) from e
            if verify:
                if plan.ds is not None:
                    plan.ds.read(h5py.h5s.ALL, h5py.h5s.ALL, out)
                entry = plan.entry
                actual = digest if digest is not None else _format.hash_array(out)
                if actual != entry.xxh3_64:
                    raise self._loss(
                        f"checksum mismatch: xxh3_64 {actual} != expected {entry.xxh3_64} "
                        f"({entry.nbytes} bytes of {entry.dtype.name} {list(entry.shape)})",
                        plan.name,
                    )
        return outs

    def _read_one(
        self,
        plan: _Plan,
        out: np.ndarray,
        region: tuple[int, memoryview] | None,
        verify: bool,
    ) -> str | None:
        """Fills ``out``; returns the digest of the bytes read, or None if not hashed."""
        offset = plan.offset
        if offset is None:  # zero-size
            return None
        if plan.ds is not None:  # no preadv here: HDF5 reads (and converts) it
            plan.ds.read(h5py.h5s.ALL, h5py.h5s.ALL, out)
            return None
        nbytes = plan.entry.nbytes
        if (
            region is not None
            and region[0] <= offset
            and offset + nbytes <= region[0] + len(region[1])
        ):
            start = offset - region[0]
            src = region[1][start : start + nbytes]
            out.reshape(-1).view(np.uint8)[:] = src
            return xxhash.xxh3_64_hexdigest(src) if verify else None
        return self._read_raw(out, offset, verify, plan.name) or None

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

    def _read_raw(self, out: np.ndarray, offset: int, verify: bool, name: str) -> str:
        """Reads a contiguous dataset's bytes with ``preadv`` on HDF5's own descriptor
        (so the same inode), hashing each chunk while it is still in the CPU cache.

        Returns the xxh3_64 hex digest, or "" when not verifying.
        """
        assert self._fd is not None
        fd = self._fd
        view = memoryview(out.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
        hasher = xxhash.xxh3_64() if verify else None
        pos, total = 0, len(view)
        while pos < total:
            chunk = view[pos : pos + _CHUNK_BYTES]
            got = os.preadv(fd, [chunk], offset + pos)
            if got <= 0:
                raise self._loss(f"file ends inside the data at byte {offset + pos}", name)
            if hasher is not None:
                hasher.update(chunk[:got])
            pos += got
        return hasher.hexdigest() if hasher is not None else ""

    def _read_tensors(self, names: list[str], verify: bool) -> list[np.ndarray]:
        """Reads listed variables in order; the first damaged one raises (as reading
        them one by one with get_tensor would)."""
        if self._file is None:
            raise CkptsyncRuntimeError(f"Checkpoint reader for {self._path} is closed.")
        plans: list[_Plan] = []
        failure: CkptsyncError | None = None
        try:
            for name in names:
                entry = self._index[name]
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
            outs = self._read_planned(plans, verify)
        finally:
            for plan in plans:
                if plan.ds is not None:
                    plan.ds.close()
        if failure is not None:
            raise failure
        return outs

    # -- public API -------------------------------------------------------------------
    def close(self) -> None:
        """Closes the file. Idempotent; later calls to get_tensor raise."""
        f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except Exception:  # a damaged file may fail to close; nothing to keep
                pass

    def __enter__(self) -> CheckpointReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def get_variable_to_shape_map(self) -> dict[str, list[int]]:
        """Returns key → shape (list of ints, ``[]`` for scalars), from the index."""
        return {n: list(e.shape) for n, e in self._index.items()}

    def get_variable_to_dtype_map(self) -> dict[str, np.dtype]:
        """Returns key → numpy dtype (native byte order), from the index."""
        return {n: e.dtype for n, e in self._index.items()}

    def has_tensor(self, name: str) -> bool:
        """True if the checkpoint lists ``name`` (no ``:0`` suffix)."""
        return name in self._index

    def get_tensor(self, name: str, verify: bool = True) -> np.ndarray:
        """Reads one variable into a new array.

        Args:
            name: the key, e.g. ``"dense0/w"`` (TF's op name, no ``:0``).
            verify: check the xxh3_64 of the bytes read against the index (shape and
                dtype are always checked).

        Returns:
            A fresh, writable, C-contiguous array of the stored shape and dtype.

        Raises:
            NotFoundError: "Key NAME not found in checkpoint PATH".
            DataLossError: the data does not match the index, or HDF5 failed.
            CkptsyncRuntimeError: the reader is closed.
        """
        entry = self._index.get(name)
        if entry is None:
            raise _key_not_found(name, self._path)
        if self._file is None:
            raise CkptsyncRuntimeError(f"Checkpoint reader for {self._path} is closed.")
        return self._read_tensors([name], verify)[0]

    @property
    def path(self) -> str:
        """The data file, ``<prefix>.h5``."""
        return self._path

    @property
    def global_step(self) -> int | None:
        """The global step stored by the writer, or None."""
        return self._global_step

    @property
    def created_unix_s(self) -> float:
        """When the writer created the file, seconds since the epoch."""
        return self._created_unix_s

    @property
    def metadata(self) -> dict[str, Any]:
        """The writer's metadata (a copy is not made; do not mutate)."""
        return self._metadata

    @property
    def format_version(self) -> int:
        """The ckptsync format version, 1."""
        return self._format_version

    @property
    def writer(self) -> str:
        """The writing library and version, e.g. ``"ckptsync 0.1.0"``."""
        return self._writer

    @property
    def nbytes(self) -> int:
        """Total bytes of all variables' data (not the file size)."""
        return sum(e.nbytes for e in self._index.values())


def read_checkpoint(
    prefix: str | os.PathLike[str], names: Iterable[str] | None = None, verify: bool = True
) -> dict[str, np.ndarray]:
    """Reads all (or the named) variables of one checkpoint.

    Args:
        prefix: ``"ckpts/model.ckpt-1200"`` with or without ``.h5``.
        names: keys to read; None reads every variable.
        verify: check each variable's xxh3_64 (shape and dtype are always checked).

    Returns:
        key → fresh array, in the order of ``names`` (sorted keys when None).

    Raises:
        NotFoundError: no such file, or a name not in the file ("Key NAME not found in
            checkpoint").
        DataLossError: a damaged file or variable (named in the message).

    Thread-safety: safe to call from several threads (each call opens its own reader).

    Example:
        >>> arrays = read_checkpoint("ckpts/model.ckpt-1200")  # doctest: +SKIP
    """
    with CheckpointReader(prefix) as reader:
        if isinstance(names, str):  # one name, not its characters
            names = [names]
        wanted = sorted(reader._index) if names is None else list(names)
        for name in wanted:
            if not reader.has_tensor(name):
                raise _key_not_found(name, reader.path)
        return dict(zip(wanted, reader._read_tensors(wanted, verify)))
