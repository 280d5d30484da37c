"""The buckets and buffers of one ``MpiAllreduce`` op in a compiled run (Horovod's
"tensor fusion", without the copy into the buffer): where the op's inputs are written
and its outputs live. Unrelated to the session's MatMul+BiasAdd+Relu kernel fusion.

A session that compiles a run holding a ``MpiAllreduce`` op asks :func:`plan_bucketed_allreduce`
how to run it (``fuse_inputs`` in :mod:`ckptsync.ops.registry`). The answer, a
:class:`BucketedAllreduce`, lays the op's inputs out in buckets (one dtype per bucket, at
most ``fusion_threshold_bytes`` each, as :func:`~.collectives.plan_buckets`) and keeps a
few fusion buffers per bucket, each a flat array with one view per input::

    flat  [ g0 (64x128) | g1 (128) | g2 (128x128) | ... | g575 (10) ]   one bucket
    views   view 0        view 1     view 2               view 575      built once

One run:

1. ``prepare`` (before any producer runs) takes a free buffer per bucket and hands the
   views of the *direct* inputs to their producers as ``out=``: the gradient kernels
   (MatMul, BiasAddGrad, AddN, SumToShape) write straight into the buffer. An input is
   direct when the session saw that nothing else in the run reads it.
2. ``run`` (the op's turn) copies the other inputs into their views (and any direct one
   whose producer had to return a new array), multiplies by ``1 / size`` for ``MEAN`` of
   floats (Horovod's prescale, in the same pass as the copy when every input of the
   bucket is copied; exact for a power-of-two size, so the average equals ``sum / size``
   bit for bit), reduces each bucket, floor-divides for ``MEAN`` of integers, and
   returns views of the result: no unpack.

Where every rank runs on one host, a bucket's buffer for the kernels is this rank's
segment of an MPI shared-memory window (:mod:`._shm`, decided at the op's first run),
each rank combines its share of all segments into one shared result, and the outputs are
views of that (or of a pool buffer, while a rank still holds the last shared result): no
byte goes through MPI's transport. Otherwise (ranks on several hosts, or
``CKPTSYNC_SHM_ALLREDUCE=0``) the pool buffer itself takes the kernels' outputs and one
in-place ``MPI_Allreduce``.

``DistributedOptimizer`` builds a ``SUM`` of gradients already divided by ``size`` (see
:mod:`.optimizer`), so on its path nothing touches the buffer but the gradient kernels
and the reduction. Buckets are reduced at the op's turn, not one by one as their
producers finish: measured on 2 ranks, five 2 MB allreduces during the backward pass
cost ~40 % more than one 10 MB allreduce after it (each waits for the slower rank at its
own point).

Ownership: a pool buffer (or the shared result) is reused only when neither it
nor any view of it (nor any array derived from one) is referenced any more, checked by
reference counts, so an output held by the caller is never overwritten by a later run;
a run that finds every buffer busy allocates a new one. Every plan (and session) that
runs the op shares its pools, which keep at most ``BUFFERS_PER_BUCKET`` buffers each.
Every rank runs the same steps on the same layout, so results are bit-identical across
ranks.

Thread-safety: one ``BucketedAllreduce`` may serve concurrent runs of its plan without MPI
(each takes its own buffers under a lock); with MPI, runs that hold the op follow
:mod:`.collectives`' rule (one thread per rank at a time): a bucket has one shared
window per rank.
"""

from __future__ import annotations

import operator
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..graph import Operation
from . import _shm
from ._runtime import mpi_module, size, under_watchdog, world_comm
from ._shm import elements, views_free, views_of
from .collectives import (
    ReduceOp,
    allreduce,
    bucket_limit_bytes,
    mpi_buffer,
    plan_buckets,
    reducible,
)

__all__ = ["BucketedAllreduce", "plan_bucketed_allreduce", "BUFFERS_PER_BUCKET"]

BUFFERS_PER_BUCKET = 2
_MPI_OPS = {ReduceOp.SUM: "SUM", ReduceOp.MEAN: "SUM", ReduceOp.MAX: "MAX", ReduceOp.MIN: "MIN"}


class _Spec(NamedTuple):
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    nbytes: int


class _Buffer:
    """One fusion buffer: ``flat``, one view per input of its bucket for the kernels to
    write (``views``) and the same read-only for the op's outputs (``outputs``)."""

    __slots__ = ("flat", "views", "outputs", "_readonly")

    def __init__(self, dtype: np.dtype[Any], shapes: Sequence[tuple[int, ...]]):
        self.flat = np.empty(elements(shapes), dtype)
        self.views = views_of(self.flat, shapes)
        self._readonly = self.flat.view()  # views of it are read-only; their base: flat
        self._readonly.setflags(write=False)
        self.outputs = views_of(self._readonly, shapes)


def _is_free(buf: _Buffer) -> bool:
    """No run holds ``buf`` and no view of it (or array derived from one) is alive."""
    # References to ``buf``: the pool list, the caller's loop variable, our argument and
    # getrefcount's; to ``flat``: ``buf``, the read-only view and every view's ``base``;
    # to each view: its list.
    return sys.getrefcount(buf) <= 4 and views_free(buf.flat, buf.views, buf.outputs, owners=2)


def _picker(positions: list[int], total: int) -> Callable[[Sequence[Any]], Sequence[Any]]:
    """``f(seq) -> [seq[p] for p in positions]``, in C where it can be."""
    if positions == list(range(total)):
        return tuple
    if len(positions) >= 2:
        return operator.itemgetter(*positions)
    if positions:
        p = positions[0]
        return lambda seq: (seq[p],)
    return lambda seq: ()


class _BucketLayout:
    """One bucket: its inputs in buffer order, and its pool of buffers."""

    def __init__(self, specs: list[_Spec], inputs: list[int], name: str,
                 lock: threading.Lock):
        self.inputs = inputs
        self.dtype = specs[inputs[0]].dtype
        self.shapes = [specs[i].shape for i in inputs]
        self.is_float = self.dtype.kind in "fc"
        self.what = (f"allreduce '{name}' of {len(inputs)} tensors "
                     f"({sum(specs[i].nbytes for i in inputs)} bytes)")  # for the watchdog
        self.pool: list[_Buffer] = []
        self._lock = lock  # the op's: every plan of it takes buffers from this pool
        # The shared window (_shm.Exchange) the kernels write into, or None (private
        # buffers and MPI_Allreduce); decided at the op's first run, on every rank.
        self.exchange: _shm.Exchange | None = None
        self.decided = False

    def decide_exchange(self) -> None:
        """Collective: every rank calls it at the op's first run, bucket by bucket."""
        self.exchange = _shm.create(self.dtype, self.shapes)
        self.decided = True
        if self.exchange is not None:
            self.pool = []  # the kernels' buffer of the first run; the window's from now on

    def take(self) -> _Buffer:
        """A free pool buffer (a new one where all are held)."""
        with self._lock:
            for buf in self.pool:
                if _is_free(buf):
                    return buf
            buf = _Buffer(self.dtype, self.shapes)
            if len(self.pool) < BUFFERS_PER_BUCKET:
                self.pool.append(buf)
            return buf

    def targets(self, buf: _Buffer | None) -> list[np.ndarray]:
        """Where this run's inputs go: the shared window when there is one, else ``buf``
        (reduced in place)."""
        if self.exchange is not None:
            return self.exchange.in_views
        assert buf is not None
        return buf.views


class _Layout:
    """An op's buckets and their buffer pools, shared by every plan (and session) that
    runs the op, so a model holds at most ``BUFFERS_PER_BUCKET`` buffers per bucket."""

    def __init__(self, op: Operation, threshold_bytes: int):
        specs = []
        for t in op.inputs:
            dtype = np.dtype(t.dtype.np)
            shape = tuple(int(d) for d in t.shape.as_list() if d is not None)  # all known
            specs.append(_Spec(dtype, shape, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize))
        lock = threading.Lock()
        self.buckets = [_BucketLayout(specs, idx, op.name, lock)
                        for idx in plan_buckets(specs, threshold_bytes)]

    def acquire(self) -> list[_Buffer | None]:
        """A free pool buffer per bucket; None for a bucket with a shared window (it
        takes one only for a run whose shared result is still held)."""
        return [None if b.exchange is not None else b.take() for b in self.buckets]


_layouts: weakref.WeakKeyDictionary[Operation, dict[int, _Layout]] = weakref.WeakKeyDictionary()
_layouts_lock = threading.Lock()


def _layout(op: Operation, threshold_bytes: int) -> _Layout:
    with _layouts_lock:
        by_threshold = _layouts.setdefault(op, {})
        layout = by_threshold.get(threshold_bytes)
        if layout is None:
            layout = by_threshold[threshold_bytes] = _Layout(op, threshold_bytes)
        return layout


class _Bucket:
    """One bucket as one plan uses it: which of its inputs are direct."""

    def __init__(self, layout: _BucketLayout, direct: set[int]):
        self.layout = layout
        self.inputs = layout.inputs
        self.direct_pos = [p for p, i in enumerate(self.inputs) if i in direct]
        self.copy_pos = [p for p, i in enumerate(self.inputs) if i not in direct]
        self.pick_direct = _picker(self.direct_pos, len(self.inputs))
        self.pick_direct_inputs = _picker([self.inputs[p] for p in self.direct_pos], -1)


class BucketedAllreduce:
    """How one compiled run allreduces one ``MpiAllreduce`` op's inputs (see the module
    docstring). Built by :func:`plan_bucketed_allreduce`; the session calls ``prepare`` and
    ``run`` (the :class:`~ckptsync.ops.registry.FusedInputs` protocol).

    Args:
        op: the ``MpiAllreduce`` op; every input has a fully defined static shape.
        candidates: indices of the inputs whose producers can write into the buffer.
        n_ranks: the number of ranks (> 1).
        threshold_bytes: most bytes per fused buffer.
    """

    def __init__(self, op: Operation, candidates: Sequence[int], n_ranks: int,
                 threshold_bytes: int):
        self.name = op.name
        self.reduce_op = ReduceOp(op.attrs["op"])
        self.n_ranks = n_ranks
        self._layout = _layout(op, threshold_bytes)
        cand = set(candidates)
        self._buckets = [_Bucket(b, cand) for b in self._layout.buckets]
        # float64 1/size, as the plain path; numpy rounds it once to the buffer's dtype.
        self._scale = 1.0 / n_ranks
        self.direct: list[int] = [b.inputs[p] for b in self._buckets for p in b.direct_pos]
        order = [i for b in self._buckets for i in b.inputs]  # input index per output slot
        self._pick_outputs = _picker(sorted(range(len(order)), key=order.__getitem__),
                                     len(order))

    def prepare(self, ctx: Any) -> Sequence[np.ndarray]:
        """Takes this run's buffers; returns the arrays the direct inputs' producers write
        into (in ``self.direct`` order)."""
        bufs = self._layout.acquire()
        ctx.scratch[self] = bufs  # holds them (busy) until the op runs
        if len(bufs) == 1:
            return self._buckets[0].pick_direct(self._buckets[0].layout.targets(bufs[0]))
        return [v for b, buf in zip(self._buckets, bufs)
                for v in b.pick_direct(b.layout.targets(buf))]

    def run(self, ctx: Any, op: Operation, *arrays: Any) -> Any:
        """The reduced inputs, in order (a tuple; the array itself for one input): views
        of this run's buffers."""
        bufs = ctx.scratch.pop(self, None) or self._layout.acquire()
        for b in self._buckets:
            if not b.layout.decided:
                with under_watchdog(b.layout.what):
                    b.layout.decide_exchange()
        copies: list[list[tuple[np.ndarray, np.ndarray]]] = []
        for b, buf in zip(self._buckets, bufs):
            views = b.layout.targets(buf)
            todo = b.copy_pos
            if b.direct_pos and not all(map(operator.is_, b.pick_direct_inputs(arrays),
                                            b.pick_direct(views))):
                # A producer returned a new array (its result did not fit): copy it too.
                todo = b.copy_pos + [p for p in b.direct_pos
                                     if arrays[b.inputs[p]] is not views[p]]
            pairs = []
            for p in todo:
                a, v = np.asarray(arrays[b.inputs[p]]), views[p]
                if a.shape != v.shape or a.dtype != v.dtype:
                    # Not the static layout (every rank sees the same): the general path.
                    out = allreduce(list(arrays), self.reduce_op)
                    return out[0] if len(out) == 1 else tuple(out)
                pairs.append((v, a))
            copies.append(pairs)
        MPI, comm = mpi_module(), world_comm()
        mpi_op = getattr(MPI, _MPI_OPS[self.reduce_op])
        mean = self.reduce_op is ReduceOp.MEAN
        results = []
        for b, buf, pairs in zip(self._buckets, bufs, copies):
            exchange = b.layout.exchange
            if exchange is None:
                assert buf is not None
                flat = buf.flat
            else:
                flat = exchange.flat
            prescale = mean and b.layout.is_float
            if prescale and len(pairs) == len(b.inputs):
                for v, a in pairs:  # pack and prescale in one pass
                    np.multiply(a, self._scale, out=v)
            else:
                for v, a in pairs:
                    np.copyto(v, a)
                if prescale:
                    np.multiply(flat, self._scale, out=flat)
            divide = self.n_ranks if mean and not b.layout.is_float else 1
            with under_watchdog(b.layout.what):
                if exchange is not None:
                    if exchange.begin():
                        exchange.reduce(self.reduce_op.value, None, divide)
                        results.append(exchange.out_views)
                    else:
                        buf = buf or b.layout.take()
                        exchange.reduce(self.reduce_op.value, buf.flat, divide)
                        results.append(buf.outputs)
                    continue
                comm.Allreduce(MPI.IN_PLACE, mpi_buffer(flat), op=mpi_op)
            if divide != 1:
                np.floor_divide(flat, divide, out=flat)
            results.append(buf.outputs)
        picked = self._pick_outputs(
            results[0] if len(results) == 1 else [v for views in results for v in views])
        # The session stores a single-output op's result as is: the array, not a tuple.
        return picked[0] if len(picked) == 1 else picked  # type: ignore[return-value]


def plan_bucketed_allreduce(op: Operation, candidates: list[int]) -> BucketedAllreduce | None:
    """The session's planner for ``MpiAllreduce`` (``fuse_inputs``): None (run the plain
    kernel) with one rank, or when an input's static shape is not fully defined or its
    dtype cannot be reduced (the kernel then raises the usual error)."""
    n_ranks = size()
    if n_ranks == 1:
        return None
    reduce_op = ReduceOp(op.attrs["op"])
    for t in op.inputs:
        if not t.shape.is_fully_defined() or not reducible(np.dtype(t.dtype.np).kind,
                                                           reduce_op):
            return None
    return BucketedAllreduce(op, candidates, n_ranks, bucket_limit_bytes())
