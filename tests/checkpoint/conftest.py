"""Fixtures for the format-layer tests: small and read-only file systems."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

# Run in the goldens venv, with TensorFlow (never importable here).
collect_ignore = ["tf_fixtures/make_fixtures.py"]


def _run(*cmd: str) -> bool:
    return subprocess.run(cmd, capture_output=True).returncode == 0


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[bool]:
    """Mounts a tmpfs of ``size`` at ``path`` when running as root; yields success."""
    path.mkdir()
    mounted = os.geteuid() == 0 and _run(
        "mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)
    )
    try:
        yield mounted
    finally:
        if mounted:
            _run("umount", "-l", str(path))


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path | None]:
    """A directory on a 1 MiB tmpfs, or None when mounting is not possible."""
    with _tmpfs(tmp_path / "small", "1m") as mounted:
        yield tmp_path / "small" if mounted else None


@pytest.fixture
def make_readonly(tmp_path: Path) -> Iterator[tuple[Path, object]]:
    """Yields ``(dir, freeze)``: fill ``dir``, then call ``freeze()`` to make it read-only.

    As root (which bypasses chmod) ``dir`` is a tmpfs remounted read-only; otherwise it
    is chmod 0o555.
    """
    with _tmpfs(tmp_path / "ro", "8m") as mounted:
        directory = tmp_path / "ro"

        def freeze() -> None:
            if mounted:
                assert _run("mount", "-o", "remount,ro", str(directory))
            elif os.geteuid() == 0:
                pytest.skip("running as root without mount permission: cannot make a read-only dir")
            else:
                directory.chmod(0o555)

        try:
            yield directory, freeze
        finally:
            if not mounted:
                directory.chmod(0o755)
