"""Training throughput with a checkpoint every 10 steps (async save) vs no checkpoints.

Runs ``run_training`` (the loop behind ``trainer run``) on the digits MLP in this process,
alternating the two settings, and measures steps/s between the first and the last step
(startup excluded). The last line is the headline ratio (with checkpoints / without).

It also prints where things ran: the CPUs the writer process was pinned to (only with
``CKPTSYNC_WRITER_CPUS`` set, see ``ckptsync.workers.placement``) and the CPUs the
trainer was seen on.

    python benchmarks/bench_trainer.py [--steps 3000] [--repeats 7] [--sync]
"""

from __future__ import annotations

import argparse
import collections
import os
import tempfile
import time

from threadpoolctl import threadpool_limits

from ckptsync.app import Progress, TrainerOptions, run_training
from ckptsync.workers.placement import writer_cpus

try:
    from benchmarks._common import alternate, summary
except ImportError:  # run as a script
    from _common import alternate, summary  # type: ignore[no-redef]

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                     "digits_mlp.py")


def _cpu() -> int:
    """The CPU this thread last ran on (field 39 of /proc/thread-self/stat), or -1."""
    try:
        with open("/proc/thread-self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, IndexError, ValueError):
        return -1


def steps_per_s(steps: int, save_every: int | None, async_save: bool,
                cpus: collections.Counter[int]) -> float:
    stamps: dict[int, float] = {}

    def on_progress(p: Progress) -> None:
        stamps[p.step] = time.perf_counter()
        if p.step % 100 == 0:
            cpus[_cpu()] += 1

    with tempfile.TemporaryDirectory() as d:
        opts = TrainerOptions(model_path=MODEL, checkpoint_dir=d, steps=steps,
                              save_every_steps=save_every or steps * 10, max_to_keep=5,
                              async_save=async_save and save_every is not None)
        run_training(opts, on_progress=on_progress)
    return (steps - 1) / (stamps[steps] - stamps[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--every", type=int, default=10, help="checkpoint every N steps")
    ap.add_argument("--sync", action="store_true", help="synchronous saves instead of async")
    args = ap.parse_args()
    threadpool_limits(1)
    mode = "sync" if args.sync else "async"
    seen: dict[str, collections.Counter[int]] = {"with": collections.Counter(),
                                                 "without": collections.Counter()}
    cases = {
        f"checkpoint every {args.every} steps ({mode})":
            lambda: steps_per_s(args.steps, args.every, not args.sync, seen["with"]),
        "no checkpoints": lambda: steps_per_s(args.steps, None, False, seen["without"]),
    }
    samples = alternate(cases, args.repeats)
    pinned = writer_cpus()
    print(f"trainer loop, digits MLP, batch 64, Adam; {args.steps} steps x {args.repeats}")
    print(f"writer process pinned to CPUs: {_cpu_list(pinned) if pinned else 'not pinned'}; "
          f"trainer seen on CPUs (with checkpoints) {_share(seen['with'])}, "
          f"(without) {_share(seen['without'])}")
    for k, v in samples.items():
        med, lo, hi = summary(v)
        print(f"{k:<40} {med:9.0f} steps/s (min {lo:.0f}, max {hi:.0f})")
    with_ck, without = (summary(v)[0] for v in samples.values())
    print(f"ratio with/without checkpoints: {with_ck / without:.2f}x (target >= 0.9x)")


def _cpu_list(cpus: frozenset[int]) -> str:
    return ",".join(map(str, sorted(cpus)))


def _share(counts: collections.Counter[int]) -> str:
    total = sum(counts.values()) or 1
    return " ".join(f"{cpu}: {100 * n // total}%" if 100 * n >= total else f"{cpu}: <1%"
                    for cpu, n in sorted(counts.items()))


if __name__ == "__main__":
    main()
