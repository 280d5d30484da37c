"""The copy-on-write apply: a new snapshot from the served one plus a change set (shaped
as ``checkpoint.read_changes`` gives it), verified by block digests; any refusal is a full
load of the file; untouched blocks and unchanged variables are shared."""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from ckptsync import checkpoint as ckpt
from ckptsync.blocked_array import BlockedArray
from ckptsync.errors import DataLossError, InvalidArgumentError
from ckptsync.serving._cow import CopyOnWrite, apply_changes, version_digests
from ckptsync.serving.source import AspiredVersion

from .conftest import TableServable

VOCAB, DIM = 4096, 16  # 64 rows per block, 64 blocks, 256 KiB: stored in blocks
F32 = np.dtype("float32")


def _params(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"emb": rng.standard_normal((VOCAB, DIM)).astype(F32),
            "w": rng.standard_normal((DIM, 2)).astype(F32)}


def _changes(parent: str, parent_hash: str, new: Mapping[str, np.ndarray],
             rows: Mapping[str, np.ndarray | None]) -> Any:
    """A change set as read_changes gives: ``rows[name]`` an int64 array (kind rows) or
    None (kind full); a name not in ``rows`` is 'same'."""
    variables = {}
    for name, value in new.items():
        r = rows.get(name, "same")
        kind = "same" if isinstance(r, str) else "full" if r is None else "rows"
        values = None if kind == "same" else value if r is None else value[r]
        variables[name] = SimpleNamespace(
            kind=kind, rows=None if kind != "rows" else np.asarray(r, np.int64),
            values=values, shape=value.shape, dtype=value.dtype,
            digest=ckpt.variable_digest(ckpt.block_digests(value)))
    return SimpleNamespace(parent=parent, parent_index_xxh3=parent_hash, global_step=None,
                           is_full=False, variables=variables)


def _write(tmp_path, step: int, params: Mapping[str, np.ndarray]) -> str:
    return ckpt.write_checkpoint(str(tmp_path / f"model.ckpt-{step}"), dict(params),
                                 global_step=step)


class _Files:
    """read_changes / index_xxh3 stand-ins serving given change sets by prefix."""

    def __init__(self) -> None:
        self.changes: dict[str, Any] = {}
        self.reads: list[str] = []

    def read_changes(self, prefix: str, names: list[str],
                     only_after: tuple[str, str] | None = None) -> tuple[Any, str]:
        changes = self.changes[prefix]
        if only_after is not None and (  # as checkpoint.read_changes: the links only
                os.path.basename(changes.parent or "") != only_after[0]
                or changes.parent_index_xxh3 != only_after[1]):
            names, changes = [], SimpleNamespace(**{**vars(changes), "variables": {}})
        self.reads.append((prefix, bool(names)))  # (prefix, values read)
        return changes, self.index_xxh3(prefix)

    @staticmethod
    def index_xxh3(prefix: str) -> str:
        return "h-" + os.path.basename(prefix)


@pytest.fixture
def cow_setup(tmp_path):
    files = _Files()
    cow = CopyOnWrite(TableServable(), read_changes=files.read_changes,
                      index_xxh3=files.index_xxh3)
    p1 = _params(1)
    prefix1 = _write(tmp_path, 1, p1)
    snap1 = cow.load(AspiredVersion(1, prefix1), None)
    cow.served(snap1)
    return SimpleNamespace(cow=cow, files=files, p1=p1, prefix1=prefix1, snap1=snap1)


def _next(tmp_path, s, step: int, rows: np.ndarray, seed: int, parent: str,
          parent_hash: str | None = None, corrupt: bool = False):
    new = {k: v.copy() for k, v in s.p1.items()}
    rng = np.random.default_rng(seed)
    new["emb"][rows] = rng.standard_normal((rows.size, DIM)).astype(F32)
    prefix = _write(tmp_path, step, new)
    changes = _changes(parent, parent_hash or _Files.index_xxh3(parent), new, {"emb": rows})
    if corrupt:
        changes.variables["emb"].digest = "0" * 16
    s.files.changes[prefix] = changes
    return prefix, new


def test_a_full_load_stores_gathered_tables_in_blocks(cow_setup):
    snap = cow_setup.snap1
    assert snap.load_kind == "full" and snap.bytes_read == snap.nbytes
    assert isinstance(snap.params["emb"], BlockedArray)
    assert isinstance(snap.params["w"], np.ndarray)
    np.testing.assert_array_equal(np.asarray(snap.params["emb"]), cow_setup.p1["emb"])


def test_apply_shares_untouched_blocks_and_unchanged_variables(tmp_path, cow_setup):
    s = cow_setup
    rows = np.array([1, 2, 700, 4095], np.int64)  # blocks 0, 10 and the last one
    prefix2, new = _next(tmp_path, s, 2, rows, 5, s.prefix1)
    snap2 = s.cow.load(AspiredVersion(2, prefix2), s.snap1)
    assert snap2.load_kind == "copy_on_write" and snap2.version == 2
    assert snap2.bytes_read == rows.nbytes + rows.size * DIM * 4
    old, emb = s.snap1.params["emb"], snap2.params["emb"]
    assert snap2.params["w"] is s.snap1.params["w"]
    assert emb.pool is old.pool
    for j in range(64):
        assert np.shares_memory(old.block_view(j), emb.block_view(j)) == (j not in (0, 10, 63))
    np.testing.assert_array_equal(np.asarray(emb), new["emb"])
    np.testing.assert_array_equal(np.asarray(old), s.p1["emb"])  # the served one unchanged
    s.cow.served(snap2)
    # The digests carried over equal those of the value.
    assert s.cow._served is not None
    np.testing.assert_array_equal(s.cow._served.digests["emb"],
                                  ckpt.block_digests(new["emb"]))


def test_a_digest_mismatch_falls_back_to_a_full_load_with_the_right_values(tmp_path,
                                                                           cow_setup):
    s = cow_setup
    rows = np.array([5, 6], np.int64)
    prefix2, new = _next(tmp_path, s, 2, rows, 6, s.prefix1, corrupt=True)
    snap2 = s.cow.load(AspiredVersion(2, prefix2), s.snap1)
    assert snap2.load_kind == "full"
    np.testing.assert_array_equal(np.asarray(snap2.params["emb"]), new["emb"])
    assert s.files.reads == [(prefix2, True)]  # links and values in one read


def test_a_corrupt_served_block_is_caught_by_the_digest(tmp_path, cow_setup):
    s = cow_setup
    # A bit flip in the served copy of block 3 (not in the file): applying rows of
    # block 3 carries it over, the recorded digest disagrees, a full load fixes it.
    table = s.snap1.params["emb"]
    table.pool.arenas[0][3 * 64 + 9, 0] += 1.0
    prefix2, new = _next(tmp_path, s, 2, np.array([3 * 64], np.int64), 7, s.prefix1)
    with pytest.raises(DataLossError, match="variable 'emb' after applying the changes"):
        apply_changes(s.snap1, s.cow._served.digests, s.files.changes[prefix2],
                      s.cow.servable, prefix2, 2)
    snap2 = s.cow.load(AspiredVersion(2, prefix2), s.snap1)
    assert snap2.load_kind == "full"
    np.testing.assert_array_equal(np.asarray(snap2.params["emb"]), new["emb"])


def test_not_at_the_parent_loads_in_full(tmp_path, cow_setup):
    s = cow_setup
    rows = np.array([9], np.int64)
    # Parent is another file, or the same name with another index (replaced): full.
    prefix2, _ = _next(tmp_path, s, 2, rows, 8, str(tmp_path / "model.ckpt-0"))
    assert s.cow.load(AspiredVersion(2, prefix2), s.snap1).load_kind == "full"
    prefix3, _ = _next(tmp_path, s, 3, rows, 8, s.prefix1, parent_hash="f" * 16)
    assert s.cow.load(AspiredVersion(3, prefix3), s.snap1).load_kind == "full"
    assert (prefix3, True) not in s.files.reads  # its values are read once, in full
    # A server that started late (nothing served) loads in full without reading changes.
    fresh = CopyOnWrite(TableServable(), read_changes=s.files.read_changes,
                        index_xxh3=s.files.index_xxh3)
    reads = len(s.files.reads)
    assert fresh.load(AspiredVersion(3, prefix3), None).load_kind == "full"
    assert len(s.files.reads) == reads


def test_nonfinite_changed_rows_are_refused(tmp_path, cow_setup):
    s = cow_setup
    rows = np.array([10], np.int64)
    prefix2, new = _next(tmp_path, s, 2, rows, 9, s.prefix1)
    changes = s.files.changes[prefix2]
    changes.variables["emb"].values = np.full((1, DIM), np.nan, F32)
    with pytest.raises(InvalidArgumentError, match="variable 'emb' holds NaN/Inf"):
        apply_changes(s.snap1, s.cow._served.digests, changes, s.cow.servable, prefix2, 2)


def test_a_request_holding_the_old_snapshot_sees_it_whole_and_500_swaps_do_not_grow(
        tmp_path, cow_setup):
    s = cow_setup
    rng = np.random.default_rng(3)
    held = s.snap1
    expected_held = s.p1["emb"].copy()
    current = s.snap1
    digests = s.cow._served.digests
    value = s.p1["emb"].copy()
    stop = threading.Event()
    checked = threading.Event()
    errors: list[str] = []

    def request_loop() -> None:  # one long request on the held snapshot, many gathers
        ids = np.arange(VOCAB)
        while not stop.is_set():
            got = held.params["emb"].gather(ids)
            checked.set()
            if not np.array_equal(got, expected_held):
                errors.append("the held snapshot changed")
                return

    t = threading.Thread(target=request_loop)
    t.start()
    pool = held.params["emb"].pool
    sizes = []
    try:
        for step in range(2, 502):
            if step == 12:  # the request ends after ten swaps
                assert checked.wait(timeout=60)
                stop.set()
                t.join(timeout=60)
                del held
                s.snap1 = None  # nothing else holds version 1
                gc.collect()
            rows = np.unique(rng.integers(0, VOCAB, 4))
            value[rows] = rng.standard_normal((rows.size, DIM)).astype(F32)
            changes = _changes(current.prefix, "x", {"emb": value, "w": s.p1["w"]},
                               {"emb": rows})
            # As the manager: the previous snapshot is dropped once the new one serves.
            current, digests, _ = apply_changes(current, digests, changes, s.cow.servable,
                                                f"{tmp_path}/v-{step}", step)
            sizes.append(pool.capacity_blocks)
    finally:
        stop.set()
        t.join(timeout=60)
    assert not errors
    np.testing.assert_array_equal(np.asarray(current.params["emb"]), value)
    np.testing.assert_array_equal(digests["emb"], ckpt.block_digests(value))
    assert sizes[-1] == sizes[20], "the pool grew after its first swaps"


def test_version_digests_of_a_blocked_table_equal_block_digests(cow_setup):
    snap = cow_setup.snap1
    table = snap.params["emb"]
    new, _ = table.with_rows(np.array([0, 4095]), np.zeros((2, DIM), F32))
    got = version_digests({"emb": new})["emb"]
    np.testing.assert_array_equal(got, ckpt.block_digests(np.asarray(new)))
