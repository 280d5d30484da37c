"""The copy-on-write apply alone (``bench_incremental.py --only apply``): where a delta's
row changes are applied, in the read process (``ManagerOptions.apply_in_subprocess``, the
default) or on the load thread (the reference path), with this process's interpreter
idle and with a thread keeping it busy, as a server's event loop under load does.

The CTR trainer writes ``--apply-checkpoints`` incremental checkpoints (a checkpoint
every ``--save-every`` steps) into its own directory; then, round after round and mode
after mode, a fresh ``CopyOnWrite`` with a real ``CheckpointReadProcess`` loads the
chain's full checkpoint and applies every delta after it, each timed (``cow.load``: the
read, the apply, the digest check), and every version compared bit for bit with a full
read of its checkpoint once per mode.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from typing import Any

import numpy as np

import ckptsync as cs
from ckptsync import checkpoint as ckpt
from ckptsync.data import BatchIterator
from ckptsync.model_spec import load_build_net
from ckptsync.serving import GraphServable
from ckptsync.serving._cow import CopyOnWrite  # the seam measured
from ckptsync.serving.loader import load_snapshot
from ckptsync.serving.source import AspiredVersion
from ckptsync.workers import CheckpointReadProcess

MODES = ("read process", "load thread")


class Busy(threading.Thread):
    """Holds this process's interpreter lock as a busy event loop does: small numpy
    operations back to back (the lock is taken from it every switch interval)."""

    def __init__(self) -> None:
        super().__init__(name="busy", daemon=True)
        self.stop = threading.Event()

    def run(self) -> None:
        a = np.ones(64, np.float32)
        while not self.stop.is_set():
            for _ in range(100):
                a = a * np.float32(1.0) + np.float32(0.0)


def write_chain(model: str, data: Any, batch: int, every: int, n: int, directory: str) -> list[str]:
    """``n`` incremental checkpoints of ``model``; the chain of the last one."""
    graph = cs.Graph()
    with graph.as_default():
        cs.set_random_seed(0)
        spec = load_build_net(model)(graph, "/cpu:0", cs.ModeKeys.TRAIN)
        step = cs.train.get_global_step()
        saver = cs.train.Saver(max_to_keep=n + 1, incremental=True,
                               full_checkpoint_every_n=n + 1)
        init = cs.global_variables_initializer()
    feeds = {**spec.inputs, **spec.labels}
    batches = BatchIterator(data, batch, seed=0)
    with cs.Session(graph=graph) as sess:
        sess.run(init)
        path = None
        for _ in range(n):
            for _ in range(every):
                b = next(batches)
                sess.run(spec.train_op, {feeds[k]: v for k, v in b.items()})
            path = saver.save(sess, os.path.join(directory, "model.ckpt"), global_step=step)
    return ckpt.checkpoint_chain(path)


def follow(cow: CopyOnWrite, chain: list[str], check: bool) -> list[float]:
    """The chain's full load, then each delta applied; seconds per delta."""
    snap = cow.load(AspiredVersion(0, chain[0]), None)
    cow.served(snap)
    times = []
    for i, prefix in enumerate(chain[1:], 1):
        t = time.perf_counter()
        new = cow.load(AspiredVersion(i, prefix), snap)
        times.append(time.perf_counter() - t)
        if new.load_kind != "copy_on_write":
            raise RuntimeError(f"{prefix}: loaded {new.load_kind}, not copy-on-write")
        cow.served(new)
        snap = new
        if check:
            want = ckpt.read_checkpoint(prefix, list(snap.params))
            for name, value in snap.params.items():
                if np.asarray(value).tobytes() != want[name].tobytes():
                    raise RuntimeError(f"{prefix}: {name} differs from a full read")
    return times


def apply_section(args: Any, work: str, model: str, data: Any) -> dict[str, float]:
    directory = os.path.join(work, "apply")
    os.makedirs(directory, exist_ok=True)
    chain = write_chain(model, data, args.batch, args.save_every, args.apply_checkpoints,
                        directory)
    servable = GraphServable(load_build_net(model))
    sys.setswitchinterval(0.0001)  # as infer serve
    times: dict[tuple[str, str], list[float]] = {}
    with CheckpointReadProcess(timeout_s=120.0) as reader:
        for r in range(args.rounds):
            for busy in (False, True):
                for mode in (MODES if r % 2 == 0 else MODES[::-1]):
                    cow = CopyOnWrite(servable, load=lambda *a, **k: load_snapshot(*a, **k))
                    cow.use_reader(reader, apply=mode == MODES[0])
                    load = Busy() if busy else None
                    if load is not None:
                        load.start()
                    try:
                        got = follow(cow, chain, check=r == 0 and not busy)
                    finally:
                        if load is not None:
                            load.stop.set()
                            load.join(10)
                    times.setdefault((mode, "busy" if busy else "idle"), []).extend(got)
    print(f"\ncopy-on-write apply, CTR deltas ({len(chain) - 1} per round x {args.rounds} "
          "rounds, each bit-equal to a full read), median ms (p90):")
    out = {}
    for (mode, state), ts in sorted(times.items()):
        ms = sorted(1e3 * t for t in ts)
        out[f"{mode} {state}"] = statistics.median(ms)
        print(f"  {mode:<13} {state:<5} {statistics.median(ms):6.1f} "
              f"({ms[int(0.9 * (len(ms) - 1))]:.1f})")
    for state in ("idle", "busy"):
        ratio = out[f"{MODES[1]} {state}"] / out[f"{MODES[0]} {state}"]
        print(f"  {state}: the read process applies {ratio:.2f}x as fast as the load thread")
    return out
