"""The loader: one checkpoint -> one verified, immutable parameter snapshot (TF Serving's
``Loader``).

Loading reads only the servable's variables through the format layer (which verifies each
checksum), then checks every name, shape and dtype against ``Servable.variable_specs`` and
rejects NaN/Inf. It runs off the request path (the manager's load thread); it holds no
lock, so requests keep running on the previous snapshot meanwhile.

Example:
    >>> from ckptsync.serving import GraphServable, load_snapshot
    >>> servable = GraphServable.from_model_file("model.py")
    >>> snap = load_snapshot("ckpts/model.ckpt-1200", servable)
    >>> snap.version, snap.params["dense0/w"].flags.writeable
    (1200, False)
"""

from __future__ import annotations

import os
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import checkpoint as ckpt
from ..checkpoint.writer import first_nonfinite
from ..errors import DataLossError, InvalidArgumentError, NotFoundError, OpError
from .servable import Servable
from .source import parse_version

__all__ = ["Snapshot", "is_model_mismatch", "load_snapshot"]

_LIST_MAX = 8  # names shown of a list in a mismatch message; the rest are counted


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
        load_kind: ``"full"`` (read whole) or ``"copy_on_write"`` (made from the
            served version plus the checkpoint's changes; see ``docs/serving.md``).
        bytes_read: bytes of parameter values read from the checkpoint (a full load: the
            model's size; copy-on-write: the changed rows and values).

    A value in ``params`` is a read-only ndarray, or, for a table that only gathers
    read (``Servable.row_gathered_variables``), a :class:`~ckptsync.blocked_array.
    BlockedArray` (``np.asarray`` gives its value).

    Thread-safety: immutable; share freely. Its memory is freed when the last request that
    holds it returns.
    """

    version: int
    prefix: str
    params: Mapping[str, np.ndarray]
    loaded_unix_s: float
    load_duration_s: float
    created_unix_s: float = 0.0
    load_kind: str = "full"
    bytes_read: int = 0

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
            Missing variables and shape or dtype differences are reported all at once,
            in one line naming both sides' variables (:func:`is_model_mismatch`).
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
    except NotFoundError as e:
        missing = _missing_names(prefix, specs) if os.path.isfile(path) else None
        if missing:  # the file is there but lacks variables the model needs
            raise _mismatch(NotFoundError, prefix, specs, missing, []) from e
        if path in e.message:
            raise
        raise NotFoundError(None, None, f"{path}: {e.message}") from e
    except OpError as e:
        if path in e.message:
            raise
        raise type(e)(None, None, f"{path}: {e.message}") from e
    except Exception as e:  # h5py/OS errors the format layer did not map
        if not os.path.exists(path):
            raise NotFoundError(None, None, f"checkpoint file {path} does not exist") from e
        raise DataLossError(None, None, f"cannot read checkpoint {path}: {e}") from e

    missing = [name for name in specs if name not in arrays]
    # (Per variable, only what a 100,000-variable model can afford: the exact match
    # first, the spec's own check only for the rest.)
    wrong = [_wrong_spec(name, arr, spec) for name, spec in specs.items()
             if name in arrays and ((arr := np.asarray(arrays[name])).dtype != spec.dtype
                                    or arr.shape != spec.shape)]
    if missing or any(wrong):
        cls = NotFoundError if missing else InvalidArgumentError
        raise _mismatch(cls, prefix, specs, missing, [w for w in wrong if w])
    params: dict[str, np.ndarray] = {}
    for name in specs:
        arr = arrays[name]
        if type(arr) is not np.ndarray:
            arr = np.asarray(arr)
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        arr.setflags(write=False)
        params[name] = arr
    # One reduction per array, in one pass (no [shape] bool temporary for a finite one).
    bad_name = None if allow_nonfinite else first_nonfinite(params)
    if bad_name is not None:
        arr = params[bad_name]
        bad = arr.size - int(np.count_nonzero(np.isfinite(arr)))
        raise InvalidArgumentError(
            None,
            None,
            f"{path}: variable '{bad_name}' holds {bad} NaN/Inf values of {arr.size}; "
            "refusing to serve it (allow_nonfinite=True to accept)",
        )
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
        bytes_read=sum(a.nbytes for a in params.values()),
    )


def is_model_mismatch(error: BaseException) -> bool:
    """True for a :func:`load_snapshot` error saying the checkpoint's variables do not
    match the model's (missing, or of another shape or dtype), as opposed to a damaged
    or vanished file."""
    return bool(getattr(error, "model_mismatch", False))


def _wrong_spec(name: str, arr: np.ndarray, spec: Any) -> str:
    """Why ``arr`` cannot be ``name`` of the model ("" when it can)."""
    if arr.dtype != spec.dtype:
        return (f"variable '{name}' has dtype {arr.dtype.name}, the graph expects "
                f"{spec.dtype.name}")
    if not spec.is_compatible_with(arr.shape):
        return (f"variable '{name}' has shape {list(arr.shape)}, the graph expects "
                f"{spec.shape_str()}")
    return ""


def _missing_names(prefix: str, specs: Mapping[str, Any]) -> list[str]:
    """The model's variables that checkpoint ``prefix`` lacks ([] if it cannot tell)."""
    try:
        with ckpt.CheckpointReader(prefix) as reader:
            present = reader.get_variable_to_shape_map()
    except Exception:  # damaged or gone meanwhile: the original error stands
        return []
    return [name for name in specs if name not in present]


def _names(names: list[str]) -> str:
    """``[a, b, c, … (12 more)]``: a list of names, trimmed."""
    shown = ", ".join(names[:_LIST_MAX])
    more = f", … ({len(names) - _LIST_MAX} more)" if len(names) > _LIST_MAX else ""
    return f"[{shown}{more}]"


def _mismatch(cls: type[OpError], prefix: str, specs: Mapping[str, Any],
              missing: list[str], wrong: list[str]) -> OpError:
    """One line naming both sides' variables: "checkpoint P.h5 has variables [a, b] but
    the model needs [a, c]: missing c", then any shape or dtype differences."""
    path = prefix + ".h5"
    parts = []
    if missing:
        try:
            with ckpt.CheckpointReader(prefix) as reader:
                present = sorted(reader.get_variable_to_shape_map())
            has = f"has variables {_names(present)}"
        except Exception:  # gone meanwhile: say what is known
            has = "lacks variables"
        parts.append(f"checkpoint {path} {has} but the model needs "
                     f"{_names(sorted(specs))}: missing {', '.join(missing[:_LIST_MAX])}"
                     + (f" and {len(missing) - _LIST_MAX} more" if len(missing) > _LIST_MAX
                        else ""))
    if wrong:
        shown = "; ".join(wrong[:_LIST_MAX]) + (
            f"; and {len(wrong) - _LIST_MAX} more" if len(wrong) > _LIST_MAX else "")
        parts.append(shown if missing else f"checkpoint {path} does not match the model: "
                     f"{shown}")
    error = cls(None, None, "; ".join(parts))
    error.model_mismatch = True  # type: ignore[attr-defined]
    return error
