"""Small helpers several test packages share (fixtures stay in the conftest files)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ckptsync import checkpoint as ckpt


def pid_gone(pid: int) -> bool:
    """True once no process ``pid`` exists (killed and reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def publish_outside(tmp_path: Path) -> tuple[Path, str]:
    """``ckpts/model.ckpt-5.h5`` as a symlink to ``outside/secret.h5``, named by a state
    file written by hand (``update_checkpoint_state`` refuses it too). Returns (the
    checkpoint directory, the outside prefix)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = ckpt.write_checkpoint(str(outside / "secret"), {"w": np.ones(2)}, 1)
    d = tmp_path / "ckpts"
    d.mkdir()
    (d / "model.ckpt-5.h5").symlink_to(secret + ".h5")
    (d / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-5"\n'
                                  'all_model_checkpoint_paths: "model.ckpt-5"\n')
    return d, secret
