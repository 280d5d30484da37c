"""Helpers for tests that run real trainer and server processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = str(REPO / "examples" / "digits_mlp.py")


def cli(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"ckptsync.cli.{module}", *args]


def wait_for_file(path: Path, proc: subprocess.Popen, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"process exited early with {proc.returncode}")
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} did not appear within {timeout_s} s")


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen]]:
    """Processes started by a test; all are ended (SIGTERM, then SIGKILL) afterwards."""
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in started:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
        for stream in (p.stdin, p.stdout, p.stderr):
            if stream is not None:
                stream.close()


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONUNBUFFERED"] = "1"
    return e
