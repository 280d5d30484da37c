"""TF1 helper functions: exists, mtimes, remove, list/load, load_checkpoint, iterator."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import ckptsync.checkpoint.management as management
from ckptsync.checkpoint import (
    CheckpointReader,
    NewCheckpointReader,
    checkpoint_exists,
    checkpoints_iterator,
    get_checkpoint_mtimes,
    list_variables,
    load_checkpoint,
    load_variable,
    remove_checkpoint,
    update_checkpoint_state,
    write_checkpoint,
)
from ckptsync.errors import CkptsyncValueError, NotFoundError


def _save(d: Path, step: int) -> str:
    prefix = write_checkpoint(
        d / f"model.ckpt-{step}", {"w": np.full(2, step), "s/b": np.ones(3)}, step
    )
    update_checkpoint_state(str(d), prefix)
    return prefix


def test_exists_mtimes_remove(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a, b = _save(tmp_path, 1), _save(tmp_path, 2)
    os.utime(a + ".h5", (1000.0, 1000.0))
    assert checkpoint_exists(a) and checkpoint_exists(a + ".h5")
    assert not checkpoint_exists(str(tmp_path / "nope"))
    assert get_checkpoint_mtimes([a, str(tmp_path / "nope"), b])[0] == 1000.0
    assert len(get_checkpoint_mtimes([a, str(tmp_path / "nope"), b])) == 2
    remove_checkpoint(a)
    assert not checkpoint_exists(a)
    with caplog.at_level(logging.WARNING, logger="ckptsync.checkpoint.management"):
        remove_checkpoint(a)
    assert "does not exist" in caplog.text


def test_list_and_load_variables(tmp_path: Path) -> None:
    prefix = _save(tmp_path, 7)
    expected = [("s/b", [3]), ("w", [2])]
    assert list_variables(prefix) == expected
    assert list_variables(str(tmp_path)) == expected
    np.testing.assert_array_equal(load_variable(str(tmp_path), "w:0"), [7, 7])
    np.testing.assert_array_equal(load_variable(prefix, "s/b"), np.ones(3))
    with pytest.raises(NotFoundError, match="Key x not found in checkpoint"):
        load_variable(prefix, "x")
    reader = NewCheckpointReader(prefix)
    assert isinstance(reader, CheckpointReader) and reader.global_step == 7
    reader.close()
    with load_checkpoint(str(tmp_path)) as r:
        assert r.path == prefix + ".h5"


def test_load_checkpoint_without_checkpoints(tmp_path: Path) -> None:
    with pytest.raises(
        CkptsyncValueError,
        match="Couldn't find 'checkpoint' file or checkpoints in given directory",
    ):
        load_checkpoint(str(tmp_path))
    with pytest.raises(NotFoundError, match="Failed to find any matching files"):
        load_checkpoint(str(tmp_path / "model.ckpt-1"))


def test_checkpoints_iterator_yields_each_new_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(management, "_POLL_INTERVAL_S", 0.01)
    first = _save(tmp_path, 1)

    def later() -> None:
        time.sleep(0.1)
        _save(tmp_path, 2)

    writer = threading.Thread(target=later)
    writer.start()
    try:
        seen = list(checkpoints_iterator(str(tmp_path), timeout=1.0))
    finally:
        writer.join()
    assert seen == [first, str(tmp_path / "model.ckpt-2")]


def test_checkpoints_iterator_timeout_fn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(management, "_POLL_INTERVAL_S", 0.01)
    calls = []

    def timeout_fn() -> bool:
        calls.append(1)
        return len(calls) >= 3

    assert list(checkpoints_iterator(str(tmp_path), timeout=0.02, timeout_fn=timeout_fn)) == []
    assert len(calls) == 3
