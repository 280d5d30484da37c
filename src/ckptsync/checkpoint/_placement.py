"""Where the async writer process runs: on the CPUs that take the checkpoint disk's
interrupts.

Every save ends in ``fsync``s, and each one completes by an interrupt on the CPU the
disk's interrupt is routed to (``/proc/irq/N/effective_affinity_list``). A trainer that
computes on that CPU pays for each one: on a small VM whose disk interrupts all go to one
CPU, a digits trainer saving every 10 steps lost ~8 % of its steps/s there, and ~0 on
the other CPU. Placing the writer on the interrupt CPUs keeps its wake-ups local, and
the scheduler, finding the writer there, keeps the trainer on the other CPUs.

The writer is only narrowed, never widened: the CPUs chosen are those of the interrupts
among the owner's own (``os.sched_getaffinity(0)``), and only when that leaves some of
the owner's CPUs free of them. Disks whose interrupts reach every CPU (NVMe, one queue
per CPU), directories on no local disk (tmpfs, NFS) and anything that cannot be read
leave the writer where the scheduler puts it.

``CKPTSYNC_WRITER_CPUS`` overrides: ``auto`` (the default, as above), ``none`` (never
pin), or a CPU list such as ``0,2-3``, taken as is (it may lie outside the owner's CPUs:
``taskset -c 0`` for the trainer and ``1`` for its writer; CPUs the system refuses, e.g.
outside a cgroup's cpuset, are warned about once and the writer runs unpinned). It
concerns only the writer process of ``Saver(async_save=True)``. Every thread of the
writer is pinned (its interpreter has BLAS threads), again whenever a new writer starts
or the directory changes; a directory whose disk needs no pinning sets the writer back
to the owner's CPUs.
"""

from __future__ import annotations

import errno
import logging
import os

from ..errors import CkptsyncValueError

__all__ = ["check_setting", "interrupt_cpus", "parse_cpu_list", "pin_process", "writer_cpus"]

logger = logging.getLogger(__name__)

ENV_VAR = "CKPTSYNC_WRITER_CPUS"
_MAX_DEPTH = 8  # device-mapper/md stacking followed through ``slaves/``
_MAX_CPUS = 1 << 16  # no list of more CPUs is built
_cache: dict[tuple[int, str, str], frozenset[int] | None] = {}  # (st_dev, roots)
_warned: set[frozenset[int]] = set()


def parse_cpu_list(text: str) -> frozenset[int]:
    """CPUs of a Linux CPU list (``"0-3,8"``, as in ``/proc/irq/N/effective_affinity_list``).

    Raises:
        CkptsyncValueError: not such a list (names the text).
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not (lo.isascii() and lo.isdigit() and (not sep or (hi.isascii() and hi.isdigit()))):
            raise CkptsyncValueError(f"{text.strip()!r} is not a CPU list such as '0,2-3'.")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first or last >= _MAX_CPUS:
            raise CkptsyncValueError(f"{text.strip()!r} is not a CPU list such as '0,2-3'.")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def check_setting() -> frozenset[int] | str:
    """``CKPTSYNC_WRITER_CPUS`` checked: ``"auto"``, ``"none"`` or the CPUs it lists.

    Raises:
        CkptsyncValueError: neither ``auto``, ``none`` nor a list of this machine's CPUs
            (names the variable, the value and what was expected).
    """
    raw = os.environ.get(ENV_VAR, "auto")
    setting = raw.strip().lower() or "auto"
    if setting in ("auto", "none"):
        return setting
    shown = repr(raw if len(raw) <= 40 else raw[:37] + "...")
    try:
        cpus = parse_cpu_list(setting)
    except CkptsyncValueError:
        cpus = frozenset()
    if not cpus:
        raise CkptsyncValueError(
            f"{ENV_VAR}={shown}: expected 'auto', 'none' or a CPU list such as '0,2-3'.")
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


def _device_dirs(block_dir: str, depth: int = 0) -> list[str]:
    """The sysfs directories of the disks behind block device ``block_dir``: its own (a
    partition's parent disk) or, for device-mapper/md, those of its ``slaves``."""
    if os.path.exists(os.path.join(block_dir, "partition")):
        block_dir = os.path.dirname(block_dir)
    slaves = os.path.join(block_dir, "slaves")
    names = sorted(os.listdir(slaves)) if os.path.isdir(slaves) else []
    if not names or depth >= _MAX_DEPTH:
        return [block_dir]
    out: list[str] = []
    for name in names:
        out += _device_dirs(os.path.realpath(os.path.join(slaves, name)), depth + 1)
    return out


def _irqs_of(block_dir: str, sys_root: str) -> list[int]:
    """IRQ numbers of the bus device above ``block_dir`` (its ``msi_irqs``, else ``irq``)."""
    path = os.path.realpath(os.path.join(block_dir, "device"))
    devices_root = os.path.realpath(os.path.join(sys_root, "devices"))
    while path.startswith(devices_root + os.sep):
        msi = os.path.join(path, "msi_irqs")
        if os.path.isdir(msi):
            return sorted(int(n) for n in os.listdir(msi) if n.isdigit())
        irq = os.path.join(path, "irq")
        if os.path.isfile(irq):
            with open(irq) as f:
                n = int(f.read().strip() or 0)
            if n > 0:
                return [n]
        path = os.path.dirname(path)
    return []


def interrupt_cpus(directory: str, sys_root: str = "/sys",
                   proc_root: str = "/proc") -> frozenset[int] | None:
    """The CPUs that take the interrupts of the disk holding ``directory``.

    Returns:
        The CPUs (a union over the disks behind a device-mapper/md device), or None where
        it cannot be told: no block device (tmpfs, NFS, overlay on those), no sysfs or
        procfs (not Linux), unreadable files. Never raises.
    """
    try:
        dev = os.stat(directory).st_dev
        block = os.path.join(sys_root, "dev", "block", f"{os.major(dev)}:{os.minor(dev)}")
        if not os.path.exists(block):
            return None
        cpus: set[int] = set()
        for disk in _device_dirs(os.path.realpath(block)):
            irqs = _irqs_of(disk, sys_root)
            if not irqs:
                return None  # one disk of several unknown: all of them are
            for n in irqs:
                base = os.path.join(proc_root, "irq", str(n))
                for name in ("effective_affinity_list", "smp_affinity_list"):
                    path = os.path.join(base, name)
                    if os.path.isfile(path):
                        with open(path) as f:
                            cpus |= parse_cpu_list(f.read())
                        break
        return frozenset(cpus) or None
    except (OSError, ValueError) as e:
        logger.debug("Could not find the interrupt CPUs of %s's disk: %s", directory, e)
        return None


def writer_cpus(directory: str, allowed: frozenset[int] | None = None,
                sys_root: str = "/sys", proc_root: str = "/proc") -> frozenset[int] | None:
    """The CPUs to run the writer of checkpoints in ``directory`` on, or None to leave
    it unpinned (see the module docstring for the rule and ``CKPTSYNC_WRITER_CPUS``).

    Args:
        directory: the checkpoint directory (must exist).
        allowed: the owner's CPUs; default ``os.sched_getaffinity(0)``.

    Raises:
        CkptsyncValueError: a bad ``CKPTSYNC_WRITER_CPUS`` (see :func:`check_setting`).
    """
    if not hasattr(os, "sched_getaffinity"):
        return None
    setting = check_setting()
    if setting == "none":
        return None
    if not isinstance(setting, str):
        return setting
    if allowed is None:
        allowed = frozenset(os.sched_getaffinity(0))
    try:
        key = (os.stat(directory).st_dev, sys_root, proc_root)
    except OSError:
        return None
    if key not in _cache:  # one disk's interrupts do not move often: read sysfs once
        _cache[key] = interrupt_cpus(directory, sys_root, proc_root)
    found = _cache[key]
    if found is None:
        return None
    chosen = found & allowed
    return chosen if chosen and chosen != allowed else None


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
    for _ in range(_MAX_DEPTH):  # again while new threads appear
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
