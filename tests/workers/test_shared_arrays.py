"""The shared-array layout: built once by the owner, mapped once by the other side."""

from __future__ import annotations

import numpy as np
import pytest

from ckptsync.workers.shared_arrays import ALIGN_BYTES, ArrayLayout, SharedBuffer


def test_arrays_round_trip_through_a_mapped_buffer_read_only() -> None:
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.int64(7),
              "empty": np.zeros((0, 4), np.float64), "b": np.array([True, False])}
    layout = ArrayLayout.of_arrays(arrays)
    assert [s.offset % ALIGN_BYTES for s in layout.specs] == [0] * 4
    assert layout.size_bytes % ALIGN_BYTES == 0
    buffer = SharedBuffer(layout.size_bytes, "test")
    try:
        assert buffer.mm is not None
        for dst, src in zip(layout.views(buffer.mm), arrays.values()):
            np.copyto(dst, src)
        fd = buffer.fd
        assert fd is not None
        other = ArrayLayout.from_doc(layout.to_doc(), layout.size_bytes)
        assert other == layout
        mm = SharedBuffer.map(fd, other.size_bytes)
        got = dict(zip((s.name for s in other.specs), other.views(mm)))
        for k, v in arrays.items():
            np.testing.assert_array_equal(got[k], v)
            assert got[k].dtype == np.asarray(v).dtype and not got[k].flags.writeable
        with pytest.raises(ValueError):
            got["w"][0, 0] = 1
        del got
        mm.close()
    finally:
        buffer.close()
        buffer.close()  # idempotent


def test_fits_takes_the_same_keys_dtypes_and_shapes_only() -> None:
    layout = ArrayLayout.of_arrays({"a": np.zeros(3, np.float32), "b": np.int64(1)})
    assert layout.fits({"a": np.ones(3, np.float32), "b": np.int64(5)})
    assert not layout.fits({"a": np.ones(3, np.float64), "b": np.int64(5)})
    assert not layout.fits({"b": np.int64(5), "a": np.ones(3, np.float32)})
    assert not layout.fits({"a": [0.0, 0.0, 0.0], "b": 5})
    assert not layout.fits({"a": np.ones(3, np.float32)})


def test_an_empty_layout_needs_no_buffer() -> None:
    layout = ArrayLayout.of([("z", np.dtype(np.float32), (0,))])
    assert layout.size_bytes == 0
    (z,) = layout.views(None)
    assert z.shape == (0,) and z.dtype == np.float32
