"""The writer process of :class:`.async_writer.AsyncCheckpointWriter`: maps the owner's
shared buffers, runs each job (data file, state file, deletions) in order, replies, and
after a failed job skips the queued ones until the owner says to go on ("C").

Started as ``WORKER_COMMAND + [socket fd]``; exits when the socket closes; ignores SIGINT
so that Ctrl-C in a terminal does not cut a save short. While a job runs, a heartbeat
thread sends ``{"alive": true}`` every ``HEARTBEAT_S`` seconds (never while idle, and
never blocking: a full socket skips a beat), so that the owner can tell a slow write
from a stopped or frozen writer.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import signal
import socket
import sys
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

# Modules, not their functions: a test's prelude may replace a function in its module
# before this one is imported.
from ..checkpoint import management, writer
from ..checkpoint import state as state_file
from ..errors import InvalidArgumentError
from . import incremental_jobs
from .frames import encode_frame, error_reply, readable_waiter, recv_frame, send_frame
from .shared_arrays import ArrayLayout, SharedBuffer

__all__ = ["worker_main"]

logger = logging.getLogger(__name__)

HEARTBEAT_S = 0.5  # seconds between the beats of a busy writer
_BEAT = encode_frame(b"", {"alive": True})


class _Heartbeat:
    """Sends a beat every ``HEARTBEAT_S`` while :meth:`busy` is on; sleeps otherwise
    (no wake-up of an idle writer). ``lock`` serializes it with the replies."""

    def __init__(self, sock: socket.socket, lock: threading.Lock):
        self._sock, self._lock = sock, lock
        self._busy, self._done = threading.Event(), threading.Event()
        threading.Thread(target=self._run, name="ckptsync-writer-heartbeat",
                         daemon=True).start()

    def busy(self, on: bool) -> None:
        if on:
            self._done.clear()
            self._busy.set()
        else:
            self._busy.clear()
            self._done.set()

    def _run(self) -> None:
        while True:
            self._busy.wait()
            while self._busy.is_set() and not self._done.wait(HEARTBEAT_S):
                with self._lock:
                    try:
                        self._sock.send(_BEAT, socket.MSG_DONTWAIT)  # whole or not at all
                    except BlockingIOError:
                        pass  # the owner is not reading now: nobody misses this beat
                    except OSError:
                        return


def _views(variables: dict[str, list[Any]], mm: mmap.mmap | None) -> dict[str, np.ndarray]:
    layout = ArrayLayout.from_doc(variables)
    return dict(zip((spec.name for spec in layout.specs), layout.views(mm)))


def _run_job(job: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Writes one job's data file, then its state file, then deletes the evicted
    checkpoints; a NaN/Inf with ``require_finite`` refuses the job before any write."""
    try:
        if job.get("incremental") is not None:  # checks only what it stores
            incremental_jobs.write_job(job, arrays)
        elif job.get("require_finite"):
            bad = writer.first_nonfinite(arrays)
            if bad is not None:
                raise InvalidArgumentError(
                    None, None, f"Variable {bad} holds NaN or Inf; refusing to save "
                    f"checkpoint {job['prefix']} (require_finite).")
        state = job["state"]
        metadata = job["metadata"]  # JSON text (or None), as the owner validated it
        if job.get("incremental") is None:
            writer.write_checkpoint(job["prefix"], arrays, job["global_step"],
                                    None if metadata is None else json.loads(metadata),
                                    sync_directory=state is None)
        if state is not None:
            state_file.update_checkpoint_state(
                state["save_dir"],
                state["model_checkpoint_path"],
                all_model_checkpoint_paths=state["all_model_checkpoint_paths"],
                latest_filename=state["latest_filename"],
            )
    except Exception as e:
        return error_reply(e)
    management.remove_evicted(job["delete"])
    return {"ok": True}


def worker_main() -> None:
    """Entry point of the writer process: ``WORKER_COMMAND + [socket fd]``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING)
    sock = socket.socket(fileno=int(sys.argv[-1]))
    mms: dict[int, mmap.mmap] = {}
    variables: dict[str, list[Any]] = {"name": [], "dtype": [], "shape": [], "offset": []}
    views: dict[int, tuple[Any, dict[str, np.ndarray]]] = {}  # slot -> (variables, views)
    failed = False  # after a failed job, skip queued jobs until the owner says "C"
    wait_readable = readable_waiter(sock)  # not woken when the owner reads a reply
    send_lock = threading.Lock()
    heartbeat = _Heartbeat(sock, send_lock)
    while True:
        try:
            wait_readable()
            tag, fds, _, _ = socket.recv_fds(sock, 1, 1)
        except OSError:
            break
        if not tag:
            break
        if tag == b"C":
            failed = False
            continue
        if tag == b"F":
            head = recv_frame(sock)
            if head is None:
                break
            slot = int(head["slot"])
            views.pop(slot, None)  # views of the old buffer
            old = mms.pop(slot, None)
            if old is not None:
                try:
                    old.close()
                except BufferError:  # a view survived; the GC unmaps it later
                    pass
            mms[slot] = SharedBuffer.map(fds[0])
            os.close(fds[0])
            continue
        job = recv_frame(sock)
        if job is None:
            break
        if "variables" in job:  # a new layout (possibly empty); else the last one
            variables = job["variables"]
        if failed:
            reply: dict[str, Any] = {"ok": False, "type": "CancelledError",
                                     "message": "skipped after an earlier save failed"}
        else:
            slot = int(job["slot"])
            cached = views.get(slot)
            if cached is None or cached[0] is not variables:
                views.pop(slot, None)  # drop the old views before making new ones
                cached = views[slot] = (variables, _views(variables, mms.get(slot)))
            heartbeat.busy(True)
            try:
                reply = _run_job(job, cached[1])
            finally:
                heartbeat.busy(False)
            failed = not reply.get("ok")
        try:
            with send_lock:
                send_frame(sock, b"", reply)
        except OSError:
            break
    sock.close()
