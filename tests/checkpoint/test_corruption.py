"""Damaged files: every one is refused with a DataLossError naming the file, never a hang."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest

from ckptsync.checkpoint import CheckpointReader, read_checkpoint, write_checkpoint
from ckptsync.errors import DataLossError

ARRAYS = {
    "dense0/w": np.arange(32, dtype=np.float32).reshape(8, 4),
    "dense0/b": np.ones(4, np.float32),
    "global_step": np.int64(5),
    "flag": np.array(True),
}


@pytest.fixture
def good(tmp_path: Path) -> Path:
    return Path(write_checkpoint(tmp_path / "model.ckpt-5", ARRAYS, 5, {"x": 1}) + ".h5")


def _data_ranges(path: Path) -> dict[str, tuple[int, int]]:
    out = {}
    with h5py.File(path, "r") as f:

        def visit(name: str, obj: object) -> None:
            if isinstance(obj, h5py.Dataset) and obj.id.get_offset() is not None:
                out[name] = (obj.id.get_offset(), obj.id.get_offset() + obj.id.get_storage_size())

        f.visititems(visit)
    return out


@pytest.mark.parametrize("fraction", [0.0001, 0.1, 0.3, 0.5, 0.7, 0.9, 0.999])
def test_truncated_file(good: Path, fraction: float) -> None:
    raw = good.read_bytes()
    good.write_bytes(raw[: max(1, int(len(raw) * fraction))])
    with pytest.raises(DataLossError, match=rf"Checkpoint file {good} is corrupt"):
        read_checkpoint(good)


def test_flipped_byte_in_data_names_the_variable(good: Path) -> None:
    start, _ = _data_ranges(good)["dense0/w"]
    raw = bytearray(good.read_bytes())
    raw[start + 5] ^= 0x40
    good.write_bytes(bytes(raw))
    with pytest.raises(
        DataLossError, match=r"model\.ckpt-5\.h5 is corrupt: variable 'dense0/w': checksum mismatch"
    ):
        read_checkpoint(good)
    # Other variables still read; without verify the damaged bytes come back as they are.
    np.testing.assert_array_equal(
        read_checkpoint(good, names=["dense0/b"])["dense0/b"], ARRAYS["dense0/b"]
    )
    assert not np.array_equal(read_checkpoint(good, verify=False)["dense0/w"], ARRAYS["dense0/w"])


@pytest.mark.parametrize("content", [b"", b"not an hdf5 file at all" * 10, b"\x89HDF\r\n\x1a\n"])
def test_empty_or_non_hdf5_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "m.h5"
    path.write_bytes(content)
    with pytest.raises(DataLossError, match=rf"{path} is corrupt"):
        CheckpointReader(tmp_path / "m")


def test_directory_in_place_of_file(tmp_path: Path) -> None:
    (tmp_path / "m.h5").mkdir()
    with pytest.raises(DataLossError, match="is a directory"):
        read_checkpoint(tmp_path / "m")


def test_foreign_hdf5_file_without_ckptsync_attributes(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "m.h5", "w", libver=("v108", "v108")) as f:
        f["w"] = np.ones(3)
    with pytest.raises(DataLossError, match="not a ckptsync file"):
        read_checkpoint(tmp_path / "m")


def test_missing_index(good: Path) -> None:
    with h5py.File(good, "r+") as f:
        del f["_ckptsync/index"]
    with pytest.raises(DataLossError, match="no index dataset"):
        read_checkpoint(good)


def test_unsupported_format_version(good: Path) -> None:
    with h5py.File(good, "r+") as f:
        f.attrs["ckptsync_format_version"] = np.int64(4)
    with pytest.raises(DataLossError, match=r"format version 4 is not supported \(expected one "
                       r"of 1, 2, 3\); upgrade ckptsync"):
        CheckpointReader(good)


def test_format_1_file_relabelled_as_format_3_is_refused(good: Path) -> None:
    with h5py.File(good, "r+") as f:
        f.attrs["ckptsync_format_version"] = np.int64(3)
    with pytest.raises(DataLossError, match="index is malformed"):
        CheckpointReader(good)


def test_format_1_file_relabelled_as_format_2_is_refused(good: Path) -> None:
    # Format 2's index is by column: a format-1 index under a version-2 label is corrupt.
    with h5py.File(good, "r+") as f:
        f.attrs["ckptsync_format_version"] = np.int64(2)
    with pytest.raises(DataLossError, match="index has no format_version 2"):
        CheckpointReader(good)


def test_index_edited_without_updating_its_hash(good: Path) -> None:
    with h5py.File(good, "r+") as f:
        raw = f["_ckptsync/index"][()].tobytes()
        assert b'"shape":[8,4]' in raw
        f["_ckptsync/index"][...] = np.frombuffer(
            raw.replace(b'"shape":[8,4]', b'"shape":[4,8]'), np.uint8
        )
    with pytest.raises(DataLossError, match="variable '_ckptsync/index': checksum mismatch"):
        CheckpointReader(good)


def test_dataset_replaced_with_another_shape(good: Path) -> None:
    with h5py.File(good, "r+") as f:
        del f["dense0/b"]
        f["dense0/b"] = np.ones(5, np.float32)
    with pytest.raises(
        DataLossError, match=r"variable 'dense0/b': dataset shape \[5\] != index \[4\]"
    ):
        read_checkpoint(good)


def test_dataset_replaced_with_another_dtype(good: Path) -> None:
    with h5py.File(good, "r+") as f:
        del f["dense0/b"]
        f["dense0/b"] = np.ones(4, np.float64)
    with pytest.raises(
        DataLossError, match=r"variable 'dense0/b': dataset dtype <f8 != index float32"
    ):
        read_checkpoint(good)


def test_malformed_index_json(good: Path) -> None:
    with h5py.File(good, "r+") as f:
        doc = json.loads(f["_ckptsync/index"][()].tobytes())
        doc["variables"][0]["nbytes"] = 3
        raw = np.frombuffer(json.dumps(doc).encode(), np.uint8)
        from ckptsync.checkpoint._format import hash_array

        del f["_ckptsync/index"]
        ds = f.create_dataset("_ckptsync/index", data=raw)
        ds.attrs["xxh3_64"] = np.bytes_(hash_array(raw).encode())
    with pytest.raises(DataLossError, match="index is malformed"):
        CheckpointReader(good)


_FLIP_SCRIPT = textwrap.dedent(
    """
    import sys, collections, numpy as np
    from ckptsync.checkpoint import read_checkpoint, CheckpointReader
    from ckptsync.errors import DataLossError
    src, scratch, skip = sys.argv[1], sys.argv[2], eval(sys.argv[3])
    expected = {k: v for k, v in read_checkpoint(src).items()}
    raw = open(src, "rb").read()
    counts = collections.Counter()
    for i in range(len(raw)):
        if any(a <= i < b for a, b in skip):
            continue
        damaged = bytearray(raw)
        damaged[i] ^= 0xFF
        with open(scratch, "wb") as fh:
            fh.write(damaged)
        try:
            with CheckpointReader(scratch) as r:
                same = r.global_step == 5 and r.metadata == {"x": 1}
            out = read_checkpoint(scratch)
            same = same and out.keys() == expected.keys() and all(
                np.array_equal(out[k], expected[k]) for k in out)
            counts["same" if same else "WRONG at %d" % i] += 1
        except DataLossError as e:
            assert scratch in str(e), e
            counts["dataloss"] += 1
    print(dict(counts))
    """
)


def test_every_flipped_metadata_byte_is_caught_or_harmless(good: Path, tmp_path: Path) -> None:
    """Flip each byte outside the variables' data: DataLossError or identical values,
    never wrong values, another exception, a crash or a hang (run in a subprocess)."""
    skip = [r for name, r in _data_ranges(good).items() if name != "_ckptsync/index"]
    proc = subprocess.run(
        [sys.executable, "-c", _FLIP_SCRIPT, str(good), str(tmp_path / "scratch.h5"), repr(skip)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = eval(proc.stdout.strip().splitlines()[-1])
    assert set(counts) <= {"same", "dataloss"}, counts
    assert counts["dataloss"] > 100, counts


def test_fifo_named_as_a_checkpoint_is_refused_without_blocking(tmp_path):
    """A FIFO would block an ordinary open() forever; the reader must refuse it at once."""
    import os

    from ckptsync.checkpoint import read_checkpoint
    from ckptsync.errors import DataLossError

    os.mkfifo(tmp_path / "model.ckpt-7.h5")
    with pytest.raises(DataLossError, match="not a regular file"):
        read_checkpoint(str(tmp_path / "model.ckpt-7"))
    (tmp_path / "dir.h5").mkdir()
    with pytest.raises(DataLossError, match="directory"):
        read_checkpoint(str(tmp_path / "dir"))
