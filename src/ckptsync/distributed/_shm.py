"""Allreduce through MPI-3 shared memory, for a job whose ranks all run on one host.

As the CPU shared-memory allreduce of DeepSpeed and oneCCL: each rank's fusion buffer is
its segment of one ``MPI_Win_allocate_shared`` window, so the gradient kernels write
where every rank of the host can read. One reduction::

    rank r:  [ its gradients ]  <- written by its kernels (``out=``)
             win.Sync(); Barrier()          every rank has written
             out = seg_0 (op) seg_1 (op) ... seg_{n-1}     in rank order, every rank
             Barrier()                      no rank overwrites its segment (the next
                                            step's kernels) while another still reads it

Every rank computes the same expression in the same order, so the results are
bit-identical across ranks (with two ranks, also identical to ``MPI_Allreduce``'s: a sum
of two numbers does not depend on their order). Nothing goes through MPI's transport:
MPI only allocates the window and runs the two barriers, so 10 MB of gradients cost one
pass over the segments instead of MPI's copies through its own shared buffers.

Used by :mod:`._fusion` per bucket, decided once per bucket at the op's first run (a
collective point: every rank gets there in the same order) and agreed by all ranks with
one small allreduce, when: more than one rank, every rank on this host
(``local_size() == size()``), and ``CKPTSYNC_SHM_ALLREDUCE`` is not ``0``. Otherwise the
bucket uses ``MPI_Allreduce``. The window lives as long as the process (freeing one is
collective); MPI unlinks its shared file at once, so a killed job leaves nothing behind.

Thread-safety: an :class:`Exchange` is used by one thread per rank at a time (the rule
for every collective, :mod:`.collectives`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ._runtime import _comm, _mpi, local_size, size

__all__ = ["Exchange", "create", "enabled_here"]

_REDUCE = {"sum": np.add, "mean": np.add, "max": np.maximum, "min": np.minimum}
_node_comm: Any = None


def enabled_here() -> bool:
    """This rank's view: several ranks, all on this host, not switched off."""
    return (size() > 1 and local_size() == size()
            and os.environ.get("CKPTSYNC_SHM_ALLREDUCE", "1") != "0")


def _node() -> Any:
    global _node_comm
    if _node_comm is None:
        MPI = _mpi()
        _node_comm = _comm().Split_type(MPI.COMM_TYPE_SHARED, key=_comm().Get_rank())
    return _node_comm


class Exchange:
    """One bucket's shared window: this rank's segment (``flat``, written by the
    kernels) and every rank's segment (``segments``, read-only by convention).

    Collective: every rank of the job constructs it at the same point.

    Args:
        dtype: the bucket's dtype.
        n: elements per rank (the bucket's size).
    """

    def __init__(self, dtype: np.dtype[Any], n: int):
        MPI = _mpi()
        node = _node()
        itemsize = int(dtype.itemsize)
        self._barrier = node.Barrier
        self._win = MPI.Win.Allocate_shared(max(n, 1) * itemsize, itemsize, comm=node)
        # A passive-target epoch for the window's lifetime; ``Sync`` orders this rank's
        # stores before the barrier and the others' after it (MPI-3's unified model).
        self._win.Lock_all(MPI.MODE_NOCHECK)
        self.segments = [
            np.frombuffer(self._win.Shared_query(r)[0], dtype, count=n)
            for r in range(node.Get_size())
        ]
        self.flat = self.segments[node.Get_rank()]

    def reduce_into(self, out: np.ndarray, op: str) -> None:
        """``out`` = the ranks' ``flat`` combined by ``op`` (``"sum"``, ``"mean"`` (a sum:
        the caller scales), ``"max"``, ``"min"``), in rank order. Collective."""
        reduce = _REDUCE[op]
        segs = self.segments
        self._win.Sync()
        self._barrier()
        self._win.Sync()
        if len(segs) == 1:
            np.copyto(out, segs[0])
        else:
            reduce(segs[0], segs[1], out=out)
            for s in segs[2:]:
                reduce(out, s, out=out)
        self._barrier()


def create(dtype: np.dtype[Any], n: int) -> Exchange | None:
    """A shared window for one bucket when every rank can use one, else None (the
    bucket then uses ``MPI_Allreduce``). Collective over the job (None at once in a
    single process)."""
    if size() == 1:
        return None
    MPI = _mpi()
    flag = np.array([1 if enabled_here() else 0], np.int32)
    _comm().Allreduce(MPI.IN_PLACE, flag, op=MPI.MIN)
    if not flag[0]:
        return None
    return Exchange(np.dtype(dtype), n)
