"""CheckpointRetention with dependencies: max_to_keep and keep_checkpoint_every_n_hours
never delete a checkpoint that a kept one composes from (an incremental checkpoint's
base, transitively), and the state file keeps naming such bases."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptsync.checkpoint import (
    CheckpointRetention,
    block_digests,
    checkpoint_chain,
    variable_digest,
    write_checkpoint,
    write_incremental_checkpoint,
)
from ckptsync.checkpoint.retention import checkpoint_base
from ckptsync.errors import CkptsyncTypeError

H = 3600.0


def _closure(r: CheckpointRetention, deps: dict[str, str | None], prefix: str) -> set[str]:
    out, p = set(), deps.get(prefix)
    while p is not None:
        out.add(p)
        p = deps.get(p)
    return out


def _run(r: CheckpointRetention, n: int, full_every: int, times: list[float] | None = None
         ) -> tuple[dict[str, str | None], set[str], list[list[str]]]:
    """Records ``n`` checkpoints, a full one every ``full_every`` (else a delta on the
    previous one); after each record checks that nothing deleted is needed by a listed
    checkpoint and that what a listed one needs is listed too."""
    deps: dict[str, str | None] = {}
    deleted: set[str] = set()
    listed_each: list[list[str]] = []
    prev = None
    for i in range(n):
        p = f"m-{i}"
        base = None if i % full_every == 0 else prev
        deps[p] = base
        gone = r.record(p, times[i] if times else float(i), depends_on=base)
        assert not set(gone) & deleted, f"{gone} deleted twice"
        deleted.update(gone)
        listed = r.last_checkpoints
        listed_each.append(listed)
        assert p in listed
        for q in listed:
            assert q not in deleted
            need = _closure(r, deps, q)
            assert not need & deleted, f"{q} needs deleted {need & deleted}"
            assert need <= set(listed), f"{q} needs unlisted {need - set(listed)}"
        prev = p
    return deps, deleted, listed_each


def test_bases_of_kept_deltas_stay_listed_until_a_full_checkpoint_frees_them() -> None:
    r = CheckpointRetention(max_to_keep=2, start_time=0.0)
    deps, deleted, listed = _run(r, 13, full_every=4)
    # m-8 is full; m-9..m-11 deltas on it; m-12 full.
    assert listed[10] == ["m-8", "m-9", "m-10"]  # m-9, m-10 kept; m-8 held
    assert listed[11] == ["m-8", "m-9", "m-10", "m-11"]  # m-10, m-11 kept; chain held
    assert listed[12] == ["m-8", "m-9", "m-10", "m-11", "m-12"]  # m-11 still kept
    assert r.record("m-13", 13.0, depends_on="m-12") == ["m-8", "m-9", "m-10", "m-11"]
    assert r.last_checkpoints == ["m-12", "m-13"]  # m-11 evicted: its chain goes
    assert deleted == {f"m-{i}" for i in range(8)}


def test_a_record_returns_the_whole_freed_chain_oldest_first() -> None:
    r = CheckpointRetention(max_to_keep=1, start_time=0.0)
    assert r.record("f-0", 0.0) == []
    assert r.record("d-1", 1.0, depends_on="f-0") == []
    assert r.record("d-2", 2.0, depends_on="d-1") == []
    assert r.last_checkpoints == ["f-0", "d-1", "d-2"]
    assert r.record("f-3", 3.0) == ["f-0", "d-1", "d-2"]
    assert r.last_checkpoints == ["f-3"]


@settings(max_examples=60, deadline=None)
@given(max_to_keep=st.integers(1, 4), full_every=st.integers(1, 6), n=st.integers(1, 30))
def test_no_listed_checkpoint_ever_needs_a_deleted_one(max_to_keep: int, full_every: int,
                                                       n: int) -> None:
    r = CheckpointRetention(max_to_keep=max_to_keep, start_time=0.0)
    deps, deleted, _ = _run(r, n, full_every)
    # Everything not listed was deleted (nothing leaks on disk while tracked).
    assert set(deps) - set(r.last_checkpoints) == deleted


def test_n_hour_keeps_preserve_their_chain_forever() -> None:
    r = CheckpointRetention(max_to_keep=2, keep_checkpoint_every_n_hours=1.0, start_time=0.0)
    times = [0.25 * H * i for i in range(40)]
    deps: dict[str, str | None] = {}
    deleted: set[str] = set()
    preserved: set[str] = set()
    prev = None
    for i, t in enumerate(times):
        p = f"m-{i}"
        base = None if i % 4 == 0 else prev
        deps[p] = base
        before = set(r.last_checkpoints)
        gone = r.record(p, t, depends_on=base)
        deleted.update(gone)
        # Preserved: dropped from tracking without being returned for deletion.
        preserved |= (before | {p}) - set(r.last_checkpoints) - set(gone)
        for q in preserved | set(r.last_checkpoints):
            assert not _closure(r, deps, q) & deleted, q
        prev = p
    assert preserved, "no N-hour keep happened"
    assert any(deps[q] is not None for q in preserved), "no delta was N-hour preserved"


def test_resaving_a_held_base_makes_it_a_kept_checkpoint_again() -> None:
    r = CheckpointRetention(max_to_keep=1, start_time=0.0)
    r.record("f-0", 0.0)
    r.record("d-1", 1.0, depends_on="f-0")
    assert r.last_checkpoints == ["f-0", "d-1"]
    assert r.record("f-0", 2.0) == ["d-1"]
    assert r.last_checkpoints == ["f-0"]


def test_saving_a_base_again_drops_what_composed_through_it() -> None:
    r = CheckpointRetention(max_to_keep=5, start_time=0.0)
    r.record("f-0", 0.0)
    r.record("d-1", 1.0, depends_on="f-0")
    r.record("d-2", 2.0, depends_on="d-1")
    r.record("g-3", 3.0)
    # Restored f-0 and trained on: d-1 is written again (another file), d-2 was composed
    # from the old d-1 and no longer reads.
    assert r.record("d-1", 4.0, depends_on="f-0") == ["d-2"]
    assert r.last_checkpoints == ["f-0", "g-3", "d-1"]


def test_copy_is_independent() -> None:
    r = CheckpointRetention(max_to_keep=1, start_time=0.0)
    r.record("f-0", 0.0)
    r.record("d-1", 1.0, depends_on="f-0")
    c = r.copy()
    assert r.record("f-2", 2.0) == ["f-0", "d-1"]
    assert c.last_checkpoints == ["f-0", "d-1"]
    assert c.depends_on("d-1") == ("f-0",)
    assert c.record("d-2", 2.0, depends_on="d-1") == []


def test_bad_depends_on() -> None:
    r = CheckpointRetention(max_to_keep=1)
    with pytest.raises(CkptsyncTypeError, match="depends_on must be a checkpoint prefix"):
        r.record("a", 1.0, depends_on=5)  # type: ignore[arg-type]


def _delta_file(prefix: Path, base: str | None) -> str:
    """A real checkpoint: a delta on ``base`` (its name in the same directory), or a
    full one for None."""
    value = np.full(4, len(str(prefix)), np.float32)
    digest = {"v": variable_digest(block_digests(value))}
    if base is None:
        return write_checkpoint(prefix, {"v": value})
    return write_incremental_checkpoint(prefix, {"v": value}, {"v": None},
                                        str(prefix.parent / base), digest, full=False)


def test_recover_learns_the_bases_of_recovered_deltas(tmp_path: Path) -> None:
    paths = [_delta_file(tmp_path / "m-0", None)]
    for i in range(1, 4):
        paths.append(_delta_file(tmp_path / f"m-{i}", f"m-{i - 1}"))
    assert checkpoint_base(paths[2]) == paths[1]
    assert checkpoint_chain(paths[3]) == paths
    assert checkpoint_base(paths[0]) is None
    assert checkpoint_base(str(tmp_path / "missing")) is None
    r = CheckpointRetention(max_to_keep=2)  # the N-hour clock starts now: no keeps
    r.recover_last_checkpoints(paths)  # the state file of a run killed after m-3
    assert r.last_checkpoints == paths
    full = _delta_file(tmp_path / "m-4", None)
    assert r.record(full) == []  # m-3 is still kept: the chain stays
    assert r.record(_delta_file(tmp_path / "m-5", "m-4"), depends_on=full) == paths
    assert r.last_checkpoints == [full, str(tmp_path / "m-5")]


def test_recover_with_more_than_max_to_keep_and_no_deltas_is_tf1s() -> None:
    r = CheckpointRetention(max_to_keep=1, start_time=0.0)
    r.set_last_checkpoints_with_time([("x", 1.0), ("y", 2.0), ("z", 3.0)])
    assert r.last_checkpoints == ["x", "y", "z"]
    assert r.record("w", 4.0) == ["x"]
    assert r.record("v", 5.0) == ["y"]


def test_random_interleavings_of_full_and_delta_keep_every_chain() -> None:
    rng = random.Random(7)
    for _ in range(50):
        r = CheckpointRetention(max_to_keep=rng.randint(1, 3), start_time=0.0)
        deps: dict[str, str | None] = {}
        deleted: set[str] = set()
        prev = None
        for i in range(25):
            p = f"m-{i}"
            base = prev if prev is not None and rng.random() < 0.7 else None
            deps[p] = base
            deleted.update(r.record(p, float(i), depends_on=base))
            for q in r.last_checkpoints:
                assert not _closure(r, deps, q) & deleted
            prev = p
