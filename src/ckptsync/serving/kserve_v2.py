"""The Open Inference Protocol (KServe v2) over REST, on the TF Serving REST port.

Triton's and KServe's clients (``tritonclient.http``) work unchanged:

- ``GET /v2`` server metadata (extension ``binary_tensor_data``);
  ``GET /v2/health/live`` 200; ``GET /v2/health/ready`` and
  ``GET /v2/models/{m}[/versions/{v}]/ready`` 200 once a version is served, else 400 (a
  4xx means false in the protocol; Triton answers 400), both with an empty body.
- ``GET /v2/models/{m}[/versions/{v}]`` model metadata: ``name``, ``versions`` (the
  served one), ``platform`` (``ckptsync``), ``inputs``/``outputs`` with ``name``,
  ``datatype`` (``FP32``, ``INT64``...) and ``shape`` (-1 for any size).
- ``POST /v2/models/{m}[/versions/{v}]/infer``: ``inputs`` as JSON tensors (``name``,
  ``shape``, ``datatype``, ``data`` flat or nested, row-major) or, with the binary tensor
  extension, ``parameters.binary_data_size`` and the bytes after the JSON object (the
  ``Inference-Header-Content-Length`` header gives its length); ``outputs`` picks outputs
  and, with ``parameters.binary_data`` (or the request's ``binary_data_output``), asks
  for them as binary. The answer names ``model_name``, ``model_version`` (the version
  that answered), echoes ``id``, and carries the same outputs as TF Serving's predict.

A request's datatype must be its input's (``FP64`` for an ``FP32`` input is 400, as
Triton refuses it); shapes, the batch limit and finiteness are checked as for TF Serving's
predict. Errors are ``{"error": "<one sentence>"}`` with the REST API's statuses.
Predict-path requests (``.../infer``) are answered by the app's plain-ASGI predict handler
(:mod:`._predict`), the other routes by starlette.

Thread-safety: pure functions and handlers with no per-request state.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ckptsync.errors import InvalidArgumentError, OpError

from ._responses import (
    HttpError,
    decode_json,
    dumps,
    json_response,
    parse_version,
    short,
    url_version,
)
from .servable import DEFAULT_SIGNATURE, Signature, cast_if_finite, validate_inputs

__all__ = ["DATATYPES", "INFER_PATH", "OpenInferenceApi", "format_infer_response",
           "parse_infer_request"]

INFER_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([0-9]+))?/infer$")
#: The protocol's tensor datatypes -> numpy dtypes (little-endian, as the binary
#: extension's bytes).
DATATYPES = {"BOOL": np.dtype("?"), "UINT8": np.dtype("u1"), "UINT16": np.dtype("<u2"),
             "UINT32": np.dtype("<u4"), "UINT64": np.dtype("<u8"), "INT8": np.dtype("i1"),
             "INT16": np.dtype("<i2"), "INT32": np.dtype("<i4"), "INT64": np.dtype("<i8"),
             "FP16": np.dtype("<f2"), "FP32": np.dtype("<f4"), "FP64": np.dtype("<f8")}
_BY_DTYPE = {d.newbyteorder("="): name for name, d in DATATYPES.items()}
_HEADER_LENGTH = b"inference-header-content-length"


def datatype_of(dtype: np.dtype) -> str:
    """The protocol's datatype name of numpy ``dtype`` (``BYTES`` for anything else)."""
    return _BY_DTYPE.get(np.dtype(dtype).newbyteorder("="), "BYTES")


def server_metadata() -> dict[str, Any]:
    """The body of ``GET /v2``: the server's name, version and extensions."""
    from importlib.metadata import version  # here: read once per call, rarely called

    return {"name": "ckptsync", "version": version("ckptsync"),
            "extensions": ["binary_tensor_data"]}


def _bad(message: str) -> OpError:
    return InvalidArgumentError(None, None, message)


def _header_length(headers: Any) -> int | None:
    for key, value in headers:
        if key == _HEADER_LENGTH:
            try:
                n = int(value)
            except ValueError:
                n = -1
            if n < 0:
                raise HttpError(400, "Inference-Header-Content-Length must be a non-negative "
                                     f"integer, got {value.decode('latin-1')!r}")
            return n
    return None


def parse_infer_request(body: bytes, header_length: int | None, signature: Signature,
                        max_batch_size: int) -> tuple[dict[str, np.ndarray], list[tuple[str, bool]],
                                                      Any]:
    """An ``.../infer`` body -> (validated inputs, [(output name, as binary)], ``id``).

    Args:
        body: the request body: the JSON object, then the binary tensors if any.
        header_length: the ``Inference-Header-Content-Length`` (the JSON's bytes), or None
            when the body is only JSON.
        signature: the model's signature.
        max_batch_size: most rows (dim 0 of a batch input).

    Raises:
        HttpError: 400, not JSON or a header length past the body.
        InvalidArgumentError: a malformed or mismatched input or output (named).
    """
    if header_length is not None and header_length > len(body):
        raise HttpError(400, f"Inference-Header-Content-Length {header_length} is past the "
                             f"end of the {len(body)}-byte body")
    end = len(body) if header_length is None else header_length
    request = decode_json(body[:end])
    if not isinstance(request, dict):
        raise _bad("the inference request must be a JSON object")
    raw_inputs = request.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise _bad('"inputs" must be a non-empty list of tensors')
    binary, offset = memoryview(body)[end:], 0
    arrays: dict[str, np.ndarray] = {}
    for i, tensor in enumerate(raw_inputs):
        name, arr, used = _input(i, tensor, signature, binary, offset)
        offset += used
        if name in arrays:
            raise _bad(f"input '{name}' is given twice")
        arrays[name] = arr
    if offset != len(binary):
        raise _bad(f"the body has {len(binary) - offset} bytes of binary tensor data that no "
                   "input's binary_data_size accounts for")
    inputs = validate_inputs(signature, arrays)
    for key, arr in inputs.items():
        shape = signature.inputs[key].shape
        if arr.ndim and shape and shape[0] is None and arr.shape[0] > max_batch_size:
            raise _bad(f"input '{key}' has a batch of {arr.shape[0]} rows, more than the "
                       f"server's max_batch_size of {max_batch_size}; split the request")
    return inputs, _outputs(request, signature), request.get("id")


def _input(i: int, tensor: Any, signature: Signature, binary: memoryview,
           offset: int) -> tuple[str, np.ndarray, int]:
    """One request tensor -> (name, array, binary bytes it used)."""
    where = f"inputs[{i}]"
    if not isinstance(tensor, dict):
        raise _bad(f"{where} must be an object with name, shape, datatype and data")
    name, shape, datatype = tensor.get("name"), tensor.get("shape"), tensor.get("datatype")
    if not isinstance(name, str):
        raise _bad(f'{where} needs a "name" (one of {sorted(signature.inputs)})')
    where = f"input '{name}'"
    spec = signature.inputs.get(name)
    if spec is None:
        raise _bad(f"unexpected inference input '{name}' (the model's inputs are "
                   f"{sorted(signature.inputs)})")
    if not isinstance(shape, list) or not all(
            type(d) is int and 0 <= d < 2**62 for d in shape):
        raise _bad(f'{where}: "shape" must be a list of non-negative integers, got '
                   f"{short(shape)}")
    want = datatype_of(spec.dtype)
    if datatype != want:
        raise _bad(f"{where}: datatype is {short(datatype)}, the model expects '{want}'")
    dtype = DATATYPES[want]
    n = math.prod(shape)  # Python ints: no overflow
    params = tensor.get("parameters") or {}
    if not isinstance(params, dict):
        raise _bad(f'{where}: "parameters" must be an object')
    size = params.get("binary_data_size")
    if size is not None:
        if type(size) is not int or size != n * dtype.itemsize:
            raise _bad(f"{where}: binary_data_size is {short(size)}, but shape {shape} of "
                       f"{want} is {n * dtype.itemsize} bytes")
        if offset + size > len(binary):
            raise _bad(f"{where}: its {size} bytes of binary data are past the end of the body")
        return name, np.frombuffer(binary[offset:offset + size], dtype).reshape(shape), size
    data = tensor.get("data")
    if data is None:
        raise _bad(f'{where} has neither "data" nor parameters.binary_data_size')
    try:
        arr = np.asarray(data)
    except ValueError:
        raise _bad(f'{where}: "data" is ragged (nested lists of unequal length)') from None
    if arr.size != n:
        raise _bad(f'{where}: "data" holds {arr.size} values, shape {shape} needs {n}')
    if arr.dtype.kind not in "biuf" or (arr.dtype.kind == "b") != (dtype.kind == "b"):
        raise _bad(f'{where}: "data" must be {want} values, got {short(data)}')
    if dtype.kind == "f":
        cast = cast_if_finite(arr, dtype)
        if cast is None:
            raise _bad(f'{where}: "data" must be finite {want} values')
        return name, cast.reshape(shape), 0
    if dtype.kind in "iu":
        if arr.dtype.kind not in "iu":
            raise _bad(f'{where}: "data" must be {want} integers, got {short(data)}')
        info = np.iinfo(dtype)  # type: ignore[type-var]  # an integer dtype here
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise _bad(f'{where}: "data" must be integers in the range of {want}')
    return name, arr.astype(dtype).reshape(shape), 0


def _outputs(request: Mapping[str, Any], signature: Signature) -> list[tuple[str, bool]]:
    params = request.get("parameters") or {}
    all_binary = bool(isinstance(params, dict) and params.get("binary_data_output"))
    wanted = request.get("outputs")
    if wanted is None:
        return [(k, all_binary) for k in signature.outputs]
    if not isinstance(wanted, list):
        raise _bad('"outputs" must be a list of {"name": ...} objects')
    out: list[tuple[str, bool]] = []
    for i, o in enumerate(wanted):
        name = o.get("name") if isinstance(o, dict) else None
        if not isinstance(name, str) or name not in signature.outputs:
            raise _bad(f"unexpected inference output {short(name)} at outputs[{i}] (the "
                       f"model's outputs are {sorted(signature.outputs)})")
        p = o.get("parameters") or {}
        out.append((name, bool(p.get("binary_data", all_binary)) if isinstance(p, dict)
                    else all_binary))
    return out


def format_infer_response(model_name: str, version: int, request_id: Any,
                          outputs: Mapping[str, np.ndarray], wanted: list[tuple[str, bool]]
                          ) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The answer body and its extra headers (``Inference-Header-Content-Length`` when
    some output is binary)."""
    tensors, blobs = [], []
    for name, as_binary in wanted:
        arr = np.ascontiguousarray(outputs[name])
        t: dict[str, Any] = {"name": name, "datatype": datatype_of(arr.dtype),
                             "shape": list(arr.shape)}
        if as_binary:
            blob = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
            t["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            t["data"] = arr.reshape(-1).tolist()
        tensors.append(t)
    answer: dict[str, Any] = {"model_name": model_name, "model_version": str(version)}
    if request_id is not None:
        answer["id"] = request_id
    answer["outputs"] = tensors
    head = dumps(answer).encode()
    if not blobs:
        return head, []
    return b"".join([head, *blobs]), [(b"inference-header-content-length",
                                       str(len(head)).encode())]


class OpenInferenceApi:
    """The v2 routes over a :class:`~.http.RestApi` (its manager, name, caps, metrics).

    Who calls what: :func:`~.http.create_app` adds :meth:`routes`;
    :class:`~._predict.PredictHandler` calls :meth:`parse` and :meth:`answer` for
    ``.../infer``.
    """

    def __init__(self, api: Any):
        self.api = api

    def routes(self) -> list[Route]:
        ep = self.api.endpoint
        model, version = "/v2/models/{name}", "/v2/models/{name}/versions/{version:digits}"
        return [
            Route("/v2", ep("v2_server", self.server_metadata), methods=["GET"]),
            Route("/v2/health/live", ep("v2_live", self.live), methods=["GET"]),
            Route("/v2/health/ready", ep("v2_ready", self.ready), methods=["GET"]),
            Route(model, ep("v2_model", self.model_metadata), methods=["GET"]),
            Route(version, ep("v2_model", self.model_metadata), methods=["GET"]),
            Route(model + "/ready", ep("v2_model_ready", self.model_ready), methods=["GET"]),
            Route(version + "/ready", ep("v2_model_ready", self.model_ready), methods=["GET"]),
        ]

    def parse(self, body: bytes, headers: Any) -> tuple[str, dict[str, np.ndarray], Any]:
        """An ``.../infer`` body -> (signature name, validated inputs, what :meth:`answer`
        needs).

        Raises:
            HttpError, OpError: as :func:`parse_infer_request`.
        """
        inputs, wanted, request_id = parse_infer_request(
            body, _header_length(headers), self.api.manager.servable.signature,
            self.api.max_batch_size)
        return DEFAULT_SIGNATURE, inputs, (wanted, request_id)

    def answer(self, outputs: Mapping[str, np.ndarray], served: int,
               ctx: Any) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        """The ``.../infer`` answer body and its headers."""
        wanted, request_id = ctx
        data, extra = format_infer_response(self.api.model_name, served, request_id,
                                            outputs, wanted)
        return data, [(b"x-model-version", str(served).encode()), *extra]

    def _model(self, request: Request, ready: bool = False) -> int | None:
        """The URL's version (None: the served one), the model's name checked; one past
        int64 is a 404 (``ready``: -1, a version never ready)."""
        name = request.path_params["name"]
        if name != self.api.model_name:
            raise HttpError(404, f"unknown model: '{name}' (this server serves "
                                 f"'{self.api.model_name}')")
        v = request.path_params.get("version")
        if v is None:
            return None
        return (-1 if parse_version(v) is None else int(v)) if ready else url_version(v)

    async def server_metadata(self, request: Request) -> Response:
        return json_response(server_metadata())

    async def live(self, request: Request) -> Response:
        return Response(status_code=200)

    async def ready(self, request: Request) -> Response:
        return Response(status_code=200 if self.api.manager.version is not None else 400)

    async def model_ready(self, request: Request) -> Response:
        version = self._model(request, ready=True)
        served = self.api.manager.version
        ok = served is not None and (version is None or version == served)
        return Response(status_code=200 if ok else 400)

    async def model_metadata(self, request: Request) -> Response:
        version = self._model(request)
        versions = [self.api.manager.acquire(version).version] if version is not None \
            else self.api.served_versions()
        sig = self.api.manager.servable.signature

        def tensors(specs: Mapping[str, Any]) -> list[dict[str, Any]]:
            return [{"name": k, "datatype": datatype_of(s.dtype),
                     "shape": [-1 if d is None else d for d in s.shape]}
                    for k, s in specs.items()]

        return json_response({
            "name": self.api.model_name,
            "versions": [str(v) for v in versions],
            "platform": "ckptsync",
            "inputs": tensors(sig.inputs), "outputs": tensors(sig.outputs)})
