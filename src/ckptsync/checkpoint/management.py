"""TF1's checkpoint helper functions over ckptsync's one-file-per-checkpoint layout.

```
ckpts/
  checkpoint                          state file (see state.py)
  model.ckpt-1200.h5                  checkpoint "ckpts/model.ckpt-1200"
  model.ckpt-1100.h5
  .model.ckpt-1300.h5.tmp-<pid>-<n>   being written; never read
```

A checkpoint is named by its prefix; it exists when ``<prefix>.h5`` exists, or, for TF's
own checkpoints, ``<prefix>.index`` (see tf_bundle.py). Nothing here
scans the directory for data files: what the state file names is what counts.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from ..errors import CkptsyncValueError
from ._atomic import op_error_from_os_error
from ._format import data_path
from .reader import CheckpointReader
from .state import get_checkpoint_state
from .tf_bundle import data_file_path, index_path, is_tf_checkpoint

__all__ = [
    "latest_checkpoint",
    "checkpoint_exists",
    "get_checkpoint_mtimes",
    "remove_checkpoint",
    "load_checkpoint",
    "list_variables",
    "load_variable",
    "wait_for_new_checkpoint",
    "checkpoints_iterator",
    "NewCheckpointReader",
]

logger = logging.getLogger(__name__)

# Seconds between polls of latest_checkpoint; a module attribute so tests can shorten it.
_POLL_INTERVAL_S = 1.0


def latest_checkpoint(checkpoint_dir: str, latest_filename: str | None = None) -> str | None:
    """Returns the newest checkpoint prefix, as TF1's ``tf.train.latest_checkpoint``.

    The state file's ``model_checkpoint_path`` if ``<path>.h5`` exists, else None (an
    error is logged; the directory is not scanned for other checkpoints).

    Raises:
        CkptsyncValueError: as :func:`get_checkpoint_state` (empty model path, or an
            entry outside the directory).

    Example:
        >>> latest_checkpoint("ckpts")
        'ckpts/model.ckpt-1200'
    """
    state = get_checkpoint_state(checkpoint_dir, latest_filename)
    if state is None or not state.model_checkpoint_path:
        return None
    if checkpoint_exists(state.model_checkpoint_path):
        return state.model_checkpoint_path
    logger.error("Couldn't match files for checkpoint %s", state.model_checkpoint_path)
    return None


def checkpoint_exists(checkpoint_prefix: str) -> bool:
    """True if ``<checkpoint_prefix>.h5`` (or a TF checkpoint's ``.index``) is a file, as
    TF1's ``checkpoint_exists``."""
    prefix = os.fspath(checkpoint_prefix)
    if is_tf_checkpoint(prefix):
        return os.path.isfile(index_path(prefix))
    return os.path.isfile(data_path(prefix))


def get_checkpoint_mtimes(checkpoint_prefixes: Iterable[str]) -> list[float]:
    """Returns the mtimes (seconds since the epoch) of the checkpoints that exist.

    As TF1's ``get_checkpoint_mtimes``: missing checkpoints are skipped, so the result
    may be shorter than the input.
    """
    mtimes = []
    for prefix in checkpoint_prefixes:
        try:
            path = os.fspath(prefix)
            path = index_path(path) if is_tf_checkpoint(path) else data_path(path)
            mtimes.append(os.stat(path).st_mtime)
        except OSError:
            continue
    return mtimes


def remove_checkpoint(checkpoint_prefix: str) -> None:
    """Deletes ``<checkpoint_prefix>.h5``, as TF1's ``remove_checkpoint``.

    A missing file is logged as a warning, not raised. Readers that have the file open
    keep reading it (POSIX unlink semantics).

    Raises:
        PermissionDeniedError, UnknownError: the file exists but could not be removed.
    """
    prefix = os.fspath(checkpoint_prefix)
    if is_tf_checkpoint(prefix):  # TF's two files: the index first, so no reader sees half
        for path in (index_path(prefix), data_file_path(prefix)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                logger.warning("Checkpoint %s to remove lacks %s", checkpoint_prefix, path)
            except OSError as e:
                raise op_error_from_os_error(e, path, "remove checkpoint") from e
        return
    path = data_path(prefix)
    try:
        os.unlink(path)
    except FileNotFoundError:
        logger.warning("Checkpoint %s to remove does not exist: %s", checkpoint_prefix, path)
    except OSError as e:
        raise op_error_from_os_error(e, path, "remove checkpoint") from e


def remove_evicted(checkpoint_prefixes: Iterable[str]) -> None:
    """Removes checkpoints that retention evicted, as TF1's Saver does after writing the
    state file: an error is logged and the next prefix tried, never raised."""
    for prefix in checkpoint_prefixes:
        try:
            remove_checkpoint(prefix)
        except Exception as e:  # as TF1: logged, not raised
            logger.warning("Ignoring error deleting checkpoint %s: %s", prefix, e)


def _resolve(ckpt_dir_or_file: str) -> str:
    path = os.fspath(ckpt_dir_or_file)
    if os.path.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise CkptsyncValueError(
                f"Couldn't find 'checkpoint' file or checkpoints in given directory {path}"
            )
        return latest
    return path


def NewCheckpointReader(filepattern: str) -> CheckpointReader:  # noqa: N802 (TF's name)
    """Opens a checkpoint reader, as TF1's ``tf.train.NewCheckpointReader``.

    Raises:
        NotFoundError: no such checkpoint. DataLossError: a damaged file.
    """
    return CheckpointReader(filepattern)


def load_checkpoint(ckpt_dir_or_file: str) -> CheckpointReader:
    """Opens the checkpoint at a prefix, or the latest one in a directory.

    As TF1's ``tf.train.load_checkpoint``. The caller closes the returned reader.

    Raises:
        CkptsyncValueError: a directory without a state file naming an existing
            checkpoint ("Couldn't find 'checkpoint' file or checkpoints in given
            directory D").
        NotFoundError, DataLossError: as :class:`CheckpointReader`.
    """
    return CheckpointReader(_resolve(ckpt_dir_or_file))


def list_variables(ckpt_dir_or_file: str) -> list[tuple[str, list[int]]]:
    """Returns ``[(key, shape), ...]`` sorted by key, as TF1's ``tf.train.list_variables``.

    Example:
        >>> list_variables("ckpts")[:3]
        [('beta1_power', []), ('beta2_power', []), ('dense0/b', [128])]
    """
    with load_checkpoint(ckpt_dir_or_file) as reader:
        return sorted(reader.get_variable_to_shape_map().items())


def load_variable(ckpt_dir_or_file: str, name: str) -> np.ndarray:
    """Reads one variable (verified), as TF1's ``tf.train.load_variable``.

    ``name`` may carry TF's ``:0`` output suffix, which is stripped.

    Raises:
        NotFoundError: "Key NAME not found in checkpoint"; or no such checkpoint.
        DataLossError: a damaged file or variable.
    """
    if name.endswith(":0"):
        name = name[:-2]
    with load_checkpoint(ckpt_dir_or_file) as reader:
        return reader.get_tensor(name)


def wait_for_new_checkpoint(
    checkpoint_dir: str,
    last_checkpoint: str | None = None,
    seconds_to_sleep: float | None = None,
    timeout: float | None = None,
) -> str | None:
    """Polls until ``latest_checkpoint`` differs from ``last_checkpoint``.

    As TF's ``wait_for_new_checkpoint``. ``seconds_to_sleep`` defaults to one second.

    Returns:
        The new prefix, or None after ``timeout`` seconds (never, if timeout is None).
    """
    sleep_s = _POLL_INTERVAL_S if seconds_to_sleep is None else seconds_to_sleep
    stop_time = None if timeout is None else time.time() + timeout
    while True:
        path = latest_checkpoint(checkpoint_dir)
        if path is not None and path != last_checkpoint:
            return path
        if stop_time is not None and time.time() + sleep_s > stop_time:
            return None
        time.sleep(sleep_s)


def checkpoints_iterator(
    checkpoint_dir: str,
    min_interval_secs: float = 0,
    timeout: float | None = None,
    timeout_fn: Callable[[], bool] | None = None,
) -> Iterator[str]:
    """Yields each new checkpoint prefix as it appears, as TF1's ``checkpoints_iterator``.

    Polls :func:`latest_checkpoint` every second. Waits at least ``min_interval_secs``
    between yields. When ``timeout`` seconds pass without a new checkpoint: stops if
    ``timeout_fn`` is None or returns True, else keeps waiting.

    Example:
        >>> for prefix in checkpoints_iterator("ckpts", timeout=0.1):
        ...     print(prefix)  # evaluate(prefix)
        ckpts/model.ckpt-1200
    """
    checkpoint_path = None
    while True:
        new_path = wait_for_new_checkpoint(checkpoint_dir, checkpoint_path, timeout=timeout)
        if new_path is None:
            if timeout_fn is None:
                logger.info("Timed-out waiting for a checkpoint.")
                return
            if timeout_fn():
                return
            continue
        start = time.time()
        checkpoint_path = new_path
        yield checkpoint_path
        time_to_next = start + min_interval_secs - time.time()
        if time_to_next > 0:
            time.sleep(time_to_next)
