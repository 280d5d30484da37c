"""Versions of checkpoints saved without a step (issue 16, item 16): the recorded step,
else a number that grows with each new file at the path, even when the clock goes back."""

from __future__ import annotations

import os

from ckptsync import checkpoint as ckpt
from ckptsync.serving._stepless import StepLessVersions

from .conftest import mlp_params


def test_each_new_file_at_one_path_gets_a_larger_version_even_with_an_older_mtime(tmp_path):
    prefix = str(tmp_path / "model.ckpt")
    versions = StepLessVersions()
    assert versions.version(prefix) is None  # no file yet
    ckpt.write_checkpoint(prefix, mlp_params(1))
    first = versions.version(prefix)
    assert first is not None and first == os.stat(prefix + ".h5").st_mtime_ns // 1_000_000
    assert versions.version(prefix) == first  # the same file: the same version
    ckpt.write_checkpoint(prefix, mlp_params(2))  # replaced, its time set back a day
    st = os.stat(prefix + ".h5")
    os.utime(prefix + ".h5", ns=(st.st_atime_ns, st.st_mtime_ns - 86_400 * 10**9))
    second = versions.version(prefix)
    assert second is not None and second > first
    ckpt.write_checkpoint(prefix, mlp_params(3), global_step=700)  # a step recorded
    assert versions.version(prefix) == 700


def test_a_directory_or_fifo_at_the_path_has_no_version(tmp_path):
    versions = StepLessVersions()
    os.mkdir(tmp_path / "dir.h5")
    os.mkfifo(tmp_path / "fifo.h5")
    assert versions.version(str(tmp_path / "dir")) is None
    assert versions.version(str(tmp_path / "fifo")) is None  # never opened: no block
