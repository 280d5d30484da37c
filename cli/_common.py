"""Shared CLI plumbing for ``trainer``, ``infer`` and ``ckptsync``.

- :class:`OneLineErrorGroup`: every expected error is one line on stderr,
  ``<command>: error: <message>``, exit code 2 for usage errors and 1 for runtime failures,
  no traceback.
- :func:`option`: a click option that can also come from ``CKPTSYNC_<NAME>``.
- :func:`limit_blas_threads`, :func:`setup_logging`.
"""

from __future__ import annotations

import json
import logging
import math
import re
import sys
from typing import Any, NoReturn

import click

EXIT_RUNTIME = 1
EXIT_USAGE = 2
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class CommandError(click.ClickException):
    """An expected failure: one line, with its exit code (1 runtime, 2 usage)."""

    def __init__(self, message: str, exit_code: int = EXIT_RUNTIME):
        super().__init__(message)
        # click declares exit_code a ClassVar; each CommandError carries its own.
        self.exit_code = exit_code  # type: ignore[misc]
        self.ctx = click.get_current_context(silent=True)


class OneLineErrorGroup(click.Group):
    """A click group that reports any click error as one line on stderr, and refuses an
    argument holding a NUL byte (no path can; the OS would raise deep inside) as a usage
    error."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        bad = next((a for a in args if "\0" in a), None)
        if bad is not None:
            raise click.UsageError(f"argument {bad!r} holds a NUL byte; no path or value "
                                   f"can.", ctx)
        return super().parse_args(ctx, args)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.Abort as e:
            if isinstance(e.__cause__, KeyboardInterrupt):  # Ctrl-C: the shell's 128 + 2
                click.echo(f"{self.name}: interrupted", err=True)
                sys.exit(130)
            click.echo(f"{self.name}: aborted", err=True)
            sys.exit(EXIT_RUNTIME)
        except click.ClickException as e:
            ctx = getattr(e, "ctx", None)
            prog = kwargs.get("prog_name") or click.utils._detect_program_name()
            where = ctx.command_path if ctx is not None else prog
            click.echo(f"{where}: error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)


def fail(message: str, code: int = EXIT_RUNTIME) -> NoReturn:
    """Ends the command with one clear line and ``code``."""
    raise CommandError(message, code)


def option(*names: str, **kw: Any) -> Any:
    """``click.option`` that also reads ``CKPTSYNC_<LONG_NAME>`` from the environment."""
    long = next(n for n in names if n.startswith("--")).split("/")[0]
    env = "CKPTSYNC_" + long.lstrip("-").replace("-", "_").upper()
    return click.option(*names, envvar=env, show_envvar=True, **kw)


class Int(click.IntRange):
    """``click.IntRange`` that takes only plain ASCII digits: Python's ``int`` would also
    read ``1_0`` as 10 and Arabic-Indic digits as numbers."""

    name = "integer"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, str) and not re.fullmatch(r"-?[0-9]+", value.strip()):
            self.fail(f"{value!r} is not a whole number (digits 0-9 only).", param, ctx)
        return super().convert(value, param, ctx)


class Real(click.FloatRange):
    """``click.FloatRange`` that refuses ``nan`` and ``inf`` (and ``1_0``-style spellings)
    in the flag's own words, instead of a later error naming an internal field."""

    name = "number"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, str) and not re.fullmatch(
                r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", value.strip()):
            self.fail(f"{value!r} is not a finite number (such as 30 or 0.5).", param, ctx)
        out = super().convert(value, param, ctx)
        if isinstance(out, float) and not math.isfinite(out):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return out


def limit_blas_threads(n: int) -> None:
    """Caps numpy's BLAS threads: small matmuls run far faster on one thread, and the
    trainer and the server often share a machine (as ``ConfigProto(
    intra_op_parallelism_threads=n)``, so a session's default does not undo it)."""
    from ckptsync.session.config import ConfigProto, apply_config  # CLI start-up time

    apply_config(ConfigProto(intra_op_parallelism_threads=n))


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
