"""write_checkpoint / read_checkpoint / CheckpointReader round trips and input errors."""

from __future__ import annotations

import json
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from ckptsync.checkpoint import CheckpointReader, read_checkpoint, write_checkpoint
from ckptsync.errors import (
    CkptsyncRuntimeError,
    CkptsyncTypeError,
    CkptsyncValueError,
    NotFoundError,
)


@pytest.fixture(autouse=True, params=["images", "hdf5"])
def write_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every round trip twice: through metadata images and the raw fast read (the
    default) and through plain HDF5 (the reference: no image is ever made)."""
    from ckptsync.checkpoint import _image

    if request.param == "hdf5":
        monkeypatch.setattr(_image, "image_for", lambda *args, **kwargs: None)
    return str(request.param)


ALL_DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
]


def _sample(dtype: type, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 100
    if np.dtype(dtype).kind == "c":
        return (x + 1j * rng.standard_normal(shape)).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return x > 0
    return x.astype(dtype) if np.dtype(dtype).kind == "f" else np.abs(x).astype(dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (7,), (2, 3, 4)], ids=str)
def test_every_dtype_and_shape_round_trips_exactly(
    tmp_path: Path, dtype: type, shape: tuple
) -> None:
    value = _sample(dtype, shape)
    prefix = write_checkpoint(tmp_path / "m", {"v": value})
    out = read_checkpoint(prefix)["v"]
    assert out.dtype == np.dtype(dtype) and out.shape == shape
    assert out.tobytes() == value.tobytes()
    assert out.flags.c_contiguous and out.flags.writeable


def test_deep_scopes_optimizer_slots_and_many_names(tmp_path: Path) -> None:
    arrays = {
        "dense0/w": np.ones((4, 3), np.float32),
        "dense0/w/Adam": np.zeros((4, 3), np.float32),
        "dense0/w/Adam_1": np.full((4, 3), 2, np.float32),
        "a/b/c/d/e/f/g": np.arange(3),
        "global_step": np.int64(12),
        "beta1_power": np.float32(0.9),
        "x.y-z/_private": np.array([1.5]),
    }
    prefix = write_checkpoint(str(tmp_path / "model.ckpt-12"), arrays, global_step=12)
    assert prefix == str(tmp_path / "model.ckpt-12")
    out = read_checkpoint(prefix)
    assert sorted(out) == sorted(arrays)
    for k, v in arrays.items():
        np.testing.assert_array_equal(out[k], v)


def test_non_contiguous_and_big_endian_inputs_are_written_as_c_order_copies(tmp_path: Path) -> None:
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    arrays = {"t": base.T, "s": base[::2, ::3], "be": np.arange(5, dtype=">i4")}
    out = read_checkpoint(write_checkpoint(tmp_path / "m", arrays))
    for k, v in arrays.items():
        np.testing.assert_array_equal(out[k], v)
    assert out["be"].dtype == np.dtype("<i4")


def test_metadata_global_step_and_reader_properties(tmp_path: Path) -> None:
    before = time.time()
    meta = {"model": "mlp", "lr": 0.01, "layers": [64, 10], "nested": {"ok": True}}
    prefix = write_checkpoint(
        tmp_path / "m", {"w": np.ones((2, 2), np.float32), "b": np.ones(3)}, 1200, meta
    )
    with CheckpointReader(prefix + ".h5") as r:
        assert r.global_step == 1200
        assert r.metadata == meta
        assert r.format_version == 1
        assert r.writer.startswith("ckptsync ")
        assert before - 1 <= r.created_unix_s <= time.time() + 1
        assert r.path == prefix + ".h5"
        assert r.nbytes == 16 + 24
        assert r.get_variable_to_shape_map() == {"w": [2, 2], "b": [3]}
        assert r.get_variable_to_dtype_map() == {"w": np.dtype("float32"), "b": np.dtype("float64")}
        assert r.has_tensor("w") and not r.has_tensor("w:0")
    with CheckpointReader(write_checkpoint(tmp_path / "n", {})) as r:
        assert r.global_step is None and r.metadata == {} and r.get_variable_to_shape_map() == {}


def test_read_subset_and_missing_names(tmp_path: Path) -> None:
    prefix = write_checkpoint(tmp_path / "m", {"a": np.ones(2), "b/c": np.zeros(1)})
    assert list(read_checkpoint(prefix, names=["b/c"])) == ["b/c"]
    with pytest.raises(NotFoundError, match="Key nope not found in checkpoint"):
        read_checkpoint(prefix, names=["a", "nope"])
    with (
        CheckpointReader(prefix) as r,
        pytest.raises(NotFoundError, match="Key b not found in checkpoint"),
    ):
        r.get_tensor("b")  # a group, not a variable


def test_missing_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match=r"not found: .*model\.ckpt-7\.h5"):
        read_checkpoint(tmp_path / "model.ckpt-7")
    with pytest.raises(NotFoundError, match="Failed to find any matching files for"):
        CheckpointReader(str(tmp_path / "nodir" / "m"))


def test_closed_reader_raises(tmp_path: Path) -> None:
    r = CheckpointReader(write_checkpoint(tmp_path / "m", {"a": np.ones(2)}))
    r.close()
    r.close()
    with pytest.raises(CkptsyncRuntimeError, match="closed"):
        r.get_tensor("a")


def test_variable_that_is_also_a_scope_is_stored_at_colon_value(tmp_path: Path) -> None:
    # TF names optimizer slots under their variable: "w" and "w/Adam" coexist.
    arrays = {"w": np.ones(2), "w/Adam": np.zeros(2), "w/Adam/x": np.full(1, 3.0)}
    prefix = write_checkpoint(tmp_path / "m", arrays)
    with h5py.File(prefix + ".h5", "r") as f:
        assert isinstance(f["w/:value"], h5py.Dataset)
        assert isinstance(f["w/Adam/:value"], h5py.Dataset)
        assert isinstance(f["w/Adam/x"], h5py.Dataset)
    out = read_checkpoint(prefix)
    for k, v in arrays.items():
        np.testing.assert_array_equal(out[k], v)


@pytest.mark.parametrize(
    "value, dtype_text",
    [
        (np.array(["x", "y"]), "<U1"),
        (np.array([b"x"]), "|S1"),
        (np.array([object()], dtype=object), "|O"),
        (np.zeros(2, dtype=[("a", "<f4")]), "V4"),
        (np.array(["2020-01-01"], dtype="datetime64[D]"), "M8"),
        (np.zeros(2, dtype=np.longdouble), "f"),
    ],
    ids=["str", "bytes", "object", "structured", "datetime", "longdouble"],
)
def test_unsupported_dtype_names_key_and_dtype(
    tmp_path: Path, value: np.ndarray, dtype_text: str
) -> None:
    if value.dtype == np.float64:  # platforms where longdouble is float64
        pytest.skip("longdouble is float64 here")
    with pytest.raises(CkptsyncTypeError, match=rf"key 'scope/v' has dtype .*{dtype_text}"):
        write_checkpoint(tmp_path / "m", {"ok": np.ones(1), "scope/v": value})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "key", ["", "_private", "/a", "a/", "a//b", "a/./b", "a/../b", "a b", "a:0", "é"]
)
def test_invalid_keys_are_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(CkptsyncValueError, match="Checkpoint key"):
        write_checkpoint(tmp_path / "m", {key: np.ones(1)})


def test_non_str_key_and_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(CkptsyncTypeError, match="has type int; expected str"):
        write_checkpoint(tmp_path / "m", {3: np.ones(1)})  # type: ignore[dict-item]
    with pytest.raises(CkptsyncTypeError, match="global_step must be an int"):
        write_checkpoint(tmp_path / "m", {}, global_step=1.5)  # type: ignore[arg-type]
    with pytest.raises(CkptsyncTypeError, match="metadata is not JSON-serializable"):
        write_checkpoint(tmp_path / "m", {}, metadata={"f": np.ones(2)})
    with pytest.raises(CkptsyncValueError, match="metadata is .* bytes as JSON"):
        write_checkpoint(tmp_path / "m", {}, metadata={"big": "x" * 70000})
    assert list(tmp_path.iterdir()) == []


def test_ten_thousand_variables_list_from_the_index(tmp_path: Path) -> None:
    arrays = {f"layer{i // 100}/v{i}": np.full((i % 4,), i, np.int32) for i in range(10_000)}
    prefix = write_checkpoint(tmp_path / "m", arrays)
    with CheckpointReader(prefix) as r:
        shapes = r.get_variable_to_shape_map()
        assert len(shapes) == 10_000
        assert shapes["layer99/v9999"] == [3]
        np.testing.assert_array_equal(r.get_tensor("layer42/v4242"), [4242, 4242])


def test_rewriting_a_prefix_replaces_the_inode_and_open_readers_keep_old_data(
    tmp_path: Path,
) -> None:
    prefix = write_checkpoint(tmp_path / "m", {"a": np.zeros(3)})
    old_inode = Path(prefix + ".h5").stat().st_ino
    with CheckpointReader(prefix) as r:
        write_checkpoint(prefix, {"a": np.ones(3)})
        np.testing.assert_array_equal(r.get_tensor("a"), np.zeros(3))
    assert Path(prefix + ".h5").stat().st_ino != old_inode
    np.testing.assert_array_equal(read_checkpoint(prefix)["a"], np.ones(3))


def test_index_json_matches_datasets(tmp_path: Path) -> None:
    prefix = write_checkpoint(tmp_path / "m", {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    with h5py.File(prefix + ".h5", "r") as f:
        index = json.loads(f["_ckptsync/index"][()].tobytes())
    assert index["format_version"] == 1
    [entry] = index["variables"]
    assert entry["name"] == "w" and entry["dtype"] == "float32" and entry["shape"] == [2, 3]
    assert entry["nbytes"] == 24 and len(entry["xxh3_64"]) == 16
