"""The loader: one checkpoint -> one verified, immutable parameter snapshot (TF Serving's
``Loader``).

Loading reads only the servable's variables through the format layer (which verifies each
checksum), then checks every name, shape and dtype against ``Servable.variable_specs`` and
rejects NaN/Inf. It runs off the request path (the manager's load thread); it holds no
lock, so requests keep running on the previous snapshot meanwhile.

Example:
    >>> snap = load_snapshot("ckpts/model.ckpt-1200", servable)  # doctest: +SKIP
    >>> snap.version, snap.params["dense0/w"].flags.writeable  # doctest: +SKIP
    (1200, False)
"""

from __future__ import annotations

import os
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from .. import checkpoint as ckpt
from ..errors import DataLossError, InvalidArgumentError, NotFoundError, OpError
from .servable import Servable
from .source import parse_version

__all__ = ["Snapshot", "load_snapshot"]


@dataclass(frozen=True, eq=False)
class Snapshot:
    """One loaded version: immutable, shared by every request that acquired it.

    Attributes:
        version: the checkpoint's global step.
        prefix: the checkpoint prefix it was read from (``ckpts/model.ckpt-1200``).
        params: checkpoint key -> read-only array (``writeable=False``), exactly the
            servable's ``variable_specs``.
        loaded_unix_s: when loading finished, seconds since the epoch.
        load_duration_s: read + verify time, seconds.
        created_unix_s: when the checkpoint file was written (its mtime), seconds since
            the epoch; 0.0 if unknown.

    Thread-safety: immutable; share freely. Its memory is freed when the last request that
    holds it returns.
    """

    version: int
    prefix: str
    params: Mapping[str, np.ndarray]
    loaded_unix_s: float
    load_duration_s: float
    created_unix_s: float = 0.0

    @property
    def nbytes(self) -> int:
        """Total bytes of the parameter arrays."""
        return sum(a.nbytes for a in self.params.values())


def load_snapshot(
    prefix: str,
    servable: Servable,
    allow_nonfinite: bool = False,
    version: int | None = None,
    read: Callable[[str, list[str]], Mapping[str, np.ndarray]] | None = None,
) -> Snapshot:
    """Reads and verifies the servable's variables from checkpoint ``prefix``.

    Args:
        prefix: checkpoint prefix; data is ``<prefix>.h5``.
        servable: says which variables, with which shapes and dtypes, must be there.
        allow_nonfinite: accept NaN/Inf values (refused by default).
        version: the version to record; default: the prefix's ``-<step>`` suffix, else 0.
        read: ``read(prefix, names) -> arrays`` verifying checksums, e.g. a
            ``CheckpointReadProcess``'s; default ``read_checkpoint(..., verify=True)``.

    Returns:
        A :class:`Snapshot` of read-only arrays.

    Raises:
        NotFoundError: the file does not exist, or a variable is missing from it.
        DataLossError: the file is corrupt or a checksum does not match.
        InvalidArgumentError: a variable's shape or dtype differs from the graph's, or it
            holds NaN/Inf. Every message names the file and, where it applies, the variable.
    """
    path = prefix + ".h5"
    specs = servable.variable_specs
    start = time.perf_counter()
    arrays: Mapping[str, np.ndarray]
    try:
        if read is None:
            arrays = ckpt.read_checkpoint(prefix, names=list(specs), verify=True)
        else:
            arrays = read(prefix, list(specs))
    except OpError as e:
        if path in e.message:
            raise
        raise type(e)(None, None, f"{path}: {e.message}") from e
    except Exception as e:  # h5py/OS errors the format layer did not map
        if not os.path.exists(path):
            raise NotFoundError(None, None, f"checkpoint file {path} does not exist") from e
        raise DataLossError(None, None, f"cannot read checkpoint {path}: {e}") from e

    params: dict[str, np.ndarray] = {}
    for name, spec in specs.items():
        if name not in arrays:
            raise NotFoundError(None, None, f"{path}: variable '{name}' not found in checkpoint")
        arr = np.asarray(arrays[name])
        if arr.dtype != spec.dtype:
            raise InvalidArgumentError(
                None,
                None,
                f"{path}: variable '{name}' has dtype {arr.dtype.name}, "
                f"the graph expects {spec.dtype.name}",
            )
        if not spec.is_compatible_with(arr.shape):
            raise InvalidArgumentError(
                None,
                None,
                f"{path}: variable '{name}' has shape {list(arr.shape)}, "
                f"the graph expects {spec.shape_str()}",
            )
        if not allow_nonfinite and arr.dtype.kind in "fc":
            bad = arr.size - int(np.count_nonzero(np.isfinite(arr)))
            if bad:
                raise InvalidArgumentError(
                    None,
                    None,
                    f"{path}: variable '{name}' holds {bad} NaN/Inf values of {arr.size}; "
                    "refusing to serve it (allow_nonfinite=True to accept)",
                )
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        arr.setflags(write=False)
        params[name] = arr
    if version is None:
        version = parse_version(prefix) or 0
    try:
        created_unix_s = os.stat(path).st_mtime
    except OSError:  # deleted by retention right after the read: the data is in memory
        created_unix_s = 0.0
    return Snapshot(
        version=version,
        prefix=prefix,
        params=types.MappingProxyType(params),
        loaded_unix_s=time.time(),
        load_duration_s=time.perf_counter() - start,
        created_unix_s=created_unix_s,
    )
