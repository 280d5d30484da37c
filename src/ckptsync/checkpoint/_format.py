"""Constants and pure helpers of the on-disk format (see docs/checkpoint-format.md).

Nothing here touches the file system. Keys, dtypes, hashes and the index JSON are
defined once here and shared by the writer and the reader.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

from ..errors import CkptsyncTypeError, CkptsyncValueError

FORMAT_VERSION = 1
DATA_SUFFIX = ".h5"
INDEX_GROUP = "_ckptsync"
INDEX_DATASET = "_ckptsync/index"
HASH_ATTR = "xxh3_64"
SELF_LINK = ":value"  # dataset name of a variable whose key is also a scope
# HDF5 file-format bounds: 1.8 object headers and superblock v2 carry metadata checksums,
# so flipped metadata bytes are caught by the library; readable by HDF5 >= 1.8 tools.
LIBVER = ("v108", "v108")
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"

# TF's op-name regex (tensorflow/core/framework/node_def_util.cc), without '>'.
_KEY_RE = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\-/]*\Z")
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
        arr = np.asarray(value)
    except Exception as e:  # ragged lists and friends
        raise CkptsyncTypeError(
            f"Value of checkpoint key {key!r} cannot be converted to a numpy array: {e}"
        ) from e
    dt = arr.dtype
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
    non-finite sum may be an overflow, so then the elements are checked)."""
    with np.errstate(over="ignore", invalid="ignore"):
        for key, value in arrays.items():
            arr = np.asarray(value)
            if (arr.dtype.kind in "fc" and not np.isfinite(np.add.reduce(arr, axis=None))
                    and not np.all(np.isfinite(arr))):
                return str(key)
    return None


def hash_array(arr: np.ndarray) -> str:
    """Returns the xxh3_64 hex digest (16 lowercase hex chars) of the array's bytes."""
    return xxhash.xxh3_64_hexdigest(le_bytes(arr))


@dataclass(frozen=True)
class IndexEntry:
    """One variable as listed in the index.

    Attributes:
        name: the key, e.g. ``"dense0/w"``.
        dtype: numpy dtype (native byte order) for the TF name stored on disk.
        shape: the shape, e.g. ``(64, 10)``; ``()`` for a scalar.
        nbytes: ``prod(shape) * dtype.itemsize``.
        xxh3_64: hex digest of the C-order little-endian bytes.
    """

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    nbytes: int
    xxh3_64: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dtype": dtype_name(self.dtype),
            "shape": list(self.shape),
            "nbytes": self.nbytes,
            "xxh3_64": self.xxh3_64,
        }


_NAMES: dict[np.dtype, str] = {}


def dtype_name(dtype: np.dtype) -> str:
    """``dtype.name`` (``"float32"``), cached: numpy computes it anew on every access."""
    name = _NAMES.get(dtype)
    if name is None:
        name = _NAMES[dtype] = dtype.name
    return name


def entry_for(name: str, arr: np.ndarray) -> IndexEntry:
    """Builds the index entry of a normalized array."""
    return IndexEntry(
        name, np.dtype(dtype_name(arr.dtype)), tuple(arr.shape), int(arr.nbytes),
        hash_array(arr)
    )


def encode_index(entries: list[IndexEntry]) -> np.ndarray:
    """Returns the index JSON as a uint8 ``[n]`` array (UTF-8, compact, sorted keys)."""
    doc = {"format_version": FORMAT_VERSION, "variables": [e.to_json() for e in entries]}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def decode_index(raw: bytes) -> dict[str, IndexEntry]:
    """Parses and validates index bytes; returns entries by name.

    Raises:
        ValueError: any schema violation (the caller turns it into DataLossError).
    """
    doc = json.loads(raw.decode("utf-8"))
    if not isinstance(doc, Mapping) or doc.get("format_version") != FORMAT_VERSION:
        raise ValueError("index has no format_version 1")
    variables = doc.get("variables")
    if not isinstance(variables, list):
        raise ValueError("index has no 'variables' list")
    out: dict[str, IndexEntry] = {}
    for item in variables:
        if not isinstance(item, Mapping):
            raise ValueError("index entry is not an object")
        name, dtype_name, shape = item.get("name"), item.get("dtype"), item.get("shape")
        nbytes, digest = item.get("nbytes"), item.get("xxh3_64")
        if not isinstance(name, str):
            raise ValueError(f"index entry name {name!r} is not a string")
        validate_key(name)
        if dtype_name not in ALLOWED_DTYPE_NAMES:
            raise ValueError(f"entry {name!r} has unknown dtype {dtype_name!r}")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError(f"entry {name!r} has a bad shape {shape!r}")
        dtype = _DTYPES[dtype_name]
        if type(nbytes) is not int or nbytes != math.prod(shape) * dtype.itemsize:
            raise ValueError(f"entry {name!r} has nbytes {nbytes!r} inconsistent with shape")
        if not isinstance(digest, str) or not _HEX16_RE.match(digest):
            raise ValueError(f"entry {name!r} has a bad xxh3_64 {digest!r}")
        if name in out:
            raise ValueError(f"entry {name!r} is listed twice")
        out[name] = IndexEntry(name, dtype, tuple(shape), nbytes, digest)
    return out
