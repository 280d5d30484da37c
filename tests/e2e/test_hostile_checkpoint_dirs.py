"""`trainer run` on a checkpoint directory whose state file is a FIFO, or whose `.h5` is a
symlink to a file outside it: one clear line and exit 1, at once (it used to hang on the
FIFO, deaf to SIGTERM and SIGINT, and to resume from the outside file)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.helpers import publish_outside

from .conftest import MODEL, cli, env


def _train(ckpt_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli("trainer", "run", "--model", MODEL, "--data", "digits", "--checkpoint-dir",
            str(ckpt_dir), "--steps", "5", "--device", "cpu:0"),
        env=env(), capture_output=True, text=True, timeout=120)


def test_trainer_run_refuses_a_fifo_state_file_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "checkpoint")
    try:
        done = _train(tmp_path)
    finally:  # had it blocked, the timeout above killed it; nothing else holds the FIFO
        assert (tmp_path / "checkpoint").is_fifo()  # not trained over
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert "is a FIFO (named pipe), not a regular file" in lines[-1]
    assert "Traceback" not in done.stderr


def test_trainer_run_does_not_resume_from_a_symlink_outside(tmp_path: Path) -> None:
    d, _ = publish_outside(tmp_path)
    done = _train(d)
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "resolves outside the checkpoint directory" in last and "Traceback" not in done.stderr
