"""Training throughput with a checkpoint every 10 steps (async save) vs no checkpoints.

Runs ``run_training`` (the loop behind ``trainer run``) on the digits MLP in this process,
alternating the two settings, and measures steps/s between the first and the last step
(startup excluded). The last line is the headline ratio (with checkpoints / without).

    python benchmarks/bench_trainer.py [--steps 1500] [--repeats 5] [--sync]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from threadpoolctl import threadpool_limits

from ckptsync.train.trainer import Progress, TrainerOptions, run_training

try:
    from benchmarks._common import alternate, summary
except ImportError:  # run as a script
    from _common import alternate, summary  # type: ignore[no-redef]

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                     "digits_mlp.py")


def steps_per_s(steps: int, save_every: int | None, async_save: bool) -> float:
    stamps: dict[int, float] = {}

    def on_progress(p: Progress) -> None:
        stamps[p.step] = time.perf_counter()

    with tempfile.TemporaryDirectory() as d:
        opts = TrainerOptions(model_path=MODEL, checkpoint_dir=d, steps=steps,
                              save_every_steps=save_every or steps * 10, max_to_keep=5,
                              async_save=async_save and save_every is not None)
        run_training(opts, on_progress=on_progress)
    return (steps - 1) / (stamps[steps] - stamps[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--every", type=int, default=10, help="checkpoint every N steps")
    ap.add_argument("--sync", action="store_true", help="synchronous saves instead of async")
    args = ap.parse_args()
    threadpool_limits(1)
    mode = "sync" if args.sync else "async"
    cases = {
        f"checkpoint every {args.every} steps ({mode})":
            lambda: steps_per_s(args.steps, args.every, not args.sync),
        "no checkpoints": lambda: steps_per_s(args.steps, None, False),
    }
    samples = alternate(cases, args.repeats)
    print(f"trainer loop, digits MLP, batch 64, Adam; {args.steps} steps x {args.repeats}")
    for k, v in samples.items():
        med, lo, hi = summary(v)
        print(f"{k:<40} {med:9.0f} steps/s (min {lo:.0f}, max {hi:.0f})")
    with_ck, without = (summary(v)[0] for v in samples.values())
    print(f"ratio with/without checkpoints: {with_ck / without:.2f}x (target >= 0.9x)")


if __name__ == "__main__":
    main()
