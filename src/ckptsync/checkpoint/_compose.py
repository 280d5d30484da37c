"""Composing an incremental checkpoint (format version 3) with its chain of bases.

A delta names its base (``base``, a file in the same directory) and the hash of the
base's index (``base_index_xxh3``); the base may itself be a delta. :func:`open_chain`
opens the chain from the delta back to the nearest full checkpoint, refusing a missing
or replaced base, a base outside the directory and a chain that loops, each as a
DataLossError naming the delta read and the base at fault. :func:`read_composed` reads
variables' composed values: each from the last member that stores it whole (the full
checkpoint, or a delta where it changed as a whole), then every later delta's changed
rows applied in order; with ``verify`` every stored array read is checked against its
xxh3_64 and every composed value against the block digest the delta recorded.

Used by ``CheckpointReader`` (``get_tensor``, ``read_checkpoint_into``) and by
``changes.py``. Thread-safety: as the readers it is given (one thread at a time).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import DataLossError, NotFoundError, OpError
from . import _delta, _format, tf_bundle
from .digests import block_digests, variable_digest

__all__ = ["Chain", "open_chain", "read_composed", "read_extra", "read_rows",
           "read_rows_table"]

#: A chain longer than this is refused (a Saver writes a full checkpoint every 16).
MAX_CHAIN = 10_000


def _message(e: OpError) -> str:
    return e.message


class Chain:
    """The open readers of a delta's chain, nearest full checkpoint first and the delta
    (owned by its caller, not closed here) last; each delta's rows indices once read."""

    def __init__(self, members: list[Any]):
        self.members = members
        self._rows: dict[int, np.ndarray] = {}

    def rows(self, i: int, verify: bool) -> np.ndarray:
        """Member ``i``'s rows dataset (int64, checked against its index's hash)."""
        got = self._rows.get(i)
        if got is None:
            got = self._rows[i] = read_rows_table(self.members[i], self.members[i]._delta,
                                                  verify)
        return got

    def close(self) -> None:
        for m in self.members[:-1]:
            m.close()
        self.members = self.members[-1:]


def _loss(message: str) -> OpError:
    return DataLossError(None, None, message)


def open_chain(head: Any) -> Chain:
    """Opens the chain of ``head`` (an open ``CheckpointReader`` of a delta).

    Raises:
        DataLossError: a base is missing, unreadable, replaced (its index hash is not the
            one recorded), outside the delta's directory, not a ckptsync checkpoint, or
            the chain loops or exceeds :data:`MAX_CHAIN` members; the message names the
            delta read and the base.
    """
    members = [head]
    directory = os.path.realpath(os.path.dirname(head.path) or ".")
    seen = {os.path.realpath(head.path)}
    cur = head
    try:
        while cur.is_delta:
            base = cur.predecessor
            path = _format.data_path(base)
            what = (f"Checkpoint {head.path} is an incremental checkpoint composed from "
                    f"base {base}" + ("" if cur is head else f" (the base of {cur.path})"))
            real = os.path.realpath(path)
            if os.path.dirname(real) != directory:
                raise _loss(f"{what}, whose file {path} lies outside the directory "
                            f"{directory} (it resolves to {real}); refused")
            if real in seen:
                raise _loss(f"{what}, which is already in its chain: the chain loops; "
                            f"refused")
            if len(members) >= MAX_CHAIN:
                raise _loss(f"{what}: the chain has more than {MAX_CHAIN} members; refused")
            if not os.path.lexists(path) and tf_bundle.is_tf_checkpoint(base):
                raise _loss(f"{what}, which is a TensorFlow checkpoint, not a ckptsync one")
            try:
                reader = type(head)(base)
            except NotFoundError:
                raise _loss(f"{what}, which is missing ({path} does not exist); the "
                            f"delta cannot be read without it") from None
            except OpError as e:
                raise _loss(f"{what}, which cannot be read: {_message(e)}") from e
            members.append(reader)
            seen.add(real)
            if reader.index_xxh3 != cur.predecessor_index_xxh3:
                raise _loss(f"{what}, but {path} was replaced: its index hash "
                            f"{reader.index_xxh3} is not the recorded "
                            f"{cur.predecessor_index_xxh3}")
            cur = reader
    except BaseException:
        for m in members[1:]:
            m.close()
        raise
    return Chain(members[::-1])


def read_extra(reader: Any, path: str, dtype: np.dtype, shape: tuple[int, ...],
               digest: str, verify: bool) -> np.ndarray:
    """Reads dataset ``path`` of an open reader (dtype and shape checked; with
    ``verify`` its bytes and ``xxh3_64`` attribute against ``digest``)."""
    ds = reader._open_dataset(path.encode("ascii"))
    if ds is None:
        raise reader._loss(f"no /{path} dataset")
    nbytes = int(np.prod(shape)) * dtype.itemsize
    entry = _format.IndexEntry(path, dtype, shape, nbytes, digest)
    try:
        plan = reader._plan(ds, entry, verify, path)
        return reader._read_planned([plan], verify)[0]  # type: ignore[no-any-return]
    finally:
        ds.close()


def read_rows_table(reader: Any, table: _delta.ChangeTable, verify: bool) -> np.ndarray:
    """The rows dataset (int64 ``[rows_count]``) of ``table``'s file."""
    return read_extra(reader, _delta.ROWS_DATASET, np.dtype(np.int64), (table.rows_count,),
                      table.rows_xxh3, verify)


def rows_of(reader: Any, change: _delta.Change, rows: np.ndarray) -> np.ndarray:
    """One variable's changed rows from its file's rows dataset, checked."""
    assert change.rows_at is not None and change.nrows is not None
    got = rows[change.rows_at:change.rows_at + change.nrows]
    if not _delta.check_rows(got, change.shape[0]):
        raise reader._loss(f"changed rows are not strictly increasing within "
                           f"[0, {change.shape[0]})", change.name)
    return got


def read_rows(reader: Any, name: str, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` (checked, increasing) of variable ``name`` of a full checkpoint,
    ``[len(rows), *shape[1:]]``: one ``pread`` per run of consecutive rows where the
    variable is a dataset of its own (packed ones, and hosts without raw reads, read
    the variable whole, verified). The rows' bytes are not hashed on their own: the
    caller checks the block digest of the value it builds."""
    entry = reader._stored[name]
    out = np.empty((len(rows), *entry.shape[1:]), entry.dtype)
    if entry.pack is not None or reader._fd is None or not out.nbytes:
        return np.ascontiguousarray(reader._read_tensors([name], True)[0][rows])
    ds = reader._open_dataset(reader._paths[name])
    if ds is None:
        raise reader._loss("listed in the index but no such dataset", name)
    try:
        offset = reader._plan(ds, entry, False, name).offset
    finally:
        ds.close()
    row_nbytes = entry.nbytes // entry.shape[0]
    flat = memoryview(out.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
    breaks = (np.flatnonzero(np.diff(rows) != 1) + 1).tolist()
    for a, b in zip([0, *breaks], [*breaks, len(rows)]):
        view = flat[a * row_nbytes:b * row_nbytes]
        if reader._pread_into(view, offset + int(rows[a]) * row_nbytes) != len(view):
            raise reader._loss("file ends inside the data (truncated?)", name)
    return out


def read_composed(head: Any, keys: Sequence[str], outs: Sequence[np.ndarray], verify: bool,
                  verify_first: bool = False) -> list[np.ndarray]:
    """Fills ``outs`` (C-contiguous, of the composed shapes and dtypes) with the composed
    values of ``keys`` (listed by ``head``, an open delta reader). With ``verify_first``
    (and ``verify``) nothing is written into ``outs`` unless every value checks.

    Raises:
        DataLossError: as :func:`open_chain`; a variable missing from or of another
            shape or dtype in a base; a stored array, rows or composed value that does
            not match its hash or block digest.
    """
    chain = head._chain
    if chain is None:
        chain = head._chain = open_chain(head)
    members = chain.members
    staged = verify and verify_first
    targets = [np.empty(o.shape, o.dtype) for o in outs] if staged else list(outs)
    starts: dict[int, list[int]] = {}
    patches: dict[int, list[int]] = {}
    for j, key in enumerate(keys):
        want = head._index[key]
        for i in range(len(members) - 1, 0, -1):
            c = members[i]._delta.variables.get(key)
            if c is None or c.dtype != want.dtype or c.shape != want.shape:
                raise _base_mismatch(head, members[i], key, want)
            if c.kind == _delta.FULL:
                starts.setdefault(i, []).append(j)
                break
            if c.kind == _delta.ROWS:
                patches.setdefault(i, []).append(j)
        else:
            e = members[0]._index.get(key)
            if e is None or e.dtype != want.dtype or e.shape != want.shape:
                raise _base_mismatch(head, members[0], key, want)
            starts.setdefault(0, []).append(j)
    for i, m in enumerate(members):
        js = starts.get(i)
        if js:
            m._read_tensors([keys[j] for j in js], verify, [targets[j] for j in js])
        js = patches.get(i)
        if js:
            names = [keys[j] for j in js]
            values = m._read_tensors(names, verify)
            rows = chain.rows(i, verify)
            for j, name, value in zip(js, names, values):
                targets[j][rows_of(m, m._delta.variables[name], rows)] = value
    if verify:
        for key, value in zip(keys, targets):
            recorded = head._delta.variables[key].digest
            actual = variable_digest(block_digests(value))
            if actual != recorded:
                raise head._loss(
                    f"composed value's block digest {actual} != recorded {recorded} "
                    f"(composed from {', '.join(m.path for m in members)})", key)
    if staged:
        for out, value in zip(outs, targets):
            out[...] = value
    return list(outs)


def _base_mismatch(head: Any, member: Any, key: str, want: _format.IndexEntry) -> OpError:
    e = member._index.get(key)
    found = "does not list it" if e is None else f"holds {e.dtype.name} {list(e.shape)}"
    return head._loss(f"its chain member {member.path} {found}; expected "
                      f"{want.dtype.name} {list(want.shape)} to compose from", key)
