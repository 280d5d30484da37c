"""Where the async writer process runs: ``CKPTSYNC_WRITER_CPUS``.

Unset, empty or ``none``: the writer runs where the scheduler puts it. A CPU list such
as ``0,2-3`` pins every thread of the writer process of ``Saver(async_save=True)`` to
those CPUs, taken as is (they may lie outside the owner's own: ``taskset -c 0`` for the
trainer and ``1`` for its writer), again whenever a new writer starts. CPUs the system
refuses (e.g. outside a cgroup's cpuset) are warned about once and the writer runs
unpinned.

An ``auto`` setting that read the checkpoint disk's interrupt CPUs from ``/proc/irq``
was removed (at a checkpoint every 1 s or 100 ms it earned nothing measurable, see
docs/performance.md); it is refused with a message saying so.
"""

from __future__ import annotations

import errno
import logging
import os

from ..errors import CkptsyncValueError

__all__ = ["ENV_VAR", "check_setting", "parse_cpu_list", "pin_process", "writer_cpus"]

logger = logging.getLogger(__name__)

ENV_VAR = "CKPTSYNC_WRITER_CPUS"
_MAX_PASSES = 8  # pin_process goes over the threads again while new ones appear
_MAX_CPUS = 1 << 16  # no list of more CPUs is built
_warned: set[frozenset[int]] = set()


def parse_cpu_list(text: str) -> frozenset[int]:
    """CPUs of a Linux CPU list (``"0-3,8"``, as in ``/proc/irq/N/effective_affinity_list``).

    Raises:
        CkptsyncValueError: not such a list (names the text).
    """
    cpus: set[int] = set()
    parts = text.strip().split(",")
    for part in parts:
        part = part.strip()
        if not part:
            if len(parts) > 1:  # "0,,1" or "0,": not a list the kernel writes
                raise CkptsyncValueError(f"{text.strip()!r} is not a CPU list such as '0,2-3'.")
            continue
        lo, sep, hi = part.partition("-")
        if not (lo.isascii() and lo.isdigit() and (not sep or (hi.isascii() and hi.isdigit()))):
            raise CkptsyncValueError(f"{text.strip()!r} is not a CPU list such as '0,2-3'.")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first or last >= _MAX_CPUS:
            raise CkptsyncValueError(f"{text.strip()!r} is not a CPU list such as '0,2-3'.")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def check_setting() -> frozenset[int] | None:
    """``CKPTSYNC_WRITER_CPUS`` checked: the CPUs it lists, or None (unset, empty or
    ``none``: no pinning).

    Raises:
        CkptsyncValueError: neither ``none`` nor a list of this machine's CPUs (names the
            variable, the value and what was expected; ``auto`` is named as removed).
    """
    raw = os.environ.get(ENV_VAR, "")
    setting = raw.strip().lower()
    if setting in ("", "none"):
        return None
    shown = repr(raw if len(raw) <= 40 else raw[:37] + "...")
    if setting == "auto":
        raise CkptsyncValueError(
            f"{ENV_VAR}={shown}: 'auto' (placement by the disk's interrupt CPUs) was "
            f"removed; use 'none' or a CPU list such as '0,2-3'.")
    try:
        cpus = parse_cpu_list(setting)
    except CkptsyncValueError:
        cpus = frozenset()
    if not cpus:
        raise CkptsyncValueError(
            f"{ENV_VAR}={shown}: expected 'none' or a CPU list such as '0,2-3'.")
    present = _present_cpus()
    missing = sorted(cpus - present)
    if missing:
        raise CkptsyncValueError(
            f"{ENV_VAR}={shown}: CPU {missing[0]} does not exist (this machine has CPUs "
            f"{_cpu_list_text(present)}).")
    return cpus


def _present_cpus() -> frozenset[int]:
    """The CPUs this machine has (``/sys/devices/system/cpu/present``; else by count)."""
    try:
        with open("/sys/devices/system/cpu/present") as f:
            return parse_cpu_list(f.read())
    except (OSError, CkptsyncValueError):
        return frozenset(range(os.cpu_count() or 1))


def _cpu_list_text(cpus: frozenset[int]) -> str:
    """``{0, 1, 2, 5}`` as ``"0-2,5"``."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(cpus):
        if run and c != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def writer_cpus() -> frozenset[int] | None:
    """The CPUs to pin the writer process to (``CKPTSYNC_WRITER_CPUS``), or None to
    leave it where the scheduler puts it.

    Raises:
        CkptsyncValueError: a bad ``CKPTSYNC_WRITER_CPUS`` (see :func:`check_setting`).
    """
    if not hasattr(os, "sched_setaffinity"):
        return None
    return check_setting()


def pin_process(pid: int, cpus: frozenset[int] | None) -> bool:
    """Sets the CPUs of every thread of process ``pid`` (``sched_setaffinity`` acts on one
    thread; the writer's interpreter has BLAS threads too, perhaps still being started)
    to ``cpus``, or back to this process's own CPUs for None.

    Returns:
        True when every thread was set. Never raises: CPUs that cannot be used here
        (offline, outside the cgroup's cpuset) are warned about once and the process is
        left where it was; a process or thread that has ended is skipped (the writer's
        owner finds a dead writer by its socket).
    """
    target = frozenset(os.sched_getaffinity(0)) if cpus is None else cpus
    done: set[int] = set()
    for _ in range(_MAX_PASSES):  # again while new threads appear
        try:
            tids = {int(t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit()} - done
        except OSError:
            tids = set() if done else {pid}
        if not tids:
            return True
        for tid in sorted(tids):
            try:
                os.sched_setaffinity(tid, target)
            except ProcessLookupError:
                pass
            except OSError as e:
                if e.errno == errno.EINVAL and target not in _warned:
                    _warned.add(target)
                    logger.warning("Cannot run the checkpoint writer on CPUs %s (%s); it runs "
                                   "where the scheduler puts it. Check %s.",
                                   ",".join(map(str, sorted(target))), e.strerror, ENV_VAR)
                elif e.errno != errno.EINVAL:
                    logger.debug("Could not set the CPUs of thread %d: %s", tid, e)
                return False
            done.add(tid)
    return True
