"""Data sets: digits, MNIST IDX (raw and .gz), .npz; the resumable batch iterator."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from ckptsync.data import BatchIterator, DataError, load_dataset, load_digits, load_mnist


def _idx(path, arr, gz=False):
    header = struct.pack(">BBBB", 0, 0, 0x08, arr.ndim) + struct.pack(">" + "I" * arr.ndim,
                                                                     *arr.shape)
    data = header + arr.astype(np.uint8).tobytes()
    with (gzip.open if gz else open)(path, "wb") as f:
        f.write(data)


def _mnist_dir(d, gz=False, n_train=20, n_test=10):
    rng = np.random.default_rng(0)
    sfx = ".gz" if gz else ""
    _idx(d / f"train-images-idx3-ubyte{sfx}", rng.integers(0, 256, (n_train, 28, 28)), gz)
    _idx(d / f"train-labels-idx1-ubyte{sfx}", rng.integers(0, 10, n_train), gz)
    _idx(d / f"t10k-images-idx3-ubyte{sfx}", rng.integers(0, 256, (n_test, 28, 28)), gz)
    _idx(d / f"t10k-labels-idx1-ubyte{sfx}", rng.integers(0, 10, n_test), gz)


def test_digits_shapes_scale_and_fixed_split():
    a, b = load_digits(), load_digits()
    assert a.train["x"].shape == (1438, 64) and a.test["x"].shape == (359, 64)
    assert a.train["x"].dtype == np.float32 and a.train["y"].dtype == np.int64
    assert 0.0 <= a.train["x"].min() and a.train["x"].max() <= 1.0
    np.testing.assert_array_equal(a.test["y"], b.test["y"])


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_idx_raw_and_gz(tmp_path, gz):
    _mnist_dir(tmp_path, gz)
    ds = load_mnist(str(tmp_path))
    assert ds.train["x"].shape == (20, 784) and ds.test["x"].shape == (10, 784)
    assert ds.train["x"].max() <= 1.0 and ds.train["y"].dtype == np.int64
    renamed = load_dataset(f"mnist:{tmp_path}", ("image",), ("label",))
    assert set(renamed.train) == {"image", "label"}


def test_mnist_corrupt_header_and_missing_files(tmp_path):
    _mnist_dir(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(b"\x12\x34\x08\x01garbage")
    with pytest.raises(DataError, match="bad magic number"):
        load_mnist(str(tmp_path))
    (tmp_path / "train-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match="train-labels-idx1-ubyte"):
        load_mnist(str(tmp_path))
    with pytest.raises(DataError, match="MNIST directory not found"):
        load_mnist(str(tmp_path / "nope"))


def test_mnist_truncated_data_is_refused(tmp_path):
    _mnist_dir(tmp_path)
    p = tmp_path / "t10k-images-idx3-ubyte"
    p.write_bytes(p.read_bytes()[:-5])
    with pytest.raises(DataError, match="header says"):
        load_mnist(str(tmp_path))


def test_npz_named_arrays_and_errors(tmp_path):
    p = tmp_path / "d.npz"
    np.savez(p, features=np.zeros((10, 3), np.float32), target=np.zeros(10, np.int64))
    ds = load_dataset(str(p), ("features",), ("target",))
    assert ds.train["features"].shape == (8, 3) and ds.test["target"].shape == (2,)
    with pytest.raises(DataError, match=r"lacks arrays \['x'\]"):
        load_dataset(str(p), ("x",), ("target",))
    with pytest.raises(DataError, match="Data file not found"):
        load_dataset(str(tmp_path / "missing.npz"), ("x",), ("y",))
    with pytest.raises(DataError, match="Unknown --data"):
        load_dataset("imagenet", ("x",), ("y",))


def test_batch_iterator_is_deterministic_and_resumable():
    arrays = {"x": np.arange(10), "y": np.arange(10) * 2}
    it = BatchIterator(arrays, 3, seed=5)
    first = [next(it)["x"].tolist() for _ in range(7)]
    it2 = BatchIterator(arrays, 3, seed=5)
    for _ in range(4):
        next(it2)
    pos = it2.position
    it3 = BatchIterator(arrays, 3, seed=5)
    it3.restore(pos)
    assert [next(it3)["x"].tolist() for _ in range(3)] == first[4:]
    # every epoch is a permutation (3 full batches of 10 rows; the remainder is dropped)
    seen = sum(first[:3], [])
    assert len(set(seen)) == 9
    with pytest.raises(ValueError, match="seed"):
        BatchIterator(arrays, 3, seed=6).restore(pos)
    with pytest.raises(ValueError, match="batch_size must be in"):
        BatchIterator(arrays, 11)
