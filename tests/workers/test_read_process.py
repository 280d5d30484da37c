"""CheckpointReadProcess: checkpoints read and verified in a worker process, handed over
as read-only shared memory."""

from __future__ import annotations

import gc
import os
import signal
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from ckptsync.checkpoint import read_checkpoint, write_checkpoint
from ckptsync.errors import CkptsyncRuntimeError, DataLossError, NotFoundError
from ckptsync.workers import CheckpointReadProcess, read_process

from .conftest import voluntary_switches

ARRAYS = {
    "dense0/w": np.arange(12, dtype=np.float32).reshape(3, 4),
    "dense0/w/Adam": np.ones((3, 4), np.float32),
    "step": np.int64(7),
    "mask": np.array([True, False]),
    "empty": np.zeros((0, 2), np.float64),
    "z": np.array([1 + 2j], np.complex128),
}


def _memfd_mappings() -> int:
    with open("/proc/self/maps") as f:
        return sum("ckptsync-read" in line for line in f)


@pytest.fixture
def reader() -> CheckpointReadProcess:
    with CheckpointReadProcess() as r:
        yield r


def test_reads_what_read_checkpoint_reads_as_read_only_shared_memory(
        tmp_path: Path, reader: CheckpointReadProcess) -> None:
    # Earlier tests' closed ModelManagers are cyclic garbage that still maps their last
    # snapshots until a collection; count only this read's mappings.
    gc.collect()
    before = _memfd_mappings()
    prefix = write_checkpoint(tmp_path / "m-1", ARRAYS, 1)
    got = reader.read(prefix, list(ARRAYS))
    want = read_checkpoint(prefix, verify=True)
    assert list(got) == list(ARRAYS)
    for k in ARRAYS:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape
        assert got[k].tobytes() == want[k].tobytes()
        assert not got[k].flags.writeable
    assert _memfd_mappings() == before + 1
    del got
    gc.collect()
    assert _memfd_mappings() == before  # the memory goes with the last view


def test_a_writable_read_is_the_callers_memory_alone(
        tmp_path: Path, reader: CheckpointReadProcess) -> None:
    # Serving's copy-on-write reuses a full load's memory for a table's blocks.
    prefix = write_checkpoint(tmp_path / "m-1", ARRAYS, 1)
    got = reader.read(prefix, ["dense0/w", "step"], writable=True)
    assert got["dense0/w"].flags.writeable
    got["dense0/w"][0, 0] = 100.0
    again = reader.read(prefix, ["dense0/w"])  # another read: a fresh block
    assert again["dense0/w"][0, 0] == 0.0 and not again["dense0/w"].flags.writeable
    assert got["dense0/w"][0, 0] == 100.0


def test_errors_come_back_as_the_format_layers(tmp_path: Path,
                                               reader: CheckpointReadProcess) -> None:
    gc.collect()  # as above: count only this test's mappings
    before = _memfd_mappings()
    prefix = write_checkpoint(tmp_path / "m-1", ARRAYS, 1)
    with pytest.raises(NotFoundError, match="Key nope not found"):
        reader.read(prefix, ["nope"])
    with pytest.raises(NotFoundError, match="m-2"):
        reader.read(str(tmp_path / "m-2"), ["step"])
    data = bytearray((tmp_path / "m-1.h5").read_bytes())
    offset = data.index(ARRAYS["dense0/w"].tobytes())
    data[offset + 5] ^= 0xFF
    (tmp_path / "m-1.h5").write_bytes(bytes(data))
    with pytest.raises(DataLossError, match="dense0/w.*checksum mismatch"):
        reader.read(prefix, ["dense0/w"])
    assert reader.read(prefix, ["step"])["step"] == 7  # the worker lives on
    assert _memfd_mappings() <= before + 1


def test_a_worker_that_dies_fails_that_read_and_the_next_one_starts_fresh(
        tmp_path: Path, reader: CheckpointReadProcess) -> None:
    prefix = write_checkpoint(tmp_path / "m-1", ARRAYS, 1)
    first = reader.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)  # died while idle: nothing lost
    np.testing.assert_array_equal(reader.read(prefix, ["dense0/w"])["dense0/w"],
                                  ARRAYS["dense0/w"])
    second = reader.pid
    assert second not in (None, first)
    # Dying in the middle of a read (as when HDF5 crashes on a hostile file).
    crash = ["-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    with mock.patch.object(read_process, "READER_COMMAND",
                           [read_process.READER_COMMAND[0], *crash]):
        os.kill(second, signal.SIGKILL)
        with pytest.raises(DataLossError, match="died while reading .*m-1.h5 .twice"):
            reader.read(prefix, ["step"])
    assert reader.read(prefix, ["step"])["step"] == 7


def test_closed_reader_refuses(tmp_path: Path) -> None:
    r = CheckpointReadProcess()
    pid = r.pid
    r.close()
    r.close()
    with pytest.raises(CkptsyncRuntimeError, match="closed"):
        r.read(str(tmp_path / "m"), ["w"])
    with pytest.raises(ProcessLookupError):
        assert pid is not None
        os.kill(pid, 0)


def test_close_is_bounded_while_a_read_is_stuck(tmp_path: Path) -> None:
    import threading
    import time

    prefix = write_checkpoint(tmp_path / "m-1", ARRAYS, 1)
    reader = CheckpointReadProcess()
    reader.read(prefix, ["step"])  # the worker is up
    assert reader.pid is not None
    os.kill(reader.pid, signal.SIGSTOP)  # as a read hung on a dead file system
    errors: list[BaseException] = []

    def read() -> None:
        try:
            reader.read(prefix, ["step"])
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=read)
    t.start()
    time.sleep(0.2)
    start = time.monotonic()
    reader.close()
    t.join(10)
    assert time.monotonic() - start < 5 and not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], CkptsyncRuntimeError)


def test_check_replaces_a_dead_idle_worker_and_never_raises(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = str(tmp_path / "model.ckpt-1")
    write_checkpoint(prefix, {"w": np.arange(4, dtype=np.float32)})
    with CheckpointReadProcess() as reader:
        reader.check()  # alive: nothing to do
        assert reader.restarts == 0
        first = reader.pid
        os.kill(first, signal.SIGKILL)  # reaped by check(), not here
        deadline = time.monotonic() + 10
        while reader.restarts == 0:
            assert time.monotonic() < deadline
            reader.check()
        assert reader.pid not in (None, first)
        assert f"(pid {first}) was killed by SIGKILL" in caplog.text
        # No process can be started now: check() logs it and returns; reads try again.
        monkeypatch.setattr(read_process, "READER_COMMAND", ["/nonexistent/python"])
        second = reader.pid
        os.kill(second, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while reader.restarts == 1:
            assert time.monotonic() < deadline
            reader.check()
        assert reader.pid is None and "cannot start a checkpoint reader process" in caplog.text
        monkeypatch.undo()
        np.testing.assert_array_equal(reader.read(prefix, ["w"])["w"], np.arange(4))


def test_reading_a_reply_does_not_wake_the_idle_worker(
        tmp_path: Path, reader: CheckpointReadProcess) -> None:
    # The worker sleeps once per request. Asleep in recv() it would also be woken each
    # time the server reads its reply (a second sleep per request); it waits in poll().
    prefix = write_checkpoint(tmp_path / "m-1", ARRAYS, 1)
    reader.read(prefix, ["step"])
    time.sleep(0.2)
    assert reader.pid is not None
    pid, reads = reader.pid, 20
    before = voluntary_switches(pid)
    for _ in range(reads):
        reader.read(prefix, ["step"])
        time.sleep(0.02)  # the worker is asleep before the next request
    assert voluntary_switches(pid) - before <= reads + reads // 5


def test_a_packed_layout_of_20000_variables_reads_through_shared_memory(
        tmp_path: Path, reader: CheckpointReadProcess) -> None:
    """Issue #16 item 8: a large layout (format 2) is served through the read process,
    every variable a read-only view of the shared block."""
    arrays = {f"v{i:05d}": np.asarray((np.float32, np.int64)[i % 2](i)) for i in range(20_000)}
    arrays.update(ARRAYS)
    prefix = write_checkpoint(tmp_path / "m-1", arrays, 1)
    got = reader.read(prefix, list(arrays))
    assert list(got) == list(arrays)
    for k, v in arrays.items():
        assert got[k].dtype == v.dtype and got[k].tobytes() == np.asarray(v).tobytes(), k
        assert not got[k].flags.writeable
