"""Atomic publish ("temp path, then finalize by rename") and temp-file sweeping.

Every file ckptsync writes into a checkpoint directory (data files and the state file)
goes through :func:`publish`:

1. write ``<dir>/.<basename>.tmp-<pid>-<n>`` (``n`` a process-wide counter),
2. close it, open it again with ``os.open`` and ``os.fsync`` it,
3. ``os.replace`` it onto the final name (a new inode; nothing is rewritten in place),
4. ``os.fsync`` the directory.

A failure in steps 1-3 removes the temp file and raises an :class:`OpError` naming the
final path and the cause; the final name and every other file are left as they were. A
failure in step 4 raises too (the save is not durable), but the renamed file stays.
Readers never open temp names; :func:`sweep_temp_files` deletes those of dead writers.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import re
import threading
from collections.abc import Callable

from ..errors import (
    CkptsyncError,
    DataLossError,
    OpError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnknownError,
)

logger = logging.getLogger(__name__)

_counter = itertools.count()
_counter_lock = threading.Lock()
TEMP_RE = re.compile(r"\..+\.tmp-(\d+)-(\d+)\Z")
_ERRNO_IN_MESSAGE = re.compile(r"errno = (\d+)")

_EXHAUSTED = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_DENIED = {errno.EACCES, errno.EPERM, errno.EROFS}


def temp_path_for(final_path: str) -> str:
    """Returns a fresh temp name ``<dir>/.<basename>.tmp-<pid>-<n>`` beside ``final_path``."""
    with _counter_lock:
        n = next(_counter)
    directory, base = os.path.split(final_path)
    return os.path.join(directory, f".{base}.tmp-{os.getpid()}-{n}")


def os_error_errno(exc: BaseException) -> int | None:
    """Returns the errno of an OSError, also when h5py only put it in the message."""
    code = getattr(exc, "errno", None)
    if isinstance(code, int) and code:
        return code
    found = _ERRNO_IN_MESSAGE.findall(str(exc))
    return int(found[-1]) if found else None


def op_error_from_os_error(exc: BaseException, path: str, action: str) -> OpError:
    """Maps an OSError (or h5py's error) to TF's error class, naming ``path`` and cause.

    ENOSPC/EDQUOT/EFBIG → ResourceExhaustedError; EACCES/EPERM/EROFS →
    PermissionDeniedError; EIO → DataLossError; anything else → UnknownError.
    """
    code = os_error_errno(exc)
    cause = os.strerror(code) if code else type(exc).__name__
    detail = " ".join(str(exc).split())
    message = f"Failed to {action} {path}: {cause} (errno {code}; {detail})"
    if code in _EXHAUSTED:
        return ResourceExhaustedError(None, None, message)
    if code in _DENIED:
        return PermissionDeniedError(None, None, message)
    if code == errno.EIO:
        return DataLossError(None, None, message)
    return UnknownError(None, None, message)


def fsync_path(path: str, directory: bool = False) -> None:
    """Opens ``path`` read-only and fsyncs it. Raises OSError on failure."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:  # keep the original error; the sweeper retries later
        logger.warning("Could not remove temp file %s: %s", path, e)


def publish(final_path: str, write: Callable[[str], None], what: str = "write",
            sync_directory: bool = True) -> None:
    """Writes ``final_path`` atomically and durably through a temp file.

    Args:
        final_path: the file to create or replace, e.g. ``ckpts/model.ckpt-5.h5``.
        write: called with the temp path; must create that file (exclusively) and close
            it. Exceptions it raises are mapped as below.
        what: the action for messages, e.g. ``"write checkpoint"``.
        sync_directory: False skips step 4, for a caller that publishes another file
            in the same directory right after (whose step 4 covers both renames).

    Raises:
        ResourceExhaustedError, PermissionDeniedError, DataLossError, UnknownError: an
            OSError at any step, mapped by errno; the message names ``final_path``.
        CkptsyncError: raised by ``write`` itself, passed through.

    Thread-safety: safe to call from several threads for different final paths.
    """
    directory = os.path.dirname(final_path) or "."
    tmp = temp_path_for(final_path)
    try:
        write(tmp)
        fsync_path(tmp)
        os.replace(tmp, final_path)
    except CkptsyncError:
        _remove_quietly(tmp)
        raise
    except Exception as e:  # OSError, or h5py's RuntimeError carrying "errno = N"
        _remove_quietly(tmp)
        raise op_error_from_os_error(e, final_path, what) from e
    except BaseException:
        _remove_quietly(tmp)
        raise
    if not sync_directory:
        return
    try:
        fsync_path(directory, directory=True)
    except OSError as e:
        raise op_error_from_os_error(e, final_path, "fsync the directory of") from e


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    return True


def sweep_temp_files(checkpoint_dir: str, force: bool = False,
                     pid: int | None = None) -> list[str]:
    """Deletes temp files (``.<name>.tmp-<pid>-<n>``) left by dead writers.

    A writer killed mid-save leaves its temp file behind; a new Saver calls this on
    start. Files whose pid is alive (this process included) are kept unless ``force``.
    Pids are only meaningful within one pid namespace: run this from the writer's host
    and container, or pass ``force=True`` when no writer can be running.

    Args:
        checkpoint_dir: the directory to sweep (not recursive).
        force: delete every temp file regardless of its pid.
        pid: only this (dead) writer's temp files, e.g. a writer process just reaped.

    Returns:
        The full paths removed, sorted. A missing directory gives ``[]``.

    Raises:
        PermissionDeniedError, UnknownError: a temp file could not be removed.
    """
    try:
        names = os.listdir(checkpoint_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    for name in sorted(names):
        m = TEMP_RE.match(name)
        if not m or (pid is not None and int(m.group(1)) != pid) or (
                not force and _pid_alive(int(m.group(1)))):
            continue
        path = os.path.join(checkpoint_dir, name)
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise op_error_from_os_error(e, path, "remove temp file") from e
        logger.info("Removed stale temp file %s", path)
        removed.append(path)
    return removed
