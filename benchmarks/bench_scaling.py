"""Save/load scaling in the variable count (BENCHMARKS.md row "save/load scaling").

For 1,000 / 10,000 / 100,000 scalars (and 1,000 / 10,000 float32[64] arrays), in one
process run, each ckptsync figure beside plain h5py on the same data and disk:

- save: ``write_checkpoint`` (durable: temp file, fsync, rename, fsync dir), the first
  save of the layout and a second one (a trainer's every later save); reference: h5py
  ``create_dataset(data=...)`` per variable, libver v108, then close + fsync.
- open: ``CheckpointReader`` (root attributes and the verified index; shapes and dtypes
  listed without touching a dataset).
- load: ``read_checkpoint(verify=True)``, first and second file of the layout (a
  server's every later load); reference: h5py, every dataset read into a fresh array.

The first save of a layout of up to 1,024 variables includes learning its metadata
image (one more HDF5 build); larger layouts are packed (format 2, one dataset for the
small variables) and have no image. With ``--saver-sizes``, also a graph of that many
scalar variables: ``Saver.save`` and ``Saver.restore`` into a fresh session, first and
second time. Target: 100k variables save, open and restore in < 2 s, first time too.

    python benchmarks/bench_scaling.py [--sizes 1000,10000,100000] [--array-sizes 1000,10000]
        [--saver-sizes 100000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable

import h5py
import numpy as np

from ckptsync.checkpoint import CheckpointReader, read_checkpoint, write_checkpoint

try:
    from benchmarks._common import fsync_file as _fsync
except ImportError:  # run as a script
    from _common import fsync_file as _fsync  # type: ignore[no-redef]


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _h5py_write(path: str, arrays: dict[str, np.ndarray]) -> None:
    with h5py.File(path, "w", libver=("v108", "v108"), locking=False) as f:
        for k, v in arrays.items():
            f.create_dataset(k, data=v)
    _fsync(path)


def _h5py_read(path: str) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}

    def read(name: str, obj: object) -> None:
        if isinstance(obj, h5py.Dataset):
            arr = np.empty(obj.shape, obj.dtype)
            if arr.size:
                obj.read_direct(arr)
            out[name] = arr

    with h5py.File(path, "r", locking=False) as f:
        f.visititems(read)
    return out


def _row(work: str, label: str, arrays: dict[str, np.ndarray], reference: bool = True) -> None:
    n = len(arrays)
    prefix = os.path.join(work, f"{label}-{n}")
    s1 = _timed(lambda: write_checkpoint(prefix + "-1", arrays, 1))
    s2 = _timed(lambda: write_checkpoint(prefix + "-2", arrays, 2))

    def open_close() -> None:
        CheckpointReader(prefix + "-1").close()

    op = _timed(open_close)
    l1 = _timed(lambda: read_checkpoint(prefix + "-1"))
    l2 = _timed(lambda: read_checkpoint(prefix + "-2"))
    hw = _timed(lambda: _h5py_write(prefix + "-h5py.h5", arrays)) if reference else None
    hr = _timed(lambda: _h5py_read(prefix + "-h5py.h5")) if reference else None
    with CheckpointReader(prefix + "-1") as r:
        mark = f"  (format {r.format_version})"

    def ref(t: float | None) -> str:
        return "      -" if t is None else f"{t:7.2f}"

    print(f"{label:<14} {n:>7}  save {s1:7.2f} / {s2:6.2f} s   h5py {ref(hw)} s  |  open "
          f"{op:6.3f} s  |  load {l1:7.2f} / {l2:6.2f} s   h5py {ref(hr)} s{mark}", flush=True)
    for name in os.listdir(work):
        os.unlink(os.path.join(work, name))


def _saver_row(work: str, n: int) -> None:
    """``Saver.save`` / ``Saver.restore`` of a graph of ``n`` float32 scalar variables."""
    import ckptsync as cs

    graph = cs.Graph()
    t = time.perf_counter()
    with graph.as_default():
        for i in range(n):
            cs.Variable(np.float32(i), name=f"v{i:06d}")
        saver = cs.train.Saver(max_to_keep=None)
    build = time.perf_counter() - t
    sess = cs.Session(graph=graph)
    sess.write_variables({f"v{i:06d}": np.float32(i) for i in range(n)})
    prefix = os.path.join(work, "model.ckpt")
    s1 = _timed(lambda: saver.save(sess, prefix, global_step=1))
    s2 = _timed(lambda: saver.save(sess, prefix, global_step=2))
    fresh = cs.Session(graph=graph)
    r1 = _timed(lambda: saver.restore(fresh, prefix + "-1"))
    r2 = _timed(lambda: saver.restore(fresh, prefix + "-2"))
    assert float(fresh.read_variables(["v000007"])["v000007"]) == 7.0
    print(f"Saver (graph)  {n:>7}  save {s1:7.2f} / {s2:6.2f} s  |  restore {r1:7.2f} / "
          f"{r2:6.2f} s  |  (graph build {build:.1f} s)", flush=True)
    for name in os.listdir(work):
        os.unlink(os.path.join(work, name))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000", help="scalar variable counts")
    ap.add_argument("--array-sizes", default="1000,10000",
                    help="float32[64] variable counts ('' for none)")
    ap.add_argument("--saver-sizes", default="",
                    help="scalar variable counts of a graph saved and restored by Saver")
    ap.add_argument("--reference-max", type=int, default=20000,
                    help="skip the h5py reference above this many variables (at 100,000 "
                         "it takes ~4 minutes: 88 s to write, 160 s to read)")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench_scaling-", dir=args.dir)
    print("variables       count  save first / again     ref      |  open      |  "
          "load first / again     ref")
    try:
        for n in [int(x) for x in args.sizes.split(",") if x]:
            _row(work, "scalars", {f"v{i:06d}": np.float32(i) for i in range(n)},
                 n <= args.reference_max)
        rng = np.random.default_rng(0)
        for n in [int(x) for x in args.array_sizes.split(",") if x]:
            _row(work, "float32[64]",
                 {f"layer{i // 100:04d}/w{i % 100:02d}": rng.random(64, dtype=np.float32)
                  for i in range(n)}, n <= args.reference_max)
        for n in [int(x) for x in args.saver_sizes.split(",") if x]:
            _saver_row(work, n)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
