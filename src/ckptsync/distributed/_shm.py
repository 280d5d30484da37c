"""Allreduce through MPI-3 shared memory, for a job whose ranks all run on one host.

As the CPU shared-memory allreduce of DeepSpeed and oneCCL: each rank's fusion buffer is
its segment of an ``MPI_Win_allocate_shared`` window, so the gradient kernels write
where every rank of the host can read, and the result is one shared array that every
rank computes a share of::

    rank r:  [ flag | its gradients ]  <- written by its kernels (``out=``)
             Sync, Barrier              every rank has written
             result[share r] = seg_0[share r] (op) seg_1[share r] (op) ...  (rank order)
             Sync, Barrier              the result is whole; every rank reads it

Each element is combined by one rank in rank order, so every rank sees the same bits
(with two ranks and no NaN, also ``MPI_Allreduce``'s: a sum of two numbers does not
depend on their order; MAX/MIN here propagate NaN, where MPI leaves NaN unspecified).
The result is read-only: every rank maps it, so an in-place change by one rank would
change all ranks' values (the private buffers' outputs are read-only too, for one rule). No byte goes through MPI's transport; MPI allocates the windows and runs the
barriers. 10 MB of float32 on 2 ranks: ~0.4 ms against ~1.2-3.6 ms for
``MPI_Allreduce`` on the project's 2-core machine.

The shared result is overwritten by the next reduction, which only starts once every
rank has finished its previous step (the first barrier). A rank that still holds views
of it (a caller who fetched the averaged gradients) raises its flag; then, for that
reduction, every rank computes the whole result into its own private buffer instead, so
held outputs never change.

Used by :mod:`._allreduce_buffers` per bucket, decided once per bucket at the op's first run (a
collective point: every rank gets there in the same order) and agreed by all ranks with
one small allreduce, when: more than one rank, every rank on this host
(``local_size() == size()``), and ``CKPTSYNC_SHM_ALLREDUCE`` is not ``0``. Otherwise the
bucket uses ``MPI_Allreduce``. The windows live as long as the process (freeing one is
collective); MPI unlinks their shared file at once, so a killed job leaves nothing behind.

Thread-safety: an :class:`Exchange` is used by one thread per rank at a time (the rule
for every collective, :mod:`.collectives`).
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._runtime import local_size, mpi_module, size, world_comm

__all__ = ["Exchange", "create", "elements", "enabled_here", "views_of", "views_free"]

_SHM_DIR = "/dev/shm"
# Below this, MPI_Allreduce is as fast (~6 us for 4 KB on 2 ranks); 100 KB: 12 us vs 71.
MIN_BUCKET_BYTES = 32 << 10
# Live Exchanges at most (two windows each): MPICH runs out of communicator ids near 2,000.
MAX_LIVE = 256
_HEADER_BYTES = 64  # a rank's "I still hold the last shared result" flag, then its data
# MAX/MIN propagate NaN (numpy's maximum/minimum); MPI leaves NaN unspecified.
_REDUCE = {"sum": np.add, "mean": np.add, "max": np.maximum, "min": np.minimum}
_node_comm: Any = None


def enabled_here() -> bool:
    """This rank's view: several ranks, all on this host, not switched off."""
    return (size() > 1 and local_size() == size()
            and os.environ.get("CKPTSYNC_SHM_ALLREDUCE", "1") != "0")


def _node() -> Any:
    global _node_comm
    if _node_comm is None:
        MPI = mpi_module()
        _node_comm = world_comm().Split_type(MPI.COMM_TYPE_SHARED, key=world_comm().Get_rank())
    return _node_comm


def elements(shapes: Sequence[tuple[int, ...]]) -> int:
    """How many elements tensors of ``shapes`` hold together."""
    return sum(int(np.prod(s, dtype=np.int64)) for s in shapes)


def views_of(flat: np.ndarray, shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    """One view of ``flat`` per shape, back to back."""
    views, o = [], 0
    for shape in shapes:
        n = int(np.prod(shape, dtype=np.int64))
        views.append(flat[o:o + n].reshape(shape))
        o += n
    return views


def views_free(flat: np.ndarray, *view_lists: list[np.ndarray], owners: int = 1) -> bool:
    """No view of ``flat`` (or array derived from one) is referenced but by the lists
    ``view_lists`` (each view in one), and ``flat`` only by ``owners`` other references
    (attributes, a read-only view) and the views' bases."""
    # References to ``flat`` besides those: our parameter and getrefcount's argument;
    # to each view: its list and getrefcount's argument.
    n_views = sum(map(len, view_lists))
    return (sys.getrefcount(flat) <= n_views + owners + 2
            and all(not views or max(map(sys.getrefcount, views)) <= 2
                    for views in view_lists))


class _Windows:
    """One Exchange's two MPI windows, freed (collectively) once nothing over their
    memory is left: freeing them earlier would leave arrays dangling.

    Every array or memoryview over the memory leads, through its ``base`` chain, to one of
    the buffer objects MPI handed out (``raws``), so a window is unused exactly when no
    reference to those is left but ours."""

    def __init__(self, win_in: Any, win_out: Any, raws: list[Any], node_bytes: int):
        self.wins = (win_in, win_out)
        self.raws = raws
        self.node_bytes = node_bytes  # what they take from /dev/shm on this host

    def unused(self) -> bool:
        # References to each buffer: ``self.raws`` and getrefcount's argument.
        return max(map(sys.getrefcount, self.raws)) <= 2

    def free(self) -> None:
        for w in self.wins:
            w.Unlock_all()
            w.Free()


_live: dict[int, _Windows] = {}  # by creation number: the same on every rank
_created = itertools.count()


class Exchange:
    """One bucket's shared windows. ``flat`` (views ``in_views``) is this rank's input
    segment, written by the kernels; ``out_views`` (read-only: every rank maps them) is
    the result when the reduction leaves it in shared memory.

    Collective: every rank of the job constructs it at the same point (:func:`create`).

    Args:
        dtype: the bucket's dtype.
        shapes: the bucket's tensors, in buffer order.
    """

    def __init__(self, dtype: np.dtype[Any], shapes: Sequence[tuple[int, ...]]):
        MPI = mpi_module()
        node = _node()
        n = elements(shapes)
        k, me = node.Get_size(), node.Get_rank()
        nbytes = n * int(dtype.itemsize)
        self._barrier = node.Barrier
        # Inputs: a flag word and the data, per rank. The result: one copy, at rank 0.
        win_in = MPI.Win.Allocate_shared(_HEADER_BYTES + nbytes, 1, comm=node)
        win_out = MPI.Win.Allocate_shared(nbytes if me == 0 else 0, 1, comm=node)
        # A passive-target epoch for the windows' lifetime; ``Sync`` orders this rank's
        # stores before a barrier and the others' after it (MPI-3's unified model).
        for w in (win_in, win_out):
            w.Lock_all(MPI.MODE_NOCHECK)
        self._wins = (win_in, win_out)
        raws = [win_in.Shared_query(r)[0] for r in range(k)] + [win_out.Shared_query(0)[0]]
        self._held = [np.frombuffer(b, np.int32, count=1) for b in raws[:k]]
        self.segments = [np.frombuffer(b, dtype, count=n, offset=_HEADER_BYTES)
                         for b in raws[:k]]
        self.flat = self.segments[me]
        self.in_views = views_of(self.flat, shapes)
        self.out_flat = np.frombuffer(raws[k], dtype, count=n)
        # Views of it are read-only; their base is out_flat, which it references too.
        self._readonly = self.out_flat.view()
        self._readonly.setflags(write=False)
        self.out_views = views_of(self._readonly, shapes)
        self._me = me
        self._part = slice(n * me // k, n * (me + 1) // k)
        _live[next(_created)] = _Windows(win_in, win_out, raws,
                                         k * (_HEADER_BYTES + nbytes) + nbytes)

    def _sync_barrier(self) -> None:
        for w in self._wins:
            w.Sync()
        self._barrier()
        for w in self._wins:
            w.Sync()

    def begin(self) -> bool:
        """Starts a reduction (collective, after every rank has written ``flat``): True
        when the result may go to the shared ``out_views``; False when some rank still
        holds views of the last shared result, which must not change, so every rank must
        reduce into a private buffer."""
        # References to out_flat besides the views': this attribute and ``_readonly``.
        free = views_free(self.out_flat, self.out_views, owners=2)
        self._held[self._me][0] = 0 if free else 1
        self._sync_barrier()
        return not any(int(h[0]) for h in self._held)

    def reduce(self, op: str, private: np.ndarray | None, floor_divide_by: int = 1) -> None:
        """Ends the reduction :meth:`begin` started (collective): combines every rank's
        ``flat`` by ``op`` (``"sum"``, ``"mean"`` (a sum: the caller prescales floats),
        ``"max"``, ``"min"``) in rank order, into this rank's share of the shared result
        (``private`` None, after ``begin()`` was True) or whole into ``private`` (same
        shape as ``flat``); integer results are then floor-divided by ``floor_divide_by``.
        """
        reduce = _REDUCE[op]
        part = self._part if private is None else slice(None)
        dst = self.out_flat[part] if private is None else private
        segs = [s[part] for s in self.segments]
        if len(segs) == 1:
            np.copyto(dst, segs[0])
        else:
            reduce(segs[0], segs[1], out=dst)
            for s in segs[2:]:
                reduce(dst, s, out=dst)
        if floor_divide_by != 1:
            np.floor_divide(dst, floor_divide_by, out=dst)
        self._sync_barrier()


def _room_for(node_bytes: int) -> bool:
    """Whether this host's ``/dev/shm`` (where MPICH puts shared windows) has room for
    ``node_bytes`` more, twice over, besides the live windows (a container's default
    64 MiB would otherwise end in SIGBUS at the first write)."""
    try:
        st = os.statvfs(_SHM_DIR)
    except OSError:
        return False
    reserved = sum(w.node_bytes for w in _live.values())
    return st.f_bavail * st.f_frsize >= 2 * node_bytes + reserved


def create(dtype: np.dtype[Any], shapes: Sequence[tuple[int, ...]]) -> Exchange | None:
    """A shared window for one bucket when every rank can use one, else None (the
    bucket then uses ``MPI_Allreduce``). Collective over the job (None at once in a
    single process); it also frees, on every rank, the windows of Exchanges no rank
    uses any more.

    Every rank must agree: on this host, the switch, a bucket of at least
    ``MIN_BUCKET_BYTES``, fewer than ``MAX_LIVE`` live Exchanges, and room in ``/dev/shm``
    for the bucket's windows (every rank's segment and the result).
    """
    if size() == 1:
        return None
    dtype = np.dtype(dtype)
    n = elements(shapes)
    node_bytes = local_size() * (_HEADER_BYTES + n * dtype.itemsize) + n * dtype.itemsize
    comm = world_comm()
    unused = [i for i, w in _live.items() if w.unused()]
    for i in sorted(set.intersection(*map(set, comm.allgather(unused)))):
        _live.pop(i).free()
    ok = (enabled_here() and n * dtype.itemsize >= MIN_BUCKET_BYTES
          and len(_live) < MAX_LIVE and _room_for(node_bytes))
    if not all(comm.allgather(ok)):
        return None
    return Exchange(dtype, shapes)
