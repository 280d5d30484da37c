"""JSON answers and error mapping shared by the HTTP app's routes (:mod:`.http`) and its
predict handler (:mod:`._predict`).

An exception becomes ``(HTTP status, {"error": message}, extra headers)``: an
:class:`HttpError` carries its own status, an ``OpError`` maps by its TF error code, and
anything else is logged (as ``ckptsync.serving.http``) and answered 500.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any

from starlette.convertors import Convertor, register_url_convertor
from starlette.responses import Response

from .. import errors

# The logger of the module this code came from, so logging configuration keeps applying.
logger = logging.getLogger("ckptsync.serving.http")

__all__ = [
    "DRAIN_CUT_BODY",
    "HTTP_STATUS",
    "INT64_MAX",
    "ClientGone",
    "HttpError",
    "decode_json",
    "dumps",
    "error_response",
    "json_response",
    "loads",
    "map_error",
    "parse_version",
    "read_capped_body",
    "short",
    "url_version",
]

HTTP_STATUS = {
    errors.INVALID_ARGUMENT: 400,
    errors.FAILED_PRECONDITION: 400,
    errors.OUT_OF_RANGE: 400,
    errors.NOT_FOUND: 404,
    errors.RESOURCE_EXHAUSTED: 413,
    errors.UNAVAILABLE: 503,
    errors.DEADLINE_EXCEEDED: 504,
}


# The answer to a request that the server's drain timeout cancels (uvicorn's is a
# plain-text 500).
DRAIN_CUT_BODY = (b'{"error":"the server is shutting down and its drain timeout ended this '
                  b'request before it finished; retry on another replica"}')
INT64_MAX = 2**63 - 1  # a version is a global step: an int64


def parse_version(text: str) -> int | None:
    """``text`` as a version: ASCII digits whose value fits int64 -> that int; anything
    else (``"²"``, 5,000 digits, a sign) -> None. Never raises; thread-safe."""
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        return None  # len check first: int() of 5,000 digits raises ValueError
    value = int(text)
    return value if value <= INT64_MAX else None


def url_version(text: str) -> int:
    """The ``{v}`` of ``/versions/{v}`` (ASCII digits) as an int.

    Raises:
        HttpError: 404 when it does not fit int64 (no such version can exist).
    """
    version = parse_version(text)
    if version is None:
        raise HttpError(
            404, f"version {short(text)} not found: a version is a global step in "
            "[0, 2**63 - 1]")
    return version


class HttpError(Exception):
    """An answer other than 200, raised by a handler: ``status`` (int), ``message`` (the
    ``"error"`` text), extra ``headers`` (or None)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


# allow_nan: TF Serving writes NaN/Infinity for non-finite outputs too.
dumps = json.JSONEncoder(allow_nan=True, separators=(",", ":")).encode
loads = json.loads


def json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """``body`` as compact JSON (NaN allowed), ``application/json``."""
    return Response(dumps(body).encode(), status, headers, media_type="application/json")


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    """``{"error": message}`` with ``status``."""
    return json_response({"error": message}, status, headers)


def map_error(e: Exception, method: str, path: str) -> tuple[int, str, dict[str, str] | None]:
    """An exception -> (HTTP status, message, extra headers); unexpected ones are logged."""
    if isinstance(e, HttpError):
        return e.status, e.message, e.headers
    if isinstance(e, errors.OpError):
        status = getattr(e, "http_status", None)  # an error that names its own (429)
        if status is not None:
            return status, e.message, {"Retry-After": "1"} if status == 429 else None
        status = HTTP_STATUS.get(e.error_code, 500)
        if status >= 500 and "\n" in e.message:  # a model's traceback: for the log only
            logger.error("%s %s failed: %s", method, path, e.message)
            return status, first_line(e.message), None
        return status, e.message, None
    logger.exception("unexpected error answering %s %s", method, path)
    return 500, f"internal error: {type(e).__name__}: {e}", None


def bearer_matches(authorization: str, token: bytes) -> bool:
    """Whether an ``Authorization`` value (HTTP header or gRPC metadata) is ``Bearer
    <token>``, the token compared in constant time."""
    scheme, _, given = authorization.partition(" ")
    ok = hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"), token)
    return scheme.lower() == "bearer" and ok


def first_line(message: str) -> str:
    """A multi-line error (a model's Python traceback, as TF's ``py_func`` errors carry)
    cut to its first line, for an answer; the whole goes to the log."""
    line = message.split("\n", 1)[0]
    return line if line == message else f"{line} (the server's log has the rest)"


def decode_json(body: bytes) -> Any:
    """The parsed JSON ``body``.

    Raises:
        HttpError: 400, not valid JSON (or nesting too deeply).
    """
    try:
        return loads(body)
    except RecursionError:
        raise HttpError(400, "request body is not valid JSON: it nests too deeply") from None
    except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError is a ValueError
        raise HttpError(400, f"request body is not valid JSON: {e}") from None


def short(value: Any) -> str:
    """``value`` as JSON for an error message, cut to 60 characters."""
    text = dumps(value) if not isinstance(value, bytes) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class ClientGone(Exception):
    """The client disconnected before its request body was complete."""


async def read_capped_body(headers: Any, receive: Any, cap: int) -> bytes:
    """The ASGI request body, refused with 413 past ``cap`` bytes: by a declared
    Content-Length before reading, and by counting while the body streams in.

    Raises:
        HttpError: 400 for a non-integer Content-Length, 413 over the cap.
        ClientGone: the client went away mid-body.
    """
    for key, value in headers:
        if key == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                raise HttpError(
                    400, f"Content-Length must be an integer, got {value.decode('latin-1')!r}"
                ) from None
            if declared > cap:
                raise HttpError(
                    413, f"request body of {declared} bytes exceeds the limit of {cap} bytes"
                )
    chunks: list[bytes] = []
    total = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        total += len(chunk)
        if total > cap:
            raise HttpError(413, f"request body exceeds the limit of {cap} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class _VersionDigits(Convertor[str]):
    """``{version:digits}``: the digits as text, parsed by :func:`url_version` in the
    handler (starlette's ``int`` convertor raises on 5,000 digits: a 500)."""

    regex = "[0-9]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


# Registered at import: the routes of http.py and kserve_v2.py use ``{version:digits}``.
register_url_convertor("digits", _VersionDigits())
