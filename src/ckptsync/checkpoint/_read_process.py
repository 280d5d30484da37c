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
read starts a fresh worker.

Thread-safety: :meth:`CheckpointReadProcess.read` may be called from several threads;
reads run one at a time.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import signal
import socket
import subprocess
import sys
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import CkptsyncRuntimeError, DataLossError, UnknownError
from ._ipc import (
    error_from_reply,
    error_reply,
    how_it_ended,
    new_shared_fd,
    readable_waiter,
    recv_frame,
    recv_frame_with_fds,
    send_frame,
    send_frame_with_fds,
    start_worker,
    stop_worker,
)

__all__ = ["CheckpointReadProcess", "reader_main"]

logger = logging.getLogger(__name__)

# The worker's command line; the socket's fd number is appended.
READER_COMMAND: list[str] = [
    sys.executable,
    "-c",
    "from ckptsync.checkpoint._read_process import reader_main; reader_main()",
]
_ALIGN_BYTES = 64
_CLOSE_TIMEOUT_S = 10.0
_CLOSE_LOCK_WAIT_S = 1.0




class CheckpointReadProcess:
    """Reads and verifies checkpoints in a worker process into shared memory.

    The worker starts in the constructor (it imports while the caller goes on).

    Raises:
        OSError: the worker could not be started.

    Example:
        >>> with CheckpointReadProcess() as reader:  # doctest: +SKIP
        ...     arrays = reader.read("ckpts/model.ckpt-1200", ["dense0/w"])
        >>> arrays["dense0/w"].flags.writeable  # doctest: +SKIP
        False
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._closed = False
        #: Workers replaced after dying (while idle or while reading).
        self.restarts = 0
        self._start()

    def check(self) -> None:
        """Replaces a worker that died while idle (reaps it, logs how it ended, counts
        it in ``restarts``) so that the next read does not pay for a fresh start.
        Returns at once while a read is in progress. For health checks."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if not self._closed and self._proc is not None and self._proc.poll() is not None:
                self._replace_dead()
        except OSError as e:  # no process now (EAGAIN, EMFILE): the next read tries again
            logger.warning("cannot start a checkpoint reader process: %s", e)
        finally:
            self._lock.release()

    def _replace_dead(self) -> None:
        """The worker died while idle: reap it, say so, start another."""
        proc = self._proc
        assert proc is not None
        logger.warning("the checkpoint reader process (pid %d) %s; starting another",
                       proc.pid, how_it_ended(proc.returncode))
        self._stop()
        self.restarts += 1
        self._start()

    def _start(self) -> None:
        proc, parent = start_worker(READER_COMMAND)
        self._proc, self._sock = proc, parent
        self._finalizer = weakref.finalize(self, stop_worker, proc, parent, _CLOSE_TIMEOUT_S,
                                           "checkpoint reader")

    def _stop(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._proc = self._sock = self._finalizer = None

    @property
    def pid(self) -> int | None:
        """The worker's pid, or None while none runs."""
        return None if self._proc is None else self._proc.pid

    def read(self, prefix: str, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Reads ``names`` from checkpoint ``prefix``, verifying every checksum, as
        ``read_checkpoint(prefix, names, verify=True)`` does.

        Args:
            prefix: ``"ckpts/model.ckpt-1200"`` (data in ``<prefix>.h5``).
            names: the keys to read.

        Returns:
            key -> read-only array (``[...]`` of the stored shape and dtype), views of
            one shared-memory block that is freed when the last of them is dropped.

        Raises:
            NotFoundError, DataLossError: as ``read_checkpoint`` (the message names the
                file and the variable); DataLossError also when the worker died reading.
            CkptsyncRuntimeError: the reader is closed.
        """
        with self._lock:
            if self._closed:
                raise CkptsyncRuntimeError("The checkpoint reader process is closed.")
            # A worker that dies is replaced and the read tried once more (it may have
            # died before it saw the request); dying twice on one file fails the read.
            for attempt in range(2):
                reply, fds, pid = self._ask(prefix, names)
                if reply is not None:
                    break
                if self._closed:
                    raise CkptsyncRuntimeError(
                        f"The checkpoint reader process was closed while reading {prefix}.h5.")
                logger.warning("checkpoint reader process %s died reading %s.h5%s", pid, prefix,
                               "; retrying" if attempt == 0 else "")
            else:
                raise DataLossError(
                    None, None,
                    f"The checkpoint reader process died while reading {prefix}.h5 (twice); "
                    f"treating the file as unreadable.")
            if not reply.get("ok"):
                raise error_from_reply(reply)
            return _map(reply, fds[0] if fds else None)

    def _ask(self, prefix: str, names: Sequence[str]
             ) -> tuple[dict[str, Any] | None, list[int], int | None]:
        """One request to the worker (started if needed): (reply, fds, pid); reply None
        when the worker died (it is then reaped)."""
        if self._proc is not None and self._proc.poll() is not None:
            self._replace_dead()  # died while idle
        if self._proc is None:
            self._start()
        assert self._sock is not None and self._proc is not None
        pid = self._proc.pid
        try:
            send_frame(self._sock, b"R", {"prefix": os.fspath(prefix), "names": list(names)})
            _, reply, fds = recv_frame_with_fds(self._sock, 1)
        except OSError:
            fds, reply = [], None
        if reply is None:
            for fd in fds:
                os.close(fd)
            self._stop()
            if not self._closed:
                self.restarts += 1  # the next _ask starts another
            return None, [], pid
        return reply, fds, pid

    def close(self) -> None:
        """Ends the worker. Idempotent; arrays already returned stay valid. Bounded: a
        read that is stuck (e.g. on a hung file system) has its worker killed, and then
        raises CkptsyncRuntimeError."""
        self._closed = True
        if self._lock.acquire(timeout=_CLOSE_LOCK_WAIT_S):
            try:
                self._stop()
            finally:
                self._lock.release()
            return
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()  # the stuck read sees the worker die, and stops

    def __enter__(self) -> CheckpointReadProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _map(reply: dict[str, Any], fd: int | None) -> dict[str, np.ndarray]:
    """Read-only views of the shared block ``fd`` as ``reply["variables"]`` lays out."""
    size = int(reply["size"])
    mm: mmap.mmap | None = None
    try:
        if size:
            if fd is None:
                raise UnknownError(None, None, "The reader process sent no shared memory.")
            mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    finally:
        if fd is not None:
            os.close(fd)
    out: dict[str, np.ndarray] = {}
    for v in reply["variables"]:
        dtype, shape = np.dtype(v["dtype"]), tuple(v["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        if count and mm is not None:
            flat = np.frombuffer(mm, dtype=dtype, count=count, offset=v["offset"])
        else:
            flat = np.empty(0, dtype)
            flat.setflags(write=False)
        out[v["name"]] = flat.reshape(shape)
    return out


# -- the worker process -------------------------------------------------------------
class _SharedBlock:
    """The arrays of one read, laid out (64-byte aligned) in a fresh memfd."""

    def __init__(self, names: Sequence[str]):
        self.names = list(names)
        self.fd: int | None = None
        self.mm: mmap.mmap | None = None
        self.layout: list[dict[str, Any]] = []
        self.size = 0

    def outs(self, entries: Sequence[Any]) -> list[np.ndarray]:
        """Arrays of the entries' shapes and dtypes, views of the block."""
        offset = 0
        for name, e in zip(self.names, entries):
            self.layout.append({"name": name, "dtype": e.dtype.name, "shape": list(e.shape),
                                "offset": offset})
            offset += -(-e.nbytes // _ALIGN_BYTES) * _ALIGN_BYTES
        self.size = offset
        if not offset:
            return [np.empty(e.shape, e.dtype) for e in entries]
        self.fd = new_shared_fd(offset, "ckptsync-read")
        self.mm = mmap.mmap(self.fd, offset)
        flat = np.frombuffer(self.mm, dtype=np.uint8)
        return [flat[v["offset"]: v["offset"] + e.nbytes].view(e.dtype).reshape(e.shape)
                for v, e in zip(self.layout, entries)]

    def release(self, keep_fd: bool) -> int | None:
        """Unmaps the block here; returns its fd (to send) or closes it."""
        if self.mm is not None:
            with contextlib.suppress(BufferError):  # a failed read's traceback holds
                self.mm.close()  # views: the mapping goes when they do
            self.mm = None
        fd, self.fd = self.fd, None
        if fd is not None and not keep_fd:
            os.close(fd)
            return None
        return fd

    def reply(self) -> dict[str, Any]:
        return {"ok": True, "size": self.size, "variables": self.layout}


def _read_job(request: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """Reads a request's variables into a shared block: a learned layout without HDF5
    (``_fast_read``), else through ``CheckpointReader`` (which then teaches its layout)."""
    from . import _fast_read
    from ._format import data_path
    from .reader import CheckpointReader, _key_not_found

    prefix, names = request["prefix"], list(request["names"])
    block = _SharedBlock(names)
    try:
        known = _fast_read.read_known(data_path(prefix), names, True, block.outs)
    except Exception:  # an optimisation only: HDF5 reads it and says what is wrong
        known = None
    if known is not None:
        del known
        return block.reply(), block.release(keep_fd=True)
    block.release(keep_fd=False)
    block = _SharedBlock(names)
    try:
        with CheckpointReader(prefix) as reader:
            for name in names:
                if not reader.has_tensor(name):
                    raise _key_not_found(name, reader.path)
            outs = block.outs([reader._index[n] for n in names])
            reader._read_tensors(names, verify=True, outs=outs)
            del outs
            _fast_read.learn(reader)
    except Exception as e:
        block.release(keep_fd=False)
        return error_reply(e), None
    return block.reply(), block.release(keep_fd=True)


def reader_main() -> None:
    """Entry point of the reader process: ``READER_COMMAND + [socket fd]``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING)
    sock = socket.socket(fileno=int(sys.argv[-1]))
    wait_readable = readable_waiter(sock)  # not woken when the server reads a reply
    while True:
        try:
            wait_readable()
            tag = sock.recv(1)
        except OSError:
            break
        if not tag:
            break
        request = recv_frame(sock)
        if request is None:
            break
        reply, fd = _read_job(request)
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
