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

import json
import re
from collections.abc import Callable, Collection
from typing import Any, cast

import numpy as np

from ..errors import InvalidArgumentError, OpError
from .servable import Signature, cast_if_finite, validate_inputs

__all__ = ["decode_predict_body", "format_predict_response", "parse_predict_body",
           "parse_predict_request"]



def _bad(message: str) -> OpError:
    return InvalidArgumentError(None, None, message)


def parse_predict_body(
    body: bytes, signature: Signature, max_batch_size: int,
    signature_names: Collection[str] = ("serving_default",),
) -> tuple[dict[str, np.ndarray], bool, int | None, str]:
    """A predict request body (bytes) -> validated input arrays, never decoding more
    than ``max_batch_size`` rows of it into Python objects: :func:`decode_predict_body`,
    then :func:`parse_predict_request`.

    Returns:
        (input key -> array, True for the row format, rows of ``instances`` or None, the
        requested ``signature_name``: one of ``signature_names``, ``"serving_default"``
        when absent or ``""``).

    Raises:
        InvalidArgumentError: not JSON, more rows than ``max_batch_size`` (counted before
            the body is decoded whole), or as :func:`parse_predict_request`.

    Thread-safety: pure; any number of threads at once.
    """
    payload = decode_predict_body(body, max_batch_size, _batch_inputs(signature))
    inputs, row_format = parse_predict_request(payload, signature, max_batch_size,
                                               signature_names)
    name = payload.get("signature_name", "") if isinstance(payload, dict) else ""
    return (inputs, row_format, len(payload["instances"]) if row_format else None,
            name or "serving_default")


def _batch_inputs(signature: Signature) -> set[str]:
    return {k for k, spec in signature.inputs.items() if spec.shape and spec.shape[0] is None}


_WALK_MIN_BYTES = 1 << 20  # bytes; smaller bodies are decoded whole
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# json's own string scanner (C), not declared by typeshed: (text, index after '"') ->
# (str, index after the closing '"').
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


def _skip(text: str, i: int) -> int:
    """The index of the first non-whitespace character of ``text`` from ``i``."""
    return cast(re.Match[str], _WS.match(text, i)).end()
_ROW_KEYS = ("instances", "inputs")


def decode_predict_body(body: bytes, max_rows: int, batch_inputs: set[str] | None = None) -> Any:
    """``body`` as JSON, as ``json.loads`` would decode it, except that a list of
    ``"instances"`` (or of ``"inputs"``, or of an ``"inputs"`` object's key in
    ``batch_inputs``; None: every key) is refused once it has more than ``max_rows``
    elements, before the rest of it is decoded: a body under the size cap with a million
    rows costs what ``max_rows`` rows cost, not gigabytes. A body of at most 1 MiB (a few
    milliseconds to decode whole), or with fewer than ``max_rows`` commas (it cannot have
    that many rows), goes to ``json.loads`` whole, which is faster.

    Raises:
        InvalidArgumentError: not valid JSON (or nesting too deeply), or too many rows
            (the message names the field and the limit).

    Thread-safety: pure. The element-by-element decode gives up the interpreter lock
    between elements, so a pool thread running it does not stall the event loop.
    """
    try:
        if len(body) <= _WALK_MIN_BYTES or body.count(b",") < max_rows:
            return json.loads(body)  # cannot hold more rows, or costs little to decode
        text = body.decode(json.detect_encoding(body), "surrogatepass")
        return _walk_object(text, max_rows, batch_inputs)
    except RecursionError:
        raise _bad("request body is not valid JSON: it nests too deeply") from None
    except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError is a ValueError
        if isinstance(e, OpError):
            raise
        raise _bad(f"request body is not valid JSON: {e}") from None


def _walk_object(text: str, max_rows: int, batch_inputs: set[str] | None) -> Any:
    raw_decode = _DECODER.raw_decode
    i = _skip(text, 0)
    if text[i:i + 1] != "{":
        return json.loads(text)  # not an object: parse_predict_request names it
    out: dict[str, Any] = {}
    i = _skip(text, i + 1)
    if text[i:i + 1] == "}":
        i += 1
    else:
        while True:
            if text[i:i + 1] != '"':
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes",
                                           text, i)
            key, i = _scanstring(text, i + 1)
            i = _skip(text, i)
            if text[i:i + 1] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
            i = _skip(text, i + 1)
            head = text[i:i + 1]
            if key in _ROW_KEYS and head == "[" and (
                    key == "instances" or batch_inputs is None or len(batch_inputs) == 1):
                out[key], i = _walk_list(text, i, max_rows, f'"{key}"')
            elif key == "inputs" and head == "{":
                out[key], i = _walk_columns(text, i, max_rows, batch_inputs)
            else:
                out[key], i = raw_decode(text, i)
            i = _skip(text, i)
            if text[i:i + 1] == ",":
                i = _skip(text, i + 1)
                continue
            if text[i:i + 1] != "}":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
            i += 1
            break
    if _skip(text, i) != len(text):
        raise json.JSONDecodeError("Extra data", text, i)
    return out


def _walk_columns(text: str, i: int, max_rows: int,
                  batch_inputs: set[str] | None) -> tuple[dict[str, Any], int]:
    """The ``"inputs"`` object at ``text[i]``, each batch input's list bounded."""
    raw_decode = _DECODER.raw_decode
    out: dict[str, Any] = {}
    i = _skip(text, i + 1)
    if text[i:i + 1] == "}":
        return out, i + 1
    while True:
        if text[i:i + 1] != '"':
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes",
                                       text, i)
        key, i = _scanstring(text, i + 1)
        i = _skip(text, i)
        if text[i:i + 1] != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
        i = _skip(text, i + 1)
        if text[i:i + 1] == "[" and (batch_inputs is None or key in batch_inputs):
            out[key], i = _walk_list(text, i, max_rows, f'"inputs.{key}"')
        else:
            out[key], i = raw_decode(text, i)
        i = _skip(text, i)
        if text[i:i + 1] == ",":
            i = _skip(text, i + 1)
            continue
        if text[i:i + 1] != "}":
            raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
        return out, i + 1


def _walk_list(text: str, i: int, max_rows: int, field: str) -> tuple[list[Any], int]:
    """The JSON list at ``text[i]`` (a ``[``), refused past ``max_rows`` elements."""
    raw_decode = _DECODER.raw_decode
    items: list[Any] = []
    append = items.append
    i = _skip(text, i + 1)
    if text[i:i + 1] == "]":
        return items, i + 1
    while True:
        value, i = raw_decode(text, i)
        append(value)
        if len(items) > max_rows:
            raise _bad(
                f"{field} has more than {max_rows} rows, more than the server's "
                "max_batch_size; split the request"
            )
        i = _skip(text, i)
        sep = text[i:i + 1]
        if sep == ",":
            i = _skip(text, i + 1)
        elif sep == "]":
            return items, i + 1
        else:
            raise json.JSONDecodeError("Expecting ',' delimiter", text, i)


def parse_predict_request(
    payload: Any, signature: Signature, max_batch_size: int,
    signature_names: Collection[str] = ("serving_default",),
) -> tuple[dict[str, np.ndarray], bool]:
    """Turns a decoded predict body into validated input arrays.

    Args:
        payload: the decoded JSON body.
        signature: the servable's signature.
        max_batch_size: most rows (dim 0) a request may carry.
        signature_names: the servable's signature names (all with ``signature``'s
            inputs); ``signature_name`` must be one of them, or ``""``/absent.

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
    if not isinstance(sig_name, str) or (sig_name and sig_name not in signature_names):
        have = ", ".join(f'"{n}"' for n in signature_names)
        raise _bad(f'Serving signature name: {json.dumps(sig_name)} not found in signature '
                   f'def ("signature_name" must be one of {have})')
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
