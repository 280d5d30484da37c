"""Where ``Saver.save`` writes: the prefix for a step and its directory, as TF1's Saver."""

from __future__ import annotations

import os

from ..errors import CkptsyncValueError

__all__ = ["prepare_save_path"]


def prepare_save_path(save_path: str, step: int | None, pad: bool,
                      latest_filename: str) -> tuple[str, str]:
    """``(prefix, directory)`` of a save: ``save_path-<step>`` (``-%08d`` when ``pad``) or
    ``save_path`` itself without a step. The directory must exist, as TF1's Saver (and
    ``tf.compat.v1``'s in TF 2.x) requires; ``CheckpointSaverHook``,
    ``MonitoredTrainingSession`` and the Estimator make theirs.

    Raises:
        ValueError: ``latest_filename`` has a directory part or collides with the prefix;
            the parent directory does not exist ("Parent directory of P doesn't exist,
            can't save.", TF1's message) or is not a directory.
    """
    if os.path.split(latest_filename)[0]:
        raise CkptsyncValueError("'latest_filename' must not contain path components")
    if step is not None:
        prefix = f"{save_path}-{step:08d}" if pad else f"{save_path}-{step}"
    else:
        prefix = os.fspath(save_path)
        if os.path.basename(prefix) == latest_filename:
            raise CkptsyncValueError(
                f"'latest_filename' collides with 'save_path': '{latest_filename}' and "
                f"'{save_path}'")
    save_dir = os.path.dirname(prefix) or "."
    if not os.path.isdir(save_dir):  # as TF1's Saver.save (which names the path as given)
        if os.path.lexists(save_dir):
            raise CkptsyncValueError(
                f"Parent directory of {save_path} is not a directory, can't save.")
        raise CkptsyncValueError(f"Parent directory of {save_path} doesn't exist, can't save.")
    return prefix, save_dir
