"""``cs.logging``: TF1's ``tf.logging`` over Python's :mod:`logging`, as TF's
``tf_logging.py``.

Messages go to the logger named ``"tensorflow"`` (as TF's, so a program's
``logging.getLogger("tensorflow")`` configuration applies unchanged). On first use, when
the root logger has no handler, it gets one that writes ``LEVEL:tensorflow:message`` to
stderr (stdout in an interactive shell, which also starts at INFO), as TF; otherwise
records only propagate to the program's handlers (a root handler added later logs them
twice, as TF's). The level starts unset (WARNING
through the root), as TF1.

Where TF1's own hooks log through ``tf.logging`` (``LoggingTensorHook``'s ``loss = ...``
lines, ``StepCounterHook``), ckptsync's log to the ``"ckptsync"`` logger:
:func:`set_verbosity` sets both levels and the handler above serves both, so
``tf.logging.set_verbosity(tf.logging.INFO)`` shows them as in TF1.

Example:
    >>> import ckptsync as tf
    >>> tf.logging.set_verbosity(tf.logging.ERROR)
    >>> tf.logging.get_verbosity() == tf.logging.ERROR
    True
    >>> tf.logging.warning("not shown at ERROR: %d", 3)

Thread-safety: as :mod:`logging`; the counters of :func:`log_every_n` and
:func:`log_first_n` are not locked (as TF's).
"""

from __future__ import annotations

import logging as _logging
import sys as _sys
import threading as _threading
from logging import DEBUG, ERROR, FATAL, INFO, WARN
from typing import Any

__all__ = ["DEBUG", "INFO", "WARN", "ERROR", "FATAL", "get_logger", "set_verbosity",
           "get_verbosity", "log", "debug", "info", "warn", "warning", "error", "fatal",
           "vlog", "log_if", "log_every_n", "log_first_n", "TaskLevelStatusMessage", "flush"]

# The loggers a verbosity applies to: TF's own name, then ckptsync's (its hooks).
LOGGER_NAMES = ("tensorflow", "ckptsync")
_logger: _logging.Logger | None = None
_lock = _threading.Lock()
_counts: dict[tuple[str, int], int] = {}


def _interactive() -> bool:
    return hasattr(_sys, "ps1") or bool(_sys.flags.interactive)


def get_logger() -> _logging.Logger:
    """The ``"tensorflow"`` logger, set up on first use as TF's ``tf.get_logger``."""
    global _logger
    if _logger is not None:
        return _logger
    with _lock:
        if _logger is None:
            logger = _logging.getLogger(LOGGER_NAMES[0])
            if not _logging.getLogger().handlers:  # the root is unconfigured: TF's handler
                interactive = _interactive()
                handler = _logging.StreamHandler(_sys.stdout if interactive else _sys.stderr)
                handler.setFormatter(_logging.Formatter(_logging.BASIC_FORMAT, None))
                for name in LOGGER_NAMES:
                    other = _logging.getLogger(name)
                    other.addHandler(handler)
                    if interactive:
                        other.setLevel(INFO)
            _logger = logger
    return _logger


def set_verbosity(v: int) -> None:
    """Shows messages at level ``v`` and above (``tf.logging.INFO``...), as TF's
    ``tf.logging.set_verbosity``; also for ckptsync's own loggers (its hooks)."""
    get_logger()
    for name in LOGGER_NAMES:
        _logging.getLogger(name).setLevel(v)


def get_verbosity() -> int:
    """The effective level of the ``"tensorflow"`` logger."""
    return get_logger().getEffectiveLevel()


def log(level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
    get_logger().log(level, msg, *args, stacklevel=2, **kwargs)


def debug(msg: Any, *args: Any, **kwargs: Any) -> None:
    get_logger().debug(msg, *args, stacklevel=2, **kwargs)


def info(msg: Any, *args: Any, **kwargs: Any) -> None:
    get_logger().info(msg, *args, stacklevel=2, **kwargs)


def warning(msg: Any, *args: Any, **kwargs: Any) -> None:
    get_logger().warning(msg, *args, stacklevel=2, **kwargs)


warn = warning


def error(msg: Any, *args: Any, **kwargs: Any) -> None:
    get_logger().error(msg, *args, stacklevel=2, **kwargs)


def fatal(msg: Any, *args: Any, **kwargs: Any) -> None:
    """Logs at FATAL (= CRITICAL); as TF's Python ``tf.logging.fatal``, nothing exits."""
    get_logger().critical(msg, *args, stacklevel=2, **kwargs)


def vlog(level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
    """Logs at ``level``, as TF's ``tf.logging.vlog`` (the same as :func:`log`)."""
    get_logger().log(level, msg, *args, stacklevel=2, **kwargs)


def log_if(level: int, msg: Any, condition: Any, *args: Any) -> None:
    """Logs ``msg % args`` at ``level`` when ``condition`` holds."""
    if condition:
        get_logger().log(level, msg, *args, stacklevel=2)


def _count_at_caller() -> int:
    f = _sys._getframe(2)
    key = (f.f_code.co_filename, f.f_lineno)
    _counts[key] = _counts.get(key, -1) + 1
    return _counts[key]


def log_every_n(level: int, msg: Any, n: int, *args: Any) -> None:
    """Logs the 1st, (n+1)-th, (2n+1)-th... call made from this line, as TF's."""
    if not _count_at_caller() % n:
        get_logger().log(level, msg, *args, stacklevel=2)


def log_first_n(level: int, msg: Any, n: int, *args: Any) -> None:
    """Logs only the first ``n`` calls made from this line, as TF's."""
    if _count_at_caller() < n:
        get_logger().log(level, msg, *args, stacklevel=2)


def TaskLevelStatusMessage(msg: Any) -> None:  # noqa: N802 - TF's name
    """Logs ``msg`` at ERROR, as TF's."""
    get_logger().error(msg, stacklevel=2)


def flush() -> None:
    """Flushes the handlers (TF's raises NotImplementedError; flushing is harmless)."""
    for name in LOGGER_NAMES:
        for h in _logging.getLogger(name).handlers:
            h.flush()

