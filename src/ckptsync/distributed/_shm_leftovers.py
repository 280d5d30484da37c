"""MPICH's shared-memory segments left behind by jobs that ended abnormally.

MPICH puts each host's intra-node channel in a file ``/dev/shm/mpich_shm_*`` (2-3 MiB)
and unlinks it once every local rank has attached, or at ``MPI_Finalize``; a job that
ends by ``MPI_Abort`` or a signal before that leaves the file behind, and ``/dev/shm``
(memory) fills up over many failed runs. :func:`remove_dead_segments` removes those of
ended jobs; ``init()`` runs it on each rank before ``MPI_Init``.

A segment counts as dead only when no live process holds it: none has it open (its
``/proc/<pid>/fd``) and none maps it (``/proc/<pid>/maps``), read in that order, so a
process that creates it (open), maps it and then closes its fd is seen in one or the
other. Only the caller's own files are looked at (their processes' ``/proc`` entries are
readable). Never raises.

Thread-safety: a plain function over the file system; safe from any thread (two
processes sweeping at once is harmless).
"""

from __future__ import annotations

import logging
import os

__all__ = ["SEGMENT_PREFIX", "remove_dead_segments"]

log = logging.getLogger("ckptsync.distributed")

SEGMENT_PREFIX = "mpich_shm_"
_SHM_DIR = "/dev/shm"


def _held_paths(directory: str) -> set[str]:
    """The paths under ``directory`` that some live process has open or mapped."""
    prefix = directory.rstrip("/") + "/"
    held: set[str] = set()
    for pid in filter(str.isdigit, _listdir("/proc")):
        for fd in _listdir(f"/proc/{pid}/fd"):  # first the fds, then the maps
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(prefix):
                held.add(target.removesuffix(" (deleted)"))
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    at = line.find(prefix)
                    if at >= 0:
                        held.add(line[at:].rstrip("\n").removesuffix(" (deleted)"))
        except OSError:
            continue
    return held


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def remove_dead_segments(directory: str = _SHM_DIR) -> list[str]:
    """Removes the ``mpich_shm_*`` files in ``directory`` that belong to this user and
    that no live process holds (open or mapped): those of ended jobs.

    Returns:
        The paths removed (logged once, with their total size, when any).
    """
    try:
        names = [n for n in os.listdir(directory) if n.startswith(SEGMENT_PREFIX)]
    except OSError:
        return []
    uid = os.getuid()
    mine = []
    for name in names:
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid == uid and not os.path.islink(path):
            mine.append((path, st.st_size))
    if not mine:
        return []
    held = _held_paths(os.path.realpath(directory))
    real = os.path.realpath(directory)
    removed, freed = [], 0
    for path, size in mine:
        if os.path.join(real, os.path.basename(path)) in held:
            continue  # a live job's
        try:
            os.unlink(path)
        except OSError:
            continue
        removed.append(path)
        freed += size
    if removed:
        log.info("removed %d shared-memory segment(s) of ended MPI jobs from %s (%.1f MiB)",
                 len(removed), directory, freed / (1 << 20))
    return removed
