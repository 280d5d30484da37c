"""``trainer run --max-steps-per-s``: steps start at most that often, and a stall (a busy
machine, a stopped process, a long save) is not made up by a burst afterwards (it ran at
534 steps/s after a stall under --max-steps-per-s 100). Time is the test's own clock."""

from __future__ import annotations

import pytest

from ckptsync.app.hooks import StepPace


def test_steps_are_paced_at_the_rate():
    pace = StepPace(10.0, now_s=0.0)
    # Steps that take 0.01 s wait out the rest of their 0.1 s.
    assert pace.wait_s(0.01) == pytest.approx(0.09)
    assert pace.wait_s(0.11) == pytest.approx(0.09)
    assert pace.wait_s(0.21) == pytest.approx(0.09)


def test_a_stall_is_not_made_up_in_a_burst():
    pace = StepPace(10.0, now_s=0.0)
    now = 0.0
    for _ in range(5):
        now += 0.01
        now += pace.wait_s(now)
    now += 3.0  # stopped for 3 s (30 steps' worth)
    assert pace.wait_s(now) == 0.0  # late: runs at once
    # From there on the pace holds: no step runs sooner than 0.1 s after the one before.
    starts = []
    for _ in range(20):
        starts.append(now)
        now += 0.001
        now += pace.wait_s(now)
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert min(gaps) == pytest.approx(0.1)
    assert 20 / (now - starts[0]) <= 10.0 + 1e-9


def test_steps_slower_than_the_rate_do_not_wait():
    pace = StepPace(100.0, now_s=0.0)
    now = 0.0
    for _ in range(10):
        now += 0.05  # each step takes 5x its allowance
        assert pace.wait_s(now) == 0.0
