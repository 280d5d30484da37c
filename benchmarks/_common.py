"""Shared benchmark helpers: alternate ckptsync and its reference, report medians."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable


def fsync_file(path: str) -> None:
    """fsync of the file at ``path`` (the durability half of a "durable" reference)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def timed(fn: Callable[[], object], number: int) -> float:
    """Seconds per call of ``fn`` over ``number`` calls."""
    t = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t) / number


def alternate(cases: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Runs each case once per round, ``repeats`` rounds, alternating; returns samples."""
    out: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeats):
        for k, f in cases.items():
            out[k].append(f())
    return out


def summary(samples: list[float]) -> tuple[float, float, float]:
    return statistics.median(samples), min(samples), max(samples)


def fmt_row(name: str, samples: list[float], unit: str, scale: float = 1.0) -> str:
    med, lo, hi = summary(samples)
    return f"{name:<34} {med * scale:10.3f} {unit:<6} (min {lo * scale:.3f}, max {hi * scale:.3f})"
