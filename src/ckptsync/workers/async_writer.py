"""AsyncCheckpointWriter: checkpoints written by a background *process*.

``train.Saver(async_save=True)`` owns one writer. Who calls what, in what order::

    trainer thread                         writer process (python, one per writer)
    --------------                         ---------------------------------------
    submit(prefix, arrays, state, delete)
      wait for the previous job
      copy arrays into shared memory  -->  write_checkpoint(prefix)   temp, fsync, rename
      send the job, return                 update_checkpoint_state    only after that
    ... training changes the variables     remove_checkpoint(evicted)  only after that
    wait() / next submit / close()    <--  "ok" or the error (type and message)

The copy is the only time the trainer is blocked; hashing, HDF5 encoding, ``write`` and
``fsync`` run in the other process, so they never hold the trainer's interpreter lock.
The shared memory is an anonymous ``memfd`` (an unlinked temp file where memfd is
missing) sent over a Unix socket, reused from save to save (one copy of the variables);
it vanishes with the last process that maps it, so a SIGKILL leaks nothing; one that
cannot grow is the submit's ResourceExhaustedError. The worker exits when its socket
closes (the owner closed, or died); it ignores SIGINT (Ctrl-C does not cut a save short).

The state file is rewritten by the worker only after the data file is durable, so it
never names a checkpoint that was not fully written; a worker that dies after publishing
a job's state file, before its reply, has written that checkpoint, and it counts as
saved (the owner removes the checkpoints that job evicted). A failed job (an error in the
worker, or the worker dying) is raised by the next :meth:`~AsyncCheckpointWriter.submit`,
:meth:`~AsyncCheckpointWriter.wait` or :meth:`~AsyncCheckpointWriter.close`; the next
submit after that starts a fresh worker.

A worker that stops answering is treated as one that died: while a job runs it sends a
heartbeat every 0.5 s, and a worker silent for ``silence_timeout_s`` (30 s by default)
while the owner waits for it (SIGSTOPped, frozen) is killed
(:meth:`~.process.WorkerProcess.await_answer`); the saves it held are reported failed
(UnknownError naming the first), never as saved, and the next submit starts another.

Thread-safety: not thread-safe; one owner (thread) calls submit/wait/close.
"""

from __future__ import annotations

import collections
import logging
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NamedTuple

import numpy as np

from .. import errors
from ..checkpoint import op_error_from_os_error
from ..checkpoint.management import remove_evicted
from ..checkpoint.writer import check_global_step, metadata_json, prepare_arrays
from ..errors import CkptsyncRuntimeError, CkptsyncValueError, UnknownError
from ._writer_recovery import remove_leftovers, was_published
from .frames import NOT_READY, FrameReader, error_from_reply, send_frame
from .incremental_jobs import IncrementalJob
from .placement import pin_process, writer_cpus
from .process import WorkerProcess, python_command
from .shared_arrays import ArrayLayout, SharedBuffer

__all__ = ["AsyncCheckpointWriter", "StateUpdate"]

logger = logging.getLogger(__name__)

# The worker's command line; the socket's fd number is appended. A module attribute so
# tests can wrap the worker (e.g. to inject a failing fsync).
WORKER_COMMAND: list[str] = python_command("ckptsync.workers._writer_child", "worker_main")
_CLOSE_TIMEOUT_S = 60.0
_MAX_IN_FLIGHT = 16
_IN_FLIGHT_BUDGET_BYTES = 64 << 20
_GROW_BYTES = 1 << 20
_SILENCE_TIMEOUT_S = 30.0
_START_GRACE_S = 30.0  # a fresh worker's first answer also waits for its imports


@dataclass(frozen=True)
class StateUpdate:
    """The state file (``latest_filename``) the worker writes once the data file is
    durable: in ``save_dir`` (absolute), naming ``model_checkpoint_path`` (the new
    checkpoint's absolute prefix) and ``all_model_checkpoint_paths`` (oldest first)."""

    save_dir: str
    model_checkpoint_path: str
    all_model_checkpoint_paths: list[str]
    latest_filename: str = "checkpoint"


class _Slot:
    """One shared buffer the owner copies a save into; the worker maps it by index."""

    def __init__(self) -> None:
        self.buffer: SharedBuffer | None = None
        self.sent = False  # the worker has this buffer's fd
        self.layout: ArrayLayout | None = None  # what ``targets`` were made for
        self.targets: list[np.ndarray] = []

    def close(self) -> None:
        self.targets, self.layout = [], None
        if self.buffer is not None:
            self.buffer.close()
            self.buffer = None

    def copy_in(self, layout: ArrayLayout, arrays: Mapping[str, np.ndarray],
                incremental: IncrementalJob | None = None) -> None:
        """Copies ``arrays`` (normalized, in ``layout``'s order; only what ``incremental``
        stores) into this slot's buffer, growing it (a new buffer) when it needs room."""
        size = layout.size_bytes
        if self.buffer is None or self.buffer.size_bytes < size:
            self.close()
            self.buffer = SharedBuffer(max(_GROW_BYTES, -(-size // _GROW_BYTES) * _GROW_BYTES),
                                       "ckptsync-async-save")
            self.sent = False
        if self.layout is not layout:
            self.targets = layout.views(self.buffer.mm)
            self.layout = layout
        if incremental is not None:
            return incremental.copy_in(self.targets, arrays)
        copyto = np.copyto
        for dst, src in zip(self.targets, arrays.values()):
            copyto(dst, src)


class _Queued(NamedTuple):
    """A submitted job not yet confirmed: its prefix, slot, state update, evictions, and
    whether it rewrites a checkpoint that was already published under its prefix."""

    prefix: str
    slot: int
    state: StateUpdate | None
    delete: list[str]
    rewrites: bool
    submitted_unix_s: float


class AsyncCheckpointWriter:
    """Writes checkpoints in a worker process, in order, a few at a time.

    Up to ``max_in_flight`` saves may be queued (each holds its own copy of the
    variables); a save that finds the queue full waits for the oldest. The default
    allows as many copies as fit in 64 MiB, between 1 and 16, so that a slow ``fsync``
    now and then does not stall a trainer that saves often, while a large model keeps
    one copy.

    The worker starts in the constructor (it imports in parallel with the caller's work),
    in a session of its own (a terminal's Ctrl-C does not reach it); with
    ``CKPTSYNC_WRITER_CPUS`` set it is pinned to those CPUs (:mod:`.placement`).

    Args:
        max_in_flight: the most saves queued at once (>= 1); None for the default.
        silence_timeout_s: a worker that sends nothing (no reply, no heartbeat) for this
            many seconds while the owner waits for it is declared hung, killed and
            replaced, and its saves fail; seconds, > 0 (a fresh worker gets 30 s more
            for its first answer: its imports).

    Raises:
        OSError: the worker could not be started.

    Example:
        >>> import numpy as np
        >>> from ckptsync.checkpoint import read_checkpoint
        >>> with AsyncCheckpointWriter() as w:
        ...     w.submit("ckpts/model.ckpt-5", {"w": np.ones(3)}, global_step=5)
        ...     w.wait()
        >>> read_checkpoint("ckpts/model.ckpt-5")["w"].tolist()
        [1.0, 1.0, 1.0]
    """

    def __init__(self, max_in_flight: int | None = None,
                 silence_timeout_s: float = _SILENCE_TIMEOUT_S) -> None:
        if max_in_flight is not None and max_in_flight < 1:
            raise CkptsyncValueError(f"max_in_flight must be >= 1; got {max_in_flight}.")
        if not silence_timeout_s > 0:
            raise CkptsyncValueError(f"silence_timeout_s must be > 0; got {silence_timeout_s}.")
        self._max_in_flight = max_in_flight
        self._silence_timeout_s = float(silence_timeout_s)
        self._answered_pid: int | None = None  # the worker that sent a frame
        self._worker = WorkerProcess(lambda: WORKER_COMMAND, "checkpoint writer",
                                     _CLOSE_TIMEOUT_S)
        self._sock: socket.socket | None = None
        self._reader: FrameReader | None = None
        self._slots: list[_Slot] = []
        self._layout: ArrayLayout | None = None
        self._layout_sent = False
        self._queue: collections.deque[_Queued] = collections.deque()
        self._closed = False
        self._placed: int | None = None  # the worker pid placed
        self.failed_prefix: str | None = None
        # How many submitted saves the last failure lost: the failed one and those queued
        # after it (the last ``failed_count`` submitted before the failure was raised).
        self.failed_count = 0
        self._start()

    # -- worker lifecycle ---------------------------------------------------------------
    def _start(self) -> None:
        self._sock = self._worker.start()
        self._reader = FrameReader(self._sock)
        self._layout_sent = False
        for slot in self._slots:
            slot.sent = False

    def _place(self) -> None:
        """Pins a new worker to the CPUs of ``CKPTSYNC_WRITER_CPUS``, if set (see
        :mod:`.placement`), once per worker, before its first job.

        Raises:
            CkptsyncValueError: a bad ``CKPTSYNC_WRITER_CPUS``.
        """
        pid = self._worker.pid
        if pid is None or pid == self._placed:
            return
        cpus = writer_cpus()  # may raise: a bad setting
        self._placed = pid
        if cpus is not None and pin_process(pid, cpus):
            logger.debug("Checkpoint writer (pid %d) pinned to CPUs %s.", pid, sorted(cpus))

    def _stop(self) -> None:
        self._worker.stop()  # closes the socket and reaps the worker, once
        self._sock = self._reader = None

    @property
    def worker(self) -> WorkerProcess:
        """The writer process's :class:`WorkerProcess` (for health checks and tests)."""
        return self._worker

    @property
    def pid(self) -> int | None:
        """The worker process's pid, or None while no worker runs."""
        return self._worker.pid

    @property
    def in_flight(self) -> str | None:
        """The newest prefix submitted and not yet confirmed written, or None."""
        return self._queue[-1].prefix if self._queue else None

    @property
    def pending_count(self) -> int:
        """How many submitted saves are not yet confirmed written."""
        return len(self._queue)

    @property
    def pending(self) -> list[str]:
        """Prefixes submitted and not yet confirmed written, oldest first."""
        return [q.prefix for q in self._queue]

    def _depth(self, size_bytes: int) -> int:
        if self._max_in_flight is not None:
            return self._max_in_flight
        return max(1, min(_MAX_IN_FLIGHT, _IN_FLIGHT_BUDGET_BYTES // max(size_bytes, 1)))

    # -- jobs ---------------------------------------------------------------------------
    def submit(
        self,
        prefix: str,
        arrays: Mapping[str, np.ndarray],
        global_step: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        state: StateUpdate | None = None,
        delete: Sequence[str] = (),
        require_finite: bool = False,
        rewrites: bool = False,
        incremental: IncrementalJob | None = None,
    ) -> None:
        """Copies ``arrays`` and queues writing ``prefix``; waits only for a free slot.

        Returns once the values are copied; the caller may change ``arrays`` then. The
        worker writes ``<prefix>.h5`` (as :func:`write_checkpoint`), then ``state`` (if
        given), then deletes the ``delete`` prefixes (errors there are logged), one job
        after the other in submission order.

        Args:
            prefix: absolute checkpoint prefix, e.g. ``"/runs/a/model.ckpt-1200"``.
            arrays: key → array, as for :func:`write_checkpoint`.
            global_step, metadata: as for :func:`write_checkpoint`.
            state: the state file to publish after the data file is durable.
            delete: evicted checkpoint prefixes to remove after the state file.
            rewrites: ``prefix`` may already be a published checkpoint (a save of the same
                step again): if the worker dies, the job then counts as failed even
                though the state file names ``prefix`` (its old file may still be there).
            require_finite: the worker refuses to write the copy if a floating-point
                variable holds NaN or Inf; the refusal is that job's failure
                (InvalidArgumentError naming the variable), raised like a write error.
            incremental: write an incremental checkpoint, copying only what it stores.

        Raises:
            CkptsyncTypeError, CkptsyncValueError: bad keys, dtypes, step or metadata
                (checked here, before anything is sent).
            OpError: an *earlier* job failed (its error, naming its path); that job and
                every later one still queued were not written (``failed_prefix`` names
                the first; the state file names none of them).
            CkptsyncRuntimeError: the writer is closed.
        """
        if self._closed:
            raise CkptsyncRuntimeError("The async checkpoint writer is closed.")
        self._collect(block=False)  # surface an earlier failure now
        layout = self._layout
        if layout is not None and layout.fits(arrays):
            prepared = arrays  # the last save's layout: keys valid, arrays normalized
        else:
            prepared = prepare_arrays(arrays)
            if layout is None or not layout.fits(prepared):
                layout = ArrayLayout.of_arrays(prepared)
        step = check_global_step(global_step)
        metadata_text = None if metadata is None else metadata_json(metadata)  # validates
        depth = self._depth(layout.size_bytes)
        while len(self._queue) >= depth:
            self._collect(block=True, count=1)
        # A worker that died while idle is found by the send below (its socket is closed).
        if self._sock is None:
            self._start()
        self._place()
        if layout is not self._layout:
            self._layout, self._layout_sent = layout, False
        busy = {q.slot for q in self._queue}
        index = next((i for i in range(len(self._slots)) if i not in busy), len(self._slots))
        if index == len(self._slots):
            self._slots.append(_Slot())
        slot = self._slots[index]
        try:
            slot.copy_in(layout, prepared, incremental)
        except OSError as e:  # its buffer: EFBIG (RLIMIT_FSIZE), ENOSPC, ENOMEM
            slot.close()
            raise op_error_from_os_error(e, prefix, "stage in memory") from None
        submitted = time.time()  # the worker's file says it was created after this
        job = {
            "prefix": prefix,
            "slot": index,
            "global_step": step,
            "metadata": metadata_text,  # JSON text: encoded once, decoded by the worker
            "state": None if state is None else state.__dict__,
            "delete": list(delete),
            "require_finite": require_finite,
            "incremental": None if incremental is None else incremental.to_doc(),
        }
        try:
            self._send(slot, index, job)
        except OSError:  # the worker died (while idle, if nothing is queued)
            if self._queue:
                self._collect(block=True)  # raises: the queued jobs were lost
            self._stop()
            self._start()
            self._place()
            try:
                self._send(slot, index, job)
            except OSError as e:
                self._stop()
                raise UnknownError(
                    None, None, f"Could not hand checkpoint {prefix} to the writer process: {e}"
                ) from e
        self._queue.append(_Queued(prefix, index, state, list(delete), rewrites, submitted))

    def _send(self, slot: _Slot, index: int, job: dict[str, Any]) -> None:
        assert self._sock is not None and slot.buffer is not None and self._layout is not None
        if not slot.sent:
            fd = slot.buffer.fd
            assert fd is not None  # the owner's buffers keep their fd
            socket.send_fds(self._sock, [b"F"], [fd])
            send_frame(self._sock, b"", {"slot": index})
            slot.sent = True
        if not self._layout_sent:  # the worker keeps the last layout it was sent
            job = {**job, "variables": self._layout.to_doc()}
        send_frame(self._sock, b"J", job)
        self._layout_sent = True

    def _collect(self, block: bool, count: int | None = None,
                 deadline: float | None = None) -> None:
        """Takes the replies of queued jobs, oldest first: ``count`` of them (None: all)
        when ``block``, else only those already there. Raises the first failure after
        dropping every later queued job (the worker skipped them)."""
        taken = 0
        while self._queue and (count is None or taken < count):
            head = self._queue[0]
            prefix = head.prefix
            assert self._reader is not None and self._worker.pid is not None
            hangs = self._worker.hangs
            reply = self._next_reply(block, deadline, prefix)
            if reply is NOT_READY:
                return
            self._queue.popleft()
            taken += 1
            if reply is not None and reply.get("ok"):
                continue
            # This job failed: the worker skips the later queued ones until told to go
            # on; collect their replies, then let it go on.
            if reply is None and was_published(head):
                # The worker died after publishing this checkpoint (before its reply):
                # it is saved; finish its clean-up here. Jobs queued after it were lost.
                pid = self._worker.pid
                logger.warning("The checkpoint writer process (pid %d) died after publishing "
                               "%s; removing the checkpoints it evicted here.", pid, prefix)
                remove_evicted(head.delete)
                if not self._queue:
                    self._stop()
                    continue
                head = self._queue.popleft()
                prefix = head.prefix
            self.failed_prefix = prefix
            dropped = [q.prefix for q in self._queue]
            self.failed_count = 1 + len(dropped)
            if reply is None:
                pid = self._worker.pid
                lost = [head, *self._queue]
                self._queue.clear()
                self._stop()  # reaped: its temp files are now a dead writer's
                remove_leftovers(lost, pid)
                how = ("stopped answering (no heartbeat for "
                       f"{self._silence_timeout_s:g} s) and was killed"
                       if self._worker.hangs != hangs else "died")
                raise UnknownError(
                    None, None,
                    f"The checkpoint writer process (pid {pid}) {how} while writing {prefix}; "
                    f"that checkpoint is not counted as saved (the state file does not name "
                    f"it)" + (f", nor the {len(dropped)} queued after it." if dropped else "."))
            while self._queue:
                self._queue.popleft()
                if self._next_reply(True, None, prefix) is None:
                    self._queue.clear()
                    self._stop()
                    break
            if self._sock is not None:
                try:
                    self._sock.sendall(b"C")
                except OSError:  # died since its reply: the next submit starts another
                    self._stop()
            raise error_from_reply(reply)

    def _next_reply(self, block: bool, deadline: float | None, prefix: str) -> Any:
        """The next reply, skipping heartbeats: a dict, None (the worker died, or was
        killed for ``silence_timeout_s`` without a frame) or NOT_READY (not ``block``).

        Raises:
            DeadlineExceededError: ``deadline`` (time.monotonic()) passed first.
        """
        assert self._reader is not None
        while True:
            reply = self._reader.next(block=False)
            if reply is NOT_READY:
                if not block:
                    return NOT_READY
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left < self._silence_timeout_s:
                    if left <= 0 or not self._worker.readable(left):
                        raise errors.DeadlineExceededError(
                            None, None, f"Checkpoint {prefix} was not written within the timeout.")
                else:
                    silence = self._silence_timeout_s
                    if self._worker.pid != self._answered_pid:
                        silence += _START_GRACE_S
                    self._worker.await_answer(silence, f"writing {prefix}")
                continue
            if reply is not None:
                self._answered_pid = self._worker.pid
            if isinstance(reply, dict) and "alive" in reply:
                continue  # a heartbeat: the worker is busy writing
            return reply

    def wait(self, timeout_s: float | None = None) -> None:
        """Blocks until every queued job is written, published and cleaned up.

        Args:
            timeout_s: give up after this many seconds (the jobs keep running).

        Raises:
            OpError (ResourceExhaustedError, PermissionDeniedError, DataLossError,
                UnknownError, ...): a job failed; the message names its path, and
                ``failed_prefix`` it (later queued jobs were not written).
            DeadlineExceededError: ``timeout_s`` passed.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._collect(block=True, deadline=deadline)

    def close(self) -> None:
        """Waits for the queued jobs, ends the worker and frees the shared memory.

        Idempotent. Raises a job's error, as :meth:`wait`, after cleaning up.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.wait()
        finally:
            self._queue.clear()
            self._stop()
            for slot in self._slots:
                slot.close()
            self._slots = []

    def __enter__(self) -> AsyncCheckpointWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
