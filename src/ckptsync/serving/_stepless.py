"""Versions for checkpoints saved without a step.

TF1 code often saves to one path, ``saver.save(sess, "ckpts/model.ckpt")`` every N steps,
replacing the file each time: the prefix has no ``-<step>`` suffix to take the version
from. Such a checkpoint's version is the global step recorded in its file (``Saver``
records the graph's global step when it has one), else a number that grows with each new
file published at that path: the file's modification time in milliseconds since the
epoch, raised to one more than the path's last version when that is not larger (a clock
set back, a file copied with its old time). A file is new when its (device, inode, size,
mtime) differ from the last one seen; an atomic publish always gives a new inode.

The numbers never go backwards while the source runs; they are below 2**53, so JSON
clients read them exactly.

Thread-safety: one :class:`StepLessVersions` per source, called under the source's lock.
"""

from __future__ import annotations

import os
import stat

from .. import checkpoint as ckpt

__all__ = ["StepLessVersions"]

_MAX_PATHS = 1024  # paths remembered; the state file names only a few


class StepLessVersions:
    """The version of each step-less checkpoint prefix, per published file."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[tuple[int, int, int, int], int]] = {}

    def version(self, prefix: str) -> int | None:
        """The version of the file now at ``prefix + ".h5"``; None if there is no regular
        file there. Opens the file (its header only) once per new file, for its step."""
        try:
            st = os.stat(prefix + ".h5")
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        sig = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        known = self._known.get(prefix)
        if known is not None and known[0] == sig:
            return known[1]
        version = _recorded_step(prefix)
        if version is None:
            version = st.st_mtime_ns // 1_000_000
            if known is not None and version <= known[1]:
                version = known[1] + 1
        if len(self._known) >= _MAX_PATHS and prefix not in self._known:
            self._known.clear()
        self._known[prefix] = (sig, version)
        return version


def _recorded_step(prefix: str) -> int | None:
    """The ``global_step`` the file records, or None (none recorded, or unreadable: the
    loader reports a damaged file)."""
    try:
        with ckpt.CheckpointReader(prefix) as reader:
            return reader.global_step
    except Exception:
        return None
