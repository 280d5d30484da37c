"""What an incremental checkpoint changed, and the chain it composes from.

:func:`checkpoint_chain` lists the checkpoints a prefix composes from (nearest full one
first); :func:`read_changes` reads what one checkpoint records against its predecessor,
without composing: the server's copy-on-write apply reads it for a checkpoint whose
predecessor it serves. The format is docs/checkpoint-format.md (version 3).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from ..errors import NotFoundError
from . import _compose, _delta, _format, tf_bundle
from .reader import CheckpointReader, read_checkpoint

__all__ = ["CheckpointChanges", "VariableChange", "checkpoint_chain", "read_changes"]


@dataclass(frozen=True)
class VariableChange:
    """One variable of :class:`CheckpointChanges`.

    Attributes:
        name: the key.
        kind: ``"same"`` (unchanged since the parent: nothing read), ``"rows"`` (rows of
            dim 0 changed) or ``"full"`` (changed as a whole, new, or a checkpoint
            without a parent).
        rows: for ``rows``, the changed rows (int64 ``[k]``, strictly increasing); else
            None.
        values: for ``rows``, the changed rows' values ``[k, *shape[1:]]`` in ``rows``
            order; for ``full``, the whole value; for ``same``, None.
        digest: the variable's block digest after applying (``digests.variable_digest``,
            16 hex), or None for a checkpoint without a parent (none is recorded).
        shape: the variable's shape after applying.
        dtype: its numpy dtype.
    """

    name: str
    kind: str
    rows: np.ndarray | None
    values: np.ndarray | None
    digest: str | None
    shape: tuple[int, ...]
    dtype: np.dtype


@dataclass(frozen=True, eq=False)
class CheckpointChanges(Mapping[str, VariableChange]):
    """What one checkpoint records against its predecessor; a mapping name ->
    :class:`VariableChange` (in name order).

    Attributes:
        prefix: the checkpoint read.
        parent: the predecessor's prefix (a delta's base, a full checkpoint's parent),
            or None for a full checkpoint without one.
        parent_index_xxh3: the predecessor's index hash it records (compare with
            ``CheckpointReader(parent).index_xxh3``), or None.
        global_step: its global step, or None.
        is_full: True when it holds every value (it composes alone).
        variables: name -> :class:`VariableChange`.
        index_xxh3: this checkpoint's own index hash (what a delta on it records as
            ``base_index_xxh3``); None for TF's checkpoints.
    """

    prefix: str
    parent: str | None
    parent_index_xxh3: str | None
    global_step: int | None
    is_full: bool
    variables: dict[str, VariableChange] = field(default_factory=dict)
    index_xxh3: str | None = None

    def __getitem__(self, name: str) -> VariableChange:
        return self.variables[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.variables)

    def __len__(self) -> int:
        return len(self.variables)


def checkpoint_chain(prefix: str | os.PathLike[str]) -> list[str]:
    """The prefixes ``prefix`` composes from: the nearest full checkpoint first, then
    each delta, ending with ``prefix``; ``[prefix]`` for a full checkpoint.

    Raises:
        NotFoundError: no such checkpoint.
        DataLossError: a damaged file, or a base that is missing, replaced, outside the
            directory or in a loop (naming the delta and the base).
    """
    prefix = os.fspath(prefix)
    head = prefix[: -len(_format.DATA_SUFFIX)] if prefix.endswith(_format.DATA_SUFFIX) \
        else prefix
    if tf_bundle.is_tf_checkpoint(head):
        return [head]
    with CheckpointReader(head) as reader:
        if not reader.is_delta:
            return [head]
        chain = _compose.open_chain(reader)
        try:
            return [m.path[: -len(_format.DATA_SUFFIX)] for m in chain.members[:-1]] + [head]
        finally:
            chain.close()


def read_changes(prefix: str | os.PathLike[str], names: Iterable[str] | None = None,
                 verify: bool = True, *, values: bool = True,
                 only_after: tuple[str, str] | None = None) -> CheckpointChanges:
    """Reads what checkpoint ``prefix`` records against its predecessor (no composing).

    - a delta: each variable's kind; for ``rows`` the rows and the stored rows' values,
      for ``full`` the stored value;
    - a full checkpoint with a parent: the same kinds; ``rows`` entries read only the
      listed rows from the file, ``full`` ones the whole value;
    - a full checkpoint without a parent (or TF's): every variable ``full``, with its
      value; ``parent`` and the digests None.

    Args:
        prefix: ``"ckpts/model.ckpt-1210"`` with or without ``.h5``.
        names: the variables to report (None: all); others are not read.
        verify: check the index, the changes table and rows, and every array read whole
            against their xxh3_64. Rows read from a full checkpoint are not hashed on
            their own: check the block digest of the value they make (``digest``).
        values: False reads no values (every ``values`` is None): the kinds, rows and
            digests only, from the tables (``ckptsync inspect``).
        only_after: ``(parent file name, its index xxh3)``: read the variables only when
            the checkpoint names exactly that predecessor (its basename, with or without
            ``.h5``); otherwise return its links with no variables (one open of the file
            either way: what a server that follows the trainer asks).

    Returns:
        A :class:`CheckpointChanges`.

    Raises:
        NotFoundError: no such checkpoint, or a name it does not list.
        DataLossError: a damaged file (rows not increasing or out of range included).

    Thread-safety: safe to call from several threads (each call opens its own reader).
    """
    prefix = os.fspath(prefix)
    wanted = None if names is None else ([names] if isinstance(names, str) else list(names))
    if tf_bundle.is_tf_checkpoint(prefix):
        read = read_checkpoint(prefix, wanted, verify)
        return CheckpointChanges(prefix, None, None, None, True, {
            k: VariableChange(k, _delta.FULL, None, v if values else None, None, v.shape,
                              v.dtype)
            for k, v in read.items()})
    with CheckpointReader(prefix) as reader:
        if only_after is not None and not _names_parent(reader, *only_after):
            return CheckpointChanges(prefix, reader.predecessor, reader.predecessor_index_xxh3,
                                     reader.global_step, not reader.is_delta, {},
                                     reader.index_xxh3)
        keys = sorted(reader._index) if wanted is None else wanted
        for k in keys:
            if k not in reader._index:
                raise NotFoundError(None, None, f"Key {k} not found in checkpoint {reader.path}")
        table = reader._delta
        if table is None and reader.predecessor is not None:
            shape, digest = _changes_dataset(reader)
            raw = _compose.read_extra(reader, _delta.CHANGES_DATASET, np.dtype(np.uint8),
                                      shape, digest, True)
            try:
                table = _delta.decode_changes(raw.tobytes(), reader._index)
            except ValueError as e:
                raise reader._loss(f"the changes table is malformed ({e})") from e
        out: dict[str, VariableChange] = {}
        if table is None:
            whole_values = dict(zip(keys, reader._read_tensors(keys, verify))) if values else {}
            for k in keys:
                entry = reader._index[k]
                out[k] = VariableChange(k, _delta.FULL, None, whole_values.get(k), None,
                                        entry.shape, entry.dtype)
            return CheckpointChanges(prefix, None, None, reader.global_step, True, out,
                                     reader.index_xxh3)
        rows = _compose.read_rows_table(reader, table, verify)
        whole = [k for k in keys if values and (table.variables[k].kind == _delta.FULL or (
            reader.is_delta and table.variables[k].kind == _delta.ROWS))]
        read = dict(zip(whole, reader._read_tensors(whole, verify))) if whole else {}
        for k in keys:
            c = table.variables[k]
            got_rows: np.ndarray | None = None
            got: np.ndarray | None = None
            if c.kind == _delta.ROWS:
                got_rows = _compose.rows_of(reader, c, rows)
                if values:
                    got = read[k] if reader.is_delta else _compose.read_rows(reader, k,
                                                                             got_rows)
            elif c.kind == _delta.FULL and values:
                got = read[k]
            out[k] = VariableChange(k, c.kind, got_rows, got, c.digest, c.shape, c.dtype)
        return CheckpointChanges(prefix, reader.predecessor, reader.predecessor_index_xxh3,
                                 reader.global_step, not reader.is_delta, out,
                                 reader.index_xxh3)


def _names_parent(reader: CheckpointReader, name: str, index_xxh3: str) -> bool:
    """True when ``reader``'s checkpoint records ``name`` (a basename) with that index
    hash as its predecessor."""
    parent = reader.predecessor
    if parent is None or reader.predecessor_index_xxh3 != index_xxh3:
        return False
    strip = _format.DATA_SUFFIX
    return os.path.basename(parent).removesuffix(strip) == os.path.basename(name).removesuffix(strip)


def _changes_dataset(reader: CheckpointReader) -> tuple[tuple[int, ...], str]:
    """The shape and ``xxh3_64`` attribute of a full checkpoint's changes table."""
    ds = reader._open_dataset(_delta.CHANGES_DATASET.encode("ascii"))
    if ds is None:
        raise reader._loss(f"it names a parent but has no /{_delta.CHANGES_DATASET}")
    try:
        shape = ds.shape
        if shape is None or len(shape) != 1:
            raise reader._loss(f"/{_delta.CHANGES_DATASET} has shape {shape}; expected [n]")
        return tuple(shape), reader._hash_attr(ds, _delta.CHANGES_DATASET)
    finally:
        ds.close()
