"""Metadata images (checkpoint/_image.py): a save of a known layout patches a prebuilt
HDF5 image instead of running HDF5, and the file is the one HDF5 would have written."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptsync.checkpoint import CheckpointReader, _image, read_checkpoint, write_checkpoint
from ckptsync.checkpoint import writer as writer_mod

DTYPES = ["bool", "int8", "uint16", "int32", "int64", "float16", "float32", "float64",
          "complex64", "complex128"]
KEYS = ["w", "b", "dense0/w", "dense0/w/Adam", "dense0/w/Adam_1", "dense0/b", "global_step",
        "a/b/c/d", "x.y-z_1", "c", "d", "e", "f", "g", "h", "i", "j"]


def _value(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 50
    if dtype == "bool":
        return np.asarray(x > 0)
    if dtype.startswith("complex"):
        return (x + 1j * x[::-1] if x.ndim else x + 1j).astype(dtype)
    return np.asarray(x).astype(dtype)


def _write_both(tmp: Path, name: str, arrays: dict, step: int | None, meta: dict | None,
                created: float = 1700000000.25) -> tuple[bytes, bytes]:
    """(HDF5's file, the image's file) for the same save, at the same time."""
    with mock.patch("time.time", return_value=created):
        with mock.patch.object(_image, "image_for", return_value=None):  # plain HDF5
            write_checkpoint(tmp / f"{name}-hdf5", arrays, step, meta)
        # A new layout's first save is HDF5's; its image is learnt from that file.
        write_checkpoint(tmp / f"{name}-learn", arrays, step, meta)
        with mock.patch.object(writer_mod, "H5Writer", side_effect=AssertionError("HDF5 used")):
            write_checkpoint(tmp / f"{name}-image", arrays, step, meta)
    return ((tmp / f"{name}-hdf5.h5").read_bytes(), (tmp / f"{name}-image.h5").read_bytes())


layouts = st.dictionaries(
    st.sampled_from(KEYS),
    st.tuples(st.sampled_from(DTYPES),
              st.lists(st.integers(0, 6), max_size=3).map(tuple)),
    min_size=1, max_size=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=layouts, step=st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)),
       meta_len=st.integers(0, 300), seed=st.integers(0, 2**16))
def test_image_files_equal_hdf5_files_byte_for_byte(tmp_path_factory: pytest.TempPathFactory,
                                                    layout: dict, step: int | None,
                                                    meta_len: int, seed: int) -> None:
    tmp = tmp_path_factory.mktemp("img")
    arrays = {k: _value(dt, shape, seed + i) for i, (k, (dt, shape)) in enumerate(layout.items())}
    meta = {"note": "é" * (meta_len // 2) + "x" * (meta_len % 2)}
    # The first save of a layout builds its image; the second (new values, same layout)
    # is written from it. Both must be exactly HDF5's file.
    for round_ in range(2):
        arrays = {k: _value(str(v.dtype), v.shape, seed + 100 * round_ + i)
                  for i, (k, v) in enumerate(arrays.items())}
        theirs, mine = _write_both(tmp, f"r{round_}", arrays, step, meta,
                                   created=1.7e9 + round_ + seed / 7)
        assert mine == theirs
    got = read_checkpoint(tmp / "r1-image", verify=True)
    for k, v in arrays.items():
        assert got[k].tobytes() == np.ascontiguousarray(v).tobytes()


def test_a_known_layout_is_written_without_hdf5(tmp_path: Path) -> None:
    arrays = {"dense0/w": np.ones((64, 128), np.float32), "global_step": np.int64(3)}
    write_checkpoint(tmp_path / "m-1", arrays, 1)  # builds the image
    with mock.patch.object(writer_mod, "H5Writer", side_effect=AssertionError("HDF5 used")):
        arrays["dense0/w"][0, 0] = 7.0
        write_checkpoint(tmp_path / "m-2", arrays, 2, {"k": "v"})
    got = read_checkpoint(tmp_path / "m-2", verify=True)
    assert got["dense0/w"][0, 0] == 7.0 and int(got["global_step"]) == 3
    with h5py.File(tmp_path / "m-2.h5", "r") as f:  # plain HDF5 tools read it too
        assert f.attrs["global_step"] == 2 and f.attrs["metadata_json"] == b'{"k": "v"}'


def test_metadata_of_nearby_lengths_shares_one_image(tmp_path: Path) -> None:
    arrays = {"w": np.ones(3, np.float32)}
    with mock.patch.object(_image, "build", wraps=_image.build) as build, \
            mock.patch.dict(_image._cache, clear=True):
        for offset in (7, 77, 777, 7777):  # JSON lengths differ; padded lengths do not
            write_checkpoint(tmp_path / f"m-{offset}", arrays, offset, {"offset": offset})
    assert build.call_count == 1
    with CheckpointReader(str(tmp_path / "m-7777")) as reader:
        assert reader.metadata == {"offset": 7777}


@pytest.mark.parametrize("why", ["no checksum function", "chunks do not verify", "too large",
                                 "too many variables"])
def test_layouts_without_a_usable_image_are_written_by_hdf5(tmp_path: Path, why: str) -> None:
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.int64(4)}
    patches = {
        "no checksum function": mock.patch.object(_image, "_checksum_fn", None),
        "chunks do not verify": mock.patch.object(_image, "_checksum", return_value=0),
        "too large": mock.patch.object(_image, "MAX_DATA_BYTES", 8),
        "too many variables": mock.patch.object(_image, "MAX_VARIABLES", 1),  # issue #16
    }
    with patches[why], mock.patch.dict(_image._cache, clear=True):
        assert _image.image_for(*_args(arrays)) is None
        with mock.patch("time.time", return_value=1.5e9):
            write_checkpoint(tmp_path / "m-image", arrays, 5, {"a": 1})
            with mock.patch.object(_image, "image_for", return_value=None):  # plain HDF5
                write_checkpoint(tmp_path / "m-hdf5", arrays, 5, {"a": 1})
    assert (tmp_path / "m-image.h5").read_bytes() == (tmp_path / "m-hdf5.h5").read_bytes()
    np.testing.assert_array_equal(read_checkpoint(tmp_path / "m-image", verify=True)["w"],
                                  arrays["w"])


def test_the_cache_is_bounded(tmp_path: Path) -> None:
    with mock.patch.dict(_image._cache, clear=True):
        for n in range(_image._CACHE_SIZE + 5):
            write_checkpoint(tmp_path / f"m-{n}", {"w": np.zeros(n + 1, np.float32)}, n)
        assert len(_image._cache) == _image._CACHE_SIZE


def _args(arrays: dict) -> tuple:
    from ckptsync.checkpoint import _format
    from ckptsync.checkpoint._h5layout import RootValues

    names = sorted(arrays)
    prepared = {k: _format.normalize_array(k, v) for k, v in arrays.items()}
    entries = [_format.entry_for(k, prepared[k]) for k in names]
    index = _format.encode_index(entries)
    values = RootValues(5, 1.0, writer_mod.WRITER, "{}" + "\0" * 62,
                        [e.xxh3_64 for e in entries], index, _format.hash_array(index))
    return values, names, prepared, _format.hdf5_paths(names)


# ---------------------------------------------------------------- the reading half
def _learned(tmp_path: Path, arrays: dict, step: int = 1) -> Path:
    """Writes a checkpoint and reads it (through HDF5 the first time, which teaches
    its layout)."""
    prefix = write_checkpoint(tmp_path / f"learn-{step}", arrays, step, {"m": 1})
    read_checkpoint(prefix)
    return Path(prefix + ".h5")


SMALL = {"dense0/w": np.arange(6, dtype=np.float32).reshape(2, 3),
         "dense0/b": np.ones(3, np.float32), "global_step": np.int64(5),
         "mask": np.array([True, False])}


def test_a_learned_layout_is_read_without_hdf5(tmp_path: Path) -> None:
    from ckptsync.checkpoint import reader as reader_mod

    _learned(tmp_path, SMALL)
    arrays = {k: v * 3 if v.dtype.kind == "f" else v for k, v in SMALL.items()}
    prefix = write_checkpoint(tmp_path / "m-9", arrays, 9, {"m": 2})
    with mock.patch.object(reader_mod, "CheckpointReader", side_effect=AssertionError("HDF5")):
        got = read_checkpoint(prefix)
        part = read_checkpoint(prefix, ["mask", "dense0/w"], verify=False)
    assert list(got) == sorted(arrays) and list(part) == ["mask", "dense0/w"]
    for k, v in arrays.items():
        assert got[k].tobytes() == v.tobytes() and got[k].dtype == v.dtype
    np.testing.assert_array_equal(part["dense0/w"], arrays["dense0/w"])


def test_every_flipped_byte_of_a_learned_layout_falls_back_to_hdf5(tmp_path: Path) -> None:
    from ckptsync.checkpoint import _fast_read

    path = _learned(tmp_path, SMALL)
    good = path.read_bytes()
    assert _fast_read.read_known(str(path), None, True) is not None
    bad = tmp_path / "bad.h5"
    for i in range(len(good)):
        flipped = bytearray(good)
        flipped[i] ^= 0x20
        bad.write_bytes(bytes(flipped))
        assert _fast_read.read_known(str(bad), None, True) is None, f"byte {i} accepted"


def test_a_missing_key_or_another_layout_goes_to_hdf5_which_says_what_is_wrong(
        tmp_path: Path) -> None:
    from ckptsync.checkpoint import _fast_read
    from ckptsync.errors import NotFoundError

    _learned(tmp_path, SMALL)
    prefix = write_checkpoint(tmp_path / "m-2", SMALL, 2, {"m": 3})
    assert _fast_read.read_known(prefix + ".h5", ["nope"], True) is None
    with pytest.raises(NotFoundError, match="Key nope not found"):
        read_checkpoint(prefix, ["nope"])
    other = write_checkpoint(tmp_path / "o-2", {**SMALL, "extra": np.zeros(2)}, 2)
    assert _fast_read.read_known(other + ".h5", None, True) is None
    assert sorted(read_checkpoint(other)) == sorted([*SMALL, "extra"])


@pytest.mark.parametrize("n", [7, 8, 9, 20, 40, 300])
def test_many_variables_in_one_group_are_byte_identical(tmp_path: Path, n: int) -> None:
    """HDF5 trims free space when it closes a file: images are taken from closed files."""
    arrays = {f"v{i:04d}": np.full((3,), i, np.float32) for i in range(n)}
    for round_ in range(2):
        theirs, mine = _write_both(tmp_path, f"n{n}-{round_}", arrays, round_, None)
        assert mine == theirs


def test_metadata_that_is_not_json_is_refused_on_both_paths(tmp_path: Path) -> None:
    from ckptsync.checkpoint import _fast_read
    from ckptsync.errors import DataLossError

    path = _learned(tmp_path, SMALL)
    image = next(i for i in _fast_read._recent if i.size_bytes == path.stat().st_size)
    raw = bytearray(path.read_bytes())
    index, at, _ = image.fields["metadata_json"]
    raw[image.pieces[index].offset + at] = ord("!")  # '{' -> '!', checksum made valid:
    pieces = [bytes(raw[p.offset:p.offset + len(p.data)]) for p in image.pieces]
    fixed = image._patched({f: pieces[j][a:a + n] for f, (j, a, n) in image.fields.items()})
    for j, buf in fixed.items():
        raw[image.pieces[j].offset:image.pieces[j].offset + len(buf)] = buf
    bad = tmp_path / "bad-1.h5"
    bad.write_bytes(bytes(raw))
    assert _fast_read.read_known(str(bad), None, True) is None
    with pytest.raises(DataLossError, match="metadata_json is not valid JSON"):
        read_checkpoint(tmp_path / "bad-1")


def test_under_a_file_size_limit_the_hdf5_layout_is_used(tmp_path: Path) -> None:
    arrays = {"w": np.ones((4, 4), np.float32), "s": np.int64(1)}
    with mock.patch.object(writer_mod, "_raw_writes_are_safe", return_value=False), \
            mock.patch.object(_image, "image_for", side_effect=AssertionError("image")):
        write_checkpoint(tmp_path / "m-1", arrays, 1)
    np.testing.assert_array_equal(read_checkpoint(tmp_path / "m-1")["w"], arrays["w"])


def test_scratch_files_of_killed_builders_are_swept(tmp_path):
    """A process killed while building an image leaves its scratch file in /dev/shm (it
    cannot remove it); the next build removes the files of dead processes only."""
    import os
    import subprocess
    import sys
    import tempfile

    scratch = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)
    stale = os.path.join(scratch, f"ckptsync-image-{dead.pid}-test.h5")
    mine = os.path.join(scratch, f"ckptsync-image-{os.getpid()}-test.h5")
    for path in (stale, mine):
        open(path, "wb").close()
    try:
        # a layout no other test builds: this write builds its image, sweeping first
        arrays = {"sweep/w": np.ones((3, 7), np.float32), "global_step": np.int64(1)}
        write_checkpoint(str(tmp_path / "model.ckpt-1"), arrays, global_step=1)
        assert not os.path.exists(stale) and os.path.exists(mine)
    finally:
        for path in (stale, mine):
            if os.path.exists(path):
                os.unlink(path)
