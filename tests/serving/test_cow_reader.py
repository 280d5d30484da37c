"""Copy-on-write swaps applied by the read process: real incremental checkpoints, a real
``CheckpointReadProcess`` writing the row changes into the served tables' shared arenas.
Each version equals a full read of its checkpoint bit for bit and equals what the load
thread's own apply (the reference path) makes; a pool short of free blocks grows; a
digest that disagrees, a NaN, or a read process killed in the middle falls back to a
full load, never to a mixed model."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Mapping

import numpy as np
import pytest

from ckptsync import checkpoint as ckpt
from ckptsync.blocked_array import BlockedArray
from ckptsync.serving._cow import CopyOnWrite
from ckptsync.serving.loader import load_snapshot
from ckptsync.serving.source import AspiredVersion
from ckptsync.workers import CheckpointReadProcess

from .conftest import TableServable

ROWS, DIM = 5003, 8  # 128 rows per block, 40 blocks, the last of 11 rows
F32 = np.dtype("float32")


def Model() -> TableServable:  # noqa: N802 (reads as the class it makes)
    return TableServable(ROWS, DIM)


def _spy(monkeypatch, reader) -> list[tuple[str, object]]:
    """Records each ``reader.apply_changes`` call: (prefix, its result)."""
    calls: list[tuple[str, object]] = []
    original = reader.apply_changes

    def spying(prefix, *args, **kwargs):
        out = original(prefix, *args, **kwargs)
        calls.append((prefix, out))
        return out

    monkeypatch.setattr(reader, "apply_changes", spying)
    return calls


def _digests(arrays: Mapping[str, np.ndarray]) -> dict[str, str]:
    return {k: ckpt.variable_digest(ckpt.block_digests(v)) for k, v in arrays.items()}


def _chain(tmp_path, steps: int, rows_per_step, seed: int = 0, nan_at: int | None = None
           ) -> tuple[list[str], list[dict[str, np.ndarray]]]:
    """A full checkpoint, then ``steps`` deltas, each changing ``rows_per_step(i)`` rows
    of emb (the last row included every other step: the short last block) and all of w."""
    rng = np.random.default_rng(seed)
    state = {"emb": rng.standard_normal((ROWS, DIM)).astype(F32),
             "w": rng.standard_normal((DIM, 2)).astype(F32)}
    prefixes = [ckpt.write_checkpoint(str(tmp_path / "model.ckpt-0"), dict(state),
                                      global_step=0)]
    states = [{k: v.copy() for k, v in state.items()}]
    for i in range(1, steps + 1):
        rows = rng.choice(ROWS, rows_per_step(i), replace=False)
        if i % 2:
            rows[0] = ROWS - 1
        state = {"emb": state["emb"].copy(), "w": rng.standard_normal((DIM, 2)).astype(F32)}
        state["emb"][rows] = rng.standard_normal((rows.size, DIM)).astype(F32)
        if nan_at == i:
            state["emb"][rows[1], 3] = np.nan
        prefixes.append(ckpt.write_incremental_checkpoint(
            str(tmp_path / f"model.ckpt-{i}"), dict(state),
            {"emb": rows.astype(np.int64), "w": None}, prefixes[-1], _digests(state),
            full=False, global_step=i))
        states.append({k: v.copy() for k, v in state.items()})
    return prefixes, states


def _follow(cow: CopyOnWrite, prefixes: list[str]) -> list:
    snap = cow.load(AspiredVersion(0, prefixes[0]), None)
    cow.served(snap)
    snaps = [snap]
    for i, prefix in enumerate(prefixes[1:], 1):
        snap = cow.load(AspiredVersion(i, prefix), snap)
        cow.served(snap)
        snaps.append(snap)
    return snaps


def _assert_equal(snap, state) -> None:
    for name, want in state.items():
        assert np.asarray(snap.params[name]).tobytes() == want.tobytes(), name


@pytest.fixture
def reader():
    with CheckpointReadProcess(timeout_s=60.0) as r:
        yield r


def test_the_read_process_applies_each_delta_bit_exact_and_as_the_load_thread_does(
        tmp_path, reader, monkeypatch) -> None:
    prefixes, states = _chain(tmp_path, 12, lambda i: 3 + 7 * i)
    remote = CopyOnWrite(Model(), load=load_snapshot)
    remote.use_reader(reader)  # applies in the read process
    here = CopyOnWrite(Model(), load=load_snapshot)
    here.use_reader(reader, apply=False)  # reads there, applies on this thread
    calls = _spy(monkeypatch, reader)
    got = _follow(remote, prefixes)
    applied_there = [prefix for prefix, _ in calls]
    ref = _follow(here, prefixes)
    assert len(calls) == len(applied_there)  # the reference path asked the reader nothing
    assert list(dict.fromkeys(applied_there)) == prefixes[1:]  # (asked again if short)
    for snap, other, state in zip(got, ref, states):
        _assert_equal(snap, state)
        _assert_equal(other, state)
    assert [s.load_kind for s in got] == ["full"] + ["copy_on_write"] * 12
    emb = [s.params["emb"] for s in got]
    assert all(isinstance(t, BlockedArray) and t.pool is emb[0].pool for t in emb)
    assert all(h is not None for h in emb[0].pool.handles)  # every arena shared
    # Untouched blocks are shared with the predecessor (block 1 is never the last one).
    for old, new, prefix in zip(emb, emb[1:], prefixes[1:]):
        changed = set((ckpt.read_changes(prefix, ["emb"])["emb"].rows // 128).tolist())
        same = [j for j in range(40) if j not in changed]
        assert all(old.slots[j] == new.slots[j] for j in same)
        assert all(old.slots[j] != new.slots[j] for j in changed)


def test_a_pool_short_of_free_blocks_grows_and_the_apply_is_asked_again(
        tmp_path, reader, monkeypatch) -> None:
    # Step 1 touches 3 blocks (the pool grows by 8 or 1/64), step 2 nearly all 40.
    prefixes, states = _chain(tmp_path, 2, lambda i: 3 if i == 1 else 4000, seed=1)
    cow = CopyOnWrite(Model(), load=load_snapshot)
    cow.use_reader(reader)
    calls = _spy(monkeypatch, reader)
    snaps = _follow(cow, prefixes)
    asked = [(prefix, dict(out.short)) for prefix, out in calls]
    assert [s.load_kind for s in snaps] == ["full", "copy_on_write", "copy_on_write"]
    for snap, state in zip(snaps, states):
        _assert_equal(snap, state)
    shorts = [short for prefix, short in asked if short]
    assert shorts and all(set(s) == {"emb"} for s in shorts)  # it said so, then grew
    assert asked[-1] == (prefixes[2], {})


def test_a_corrupt_served_block_or_a_nan_refuses_the_apply_and_loads_in_full(
        tmp_path, reader) -> None:
    prefixes, states = _chain(tmp_path, 3, lambda i: 20, seed=2, nan_at=3)
    cow = CopyOnWrite(Model(), load=load_snapshot)
    cow.use_reader(reader)
    snap0 = cow.load(AspiredVersion(0, prefixes[0]), None)
    cow.served(snap0)
    emb = snap0.params["emb"]
    rows = ckpt.read_changes(prefixes[1], ["emb"])["emb"].rows
    # A bit flip in the served copy of a block the delta touches, but not in a changed
    # row: the read process carries it over, the recorded digest disagrees.
    block = int(rows[-1] // 128)
    untouched = next(r for r in range(block * 128, block * 128 + 128) if r not in set(rows))
    emb.pool.arenas[0][untouched, 0] += 1.0
    snap1 = cow.load(AspiredVersion(1, prefixes[1]), snap0)
    assert snap1.load_kind == "full"
    _assert_equal(snap1, states[1])
    cow.served(snap1)
    snap2 = cow.load(AspiredVersion(2, prefixes[2]), snap1)
    assert snap2.load_kind == "copy_on_write"
    cow.served(snap2)
    with pytest.raises(Exception, match="NaN"):  # refused in full too
        cow.load(AspiredVersion(3, prefixes[3]), snap2)
    assert not cow._read_handles  # the refused full read's block is not kept
    _assert_equal(snap2, states[2])  # the served one is untouched


def test_a_read_process_killed_while_applying_falls_back_to_a_full_load(
        tmp_path, reader) -> None:
    prefixes, states = _chain(tmp_path, 2, lambda i: 50, seed=3)
    cow = CopyOnWrite(Model(), load=load_snapshot)
    cow.use_reader(reader)
    snap0 = cow.load(AspiredVersion(0, prefixes[0]), None)
    cow.served(snap0)
    original = reader.apply_changes
    killed = threading.Event()

    def killing(*args, **kwargs):
        if not killed.is_set():
            killed.set()
            os.kill(reader.pid, signal.SIGKILL)
        return original(*args, **kwargs)

    reader.apply_changes = killing
    snap1 = cow.load(AspiredVersion(1, prefixes[1]), snap0)
    assert killed.is_set() and reader.restarts >= 1
    _assert_equal(snap1, states[1])
    _assert_equal(snap0, states[0])
    cow.served(snap1)
    snap2 = cow.load(AspiredVersion(2, prefixes[2]), snap1)  # the new process applies
    _assert_equal(snap2, states[2])


def test_more_arenas_than_one_request_carries_are_applied_on_the_load_thread(
        tmp_path, reader, monkeypatch) -> None:
    from ckptsync.serving import _cow

    monkeypatch.setattr(_cow, "APPLY_MAX_ARENAS", 1)  # arena 0 only, then too many
    prefixes, states = _chain(tmp_path, 3, lambda i: 30, seed=4)
    cow = CopyOnWrite(Model(), load=load_snapshot)
    cow.use_reader(reader)
    calls = _spy(monkeypatch, reader)
    snaps = _follow(cow, prefixes)
    asked = [prefix for prefix, _ in calls]
    assert [s.load_kind for s in snaps] == ["full"] + ["copy_on_write"] * 3
    for snap, state in zip(snaps, states):
        _assert_equal(snap, state)
    assert set(asked) == {prefixes[1]}  # once the pool has grown an arena: here
    assert len(snaps[-1].params["emb"].pool.arenas) >= 2
