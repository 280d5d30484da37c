"""TF1's histogram summary: its default bucket limits and its ``HistogramProto`` fields.

As TF's C++ ``histogram::Histogram``: limits grow by 10 % from 1e-12 to 1e20, mirrored
below zero, with 0 and ±DBL_MAX; a value counts in the first bucket whose limit is
greater than it; runs of empty buckets are collapsed into one (the run's last limit).
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["DEFAULT_BUCKET_LIMITS", "histogram_fields"]


def _default_limits() -> np.ndarray:
    pos = []
    v = 1.0e-12
    while v < 1.0e20:
        pos.append(v)
        v *= 1.1
    pos.append(sys.float_info.max)
    neg = [-x for x in reversed(pos)]
    return np.array([*neg, 0.0, *pos], dtype=np.float64)


DEFAULT_BUCKET_LIMITS = _default_limits()
DEFAULT_BUCKET_LIMITS.setflags(write=False)


def histogram_fields(values: np.ndarray) -> dict:
    """The fields of a ``HistogramProto`` for ``values`` (finite; any shape, cast to
    float64): ``min``, ``max``, ``num``, ``sum``, ``sum_squares``, ``bucket_limit``,
    ``bucket``. Sums are sequential, as TF's, so they agree to the last bit."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    limits = DEFAULT_BUCKET_LIMITS
    counts = np.zeros(len(limits), dtype=np.float64)
    if v.size:
        idx = np.minimum(np.searchsorted(limits, v, side="right"), len(limits) - 1)
        counts = np.bincount(idx, minlength=len(limits)).astype(np.float64)
        lo, hi = float(v.min()), float(v.max())
        total, squares = float(np.cumsum(v)[-1]), float(np.cumsum(v * v)[-1])
    else:
        lo, hi, total, squares = float(limits[-1]), -float(limits[-1]), 0.0, 0.0
    out_limits: list[float] = []
    out_counts: list[float] = []
    nonzero = counts > 0
    i, n = 0, len(limits)
    while i < n:
        end, count = limits[i], counts[i]
        i += 1
        if not nonzero[i - 1]:
            # Collapse the run of empty buckets into one, as TF.
            nxt = np.flatnonzero(nonzero[i:])
            j = n if nxt.size == 0 else i + int(nxt[0])
            if j > i:
                end, count = limits[j - 1], counts[j - 1]
                i = j
        out_limits.append(float(end))
        out_counts.append(float(count))
    return dict(min=lo, max=hi, num=float(v.size), sum=total, sum_squares=squares,
                bucket_limit=out_limits, bucket=out_counts)
