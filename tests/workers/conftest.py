"""Helpers of the worker-process tests."""

from __future__ import annotations


def voluntary_switches(pid: int) -> int:
    """How often process ``pid`` has gone to sleep (``voluntary_ctxt_switches``)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches")
