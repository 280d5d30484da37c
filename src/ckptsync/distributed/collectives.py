"""Collectives over numpy arrays: ``allreduce``, ``broadcast`` and small-object helpers.

Tensor fusion (as Horovod's): a call with many arrays packs them, per dtype, into a few
contiguous buffers of at most ``fusion_threshold_bytes`` each (default 64 MiB,
``CKPTSYNC_FUSION_THRESHOLD_BYTES``; an array larger than that gets a buffer of its own)
and makes one MPI call per buffer. The results are views into those buffers; the inputs
are never modified, and a buffer is reused only once no view of it is left, so outputs
stay valid as long as they are held.

``ReduceOp.MEAN`` of floating-point arrays scales by ``1 / size`` while packing (one pass,
no extra pass after the reduction); of integer arrays it floor-divides the sum.

These functions take arrays that already exist, so they copy them into the buffer. The
``MpiAllreduce`` graph op does better inside ``Session.run``: the kernels that produce
its inputs write straight into its fusion buffer (:mod:`._allreduce_buffers`).

Without MPI (one process) every function returns copies of its inputs.

Every collective must be called by all ranks in the same order with arrays of the same
shapes and dtypes; each one runs under the watchdog (see :mod:`._runtime`).

Example:
    >>> import numpy as np
    >>> from ckptsync import distributed as dist
    >>> dist.allreduce([np.ones(3, np.float32), np.arange(2)], op=dist.ReduceOp.SUM)[1]
    array([0, 1])
"""

from __future__ import annotations

import enum
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any, TypeVar, overload

import numpy as np

from ..errors import CkptsyncTypeError, CkptsyncValueError
from ._runtime import mpi_module, size, under_watchdog, world_comm

__all__ = ["ReduceOp", "Average", "Sum", "Max", "Min", "allreduce", "broadcast",
           "broadcast_object", "allgather_object", "barrier", "DEFAULT_FUSION_THRESHOLD_BYTES",
           "bucket_limit_bytes", "plan_buckets", "reducible", "mpi_buffer"]

DEFAULT_FUSION_THRESHOLD_BYTES = 64 * 2**20
T = TypeVar("T")


class ReduceOp(enum.Enum):
    """How ``allreduce`` combines the ranks' values (as ``tf.distribute.ReduceOp``, plus
    ``MAX``/``MIN``): ``SUM`` adds, ``MEAN`` averages (1 and 3 -> 2)."""

    SUM = "sum"
    MEAN = "mean"
    MAX = "max"
    MIN = "min"


# Horovod's names, for ``DistributedOptimizer(op=Average)``.
Average = ReduceOp.MEAN
Sum = ReduceOp.SUM
Max = ReduceOp.MAX
Min = ReduceOp.MIN


def bucket_limit_bytes() -> int:
    """The most bytes one fusion buffer (bucket) holds: ``CKPTSYNC_FUSION_THRESHOLD_BYTES``,
    default :data:`DEFAULT_FUSION_THRESHOLD_BYTES`; read at each call."""
    return int(os.environ.get("CKPTSYNC_FUSION_THRESHOLD_BYTES", DEFAULT_FUSION_THRESHOLD_BYTES))


def plan_buckets(arrays: Sequence[Any], threshold_bytes: int) -> list[list[int]]:
    """Indices of ``arrays`` (or of anything with ``dtype`` and ``nbytes``) grouped into
    fusion buffers: one dtype per buffer, at most ``threshold_bytes`` each (a larger array
    alone), in order of first appearance."""
    by_dtype: dict[np.dtype[Any], list[int]] = {}
    for i, a in enumerate(arrays):
        by_dtype.setdefault(a.dtype, []).append(i)
    buckets: list[list[int]] = []
    for idx in by_dtype.values():
        cur: list[int] = []
        cur_bytes = 0
        for i in idx:
            n = arrays[i].nbytes
            if cur and cur_bytes + n > threshold_bytes:
                buckets.append(cur)
                cur, cur_bytes = [], 0
            cur.append(i)
            cur_bytes += n
        if cur:
            buckets.append(cur)
    return buckets


def reducible(kind: str, op: ReduceOp | None) -> bool:
    """Whether arrays of numpy dtype ``kind`` can be reduced by ``op`` (None: broadcast):
    numeric kinds; bool only with MAX/MIN (or, and); complex not with MAX/MIN (no order)."""
    if kind not in "biufc":
        return False
    if kind == "b":
        return op not in (ReduceOp.SUM, ReduceOp.MEAN)
    return not (kind == "c" and op in (ReduceOp.MAX, ReduceOp.MIN))


def mpi_buffer(buf: np.ndarray) -> np.ndarray:
    """``buf`` as MPI reduces it: bool as uint8 (MPI has no MAX/MIN for C bool; on 0/1
    they are or/and)."""
    return buf.view(np.uint8) if buf.dtype.kind == "b" else buf


def _check_dtypes(arrays: Sequence[np.ndarray], op: ReduceOp | None) -> None:
    for a in arrays:
        kind = a.dtype.kind
        if not reducible(kind, op):
            what = "allreduce" if op is not None else "broadcast"
            raise CkptsyncTypeError(
                f"{what}: arrays of dtype {a.dtype} are not supported"
                + (f" with {op.name}" if op is not None and kind in "bc" else "")
                + ("; use a numeric dtype." if kind not in "bc" else "."))


class _BufferPool:
    """Reuses fusion buffers whose outputs are all gone.

    A fresh 10 MB buffer costs page faults on first touch (an allreduce into one takes
    ~3x as long as into a warm one). Outputs are views that keep their buffer referenced,
    so a pooled buffer whose reference count shows no views is free to reuse; one that a
    caller still holds (e.g. fetched gradients) is never overwritten.
    """

    PER_KEY = 2

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: dict[tuple[str, int], list[np.ndarray]] = {}

    def get(self, dtype: np.dtype[Any], n: int) -> np.ndarray:
        key = (dtype.str, n)
        with self._lock:
            bufs = self._free.setdefault(key, [])
            for buf in bufs:
                # References: the list, ``buf`` here, getrefcount's argument.
                if sys.getrefcount(buf) <= 3:
                    return buf
            buf = np.empty(n, dtype=dtype)
            if len(bufs) < self.PER_KEY:
                bufs.append(buf)
            return buf


_POOL = _BufferPool()


def _pack(arrays: Sequence[np.ndarray], idx: list[int], scale: float | None) -> np.ndarray:
    """Copies the arrays into one pooled buffer: one C-level concatenate, or with a
    ``scale``, one multiply per array into its slice (pack and prescale in one pass)."""
    total = sum(arrays[i].size for i in idx)
    buf = _POOL.get(arrays[idx[0]].dtype, total)
    if scale is not None:
        o = 0
        for i in idx:
            a = arrays[i]
            np.multiply(a.reshape(-1), scale, out=buf[o:o + a.size])
            o += a.size
    elif len(idx) == 1:
        np.copyto(buf, arrays[idx[0]].reshape(-1))
    else:
        np.concatenate([arrays[i].reshape(-1) for i in idx], out=buf)
    return buf


def _unpack(buf: np.ndarray, arrays: Sequence[np.ndarray], idx: list[int],
            out: list[Any]) -> None:
    """Results are views into ``buf`` (no copy); the pool never reuses a held buffer."""
    o = 0
    for i in idx:
        a = arrays[i]
        n = a.size
        out[i] = buf[o:o + n].reshape(a.shape)
        o += n


@overload
def allreduce(arrays: np.ndarray, op: ReduceOp = ..., *,
              fusion_threshold_bytes: int | None = ...) -> np.ndarray: ...
@overload
def allreduce(arrays: Sequence[Any], op: ReduceOp = ..., *,
              fusion_threshold_bytes: int | None = ...) -> list[np.ndarray]: ...


def allreduce(arrays: Any, op: ReduceOp = ReduceOp.MEAN, *,
              fusion_threshold_bytes: int | None = None) -> Any:
    """Combines each array across all ranks; every rank gets the same result.

    Args:
        arrays: one array, or a list of arrays (any shapes and numeric dtypes; each rank
            passes the same shapes and dtypes in the same order).
        op: ``ReduceOp.SUM``, ``MEAN`` (default), ``MAX`` or ``MIN``.
        fusion_threshold_bytes: most bytes per fused buffer (default 64 MiB).

    Returns:
        A new array (or list of new arrays) of the same shapes and dtypes.

    Raises:
        TypeError: a non-numeric dtype, or bool with SUM/MEAN; ``op`` not a ReduceOp.
    """
    if not isinstance(op, ReduceOp):
        raise CkptsyncTypeError(f"allreduce: op must be a cs.distributed.ReduceOp, got {op!r}.")
    single = not isinstance(arrays, (list, tuple))
    arrs = [np.asarray(a) for a in ([arrays] if single else arrays)]
    _check_dtypes(arrs, op)
    n_ranks = size()
    if n_ranks == 1:
        out = [np.array(a, copy=True) for a in arrs]
        return out[0] if single else out
    MPI = mpi_module()
    mpi_op = {ReduceOp.SUM: MPI.SUM, ReduceOp.MEAN: MPI.SUM, ReduceOp.MAX: MPI.MAX,
              ReduceOp.MIN: MPI.MIN}[op]
    comm = world_comm()
    results: list[Any] = [None] * len(arrs)
    threshold = fusion_threshold_bytes or bucket_limit_bytes()
    for idx in plan_buckets(arrs, threshold):
        is_float = arrs[idx[0]].dtype.kind in "fc"
        scale = 1.0 / n_ranks if op is ReduceOp.MEAN and is_float else None
        buf = _pack(arrs, idx, scale)
        with under_watchdog(f"allreduce of {len(idx)} arrays ({buf.nbytes} bytes)"):
            comm.Allreduce(MPI.IN_PLACE, mpi_buffer(buf), op=mpi_op)
        if op is ReduceOp.MEAN and not is_float:
            np.floor_divide(buf, n_ranks, out=buf)
        _unpack(buf, arrs, idx, results)
    return results[0] if single else results


def broadcast(arrays: Any, root_rank: int, *,
              fusion_threshold_bytes: int | None = None) -> Any:
    """Every rank gets ``root_rank``'s values.

    Args:
        arrays: one array or a list of arrays; other ranks pass arrays of the same shapes
            and dtypes (their values are ignored).
        root_rank: the rank whose values win, in ``[0, size())``.

    Returns:
        A new array (or list of new arrays) holding the root's values.

    Raises:
        ValueError: ``root_rank`` out of range.
    """
    n_ranks = size()
    if not 0 <= root_rank < n_ranks:
        raise CkptsyncValueError(
            f"broadcast: root_rank must be in [0, {n_ranks}), got {root_rank}.")
    single = not isinstance(arrays, (list, tuple))
    arrs = [np.asarray(a) for a in ([arrays] if single else arrays)]
    _check_dtypes(arrs, None)
    if n_ranks == 1:
        out = [np.array(a, copy=True) for a in arrs]
        return out[0] if single else out
    comm = world_comm()
    is_root = comm.Get_rank() == root_rank
    results: list[Any] = [None] * len(arrs)
    threshold = fusion_threshold_bytes or bucket_limit_bytes()
    for idx in plan_buckets(arrs, threshold):
        if is_root:
            buf = _pack(arrs, idx, None)
        else:
            buf = _POOL.get(arrs[idx[0]].dtype, sum(arrs[i].size for i in idx))
        with under_watchdog(f"broadcast of {len(idx)} arrays ({buf.nbytes} bytes) from rank "
                    f"{root_rank}"):
            comm.Bcast(buf, root=root_rank)
        _unpack(buf, arrs, idx, results)
    return results[0] if single else results


def broadcast_object(obj: T, root_rank: int = 0) -> T:
    """``root_rank``'s picklable ``obj`` on every rank (small objects: metadata, flags)."""
    if size() == 1:
        return obj
    with under_watchdog(f"broadcast_object from rank {root_rank}"):
        return world_comm().bcast(obj, root=root_rank)  # type: ignore[no-any-return]


def allgather_object(obj: T) -> list[T]:
    """Every rank's picklable ``obj``, in rank order, on every rank."""
    if size() == 1:
        return [obj]
    with under_watchdog("allgather_object"):
        return list(world_comm().allgather(obj))


def barrier() -> None:
    """Returns once every rank has called it."""
    if size() == 1:
        return
    with under_watchdog("barrier"):
        world_comm().Barrier()
