"""TensorFlow's own checkpoint files (TF1 "V2" tensor bundles): read, and write.

A TF checkpoint ``ckpts/model.ckpt-7`` is two files, as TF's
``tensorflow/core/util/tensor_bundle/tensor_bundle.cc`` writes them::

    model.ckpt-7.index                 a LevelDB-format table (see _sstable.py):
                                       "" -> BundleHeaderProto, name -> BundleEntryProto
    model.ckpt-7.data-00000-of-00001   the tensors' little-endian bytes, back to back

An entry gives the tensor's dtype, shape, shard, offset, size and the masked crc32c of
its bytes. :class:`TFBundleReader` has :class:`~.reader.CheckpointReader`'s interface,
and ``CheckpointReader(prefix)`` / ``read_checkpoint`` return / use it for a prefix with
a ``.index`` and no ``.h5`` (:func:`is_tf_checkpoint`), so ``Saver.restore``,
``NewCheckpointReader``, ``list_variables``, ``init_from_checkpoint`` and ``ckptsync
inspect`` read TF checkpoints. :func:`write_tf_checkpoint` writes one TF's Saver restores.

A partitioned variable (saved in parts by a partitioner) is read whole, from its parts.
Not supported (refused with a clear error): string tensors, big-endian bundles,
compressed tables.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from ..errors import (
    CkptsyncRuntimeError,
    DataLossError,
    NotFoundError,
    OpError,
    UnimplementedError,
)
from . import _format
from ._atomic import op_error_from_os_error, publish
from ._reader_base import IndexedReader
from ._sstable import TableError, build_table, crc32c, mask_crc, read_table, unmask_crc
from ._tf_protos import DATA_TYPES, BundleEntryProto, BundleHeaderProto
from ._tf_slices import decode_slice_key

__all__ = ["TFBundleReader", "is_tf_checkpoint", "index_path", "data_file_path",
           "write_tf_checkpoint", "read_tf_checkpoint"]

INDEX_SUFFIX = ".index"
_NP_OF_DT = {DATA_TYPES[k]: np.dtype(v) for k, v in {
    "DT_FLOAT": "float32", "DT_DOUBLE": "float64", "DT_INT32": "int32", "DT_UINT8": "uint8",
    "DT_INT16": "int16", "DT_INT8": "int8", "DT_COMPLEX64": "complex64", "DT_INT64": "int64",
    "DT_BOOL": "bool", "DT_UINT16": "uint16", "DT_COMPLEX128": "complex128",
    "DT_HALF": "float16", "DT_UINT32": "uint32", "DT_UINT64": "uint64"}.items()}
_DT_OF_NP = {dt.name: code for code, dt in _NP_OF_DT.items()}
_DT_NAME = {v: k for k, v in DATA_TYPES.items()}
_STRING = DATA_TYPES["DT_STRING"]
_OBJECT = np.dtype(object)
#: The bundle version TF writes (kTensorBundleVersion) and reads.
BUNDLE_VERSION = 1


def _prefix_of(prefix: str | os.PathLike[str]) -> str:
    path = os.fspath(prefix)
    return path[:-len(INDEX_SUFFIX)] if path.endswith(INDEX_SUFFIX) else path


def index_path(prefix: str | os.PathLike[str]) -> str:
    """``prefix + ".index"`` (a path already ending in ``.index`` is kept)."""
    return _prefix_of(prefix) + INDEX_SUFFIX


def data_file_path(prefix: str | os.PathLike[str], shard: int = 0, num_shards: int = 1) -> str:
    """``prefix + ".data-00000-of-00001"``, TF's name of shard ``shard``."""
    return f"{_prefix_of(prefix)}.data-{shard:05d}-of-{num_shards:05d}"


def is_tf_checkpoint(prefix: str | os.PathLike[str]) -> bool:
    """True when ``prefix`` names a TF checkpoint: ``<prefix>.index`` exists (or the path
    is the ``.index`` file) and ``<prefix>.h5`` does not (a ckptsync file wins)."""
    path = os.fspath(prefix)
    if path.endswith(_format.DATA_SUFFIX):
        return False
    if path.endswith(INDEX_SUFFIX):
        return True
    return os.path.lexists(path + INDEX_SUFFIX) and not os.path.lexists(path + _format.DATA_SUFFIX)


class _Entry:
    __slots__ = ("name", "dtype", "dt_code", "shape", "shard", "offset", "size", "crc",
                 "slices")

    def __init__(self, name: str, proto: Any, dtype: np.dtype, shape: tuple[int, ...]):
        self.name, self.dtype, self.dt_code, self.shape = name, dtype, proto.dtype, shape
        self.shard, self.offset, self.size = proto.shard_id, proto.offset, proto.size
        self.crc = unmask_crc(proto.crc32c)
        # A partitioned variable: its parts' extents ((start, length) per dim).
        self.slices = [tuple((int(e.start), int(e.length) if e.HasField("length") else -1)
                             for e in s.extent) for s in proto.slices]


class TFBundleReader(IndexedReader):
    """Reads one TF V2 checkpoint, with :class:`~.reader.CheckpointReader`'s interface.

    Opening reads and checks the whole ``.index`` (its table checksums, header and every
    entry); tensors are read from the data file on demand and their crc32c checked.

    Args:
        prefix: ``"ckpts/model.ckpt-7"`` (or its ``.index`` path).

    Raises:
        NotFoundError: no ``.index`` file ("Failed to find any matching files for P").
        PermissionDeniedError: the file cannot be opened.
        DataLossError: a malformed index (naming it), or an entry that does not fit.
        UnimplementedError: a big-endian or newer bundle.

    Example:
        >>> with TFBundleReader("tf_ckpts/model.ckpt-7") as r:  # doctest: +SKIP
        ...     r.get_variable_to_shape_map()["dense/kernel"]
        [2, 3]
    """

    def __init__(self, prefix: str | os.PathLike[str]):
        self._prefix = _prefix_of(prefix)
        self._path = index_path(prefix)
        self._fds: dict[int, int] = {}
        self._closed = False
        raw, st = self._read_index()
        self._created_unix_s = st.st_mtime
        try:
            items = read_table(raw)
        except TableError as e:
            raise self._loss(f"not a valid TF checkpoint index table ({e})") from e
        if not items or items[0][0] != b"":
            raise self._loss("the index has no bundle header (empty first key)")
        header = self._parse(BundleHeaderProto, items[0][1], "the bundle header")
        if header.endianness != 0:
            raise UnimplementedError(None, None, f"TF checkpoint {self._path} is big-endian; "
                                     "only little-endian bundles are supported")
        if header.version.min_consumer > BUNDLE_VERSION or \
                BUNDLE_VERSION in header.version.bad_consumers:
            raise UnimplementedError(None, None, (
                f"TF checkpoint {self._path} needs a reader of bundle version "
                f"{header.version.min_consumer}; this one reads version {BUNDLE_VERSION}"))
        if header.num_shards < 1:
            raise self._loss(f"the header says num_shards = {header.num_shards}")
        self._num_shards = header.num_shards
        self._index: dict[str, _Entry] = {}
        self._parts: dict[tuple[str, tuple[tuple[int, int], ...]], _Entry] = {}
        for key, value in items[1:]:
            self._add_entry(key, value)
        for entry in self._index.values():
            for extents in entry.slices:
                part = self._parts.get((entry.name, extents))
                want = tuple(d if n < 0 else n for (_, n), d in zip(extents, entry.shape))
                if part is None or len(extents) != len(entry.shape) or part.shape != want \
                        or part.dt_code != entry.dt_code:
                    raise self._loss(f"the part {list(extents)} of the partitioned variable "
                                     "is missing or does not fit", entry.name)
        step = self._index.get("global_step")
        self._global_step: int | None = None
        if step is not None and step.shape == () and step.dtype.kind in "iu":
            self._global_step = int(self.get_tensor("global_step")[()])

    # -- opening ---------------------------------------------------------------------
    def _loss(self, what: str, name: str | None = None, path: str | None = None) -> OpError:
        var = f" tensor {name!r}:" if name is not None else ""
        return DataLossError(None, None,
                             f"Checkpoint file {path or self._path} is corrupt:{var} {what}")

    def _read_index(self) -> tuple[bytes, os.stat_result]:
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_NONBLOCK)
        except (FileNotFoundError, NotADirectoryError) as e:
            raise NotFoundError(None, None, (
                f"Unsuccessful TensorSliceReader constructor: Failed to find any matching "
                f"files for {self._prefix}: checkpoint file not found: {self._path}")) from e
        except IsADirectoryError as e:
            raise self._loss("it is a directory, not a file") from e
        except OSError as e:
            raise op_error_from_os_error(e, self._path, "open checkpoint") from e
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise self._loss("it is not a regular file (a directory, FIFO, device or socket)")
            if st.st_size == 0:
                raise self._loss("the file is empty (0 bytes)")
            with os.fdopen(os.dup(fd), "rb") as fh:
                raw = fh.read()
        except OSError as e:
            raise op_error_from_os_error(e, self._path, "read checkpoint") from e
        finally:
            os.close(fd)
        return raw, st

    def _parse(self, cls: Any, value: bytes, what: str) -> Any:
        msg = cls()
        try:
            msg.ParseFromString(value)
        except (DecodeError, ValueError) as e:
            raise self._loss(f"{what} is not a valid protobuf message ({e})") from e
        return msg

    def _add_entry(self, key: bytes, value: bytes) -> None:
        extents = None
        try:
            if key[:1] == b"\0":  # a part of a partitioned variable (TF's slice key)
                name, extents = decode_slice_key(key)
            else:
                name = key.decode("utf-8")
        except ValueError as e:  # UnicodeDecodeError included
            raise self._loss(f"tensor key {key!r} is neither a UTF-8 name nor a slice key "
                             f"({e})") from e
        proto = self._parse(BundleEntryProto, value, f"the entry of tensor {name!r}")
        if proto.slices and proto.dtype == _STRING:
            raise UnimplementedError(None, None, f"TF checkpoint {self._path}: tensor "
                                     f"{name!r} is a partitioned string tensor")
        if proto.shape.unknown_rank or any(d.size < 0 for d in proto.shape.dim):
            raise self._loss("the shape is unknown or negative", name)
        shape = tuple(int(d.size) for d in proto.shape.dim)
        dtype = _NP_OF_DT.get(proto.dtype)
        if dtype is None and proto.dtype != _STRING:
            known = _DT_NAME.get(proto.dtype)
            if known is None or proto.dtype == DATA_TYPES["DT_INVALID"]:  # damage, not a type
                raise self._loss(f"invalid dtype {known or proto.dtype}", name)
            raise UnimplementedError(None, None, f"unsupported dtype {known[3:].lower()} for "
                                     f"tensor {name!r} in {self._path}")
        if not 0 <= proto.shard_id < self._num_shards:
            raise self._loss(f"shard {proto.shard_id} of {self._num_shards}", name)
        if proto.offset < 0 or proto.size < 0:
            raise self._loss(f"negative offset {proto.offset} or size {proto.size}", name)
        if dtype is not None and not proto.slices and \
                proto.size != int(np.prod(shape)) * dtype.itemsize:
            raise self._loss(f"size {proto.size} bytes does not hold {dtype.name} "
                             f"{list(shape)}", name)
        entry = _Entry(name, proto, dtype or _OBJECT, shape)
        if extents is not None:
            self._parts[(name, extents)] = entry
        else:
            self._index[name] = entry

    def _data_fd(self, shard: int) -> tuple[int, str]:
        path = data_file_path(self._prefix, shard, self._num_shards)
        fd = self._fds.get(shard)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    os.close(fd)
                    raise self._loss("the data file is not a regular file", path=path)
            except FileNotFoundError as e:
                raise DataLossError(None, None, (
                    f"Checkpoint {self._prefix} is incomplete: its index {self._path} names "
                    f"data file {path}, which does not exist")) from e
            except OSError as e:
                raise op_error_from_os_error(e, path, "open checkpoint data") from e
            self._fds[shard] = fd
        return fd, path

    # -- public API (CheckpointReader's) ---------------------------------------------
    def close(self) -> None:
        """Closes the data files. Idempotent; later calls to get_tensor raise."""
        self._closed = True
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)

    def __del__(self) -> None:
        if hasattr(self, "_fds"):
            self.close()

    def get_tensor(self, name: str, verify: bool = True,
                   out: np.ndarray | None = None) -> np.ndarray:
        """Reads one tensor (into ``out`` when given: C-contiguous, of its shape and dtype).

        Args:
            name: the key, e.g. ``"dense/kernel"``.
            verify: check the bytes against the entry's crc32c.

        Raises:
            NotFoundError: "Key NAME not found in checkpoint PATH".
            DataLossError: the data file is missing, short, or fails the crc32c.
            UnimplementedError: a string tensor.
            CkptsyncRuntimeError: the reader is closed.
        """
        entry = self._index.get(name)
        if entry is None:
            raise NotFoundError(None, None, f"Key {name} not found in checkpoint {self._path}")
        if self._closed:
            raise CkptsyncRuntimeError(f"Checkpoint reader for {self._path} is closed.")
        if entry.dt_code == _STRING:
            raise UnimplementedError(None, None, (
                f"TF checkpoint {self._path}: tensor {name!r} is a string tensor; "
                "ckptsync reads numeric and bool tensors only"))
        arr = np.empty(entry.shape, entry.dtype) if out is None else out
        if entry.slices:  # a partitioned variable: its parts, each checked, into place
            for extents in entry.slices:
                part = self._read(self._parts[(name, extents)], name, verify)
                arr[tuple(slice(0, None) if n < 0 else slice(a, a + n)
                          for a, n in extents)] = part
            return arr
        return self._read(entry, name, verify, arr)

    def _read(self, entry: _Entry, name: str, verify: bool,
              arr: np.ndarray | None = None) -> np.ndarray:
        fd, path = self._data_fd(entry.shard)
        if arr is None:
            arr = np.empty(entry.shape, entry.dtype)
        buf = memoryview(arr.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
        try:
            got = os.preadv(fd, [buf], entry.offset) if entry.size else 0
        except OSError as e:
            raise op_error_from_os_error(e, path, "read checkpoint data") from e
        if got != entry.size:
            raise self._loss(f"the data file ends before the tensor's bytes "
                             f"[{entry.offset}, {entry.offset + entry.size})", name, path)
        if verify and crc32c(buf) != entry.crc:
            raise self._loss("crc32c checksum mismatch (the data file is corrupt)", name, path)
        if entry.dtype == np.bool_ and entry.size and int(np.frombuffer(buf, np.uint8).max()) > 1:
            raise self._loss("a bool byte is neither 0 nor 1", name, path)
        return arr

    @property
    def path(self) -> str:
        """The index file, ``<prefix>.index``."""
        return self._path

    @property
    def data_paths(self) -> list[str]:
        """The data files, ``<prefix>.data-0000N-of-0000M``."""
        return [data_file_path(self._prefix, i, self._num_shards)
                for i in range(self._num_shards)]

    @property
    def global_step(self) -> int | None:
        """The scalar integer tensor ``global_step``, or None."""
        return self._global_step

    @property
    def created_unix_s(self) -> float:
        """The index file's mtime (a bundle records no creation time)."""
        return self._created_unix_s

    @property
    def metadata(self) -> dict[str, Any]:
        """Always ``{}``: a bundle has no metadata."""
        return {}

    @property
    def format_version(self) -> int:
        """2: TF's V2 checkpoint (tensor bundle) format."""
        return 2

    @property
    def writer(self) -> str:
        """``"TensorFlow tensor bundle"`` (a bundle does not name its writer)."""
        return "TensorFlow tensor bundle"

    @property
    def nbytes(self) -> int:
        """Total bytes of all tensors' data."""
        return sum(e.size for e in self._index.values()) + sum(p.size for p in self._parts.values())


def read_tf_checkpoint(prefix: str | os.PathLike[str], names: Iterable[str] | None = None,
                       allocate: Any = None, verify: bool = True) -> dict[str, np.ndarray]:
    """Reads all (or the named) tensors of a TF checkpoint, as ``read_checkpoint_into``."""
    with TFBundleReader(prefix) as reader:
        keys = sorted(reader._index) if names is None else list(names)
        for name in keys:
            if not reader.has_tensor(name):
                raise NotFoundError(None, None, f"Key {name} not found in checkpoint {reader.path}")
        specs = [(n, reader._index[n].dtype, reader._index[n].shape) for n in keys]
        outs = allocate(specs) if allocate is not None else [None] * len(keys)
        return {n: reader.get_tensor(n, verify, out) for n, out in zip(keys, outs)}


def write_tf_checkpoint(prefix: str | os.PathLike[str], arrays: Mapping[str, Any],
                        global_step: int | None = None) -> str:
    """Writes ``arrays`` as a TF V2 checkpoint that TF1's ``Saver.restore`` reads.

    Writes ``<prefix>.data-00000-of-00001`` and then ``<prefix>.index`` (each through a
    temp file, fsynced and renamed: the index appears only once the data is complete).
    Tensors are stored in name order, back to back, with TF's header (one shard,
    little-endian, bundle version 1) and each entry's masked crc32c.

    Args:
        prefix: e.g. ``"tf_ckpts/model.ckpt-3"``.
        arrays: name → array (bool, int8..int64, uint8..uint64, float16/32/64,
            complex64/128), names as ckptsync keys (``dense/kernel``).
        global_step: stored as an int64 scalar ``global_step`` if ``arrays`` has none.

    Returns:
        The prefix.

    Raises:
        CkptsyncValueError, CkptsyncTypeError: a bad name or dtype.
        ResourceExhaustedError, PermissionDeniedError, UnknownError: the write failed.
    """
    prefix = _prefix_of(prefix)
    os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
    items = {_format.validate_key(k): _format.normalize_array(k, v) for k, v in arrays.items()}
    if global_step is not None and "global_step" not in items:
        items["global_step"] = np.asarray(global_step, np.int64)
    names = sorted(items, key=lambda n: n.encode("utf-8"))
    header = BundleHeaderProto(num_shards=1)
    header.version.producer = BUNDLE_VERSION
    table = [(b"", header.SerializeToString())]
    chunks, offset = [], 0
    for name in names:
        arr = items[name]
        data = _format.le_bytes(arr)
        entry = BundleEntryProto(dtype=_DT_OF_NP[arr.dtype.name], offset=offset,
                                 size=data.nbytes, crc32c=mask_crc(crc32c(data)))
        entry.shape.SetInParent()  # TF writes the (empty) shape of a scalar too
        for d in arr.shape:
            entry.shape.dim.add(size=d)
        table.append((name.encode("utf-8"), entry.SerializeToString()))
        chunks.append(data)
        offset += data.nbytes
    index = build_table(table)

    def write_data(tmp: str) -> None:
        with open(tmp, "xb") as f:
            for chunk in chunks:
                f.write(chunk)

    def write_index(tmp: str) -> None:
        with open(tmp, "xb") as f:
            f.write(index)

    publish(data_file_path(prefix), write_data, "write checkpoint data", sync_directory=False)
    publish(index_path(prefix), write_index, "write checkpoint index")
    return prefix

