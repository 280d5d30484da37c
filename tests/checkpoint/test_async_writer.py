"""AsyncCheckpointWriter: every dtype and shape through shared memory, state publishing."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ckptsync.checkpoint import get_checkpoint_state, read_checkpoint
from ckptsync.checkpoint._async_writer import AsyncCheckpointWriter, StateUpdate
from ckptsync.errors import CkptsyncRuntimeError, CkptsyncTypeError


def _arrays(scale: int) -> dict[str, np.ndarray]:
    return {
        "f16": np.arange(5, dtype=np.float16) * scale,
        "c128/x": (np.arange(4) * scale + 1j).astype(np.complex128),
        "flag": np.array(True),
        "scalar": np.int64(scale),
        "empty": np.zeros((0, 3), np.uint16),
        "big/w": np.full((300, 700), scale, np.float32),
        "be": np.arange(3, dtype=">i4") * scale,
    }


def test_every_dtype_and_shape_round_trips_and_state_is_published(tmp_path: Path) -> None:
    with AsyncCheckpointWriter() as writer:
        for step in (1, 2):
            arrays = _arrays(step)
            prefix = str(tmp_path / f"m-{step}")
            writer.submit(prefix, arrays, global_step=step, metadata={"step": step},
                          state=StateUpdate(str(tmp_path), prefix, [prefix]),
                          delete=[str(tmp_path / "m-1")] if step == 2 else [])
            for a in arrays.values():  # the caller may change its arrays at once
                if a.ndim:
                    a[...] = 0
        writer.wait()
        got = read_checkpoint(tmp_path / "m-2")
    for name, want in _arrays(2).items():
        assert got[name].dtype == want.dtype.newbyteorder("=") and got[name].shape == want.shape
        np.testing.assert_array_equal(got[name], want)
    state = get_checkpoint_state(str(tmp_path))
    assert state is not None and state.model_checkpoint_path == str(tmp_path / "m-2")
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "m-2.h5"]


def test_bad_input_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    writer = AsyncCheckpointWriter()
    with pytest.raises(CkptsyncTypeError, match="'s'.*dtype"):
        writer.submit(str(tmp_path / "m"), {"s": np.array(["a"])})
    assert writer.in_flight is None
    writer.close()
    with pytest.raises(CkptsyncRuntimeError, match="closed"):
        writer.submit(str(tmp_path / "m"), {"w": np.ones(1)})
    assert os.listdir(tmp_path) == []
