"""Workers that stop answering (SIGSTOPped, frozen) are found within a bound, killed and
replaced, exactly as workers that die: the reader's read, the writer's saves fail, and
the next job runs on a fresh worker."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ckptsync.checkpoint import get_checkpoint_state, read_checkpoint, write_checkpoint
from ckptsync.errors import DeadlineExceededError, UnknownError
from ckptsync.workers import AsyncCheckpointWriter, CheckpointReadProcess, async_writer
from ckptsync.workers.async_writer import StateUpdate
from tests.helpers import pid_gone as _gone


def test_a_stopped_reader_fails_the_read_within_its_timeout_and_is_replaced(
        tmp_path: Path) -> None:
    prefix = write_checkpoint(tmp_path / "m-1", {"w": np.arange(3.0)}, 1)
    with CheckpointReadProcess(timeout_s=1.0) as reader:
        assert reader.read(prefix, ["w"])["w"].tolist() == [0.0, 1.0, 2.0]
        first = reader.pid
        assert first is not None
        os.kill(first, signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(DeadlineExceededError, match=r"did not answer within 1 s.*m-1\.h5"):
            reader.read(prefix, ["w"])
        assert time.monotonic() - start < 5
        assert reader.worker.hangs == 1 and reader.restarts == 1
        assert _gone(first)  # killed and reaped
        assert reader.read(prefix, ["w"])["w"].tolist() == [0.0, 1.0, 2.0]
        assert reader.pid not in (None, first)


def test_a_fresh_reader_that_hangs_after_starting_is_caught_within_the_timeout(
        tmp_path: Path) -> None:
    # The 30 s start-up grace covers a worker's imports only: one that said it is ready
    # and then stops answering (a replacement stopped before its first read) gets the
    # read's own timeout, not 31 s.
    prefix = write_checkpoint(tmp_path / "m-1", {"w": np.arange(3.0)}, 1)
    with CheckpointReadProcess(timeout_s=1.0) as reader:
        assert reader.wait_until_started(timeout_s=60), "the reader never started"
        fresh = reader.pid
        assert fresh is not None
        os.kill(fresh, signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(DeadlineExceededError, match="did not answer within 1 s"):
            reader.read(prefix, ["w"])
        assert time.monotonic() - start < 15, "the start-up grace was applied to a read"
        assert _gone(fresh)
        assert reader.read(prefix, ["w"])["w"].tolist() == [0.0, 1.0, 2.0]


def _state(tmp_path: Path, step: int) -> StateUpdate:
    prefix = str(tmp_path / f"m-{step}")
    return StateUpdate(str(tmp_path), prefix, [prefix])


def test_a_stopped_writer_fails_its_saves_within_the_silence_timeout(tmp_path: Path) -> None:
    arrays = {"w": np.ones(4, np.float32)}
    with AsyncCheckpointWriter(silence_timeout_s=1.0) as writer:
        writer.submit(str(tmp_path / "m-1"), arrays, 1, state=_state(tmp_path, 1))
        writer.wait()
        first = writer.pid
        assert first is not None
        os.kill(first, signal.SIGSTOP)
        writer.submit(str(tmp_path / "m-2"), arrays, 2, state=_state(tmp_path, 2))
        writer.submit(str(tmp_path / "m-3"), arrays, 3, state=_state(tmp_path, 3))
        start = time.monotonic()
        with pytest.raises(UnknownError, match=r"stopped answering.*m-2.*nor the 1 queued"):
            writer.wait()
        assert time.monotonic() - start < 5
        assert writer.failed_prefix == str(tmp_path / "m-2") and writer.failed_count == 2
        state = get_checkpoint_state(str(tmp_path))
        assert state is not None and state.model_checkpoint_path.endswith("m-1")
        assert _gone(first)
        writer.submit(str(tmp_path / "m-4"), arrays, 4, state=_state(tmp_path, 4))
        writer.wait()
        assert writer.pid not in (None, first)
    assert read_checkpoint(str(tmp_path / "m-4"))["w"].tolist() == [1.0] * 4


def test_a_slow_write_keeps_beating_and_is_not_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A write that takes 3 s (three silence timeouts) in the worker: its heartbeats
    # keep it alive, and the save succeeds.
    prelude = ("import time\nfrom ckptsync.checkpoint import writer as w\n"
               "_orig = w.write_checkpoint\n"
               "def slow(*a, **k):\n    time.sleep(3.0)\n    return _orig(*a, **k)\n"
               "w.write_checkpoint = slow\n")
    code = prelude + "from ckptsync.workers._writer_child import worker_main; worker_main()"
    monkeypatch.setattr(async_writer, "WORKER_COMMAND", [sys.executable, "-c", code])
    with AsyncCheckpointWriter(silence_timeout_s=1.0) as writer:
        writer.submit(str(tmp_path / "m-1"), {"w": np.ones(2)}, 1, state=_state(tmp_path, 1))
        writer.wait()
        assert writer.worker.hangs == 0
    assert read_checkpoint(str(tmp_path / "m-1"))["w"].tolist() == [1.0, 1.0]
