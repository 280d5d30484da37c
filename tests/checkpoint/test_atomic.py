"""Publishing: failed writes leave no temp file and earlier files intact; sweeping."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import ckptsync.checkpoint._atomic as atomic
from ckptsync.checkpoint import (
    get_checkpoint_state,
    latest_checkpoint,
    read_checkpoint,
    sweep_temp_files,
    update_checkpoint_state,
    write_checkpoint,
)
from ckptsync.errors import DataLossError, PermissionDeniedError, ResourceExhaustedError

BIG = {"w": np.ones(400_000, np.float32)}  # 1.6 MB: more than a 1 MiB file system holds


def _names(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def _good_state(d: Path) -> str:
    prefix = write_checkpoint(d / "model.ckpt-1", {"w": np.ones(3)}, 1)
    update_checkpoint_state(str(d), prefix)
    return prefix


def test_disk_full_fails_loudly_and_keeps_earlier_checkpoints(
    small_fs: Path | None, tmp_path: Path
) -> None:
    if small_fs is None:
        _disk_full_with_rlimit(tmp_path)
        return
    prefix = _good_state(small_fs)
    with pytest.raises(ResourceExhaustedError, match=r"model\.ckpt-2\.h5: No space left on device"):
        write_checkpoint(small_fs / "model.ckpt-2", BIG, 2)
    assert _names(small_fs) == ["checkpoint", "model.ckpt-1.h5"]
    assert latest_checkpoint(str(small_fs)) == prefix
    np.testing.assert_array_equal(read_checkpoint(prefix)["w"], np.ones(3))
    # The space of the failed temp file was released (no leaked HDF5 handle).
    write_checkpoint(small_fs / "model.ckpt-3", {"w": np.ones(150_000, np.float32)})


def _disk_full_with_rlimit(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import resource, signal, sys, numpy as np
        from ckptsync.checkpoint import write_checkpoint
        from ckptsync.errors import ResourceExhaustedError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        try:
            write_checkpoint(sys.argv[1], {"w": np.ones(400_000, np.float32)})
        except ResourceExhaustedError as e:
            print("OK", e)
        """
    )
    _good_state(tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "model.ckpt-2")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.startswith("OK") and "File too large" in out.stdout, (out.stdout, out.stderr)
    assert _names(tmp_path) == ["checkpoint", "model.ckpt-1.h5"]


def test_file_size_limit_fails_as_resource_exhausted(tmp_path: Path) -> None:
    _disk_full_with_rlimit(tmp_path)


def test_read_only_directory(make_readonly: tuple[Path, Callable[[], None]]) -> None:
    directory, freeze = make_readonly
    prefix = _good_state(directory)
    freeze()
    with pytest.raises(
        PermissionDeniedError,
        match=rf"{directory}/model\.ckpt-2\.h5: (Read-only file system|Permission denied)",
    ):
        write_checkpoint(directory / "model.ckpt-2", {"w": np.zeros(3)})
    with pytest.raises(PermissionDeniedError, match=rf"{directory}/checkpoint"):
        update_checkpoint_state(str(directory), str(directory / "model.ckpt-2"))
    assert _names(directory) == ["checkpoint", "model.ckpt-1.h5"]
    assert latest_checkpoint(str(directory)) == prefix


def test_failed_fsync_fails_the_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An fsync error cannot be provoked on a healthy disk, so os.fsync is replaced."""
    prefix = _good_state(tmp_path)

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(atomic.os, "fsync", failing_fsync)
    with pytest.raises(DataLossError, match=r"model\.ckpt-2\.h5: Input/output error"):
        write_checkpoint(tmp_path / "model.ckpt-2", {"w": np.zeros(3)})
    with pytest.raises(DataLossError, match="checkpoint: Input/output error"):
        update_checkpoint_state(str(tmp_path), str(tmp_path / "model.ckpt-2"))
    monkeypatch.undo()
    assert _names(tmp_path) == ["checkpoint", "model.ckpt-1.h5"]
    assert get_checkpoint_state(str(tmp_path)).model_checkpoint_path == prefix


def test_bad_input_creates_no_file(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        write_checkpoint(tmp_path / "m", {"ok": np.ones(2), "bad": np.array(["s"])})
    assert _names(tmp_path) == []


def test_temp_names_and_counter() -> None:
    a = atomic.temp_path_for("/d/model.ckpt-5.h5")
    b = atomic.temp_path_for("/d/model.ckpt-5.h5")
    assert a.startswith(f"/d/.model.ckpt-5.h5.tmp-{os.getpid()}-") and a != b
    assert atomic.TEMP_RE.match(os.path.basename(a))


def test_sweep_removes_dead_writers_temp_files_only(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(dead.stdout)
    names = [
        f".model.ckpt-5.h5.tmp-{dead_pid}-0",
        f".checkpoint.tmp-{dead_pid}-3",
        f".model.ckpt-6.h5.tmp-{os.getpid()}-1",
        "model.ckpt-4.h5",
        ".hidden",
        "checkpoint",
    ]
    for n in names:
        (tmp_path / n).write_bytes(b"x")
    removed = sweep_temp_files(str(tmp_path))
    assert removed == sorted(str(tmp_path / n) for n in names[:2])
    assert _names(tmp_path) == sorted(names[2:])
    assert sweep_temp_files(str(tmp_path), force=True) == [str(tmp_path / names[2])]
    assert sweep_temp_files(str(tmp_path / "missing")) == []


def test_temp_files_are_invisible_to_readers(tmp_path: Path) -> None:
    (tmp_path / f".model.ckpt-9.h5.tmp-{os.getpid()}-0").write_bytes(b"partial")
    (tmp_path / f".checkpoint.tmp-{os.getpid()}-0").write_text(
        'model_checkpoint_path: "model.ckpt-9"\n'
    )
    assert get_checkpoint_state(str(tmp_path)) is None
    assert latest_checkpoint(str(tmp_path)) is None
