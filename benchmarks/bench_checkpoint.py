"""Checkpoint speed: durable save, verified load, async-save stall.

512 MiB in 64 float32 variables (``--mib`` to shrink), one process run, each ckptsync
case alternating with its references on the same data:

- durable save: ``Saver.save`` (temp file, fsync, rename, fsync dir, state file) vs
  ``ndarray.tofile`` of the same bytes into one file + fsync (the limit); peers
  ``np.savez`` + fsync and, if importable, safetensors ``save_file`` + fsync.
- verified load, warm cache: ``read_checkpoint(verify=True)`` vs h5py ``read_direct`` of
  every dataset into fresh arrays, no checks (the limit); peers ``np.load`` (all arrays)
  and, if importable, safetensors ``load_file``.
- warm restore: ``Saver.restore`` (read, verify, hand to the session) vs h5py
  ``read_direct`` of every dataset into arrays allocated once, before timing (the limit).
- async-save stall: how long ``Saver(async_save=True).save`` blocks the caller (the
  previous save finished) vs ``np.copy`` of all variables (the limit); and how much a
  busy step loop slows while the background write runs.

Ratios are throughput ratios (limit time / ckptsync time) for save and load, and time
ratios (ckptsync / limit) for the stall. The last line is the headline ratio.

    python benchmarks/bench_checkpoint.py [--mib 512] [--vars 64] [--repeats 5] [--dir D]
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

import ckptsync as cs
from ckptsync.checkpoint import read_checkpoint

try:
    from benchmarks._common import alternate, fmt_row, summary
    from benchmarks._common import fsync_file as _fsync
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from _common import alternate, fmt_row, summary  # type: ignore[no-redef]
    from _common import fsync_file as _fsync  # type: ignore[no-redef]

try:  # optional peer
    import safetensors.numpy as st
except ImportError:
    st = None


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=512, help="total size of the variables")
    ap.add_argument("--vars", type=int, default=64, help="number of float32 variables")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args()
    n = args.mib * 2**20 // 4 // args.vars
    rng = np.random.default_rng(0)
    values = {f"layer{i:02d}/w": rng.random(n, dtype=np.float32) for i in range(args.vars)}
    nbytes = sum(v.nbytes for v in values.values())
    work = tempfile.mkdtemp(prefix="bench_checkpoint-", dir=args.dir)

    g = cs.Graph()
    with g.as_default():
        variables = [cs.get_variable(k, [n], initializer=cs.zeros_initializer()) for k in values]
        init = cs.global_variables_initializer()
    sess = cs.Session(graph=g)
    sess.run(init)
    sess.write_variables({v.op.name: values[v.op.name] for v in variables})
    with g.as_default():
        saver = cs.train.Saver(max_to_keep=None)
        async_saver = cs.train.Saver(max_to_keep=None, async_save=True)
    counter = iter(range(1_000_000))

    def clean() -> None:
        for name in os.listdir(work):
            os.unlink(os.path.join(work, name))

    # -- durable save -----------------------------------------------------------------
    def save_ckptsync() -> float:
        clean()
        return _timed(lambda: saver.save(sess, os.path.join(work, "model.ckpt"),
                                         global_step=next(counter)))

    def save_tofile() -> float:
        clean()
        path = os.path.join(work, "raw.bin")

        def run() -> None:
            with open(path, "wb") as f:
                for v in values.values():
                    v.tofile(f)
                f.flush()
                os.fsync(f.fileno())

        return _timed(run)

    def save_npz() -> float:
        clean()
        path = os.path.join(work, "arrays.npz")

        def run() -> None:
            np.savez(path, **{k.replace("/", "__"): v for k, v in values.items()})
            _fsync(path)

        return _timed(run)

    def save_safetensors() -> float:
        clean()
        path = os.path.join(work, "model.safetensors")

        def run() -> None:
            st.save_file(values, path)
            _fsync(path)

        return _timed(run)

    save_cases = {"ckptsync Saver.save (durable)": save_ckptsync,
                  "tofile + fsync (limit)": save_tofile,
                  "np.savez + fsync (peer)": save_npz}
    if st is not None:
        save_cases["safetensors save_file + fsync (peer)"] = save_safetensors
    saves = alternate(save_cases, args.repeats)

    # -- verified load, warm cache ----------------------------------------------------
    clean()
    prefix = saver.save(sess, os.path.join(work, "model.ckpt"), global_step=0)
    assert prefix is not None
    np.savez(os.path.join(work, "arrays.npz"), **{k.replace("/", "__"): v for k, v in values.items()})
    if st is not None:
        st.save_file(values, os.path.join(work, "model.safetensors"))

    def load_ckptsync() -> float:
        return _timed(lambda: read_checkpoint(prefix, verify=True))

    def load_read_direct() -> float:
        def run() -> dict[str, np.ndarray]:
            out = {}
            with h5py.File(prefix + ".h5", "r", locking=False) as f:
                for k in values:
                    ds = f[k]
                    arr = np.empty(ds.shape, ds.dtype)
                    ds.read_direct(arr)
                    out[k] = arr
            return out

        return _timed(run)

    def load_npz() -> float:
        def run() -> dict[str, np.ndarray]:
            with np.load(os.path.join(work, "arrays.npz")) as z:
                return {k: z[k] for k in z.files}

        return _timed(run)

    def load_safetensors() -> float:
        return _timed(lambda: st.load_file(os.path.join(work, "model.safetensors")))

    preallocated = {k: np.empty(v.shape, v.dtype) for k, v in values.items()}

    def restore_ckptsync() -> float:
        return _timed(lambda: saver.restore(sess, prefix))

    def restore_read_direct() -> float:
        def run() -> None:
            with h5py.File(prefix + ".h5", "r", locking=False) as f:
                for k, arr in preallocated.items():
                    f[k].read_direct(arr)

        return _timed(run)

    for f in (load_ckptsync, load_read_direct, load_npz):  # warm the page cache
        f()
    load_cases = {"ckptsync read_checkpoint(verify)": load_ckptsync,
                  "h5py read_direct, unchecked (limit)": load_read_direct,
                  "np.load (peer)": load_npz}
    if st is not None:
        load_cases["safetensors load_file (peer)"] = load_safetensors
    loads = alternate(load_cases, args.repeats)
    restores = alternate({"ckptsync Saver.restore (verify)": restore_ckptsync,
                          "h5py read_direct, preallocated": restore_read_direct},
                         args.repeats)

    # -- async-save stall -------------------------------------------------------------
    clean()
    first = _timed(lambda: async_saver.save(sess, os.path.join(work, "async.ckpt"),
                                            global_step=next(counter)))
    async_saver.wait_until_finished()

    def stall_async() -> float:
        async_saver.wait_until_finished()
        clean()
        return _timed(lambda: async_saver.save(sess, os.path.join(work, "async.ckpt"),
                                               global_step=next(counter)))

    def stall_copy() -> float:
        return _timed(lambda: [np.copy(v) for v in values.values()])

    stalls = alternate({"ckptsync async save() blocks": stall_async,
                        "np.copy of all variables (limit)": stall_copy}, args.repeats)

    # A busy step loop (small numpy work, as a training step) while the writer works.
    small = np.ones((64, 64), np.float32)

    def steps_per_s(duration_s: float) -> float:
        count, end = 0, time.perf_counter() + duration_s
        while time.perf_counter() < end:
            small @ small
            count += 1
        return count / duration_s

    async_saver.wait_until_finished()
    idle = steps_per_s(0.3)
    clean()
    t0 = time.perf_counter()
    async_saver.save(sess, os.path.join(work, "async.ckpt"), global_step=next(counter))
    busy = steps_per_s(0.3)
    async_saver.wait_until_finished()
    write_s = time.perf_counter() - t0
    async_saver.close()
    sess.close()
    shutil.rmtree(work, ignore_errors=True)

    # -- report -------------------------------------------------------------------------
    mib = nbytes / 2**20
    print(f"{args.vars} float32 variables, {mib:.0f} MiB; medians of {args.repeats} "
          f"alternating repetitions (min, max)")
    print("\ndurable save")
    for k, v in saves.items():
        print(fmt_row(k, v, "s") + f"  {nbytes / summary(v)[0] / 2**30:.2f} GiB/s")
    print("\nverified load, warm cache")
    for k, v in loads.items():
        print(fmt_row(k, v, "s") + f"  {nbytes / summary(v)[0] / 2**30:.2f} GiB/s")
    print("\nwarm restore")
    for k, v in restores.items():
        print(fmt_row(k, v, "s") + f"  {nbytes / summary(v)[0] / 2**30:.2f} GiB/s")
    print("\nasync save")
    for k, v in stalls.items():
        print(fmt_row(k, v, "ms", 1e3))
    print(f"{'first async save (cold buffer)':<34} {first * 1e3:10.3f} ms")
    print(f"step loop during background write: {busy / idle:.2f}x of idle throughput "
          f"(write took {write_s:.2f} s)")
    med = {k: summary(v)[0] for k, v in {**saves, **loads, **restores, **stalls}.items()}
    save_ratio = med["tofile + fsync (limit)"] / med["ckptsync Saver.save (durable)"]
    load_ratio = (med["h5py read_direct, unchecked (limit)"]
                  / med["ckptsync read_checkpoint(verify)"])
    stall_ratio = med["ckptsync async save() blocks"] / med["np.copy of all variables (limit)"]
    print()
    restore_ratio = (med["h5py read_direct, preallocated"]
                     / med["ckptsync Saver.restore (verify)"])
    print(f"ratio warm restore / read_direct preallocated (throughput): {restore_ratio:.2f}x")
    print(f"ratio async stall / np.copy: {stall_ratio:.2f}x (target <= 1.5x)")
    print(f"ratio verified load / read_direct (throughput): {load_ratio:.2f}x (target >= 0.7x)")
    print(f"ratio durable save / tofile+fsync (throughput): {save_ratio:.2f}x (target >= 0.9x)")


if __name__ == "__main__":
    main()
