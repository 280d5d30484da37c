"""The ckptsync error hierarchy, named as TensorFlow 1's (`tf.errors`).

Every error ckptsync raises derives from :class:`CkptsyncError`. Runtime errors are
:class:`OpError` subclasses constructed as TF's ``(node_def, op, message)``. Mistakes made
while *building* a graph or calling an API wrongly raise the builtin TF1 raises there
(``ValueError``, ``TypeError``, ``RuntimeError``) through subclasses that are also
``CkptsyncError``, so both ``except ValueError`` and ``except CkptsyncError`` catch them.

Example:
    >>> import ckptsync as cs
    >>> try:
    ...     raise cs.errors.NotFoundError(None, None, "Key w not found in checkpoint")
    ... except cs.errors.OpError as e:
    ...     print(e.error_code, e.message)
    5 Key w not found in checkpoint
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CkptsyncError",
    "CkptsyncValueError",
    "CkptsyncTypeError",
    "CkptsyncRuntimeError",
    "OpError",
    "CancelledError",
    "UnknownError",
    "InvalidArgumentError",
    "DeadlineExceededError",
    "NotFoundError",
    "AlreadyExistsError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "FailedPreconditionError",
    "AbortedError",
    "OutOfRangeError",
    "UnimplementedError",
    "InternalError",
    "UnavailableError",
    "DataLossError",
    "error_code_name",
]


class CkptsyncError(Exception):
    """Root of every error ckptsync raises."""


class CkptsyncValueError(CkptsyncError, ValueError):
    """A bad value passed to an API; where TF1 raises ``ValueError``."""


class CkptsyncTypeError(CkptsyncError, TypeError):
    """A value of the wrong type passed to an API; where TF1 raises ``TypeError``."""


class CkptsyncRuntimeError(CkptsyncError, RuntimeError):
    """An API used in the wrong state (e.g. a finalized graph); as TF1's ``RuntimeError``."""


# Canonical codes from TensorFlow's error_codes.proto.
OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
DATA_LOSS = 15
UNAUTHENTICATED = 16

_CODE_NAMES = {
    OK: "OK",
    CANCELLED: "CANCELLED",
    UNKNOWN: "UNKNOWN",
    INVALID_ARGUMENT: "INVALID_ARGUMENT",
    DEADLINE_EXCEEDED: "DEADLINE_EXCEEDED",
    NOT_FOUND: "NOT_FOUND",
    ALREADY_EXISTS: "ALREADY_EXISTS",
    PERMISSION_DENIED: "PERMISSION_DENIED",
    RESOURCE_EXHAUSTED: "RESOURCE_EXHAUSTED",
    FAILED_PRECONDITION: "FAILED_PRECONDITION",
    ABORTED: "ABORTED",
    OUT_OF_RANGE: "OUT_OF_RANGE",
    UNIMPLEMENTED: "UNIMPLEMENTED",
    INTERNAL: "INTERNAL",
    UNAVAILABLE: "UNAVAILABLE",
    DATA_LOSS: "DATA_LOSS",
    UNAUTHENTICATED: "UNAUTHENTICATED",
}


def error_code_name(code: int) -> str:
    """Returns TF's canonical name for an error code, e.g. ``5 -> "NOT_FOUND"``."""
    return _CODE_NAMES.get(code, "UNKNOWN")


class OpError(CkptsyncError):
    """A runtime failure, as TF's ``tf.errors.OpError``.

    Args:
        node_def: unused description of the node (kept for TF's signature); may be None.
        op: the :class:`~ckptsync.graph.Operation` that failed, or None.
        message: one sentence naming the thing that failed and what was expected.
        error_code: TF's canonical code; subclasses fix it.
    """

    error_code: int = UNKNOWN

    def __init__(self, node_def: Any, op: Any, message: str, error_code: int | None = None):
        super().__init__(message)
        self.node_def = node_def
        self.op = op
        self.message = message
        if error_code is not None:
            self.error_code = error_code

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable across processes (async save workers) without the op object.
        return (self.__class__, (None, None, self.message))


def _make(name: str, code: int, doc: str) -> type[OpError]:
    cls = type(name, (OpError,), {"error_code": code, "__doc__": doc})

    def __init__(self: OpError, node_def: Any, op: Any, message: str) -> None:
        OpError.__init__(self, node_def, op, message, code)

    cls.__init__ = __init__  # type: ignore[misc]
    return cls


CancelledError = _make("CancelledError", CANCELLED, "An operation was cancelled.")
UnknownError = _make("UnknownError", UNKNOWN, "An unknown error.")
InvalidArgumentError = _make(
    "InvalidArgumentError", INVALID_ARGUMENT, "A bad argument at run time (shape, dtype, value)."
)
DeadlineExceededError = _make("DeadlineExceededError", DEADLINE_EXCEEDED, "A deadline expired.")
NotFoundError = _make("NotFoundError", NOT_FOUND, "A file, key or variable was not found.")
AlreadyExistsError = _make("AlreadyExistsError", ALREADY_EXISTS, "It already exists.")
PermissionDeniedError = _make("PermissionDeniedError", PERMISSION_DENIED, "Permission denied.")
ResourceExhaustedError = _make(
    "ResourceExhaustedError", RESOURCE_EXHAUSTED, "Out of a resource (disk space, memory)."
)
FailedPreconditionError = _make(
    "FailedPreconditionError",
    FAILED_PRECONDITION,
    "The system is not in a state to run this (e.g. an uninitialized variable).",
)
AbortedError = _make("AbortedError", ABORTED, "The operation was aborted; retrying may work.")
OutOfRangeError = _make("OutOfRangeError", OUT_OF_RANGE, "Iteration past the end of the input.")
UnimplementedError = _make("UnimplementedError", UNIMPLEMENTED, "Not implemented.")
InternalError = _make("InternalError", INTERNAL, "An internal invariant broke.")
UnavailableError = _make("UnavailableError", UNAVAILABLE, "A service is unavailable for now.")
DataLossError = _make("DataLossError", DATA_LOSS, "Unrecoverable data loss or corruption.")
