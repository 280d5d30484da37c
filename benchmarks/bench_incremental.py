"""Incremental vs full sync, side by side in one run: the CTR model (a 1,000,000 x 64
float32 table, 256 MB, ``examples/ctr_embedding.py`` on ``synthetic-ctr``) and the dense
digits MLP (``examples/digits_mlp.py``, every variable changes every step).

One training session (this process) and two ``Saver`` objects on it, one
``Saver(incremental=True, full_checkpoint_every_n=16)`` and one plain (full) ``Saver``,
each writing its own directory, each followed by its own real ``infer serve`` process.
Rounds alternate a block of incremental and a block of full checkpoints, a checkpoint
every ``--save-every`` (10) steps at batch 256; each block starts with one save that is
not measured (it takes up the changes made while the other block ran). Per checkpoint:

- **bytes**: the size of the checkpoint's data file (``<prefix>.h5``; a delta's own file).
- **trainer stall**: how long ``Saver.save`` blocks the step loop (sync saves; with
  ``--async-save``, the async path).
- **publish -> served**: from the state file's mtime once ``save`` returned (the file
  that makes the checkpoint visible; a coarse kernel clock, so it errs late, never
  early) to the first answer of a one-row predict carrying the new version, predicting
  back to back on one keep-alive connection from a thread started just before ``save``
  (so an answer given while ``save`` still deletes the files retention let go counts;
  lockstep: the next steps start once it is served).
- **server memory**: anonymous + shared-memory PSS of the server and its helper
  processes (``/proc/PID/smaps_rollup``, a snapshot's pages counted once), sampled every
  5 ms during each block; its base is measured before the server loaded anything, so a
  full reload that holds two snapshots shows as base + 2x params. The server process's
  own ``VmHWM`` is printed beside it.
- **steady state**: the rounds' servers also apply each block's first, unmeasured save,
  whose delta holds what changed while the other mode ran (~30x a steady checkpoint's
  rows; their block pools keep the extra blocks). So after the rounds a fresh server
  follows the incremental trainer for ``--swaps`` checkpoints, as a production server
  would: its peak memory (against the same base) and publish -> served are the headline,
  and **growth** is its PSS after swap 10 vs after the last.

The dense section alternates blocks of incremental and full saves of the digits MLP
(Adam, batch 64, no server) and compares stall and bytes. Where the ``Saver`` on this
checkout has no ``incremental`` argument yet, the incremental columns say so and only the
full path runs.

    python benchmarks/bench_incremental.py [--rounds 3] [--per-round 3] [--swaps 60]
        [--save-every 10] [--batch 256] [--only ctr,dense,apply] [--apply-checkpoints 12]
        [--async-save] [--dir D]
        [--keep] [--server-log-level info]

The last line is the headline: incremental vs full for the CTR model.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CTR_MODEL = os.path.join(ROOT, "examples", "ctr_embedding.py")
MLP_MODEL = os.path.join(ROOT, "examples", "digits_mlp.py")
sys.path.insert(0, HERE)

from _cow_apply import apply_section  # noqa: E402
from _serving_tools import PeakSampler, Probe, request_bytes, tree_pss_kib  # noqa: E402

import ckptsync as cs  # noqa: E402
from ckptsync.data import BatchIterator, load_dataset, load_digits  # noqa: E402
from ckptsync.model_spec import load_build_net  # noqa: E402

MODES = ("incremental", "full")
SERVER_LOG_LEVEL = "warning"  # --server-log-level


def incremental_available() -> bool:
    return "incremental" in inspect.signature(cs.train.Saver).parameters


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round((len(s) - 1) * q)))]


def vm_hwm_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def reset_hwm(pid: int) -> None:
    """Resets ``VmHWM`` of ``pid`` to its current RSS (``clear_refs`` 5)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


@dataclass
class Samples:
    """Per-checkpoint figures of one mode."""

    bytes: list[int] = field(default_factory=list)
    stall_s: list[float] = field(default_factory=list)
    lag_s: list[float] = field(default_factory=list)
    peak_kib: list[int] = field(default_factory=list)
    hwm_kib: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    fulls: int = 0  # measured checkpoints that are full (an incremental Saver's every 16th)
    full_lag_s: list[float] = field(default_factory=list)  # publish -> served of those


class Server:
    """``infer serve`` of ``model`` over ``directory`` with a one-row probe; its log goes
    to ``WORK/NAME.log`` (never a pipe nobody reads: hundreds of swaps could fill it)."""

    def __init__(self, work: str, name: str, model: str, directory: str, body: dict):
        port_file = os.path.join(work, f"{name}.port")
        self.log_path = os.path.join(work, f"{name}.log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ckptsync.cli.infer", "serve", "--grpc-port", "0", "--model", model,
             "--checkpoint-dir", directory, "--port", "0", "--port-file", port_file,
             "--log-level", SERVER_LOG_LEVEL, "--model-name", "m"],
            stdout=subprocess.DEVNULL, stderr=self._log)
        deadline = time.monotonic() + 120
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"infer serve did not start: {self.log_tail()}")
            time.sleep(0.02)
        port = int(open(port_file).read())
        self.probe = Probe(port, request_bytes("/v1/models/m:predict",
                                               json.dumps(body).encode()))
        status, _ = self.probe.predict()  # 503: no checkpoint yet
        time.sleep(1.0)  # its helper processes have started
        self.base_kib = tree_pss_kib(self.proc.pid)

    def wait_version(self, version: int, timeout_s: float = 120.0) -> float:
        """Predicts back to back until an answer carries ``version``; its wall time."""
        deadline = time.monotonic() + timeout_s
        while True:
            status, v = self.probe.predict()
            if status == 200 and v is not None and v >= version:
                return time.time()
            if time.monotonic() > deadline:
                raise RuntimeError(f"version {version} not served in {timeout_s} s (last {v}): "
                               f"{self.log_tail()}")

    def watch_version(self, version: int, timeout_s: float = 120.0) -> Any:
        """:meth:`wait_version` on a thread started now, so that an answer given while
        the trainer is still in ``save`` (deleting the files retention let go, after the
        state file named the new checkpoint) counts; the returned call waits for it and
        gives its wall time."""
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["t"] = self.wait_version(version, timeout_s)
            except Exception as e:  # re-raised by the caller
                box["e"] = e

        thread = threading.Thread(target=run, name="probe", daemon=True)
        thread.start()

        def seen() -> float:
            thread.join(timeout_s + 10)
            if "e" in box or "t" not in box:
                raise box.get("e", RuntimeError(f"version {version}: the probe hung"))
            return float(box["t"])
        return seen

    def pss_kib(self) -> int:
        return tree_pss_kib(self.proc.pid)

    def log_tail(self) -> str:
        with open(self.log_path) as f:
            return f.read()[-2000:]

    def close(self) -> None:
        if hasattr(self, "probe"):
            self.probe.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


class Trainer:
    """A model file's TRAIN graph in one session, a batch iterator, and one Saver per
    mode (each on its own directory)."""

    def __init__(self, model: str, data: Any, batch: int, work: str, name: str,
                 async_save: bool, modes: tuple[str, ...]):
        self.graph = cs.Graph()
        build_net = load_build_net(model)
        with self.graph.as_default():
            cs.set_random_seed(0)
            self.spec = build_net(self.graph, "/cpu:0", cs.ModeKeys.TRAIN)
            self.step_t = cs.train.get_global_step()
            self.savers: dict[str, Any] = {}
            for mode in modes:
                kw = {"incremental": True, "full_checkpoint_every_n": 16} \
                    if mode == "incremental" else {}
                self.savers[mode] = cs.train.Saver(max_to_keep=5, async_save=async_save, **kw)
            init = cs.global_variables_initializer()
        self.async_save = async_save
        self.sess = cs.Session(graph=self.graph)
        self.sess.run(init)
        self.feeds = {**self.spec.inputs, **self.spec.labels}
        self.batches = BatchIterator(data, batch, seed=0)
        self.dirs = {m: os.path.join(work, f"{name}-{m}") for m in modes}
        for d in self.dirs.values():
            os.makedirs(d, exist_ok=True)
        self.step = 0
        self.id_keys = [k for k in ("user_id", "item_id") if k in self.feeds]

    def train(self, steps: int) -> int:
        """Runs ``steps`` steps; the distinct embedding rows their batches looked up."""
        ids = []
        for _ in range(steps):
            b = next(self.batches)
            ids.extend(b[k] for k in self.id_keys)
            self.sess.run(self.spec.train_op, {self.feeds[k]: v for k, v in b.items()})
        self.step += steps
        return len(np.unique(np.concatenate(ids))) if ids else 0

    def save(self, mode: str) -> tuple[float, int, float, bool]:
        """(stall_s, bytes, published wall time, whether it is a full checkpoint) of one
        save."""
        saver = self.savers[mode]
        prefix = os.path.join(self.dirs[mode], "model.ckpt")
        t = time.perf_counter()
        path = saver.save(self.sess, prefix, global_step=self.step_t)
        stall = time.perf_counter() - t
        if self.async_save:  # on disk and named by the state file (not part of the stall)
            saver.wait_until_finished()
        published = os.stat(os.path.join(self.dirs[mode], "checkpoint")).st_mtime_ns / 1e9
        chain = getattr(cs.checkpoint, "checkpoint_chain", None)
        full = chain is None or len(chain(path)) == 1
        return stall, os.path.getsize(path + ".h5"), published, full

    def close(self) -> None:
        for s in self.savers.values():
            if hasattr(s, "close"):
                s.close()
        self.sess.close()


def block(tr: Trainer, mode: str, server: Server | None, n: int, every: int,
          out: Samples) -> None:
    """One unmeasured save, then ``n`` measured checkpoints every ``every`` steps."""
    tr.train(every)
    tr.save(mode)
    if server is not None:
        server.wait_version(tr.step)
        reset_hwm(server.proc.pid)
        sampler = PeakSampler(server.proc.pid, interval_s=0.005)
        sampler.start()
    for _ in range(n):
        out.rows.append(tr.train(every))
        seen = None if server is None else server.watch_version(tr.step)
        stall, size, published, full = tr.save(mode)
        out.fulls += full
        out.stall_s.append(stall)
        out.bytes.append(size)
        if seen is not None:
            out.lag_s.append(seen() - published)
            if full:
                out.full_lag_s.append(out.lag_s[-1])
    if server is not None:
        out.peak_kib.append(sampler.finish())
        out.hwm_kib.append(vm_hwm_kib(server.proc.pid))


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def ctr_section(args: argparse.Namespace, work: str, modes: tuple[str, ...]
                ) -> tuple[dict[str, Samples], dict[str, Any]]:
    data = load_dataset("synthetic-ctr", ("user_id", "item_id"), ("click",))
    tr = Trainer(CTR_MODEL, data.train, args.batch, work, "ctr", args.async_save, modes)
    body = {"inputs": {"user_id": [int(data.test["user_id"][0])],
                       "item_id": [int(data.test["item_id"][0])]}}
    params_bytes = int(sum(int(np.prod(v.get_shape().as_list())) * 4 for v in
                           tr.graph.get_collection(cs.GraphKeys.TRAINABLE_VARIABLES)))
    servers: dict[str, Server] = {}
    out = {m: Samples() for m in modes}
    extra: dict[str, Any] = {"params_bytes": params_bytes}
    try:
        for m in modes:  # each server starts on an empty directory (its base), then loads
            servers[m] = Server(work, f"ctr-{m}", CTR_MODEL, tr.dirs[m], body)
            extra[f"base_kib_{m}"] = servers[m].base_kib
            tr.save(m)
            servers[m].wait_version(tr.step)
        for r in range(args.rounds):
            for m in (modes if r % 2 == 0 else modes[::-1]):
                block(tr, m, servers[m], args.per_round, args.save_every, out[m])
                print(f"  round {r + 1}/{args.rounds} {m}: {args.per_round} checkpoints, "
                      f"median {_med(out[m].bytes[-args.per_round:]) / 1e6:.2f} MB, stall "
                      f"{_med(out[m].stall_s[-args.per_round:]) * 1e3:.1f} ms, served "
                      f"{_med(out[m].lag_s[-args.per_round:]) * 1e3:.1f} ms", flush=True)
        if "incremental" in modes and args.swaps > 10:
            # A fresh server that follows the incremental trainer from here on, as one
            # would in production: the rounds' servers also applied the catch-up deltas
            # of each block's first save (the changes made while the other mode ran,
            # ~30x a steady checkpoint's rows), whose extra blocks their pool keeps.
            servers["incremental"].close()
            tr.train(args.save_every)  # the incremental Saver catches up on the full block
            tr.save("incremental")
            s = servers["steady"] = Server(work, "ctr-steady", CTR_MODEL,
                                           tr.dirs["incremental"], body)
            # Its base: the rounds' incremental server's, measured the same way before
            # it loaded anything (this one starts on a directory with checkpoints).
            extra["base_kib_steady"] = extra["base_kib_incremental"]
            swaps = Samples()
            block(tr, "incremental", s, 10, args.save_every, swaps)
            after_10 = s.pss_kib()
            block(tr, "incremental", s, args.swaps - 10, args.save_every, swaps)
            extra["growth"] = (after_10, s.pss_kib(), args.swaps)
            out["steady"] = swaps
            print(f"  {args.swaps} incremental swaps on a fresh server", flush=True)
    finally:
        for s in servers.values():
            s.close()
        tr.close()
    return out, extra


def dense_section(args: argparse.Namespace, work: str, modes: tuple[str, ...]
                  ) -> dict[str, Samples]:
    tr = Trainer(MLP_MODEL, load_digits().train, 64, work, "mlp", args.async_save, modes)
    out = {m: Samples() for m in modes}
    try:
        for m in modes:
            tr.save(m)
        for r in range(args.rounds * 2):
            for m in (modes if r % 2 == 0 else modes[::-1]):
                block(tr, m, None, max(20, args.per_round), args.save_every, out[m])
    finally:
        tr.close()
    return out


def row(name: str, unit: str, scale: float, xs: list[float]) -> str:
    if not xs:
        return f"  {name:<28} {'-':>10}"
    return (f"  {name:<28} {_med(xs) * scale:10.2f} {unit:<3} (p99 {percentile(xs, 0.99) * scale:.2f}, "
            f"mean {statistics.fmean(xs) * scale:.2f}, n {len(xs)})")


def report(out: dict[str, Samples], extra: dict[str, Any] | None, title: str
           ) -> dict[str, float]:
    print(f"\n{title}")
    ratios: dict[str, float] = {}
    for m, s in out.items():
        label = {"steady": "incremental, a fresh server following it (steady state)"}.get(m, m)
        print(f" {label}: {len(s.bytes)} checkpoints measured, {s.fulls} of them full")
        print(row("bytes per checkpoint", "MB", 1e-6, [float(b) for b in s.bytes]))
        print(row("trainer stall per save", "ms", 1e3, s.stall_s))
        if s.lag_s:
            print(row("publish -> served", "ms", 1e3, s.lag_s))
            if s.full_lag_s and len(s.full_lag_s) < len(s.lag_s):
                print(row("  of the full checkpoints", "ms", 1e3, s.full_lag_s))
        if s.rows and any(s.rows):
            # Adagrad changes exactly the rows a step looked up (table and accumulator).
            print(row("rows changed per checkpoint", "%", 1e-4, [float(r) for r in s.rows]))
        if s.peak_kib and extra:
            base = extra[f"base_kib_{m}"]
            params_kib = extra["params_bytes"] / 1024
            peak = max(s.peak_kib)
            print(f"  {'server peak memory':<28} base {base / 1024:.0f} MiB + "
                  f"{(peak - base) / params_kib:.2f}x params ({params_kib / 1024:.0f} MiB); "
                  f"server VmHWM {max(s.hwm_kib) / 1024:.0f} MiB")
            ratios[f"peak_{m}"] = (peak - base) / params_kib
    if "incremental" in out and "full" in out:
        inc, full = out["incremental"], out["full"]
        if min(len(inc.bytes), len(full.bytes)) == 0:
            return ratios
        ratios["bytes_median"] = _med([float(b) for b in full.bytes]) / _med(
            [float(b) for b in inc.bytes])
        ratios["bytes_mean"] = statistics.fmean(full.bytes) / statistics.fmean(inc.bytes)
        ratios["stall_median"] = _med(full.stall_s) / _med(inc.stall_s)
        ratios["stall_mean"] = statistics.fmean(full.stall_s) / statistics.fmean(inc.stall_s)
        print(f" full / incremental: bytes {ratios['bytes_median']:.1f}x (median; "
              f"{ratios['bytes_mean']:.1f}x over the means, full checkpoints included), stall "
              f"{ratios['stall_median']:.1f}x (median; {ratios['stall_mean']:.1f}x over the "
              "means)")
    if extra and "growth" in extra:
        a, b, n = extra["growth"]
        ratios["growth"] = (b - a) / a
        print(f" memory after swap 10: {a / 1024:.1f} MiB, after swap {n}: {b / 1024:.1f} MiB "
              f"({100 * (b - a) / a:+.2f} %)")
    return ratios


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-round", type=int, default=3,
                    help="measured checkpoints per block (each mode, each round)")
    ap.add_argument("--swaps", type=int, default=60,
                    help="incremental swaps after the rounds, for memory growth (0: none)")
    ap.add_argument("--save-every", type=int, default=10, help="steps per checkpoint")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--only", default="ctr,dense,apply",
                    help="sections: ctr, dense, apply (the copy-on-write apply alone)")
    ap.add_argument("--apply-checkpoints", type=int, default=12,
                    help="incremental checkpoints the apply section writes and applies")
    ap.add_argument("--async-save", action="store_true")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the work directory (checkpoints, the servers' logs)")
    ap.add_argument("--server-log-level", default="warning",
                    help="the servers' --log-level (info: a line per version served)")
    args = ap.parse_args()
    global SERVER_LOG_LEVEL
    SERVER_LOG_LEVEL = args.server_log_level
    modes = MODES if incremental_available() else ("full",)
    if modes == ("full",):
        print("incremental: this checkout's Saver has no incremental= (not landed); "
              "only the full path runs")
    only = set(args.only.split(","))
    work = tempfile.mkdtemp(prefix="bench-incremental-", dir=args.dir)
    try:
        print(f"CTR model: 1,000,000 x 64 float32 table, batch {args.batch}, a checkpoint every "
              f"{args.save_every} steps, {args.rounds} rounds x {args.per_round} per mode"
              f"{'' if 'incremental' not in modes else f', then {args.swaps} swaps'}",
              flush=True)
        ratios: dict[str, float] = {}
        if "ctr" in only:
            out, extra = ctr_section(args, work, modes)
            ratios = report(out, extra, "CTR model (examples/ctr_embedding.py, synthetic-ctr)")
            ctr = out
        if "dense" in only:
            dense = dense_section(args, work, modes)
            d = report(dense, None, "dense digits MLP (examples/digits_mlp.py, batch 64, Adam)")
            if "stall_median" in d:
                print(f" dense incremental / full: stall {1 / d['stall_median']:.2f}x "
                      f"(median), bytes {1 / d['bytes_median']:.2f}x (target: <= 1.1x)")
        if "apply" in only and "incremental" in modes:
            data = load_dataset("synthetic-ctr", ("user_id", "item_id"), ("click",))
            apply_section(args, work, CTR_MODEL, data.train)
        if "ctr" in only and "incremental" in modes:
            inc = ctr["incremental"]
            steady = ctr.get("steady")
            lag = inc.lag_s + (steady.lag_s if steady is not None else [])
            print(f"\nheadline (CTR, incremental vs full): bytes {ratios['bytes_median']:.0f}x "
                  f"fewer, stall {ratios['stall_median']:.0f}x smaller, publish -> served "
                  f"p50 {_med(lag) * 1e3:.1f} ms p99 {percentile(lag, 0.99) * 1e3:.1f} ms, server "
                  f"peak base + {ratios.get('peak_steady', float('nan')):.2f}x params in steady "
                  f"state ({ratios.get('peak_incremental', float('nan')):.2f}x with the rounds' "
                  f"catch-up deltas; full: + {ratios.get('peak_full', float('nan')):.2f}x)")
        elif "ctr" in only:
            full = ctr["full"]
            print(f"\nheadline (CTR, full only): publish -> served p50 "
                  f"{_med(full.lag_s) * 1e3:.0f} ms, stall {_med(full.stall_s) * 1e3:.0f} ms, "
                  f"{_med([float(b) for b in full.bytes]) / 1e6:.0f} MB per checkpoint")
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
