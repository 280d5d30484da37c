"""Shared CLI plumbing: error-to-exit-code mapping, logging, BLAS threads."""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

EXIT_RUNTIME = 1
EXIT_USAGE = 2


def limit_blas_threads(n: int) -> None:
    """Caps numpy's BLAS threads (small matmuls run far faster on one thread, and the
    trainer and server often share a machine)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(n)


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        class _Json(logging.Formatter):
            def format(self, record: logging.LogRecord) -> str:
                return json.dumps({"time": record.created, "level": record.levelname,
                                   "logger": record.name, "message": record.getMessage()})

        handler.setFormatter(_Json())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def fail(message: str, code: int) -> None:
    """One clear line on stderr, then exit with ``code`` (no traceback)."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def handle_errors(usage: tuple[type[BaseException], ...]) -> Callable[[F], F]:
    """Maps expected library errors to one line and exit code 2 (``usage``) or 1 (others)."""
    from ckptsync.errors import CkptsyncError

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except click.exceptions.ClickException:
                raise
            except usage as e:
                fail(str(e), EXIT_USAGE)
            except (CkptsyncError, OSError) as e:
                fail(str(e), EXIT_RUNTIME)

        return wrapper  # type: ignore[return-value]

    return deco
