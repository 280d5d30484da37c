"""The read half of ``Saver.restore``: a verified checkpoint into the session's variables.

A restore reads each variable straight into the session's own array of it when nobody
else holds that array (:meth:`Session.restore_buffers`), so it allocates no memory (the
cost of faulting in fresh pages was most of a restore's time: 2x the plain read at 512
MiB, more at 2 GiB on the project's VM). The read is verified before it writes
(``read_checkpoint_into(verify_first=True)``): every variable's bytes match their hash
before any variable changes, so a damaged checkpoint raises and leaves the session's
values as they were, as TF1's restore (one ``RestoreV2`` op, then the assigns) does.
Variables whose array is held elsewhere (a fetched value, a snapshot) get a new array,
so what their holders see never changes.

Dtype and shape mismatches are found from the checkpoint's index, before any data is
read.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..checkpoint.reader import read_checkpoint_into
from ..errors import InvalidArgumentError, NotFoundError, OpError
from .saver_vars import is_saveable

__all__ = ["RestoreSpec", "restore_specs", "restore_into_session"]


class RestoreSpec(NamedTuple):
    """One checkpoint key of a Saver: the variable (or saveable object), its op name,
    dtype and static shape (``op_name`` "" for a saveable object)."""

    key: str
    var: Any
    op_name: str
    dtype: np.dtype
    shape: tuple[int, ...]


def restore_specs(var_map: dict[str, Any]) -> list[RestoreSpec]:
    """The :class:`RestoreSpec` of every key of a Saver's ``var_map``, in order (made
    once per Saver: it reads each variable's shape)."""
    return [RestoreSpec(k, v, "", np.dtype(np.bool_), ()) if is_saveable(v) else
            RestoreSpec(k, v, v.op.name, v.dtype.np, tuple(v.shape.as_list()))
            for k, v in var_map.items()]


def _dtype_error(spec: RestoreSpec, found: np.dtype, save_path: str) -> OpError:
    return InvalidArgumentError(
        None, None,
        f"Restoring from checkpoint failed. This is most likely due to a mismatch "
        f"between the current graph and the graph from the checkpoint. tensor_name = "
        f"{spec.key}; expected dtype {spec.var.dtype.name} does not equal original dtype "
        f"{found} in checkpoint {save_path}.")


def _shape_error(spec: RestoreSpec, found: tuple[int, ...], save_path: str) -> OpError:
    return InvalidArgumentError(
        None, None,
        f"Restoring from checkpoint failed. This is most likely due to a mismatch "
        f"between the current graph and the graph from the checkpoint. Assign "
        f"requires shapes of both tensors to match. lhs shape= {list(spec.shape)} rhs "
        f"shape= {list(found)} for variable {spec.key} in checkpoint {save_path}.")


def restore_into_session(sess: Any, save_path: str, specs: list[RestoreSpec],
                         reshape: bool) -> None:
    """Loads every key of ``specs`` from checkpoint ``save_path`` into ``sess``.

    Args:
        sess: the session whose variables change.
        save_path: an existing checkpoint's prefix (ckptsync's or TF's own).
        specs: :func:`restore_specs` of the Saver.
        reshape: accept a stored shape that differs but has the variable's element
            count (row-major), as ``Saver(reshape=True)``.

    Raises:
        NotFoundError: a key is missing ("Restoring from checkpoint failed. ... Key X
            not found in checkpoint").
        InvalidArgumentError: a dtype or shape differs (names the variable, both sides);
            nothing was read.
        DataLossError: the file is corrupt or fails its checksums; no variable changed.
    """
    by_key = {s.key: s for s in specs}
    live = sess.restore_buffers([s.op_name for s in specs if s.op_name])
    adopted: dict[str, np.ndarray] = {}  # op name -> the live array read into

    def allocate(found: list[tuple[str, np.dtype, tuple[int, ...]]]) -> list[np.ndarray]:
        adopted.clear()
        outs = []
        for key, dtype, shape in found:
            spec = by_key[key]
            if not spec.op_name:  # a saveable object reads its own array
                outs.append(np.empty(shape, dtype))
                continue
            if dtype != spec.dtype:
                raise _dtype_error(spec, dtype, save_path)
            if shape != spec.shape and not (
                    reshape and int(np.prod(shape)) == int(np.prod(spec.shape))):
                raise _shape_error(spec, shape, save_path)
            arr = live.get(spec.op_name)
            if arr is None:
                outs.append(np.empty(shape, dtype))
                continue
            adopted[spec.op_name] = arr
            outs.append(arr if shape == spec.shape else arr.reshape(shape))
        return outs

    try:
        values = read_checkpoint_into(save_path, list(by_key), allocate, verify=True,
                                      verify_first=bool(live))
    except NotFoundError as e:
        raise NotFoundError(
            None, None,
            "Restoring from checkpoint failed. This is most likely due to a Variable name or "
            "other graph key that is missing from the checkpoint. Please ensure that you have "
            f"not altered the graph expected based on the checkpoint. Original error: {e}"
        ) from e
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        arr = values[spec.key]
        if not spec.op_name:  # e.g. an iterator's position
            spec.var.restore_value(sess, arr)
            continue
        kept = adopted.get(spec.op_name)
        out[spec.op_name] = kept if kept is not None else arr.reshape(spec.shape)
    sess.write_variables(out, copy=False)  # the arrays were read for this restore alone
