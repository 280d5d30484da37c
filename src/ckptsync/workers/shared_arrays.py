"""One shared-array layout: named numpy arrays at 64-byte aligned offsets of one
anonymous shared-memory buffer, built once and mapped once by both processes.

The owner of a buffer lays the arrays out (:meth:`ArrayLayout.of`), creates the buffer
(:class:`SharedBuffer`), copies or reads into :meth:`ArrayLayout.views` of it, and sends
the buffer's file descriptor and :meth:`ArrayLayout.to_doc` to the other process, which
maps it (``SharedBuffer.map``) and takes the same views (read-only there). The buffer is
a ``memfd`` (an unlinked temp file where memfd is missing); it vanishes with the last
process that holds or maps it, so a SIGKILL leaks nothing.

Thread-safety: layouts are immutable; a buffer is owned by one thread.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import tempfile
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

__all__ = ["ALIGN_BYTES", "ArrayLayout", "ArraySpec", "SharedBuffer", "SharedFile",
           "new_shared_fd", "shared_array"]

ALIGN_BYTES = 64


def new_shared_fd(size_bytes: int, name: str = "ckptsync") -> int:
    """A new anonymous shared-memory file of ``size_bytes`` (zeros). Raises OSError."""
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        fd = int(memfd_create(name, getattr(os, "MFD_CLOEXEC", 1)))
    else:  # no memfd: an unlinked temp file, preferably in RAM
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, path = tempfile.mkstemp(prefix=name + "-", dir=shm)
        os.unlink(path)
    try:
        os.ftruncate(fd, size_bytes)
    except BaseException:
        os.close(fd)
        raise
    return fd


class ArraySpec(NamedTuple):
    """One array of a layout: its key, dtype, shape and byte offset in the buffer."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int

    @property
    def nbytes(self) -> int:
        """Bytes of the array's data (0 for a zero-size array)."""
        # math.prod, not np.prod: ~20x less per call, which a 100,000-variable layout
        # made 9 s of a load (issue #16).
        return math.prod(self.shape) * self.dtype.itemsize


_DTYPES: dict[str, np.dtype] = {}
_NAMES: dict[np.dtype, str] = {}


def _name(dtype: np.dtype) -> str:
    """``dtype.name``, cached (numpy works it out anew each time: ~7 us)."""
    found = _NAMES.get(dtype)
    if found is None:
        found = dtype.name
        if len(_NAMES) < 64:
            _NAMES[dtype] = found
    return found


def _dtype(name: str) -> np.dtype:
    found = _DTYPES.get(name)
    if found is None:
        found = np.dtype(name)
        if len(_DTYPES) < 64:
            _DTYPES[name] = found
    return found


@dataclass(frozen=True)
class ArrayLayout:
    """Where each array lies in a shared buffer.

    Attributes:
        specs: one :class:`ArraySpec` per array, in order.
        size_bytes: the buffer size needed (a multiple of 64; 0 when all are empty).
    """

    specs: tuple[ArraySpec, ...]
    size_bytes: int

    @classmethod
    def of(cls, arrays: Iterable[tuple[str, np.dtype, Sequence[int]]]) -> ArrayLayout:
        """The layout of ``(name, dtype, shape)`` triples, each at a 64-byte aligned
        offset, in order."""
        specs, offset = [], 0
        for name, dtype, shape in arrays:
            spec = ArraySpec(name, dtype if isinstance(dtype, np.dtype) else np.dtype(dtype),
                             tuple(map(int, shape)), offset)
            specs.append(spec)
            offset += -(-spec.nbytes // ALIGN_BYTES) * ALIGN_BYTES
        return cls(tuple(specs), offset)

    @classmethod
    def of_arrays(cls, arrays: Mapping[str, np.ndarray]) -> ArrayLayout:
        """The layout of ``arrays`` (key → ndarray or numpy scalar), in their order."""
        return cls.of((k, v.dtype, v.shape) for k, v in arrays.items())

    def to_doc(self) -> dict[str, list[Any]]:
        """The layout as JSON, by column (lists of plain values, which json encodes and
        decodes in C): ``{"name": [...], "dtype": [...], "shape": [...], "offset": [...]}``."""
        specs = self.specs
        return {"name": [s.name for s in specs], "dtype": [_name(s.dtype) for s in specs],
                "shape": [list(s.shape) for s in specs], "offset": [s.offset for s in specs]}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Sequence[Any]], size_bytes: int | None = None
                 ) -> ArrayLayout:
        """The layout :meth:`to_doc` describes. Raises KeyError, TypeError, ValueError
        on a malformed document."""
        names, dtypes, shapes, offsets = (doc[k] for k in ("name", "dtype", "shape", "offset"))
        if not len(names) == len(dtypes) == len(shapes) == len(offsets):
            raise ValueError("layout columns differ in length")
        specs = tuple(ArraySpec(str(n), _dtype(d), tuple(map(int, s)), int(o))
                      for n, d, s, o in zip(names, dtypes, shapes, offsets))
        end = max((s.offset + s.nbytes for s in specs), default=0)
        return cls(specs, end if size_bytes is None else int(size_bytes))

    def fits(self, arrays: Mapping[str, Any]) -> bool:
        """True when ``arrays`` are ndarrays or numpy scalars with exactly this layout's
        keys (in order), dtypes and shapes; checked without allocating."""
        specs = self.specs
        if len(arrays) != len(specs):
            return False
        ndarray, generic = np.ndarray, np.generic
        for (key, value), spec in zip(arrays.items(), specs):
            if key != spec.name or (type(value) is not ndarray
                                    and not isinstance(value, generic)) or (
                    value.dtype != spec.dtype or value.shape != spec.shape):
                return False
        return True

    def views(self, mm: mmap.mmap | None) -> list[np.ndarray]:
        """One array per spec, a view of ``mm`` at its offset (read-only when ``mm`` is
        mapped read-only). Zero-size arrays, or all of them when ``mm`` is None (an
        empty layout), are fresh empty arrays (read-only too when ``mm`` is)."""
        out = []
        flat = None if mm is None else np.frombuffer(mm, dtype=np.uint8)
        ndarray = np.ndarray
        for s in self.specs:
            if flat is not None and s.nbytes:
                # One constructor call (a slice, view and reshape cost three times as
                # much); read-only when the buffer is.
                view = ndarray(s.shape, s.dtype, flat, s.offset)
            else:
                view = np.zeros(s.shape, s.dtype)
                if flat is not None and not flat.flags.writeable:
                    view.setflags(write=False)
            out.append(view)
        return out


class SharedBuffer:
    """One shared-memory buffer mapped in this process.

    Args:
        size_bytes: the buffer's size; > 0.
        name: what ``/proc/<pid>/fd`` shows, e.g. ``"ckptsync-read"``.

    Raises:
        OSError: no memory or file descriptors.
    """

    def __init__(self, size_bytes: int, name: str = "ckptsync"):
        self.size_bytes = size_bytes
        self.fd: int | None = new_shared_fd(size_bytes, name)
        try:
            self.mm: mmap.mmap | None = mmap.mmap(self.fd, size_bytes)
        except BaseException:
            os.close(self.fd)
            raise

    @staticmethod
    def map(fd: int, size_bytes: int | None = None, writable: bool = False) -> mmap.mmap:
        """Maps a buffer another process sent, read-only (``writable``: shared and
        writable; ``size_bytes`` None: the whole file). The caller still owns (closes)
        ``fd``. Raises OSError, ValueError."""
        size = os.fstat(fd).st_size if size_bytes is None else size_bytes
        if writable:
            return mmap.mmap(fd, size)
        return mmap.mmap(fd, size, prot=mmap.PROT_READ)

    def unmap(self) -> None:
        """Unmaps the buffer here; views still alive keep it mapped until they go."""
        mm, self.mm = self.mm, None
        if mm is not None:
            with contextlib.suppress(BufferError):  # a view survived: the GC unmaps it
                mm.close()

    def take_fd(self) -> int | None:
        """Hands the file descriptor over (to send it); the buffer no longer owns it."""
        fd, self.fd = self.fd, None
        return fd

    def close(self) -> None:
        """Unmaps the buffer and closes its fd (if still owned). Idempotent."""
        self.unmap()
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


class SharedFile:
    """An owned file descriptor of a shared-memory buffer, closed with this object (or
    by :meth:`close`): what a table's block pool records for an arena that the read
    process writes (``BlockPool.handles``). Thread-safety: any thread."""

    def __init__(self, fd: int):
        self.fd = fd
        self._finalizer = weakref.finalize(self, os.close, fd)

    def close(self) -> None:
        """Closes the descriptor (idempotent)."""
        self._finalizer()


def shared_array(shape: tuple[int, ...], dtype: np.dtype, name: str = "ckptsync-arena"
                 ) -> tuple[np.ndarray, tuple[SharedFile, int]]:
    """A new zeroed ``[*shape]`` array in its own shared-memory buffer, and its handle
    ``(SharedFile, byte offset 0)`` (another process maps it writable through the fd).
    The mapping lives while the array does. Raises OSError."""
    nbytes = max(1, math.prod(shape) * np.dtype(dtype).itemsize)
    fd = new_shared_fd(nbytes, name)
    try:
        mm = mmap.mmap(fd, nbytes)
    except BaseException:
        os.close(fd)
        raise
    arr = np.frombuffer(mm, dtype, math.prod(shape)).reshape(shape)
    return arr, (SharedFile(fd), 0)
