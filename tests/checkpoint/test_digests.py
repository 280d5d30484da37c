"""Block digests (checkpoint/digests.py): the per-block hashes of a variable that
incremental checkpoints record, and their cheap update after a row change."""

from __future__ import annotations

import zlib

import h5py
import numpy as np
import pytest
import xxhash

from ckptsync import checkpoint as ckpt
from ckptsync.checkpoint import (
    block_digests,
    block_rows,
    update_block_digests,
    variable_digest,
)
from ckptsync.errors import CkptsyncValueError

DTYPES = ["bool", "int8", "uint16", "int32", "int64", "float16", "float32", "float64",
          "complex64", "complex128"]


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("complex"):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return (rng.standard_normal(shape) * 100).astype(dtype)


def _expected(arr: np.ndarray) -> np.ndarray:
    """Independent reference: the little-endian C-order bytes, cut by rows."""
    raw = np.ascontiguousarray(arr.astype(arr.dtype.newbyteorder("<"))).tobytes()
    if arr.ndim == 0:
        return np.array([xxhash.xxh3_64_intdigest(raw)], np.uint64)
    rows = arr.shape[0]
    per = max(1, 4096 // max(1, int(np.prod(arr.shape[1:])) * arr.dtype.itemsize))
    row_nbytes = len(raw) // rows if rows else 0
    return np.array([xxhash.xxh3_64_intdigest(raw[s * row_nbytes:(s + per) * row_nbytes])
                     for s in range(0, rows, per)], np.uint64)


def test_block_rows_is_4096_bytes_of_rows_at_least_one():
    assert block_rows((1000, 64), 4) == 16
    assert block_rows((10,), 8) == 512
    assert block_rows((3, 5000), 4) == 1
    assert block_rows((), 4) == 1
    assert block_rows((0, 7), 2) == 4096 // 14
    assert block_rows((5, 0), 4) == 4096  # zero-byte rows
    with pytest.raises(CkptsyncValueError, match="itemsize"):
        block_rows((3,), 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (1,), (7, 3), (1000, 64), (513,),
                                   (3, 5000), (37, 2, 3)])
def test_block_digests_hash_the_formats_bytes_per_block(dtype, shape):
    arr = _random(np.random.default_rng(1), shape, dtype)
    got = block_digests(arr)
    assert got.dtype == np.uint64
    np.testing.assert_array_equal(got, _expected(arr))
    n_rows = shape[0] if shape else 1
    per = block_rows(shape, arr.dtype.itemsize)
    assert len(got) == (1 if shape == () else -(-n_rows // per))


@pytest.mark.parametrize("dtype", ["float32", "int64", "complex128", "bool"])
def test_byte_order_and_layout_do_not_change_the_digests(dtype):
    arr = _random(np.random.default_rng(2), (300, 5), dtype)
    ref = block_digests(arr)
    if dtype != "bool":
        np.testing.assert_array_equal(block_digests(arr.astype(arr.dtype.newbyteorder(">"))), ref)
    np.testing.assert_array_equal(block_digests(np.asfortranarray(arr)), ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1000, 64), (513,), (37, 2, 3), (3, 5000), (1,)])
def test_update_equals_recompute_for_random_row_sets(dtype, shape):
    rng = np.random.default_rng(zlib.crc32(repr((dtype, shape)).encode()))
    arr = _random(rng, shape, dtype)
    digests = block_digests(arr)
    for trial in range(6):
        k = int(rng.integers(0, 12))
        rows = rng.integers(0, shape[0], size=k).astype(np.int64)
        if trial == 0:
            rows = np.array([shape[0] - 1, shape[0] - 1], np.int64)  # last (short) block
        elif trial == 1:
            rows = np.array([], np.int64)
        elif rows.size:
            rows = np.concatenate([rows, rows[:2]])  # duplicates
        new = arr.copy()
        new[rows] = _random(rng, (len(rows), *shape[1:]), dtype)
        before = digests.copy()
        updated = update_block_digests(new, digests, rows)
        np.testing.assert_array_equal(digests, before)  # not modified in place
        np.testing.assert_array_equal(updated, block_digests(new))
        arr, digests = new, updated


def test_update_of_a_scalar_and_an_empty_table():
    a = np.float64(1.5)
    d = block_digests(a)
    b = np.float64(2.5)
    np.testing.assert_array_equal(update_block_digests(b, d, np.array([0])), block_digests(b))
    np.testing.assert_array_equal(update_block_digests(b, d, []), d)
    empty = np.zeros((0, 4), np.float32)
    assert len(update_block_digests(empty, block_digests(empty), [])) == 0


def test_update_refuses_rows_out_of_range_and_wrong_lengths():
    arr = np.zeros((10, 4), np.float32)
    d = block_digests(arr)
    with pytest.raises(CkptsyncValueError, match=r"\[0, 10\)"):
        update_block_digests(arr, d, np.array([10]))
    with pytest.raises(CkptsyncValueError, match="expected"):
        update_block_digests(arr, d[:0], np.array([1]))


def test_variable_digest_is_the_hash_of_the_little_endian_vector():
    d = block_digests(np.arange(5000, dtype=np.float32))
    assert variable_digest(d) == xxhash.xxh3_64_hexdigest(d.astype("<u8").tobytes())
    assert variable_digest(d.astype(">u8")) == variable_digest(d)
    assert len(variable_digest(np.zeros(0, np.uint64))) == 16


@pytest.mark.parametrize("dtype", ["bool", "complex64", "float16", "int32"])
def test_block_digests_match_the_bytes_in_a_checkpoint_file(tmp_path, dtype):
    arr = _random(np.random.default_rng(3), (2000, 3), dtype)
    prefix = ckpt.write_checkpoint(str(tmp_path / "m"), {"v": arr})
    with h5py.File(prefix + ".h5", "r") as f:
        off = f["v"].id.get_offset()
    raw = (tmp_path / "m.h5").read_bytes()[off:off + arr.nbytes]
    per = block_rows(arr.shape, arr.dtype.itemsize)
    step = per * 3 * arr.dtype.itemsize
    want = [xxhash.xxh3_64_intdigest(raw[i:i + step]) for i in range(0, len(raw), step)]
    assert block_digests(arr).tolist() == want
