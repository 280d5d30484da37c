"""The MPI runtime behind ``cs.distributed``: launch detection, lazy ``mpi4py``, the
collective watchdog, and how a failing rank ends the job.

Single process (no ``mpiexec``): ``size() == 1``, ``rank() == 0`` and ``mpi4py`` is never
imported, so nothing MPI needs to be installed. Under ``mpiexec`` (detected from the
launcher's environment: ``PMI_SIZE``, ``PMIX_RANK``, ``OMPI_COMM_WORLD_SIZE``) the first
call that needs MPI imports ``mpi4py`` and initializes ``MPI.COMM_WORLD``.

Failure model (no silent hang):
    * A rank killed by a signal: ``mpiexec`` notices at once and kills the others; the job
      exits non-zero.
    * A rank that ends with an error (an uncaught exception, or a non-zero exit inside
      :func:`failure_ends_job`): at exit it calls ``MPI_Abort`` with its code instead of
      ``MPI_Finalize`` (which would wait for ranks that wait for it), so ``mpiexec`` ends
      every rank at once and exits with that code.
    * A rank that stops answering (stuck, stopped, a different sequence of collectives): a
      watchdog thread aborts the job (``MPI_Abort``) when one collective takes longer than
      ``collective_timeout_s`` (default 300 s; ``CKPTSYNC_COLLECTIVE_TIMEOUT_S``).
    * MPICH's ``/dev/shm/mpich_shm_*`` segments that an aborted job leaves behind are
      removed by the next job's ``init`` (only those no live process holds:
      :mod:`._shm_leftovers`).

Thread-safety: collectives are meant to be called from one thread per rank (the training
loop); ``init`` is idempotent and thread-safe.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from ..errors import CkptsyncRuntimeError
from ._shm_leftovers import remove_dead_segments

__all__ = ["init", "is_initialized", "rank", "size", "local_rank", "local_size",
           "launched_under_mpi", "failure_ends_job", "abort", "DEFAULT_COLLECTIVE_TIMEOUT_S",
           "world_comm", "mpi_module", "under_watchdog"]

log = logging.getLogger("ckptsync.distributed")

DEFAULT_COLLECTIVE_TIMEOUT_S = 300.0
_LAUNCHER_VARS = ("PMI_SIZE", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE")


def launched_under_mpi() -> bool:
    """True when this process was started by an MPI launcher (``mpiexec``, ``srun``)."""
    return any(v in os.environ for v in _LAUNCHER_VARS)


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.initialized = False
        self.mpi: Any = None          # the mpi4py.MPI module, or None
        self.comm: Any = None         # MPI.COMM_WORLD, or None when single-process
        self.rank = 0
        self.size = 1
        self.local_rank = 0
        self.local_size = 1
        self.failed = False
        self.fail_code: int | None = None
        self.watchdog: _Watchdog | None = None


_S = _State()


def init(collective_timeout_s: float | None = None) -> None:
    """Initializes ckptsync's MPI use (idempotent; every other function calls it).

    Args:
        collective_timeout_s: abort the job when one collective takes longer (seconds);
            default ``CKPTSYNC_COLLECTIVE_TIMEOUT_S`` or 300. Only the first call sets it.

    Raises:
        RuntimeError: launched under ``mpiexec`` but ``mpi4py`` is not installed
            (``pip install 'ckptsync[mpi]'``).
    """
    if _S.initialized:
        return
    with _S.lock:
        if _S.initialized:
            return
        if launched_under_mpi():
            _init_mpi(collective_timeout_s)
        _S.initialized = True


def _init_mpi(collective_timeout_s: float | None) -> None:
    try:
        import mpi4py
    except ImportError:
        raise CkptsyncRuntimeError(
            "This process was launched by mpiexec but mpi4py is not installed; install the "
            "MPI extra: pip install 'ckptsync[mpi]'.") from None
    # Finalize ourselves at exit, and only after a clean run (see the module docstring).
    mpi4py.rc.finalize = False
    # Before MPI_Init: MPICH's segments of ended jobs (an abort leaves them) go; a live
    # job's (this one's other ranks' included) are held, and stay.
    remove_dead_segments()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    _S.mpi, _S.comm = MPI, comm
    _S.rank, _S.size = comm.Get_rank(), comm.Get_size()
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=_S.rank)
    _S.local_rank, _S.local_size = local.Get_rank(), local.Get_size()
    local.Free()
    if collective_timeout_s is None:
        collective_timeout_s = float(os.environ.get("CKPTSYNC_COLLECTIVE_TIMEOUT_S",
                                                    DEFAULT_COLLECTIVE_TIMEOUT_S))
    if _S.size > 1:
        _S.watchdog = _Watchdog(collective_timeout_s)
        _S.watchdog.start()
        previous = sys.excepthook

        def excepthook(tp: type[BaseException], value: BaseException,
                       tb: TracebackType | None) -> None:
            _S.failed = True
            previous(tp, value, tb)

        sys.excepthook = excepthook
    atexit.register(_at_exit)


def _at_exit() -> None:
    if _S.watchdog is not None:
        _S.watchdog.close()
    if _S.mpi is None or _S.mpi.Is_finalized():
        return
    if _S.failed:
        # Never MPI_Finalize after a failure (it would wait for ranks that wait for us).
        # MPI_Abort ends every rank at once and mpiexec exits with our code; merely exiting
        # unfinalized usually does the same, but not reliably on a loaded machine.
        if _S.size > 1 and _S.comm is not None:
            abort(_S.fail_code or 1)
        return
    _S.mpi.Finalize()


def is_initialized() -> bool:
    return _S.initialized


def rank() -> int:
    """This process's rank in ``[0, size())``; 0 without MPI."""
    init()
    return _S.rank


def size() -> int:
    """The number of ranks; 1 without MPI."""
    init()
    return _S.size


def local_rank() -> int:
    """This process's rank among the ranks on its host; 0 without MPI."""
    init()
    return _S.local_rank


def local_size() -> int:
    """The number of ranks on this host; 1 without MPI."""
    init()
    return _S.local_size


def world_comm() -> Any:
    """``MPI.COMM_WORLD`` (an ``mpi4py.MPI.Intracomm``), or None without MPI; for this
    package's collectives (call them as :mod:`.collectives` says: one thread per rank)."""
    init()
    return _S.comm


def mpi_module() -> Any:
    """The ``mpi4py.MPI`` module, or None without MPI (it is never imported then)."""
    init()
    return _S.mpi


@contextlib.contextmanager
def under_watchdog(what: str) -> Iterator[None]:
    """Runs the block (one collective) under the watchdog: if it takes longer than the
    collective timeout, the job is aborted with a line naming ``what``. No effect without
    MPI. One block at a time per rank (the collectives' rule)."""
    wd = _S.watchdog
    if wd is None:
        yield
        return
    wd.arm(what)
    try:
        yield
    finally:
        wd.disarm()


_OUTPUT_GRACE_S = 0.5


def abort(code: int = 1) -> None:
    """Ends every rank of the job at once with ``code`` (``MPI_Abort``); plain exit
    without MPI.

    What this rank wrote to stdout/stderr is flushed first, and ``mpiexec``'s proxy is
    given ``0.5 s`` to forward it: the abort makes the proxy kill and exit, and output
    still in its pipe was then lost (seen in CI: the watchdog's line, and a failing
    rank's error line, missing from ``mpiexec``'s stderr on a loaded machine).
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if _S.comm is not None and _S.size > 1:
        time.sleep(_OUTPUT_GRACE_S)
        _S.comm.Abort(code)
    os._exit(code)


class failure_ends_job(contextlib.ContextDecorator):  # noqa: N801 - used like a function
    """A block whose failure on one rank ends the whole MPI job, promptly, with its code.

    An exception leaving the block (including ``SystemExit``/click errors with a non-zero
    exit code) marks this rank as failed: at exit it skips ``MPI_Finalize``, and
    ``mpiexec`` ends the other ranks. The exception itself propagates unchanged, so the
    error line is still printed. No effect without MPI.

    Example:
        >>> with failure_ends_job():
        ...     pass
    """

    def __enter__(self) -> failure_ends_job:
        return self

    def __exit__(self, tp: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if value is None:
            return
        code: Any = getattr(value, "exit_code", None)
        if isinstance(value, SystemExit):
            code = value.code
        if code is None and not isinstance(value, SystemExit):
            code = 1
        if code not in (0, None):
            _S.failed = True
            _S.fail_code = code if isinstance(code, int) else 1


class _Watchdog:
    """One daemon thread that aborts the job when an armed collective overruns."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self._deadline: float | None = None
        self._what = ""
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ckptsync-mpi-watchdog",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closed.set()

    def arm(self, what: str) -> None:
        self._what = what
        self._deadline = time.monotonic() + self.timeout_s

    def disarm(self) -> None:
        self._deadline = None

    def _run(self) -> None:
        tick = min(1.0, max(0.05, self.timeout_s / 10))
        while not self._closed.wait(tick):
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline:
                msg = (f"ckptsync.distributed: rank {_S.rank}: {self._what} did not complete "
                       f"within {self.timeout_s:g} s (another rank died, hangs or runs a "
                       "different graph); aborting the job.")
                log.error(msg)
                print(msg, file=sys.stderr, flush=True)
                _S.failed = True
                abort(1)
