"""CheckpointRetention: TF1 Saver's max_to_keep and keep_checkpoint_every_n_hours."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from ckptsync.checkpoint import CheckpointRetention, write_checkpoint
from ckptsync.errors import CkptsyncTypeError, CkptsyncValueError

H = 3600.0


def test_max_to_keep_evicts_oldest_one_per_save() -> None:
    r = CheckpointRetention(max_to_keep=2, start_time=0.0)
    assert r.record("m-1", 1.0) == []
    assert r.record("m-2", 2.0) == []
    assert r.record("m-3", 3.0) == ["m-1"]
    assert r.record("m-4", 4.0) == ["m-2"]
    assert r.last_checkpoints == ["m-3", "m-4"]
    assert r.last_checkpoints_with_time == [("m-3", 3.0), ("m-4", 4.0)]


def test_resaving_a_prefix_moves_it_to_the_end() -> None:
    r = CheckpointRetention(max_to_keep=2, start_time=0.0)
    r.record("a", 1.0)
    r.record("b", 2.0)
    assert r.record("a", 3.0) == []
    assert r.last_checkpoints == ["b", "a"]
    assert r.record("c", 4.0) == ["b"]


def test_keep_every_n_hours_preserves_with_injected_times() -> None:
    r = CheckpointRetention(max_to_keep=1, keep_checkpoint_every_n_hours=1.0, start_time=0.0)
    # next keep time starts at 1 h; an evicted checkpoint newer than it is preserved.
    deleted = []
    for i, t in enumerate([0.5 * H, 0.9 * H, 1.2 * H, 1.5 * H, 2.1 * H, 2.2 * H, 3.5 * H]):
        deleted += r.record(f"m-{i}", t)
    # m-0 (0.5 h), m-1 (0.9 h) deleted; m-2 (1.2 h > 1 h) kept → next 2 h; m-3 deleted;
    # m-4 (2.1 h > 2 h) kept → next 3 h; m-5 (2.2 h) deleted.
    assert deleted == ["m-0", "m-1", "m-3", "m-5"]
    assert r.last_checkpoints == ["m-6"]
    assert r.next_keep_time == 3 * H


@pytest.mark.parametrize("max_to_keep", [0, None])
def test_max_to_keep_zero_or_none_records_nothing(max_to_keep: int | None) -> None:
    r = CheckpointRetention(max_to_keep=max_to_keep)
    assert [r.record(f"m-{i}", float(i)) for i in range(10)] == [[]] * 10
    assert r.last_checkpoints == [] and r.max_to_keep == 0


def test_set_and_recover_last_checkpoints(tmp_path: Path) -> None:
    r = CheckpointRetention(max_to_keep=2, start_time=0.0)
    r.set_last_checkpoints_with_time([("x", 1.0), ("y", 2.0), ("z", 3.0)])
    assert r.record("w", 4.0) == ["x"]
    r.set_last_checkpoints(["p", "q"])
    assert r.last_checkpoints_with_time == [("p", math.inf), ("q", math.inf)]
    assert r.record("s", 5.0) == []  # inf timestamps are never deleted
    a = write_checkpoint(tmp_path / "m-1", {"v": np.ones(1)})
    b = write_checkpoint(tmp_path / "m-3", {"v": np.ones(1)})
    os.utime(a + ".h5", (100.0, 100.0))
    r.recover_last_checkpoints([a, str(tmp_path / "m-2"), b])
    assert [p for p, _ in r.last_checkpoints_with_time] == [a, b]
    assert r.last_checkpoints_with_time[0][1] == 100.0


def test_bad_arguments() -> None:
    with pytest.raises(CkptsyncValueError, match="max_to_keep must be >= 0"):
        CheckpointRetention(max_to_keep=-1)
    with pytest.raises(CkptsyncTypeError, match="max_to_keep must be an int"):
        CheckpointRetention(max_to_keep=2.5)  # type: ignore[arg-type]
    with pytest.raises(CkptsyncValueError, match="keep_checkpoint_every_n_hours must be >= 0"):
        CheckpointRetention(keep_checkpoint_every_n_hours=-1)
