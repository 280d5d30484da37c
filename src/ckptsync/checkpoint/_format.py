"""Constants and pure helpers of the on-disk format (see docs/checkpoint-format.md).

Nothing here touches the file system. Keys, dtypes, hashes and the index JSON are
defined once here and shared by the writer and the reader.
"""

from __future__ import annotations

import cmath
import contextlib
import gc
import itertools
import json
import math
import re
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np
import xxhash

from ..errors import CkptsyncTypeError, CkptsyncValueError

FORMAT_VERSION = 1  # every variable its own dataset
PACKED_FORMAT_VERSION = 2  # small variables of a large layout packed into one (``_pack``)
DELTA_FORMAT_VERSION = 3  # an incremental checkpoint (``_delta``): what changed since a base
FORMAT_VERSIONS = (FORMAT_VERSION, PACKED_FORMAT_VERSION, DELTA_FORMAT_VERSION)
# What a version is, for the message of a reader that does not read it.
VERSION_NOTES = {DELTA_FORMAT_VERSION: "an incremental checkpoint"}
DATA_SUFFIX = ".h5"
INDEX_GROUP = "_ckptsync"
INDEX_DATASET = "_ckptsync/index"
PACK_DATASET = "_ckptsync/pack"
HASH_ATTR = "xxh3_64"
SELF_LINK = ":value"  # dataset name of a variable whose key is also a scope
# HDF5 file-format bounds: 1.8 object headers and superblock v2 carry metadata checksums,
# so flipped metadata bytes are caught by the library; readable by HDF5 >= 1.8 tools.
LIBVER = ("v108", "v108")
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"

# TF's op-name regex (tensorflow/core/framework/node_def_util.cc), without '>'.
_KEY_RE = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\-/]*\Z")
# The same, with no empty, '.' or '..' component: one match per key instead of a split
# (per variable, that check was a tenth of a 100,000-variable save).
_COMPONENT = r"(?!\.\.?(?:/|\Z))[A-Za-z0-9_.\-]+"
_VALID_KEY_RE = re.compile(rf"(?=[A-Za-z0-9.]){_COMPONENT}(?:/{_COMPONENT})*\Z")
_HEX16_RE = re.compile(r"[0-9a-f]{16}\Z")

# Allowed numpy kinds and item sizes: bool, int8..64, uint8..64, float16/32/64,
# complex64/128. Everything else (object, str, bytes, structured, datetime,
# float128) is refused.
_ALLOWED = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8), "c": (8, 16)}
ALLOWED_DTYPE_NAMES = frozenset(
    np.dtype(f"{kind}{size}").name
    for kind, sizes in _ALLOWED.items()
    for size in sizes
    if kind != "b"
) | {"bool"}


# Name -> dtype, made once (``np.dtype(name)`` per index entry was a tenth of a load).
_DTYPES = {name: np.dtype(name) for name in ALLOWED_DTYPE_NAMES}
# The allowed dtypes in the byte order stored (on a little-endian host, the native ones).
_LITTLE_DTYPES = frozenset(d.newbyteorder("<") for d in _DTYPES.values())


_gc_lock = threading.Lock()
_gc_depth = 0
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pauses Python's cyclic garbage collector while a checkpoint's per-variable
    objects (index entries, arrays, dicts: no cycles) are built.

    Each of those allocations counts towards a collection, and a collection walks the
    process's live objects: in a server holding a 100,000-variable graph, that made
    decoding one index several times slower. Nested and concurrent uses share one
    pause; the collector is enabled again after the last, if it was before the first.
    """
    global _gc_depth, _gc_was_enabled
    with _gc_lock:
        if _gc_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_was_enabled:
                gc.enable()


def data_path(prefix: str | Any) -> str:
    """Returns the data file of a checkpoint prefix: ``prefix + ".h5"``.

    A path that already ends in ``.h5`` is returned unchanged, so callers may pass either
    the prefix (``ckpts/model.ckpt-5``) or the file (``ckpts/model.ckpt-5.h5``).
    """
    path = str(prefix)
    return path if path.endswith(DATA_SUFFIX) else path + DATA_SUFFIX


def validate_key(key: Any) -> str:
    """Checks one variable key (a TF op name such as ``dense0/w/Adam_1``).

    Raises:
        CkptsyncTypeError: the key is not a str.
        CkptsyncValueError: the key does not match TF's op-name regex, or has an empty,
            ``.`` or ``..`` component (HDF5 would resolve those as paths).
    """
    if type(key) is str and _VALID_KEY_RE.match(key):
        return key
    if not isinstance(key, str):
        raise CkptsyncTypeError(
            f"Checkpoint key {key!r} has type {type(key).__name__}; expected str."
        )
    if not _KEY_RE.match(key):
        raise CkptsyncValueError(
            f"Checkpoint key {key!r} is not a valid op name; expected it to match "
            f"'[A-Za-z0-9.][A-Za-z0-9_.\\-/]*'."
        )
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise CkptsyncValueError(
                f"Checkpoint key {key!r} has an empty, '.' or '..' scope component; "
                f"use names like 'dense0/w'."
            )
    return key


def hdf5_paths(keys: list[str]) -> dict[str, str]:
    """Returns key → HDF5 path of its dataset.

    The path is the key itself (``dense0/w`` → group ``dense0``, dataset ``w``), except
    for a key that is also the scope of another key, as TF names optimizer slots
    (``dense0/w`` beside ``dense0/w/Adam``): HDF5 cannot hold a dataset and a group at
    one path, so that variable's dataset is ``<key>/:value`` (``dense0/w/:value``). A
    TF op name never contains ``:``, so this link name cannot collide with a key.
    """
    scopes: set[str] = set()
    for key in keys:
        parts = key.split("/")
        scopes.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return {k: f"{k}/{SELF_LINK}" if k in scopes else k for k in keys}


def normalize_array(key: str, value: Any) -> np.ndarray:
    """Returns ``value`` as a C-contiguous little-endian array with an allowed dtype.

    Args:
        key: the variable key, for messages.
        value: an ndarray, numpy scalar or anything ``np.asarray`` accepts.

    Raises:
        CkptsyncTypeError: naming the key and dtype when the dtype is not numeric/bool.
    """
    try:
        arr = value if type(value) is np.ndarray else np.asarray(value)
    except Exception as e:  # ragged lists and friends
        raise CkptsyncTypeError(
            f"Value of checkpoint key {key!r} cannot be converted to a numpy array: {e}"
        ) from e
    dt = arr.dtype
    if dt in _LITTLE_DTYPES and arr.flags.c_contiguous:  # as stored already
        return arr
    if dt.fields is not None or dt.itemsize not in _ALLOWED.get(dt.kind, ()):
        raise CkptsyncTypeError(
            f"Checkpoint key {key!r} has dtype {dt.str} ({dt}); expected bool, "
            f"int8..int64, uint8..uint64, float16/32/64 or complex64/128."
        )
    little = dt.newbyteorder("<")
    return np.asarray(arr, dtype=little, order="C")


def le_bytes(arr: np.ndarray) -> memoryview:
    """Returns the C-order little-endian bytes of ``arr`` as a flat byte view."""
    if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and sys.byteorder == "big"):
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    arr = np.ascontiguousarray(arr)
    return memoryview(arr.reshape(-1).view(np.uint8))  # type: ignore[arg-type]


def first_nonfinite(arrays: Mapping[str, Any]) -> str | None:
    """The key of the first floating-point (or complex) array holding NaN or Inf, else
    None. One reduction per array: a sum is finite only if every element is (a
    non-finite sum may be an overflow, so then the elements are checked); a scalar is
    checked as a Python number (a fifth of the time: 100,000-variable models)."""
    with np.errstate(over="ignore", invalid="ignore"):
        for key, value in arrays.items():
            arr = value if type(value) is np.ndarray else np.asarray(value)
            kind = arr.dtype.kind
            if kind not in "fc":
                continue
            if arr.ndim == 0 and arr.dtype.itemsize <= (8 if kind == "f" else 16):
                if not cmath.isfinite(arr.item()):  # (a Python float or complex)
                    return str(key)
            elif (not np.isfinite(np.add.reduce(arr, axis=None))
                    and not np.all(np.isfinite(arr))):
                return str(key)
    return None


def hash_array(arr: np.ndarray) -> str:
    """Returns the xxh3_64 hex digest (16 lowercase hex chars) of the array's C-order
    little-endian bytes."""
    if arr.dtype in _LITTLE_DTYPES and arr.flags.c_contiguous:
        return xxhash.xxh3_64_hexdigest(arr)  # type: ignore[arg-type]  # (its memory)
    return xxhash.xxh3_64_hexdigest(le_bytes(arr))


class IndexEntry(NamedTuple):
    """One variable as listed in the index.

    Attributes:
        name: the key, e.g. ``"dense0/w"``.
        dtype: numpy dtype (native byte order) for the TF name stored on disk.
        shape: the shape, e.g. ``(64, 10)``; ``()`` for a scalar.
        nbytes: ``prod(shape) * dtype.itemsize``.
        xxh3_64: hex digest of the C-order little-endian bytes.
        pack: where the bytes lie in the pack dataset (format version 2, ``_pack``),
            or None for a variable stored as its own dataset.
    """

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    nbytes: int
    xxh3_64: str
    pack: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry as format 1's index lists it."""
        out: dict[str, Any] = {
            "name": self.name,
            "dtype": dtype_name(self.dtype),
            "shape": list(self.shape),
            "nbytes": self.nbytes,
            "xxh3_64": self.xxh3_64,
        }
        return out


_NAMES: dict[np.dtype, str] = {}
_NATIVE: dict[np.dtype, np.dtype] = {}


def dtype_name(dtype: np.dtype) -> str:
    """``dtype.name`` (``"float32"``), cached: numpy computes it anew on every access."""
    name = _NAMES.get(dtype)
    if name is None:
        name = _NAMES[dtype] = dtype.name
    return name


def native_dtype(dtype: np.dtype) -> np.dtype:
    """The native-byte-order dtype an index entry holds for a stored ``dtype``."""
    native = _NATIVE.get(dtype)
    if native is None:
        native = _NATIVE[dtype] = np.dtype(dtype_name(dtype))
    return native


def entry_for(name: str, arr: np.ndarray, pack: int | None = None) -> IndexEntry:
    """Builds the index entry of a normalized array (``pack``: its offset in the pack)."""
    return IndexEntry(name, native_dtype(arr.dtype), arr.shape, arr.nbytes, hash_array(arr),
                      pack)


def valid_keys(keys: list[Any]) -> bool:
    """True when every key is a str :func:`validate_key` accepts: one regex match over
    all of them (a newline in a key would split it: refused first)."""
    return _only(keys, str) and not any("\n" in k for k in keys) and \
        _KEYS_RE.match("".join(k + "\n" for k in keys)) is not None


def encode_index(entries: list[IndexEntry], version: int = FORMAT_VERSION) -> np.ndarray:
    """Returns the index JSON as a uint8 ``[n]`` array (UTF-8, compact, sorted keys):
    the text ``json.dumps(doc, sort_keys=True, separators=(",", ":"))`` gives, written
    directly (a tenth of the time; names are valid keys, which JSON never escapes).
    Format 2's index is by column instead (:func:`_encode_columns`)."""
    if version >= PACKED_FORMAT_VERSION:
        return _encode_columns(entries, version)
    parts = [
        f'{{"dtype":"{dtype_name(e.dtype)}","name":"{e.name}","nbytes":{e.nbytes},'
        f'"shape":[{",".join(map(str, e.shape))}],"xxh3_64":"{e.xxh3_64}"}}'
        for e in entries]
    text = f'{{"format_version":{version},"variables":[{",".join(parts)}]}}'
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def decode_index(raw: bytes, version: int = FORMAT_VERSION) -> dict[str, IndexEntry]:
    """Parses and validates index bytes of a file of format ``version``; returns entries
    by name. Version 2's index is by column (:func:`_decode_columns`).

    Raises:
        ValueError: any schema violation (the caller turns it into DataLossError).
    """
    doc = json.loads(raw.decode("utf-8"))
    if not isinstance(doc, dict) or doc.get("format_version") != version:
        raise ValueError(f"index has no format_version {version}")
    variables = doc.get("variables")
    if version >= PACKED_FORMAT_VERSION:
        return _decode_columns(variables)
    if not isinstance(variables, list):
        raise ValueError("index has no 'variables' list")
    out: dict[str, IndexEntry] = {}
    hex16, dtypes = _HEX16_RE.match, _DTYPES
    for item in variables:
        if not isinstance(item, dict):
            raise ValueError("index entry is not an object")
        name, dtype_name, shape = item.get("name"), item.get("dtype"), item.get("shape")
        nbytes, digest = item.get("nbytes"), item.get("xxh3_64")
        if type(name) is not str or not _VALID_KEY_RE.match(name):
            if not isinstance(name, str):
                raise ValueError(f"index entry name {name!r} is not a string")
            validate_key(name)
        dtype = dtypes.get(dtype_name) if type(dtype_name) is str else None
        if dtype is None:
            raise ValueError(f"entry {name!r} has unknown dtype {dtype_name!r}")
        if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError(f"entry {name!r} has a bad shape {shape!r}")
        if type(nbytes) is not int or nbytes != math.prod(shape) * dtype.itemsize:
            raise ValueError(f"entry {name!r} has nbytes {nbytes!r} inconsistent with shape")
        if type(digest) is not str or not hex16(digest):
            raise ValueError(f"entry {name!r} has a bad xxh3_64 {digest!r}")
        if name in out:
            raise ValueError(f"entry {name!r} is listed twice")
        out[name] = IndexEntry(name, dtype, tuple(shape), nbytes, digest)
    return out


_COLUMNS = ("dtype", "name", "nbytes", "pack", "shape", "xxh3_64")
_KEYS_RE = re.compile(rf"(?:(?=[A-Za-z0-9.]){_COMPONENT}(?:/{_COMPONENT})*\n)*\Z")
_HEXES_RE = re.compile(r"(?:[0-9a-f]{16}\n)*\Z")
_ITEMSIZES = {name: dt.itemsize for name, dt in _DTYPES.items()}


def _encode_columns(entries: list[IndexEntry], version: int) -> np.ndarray:
    """Format 2's index: ``{"format_version": 2, "variables": {column: [value per
    variable]}}``, columns ``dtype, name, nbytes, pack (offset or null), shape,
    xxh3_64`` (compact, sorted keys): json's C encoder writes lists of plain values,
    and the reader checks each column at once (:func:`_decode_columns`)."""
    columns = {
        "dtype": [dtype_name(e.dtype) for e in entries],
        "name": [e.name for e in entries],
        "nbytes": [e.nbytes for e in entries],
        "pack": [e.pack for e in entries],
        "shape": [list(e.shape) for e in entries],
        "xxh3_64": [e.xxh3_64 for e in entries],
    }
    text = json.dumps({"format_version": version, "variables": columns},
                      sort_keys=True, separators=(",", ":"), allow_nan=False)
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def _only(values: list[Any], *types: type) -> bool:
    return set(map(type, values)) <= set(types)


def _decode_columns(variables: Any) -> dict[str, IndexEntry]:
    """Checks format 2's columns (as :func:`decode_index` checks each entry of format
    1, a column at a time) and returns the entries by name. The packed variables (pack
    not null), in index order, must lie back to back from offset 0."""
    if not isinstance(variables, dict) or sorted(variables) != list(_COLUMNS):
        raise ValueError(f"index 'variables' is not an object of the columns {_COLUMNS}")
    dtypes, names, nbytes, packs, shapes, hashes = (variables[c] for c in _COLUMNS)
    columns = (dtypes, names, nbytes, packs, shapes, hashes)
    if not all(type(c) is list for c in columns) or len({len(c) for c in columns}) != 1:
        raise ValueError("index columns are not lists of one length")
    n = len(names)
    # One match over all names (a newline inside a name would split it: refused first).
    if not _only(names, str) or any("\n" in k for k in names) \
            or not _KEYS_RE.match("".join(k + "\n" for k in names)):
        bad = next((k for k in names if type(k) is not str or not _VALID_KEY_RE.match(k)),
                   None)
        raise ValueError(f"index entry name {bad!r} is not a valid key")
    if len(set(names)) != n:
        raise ValueError("index lists a variable twice")
    if not _only(dtypes, str) or not set(dtypes) <= ALLOWED_DTYPE_NAMES:
        raise ValueError(f"index has an unknown dtype in {sorted(set(map(str, dtypes)))}")
    if not _only(shapes, list) or not _only(dims := [d for s in shapes for d in s], int) \
            or (dims and min(dims) < 0):
        raise ValueError("index has a bad shape")
    if not _only(nbytes, int) or nbytes != list(map(int.__mul__, map(math.prod, shapes),
                                                    map(_ITEMSIZES.__getitem__, dtypes))):
        raise ValueError("index has an nbytes inconsistent with its shape")
    if not _only(hashes, str) or any("\n" in h for h in hashes) \
            or not _HEXES_RE.match("".join(h + "\n" for h in hashes)):
        raise ValueError("index has a bad xxh3_64")
    if not _only(packs, int, type(None)):
        raise ValueError("index has a bad pack offset")
    offsets = [p for p in packs if p is not None]
    sizes = [b for b, p in zip(nbytes, packs) if p is not None]
    if offsets != [0, *itertools.accumulate(sizes)][: len(offsets)]:
        raise ValueError("index's packed variables do not lie back to back from offset 0")
    # tuple.__new__ in C, not IndexEntry's Python __new__: a third of the time.
    fields = zip(names, map(_DTYPES.__getitem__, dtypes), map(tuple, shapes), nbytes, hashes,
                 packs)
    return dict(zip(names, map(tuple.__new__, itertools.repeat(IndexEntry), fields)))
