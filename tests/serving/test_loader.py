"""load_snapshot: verified, immutable snapshots; every corruption refused with file + variable."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ckptsync import checkpoint as ckpt
from ckptsync.errors import DataLossError, InvalidArgumentError, NotFoundError
from ckptsync.serving import Snapshot, load_snapshot

from .conftest import mlp_params, publish


def test_loads_only_the_servables_variables_read_only(tmp_path, mlp):
    arrays = {
        **mlp_params(3),
        "global_step": np.array(3, np.int64),
        "opt/dense0/w/m": np.zeros((4, 8), np.float32),
    }
    prefix = publish(tmp_path, 3, arrays)
    snap = load_snapshot(prefix, mlp)
    assert isinstance(snap, Snapshot)
    assert snap.version == 3 and snap.prefix == prefix
    assert set(snap.params) == set(mlp.variable_specs)
    np.testing.assert_array_equal(snap.params["dense0/b"], np.full((8,), 3, np.float32))
    assert snap.load_duration_s >= 0 and snap.loaded_unix_s > 0
    assert snap.nbytes == sum(a.nbytes for a in mlp_params(3).values())
    with pytest.raises(ValueError, match="read-only"):
        snap.params["dense0/b"][0] = 1.0
    with pytest.raises(TypeError):
        snap.params["dense0/b"] = np.zeros(8)  # type: ignore[index]
    with pytest.raises(AttributeError):
        snap.version = 4  # type: ignore[misc]


def test_missing_file(tmp_path, mlp):
    with pytest.raises(NotFoundError, match="model.ckpt-9"):
        load_snapshot(str(tmp_path / "model.ckpt-9"), mlp)


def test_missing_variable_names_file_and_variable(tmp_path, mlp):
    arrays = mlp_params(1)
    del arrays["dense1/b"]
    prefix = publish(tmp_path, 1, arrays)
    with pytest.raises(
        NotFoundError, match=r"model\.ckpt-1\.h5.*dense1/b|dense1/b.*model\.ckpt-1\.h5"
    ):
        load_snapshot(prefix, mlp)


@pytest.mark.parametrize(
    "name, value, match",
    [
        (
            "dense0/w",
            np.zeros((4, 9), np.float32),
            r"'dense0/w' has shape \[4, 9\], the graph expects \[4, 8\]",
        ),
        (
            "dense0/b",
            np.zeros((8,), np.float64),
            r"'dense0/b' has dtype float64, the graph expects float32",
        ),
        ("dense1/w", np.full((8, 3), np.nan, np.float32), r"'dense1/w' holds 24 NaN/Inf"),
        ("dense1/b", np.array([0, np.inf, 0], np.float32), r"'dense1/b' holds 1 NaN/Inf"),
    ],
)
def test_wrong_shape_dtype_nonfinite(tmp_path, mlp, name, value, match):
    prefix = publish(tmp_path, 2, {**mlp_params(2), name: value})
    with pytest.raises(InvalidArgumentError, match=match) as info:
        load_snapshot(prefix, mlp)
    assert prefix + ".h5" in str(info.value)


def test_nonfinite_allowed_when_asked(tmp_path, mlp):
    prefix = publish(tmp_path, 2, {**mlp_params(2), "dense1/b": np.full(3, np.nan, np.float32)})
    assert np.isnan(load_snapshot(prefix, mlp, allow_nonfinite=True).params["dense1/b"]).all()


@pytest.mark.parametrize("cut", [0, 8, 100, 1000, -200, -1])
def test_truncated_file(tmp_path, mlp, cut):
    prefix = publish(tmp_path, 5)
    path = Path(prefix + ".h5")
    data = path.read_bytes()
    path.write_bytes(data[:cut] if cut >= 0 else data[: len(data) + cut])
    with pytest.raises(DataLossError, match=r"model\.ckpt-5\.h5"):
        load_snapshot(prefix, mlp)


def test_flipped_data_bytes(tmp_path, mlp):
    prefix = publish(tmp_path, 6)
    path = Path(prefix + ".h5")
    with ckpt.CheckpointReader(prefix) as reader:
        assert reader.get_variable_to_shape_map()["dense0/w"] == [4, 8]
    raw = bytearray(path.read_bytes())
    needle = mlp_params(6)["dense0/w"].tobytes()
    at = raw.find(needle)
    assert at > 0
    raw[at + 5] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(DataLossError, match=r"model\.ckpt-6\.h5") as info:
        load_snapshot(prefix, mlp)
    assert "dense0/w" in str(info.value)


def test_version_defaults_to_zero_without_suffix(tmp_path, mlp):
    prefix = str(tmp_path / "model.ckpt")
    ckpt.write_checkpoint(prefix, mlp_params(1))
    assert load_snapshot(prefix, mlp).version == 0
    assert load_snapshot(prefix, mlp, version=11).version == 11
    assert os.path.exists(prefix + ".h5")
