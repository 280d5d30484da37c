"""Issue #16 item 8: saving and loading cost linear time in the variable count.

16,000 scalars once took 31.6 s to write and 34.7 s to load (the metadata image searched
the whole image once per variable). The property tested here: building an image (of a
format-1 layout) does a constant number of whole-image searches. Larger layouts are
packed (``test_pack.py``: a constant number of HDF5 datasets). The times themselves are
measured by ``benchmarks/bench_scaling.py`` (no timing assertion in the suite).
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np

from ckptsync.checkpoint import _image, _pack, read_checkpoint, write_checkpoint


def _scalars(n: int) -> dict[str, np.ndarray]:
    return {f"v{i:06d}": np.float32(i) for i in range(n)}


def test_an_image_build_searches_the_image_a_constant_number_of_times(tmp_path: Path) -> None:
    arrays = _scalars(3000)
    with mock.patch.object(_image, "_locate", wraps=_image._locate) as locate, \
            mock.patch.dict(_image._cache, clear=True), \
            mock.patch.object(_pack, "PACK_MIN_VARIABLES", 10**9):  # a format-1 layout
        write_checkpoint(tmp_path / "m-1", arrays, 1, {"a": 1})  # builds the image
        assert len(_image._cache) == 1 and next(iter(_image._cache.values())) is not None
    # Root values only (time, metadata, step, index hash), twice for the two builds'
    # sentinel sets at most; not once per variable.
    assert locate.call_count <= 8, locate.call_count
    with mock.patch.object(_image, "image_for", return_value=None):  # plain HDF5
        write_checkpoint(tmp_path / "h-1", arrays, 1, {"a": 1})
    got = read_checkpoint(tmp_path / "m-1")
    assert [float(got[k]) for k in sorted(arrays)] == [float(v) for _, v in sorted(arrays.items())]
