"""The owner's side of the async writer's shared memory: one :class:`Slot` per save that
may be in flight, each a :class:`Buffer` (an anonymous ``memfd``) holding one copy of the
variables at the offsets of a :class:`Layout`. The worker maps the same buffers read-only
(``_async_worker``).
"""

from __future__ import annotations

import functools
import mmap
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._ipc import new_shared_fd

__all__ = ["Buffer", "Layout", "Slot", "signature_of"]

_ALIGN_BYTES = 64
_GROW_BYTES = 1 << 20


class Buffer:
    """One shared-memory buffer mapped read-write in the owner."""

    def __init__(self, size_bytes: int):
        self.size_bytes = size_bytes
        self.fd = new_shared_fd(size_bytes, "ckptsync-async-save")
        self.mm = mmap.mmap(self.fd, size_bytes)

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)


def signature_of(arrays: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """(key, dtype, shape) of every value, in order, if every value is a C-contiguous
    ndarray or a numpy scalar (normalized arrays are); None otherwise."""
    sig = []
    for k, v in arrays.items():
        if not (type(v) is np.ndarray and v.flags.c_contiguous) and not isinstance(
                v, np.generic):
            return None
        sig.append((k, v.dtype, v.shape))
    return tuple(sig)


@dataclass(frozen=True)
class Layout:
    """Where each variable lies in the shared buffer, for one set of keys/dtypes/shapes.

    Attributes:
        signature: ``signature_of`` of the normalized arrays (None never matches).
        entries: one ``{"name", "dtype", "shape", "offset"}`` per variable, in order.
        size_bytes: the buffer size needed.
    """

    signature: tuple[Any, ...] | None
    entries: list[dict[str, Any]]
    size_bytes: int

    @classmethod
    def of(cls, signature: tuple[Any, ...] | None, arrays: Mapping[str, np.ndarray]) -> Layout:
        """The layout of normalized ``arrays``, each at a 64-byte aligned offset."""
        entries, offset = [], 0
        for name, arr in arrays.items():
            entries.append({"name": name, "dtype": arr.dtype.name, "shape": list(arr.shape),
                            "offset": offset})
            offset += -(-arr.nbytes // _ALIGN_BYTES) * _ALIGN_BYTES
        return cls(signature, entries, offset)

    def fits(self, arrays: Mapping[str, Any]) -> bool:
        """True when ``arrays`` are ndarrays or numpy scalars with this layout's keys (in
        order), dtypes and shapes: what a save of the same variables hands in (a global
        step is often a numpy scalar), checked without allocating."""
        signature = self.signature
        if signature is None or len(arrays) != len(signature):
            return False
        ndarray, generic = np.ndarray, np.generic
        for (key, value), (k, dtype, shape) in zip(arrays.items(), signature):
            if key != k or (type(value) is not ndarray and not isinstance(value, generic)) or (
                    value.dtype != dtype or value.shape != shape):
                return False
        return True

    @functools.cached_property
    def views(self) -> list[tuple[dict[str, Any], np.dtype, tuple[int, ...], int]]:
        out = []
        for e in self.entries:
            dtype, shape = np.dtype(e["dtype"]), tuple(e["shape"])
            out.append((e, dtype, shape, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize))
        return out


class Slot:
    """One shared buffer the owner copies a save into; the worker maps it by index."""

    def __init__(self) -> None:
        self.buffer: Buffer | None = None
        self.sent = False  # the worker has this buffer's fd
        self.layout: Layout | None = None  # what ``targets`` were made for
        self.targets: list[np.ndarray] = []

    def close(self) -> None:
        self.targets, self.layout = [], None
        if self.buffer is not None:
            self.buffer.close()
            self.buffer = None

    def copy_in(self, layout: Layout, arrays: Mapping[str, np.ndarray]) -> None:
        """Copies ``arrays`` (normalized, in ``layout``'s order) into this slot's buffer,
        growing it (a new buffer, to be sent again) when ``layout`` needs more room."""
        size = layout.size_bytes
        if self.buffer is None or self.buffer.size_bytes < size:
            self.close()
            self.buffer = Buffer(max(_GROW_BYTES, -(-size // _GROW_BYTES) * _GROW_BYTES))
            self.sent = False
        if self.layout is not layout:
            flat = np.frombuffer(self.buffer.mm, dtype=np.uint8)
            self.targets = [
                flat[e["offset"] : e["offset"] + nbytes].view(dtype).reshape(shape)
                for e, dtype, shape, nbytes in layout.views
            ]
            self.layout = layout
        copyto = np.copyto
        for dst, src in zip(self.targets, arrays.values()):
            copyto(dst, src)
