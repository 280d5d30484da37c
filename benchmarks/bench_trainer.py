"""Training throughput with a checkpoint every 100 ms (async save) vs no checkpoints.

Runs ``run_training`` (the loop behind ``trainer run``) on the digits MLP in this process,
alternating the two settings, and measures steps/s between the first and the last step
(startup excluded). The cadence is the workload of ../shared/BENCHMARKS.md (a checkpoint
every 100 ms; ``--every-secs 1`` for every second, ``--every-steps N`` for a step
cadence). The last line is the headline ratio (with checkpoints / without).

    python benchmarks/bench_trainer.py [--steps 5000] [--repeats 7] [--every-secs 0.1] [--sync]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from threadpoolctl import threadpool_limits

from ckptsync.app import Progress, TrainerOptions, run_training

try:
    from benchmarks._common import alternate, summary
except ImportError:  # run as a script
    from _common import alternate, summary  # type: ignore[no-redef]

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                     "digits_mlp.py")
TARGET = 0.95


def steps_per_s(steps: int, every_steps: int | None, every_secs: float | None,
                async_save: bool) -> tuple[float, int]:
    """(steps/s, checkpoints written) of one run; no checkpoints when both are None."""
    stamps: dict[int, float] = {}

    def on_progress(p: Progress) -> None:
        stamps[p.step] = time.perf_counter()

    with tempfile.TemporaryDirectory() as d:
        saving = every_steps is not None or every_secs is not None
        opts = TrainerOptions(
            model_path=MODEL, checkpoint_dir=d, steps=steps, max_to_keep=5,
            save_every_steps=every_steps if saving else steps * 10,
            save_every_secs=every_secs if every_steps is None else None,
            async_save=async_save and saving)
        saved = run_training(opts, on_progress=on_progress).checkpoints_written
    return (steps - 1) / (stamps[steps] - stamps[1]), saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--every-secs", type=float, default=0.1, help="checkpoint every S seconds")
    ap.add_argument("--every-steps", type=int, default=None,
                    help="checkpoint every N steps instead")
    ap.add_argument("--sync", action="store_true", help="synchronous saves instead of async")
    args = ap.parse_args()
    threadpool_limits(1)
    mode = "sync" if args.sync else "async"
    every = (f"{args.every_steps} steps" if args.every_steps is not None
             else f"{args.every_secs * 1000:g} ms")
    written: list[int] = []

    def with_checkpoints() -> float:
        rate, n = steps_per_s(args.steps, args.every_steps,
                              None if args.every_steps is not None else args.every_secs,
                              not args.sync)
        written.append(n)
        return rate

    cases = {
        f"checkpoint every {every} ({mode})": with_checkpoints,
        "no checkpoints": lambda: steps_per_s(args.steps, None, None, False)[0],
    }
    samples = alternate(cases, args.repeats)
    print(f"trainer loop, digits MLP, batch 64, Adam; {args.steps} steps x {args.repeats}; "
          f"checkpoints written per run: {min(written)}-{max(written)}")
    for k, v in samples.items():
        med, lo, hi = summary(v)
        print(f"{k:<40} {med:9.0f} steps/s (min {lo:.0f}, max {hi:.0f})")
    with_ck, without = (summary(v)[0] for v in samples.values())
    print(f"ratio with/without checkpoints: {with_ck / without:.2f}x (target >= {TARGET}x)")


if __name__ == "__main__":
    main()
