"""``ckptsync inspect``: listing, values, and one-line errors with exit codes 1 and 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from ckptsync.checkpoint import update_checkpoint_state, write_checkpoint
from ckptsync.cli.main import main


@pytest.fixture
def ckpts(tmp_path: Path) -> Path:
    arrays = {"dense0/w": np.arange(6, dtype=np.float32).reshape(2, 3),
              "dense0/b": np.zeros(3, np.float64), "global_step": np.int64(7)}
    prefix = write_checkpoint(tmp_path / "model.ckpt-7", arrays, global_step=7)
    update_checkpoint_state(str(tmp_path), prefix)
    return tmp_path


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["inspect", *args], prog_name="ckptsync")
    return result.exit_code, result.stdout, result.stderr


def test_lists_names_shapes_dtypes_step_and_time(ckpts: Path) -> None:
    code, out, _ = _run(str(ckpts))
    assert code == 0
    assert f"checkpoint: {ckpts / 'model.ckpt-7'}" in out
    assert "global_step: 7" in out and "created: " in out and "format version 1" in out
    lines = out.splitlines()
    assert any(line.split() == ["dense0/w", "float32", "[2,", "3]"] for line in lines)
    assert any(line.split() == ["dense0/b", "float64", "[3]"] for line in lines)
    assert "tensor_name" not in out


def test_prints_values_on_request(ckpts: Path) -> None:
    code, out, _ = _run(str(ckpts / "model.ckpt-7.h5"), "--tensor", "dense0/w:0")
    assert code == 0
    assert "tensor_name: dense0/w" in out and "[[0. 1. 2.]\n [3. 4. 5.]]" in out
    code, out, _ = _run(str(ckpts / "model.ckpt-7"), "--all-tensors")
    assert code == 0 and out.count("tensor_name:") == 3


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["missing"], 1, "Failed to find any matching files for"),
        (["{d}/model.ckpt-7", "--tensor", "nope"], 1, "Key nope not found in checkpoint"),
        (["{d}/model.ckpt-7", "--tensor", "nope"], 1, "model.ckpt-7.h5; it has: dense0/b, "),
        (["{d}/garbage"], 1, "is corrupt"),
        (["{d}/empty_dir"], 1, "no checkpoint in directory"),
        (["{d}", "--tensor", "x", "--all-tensors"], 2, "mutually exclusive"),
        ([], 2, "Missing argument"),
    ],
)
def test_errors_are_one_line_with_exit_codes(
    ckpts: Path, args: list[str], code: int, fragment: str
) -> None:
    (ckpts / "garbage.h5").write_bytes(b"not hdf5 at all")
    (ckpts / "empty_dir").mkdir()
    exit_code, out, err = _run(*[a.format(d=ckpts) for a in args])
    assert exit_code == code
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and fragment in err
    assert err.startswith("ckptsync inspect: error: ")


def test_a_damaged_variable_fails_the_listing_unless_no_verify(ckpts: Path) -> None:
    from ckptsync.checkpoint import CheckpointReader

    path = ckpts / "model.ckpt-7.h5"
    with CheckpointReader(str(ckpts / "model.ckpt-7")) as reader:
        offset = reader._file["dense0/w"].id.get_offset()  # data of dense0/w
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))
    code, out, err = _run(str(ckpts))
    assert code == 1
    assert "dense0/w" in err and "Traceback" not in err
    code, out, _ = _run(str(ckpts), "--no-verify")
    assert code == 0 and "verified" not in out


def test_a_packed_checkpoint_lists_and_prints_every_variable(tmp_path: Path) -> None:
    """Format 2 (more than 1,024 variables, the small ones packed): every name listed."""
    arrays = {f"layer{i // 100:02d}/v{i % 100:02d}": np.float32(i) for i in range(2000)}
    arrays["big/w"] = np.ones((200, 100), np.float32)  # 80 kB: a dataset of its own
    write_checkpoint(tmp_path / "model.ckpt-3", arrays, global_step=3)
    code, out, _ = _run(str(tmp_path / "model.ckpt-3"))
    assert code == 0 and "format version 2" in out
    listed = {line.split()[0] for line in out.splitlines() if line.startswith(("layer", "big"))}
    assert listed == set(arrays)
    code, out, _ = _run(str(tmp_path / "model.ckpt-3"), "--tensor", "layer12/v34")
    assert code == 0 and out.splitlines()[-1] == "1234."
