"""TF Serving's REST predict format: JSON <-> named arrays.

Request bodies (https://www.tensorflow.org/tfx/serving/api_rest#predict_api)::

    {"instances": [{"x": [...], "y": ...}, ...]}   row format: one object per example
    {"instances": [[...], [...]]}                  row format, single-input signature
    {"inputs": {"x": [[...], ...], "y": [...]}}    columnar: one batch-major array per input
    {"inputs": [[...], ...]}                       columnar, single-input signature

Answers: row format -> ``{"predictions": [...]}`` (a list of objects when the signature
has several outputs); columnar -> ``{"outputs": ...}`` (an object when several).
Base64 (``{"b64": ...}``) binary values are not supported (no string tensors).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, OpError
from .servable import Signature, cast_if_finite, validate_inputs

__all__ = ["parse_predict_request", "format_predict_response"]

_SIGNATURE_NAMES = ("", "serving_default")


def _bad(message: str) -> OpError:
    return InvalidArgumentError(None, None, message)


def parse_predict_request(
    payload: Any, signature: Signature, max_batch_size: int
) -> tuple[dict[str, np.ndarray], bool]:
    """Turns a decoded predict body into validated input arrays.

    Args:
        payload: the decoded JSON body.
        signature: the servable's signature.
        max_batch_size: most rows (dim 0) a request may carry.

    Returns:
        (input key -> array, True for row format / False for columnar).

    Raises:
        InvalidArgumentError: the body is not an object, has both or neither of
            ``instances`` and ``inputs``, an unknown ``signature_name``, ragged or
            non-numeric values, wrong shapes, or too many rows. The message names the field.
    """
    fast = _rows_fast(payload, signature, max_batch_size)
    if fast is not None:
        return fast, True
    if not isinstance(payload, dict):
        raise _bad(f"request body must be a JSON object, got {_json_type(payload)}")
    sig_name = payload.get("signature_name", "")
    if sig_name not in _SIGNATURE_NAMES:
        raise _bad(f'"signature_name" must be "serving_default", got {sig_name!r}')
    has_rows, has_cols = "instances" in payload, "inputs" in payload
    if has_rows == has_cols:
        raise _bad('request body must have exactly one of "instances" (row) or "inputs" (columnar)')
    names = list(signature.inputs)
    if has_rows:
        arrays = _parse_rows(payload["instances"], names, max_batch_size)
    else:
        arrays = _parse_columns(payload["inputs"], names)
    inputs = validate_inputs(signature, arrays)
    for key, arr in inputs.items():
        if arr.ndim and signature.inputs[key].shape[0] is None and arr.shape[0] > max_batch_size:
            raise _bad(
                f"input '{key}' has a batch of {arr.shape[0]} rows, more than the "
                f"server's max_batch_size of {max_batch_size}; split the request"
            )
    return inputs, has_rows


def _rows_fast(payload: Any, signature: Signature,
               max_batch_size: int) -> dict[str, np.ndarray] | None:
    """The common request in few steps: ``{"instances": [[numbers...], ...]}`` for a
    single floating-point input whose dims after the batch are known. Returns exactly
    what the general path would, or None to take it (which also names every error)."""
    if type(payload) is not dict or len(payload) != 1 or len(signature.inputs) != 1:
        return None
    rows = payload.get("instances")
    if type(rows) is not list or not 0 < len(rows) <= max_batch_size or type(rows[0]) is not list:
        return None
    (key, spec), = signature.inputs.items()
    if spec.dtype.kind != "f" or not spec.shape or spec.shape[0] is not None:
        return None
    try:
        arr = np.asarray(rows)
    except (ValueError, TypeError):
        return None
    if arr.dtype.kind not in "fiu" or arr.shape[1:] != spec.shape[1:] or not arr.size:
        return None
    cast = cast_if_finite(arr, spec.dtype)
    return None if cast is None else {key: cast}


def _parse_rows(instances: Any, names: list[str], max_batch_size: int) -> dict[str, Any]:
    if not isinstance(instances, list) or not instances:
        got = "an empty list" if isinstance(instances, list) else _json_type(instances)
        raise _bad(f'"instances" must be a non-empty list, got {got}')
    if len(instances) > max_batch_size:
        raise _bad(
            f'"instances" has {len(instances)} rows, more than the server\'s max_batch_size '
            f"of {max_batch_size}; split the request"
        )
    named = [isinstance(i, dict) for i in instances]
    if any(named) and not all(named):
        raise _bad('"instances" mixes objects and bare values; use one form for every row')
    if not named[0]:
        if len(names) != 1:
            raise _bad(
                f'"instances" must be objects with keys {names} (the model has '
                f"{len(names)} inputs), got {_json_type(instances[0])}"
            )
        return {names[0]: _stack(instances, names[0])}
    for i, inst in enumerate(instances):
        if set(inst) != set(names):
            raise _bad(f'"instances[{i}]" must have keys {names}, got {sorted(inst)}')
    return {k: _stack([inst[k] for inst in instances], k) for k in names}


def _stack(rows: list[Any], key: str) -> np.ndarray:
    try:
        arr = np.asarray(rows)
    except (ValueError, TypeError):
        arr = None
    if arr is None or arr.dtype.kind == "O":
        shapes = [_shape_of(r) for r in rows]
        for i, s in enumerate(shapes):
            if s is None:
                raise _bad(
                    f"\"instances[{i}]\" of input '{key}' is ragged (lists of unequal length)"
                )
            if s != shapes[0] and shapes[0] is not None:
                raise _bad(
                    f"\"instances[{i}]\" of input '{key}' has shape {list(s)}, "
                    f'but "instances[0]" has {list(shapes[0])}; every row must match'
                )
        if arr is None:
            raise _bad(f"input '{key}' in \"instances\" is ragged (lists of unequal length)")
    return arr


def _shape_of(value: Any) -> tuple[int, ...] | None:
    """Shape of a rectangular nested list, or None if ragged."""
    if isinstance(value, list):
        if not value:
            return (0,)
        inner = [_shape_of(v) for v in value]
        if inner[0] is None or any(s != inner[0] for s in inner):
            return None
        return (len(value), *inner[0])
    return ()  # a scalar, or a non-numeric value that the dtype check will name


def _parse_columns(inputs: Any, names: list[str]) -> dict[str, Any]:
    if isinstance(inputs, dict):
        return {k: _column(v, f'"inputs.{k}"') for k, v in inputs.items()}
    if len(names) != 1:
        raise _bad(
            f'"inputs" must be an object with keys {names} (the model has {len(names)} '
            f"inputs), got {_json_type(inputs)}"
        )
    return {names[0]: _column(inputs, '"inputs"')}


def _column(value: Any, field: str) -> np.ndarray:
    try:
        return np.asarray(value)
    except (ValueError, TypeError):
        raise _bad(f"{field} is ragged (nested lists of unequal length)") from None


def format_predict_response(
    outputs: dict[str, np.ndarray], row_format: bool, batch_size: int | None
) -> dict[str, Any]:
    """The JSON answer body for outputs.

    Args:
        outputs: output key -> array.
        row_format: the request used ``instances``.
        batch_size: rows in the request (for the row format), or None.

    Raises:
        InvalidArgumentError: row format with several outputs that do not all have
            ``batch_size`` rows (use the columnar ``inputs`` format then).
    """
    if not row_format:
        if len(outputs) == 1:
            return {"outputs": next(iter(outputs.values())).tolist()}
        return {"outputs": {k: v.tolist() for k, v in outputs.items()}}
    if len(outputs) == 1:
        return {"predictions": next(iter(outputs.values())).tolist()}
    for k, v in outputs.items():
        if v.ndim == 0 or v.shape[0] != batch_size:
            raise _bad(
                f"output '{k}' has shape {list(v.shape)}, not one row per instance "
                f'({batch_size}); send the request in the columnar "inputs" format'
            )
    columns = {k: v.tolist() for k, v in outputs.items()}
    return {
        "predictions": [{k: col[i] for k, col in columns.items()} for i in range(batch_size or 0)]
    }


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )
