"""Writer placement: ``CKPTSYNC_WRITER_CPUS`` parsed and checked, and every thread of the
writer process pinned to the CPUs it lists (``auto``, which read the disk's interrupt
CPUs from sysfs, was removed: it is refused with a message saying so)."""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from ckptsync.errors import CkptsyncValueError
from ckptsync.workers import AsyncCheckpointWriter, StateUpdate, placement
from ckptsync.workers.placement import ENV_VAR, parse_cpu_list, pin_process, writer_cpus

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"),
                                reason="CPU affinity is Linux-only")


def test_cpu_lists_parse_as_the_kernel_writes_them() -> None:
    assert parse_cpu_list("0-3,8\n") == {0, 1, 2, 3, 8}
    assert parse_cpu_list("5") == {5}
    for bad in ("a", "3-1", "-1", "1-b", "\u0661", "0-100000000", "0,,1", "0,", ",1"):
        with pytest.raises(CkptsyncValueError, match="not a CPU list"):
            parse_cpu_list(bad)


def test_the_setting_pins_or_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert writer_cpus() is None
    for off in ("none", " NONE ", ""):
        monkeypatch.setenv(ENV_VAR, off)
        assert writer_cpus() is None
    for removed in ("auto", " AUTO"):
        monkeypatch.setenv(ENV_VAR, removed)
        with pytest.raises(CkptsyncValueError, match=f"{ENV_VAR}=.*: 'auto' .* was removed"):
            writer_cpus()
    monkeypatch.setenv(ENV_VAR, "0")  # taken as is, even outside the owner's CPUs
    assert writer_cpus() == {0}
    absent = os.cpu_count() or 1
    monkeypatch.setenv(ENV_VAR, f"0,{absent}")
    with pytest.raises(CkptsyncValueError,
                       match=f"{ENV_VAR}='0,{absent}': CPU {absent} does not exist"):
        writer_cpus()
    for bad in ("fast", "1-0", "-1", "0-", "\u0661", "0-100000000", ","):
        monkeypatch.setenv(ENV_VAR, bad)
        with pytest.raises(CkptsyncValueError,
                           match=f"{ENV_VAR}=.*: expected 'none' or a CPU list"):
            writer_cpus()


def _save(writer: AsyncCheckpointWriter, tmp_path: Path, step: int) -> None:
    prefix = str(tmp_path / f"m-{step}")
    writer.submit(prefix, {"w": np.full(4, step, np.float32)}, global_step=step,
                  state=StateUpdate(str(tmp_path), prefix, [prefix]))
    writer.wait()


def _threads_cpus(pid: int) -> set[frozenset[int]]:
    """The CPU sets of every thread of ``pid``."""
    return {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")}


def test_the_writer_process_runs_on_the_cpus_of_the_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    owner = frozenset(os.sched_getaffinity(0))
    monkeypatch.delenv(ENV_VAR, raising=False)
    with AsyncCheckpointWriter() as writer:
        assert writer.pid is not None
        deadline = time.monotonic() + 5  # until its BLAS threads exist (numpy imported)
        while len(os.listdir(f"/proc/{writer.pid}/task")) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        _save(writer, tmp_path, 1)
        assert writer.pid is not None
        assert _threads_cpus(writer.pid) == {owner}  # not pinned: the owner's CPUs
    if len(owner) < 2:
        return
    monkeypatch.setenv(ENV_VAR, str(min(owner)))  # an explicit CPU list
    with AsyncCheckpointWriter() as writer:
        _save(writer, tmp_path, 2)
        assert writer.pid is not None and _threads_cpus(writer.pid) == {frozenset({min(owner)})}
        first = writer.pid
        os.kill(first, signal.SIGKILL)  # dies while idle: the next save starts another
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{first}/task") and _is_running(first):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        _save(writer, tmp_path, 3)
        assert writer.pid not in (None, first)
        assert _threads_cpus(writer.pid) == {frozenset({min(owner)})}


def _is_running(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_unusable_cpus_are_warned_about_once_and_never_fail_a_save(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # A cgroup's cpuset refusing the CPUs cannot be had here: the kernel's answer is mocked.
    def refuse(pid: int, cpus: object) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(placement, "_warned", set())
    monkeypatch.setattr(placement.os, "sched_setaffinity", refuse)
    with caplog.at_level("WARNING", logger="ckptsync.workers.placement"):
        pin_process(os.getpid(), frozenset({0}))
        pin_process(os.getpid(), frozenset({0}))
    warnings = [r for r in caplog.records if "Cannot run the checkpoint writer" in r.getMessage()]
    assert len(warnings) == 1 and ENV_VAR in warnings[0].getMessage()


def test_a_bad_setting_fails_the_save_before_anything_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "fast")
    with AsyncCheckpointWriter() as writer:
        with pytest.raises(CkptsyncValueError, match=ENV_VAR):
            _save(writer, tmp_path, 1)
        assert writer.in_flight is None
    assert os.listdir(tmp_path) == []
