"""What :class:`.async_writer.AsyncCheckpointWriter` does after its writer process died
(or was killed as hung) with jobs queued: tell whether the job it held got past its
publish, and remove the dead writer's temp files. Never raises.

Thread-safety: plain functions over the file system; safe from any thread.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any, Protocol

from ..checkpoint import CheckpointReader, get_checkpoint_state, sweep_temp_files

__all__ = ["Job", "remove_leftovers", "was_published"]

logger = logging.getLogger("ckptsync.workers.async_writer")


class Job(Protocol):
    """A queued job as these functions read it."""

    @property
    def prefix(self) -> str: ...
    @property
    def state(self) -> Any: ...
    @property
    def rewrites(self) -> bool: ...
    @property
    def submitted_unix_s(self) -> float: ...


def was_published(job: Job) -> bool:
    """True when the state file names ``job``'s checkpoint as the latest and its data
    file is the one this job wrote (created after it was submitted: a same-named
    checkpoint published earlier, by this Saver or any other, does not count): the job
    got past its publish, only its deletions may be missing. Any doubt says False (the
    save is then reported as failed, never wrongly as saved)."""
    if job.state is None or job.rewrites:
        return False
    try:
        state = get_checkpoint_state(job.state.save_dir, job.state.latest_filename)
        if state is None or os.path.abspath(state.model_checkpoint_path) != job.prefix:
            return False
        with CheckpointReader(job.prefix) as reader:
            return reader.created_unix_s >= job.submitted_unix_s
    except Exception:
        return False


def remove_leftovers(lost: Sequence[Job], pid: int) -> None:
    """After worker ``pid`` died: removes its temp files in the lost jobs' directories
    (only its own: by pid). A data file it renamed into place before dying is left: it
    cannot be told apart from a same-named checkpoint saved earlier, which must never be
    deleted. Problems are logged, never raised."""
    for directory in sorted({os.path.dirname(job.prefix) for job in lost}):
        try:
            sweep_temp_files(directory, pid=pid)
        except Exception as e:
            logger.warning("could not remove the dead writer's temp files in %s: %s",
                           directory, e)
