"""Request batching: concurrent predicts of one model run as one forward pass, as TF
Serving's ``--enable_batching`` (its ``BatchingParameters`` and their meaning).

A request's inputs join the open batch of its (signature, requested version, inputs'
names, dtypes and shapes past dim 0: requests that cannot be stacked are never in one
batch); a batch is
run when it is full (``max_batch_size`` rows) or its oldest request has waited
``batch_timeout_micros`` (0: at once, so a batch holds the requests that reached the
scheduler in the same event-loop iteration, and grows while every thread is busy). A
small batch (``inline_max_bytes`` of inputs) runs on the event loop, the moment it is
due (with no timeout: at the end of that iteration); a big one when a batch thread is
free. A batch runs on one snapshot, so it never mixes versions: its inputs are
concatenated along dim 0, padded to the smallest of ``allowed_batch_sizes`` that holds
them (the last row repeated; the padding's outputs are dropped), run, and split back.
When ``max_enqueued_batches`` batches are waiting, a request that would open another is
refused at once (:class:`~ckptsync.errors.ResourceExhaustedError`: HTTP 429, gRPC
``RESOURCE_EXHAUSTED``); one with more rows than ``max_batch_size`` is refused
(``InvalidArgumentError``) as TF Serving does. A signature whose inputs or outputs are not
all batch-major (dim 0 of any size) runs unbatched; so does one whose forward, run, gave
an output without one row per input row (a ``boolean_mask``: its rows cannot be split
back): that batch's requests are run one by one on its snapshot, and a warning says so
(TF Serving fails such a batch).

Thread-safety: :meth:`BatchScheduler.run` is awaited on the server's event loop only;
big batches run on ``num_batch_threads`` threads.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from google.protobuf import text_format
from prometheus_client import CollectorRegistry, Histogram

from ckptsync import errors

from . import tfs_protos as pb
from .manager import ModelManager
from .servable import DEFAULT_SIGNATURE

__all__ = ["BatchQueueFullError", "BatchScheduler", "BatchingOptions", "run_unbatched"]

logger = logging.getLogger("ckptsync.serving.batching")


class BatchQueueFullError(errors.ResourceExhaustedError):  # type: ignore[misc,valid-type]
    """The batch queue is full: HTTP 429 with ``Retry-After: 1``, gRPC
    ``RESOURCE_EXHAUSTED``."""

    http_status = 429


@dataclass(frozen=True)
class BatchingOptions:
    """TF Serving's ``BatchingParameters`` (the defaults are its scheduler's).

    Attributes:
        max_batch_size: most rows in one batch (>= 1).
        batch_timeout_micros: how long a batch's oldest request may wait for more, in
            microseconds (>= 0).
        max_enqueued_batches: most batches waiting for a thread (>= 1).
        num_batch_threads: threads running batches (>= 1; default the CPU count).
        allowed_batch_sizes: sizes a batch is padded up to, increasing, the last equal to
            ``max_batch_size``; empty: no padding.
    """

    max_batch_size: int = 1000
    batch_timeout_micros: int = 0
    max_enqueued_batches: int = 10
    num_batch_threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    allowed_batch_sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name, low in (("max_batch_size", 1), ("batch_timeout_micros", 0),
                          ("max_enqueued_batches", 1), ("num_batch_threads", 1)):
            value = getattr(self, name)
            if type(value) is not int or value < low:
                raise errors.InvalidArgumentError(
                    None, None, f"batching parameter {name} must be an integer >= {low}, "
                    f"got {value!r}")
        sizes = self.allowed_batch_sizes
        if sizes and (list(sizes) != sorted(set(sizes)) or sizes[0] < 1
                      or sizes[-1] != self.max_batch_size):
            raise errors.InvalidArgumentError(
                None, None, f"allowed_batch_sizes {list(sizes)} must increase and end with "
                f"max_batch_size ({self.max_batch_size})")

    @classmethod
    def from_text(cls, text: str, source: str = "batching parameters") -> BatchingOptions:
        """Parses TF Serving's ``--batching_parameters_file`` text format, e.g.
        ``max_batch_size { value: 64 } batch_timeout_micros { value: 2000 }``.

        Raises:
            InvalidArgumentError: not that format, or a value out of range (naming
                ``source``).
        """
        try:
            proto = text_format.Parse(text, pb.BatchingParameters())
        except text_format.ParseError as e:
            raise errors.InvalidArgumentError(
                None, None, f"{source}: not TF Serving's BatchingParameters text format: "
                f"{e}") from None
        kw: dict[str, Any] = {k: getattr(proto, k).value for k in (
            "max_batch_size", "batch_timeout_micros", "max_enqueued_batches",
            "num_batch_threads") if proto.HasField(k)}
        kw["allowed_batch_sizes"] = tuple(proto.allowed_batch_sizes)
        _refuse_unsupported(proto, kw.get("max_batch_size", cls.max_batch_size), source)
        try:
            return cls(**kw)
        except errors.InvalidArgumentError as e:
            raise errors.InvalidArgumentError(None, None, f"{source}: {e.message}") from None


def _refuse_unsupported(proto: Any, max_batch_size: int, source: str) -> None:
    """TF Serving's parameters this scheduler does not implement: refused when they ask
    for something else than what it does (``thread_pool_name`` only names threads)."""
    def refuse(what: str) -> None:
        raise errors.InvalidArgumentError(None, None, f"{source}: {what} is TF Serving's but "
                                          "not supported by ckptsync's batching")

    if proto.pad_variable_length_inputs:
        refuse("pad_variable_length_inputs: true (inputs are batched only when every row "
               "has the signature's shape)")
    if proto.HasField("enable_large_batch_splitting") and \
            proto.enable_large_batch_splitting.value:
        refuse("enable_large_batch_splitting (a request of more than max_batch_size rows "
               "is refused, not split)")
    if proto.HasField("max_execution_batch_size") and \
            proto.max_execution_batch_size.value != max_batch_size:
        refuse("max_execution_batch_size other than max_batch_size")
    if proto.HasField("batch_padding_policy") and \
            proto.batch_padding_policy.value not in ("", "PAD_UP"):
        refuse(f'batch_padding_policy "{proto.batch_padding_policy.value}" (batches are '
               "padded up, PAD_UP)")


def run_unbatched(manager: ModelManager, signature_name: str, version: int | None,
                  inputs: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
    """One forward on the one snapshot of ``version`` (None: the served one):
    (outputs, the version that answered).

    Raises:
        UnavailableError, NotFoundError: as ``manager.acquire``.
    """
    snap = manager.acquire(version)  # the one snapshot this request runs on
    return _forward(manager.servable, snap, signature_name, inputs), snap.version


def _forward(servable: Any, snap: Any, signature_name: str,
             inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``signature_name``'s outputs for ``inputs`` on snapshot ``snap``."""
    try:
        if signature_name == DEFAULT_SIGNATURE:
            return servable.run(snap.params, inputs)  # type: ignore[no-any-return]
        return servable.run_signature(  # type: ignore[no-any-return]
            signature_name, snap.params, inputs)
    except Exception:
        raise
    except BaseException as e:  # SystemExit from a model's py_func: its request fails alone
        raise errors.InternalError(None, None, f"the model's forward raised "
                                   f"{type(e).__name__}: {e}") from None


@dataclass
class _Task:
    inputs: Mapping[str, np.ndarray]
    rows: int
    future: asyncio.Future[tuple[dict[str, np.ndarray], int]]
    enqueued_s: float = field(default_factory=time.perf_counter)


@dataclass
class _Batch:
    key: tuple[Any, ...]  # (signature name, version, the inputs' names, dtypes, row shapes)
    tasks: list[_Task] = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0
    opened_s: float = field(default_factory=time.monotonic)


class BatchScheduler:
    """Batches the forwards of one manager's model.

    Args:
        manager: the model manager.
        options: the batching parameters.
        registry: a Prometheus registry for ``ckptsync_batch_size`` (rows per batch run)
            and ``ckptsync_batch_latency_seconds`` (a request's time in the scheduler:
            waiting for its batch, then the batch's forward); None: a registry of its own.

        inline_max_bytes: a batch whose inputs hold at most this many bytes runs on the
            event loop the moment it is due (a thread hop
            costs more than such a forward, and the batch thread would compete with the
            loop for the interpreter lock); bigger batches run on the batch threads. The
            HTTP app passes its ``inline_max_body_bytes`` (256 KiB); 0: always threads.

    Call :meth:`close` when done (it stops the batch threads).
    """

    def __init__(self, manager: ModelManager, options: BatchingOptions,
                 registry: CollectorRegistry | None = None, inline_max_bytes: int = 0):
        self.manager, self.options = manager, options
        self.inline_max_bytes = inline_max_bytes
        self._inline_pending = False
        registry = registry if registry is not None else CollectorRegistry()
        self._sizes = Histogram("ckptsync_batch_size", "Rows per batch run",
                                buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
                                registry=registry)
        self._latency = Histogram(
            "ckptsync_batch_latency_seconds",
            "A request's time in the batch scheduler (its wait, then its batch's forward)",
            buckets=(0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.025, 0.05,
                     0.1, 0.25, 1.0), registry=registry)
        self._pool = ThreadPoolExecutor(options.num_batch_threads,
                                        thread_name_prefix="ckptsync-batch")
        self._open: dict[tuple[Any, ...], _Batch] = {}
        self._ready: list[_Batch] = []
        self._busy = 0
        self._timer: asyncio.TimerHandle | None = None
        signatures = manager.servable.signatures
        self._batchable = {name: _batch_major(sig) for name, sig in signatures.items()}
        self.batches_run = 0  # batches run so far (for metrics and tests)

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    async def run(self, signature_name: str, version: int | None,
                  inputs: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
        """This request's outputs, computed in a batch: (outputs, version that answered).

        Raises:
            BatchQueueFullError: the queue is full.
            InvalidArgumentError: more rows than ``max_batch_size``.
            UnavailableError, NotFoundError: as ``manager.acquire``.
        """
        if not self._batchable.get(signature_name, False):
            return run_unbatched(self.manager, signature_name, version, inputs)
        rows = next(iter(inputs.values())).shape[0]
        limit = self.options.max_batch_size
        if rows > limit:
            raise errors.InvalidArgumentError(
                None, None, f"Task size {rows} is larger than maximum input batch size "
                f"{limit} (--enable-batching's max_batch_size); split the request")
        key = (signature_name, version,
               tuple((k, a.dtype.str, a.shape[1:]) for k, a in inputs.items()))
        batch = self._open.get(key)
        if batch is None or batch.rows + rows > limit:
            # Batches waiting (a running one is no longer queued, as TF Serving counts).
            if len(self._ready) + len(self._open) >= self.options.max_enqueued_batches:
                raise BatchQueueFullError(
                    None, None, f"the batch queue is full ({self.options.max_enqueued_batches} "
                    "batches waiting, --enable-batching's max_enqueued_batches); retry shortly")
            if batch is not None:
                self._ready.append(self._open.pop(key))
            batch = self._open[key] = _Batch(key)
        future = asyncio.get_running_loop().create_future()
        batch.tasks.append(_Task(inputs, rows, future))
        batch.rows += rows
        batch.nbytes += sum(a.nbytes for a in inputs.values())
        if batch.rows == limit:
            self._ready.append(self._open.pop(key))
        self._dispatch()
        return await future

    def _dispatch(self) -> None:
        """Starts the batches that may run: full ones first, then any whose oldest
        request has waited the timeout; a small batch (``inline_max_bytes``) here on the
        event loop (with no timeout: at the end of this iteration, so the iteration's
        requests join it), a big one on a free thread. Sets a timer for the next to time
        out."""
        loop = asyncio.get_running_loop()
        defer = self.options.batch_timeout_micros == 0
        while True:
            batch = self._next_batch(self._busy >= self.options.num_batch_threads, defer)
            if batch is None:
                break
            if batch.nbytes <= self.inline_max_bytes:
                self._run_now(batch)
                continue
            self._busy += 1
            job = loop.run_in_executor(self._pool, self._run_batch, batch)
            job.add_done_callback(functools.partial(self._finished, batch=batch))
        if defer and not self._inline_pending and any(
                b.nbytes <= self.inline_max_bytes for b in self._open.values()):
            self._inline_pending = True
            loop.call_soon(self._run_inline)
        threads_free = self._busy < self.options.num_batch_threads
        waiting = [b.opened_s for b in self._open.values()
                   if threads_free or (b.nbytes <= self.inline_max_bytes and not defer)]
        if waiting and self._timer is None:  # else a finishing batch dispatches again
            timeout_s = self.options.batch_timeout_micros * 1e-6
            first = min(waiting)
            self._timer = loop.call_later(max(0.0, first + timeout_s - time.monotonic()),
                                          self._on_timer)

    def _next_batch(self, inline_only: bool, defer_inline: bool) -> _Batch | None:
        """The next batch to run (taken from the queue), or None: the first ready one,
        else the oldest open one that has waited the timeout. ``inline_only``: only one
        small enough to run inline; ``defer_inline``: not an open one that small."""
        inline = self.inline_max_bytes
        for i, batch in enumerate(self._ready):
            if not inline_only or batch.nbytes <= inline:
                return self._ready.pop(i)
        timeout_s = self.options.batch_timeout_micros * 1e-6
        now = time.monotonic()
        due = [b for b in self._open.values() if now - b.opened_s >= timeout_s
               and (not inline_only or b.nbytes <= inline)
               and not (defer_inline and b.nbytes <= inline)]
        if not due:
            return None
        return self._open.pop(min(due, key=lambda b: b.opened_s).key)

    def _run_inline(self) -> None:
        """On the event loop, at the end of an iteration: runs every small open batch
        (with no timeout, those that came in this iteration), then dispatches the rest."""
        self._inline_pending = False
        while True:
            batch = self._next_batch(inline_only=True, defer_inline=False)
            if batch is None:
                break
            self._run_now(batch)
        self._dispatch()

    def _run_now(self, batch: _Batch) -> None:
        """Runs a small batch here, on the event loop, and answers its requests."""
        try:
            results, error = self._run_batch(batch), None
        except Exception as e:  # the batch's requests get it (run_unbatched maps the rest)
            results, error = None, e
        self._complete(batch, results, error)

    def _on_timer(self) -> None:
        self._timer = None
        self._dispatch()

    def _finished(self, job: asyncio.Future[list[Any]], batch: _Batch) -> None:
        self._busy -= 1
        error = job.exception()
        self._complete(batch, None if error is not None else job.result(), error)
        self._dispatch()

    def _complete(self, batch: _Batch, results: list[Any] | None,
                  error: BaseException | None) -> None:
        """Answers a run batch's requests with their results or its error."""
        self.batches_run += 1
        self._sizes.observe(batch.rows)
        now = time.perf_counter()
        for task in batch.tasks:
            self._latency.observe(now - task.enqueued_s)
        for i, task in enumerate(batch.tasks):
            if task.future.done():  # its caller was cancelled
                continue
            if error is not None:
                task.future.set_exception(error)
            else:
                assert results is not None
                task.future.set_result(results[i])

    def _run_batch(self, batch: _Batch) -> list[tuple[dict[str, np.ndarray], int]]:
        """On a batch thread: one snapshot, one forward, outputs split per task (or, when
        an output has not one row per input row, a forward per task on that snapshot)."""
        name, version = batch.key[:2]
        tasks = batch.tasks
        keys = list(tasks[0].inputs)
        merged = {k: np.concatenate([t.inputs[k] for t in tasks]) if len(tasks) > 1
                  else tasks[0].inputs[k] for k in keys}
        size = next((s for s in self.options.allowed_batch_sizes if s >= batch.rows),
                    batch.rows)
        if size > batch.rows:  # pad with the last row, repeated
            merged = {k: np.concatenate([v, np.repeat(v[-1:], size - batch.rows, axis=0)])
                      for k, v in merged.items()}
        snap = self.manager.acquire(version)  # the one snapshot the batch runs on
        servable, served = self.manager.servable, snap.version
        outputs = _forward(servable, snap, name, merged)
        bad = next((k for k, v in outputs.items() if np.ndim(v) == 0 or len(v) != size), None)
        if bad is not None:
            if self._batchable.get(name):
                self._batchable[name] = False
                logger.warning(
                    "signature %r: output %r has %s rows for a batch of %d input rows, not "
                    "one per input row; its requests run unbatched from now on", name, bad,
                    "no" if np.ndim(outputs[bad]) == 0 else len(outputs[bad]), size)
            if len(tasks) == 1 and size == batch.rows:
                return [(outputs, served)]
            return [(_forward(servable, snap, name, t.inputs), served) for t in tasks]
        results, start = [], 0
        for t in tasks:
            results.append(({k: v[start:start + t.rows] for k, v in outputs.items()}, served))
            start += t.rows
        return results


def _batch_major(signature: Any) -> bool:
    """Every input and output has dim 0 of any size (rows that can be stacked and split)."""
    return all(spec.shape and spec.shape[0] is None
               for spec in (*signature.inputs.values(), *signature.outputs.values()))
