"""CheckpointReadProcess: checkpoints read and verified in a worker *process*, handed
over as shared memory.

The serving loader uses it so that reading, hashing and HDF5 work never hold the
server's interpreter lock (requests keep their full speed while a version loads), a
file that crashes HDF5 kills only the worker, and the server's own heap never sees a
checkpoint's arrays (no allocator growth across thousands of swaps). Who calls what::

    load thread                              reader process (python, one per reader)
    -----------                              ---------------------------------------
    read(prefix, names)  ------------------>  CheckpointReader(prefix): index, checks
                                              memfd of the arrays' size, read + verify
                                              into it (as read_checkpoint(verify=True))
    map it read-only, numpy views   <-------  the memfd and the layout, or the error
                                              (its class and message)

Each read gets a fresh ``memfd``; its views are read-only, and the memory goes back to
the system when the last view is dropped (for the loader: when the last request that
holds that version returns). The worker starts with the reader, exits when its socket
closes, and ignores SIGINT. A worker that dies during a read (e.g. killed, or HDF5
crashed on a hostile file) fails that read with DataLossError naming the file; the next
read starts a fresh worker. A worker that does not answer a read within ``timeout_s``
(SIGSTOPped, or stuck in a read of a hung file system) is killed and replaced the same
way, and that read fails with DeadlineExceededError naming the file.

Thread-safety: :meth:`CheckpointReadProcess.read` may be called from several threads;
reads run one at a time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..blocked_array import BlockedArray
from ..checkpoint import CheckpointChanges, VariableChange
from ..checkpoint.reader import read_checkpoint_into
from ..errors import CkptsyncRuntimeError, DataLossError, DeadlineExceededError, UnknownError
from .change_jobs import ReplyBlock, apply_job, changes_job, forget_arenas
from .frames import (
    error_from_reply,
    error_reply,
    readable_waiter,
    recv_frame_with_fds,
    send_frame,
    send_frame_with_fds,
)
from .process import WorkerProcess, python_command
from .shared_arrays import ArrayLayout, SharedBuffer, SharedFile

__all__ = ["APPLY_MAX_ARENAS", "AppliedChanges", "AppliedRows", "CheckpointReadProcess", "reader_main"]

logger = logging.getLogger(__name__)

# The worker's command line; the socket's fd number is appended.
READER_COMMAND: list[str] = python_command("ckptsync.workers.read_process", "reader_main")
_CLOSE_TIMEOUT_S = 10.0
_CLOSE_LOCK_WAIT_S = 1.0
_START_GRACE_S = 30.0  # a fresh worker's first read also waits for its imports


class CheckpointReadProcess:
    """Reads and verifies checkpoints in a worker process into shared memory.

    The worker starts in the constructor (it imports while the caller goes on).

    Args:
        timeout_s: the longest one read may take, in seconds, before its worker is
            declared hung, killed and replaced (None: no bound). The server passes
            ``load_timeout_s``. A fresh worker first says it is ready once its imports
            are done; until then it gets 30 s more (a worker that hangs after that is
            caught within ``timeout_s``).

    Raises:
        OSError: the worker could not be started.

    Example:
        >>> with CheckpointReadProcess() as reader:
        ...     arrays = reader.read("ckpts/model.ckpt-1200", ["dense0/w"])
        ...     arrays["dense0/w"].shape, arrays["dense0/w"].flags.writeable
        ((64, 128), False)
    """

    def __init__(self, timeout_s: float | None = None) -> None:
        self._timeout_s = timeout_s
        self._ready_pid: int | None = None  # the worker that said it is ready
        self._lock = threading.Lock()
        self._worker = WorkerProcess(lambda: READER_COMMAND, "checkpoint reader",
                                     _CLOSE_TIMEOUT_S)
        self._closed = False
        self._worker.start()

    @property
    def restarts(self) -> int:
        """Workers replaced after dying (while idle or while reading)."""
        return self._worker.restarts

    def check(self) -> None:
        """Replaces a worker that died while idle (reaps it, logs how it ended, counts
        it in ``restarts``) so that the next read does not pay for a fresh start.
        Returns at once while a read is in progress. For health checks."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if not self._closed and self._worker.exited():
                self._replace_dead()
        except OSError as e:  # no process now (EAGAIN, EMFILE): the next read tries again
            logger.warning("cannot start a checkpoint reader process: %s", e)
        finally:
            self._lock.release()

    def _replace_dead(self) -> None:
        """The worker died while idle: reap it, say so, start another."""
        logger.warning("the checkpoint reader process (pid %s) %s; starting another",
                       self._worker.pid, self._worker.how_it_ended())
        self._worker.restart()

    @property
    def pid(self) -> int | None:
        """The worker's pid, or None while none runs."""
        return self._worker.pid

    def read(self, prefix: str, names: Sequence[str],
             writable: bool = False) -> dict[str, np.ndarray]:
        """Reads ``names`` from checkpoint ``prefix``, verifying every checksum, as
        ``read_checkpoint(prefix, names, verify=True)`` does.

        Args:
            prefix: ``"ckpts/model.ckpt-1200"`` (data in ``<prefix>.h5``).
            names: the keys to read.
            writable: map the block writable (the worker no longer maps it, so the
                memory is the caller's alone; serving's copy-on-write reuses it).

        Returns:
            key -> array (``[...]`` of the stored shape and dtype; read-only unless
            ``writable``), views of one shared-memory block that is freed when the last
            of them is dropped.

        Raises:
            NotFoundError, DataLossError: as ``read_checkpoint`` (the message names the
                file and the variable); DataLossError also when the worker died reading.
            DeadlineExceededError: the worker did not answer within ``timeout_s``; it
                was killed (the next read starts another).
            CkptsyncRuntimeError: the reader is closed.
        """
        reply, fd = self._request(b"R", prefix, names)
        return _map(reply, fd, writable)

    def read_shared(self, prefix: str, names: Sequence[str]
                    ) -> tuple[dict[str, np.ndarray], dict[str, tuple[SharedFile, int]]]:
        """:meth:`read`, writable, keeping the block's file: ``(arrays, name -> (its
        SharedFile, byte offset))``, so that :meth:`apply_changes` can write into the
        arrays' memory later. Raises as :meth:`read`."""
        reply, fd = self._request(b"R", prefix, names)
        kept = None if fd is None else SharedFile(os.dup(fd))
        arrays = _map(reply, fd, True)
        layout = ArrayLayout.from_doc(reply["variables"], int(reply["size"]))
        return arrays, ({} if kept is None else
                        {spec.name: (kept, spec.offset) for spec in layout.specs})

    def apply_changes(self, prefix: str, names: Sequence[str], only_after: tuple[str, str],
                      tables: Mapping[str, tuple[BlockedArray, np.ndarray]]) -> AppliedChanges:
        """:meth:`read_changes` with ``only_after``, and the row changes of ``tables``
        applied by the worker into their pools' shared arenas (copy the touched blocks
        into free ones, write the rows, hash those blocks; see ``change_jobs``).

        Args:
            tables: name -> (the served version, every free block of its pool: hold
                ``pool.lock`` from ``free_blocks`` until ``with_blocks`` made the next
                version). Every arena's handle must be ``(SharedFile, offset)``; at most
                :data:`APPLY_MAX_ARENAS` arenas in all.

        Returns:
            :class:`AppliedChanges`; its ``applied`` tables have no rows or values in
            ``changes`` (their blocks are written at ``free[:len(blocks)]``).

        Raises:
            as :meth:`read`.
        """
        sources = {f"{name}\0{key}": a for name, (table, free) in tables.items()
                   for key, a in (("slots", table.slots), ("free", free))}
        state = ArrayLayout.of([(k, np.dtype(np.int64), a.shape) for k, a in sources.items()])
        files: list[int] = []
        docs: dict[str, Any] = {}
        for name, (table, _) in tables.items():
            pool, arenas = table.pool, []
            for arena, (shared, offset) in zip(pool.arenas, pool.handles):
                files.append(shared.fd)
                arenas.append([len(files), int(offset), int(arena.shape[0])])
            docs[name] = {"rows": pool.rows, "block_rows": pool.block_rows, "arenas": arenas,
                          "dtype": pool.dtype.str, "row_shape": list(pool.row_shape)}
        buffer = SharedBuffer(max(state.size_bytes, 1), "ckptsync-apply")
        try:
            for view, a in zip(state.views(buffer.mm), sources.values()):
                view[...] = a
            extra = {"only_after": list(only_after), "tables": docs,
                     "state": {"size": state.size_bytes, "variables": state.to_doc()}}
            assert buffer.fd is not None
            reply, fd = self._request(b"A", prefix, names, extra, [buffer.fd, *files])
        finally:
            buffer.close()
        if "short" in reply:
            return AppliedChanges(None, None, {}, dict(reply["short"]))
        changes, own, arrays = _changes(reply, fd, False)
        applied = {name: AppliedRows(arrays[name + "\0blocks"], arrays[name + "\0digests"],
                                     bool(info["finite"]), int(info["bytes"]))
                   for name, info in reply["applied"].items()}
        return AppliedChanges(changes, own, applied, {})

    def read_changes(self, prefix: str, names: Sequence[str], writable: bool = False,
                     only_after: tuple[str, str] | None = None
                     ) -> tuple[CheckpointChanges, str]:
        """What checkpoint ``prefix`` records against its predecessor, as
        ``checkpoint.read_changes(prefix, names, verify=True, only_after=only_after)``,
        and its own index hash
        (``CheckpointReader.index_xxh3``), read in the worker (``names`` empty: only the
        hash and the links). The rows and values are views of one shared block
        (read-only unless ``writable``, as :meth:`read`).

        Raises:
            as :meth:`read`.
        """
        extra = {} if only_after is None else {"only_after": list(only_after)}
        reply, fd = self._request(b"C", prefix, names, extra)
        changes, own, _ = _changes(reply, fd, writable)
        return changes, own

    def _request(self, tag: bytes, prefix: str, names: Sequence[str],
                 extra: dict[str, Any] | None = None, fds: Sequence[int] = ()
                 ) -> tuple[dict[str, Any], int | None]:
        """One request answered with shared memory: (reply, its fd or None)."""
        with self._lock:
            if self._closed:
                raise CkptsyncRuntimeError("The checkpoint reader process is closed.")
            # A worker that dies is replaced and the read tried once more (it may have
            # died before it saw the request); dying twice on one file fails the read.
            for attempt in range(2):
                hangs = self._worker.hangs
                reply, got, pid = self._ask(prefix, names, tag, extra, fds)
                if reply is not None:
                    break
                if self._closed:
                    raise CkptsyncRuntimeError(
                        f"The checkpoint reader process was closed while reading {prefix}.h5.")
                if self._worker.hangs != hangs:  # a hung read is not retried: it may hang again
                    with contextlib.suppress(OSError):  # the successor imports meanwhile
                        self._worker.start()
                    raise DeadlineExceededError(
                        None, None,
                        f"The checkpoint reader process (pid {pid}) did not answer within "
                        f"{self._timeout_s:g} s while reading {prefix}.h5 (stopped, or stuck "
                        f"in a read); it was killed and is replaced.")
                logger.warning("checkpoint reader process %s died reading %s.h5%s", pid, prefix,
                               "; retrying" if attempt == 0 else "")
            else:
                raise DataLossError(
                    None, None,
                    f"The checkpoint reader process died while reading {prefix}.h5 (twice); "
                    f"treating the file as unreadable.")
            if not reply.get("ok"):
                raise error_from_reply(reply)
            return reply, got[0] if got else None

    def _ask(self, prefix: str, names: Sequence[str], tag: bytes = b"R",
             extra: dict[str, Any] | None = None, send: Sequence[int] = (),
             ) -> tuple[dict[str, Any] | None, list[int], int | None]:
        """One request to the worker (started if needed): (reply, fds, pid); reply None
        when the worker died (it is then reaped)."""
        worker = self._worker
        if worker.exited():
            self._replace_dead()  # died while idle
        sock = worker.sock
        if sock is None:  # died while reading (counted then): its successor starts now
            sock = worker.start()
        pid = worker.pid
        try:
            # A fresh worker first says it is ready (its imports done): start-up gets the
            # grace, the read itself only ``timeout_s``.
            ready = pid == self._ready_pid or self._await_ready(worker, sock)
            reply: dict[str, Any] | None = None
            fds: list[int] = []
            if ready:
                send_frame_with_fds(sock, tag, {"prefix": os.fspath(prefix),
                                                "names": list(names), **(extra or {})},
                                    list(send))
                worker.await_answer(self._timeout_s, f"reading {prefix}.h5")  # else killed
                _, reply, fds = recv_frame_with_fds(sock, 1)
        except (OSError, ValueError):  # (a reply that is not a frame: replaced, as dead)
            fds, reply = [], None
        if reply is None:
            for fd in fds:
                os.close(fd)
            worker.stop()
            if not self._closed:
                worker.restarts += 1  # the next _ask starts another
            return None, [], pid
        return reply, fds, pid

    def _await_ready(self, worker: WorkerProcess, sock: Any) -> bool:
        """Waits (at most the start-up grace) for a fresh worker's ready frame."""
        grace = None if self._timeout_s is None else self._timeout_s + _START_GRACE_S
        if not worker.await_answer(grace, "starting"):  # else killed
            return False
        tag, _, fds = recv_frame_with_fds(sock, 1)
        for fd in fds:
            os.close(fd)
        if tag != b"Y":
            return False
        self._ready_pid = worker.pid
        return True

    def wait_until_started(self, timeout_s: float | None = None) -> bool:
        """Waits until the worker has started (imported and said so), at most
        ``timeout_s`` seconds; True once it has. A worker that does not start in time is
        not killed here (the next read's start-up grace decides). Thread-safe."""
        with self._lock:
            worker = self._worker
            sock = worker.sock
            if sock is None or self._closed:
                return False
            if worker.pid == self._ready_pid:
                return True
            if not worker.readable(timeout_s):
                return False
            try:
                return self._await_ready(worker, sock)
            except OSError:
                return False

    @property
    def worker(self) -> WorkerProcess:
        """The reader process's :class:`WorkerProcess` (for health checks and tests)."""
        return self._worker

    def close(self) -> None:
        """Ends the worker. Idempotent; arrays already returned stay valid. Bounded: a
        read that is stuck (e.g. on a hung file system) has its worker killed, and then
        raises CkptsyncRuntimeError."""
        self._closed = True
        if self._lock.acquire(timeout=_CLOSE_LOCK_WAIT_S):
            try:
                self._worker.stop()
            finally:
                self._lock.release()
            return
        self._worker.kill()  # the stuck read sees the worker die, and stops

    def __enter__(self) -> CheckpointReadProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AppliedRows(NamedTuple):
    """A table's row changes as the read process applied them: the touched logical
    blocks (int64 ``[t]``, now at ``free[:t]``), their digests (uint64 ``[t]``), whether
    every changed value is finite, and the bytes of rows and values read."""

    blocks: np.ndarray
    digests: np.ndarray
    finite: bool
    bytes_read: int


class AppliedChanges(NamedTuple):
    """:meth:`CheckpointReadProcess.apply_changes`' result: the changes (None when
    ``short``) and the checkpoint's index hash, the tables applied, and name -> blocks
    needed for each table whose pool had too few free blocks (then nothing is written:
    grow the pool and ask again)."""

    changes: CheckpointChanges | None
    index_xxh3: str | None
    applied: dict[str, AppliedRows]
    short: dict[str, int]


def _changes(reply: dict[str, Any], fd: int | None, writable: bool
             ) -> tuple[CheckpointChanges, str, dict[str, np.ndarray]]:
    """A changes reply as (changes, index hash, every array of its block)."""
    arrays = _map(reply, fd, writable)
    doc = reply["changes"]
    variables = {
        name: VariableChange(name, kind, arrays.get(name + "\0rows"),
                             arrays.get(name + "\0values"), digest,
                             tuple(shape), np.dtype(dtype))
        for name, kind, digest, shape, dtype in doc["entries"]}
    changes = CheckpointChanges(doc["prefix"], doc["parent"], doc["parent_index_xxh3"],
                                doc["global_step"], doc["is_full"], variables,
                                doc["index_xxh3"])
    return changes, str(doc["index_xxh3"]), arrays


def _map(reply: dict[str, Any], fd: int | None, writable: bool = False
         ) -> dict[str, np.ndarray]:
    """Views of the shared block ``fd`` as ``reply["variables"]`` lays out (read-only
    unless ``writable``)."""
    layout = ArrayLayout.from_doc(reply["variables"], int(reply["size"]))
    try:
        if layout.size_bytes and fd is None:
            raise UnknownError(None, None, "The reader process sent no shared memory.")
        mm = SharedBuffer.map(fd, layout.size_bytes, writable) \
            if layout.size_bytes and fd is not None else None
    finally:
        if fd is not None:
            os.close(fd)
    views = layout.views(mm)
    if mm is None and not writable:
        for v in views:
            v.setflags(write=False)
    return dict(zip((spec.name for spec in layout.specs), views))


# -- the worker process -------------------------------------------------------------
def _read_job(request: dict[str, Any], fds: Sequence[int] = ()
              ) -> tuple[dict[str, Any], int | None]:
    """Reads a request's variables, verified, into a fresh shared block."""
    forget_arenas()  # a full load: the served tables' arenas are about to be replaced
    block = ReplyBlock()
    try:
        arrays = read_checkpoint_into(request["prefix"], list(request["names"]),
                                      block.allocate, verify=True)
        del arrays
    except Exception as e:
        block.release(keep_fd=False)
        return error_reply(e), None
    return block.reply(), block.release(keep_fd=True)


_JOBS = {b"A": apply_job, b"C": changes_job}
#: The most arenas (over all its tables) an :meth:`CheckpointReadProcess.apply_changes`
#: request may name (with the state block: the descriptors one request carries).
APPLY_MAX_ARENAS = 63
_MAX_FDS = APPLY_MAX_ARENAS + 1


def reader_main() -> None:
    """Entry point of the reader process: ``READER_COMMAND + [socket fd]``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING)
    sock = socket.socket(fileno=int(sys.argv[-1]))
    wait_readable = readable_waiter(sock)  # not woken when the server reads a reply
    try:
        send_frame(sock, b"Y", {})  # ready: imported, serving reads from now on
    except OSError:
        return
    while True:
        try:
            wait_readable()
            tag, request, fds = recv_frame_with_fds(sock, _MAX_FDS)
        except OSError:
            break
        if request is None:
            for got in fds:
                os.close(got)
            break
        try:
            job = _JOBS.get(tag, _read_job)
            reply, fd = job(request, fds)
        finally:
            for got in fds:
                os.close(got)
        try:
            # tag, reply and fd in one message: one wake-up of the server's load thread
            send_frame_with_fds(sock, b"S" if fd is not None else b"E", reply,
                                [] if fd is None else [fd])
        except OSError:
            break
        finally:
            if fd is not None:
                os.close(fd)
    sock.close()
