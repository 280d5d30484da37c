"""The tables of incremental checkpoints (format version 3; docs/checkpoint-format.md).

Two kinds of file record what changed since their predecessor:

- a **delta** (``ckptsync_format_version`` 3): root attributes ``base`` and
  ``base_index_xxh3``; its index (``/_ckptsync/index``) holds the *stored* arrays (format
  2's columns: a changed variable's value or its changed rows' values, at the
  variable's key or packed) and the *variables* table below, one JSON document under one
  hash, so a chain of deltas is linked by index hashes;
- a **full checkpoint with a parent** (format 1 or 2, which every reader reads): root
  attributes ``parent`` and ``parent_index_xxh3`` and the dataset ``/_ckptsync/changes``
  (uint8 JSON with its ``xxh3_64``) holding the same variables table.

The variables table, by column, every variable of the checkpoint in name order: ``name``,
``kind`` (``same``/``rows``/``full``), ``dtype``, ``shape``, ``digest`` (the variable's
block digest after applying, ``digests.variable_digest``) and ``rows`` (the number of
changed rows for kind ``rows``, else null). The changed rows' indices (sorted, unique,
int64) lie back to back in name order in ``/_ckptsync/rows`` (int64 ``[count]``, its
hash in the document).

Pure functions: nothing here touches the file system. Thread-safe.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from . import _format
from ._format import IndexEntry

__all__ = ["BASE_ATTR", "BASE_HASH_ATTR", "CHANGES_DATASET", "DELTA_FORMAT_VERSION",
           "KINDS", "PARENT_ATTR", "PARENT_HASH_ATTR", "ROWS_DATASET", "Change",
           "ChangeTable", "decode_changes", "decode_delta_index", "encode_changes",
           "encode_delta_index"]

DELTA_FORMAT_VERSION = _format.DELTA_FORMAT_VERSION
ROWS_DATASET = "_ckptsync/rows"
CHANGES_DATASET = "_ckptsync/changes"
BASE_ATTR, BASE_HASH_ATTR = "base", "base_index_xxh3"
PARENT_ATTR, PARENT_HASH_ATTR = "parent", "parent_index_xxh3"
SAME, ROWS, FULL = "same", "rows", "full"
KINDS = (SAME, ROWS, FULL)
_VAR_COLUMNS = ("digest", "dtype", "kind", "name", "rows", "shape")


class Change(NamedTuple):
    """One variable of a variables table.

    Attributes:
        name: the key.
        kind: ``"same"`` (unchanged since the predecessor), ``"rows"`` (rows of dim 0
            changed) or ``"full"`` (changed as a whole, or new).
        dtype: numpy dtype (native byte order).
        shape: the variable's shape (after applying).
        digest: the block digest after applying (16 hex digits).
        rows_at: for kind ``rows``, where its indices start in the rows dataset
            (elements), else None.
        nrows: for kind ``rows``, how many rows changed, else None.
    """

    name: str
    kind: str
    dtype: np.dtype
    shape: tuple[int, ...]
    digest: str
    rows_at: int | None = None
    nrows: int | None = None


class ChangeTable(NamedTuple):
    """A delta's or a full-with-parent checkpoint's record of its predecessor.

    Attributes:
        link: the predecessor's prefix basename (same directory).
        link_index_xxh3: the xxh3_64 of the predecessor's index bytes.
        rows_count: elements of the rows dataset (int64).
        rows_xxh3: xxh3_64 of the rows dataset's little-endian bytes.
        variables: name -> :class:`Change`, in name order.
    """

    link: str
    link_index_xxh3: str
    rows_count: int
    rows_xxh3: str
    variables: dict[str, Change]


def check_link(link: Any) -> str:
    """A predecessor basename as stored: a valid key without ``/`` (so it names a file
    in the same directory). Raises ValueError."""
    if type(link) is not str or "/" in link or not _format.valid_keys([link]):
        raise ValueError(f"predecessor name {link!r} is not a file name in the same "
                         "directory")
    return link


def _variable_columns(changes: Sequence[Change]) -> dict[str, list[Any]]:
    return {
        "digest": [c.digest for c in changes],
        "dtype": [_format.dtype_name(c.dtype) for c in changes],
        "kind": [c.kind for c in changes],
        "name": [c.name for c in changes],
        "rows": [c.nrows for c in changes],
        "shape": [list(c.shape) for c in changes],
    }


def _dumps(doc: Mapping[str, Any]) -> np.ndarray:
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def encode_delta_index(stored: list[IndexEntry], table: ChangeTable) -> np.ndarray:
    """A delta's index document as uint8 ``[n]`` (compact JSON, sorted keys)."""
    stored_doc = json.loads(_format.encode_index(stored, 2).tobytes())["variables"]
    return _dumps({
        "base": table.link, "base_index_xxh3": table.link_index_xxh3,
        "format_version": DELTA_FORMAT_VERSION,
        "rows": {"count": table.rows_count, "xxh3_64": table.rows_xxh3},
        "stored": stored_doc,
        "variables": _variable_columns(list(table.variables.values())),
    })


def encode_changes(table: ChangeTable) -> np.ndarray:
    """A full-with-parent checkpoint's ``/_ckptsync/changes`` document as uint8 ``[n]``."""
    return _dumps({
        "parent": table.link, "parent_index_xxh3": table.link_index_xxh3,
        "rows": {"count": table.rows_count, "xxh3_64": table.rows_xxh3},
        "variables": _variable_columns(list(table.variables.values())),
    })


def _hex16(value: Any, what: str) -> str:
    if type(value) is not str or not _format._HEX16_RE.match(value):
        raise ValueError(f"{what} {value!r} is not 16 lowercase hex digits")
    return value


def _rows_info(doc: Mapping[str, Any]) -> tuple[int, str]:
    rows = doc.get("rows")
    if not isinstance(rows, dict) or sorted(rows) != ["count", "xxh3_64"]:
        raise ValueError("'rows' is not an object of count and xxh3_64")
    count = rows["count"]
    if type(count) is not int or count < 0:
        raise ValueError(f"rows count {count!r} is not a non-negative int")
    return count, _hex16(rows["xxh3_64"], "rows xxh3_64")


def _decode_variables(columns: Any, rows_count: int) -> dict[str, Change]:
    if not isinstance(columns, dict) or sorted(columns) != list(_VAR_COLUMNS):
        raise ValueError(f"'variables' is not an object of the columns {_VAR_COLUMNS}")
    digests, dtypes, kinds, names, nrows, shapes = (columns[c] for c in _VAR_COLUMNS)
    cols = (digests, dtypes, kinds, names, nrows, shapes)
    if not all(type(c) is list for c in cols) or len({len(c) for c in cols}) != 1:
        raise ValueError("variables columns are not lists of one length")
    if not _format.valid_keys(names):
        bad = next((k for k in names if type(k) is not str
                    or not _format._VALID_KEY_RE.match(k)), None)
        raise ValueError(f"variable name {bad!r} is not a valid key")
    if any(a >= b for a, b in zip(names, names[1:])):
        raise ValueError("variables are not listed once each in name order")
    out: dict[str, Change] = {}
    at = 0
    for name, kind, dtype_name, shape, digest, n in zip(names, kinds, dtypes, shapes,
                                                        digests, nrows):
        dtype = _format._DTYPES.get(dtype_name) if type(dtype_name) is str else None
        if dtype is None:
            raise ValueError(f"variable {name!r} has unknown dtype {dtype_name!r}")
        if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError(f"variable {name!r} has a bad shape {shape!r}")
        if kind not in KINDS:
            raise ValueError(f"variable {name!r} has kind {kind!r}; expected one of {KINDS}")
        _hex16(digest, f"variable {name!r} digest")
        if kind == ROWS:
            if type(n) is not int or n < 1 or not shape or n > shape[0]:
                raise ValueError(f"variable {name!r} of kind rows has a bad row count {n!r}")
            out[name] = Change(name, kind, dtype, tuple(shape), digest, at, n)
            at += n
        else:
            if n is not None:
                raise ValueError(f"variable {name!r} of kind {kind} lists rows")
            out[name] = Change(name, kind, dtype, tuple(shape), digest)
    if at != rows_count:
        raise ValueError(f"the variables' rows add up to {at}, not the rows count "
                         f"{rows_count}")
    return out


def decode_delta_index(raw: bytes) -> tuple[dict[str, IndexEntry], ChangeTable]:
    """Parses and checks a delta's index bytes; returns (stored entries by name, the
    table). A stored array must be the value (kind ``full``) or the changed rows'
    values (kind ``rows``: ``[nrows, *shape[1:]]``) of its variable, and every changed
    variable must have one.

    Raises:
        ValueError: any schema violation (the caller makes it a DataLossError).
    """
    doc = json.loads(raw.decode("utf-8"))
    keys = ["base", "base_index_xxh3", "format_version", "rows", "stored", "variables"]
    if not isinstance(doc, dict) or sorted(doc) != keys:
        raise ValueError(f"index is not an object of {keys}")
    if doc["format_version"] != DELTA_FORMAT_VERSION:
        raise ValueError(f"index has no format_version {DELTA_FORMAT_VERSION}")
    link = check_link(doc["base"])
    link_hash = _hex16(doc["base_index_xxh3"], "base_index_xxh3")
    count, rows_hash = _rows_info(doc)
    stored = _format._decode_columns(doc["stored"])
    variables = _decode_variables(doc["variables"], count)
    changed = [c for c in variables.values() if c.kind != SAME]
    if [c.name for c in changed] != list(stored):
        raise ValueError("the stored arrays are not those of the changed variables")
    for c in changed:
        e = stored[c.name]
        want = c.shape if c.kind == FULL else (c.nrows, *c.shape[1:])
        if e.dtype != c.dtype or e.shape != want:
            raise ValueError(
                f"variable {c.name!r} ({c.kind}) stores {e.dtype.name} {list(e.shape)}; "
                f"expected {c.dtype.name} {list(want)}")
    return stored, ChangeTable(link, link_hash, count, rows_hash, variables)


def decode_changes(raw: bytes, index: Mapping[str, IndexEntry]) -> ChangeTable:
    """Parses and checks a full-with-parent checkpoint's changes document against its
    (format 1 or 2) ``index``: the same variables, dtypes and shapes.

    Raises:
        ValueError: any schema violation.
    """
    doc = json.loads(raw.decode("utf-8"))
    keys = ["parent", "parent_index_xxh3", "rows", "variables"]
    if not isinstance(doc, dict) or sorted(doc) != keys:
        raise ValueError(f"changes document is not an object of {keys}")
    link = check_link(doc["parent"])
    link_hash = _hex16(doc["parent_index_xxh3"], "parent_index_xxh3")
    count, rows_hash = _rows_info(doc)
    variables = _decode_variables(doc["variables"], count)
    if list(variables) != sorted(index):
        raise ValueError("the changes document does not list the index's variables")
    for name, c in variables.items():
        e = index[name]
        if e.dtype != c.dtype or e.shape != c.shape:
            raise ValueError(f"variable {name!r} is {c.dtype.name} {list(c.shape)} in the "
                             f"changes, {e.dtype.name} {list(e.shape)} in the index")
    return ChangeTable(link, link_hash, count, rows_hash, variables)


def composed_entries(table: ChangeTable) -> dict[str, IndexEntry]:
    """A delta's variables as index entries (composed shapes and dtypes; no xxh3_64:
    a composed value is checked by its block digest)."""
    return {c.name: IndexEntry(c.name, c.dtype, c.shape, math.prod(c.shape) * c.dtype.itemsize,
                               "")
            for c in table.variables.values()}


def check_rows(rows: np.ndarray, n: int) -> bool:
    """True when ``rows`` (int64) is strictly increasing within ``[0, n)``."""
    return bool(rows.size == 0 or (rows[0] >= 0 and rows[-1] < n
                                   and (rows.size < 2 or np.all(rows[1:] > rows[:-1]))))
