"""``ckptsync inspect``: listing, values, and one-line errors with exit codes 1 and 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from ckptsync.checkpoint import (
    block_digests,
    update_checkpoint_state,
    variable_digest,
    write_checkpoint,
    write_incremental_checkpoint,
)
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


@pytest.fixture
def chain(tmp_path: Path) -> tuple[Path, list[str], dict[str, np.ndarray]]:
    """A full checkpoint, two deltas on it and a full checkpoint with a parent."""
    arrays = {"emb": np.arange(40, dtype=np.float32).reshape(10, 4), "w": np.ones((2, 2))}

    def digests() -> dict[str, str]:
        return {k: variable_digest(block_digests(v)) for k, v in arrays.items()}

    p = [write_checkpoint(tmp_path / "m-0", arrays, global_step=0)]
    arrays["emb"] = arrays["emb"].copy()
    arrays["emb"][[3, 9]] = -1
    p.append(write_incremental_checkpoint(tmp_path / "m-1", arrays, {"emb": np.array([3, 9])},
                                          p[0], digests(), False, global_step=1))
    arrays["w"] = arrays["w"] * 2
    p.append(write_incremental_checkpoint(tmp_path / "m-2", arrays, {"w": None}, p[1],
                                          digests(), False, global_step=2))
    p.append(write_incremental_checkpoint(tmp_path / "m-3", arrays, {"emb": np.array([1])},
                                          p[2], digests(), True, global_step=3))
    return tmp_path, p, arrays


def test_a_delta_shows_its_chain_and_changes_and_composed_values(chain) -> None:
    tmp_path, p, arrays = chain
    code, out, _ = _run(p[1], "--tensor", "emb")
    assert code == 0, out
    assert "format version 3" in out
    lines = out.splitlines()
    assert f"chain: 2 checkpoints, {sum(Path(q + '.h5').stat().st_size for q in p[:2])} " \
           f"bytes (nearest full checkpoint first)" in lines
    assert lines[lines.index(next(x for x in lines if x.startswith("chain:"))) + 1].split() == [
        "full", p[0], f"{Path(p[0] + '.h5').stat().st_size}", "bytes"]
    assert any(x.split() == ["delta", p[1], f"{Path(p[1] + '.h5').stat().st_size}", "bytes"]
               for x in lines)
    assert any(x.split() == ["emb", "float32", "rows(2)", "[10,", "4]"] for x in lines)
    assert any(x.split() == ["w", "float64", "same", "[2,", "2]"] for x in lines)
    assert "verified: 2 variables, checksums ok" in out
    assert out.count("[-1. -1. -1. -1.]") == 2 and "[ 4.  5.  6.  7.]" in out  # composed
    code, out, _ = _run(p[2], "--tensor", "w")
    assert code == 0 and "chain: 3 checkpoints" in out and "[[2. 2.]\n [2. 2.]]" in out
    assert any(x.split() == ["w", "float64", "full", "[2,", "2]"] for x in out.splitlines())


def test_a_full_checkpoint_with_a_parent_shows_the_parent(chain) -> None:
    _, p, _ = chain
    code, out, _ = _run(p[3])
    assert code == 0 and "format version 1" in out
    assert f"parent: {p[2]} (a full checkpoint with a parent: it composes alone)" in out
    assert any(x.split() == ["emb", "float32", "rows(1)", "[10,", "4]"]
               for x in out.splitlines())
    assert "chain:" not in out


def test_a_delta_whose_base_is_gone_is_one_line_exit_1(chain) -> None:
    _, p, _ = chain
    Path(p[0] + ".h5").unlink()
    code, _, err = _run(p[2])
    assert code == 1
    assert err.count("\n") == 1 and f"composed from base {p[0]}" in err and "missing" in err
