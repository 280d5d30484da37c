"""What a :class:`~.manager.ModelManager` tells people about the version it serves: why
nothing is served yet (the 503 of predict and ``/readyz``), a pinned version whose file
is gone, admin policy changes, and going back to an older latest.

Only text and logging; no state but the set of warnings already given. The manager is its
only caller.
"""

from __future__ import annotations

import logging
import os
import threading

from .loader import Snapshot
from .policy import VersionPolicy

__all__ = ["PinnedFileWatch", "describe", "log_policy_change", "not_loaded_message",
           "went_back_message"]

# The manager's logger, so logging configuration of ckptsync.serving.manager applies.
logger = logging.getLogger("ckptsync.serving.manager")


def describe(policy: VersionPolicy) -> str:
    """``"latest"`` or ``"pinned to version N"``."""
    return "latest" if policy.pinned is None else f"pinned to version {policy.pinned}"


def not_loaded_message(source_dir: str, pinned: int | None, mismatch: str | None) -> str:
    """Why nothing is served: the model does not match the checkpoints (``mismatch``, the
    loader's one line naming both sides' variables), or what it waits for."""
    if mismatch is not None:
        return (f"no version of the model is loaded: the model does not match the "
                f"checkpoints in {source_dir}: {mismatch}")
    waiting = ("a checkpoint" if pinned is None
               else f"version {pinned} (the server is pinned to it)")
    return f"no version of the model is loaded yet; waiting for {waiting} in {source_dir}"


def went_back_message(version: int, previous: int) -> str:
    """The warning when the latest policy serves a version older than the one before."""
    # The state file is the source of truth (TF1's latest_checkpoint), so the latest can
    # go back: a trainer restarted without resuming, a restored backup.
    return (f"serving version {version}, older than version {previous} which it replaces: "
            "the state file now names it as the latest (a trainer started over without "
            "resuming, or the directory was rolled back); pin a version to serve another one")


def log_policy_change(old: VersionPolicy, new: VersionPolicy, requested_by: str | None,
                      serving: int | None) -> None:
    """Logs a change of the version policy; one by an admin route (``requested_by``, e.g.
    ``"POST /v1/models/mlp:pin from 127.0.0.1"``) says so."""
    served = "nothing" if serving is None else f"version {serving}"
    if requested_by is not None:
        logger.warning("admin: version policy %s -> %s, requested by %s (serving %s)",
                       describe(old), describe(new), requested_by, served)
    elif old != new:
        logger.info("version policy %s -> %s (serving %s)", describe(old), describe(new),
                    served)


class PinnedFileWatch:
    """Notices a pinned version served from memory after its file was deleted (the
    trainer's retention): a restart could not load it again.

    Thread-safety: :meth:`check` may be called from any thread; it warns once per
    (version, prefix).
    """

    def __init__(self) -> None:
        self._warned: set[tuple[int, str]] = set()
        self._lock = threading.Lock()

    def check(self, snap: Snapshot | None, pinned: int | None, by_config: bool = False
              ) -> str | None:
        """The warning if ``snap`` is the ``pinned`` version and its file is gone, else
        None; logs it the first time (one ``stat``). ``by_config``: the version is one a
        model config's ``model_version_policy { specific }`` names (no admin pin)."""
        if snap is None or pinned is None or snap.version != pinned:
            return None
        path = snap.prefix + ".h5"
        if os.path.exists(path):
            return None
        what, remedy = ((f"version {pinned} (named by model_version_policy specific)",
                         "name a version that is on disk in the model config") if by_config
                        else (f"pinned version {pinned}", "pin a version that is on disk, or "
                              "unpin"))
        message = (f"{what} is served from memory but its file {path} was deleted (the "
                   f"trainer's retention?): a restart cannot load it again; {remedy}")
        with self._lock:
            first = (snap.version, snap.prefix) not in self._warned
            self._warned.add((snap.version, snap.prefix))
        if first:
            logger.warning("%s", message)
        return message
