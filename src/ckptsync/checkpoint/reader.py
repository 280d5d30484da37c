"""CheckpointReader and read_checkpoint: one HDF5 checkpoint file → numpy arrays.

A reader trusts nothing in the file. Before h5py sees it the file must start with the
HDF5 signature; the index (``/_ckptsync/index``) must match its own hash and schema; a
dataset must match its index entry's shape and dtype, be stored contiguously and lie
inside the file before it is read; and with ``verify`` its bytes must match the entry's
xxh3_64. Every failure, including any exception raised by h5py, is a DataLossError that
names the file (and the variable when known).

The low-level attribute, dataset and tensor reads live in :mod:`._read_io`.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import h5py
import numpy as np

from ..errors import CkptsyncError, CkptsyncRuntimeError, NotFoundError, OpError
from . import _compose, _delta, _fast_read, _format, tf_bundle
from ._atomic import op_error_from_os_error
from ._read_io import _FLOAT64, _INT64, _RAW_READS, _ReadIO
from ._reader_base import IndexedReader

__all__ = ["Allocator", "CheckpointReader", "read_checkpoint", "read_checkpoint_into"]

#: Given ``(key, dtype, shape)`` of the variables to read, in order, returns a
#: C-contiguous array of each, to read into (see :func:`read_checkpoint_into`).
Allocator = Callable[[list[tuple[str, np.dtype, tuple[int, ...]]]], list[np.ndarray]]


def _new_arrays(specs: list[tuple[str, np.dtype, tuple[int, ...]]]) -> list[np.ndarray]:
    return [np.empty(shape, dtype) for _, dtype, shape in specs]


def _not_found(prefix: str, path: str) -> OpError:
    return NotFoundError(
        None,
        None,
        f"Unsuccessful TensorSliceReader constructor: Failed to find any matching files "
        f"for {prefix}: checkpoint file not found: {path}",
    )


def _key_not_found(name: str, path: str) -> OpError:
    return NotFoundError(None, None, f"Key {name} not found in checkpoint {path}")


class CheckpointReader(_ReadIO, IndexedReader):
    """Reads one checkpoint file, as TF1's ``tf.train.NewCheckpointReader``.

    A prefix with ``<prefix>.index`` and no ``<prefix>.h5`` is TF's own (V2) checkpoint:
    the constructor then returns a :class:`~.tf_bundle.TFBundleReader`, which has the
    same methods and properties.

    Opening reads the root attributes and the index only (and, in a format-2 file, checks
    the pack's dataset); listing shapes and dtypes of 100,000 variables needs no other
    dataset access. Tensors are read on demand.

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
        >>> with CheckpointReader("ckpts/model.ckpt-1200") as r:
        ...     r.get_variable_to_shape_map()["dense0/w"]
        [64, 128]
    """

    def __new__(cls, prefix: str | os.PathLike[str]) -> Any:
        # A TF checkpoint (<prefix>.index, no <prefix>.h5) gets TF's reader, which has
        # this interface; __init__ is then not run (the result is no CheckpointReader).
        if cls is CheckpointReader and tf_bundle.is_tf_checkpoint(prefix):
            return tf_bundle.TFBundleReader(prefix)
        return super().__new__(cls)

    def __init__(self, prefix: str | os.PathLike[str]):
        prefix = os.fspath(prefix)
        self._path = _format.data_path(prefix)
        self._file: h5py.File | None = None
        size = self._check_signature(prefix)
        self._size_bytes = size
        try:
            self._file = h5py.File(self._path, "r", locking=False)
            with _format.gc_paused():
                self._load_header()
        except CkptsyncError:
            self.close()
            raise
        except Exception as e:
            self.close()
            raise self._loss(f"cannot be opened as HDF5 ({type(e).__name__}: {e})") from e

    # -- opening -------------------------------------------------------------------
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
        if not isinstance(version, np.integer) or int(version) not in _format.FORMAT_VERSIONS:
            note = _format.VERSION_NOTES.get(int(version)) \
                if isinstance(version, np.integer) else None
            raise self._loss(
                f"format version {version}{f' ({note})' if note else ''} is not supported "
                f"(expected one of {', '.join(map(str, _format.FORMAT_VERSIONS))}); "
                f"upgrade ckptsync"
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
        raw = self._load_index()
        # A delta (format 3) stores changed values and rows (``_stored``); its variables
        # (``_index``) are composed with its base's (``_compose``).
        self._delta: _delta.ChangeTable | None = None
        self._chain: Any = None  # a delta's open chain (``_compose.Chain``), once read
        try:
            if self._format_version == _delta.DELTA_FORMAT_VERSION:
                self._stored, self._delta = _delta.decode_delta_index(raw)
                self._index = _delta.composed_entries(self._delta)
            else:
                self._stored = self._index = _format.decode_index(raw, self._format_version)
        except ValueError as e:  # includes JSON and UTF-8 errors
            raise self._loss(f"index is malformed ({e})") from e
        self._link = self._load_link()
        stored = [k for k, e in self._stored.items() if e.pack is None]
        self._paths = {k: p.encode("ascii") for k, p in _format.hdf5_paths(stored).items()}
        self._pack_at: int | None = None
        if len(stored) < len(self._stored):
            self._pack_at = self._check_pack(
                sum(e.nbytes for e in self._stored.values() if e.pack is not None))

    def _load_link(self) -> tuple[str, str] | None:
        """(predecessor basename, its index hash) from the root attributes: a delta's
        ``base`` (which must agree with its index), a full checkpoint's ``parent``."""
        assert self._file is not None
        names = (_delta.BASE_ATTR, _delta.BASE_HASH_ATTR) if self._delta is not None \
            else (_delta.PARENT_ATTR, _delta.PARENT_HASH_ATTR)
        got = [self._attr(self._file.id, n) for n in names]
        got = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in got]
        if self._delta is not None:
            if got != [self._delta.link, self._delta.link_index_xxh3]:
                raise self._loss(f"root attributes {names[0]!r}/{names[1]!r} {got} disagree "
                                 f"with the index ({self._delta.link!r})")
        elif got == [None, None]:
            return None
        try:
            link = _delta.check_link(got[0])
        except ValueError as e:
            raise self._loss(str(e)) from None
        if not isinstance(got[1], str) or not _format._HEX16_RE.match(got[1]):
            raise self._loss(f"root attribute {names[1]!r} is {got[1]!r}, not 16 hex digits")
        return link, got[1]

    def _str_attr(self, name: str) -> str:
        assert self._file is not None
        value = self._attr(self._file.id, name)
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        if not isinstance(value, str):
            raise self._loss(f"{name} attribute is missing or not a string")
        return value

    def _load_index(self) -> bytes:
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
        self._index_xxh3 = entry.xxh3_64
        return raw.tobytes()

    def _check_pack(self, nbytes: int) -> int:
        """Checks format 2's pack dataset (uint8 ``[nbytes]``, contiguous, inside the
        file); returns the file offset of its bytes (0 when it has none)."""
        name = _format.PACK_DATASET
        ds = self._open_dataset(name.encode("ascii"))
        if ds is None:
            raise self._loss(f"the index lists packed variables but there is no /{name}")
        try:
            # Its xxh3_64 attribute is for other tools: each packed variable is verified
            # against its own index hash.
            entry = _format.IndexEntry(name, np.dtype(np.uint8), (nbytes,), nbytes, "")
            plan = self._plan(ds, entry, verify=False, name=name)
        finally:
            ds.close()
        return plan.offset or 0

    # -- public API -------------------------------------------------------------------
    def close(self) -> None:
        """Closes the file (and a delta's chain). Idempotent; later calls to get_tensor
        raise."""
        chain, self._chain = getattr(self, "_chain", None), None
        if chain is not None:
            chain.close()
        f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except Exception:  # a damaged file may fail to close; nothing to keep
                pass

    def __del__(self) -> None:
        self.close()

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
        if self._delta is not None:
            out = np.empty(entry.shape, entry.dtype)
            return _compose.read_composed(self, [name], [out], verify)[0]
        return self._read_tensors([name], verify)[0]

    @property
    def is_delta(self) -> bool:
        """True for an incremental checkpoint (format version 3): its values compose
        with its base's (``checkpoint_chain``)."""
        return self._delta is not None

    @property
    def predecessor(self) -> str | None:
        """The prefix this checkpoint records as its predecessor (in its directory): a
        delta's base, or a full checkpoint's parent; None for a plain full one."""
        if self._link is None:
            return None
        return os.path.join(os.path.dirname(self._path), self._link[0])

    @property
    def predecessor_index_xxh3(self) -> str | None:
        """The predecessor's index hash this checkpoint records (None without one)."""
        return None if self._link is None else self._link[1]

    @property
    def index_xxh3(self) -> str:
        """The xxh3_64 of this file's index bytes (what a delta on it records as
        ``base_index_xxh3``)."""
        return self._index_xxh3

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
        """The ckptsync format version: 1, 2 for a packed layout (``_pack``), 3 for an
        incremental checkpoint (``_delta``)."""
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
        >>> arrays = read_checkpoint("ckpts/model.ckpt-1200")
        >>> int(arrays["global_step"]), arrays["dense0/w"].dtype
        (1200, dtype('float32'))
    """
    return read_checkpoint_into(prefix, names, _new_arrays, verify)


def read_checkpoint_into(
    prefix: str | os.PathLike[str],
    names: Iterable[str] | None,
    allocate: Allocator,
    verify: bool = True,
    verify_first: bool = False,
) -> dict[str, np.ndarray]:
    """:func:`read_checkpoint`, reading into arrays that ``allocate`` returns (e.g. views
    of a shared-memory buffer).

    The one read path: a file whose layout this process has read before is read without
    HDF5 (``_fast_read``: every metadata byte is compared with that layout's image, so
    a file that differs anywhere is left to HDF5); any other file, and any doubt, goes
    through :class:`CheckpointReader`, which reports every problem.

    Args:
        prefix, names, verify: as :func:`read_checkpoint`.
        allocate: given ``(key, dtype, shape)`` of the variables to read, in order,
            returns one C-contiguous array of each. It may be called twice (the fast
            path gave up after allocating); arrays of an earlier call are then unused.
        verify_first: (with ``verify``) no byte is written into the arrays ``allocate``
            returned until every variable read has matched its hash, so they may be
            values in use (``Saver.restore`` reads into the session's variables): a
            damaged file raises and leaves them as they were. The data is read twice
            (the second time from the page cache); a file modified in place while it
            is read raises DataLossError and may leave them partly written.

    Returns:
        key → the array ``allocate`` returned for it, filled, in the order of ``names``.

    Raises:
        As :func:`read_checkpoint`.
    """
    if isinstance(names, str):  # one name, not its characters
        names = [names]
    wanted: Sequence[str] | None = None if names is None else list(names)
    if tf_bundle.is_tf_checkpoint(prefix):
        if not (verify and verify_first):
            return tf_bundle.read_tf_checkpoint(prefix, wanted, allocate, verify)
        read = tf_bundle.read_tf_checkpoint(prefix, wanted, _new_arrays, verify)
        dsts = allocate([(k, a.dtype, a.shape) for k, a in read.items()])
        for dst, arr in zip(dsts, read.values()):
            dst[...] = arr
        return dict(zip(read, dsts))
    with _format.gc_paused():
        return _read_into(prefix, wanted, allocate, verify, verify_first)


def _read_into(prefix: str | os.PathLike[str], wanted: Sequence[str] | None,
               allocate: Allocator, verify: bool, verify_first: bool
               ) -> dict[str, np.ndarray]:
    def outs_for(entries: list[_format.IndexEntry]) -> list[np.ndarray]:
        return allocate([(e.name, e.dtype, e.shape) for e in entries])

    known = _fast_read.read_known(_format.data_path(os.fspath(prefix)), wanted, verify,
                                  outs_for, verify_first)
    if known is not None:  # a learned layout: read without HDF5, as below
        return known
    with CheckpointReader(prefix) as reader:
        index = reader._index
        keys = sorted(index) if wanted is None else list(wanted)
        missing = [n for n in keys if n not in index]
        if missing:
            raise _key_not_found(missing[0], reader.path)
        outs = outs_for([reader._index[n] for n in keys])
        if reader.is_delta:
            return dict(zip(keys, _compose.read_composed(reader, keys, outs, verify,
                                                         verify_first)))
        out = dict(zip(keys, reader._read_tensors(keys, verify, outs, verify_first)))
        _fast_read.learn(reader)
        return out
