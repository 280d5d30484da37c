"""Writer placement: the CPUs of the checkpoint disk's interrupts, read from sysfs/procfs
(fake trees here, the real ones in the last tests), and the writer pinned to them."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from ckptsync.checkpoint import _placement
from ckptsync.checkpoint._async_writer import AsyncCheckpointWriter, StateUpdate
from ckptsync.checkpoint._placement import (
    ENV_VAR,
    interrupt_cpus,
    parse_cpu_list,
    pin_process,
    writer_cpus,
)
from ckptsync.errors import CkptsyncValueError

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"),
                                reason="CPU affinity is Linux-only")


def _fake_tree(root: Path, directory: Path, irqs: dict[int, str], partition: bool = True,
               msi: bool = True) -> tuple[str, str]:
    """A sysfs/procfs pair where ``directory``'s device is a partition of a PCI disk
    whose interrupts go to ``irqs`` (IRQ number -> CPU list)."""
    sys_root, proc_root = root / "sys", root / "proc"
    pci = sys_root / "devices" / "pci0000:00" / "0000:00:02.0"
    disk = pci / "virtio1" / "block" / "vda"
    block = disk / "vda1" if partition else disk
    block.mkdir(parents=True)
    if partition:
        (block / "partition").write_text("1\n")
    (disk / "device").symlink_to(pci / "virtio1")
    if msi:
        (pci / "msi_irqs").mkdir()
        for n in irqs:
            (pci / "msi_irqs" / str(n)).write_text("msix\n")
    else:
        (pci / "irq").write_text(f"{next(iter(irqs))}\n")
    for n, cpus in irqs.items():
        (proc_root / "irq" / str(n)).mkdir(parents=True)
        (proc_root / "irq" / str(n) / "effective_affinity_list").write_text(cpus + "\n")
    dev = os.stat(directory).st_dev
    (sys_root / "dev" / "block").mkdir(parents=True)
    (sys_root / "dev" / "block" / f"{os.major(dev)}:{os.minor(dev)}").symlink_to(block)
    return str(sys_root), str(proc_root)


def test_cpu_lists_parse_as_the_kernel_writes_them() -> None:
    assert parse_cpu_list("0-3,8\n") == {0, 1, 2, 3, 8}
    assert parse_cpu_list("5") == {5}
    for bad in ("a", "3-1", "-1", "1-b", "\u0661", "0-100000000"):
        with pytest.raises(CkptsyncValueError, match="not a CPU list"):
            parse_cpu_list(bad)


def test_the_interrupt_cpus_of_a_partitions_disk_are_found(tmp_path: Path) -> None:
    roots = _fake_tree(tmp_path / "t", tmp_path, {35: "1", 36: "1"})
    assert interrupt_cpus(str(tmp_path), *roots) == {1}
    roots = _fake_tree(tmp_path / "u", tmp_path, {40: "2-3"}, partition=False, msi=False)
    assert interrupt_cpus(str(tmp_path), *roots) == {2, 3}


def test_no_block_device_or_no_sysfs_means_unknown(tmp_path: Path) -> None:
    assert interrupt_cpus(str(tmp_path), str(tmp_path / "nosys"), str(tmp_path)) is None
    roots = _fake_tree(tmp_path / "t", tmp_path, {35: "1"})
    assert interrupt_cpus(str(tmp_path / "missing"), *roots) is None


def test_the_writer_is_pinned_only_where_that_leaves_cpus_free(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    roots = _fake_tree(tmp_path / "t", tmp_path, {35: "1", 36: "1"})
    d = str(tmp_path)
    assert writer_cpus(d, frozenset({0, 1}), *roots) == {1}
    assert writer_cpus(d, frozenset({0, 1, 2, 3}), *roots) == {1}
    assert writer_cpus(d, frozenset({1}), *roots) is None  # nothing left to free
    assert writer_cpus(d, frozenset({0, 2}), *roots) is None  # never outside the owner's
    every = _fake_tree(tmp_path / "u", tmp_path, {40: "0", 41: "1"})  # one queue per CPU
    assert writer_cpus(d, frozenset({0, 1}), *every) is None


def test_the_setting_overrides_or_fails_clearly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    roots = _fake_tree(tmp_path / "t", tmp_path, {35: "1"})
    d = str(tmp_path)
    for off in ("none", " NONE "):
        monkeypatch.setenv(ENV_VAR, off)
        assert writer_cpus(d, frozenset({0, 1}), *roots) is None
    monkeypatch.setenv(ENV_VAR, "0")  # taken as is, even outside the owner's CPUs
    assert writer_cpus(d, frozenset({1}), *roots) == {0}
    absent = os.cpu_count() or 1
    monkeypatch.setenv(ENV_VAR, f"0,{absent}")
    with pytest.raises(CkptsyncValueError,
                       match=f"{ENV_VAR}='0,{absent}': CPU {absent} does not exist"):
        writer_cpus(d, frozenset({0, 1}), *roots)
    for bad in ("fast", "1-0", "-1", "0-", "\u0661", "0-100000000", ","):
        monkeypatch.setenv(ENV_VAR, bad)
        with pytest.raises(CkptsyncValueError,
                           match=f"{ENV_VAR}=.*: expected 'auto', 'none' or a CPU list"):
            writer_cpus(d, frozenset({0, 1}), *roots)


def _save(writer: AsyncCheckpointWriter, tmp_path: Path, step: int) -> None:
    prefix = str(tmp_path / f"m-{step}")
    writer.submit(prefix, {"w": np.full(4, step, np.float32)}, global_step=step,
                  state=StateUpdate(str(tmp_path), prefix, [prefix]))
    writer.wait()


def _threads_cpus(pid: int) -> set[frozenset[int]]:
    """The CPU sets of every thread of ``pid``."""
    return {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")}


def test_the_writer_process_runs_on_the_cpus_chosen_for_its_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    owner = frozenset(os.sched_getaffinity(0))
    expected = writer_cpus(str(tmp_path))  # this machine's answer for this directory
    with AsyncCheckpointWriter() as writer:
        assert writer.pid is not None
        deadline = time.monotonic() + 5  # until its BLAS threads exist (numpy imported)
        while len(os.listdir(f"/proc/{writer.pid}/task")) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        _save(writer, tmp_path, 1)
        assert writer.pid is not None
        assert _threads_cpus(writer.pid) == {expected or owner}  # every thread of it
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
        if os.path.isdir("/dev/shm"):  # another directory, chosen again: none pinned
            monkeypatch.delenv(ENV_VAR)
            shm = Path(tempfile.mkdtemp(dir="/dev/shm"))
            try:
                _save(writer, shm, 4)
                assert _threads_cpus(writer.pid) == {writer_cpus(str(shm)) or owner}
            finally:
                shutil.rmtree(shm)


def _is_running(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_unusable_cpus_are_warned_about_once_and_never_fail_a_save(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # A cgroup's cpuset refusing the CPUs cannot be had here: the kernel's answer is mocked.
    def refuse(pid: int, cpus: object) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(_placement, "_warned", set())
    monkeypatch.setattr(_placement.os, "sched_setaffinity", refuse)
    with caplog.at_level("WARNING", logger="ckptsync.checkpoint._placement"):
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
