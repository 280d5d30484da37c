"""write_incremental_checkpoint: a checkpoint that names its predecessor and records
what changed since it (format version 3; docs/checkpoint-format.md, ``_delta``).

Two kinds:

- a **delta** (``full=False``): per variable nothing (unchanged), its changed rows
  (indices + the rows' values) or its whole value, whichever is smaller; readers compose
  it with its chain of bases (``_compose``);
- a **full checkpoint with a parent** (``full=True``): every value, as
  ``write_checkpoint`` writes it (format 1 or 2, so every reader reads it alone), plus
  the parent's name and index hash and, per variable, the rows changed since the parent
  (indices only), so a server at the parent can apply it reading only those rows.

Either records each variable's block digest after applying (``digests.py``). The file is
published as ``write_checkpoint``'s (``_atomic.publish``), through the same HDF5 writer
(``writer.write_h5``: the data ``pwrite``-n straight from the arrays).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import xxhash

from ..errors import CkptsyncTypeError, CkptsyncValueError
from . import _delta, _format, _pack, tf_bundle, writer
from ._atomic import publish
from ._delta import FULL, ROWS, SAME, Change, ChangeTable
from ._h5layout import RootValues
from .reader import CheckpointReader

__all__ = ["write_incremental_checkpoint"]


def _parent_of(prefix_path: str, parent: Any) -> tuple[str, CheckpointReader]:
    """The parent's basename (same directory as ``prefix_path``) and an open reader."""
    parent_path = _format.data_path(os.fspath(parent))
    here = os.path.realpath(os.path.dirname(prefix_path) or ".")
    if os.path.realpath(os.path.dirname(parent_path) or ".") != here:
        raise CkptsyncValueError(
            f"parent {os.fspath(parent)!r} is not in the directory of {prefix_path!r}; an "
            f"incremental checkpoint names its predecessor by file name in its own "
            f"directory.")
    name = os.path.basename(parent_path)[: -len(_format.DATA_SUFFIX)]
    if tf_bundle.is_tf_checkpoint(parent_path[: -len(_format.DATA_SUFFIX)]):
        raise CkptsyncValueError(f"parent {os.fspath(parent)!r} is a TensorFlow checkpoint; "
                                 f"an incremental checkpoint's parent is a ckptsync one.")
    if os.path.basename(prefix_path)[: -len(_format.DATA_SUFFIX)] == name:
        raise CkptsyncValueError(f"parent {os.fspath(parent)!r} is the checkpoint being "
                                 f"written; expected its predecessor.")
    try:
        _delta.check_link(name)
    except ValueError as e:
        raise CkptsyncValueError(f"parent {os.fspath(parent)!r}: {e}") from None
    return name, CheckpointReader(parent_path)


def _check_digests(digests: Any, names: list[str]) -> dict[str, str]:
    if not isinstance(digests, Mapping):
        raise CkptsyncTypeError(f"digests must be a mapping from key to block digest hex; "
                                f"got {type(digests).__name__}.")
    missing = [n for n in names if n not in digests]
    if missing:
        raise CkptsyncValueError(f"digests lacks {len(missing)} of the arrays' keys, e.g. "
                                 f"{missing[0]!r}; expected one block digest per array.")
    out = {}
    for n in names:
        d = digests[n]
        if type(d) is not str or not _format._HEX16_RE.match(d):
            raise CkptsyncValueError(f"digests[{n!r}] is {d!r}; expected 16 lowercase hex "
                                     f"digits (digests.variable_digest).")
        out[n] = d
    return out


def _rows(name: str, arr: np.ndarray, change: Any) -> np.ndarray | None:
    """``change`` as sorted unique int64 rows of ``arr``'s dim 0 (None: whole)."""
    if change is None or arr.ndim == 0:
        return None
    try:
        rows = np.asarray(change)
    except Exception as e:
        raise CkptsyncTypeError(f"changes[{name!r}] is not an array of rows: {e}") from e
    if rows.dtype.kind not in "iu" and rows.size:
        raise CkptsyncTypeError(f"changes[{name!r}] has dtype {rows.dtype}; expected int64 "
                                f"row indices (or None for a whole change).")
    rows = np.unique(rows.astype(np.int64, copy=False).reshape(-1))
    if rows.size and (rows[0] < 0 or rows[-1] >= arr.shape[0]):
        raise CkptsyncValueError(
            f"changes[{name!r}] lists rows {int(rows[0])}..{int(rows[-1])}; expected rows "
            f"within [0, {arr.shape[0]}) of its shape {list(arr.shape)}.")
    return rows


def _plan(prepared: dict[str, np.ndarray], changes: Mapping[str, Any],
          parent_index: Mapping[str, _format.IndexEntry], digests: dict[str, str],
          full: bool) -> tuple[list[Change], list[np.ndarray], dict[str, np.ndarray]]:
    """(the variables table, the rows of each ``rows`` entry in order, the arrays a
    delta stores)."""
    table: list[Change] = []
    all_rows: list[np.ndarray] = []
    stored: dict[str, np.ndarray] = {}
    at = 0  # where the next rows entry's indices start in the rows dataset
    for name in sorted(prepared):
        arr = prepared[name]
        dtype, shape = _format.native_dtype(arr.dtype), arr.shape
        before = parent_index.get(name)
        if before is None or before.dtype != dtype or before.shape != shape:
            kind, rows = FULL, None  # new, or another shape or dtype: stored whole
        elif name not in changes:
            kind, rows = SAME, None
        else:
            rows = _rows(name, arr, changes[name])
            row_nbytes = arr.nbytes // arr.shape[0] if rows is not None else 0
            if rows is None:
                kind = FULL
            elif rows.size == 0:
                kind, rows = SAME, None
            elif rows.size * (row_nbytes + 8) < arr.nbytes:
                kind = ROWS
            else:
                kind, rows = FULL, None  # the rows would take as much as the value
        if kind == ROWS:
            assert rows is not None
            all_rows.append(rows)
            if not full:
                stored[name] = np.ascontiguousarray(arr[rows])
            table.append(Change(name, kind, dtype, shape, digests[name], at, int(rows.size)))
            at += int(rows.size)
            continue
        if kind == FULL and not full:
            stored[name] = arr
        table.append(Change(name, kind, dtype, shape, digests[name]))
    return table, all_rows, stored


def write_incremental_checkpoint(
    prefix: str | os.PathLike[str],
    arrays: Mapping[str, np.ndarray],
    changes: Mapping[str, np.ndarray | None] | None,
    parent: str | os.PathLike[str] | None,
    digests: Mapping[str, str] | None,
    full: bool,
    global_step: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    sync_directory: bool = True,
) -> str:
    """Writes ``<prefix>.h5``: a delta on ``parent`` or a full checkpoint naming it.

    Args:
        prefix: as :func:`write_checkpoint` (``"ckpts/model.ckpt-1200"``).
        arrays: every current value, key -> array (as :func:`write_checkpoint`).
        changes: what changed since ``parent``, as ``Session.read_variables_and_changes``
            gives it: key -> None (changed as a whole) or int64 rows of dim 0 (any
            order; duplicates allowed); a key not in it is unchanged. A variable that
            ``parent`` lacks, or holds with another shape or dtype, is stored whole.
            Ignored when ``parent`` is None.
        parent: the predecessor's prefix, a checkpoint in the same directory (a full
            one or a delta); None writes a plain full checkpoint (``write_checkpoint``).
        digests: key -> the block digest (``digests.variable_digest``, 16 hex) of each
            current value, recorded for readers to check what they compose (not
            recomputed here). Ignored when ``parent`` is None.
        full: True writes every value (a full checkpoint with a parent: it reads alone,
            with every version of ckptsync); False a delta (format version 3), storing
            per variable nothing, its changed rows (indices + values) or its value,
            whichever is smaller.
        global_step, metadata, sync_directory: as :func:`write_checkpoint`.

    Returns:
        ``prefix`` as a str (without ``.h5``).

    Raises:
        CkptsyncTypeError: as :func:`write_checkpoint`; changes or digests of the wrong
            type.
        CkptsyncValueError: as :func:`write_checkpoint`; ``full=False`` without a
            parent; a parent in another directory; a missing digest; rows out of range.
        NotFoundError, DataLossError: the parent cannot be read (its index is needed).
        ResourceExhaustedError, PermissionDeniedError, UnknownError: as
            :func:`write_checkpoint`; the temp file is removed, nothing else touched.

    Thread-safety: safe to call concurrently for different prefixes.
    """
    if parent is None:
        if not full:
            raise CkptsyncValueError("an incremental checkpoint (full=False) needs a parent "
                                     "to be a delta on; pass parent= or full=True.")
        return writer.write_checkpoint(prefix, arrays, global_step, metadata, sync_directory)
    path = _format.data_path(os.fspath(prefix))
    step = writer.check_global_step(global_step)
    meta = writer.padded_metadata(writer.metadata_json(metadata))
    if changes is not None and not isinstance(changes, Mapping):
        raise CkptsyncTypeError(f"changes must be a mapping from key to rows or None; got "
                                f"{type(changes).__name__}.")
    link, parent_reader = _parent_of(path, parent)
    with parent_reader, _format.gc_paused():
        prepared = writer.prepare_arrays(arrays)
        checked = _check_digests(digests, list(prepared))
        table, all_rows, stored = _plan(prepared, changes or {}, parent_reader._index,
                                        checked, bool(full))
        rows = (np.concatenate(all_rows) if all_rows else np.zeros(0, np.int64)).astype("<i8")
        changes_table = ChangeTable(link, parent_reader.index_xxh3, int(rows.size),
                                    xxhash.xxh3_64_hexdigest(rows.tobytes()),
                                    {c.name: c for c in table})
        _write(path, prepared if full else stored, changes_table, rows, bool(full), step, meta,
               sync_directory)
    return path[: -len(_format.DATA_SUFFIX)]


def _write(path: str, arrays: dict[str, np.ndarray], table: ChangeTable, rows: np.ndarray,
           full: bool, step: int | None, meta: str, sync_directory: bool) -> None:
    entries, pack_nbytes = _pack.index_entries(sorted(arrays), arrays)
    extra: list[tuple[str, np.ndarray, str]] = [
        (_delta.ROWS_DATASET, rows, table.rows_xxh3)]
    if full:
        version = _format.FORMAT_VERSION if pack_nbytes is None else \
            _format.PACKED_FORMAT_VERSION
        index = _format.encode_index(entries, version)
        doc = _delta.encode_changes(table)
        extra.append((_delta.CHANGES_DATASET, doc, _format.hash_array(doc)))
        links = ((_delta.PARENT_ATTR, table.link), (_delta.PARENT_HASH_ATTR,
                                                    table.link_index_xxh3))
    else:
        version = _delta.DELTA_FORMAT_VERSION
        index = _delta.encode_delta_index(entries, table)
        links = ((_delta.BASE_ATTR, table.link), (_delta.BASE_HASH_ATTR,
                                                  table.link_index_xxh3))
    packed = [e for e in entries if e.pack is not None]
    values = RootValues(
        global_step=step, created_unix_s=time.time(), writer=writer.WRITER, metadata_json=meta,
        hashes=[e.xxh3_64 for e in entries if e.pack is None], index=index,
        index_hash=_format.hash_array(index), format_version=version,
        pack_hash=_pack.pack_hash(packed, arrays) if packed else "",
        links=links, extra=tuple(extra))
    raw = writer._raw_writes_are_safe()

    def write(tmp: str) -> None:
        writer.write_h5(tmp, values, entries, arrays, raw, pack_nbytes)

    publish(path, write, "write checkpoint", sync_directory=sync_directory)
