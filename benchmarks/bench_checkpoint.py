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
  ``read_direct`` of every dataset into arrays allocated once, before timing (the limit,
  unchecked), and vs TF1's own ``tf.compat.v1.train.Saver.restore`` of the same variables
  (count, sizes, float32, values) from its V2 bundle (which checks each tensor's crc32c),
  in a worker process with ``.goldens-venv/bin/python`` (``_tf_saver_worker.py``;
  TensorFlow is never a dependency; the column is skipped with a note when that venv is
  missing). The headline is restore time / TF1's (target <= 1.0x).
- async-save stall: how long ``Saver(async_save=True).save`` blocks the caller (the
  previous save finished) vs ``np.copy`` of all variables (the limit); and how much a
  busy step loop slows while the background write runs.

Ratios are throughput ratios (limit time / ckptsync time) for save and load, and time
ratios (ckptsync / limit) for the stall. The last line is the headline ratio.

    python benchmarks/bench_checkpoint.py [--size 512MiB] [--vars 64] [--repeats 5]
        [--only save,load,restore,async] [--dir D]

``--size 2GiB --only restore`` measures the restore alone (it holds the variables three
times over, plus TF1's worker with its own two copies: ~12 GiB at 2 GiB).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


HERE = Path(__file__).resolve().parent
TF_PYTHON = HERE.parent / ".goldens-venv" / "bin" / "python"
SECTIONS = ("save", "load", "restore", "async")


def _size_mib(text: str) -> int:
    """``"512MiB"``, ``"2GiB"``, ``"512"`` (MiB) -> MiB."""
    m = re.fullmatch(r"\s*(\d+)\s*(MiB|M|GiB|G)?\s*", text, re.IGNORECASE)
    if m is None:
        raise argparse.ArgumentTypeError(f"--size {text!r}: expected e.g. 512MiB or 2GiB")
    unit = (m.group(2) or "M").upper()
    return int(m.group(1)) * (1024 if unit.startswith("G") else 1)


class TFSaverWorker:
    """TF1's ``Saver.restore`` in a worker process (``_tf_saver_worker.py``), timed on
    request."""

    def __init__(self, n: int, count: int, work: str):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
        cmd = [str(TF_PYTHON), str(HERE / "_tf_saver_worker.py"), str(n), str(count), work]
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        self.save_s = float(self._read()["save_s"])

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the TF worker exited with code {self.proc.wait(60)}")
        return json.loads(line)

    def restore_s(self) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write("restore\n")
        self.proc.stdin.flush()
        return float(self._read()["restore_s"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(60)


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=_size_mib, default=None,
                    help="total size of the variables, e.g. 512MiB (default) or 2GiB")
    ap.add_argument("--mib", type=int, default=512, help="the same in MiB (older spelling)")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help=f"comma-separated sections to run, of {','.join(SECTIONS)}")
    ap.add_argument("--vars", type=int, default=64, help="number of float32 variables")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args()
    if args.size is not None:
        args.mib = args.size
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    if not only <= set(SECTIONS):
        ap.error(f"--only: unknown sections {sorted(only - set(SECTIONS))}")
    n = args.mib * 2**20 // 4 // args.vars
    rng = np.random.default_rng(0)
    values = {f"layer{i:02d}/w": rng.random(n, dtype=np.float32) for i in range(args.vars)}
    nbytes = sum(v.nbytes for v in values.values())
    work = tempfile.mkdtemp(prefix="bench_checkpoint-", dir=args.dir)
    try:
        results = _run(args, only, n, values, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _report(args, nbytes, *results)


def _run(args: argparse.Namespace, only: set[str], n: int, values: dict[str, np.ndarray],
         work: str) -> tuple[dict[str, list[float]], ...]:
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
    saves: dict[str, list[float]] = {}
    loads: dict[str, list[float]] = {}
    restores: dict[str, list[float]] = {}
    stalls: dict[str, list[float]] = {}

    def clean() -> None:
        for name in os.listdir(work):
            path = os.path.join(work, name)
            if os.path.isfile(path):
                os.unlink(path)

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

    if "save" in only:
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

    if "load" in only:
        np.savez(os.path.join(work, "arrays.npz"),
                 **{k.replace("/", "__"): v for k, v in values.items()})
        if st is not None:
            st.save_file(values, os.path.join(work, "model.safetensors"))
        for f in (load_ckptsync, load_read_direct, load_npz):  # warm the page cache
            f()
        load_cases = {"ckptsync read_checkpoint(verify)": load_ckptsync,
                      "h5py read_direct, unchecked (limit)": load_read_direct,
                      "np.load (peer)": load_npz}
        if st is not None:
            load_cases["safetensors load_file (peer)"] = load_safetensors
        loads = alternate(load_cases, args.repeats)

    # -- warm restore -----------------------------------------------------------------
    if "restore" in only:
        restores = _restores(args, n, values, saver, sess, prefix, work)

    # -- async-save stall -------------------------------------------------------------
    if "async" in only:
        stalls = _stalls(args, values, async_saver, sess, work, counter, clean)
    async_saver.close()
    sess.close()
    return saves, loads, restores, stalls


def _restores(args: argparse.Namespace, n: int, values: dict[str, np.ndarray], saver: Any,
              sess: Any, prefix: str, work: str) -> dict[str, list[float]]:
    """Warm restore: ckptsync's Saver.restore, h5py read_direct into preallocated arrays,
    TF1's Saver.restore (when the goldens venv is there), alternating."""
    preallocated = {k: np.empty(v.shape, v.dtype) for k, v in values.items()}

    def restore_ckptsync() -> float:
        return _timed(lambda: saver.restore(sess, prefix))

    def restore_read_direct() -> float:
        def run() -> None:
            with h5py.File(prefix + ".h5", "r", locking=False) as f:
                for k, arr in preallocated.items():
                    f[k].read_direct(arr)

        return _timed(run)

    cases: dict[str, Callable[[], float]] = {
        "ckptsync Saver.restore (verify)": restore_ckptsync,
        "h5py read_direct, preallocated": restore_read_direct}
    worker = None
    if TF_PYTHON.exists():
        tf_dir = os.path.join(work, "tf")
        os.makedirs(tf_dir, exist_ok=True)
        worker = TFSaverWorker(n, args.vars, tf_dir)
        cases["tf1 Saver.restore (crc32c)"] = worker.restore_s
    else:
        print(f"(no {TF_PYTHON}: TF1's Saver.restore column skipped)")
    restore_ckptsync()
    restore_read_direct()  # warm the page cache
    try:
        samples = alternate(cases, args.repeats)
    finally:
        if worker is not None:
            worker.close()
    got = sess.read_variables(list(values))
    assert all(np.array_equal(got[k], v) for k, v in values.items()), "restore not bit-exact"
    return samples


def _stalls(args: argparse.Namespace, values: dict[str, np.ndarray], async_saver: Any,
            sess: Any, work: str, counter: Any, clean: Callable[[], None]
            ) -> dict[str, list[float]]:
    """Async-save stall against np.copy, and a step loop's speed during the write."""
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
    print(f"{'first async save (cold buffer)':<34} {first * 1e3:10.3f} ms")
    print(f"step loop during background write: {busy / idle:.2f}x of idle throughput "
          f"(write took {write_s:.2f} s)")
    return stalls


def _report(args: argparse.Namespace, nbytes: int, saves: dict[str, list[float]],
            loads: dict[str, list[float]], restores: dict[str, list[float]],
            stalls: dict[str, list[float]]) -> None:
    mib = nbytes / 2**20
    print(f"{args.vars} float32 variables, {mib:.0f} MiB; medians of {args.repeats} "
          f"alternating repetitions (min, max)")
    for title, rows in (("durable save", saves), ("verified load, warm cache", loads),
                        ("warm restore", restores)):
        if rows:
            print(f"\n{title}")
            for k, v in rows.items():
                print(fmt_row(k, v, "s") + f"  {nbytes / summary(v)[0] / 2**30:.2f} GiB/s")
    if stalls:
        print("\nasync save")
        for k, v in stalls.items():
            print(fmt_row(k, v, "ms", 1e3))
    med = {k: summary(v)[0] for k, v in {**saves, **loads, **restores, **stalls}.items()}
    print()
    if restores:
        ratio = med["h5py read_direct, preallocated"] / med["ckptsync Saver.restore (verify)"]
        print(f"ratio warm restore / read_direct preallocated (throughput): {ratio:.2f}x")
    if stalls:
        ratio = med["ckptsync async save() blocks"] / med["np.copy of all variables (limit)"]
        print(f"ratio async stall / np.copy: {ratio:.2f}x (target <= 1.5x)")
    if loads:
        ratio = (med["h5py read_direct, unchecked (limit)"]
                 / med["ckptsync read_checkpoint(verify)"])
        print(f"ratio verified load / read_direct (throughput): {ratio:.2f}x (target >= 0.7x)")
    if saves:
        ratio = med["tofile + fsync (limit)"] / med["ckptsync Saver.save (durable)"]
        print(f"ratio durable save / tofile+fsync (throughput): {ratio:.2f}x (target >= 0.9x)")
    if "tf1 Saver.restore (crc32c)" in med:
        ratio = med["ckptsync Saver.restore (verify)"] / med["tf1 Saver.restore (crc32c)"]
        print(f"ratio warm restore / TF1 Saver.restore (time): {ratio:.2f}x (target <= 1.0x)")


if __name__ == "__main__":
    main()
