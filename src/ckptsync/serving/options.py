"""Serving options: frozen dataclasses that validate themselves on construction.

:class:`ManagerOptions` configures a :class:`~.manager.ModelManager` (watching, loading,
retries, memory, the watchdog); :class:`HttpOptions` configures the REST app of
:func:`~.http.create_app` (body cap, batch cap, where the forward runs, admin token) and
the connection bounds ``infer serve`` gives its server (idle timeout, connection cap).
``infer serve`` builds both from its flags. ``ModelManager(..., retry_max_s=5)`` and
``create_app(..., max_batch_size=64)`` still take each field as a keyword and build the
options from them.

Example:
    >>> ManagerOptions(poll=True, retry_initial_s=0.5).retry_max_s
    60.0
    >>> ManagerOptions(retry_initial_s=5.0, retry_max_s=1.0)
    Traceback (most recent call last):
    ...
    ckptsync.errors.CkptsyncValueError: need 0 < retry_initial_s <= retry_max_s, got retry_initial_s=5.0 and retry_max_s=1.0.
"""  # noqa: E501

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from ..errors import CkptsyncTypeError, CkptsyncValueError
from .gate import Gate

__all__ = ["HttpOptions", "ManagerOptions", "apply_overrides"]

_O = TypeVar("_O", "ManagerOptions", "HttpOptions")


def _check_bool(owner: object, *names: str) -> None:
    for name in names:
        value = getattr(owner, name)
        if not isinstance(value, bool):
            raise CkptsyncTypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}.")


def _check_number(owner: object, name: str, *, low: float, strict: bool,
                  integer: bool = False, optional: bool = False) -> None:
    """Checks ``owner.name`` is a (finite) number ``> low`` (``strict``) or ``>= low``."""
    value: Any = getattr(owner, name)
    if value is None and optional:
        return
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        kind = "an int" if integer else "a number"
        extra = " or None" if optional else ""
        raise CkptsyncTypeError(
            f"{name} must be {kind}{extra}, got {type(value).__name__} {value!r}.")
    number = float(cast(float, value))
    if not math.isfinite(number) or (number <= low if strict else number < low):
        bound = f"> {low:g}" if strict else f">= {low:g}"
        extra = " or None" if optional else ""
        raise CkptsyncValueError(f"{name} must be {bound}{extra}, got {value!r}.")


@dataclass(frozen=True)
class ManagerOptions:
    """How a :class:`~.manager.ModelManager` watches, loads and retries.

    Attributes:
        poll: watch by polling (NFS, no inotify) instead of file events.
        rescan_interval_s: backstop rescan period of the source, seconds; > 0.
        allow_nonfinite: serve checkpoints holding NaN/Inf.
        retry_initial_s: first retry delay after a failed load, seconds; doubles per
            failure of the same version up to ``retry_max_s``.
        retry_max_s: longest retry delay, seconds; >= ``retry_initial_s``.
        max_status_versions: how many finished (END) versions ``status`` remembers; >= 0.
        gate: ``gate(Candidate) -> bool | (bool, str)``, called before a version is
            served under the latest policy (see :mod:`.gate`); None accepts every verified
            version.
        max_load_attempts: loads of one version before it is given up (until its file
            changes); >= 1.
        load_timeout_s: a load running longer is reported stuck, seconds; None: never.
        free_before_load: drop the served snapshot before loading the next one (half the
            peak memory, a short unavailability per reload).
        unload_wait_s: longest wait for an old snapshot's requests before loading anyway,
            seconds; >= 0.
        read_in_subprocess: read and verify checkpoints in a worker process and map the
            result as shared memory (loading never holds this process's interpreter lock;
            a file that crashes HDF5 kills only the worker); False reads on the load thread.
        apply_in_subprocess: with ``read_in_subprocess``, the read process also applies a
            delta's row changes to the served tables (through shared memory: copying the
            touched blocks and hashing them never hold this process's interpreter lock,
            which a busy server's requests hold most of the time); False applies them on
            the load thread (the reference path, same result).
        watch_in_subprocess: run the source (watchdog's observer, the rescans) in a child
            process (:class:`~._source_process.ProcessCheckpointSource`); False watches in
            this process.
        close_timeout_s: how long ``close`` waits for a load in progress, seconds; >= 0.

    Raises:
        CkptsyncTypeError: a field of the wrong type (also a ``TypeError``).
        CkptsyncValueError: a field out of range, or ``retry_initial_s > retry_max_s``
            (the message names both); also a ``ValueError``.

    Thread-safety: immutable.
    """

    poll: bool = False
    rescan_interval_s: float = 1.0
    allow_nonfinite: bool = False
    retry_initial_s: float = 1.0
    retry_max_s: float = 60.0
    max_status_versions: int = 16
    gate: Gate | None = None
    max_load_attempts: int = 5
    load_timeout_s: float | None = 300.0
    free_before_load: bool = False
    unload_wait_s: float = 30.0
    read_in_subprocess: bool = True
    apply_in_subprocess: bool = True
    watch_in_subprocess: bool = True
    close_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        _check_bool(self, "poll", "allow_nonfinite", "free_before_load", "read_in_subprocess",
                    "apply_in_subprocess", "watch_in_subprocess")
        _check_number(self, "rescan_interval_s", low=0, strict=True)
        _check_number(self, "retry_initial_s", low=0, strict=True)
        _check_number(self, "retry_max_s", low=0, strict=True)
        if self.retry_initial_s > self.retry_max_s:
            raise CkptsyncValueError(
                "need 0 < retry_initial_s <= retry_max_s, got "
                f"retry_initial_s={self.retry_initial_s} and retry_max_s={self.retry_max_s}.")
        _check_number(self, "max_status_versions", low=0, strict=False, integer=True)
        _check_number(self, "max_load_attempts", low=1, strict=False, integer=True)
        _check_number(self, "load_timeout_s", low=0, strict=True, optional=True)
        _check_number(self, "unload_wait_s", low=0, strict=False)
        _check_number(self, "close_timeout_s", low=0, strict=False)
        if self.gate is not None and not callable(self.gate):
            raise CkptsyncTypeError(
                f"gate must be a callable gate(candidate) or None, got "
                f"{type(self.gate).__name__}.")

    def replace(self, **changes: Any) -> ManagerOptions:
        """A copy with ``changes`` applied (validated again).

        Raises:
            TypeError: a name that is not a field; as the constructor otherwise.
        """
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class HttpOptions:
    """How the REST app of :func:`~.http.create_app` takes requests.

    Attributes:
        max_request_bytes: request body cap, bytes; larger bodies get 413; > 0.
        max_batch_size: most rows per predict request; more get 400; > 0.
        inline_max_body_bytes: bodies up to this size are decoded, run and encoded on the
            event loop (as a bare app does: one interpreter lock gives a pool thread no
            parallelism, and its hand-offs cost 256-row predicts ~20 % of their
            throughput); larger ones in the thread pool, so that no request holds the
            event loop longer than this size's work (256 KiB of JSON: ~12 ms), bytes;
            >= 0.
        pool_switch_interval_s: while a big predict runs in the pool thread, the
            interpreter's switch interval (``sys.setswitchinterval``, process-wide) is at
            least this, seconds: the event loop, woken by other connections' bytes, takes
            the interpreter lock from the predict at most that often instead of at every
            interval (``infer serve`` runs at 0.1 ms), and each hand-off costs two context
            switches and cold caches (at 0.1 ms: 0.8x a bare app's CPU per request at 256
            rows). The value found is restored when no big predict runs. > 0, or None:
            leave the interval alone.
        admin_token: enables ``:pin`` / ``:unpin`` for requests bearing this token; None
            answers them 404. Must not be blank.
        idle_timeout_s: a connection waiting for a request's headers (never sent a byte,
            idle between keep-alive requests, or sending its headers slowly) is closed after
            this long, seconds; > 0, or None: never. Applied by ``infer serve``'s server
            (:func:`~.connections.limited_protocol`), not by the app.
        max_connections: most open connections; one more closes the connection that has
            waited longest for a request, or, when all are busy, is answered only for
            ``/healthz`` and ``/readyz`` (503 otherwise); >= 1, or None: no cap. Applied by
            ``infer serve``'s server, like ``idle_timeout_s``.

    Raises:
        CkptsyncTypeError: a field of the wrong type (also a ``TypeError``).
        CkptsyncValueError: a field out of range, a blank ``admin_token`` (also a
            ``ValueError``).

    Thread-safety: immutable.
    """

    max_request_bytes: int = 64 * 2**20
    max_batch_size: int = 4096
    inline_max_body_bytes: int = 256 * 2**10
    pool_switch_interval_s: float | None = 0.005
    admin_token: str | None = None
    idle_timeout_s: float | None = 10.0
    max_connections: int | None = 2048

    def __post_init__(self) -> None:
        _check_number(self, "idle_timeout_s", low=0, strict=True, optional=True)
        _check_number(self, "max_connections", low=1, strict=False, integer=True, optional=True)
        _check_number(self, "max_request_bytes", low=0, strict=True, integer=True)
        _check_number(self, "max_batch_size", low=0, strict=True, integer=True)
        _check_number(self, "inline_max_body_bytes", low=0, strict=False, integer=True)
        _check_number(self, "pool_switch_interval_s", low=0, strict=True, optional=True)
        if self.admin_token is not None:
            if not isinstance(self.admin_token, str):
                raise CkptsyncTypeError(
                    f"admin_token must be a str or None, got {type(self.admin_token).__name__}.")
            if not self.admin_token.strip():
                raise CkptsyncValueError("admin_token must not be empty.")

    def replace(self, **changes: Any) -> HttpOptions:
        """A copy with ``changes`` applied (validated again).

        Raises:
            TypeError: a name that is not a field; as the constructor otherwise.
        """
        return dataclasses.replace(self, **changes)

    def __repr__(self) -> str:  # never print the token
        token = None if self.admin_token is None else "***"
        return (f"HttpOptions(max_request_bytes={self.max_request_bytes}, "
                f"max_batch_size={self.max_batch_size}, "
                f"inline_max_body_bytes={self.inline_max_body_bytes}, "
                f"pool_switch_interval_s={self.pool_switch_interval_s}, admin_token={token}, "
                f"idle_timeout_s={self.idle_timeout_s}, max_connections={self.max_connections})")


def apply_overrides(cls: type[_O], options: _O | None, overrides: dict[str, Any],
                    caller: str) -> _O:
    """``options`` (or ``cls()``) with the keyword ``overrides`` of ``caller`` applied:
    how ``ModelManager``, ``HotReloadingModel`` and ``create_app`` keep taking each option
    as a keyword.

    Raises:
        TypeError: a name in ``overrides`` that is not a field of ``cls`` (the message
            lists the fields), or a value of the wrong type.
        ValueError: a value out of range.
    """
    if options is None:
        if not overrides:
            return cls()
        fields = set(cls.__dataclass_fields__)
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise TypeError(
                f"{caller}() got unexpected keyword argument(s) {', '.join(unknown)}; its "
                f"options ({cls.__name__}) are {', '.join(sorted(fields))}")
        return cls(**overrides)
    if not isinstance(options, cls):
        raise CkptsyncTypeError(
            f"{caller}(options=...) must be a {cls.__name__}, got {type(options).__name__}.")
    return apply_overrides(cls, None, {**vars(options), **overrides}, caller) if overrides \
        else options
