"""Where ``Saver.save`` writes: the prefix for a step and its directory, as TF1's Saver."""

from __future__ import annotations

import os

from .. import checkpoint as ckpt
from ..errors import CkptsyncValueError

__all__ = ["prepare_save_path"]


def prepare_save_path(save_path: str, step: int | None, pad: bool,
                      latest_filename: str) -> tuple[str, str]:
    """``(prefix, directory)`` of a save: ``save_path-<step>`` (``-%08d`` when ``pad``) or
    ``save_path`` itself without a step. A missing directory is created, as TF1's Saver
    does (its file system layer makes the directories of a file it writes).

    Raises:
        ValueError: ``latest_filename`` has a directory part or collides with the prefix;
            the parent path exists and is not a directory.
        PermissionDeniedError, ResourceExhaustedError, UnknownError: the directory could
            not be created (names it).
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
    if not os.path.isdir(save_dir):
        try:
            os.makedirs(save_dir, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise CkptsyncValueError(
                f"Parent directory of {save_path} is not a directory, can't save.") from None
        except OSError as e:
            raise ckpt.op_error_from_os_error(e, save_dir, "create the directory") from None
    return prefix, save_dir
