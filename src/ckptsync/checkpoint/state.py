"""The ``checkpoint`` state file, in TF1's CheckpointState protobuf text format.

```
model_checkpoint_path: "model.ckpt-1000"
all_model_checkpoint_paths: "model.ckpt-800"
all_model_checkpoint_paths: "model.ckpt-1000"
all_model_checkpoint_timestamps: 1700000000.5
all_model_checkpoint_timestamps: 1700000100.25
last_preserved_timestamp: 1699999990.0
```

Written atomically (temp, fsync, rename, fsync dir) by :func:`update_checkpoint_state`;
read by :func:`get_checkpoint_state`, which refuses any entry resolving outside the
directory (the prefix or its ``.h5``, symlinks followed) or holding a NUL byte, so a state
file can never point readers at arbitrary files; and which opens only a regular file,
without blocking (a FIFO, device or directory in its place is refused, never waited on).
"""

from __future__ import annotations

import logging
import math
import os
import re
import stat
from dataclasses import dataclass, field

from ..errors import CkptsyncError, CkptsyncRuntimeError, CkptsyncValueError
from ._atomic import publish
from ._format import data_path

__all__ = [
    "CheckpointState",
    "generate_checkpoint_state_proto",
    "update_checkpoint_state",
    "get_checkpoint_state",
    "read_checkpoint_state",
    "StateFileError",
    "checkpoint_state_to_text",
    "parse_checkpoint_state",
]

logger = logging.getLogger(__name__)

DEFAULT_LATEST_FILENAME = "checkpoint"
_MAX_STATE_BYTES = 16 * 1024 * 1024


@dataclass
class CheckpointState:
    """TF1's ``CheckpointState`` proto as a dataclass.

    Attributes:
        model_checkpoint_path: the latest checkpoint prefix.
        all_model_checkpoint_paths: retained prefixes, oldest first, latest last.
        all_model_checkpoint_timestamps: seconds since the epoch, one per path, or [].
        last_preserved_timestamp: time of the last checkpoint kept by
            keep_checkpoint_every_n_hours, or None.
    """

    model_checkpoint_path: str
    all_model_checkpoint_paths: list[str] = field(default_factory=list)
    all_model_checkpoint_timestamps: list[float] = field(default_factory=list)
    last_preserved_timestamp: float | None = None

    def __str__(self) -> str:
        """The protobuf text format, as ``str()`` of TF1's proto (the state file's text)."""
        return checkpoint_state_to_text(self)


# -- text format -----------------------------------------------------------------------
_ESCAPES_OUT = {0x0A: b"\\n", 0x0D: b"\\r", 0x09: b"\\t", 0x22: b'\\"', 0x27: b"\\'", 0x5C: b"\\\\"}


def _quote(text: str) -> str:
    """Protobuf C-escaping, as ``text_format`` without as_utf8 (non-ASCII as octal)."""
    out = bytearray(b'"')
    for byte in text.encode("utf-8"):
        if byte in _ESCAPES_OUT:
            out += _ESCAPES_OUT[byte]
        elif 0x20 <= byte < 0x7F:
            out.append(byte)
        else:
            out += b"\\%03o" % byte
    out += b'"'
    return out.decode("ascii")


def _format_float(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(float(value))


def checkpoint_state_to_text(state: CheckpointState) -> str:
    """Serializes a state exactly as TF's ``text_format.MessageToString`` does."""
    lines = [f"model_checkpoint_path: {_quote(state.model_checkpoint_path)}"]
    lines += [f"all_model_checkpoint_paths: {_quote(p)}" for p in state.all_model_checkpoint_paths]
    lines += [
        f"all_model_checkpoint_timestamps: {_format_float(t)}"
        for t in state.all_model_checkpoint_timestamps
    ]
    if state.last_preserved_timestamp is not None:
        lines.append(f"last_preserved_timestamp: {_format_float(state.last_preserved_timestamp)}")
    return "".join(line + "\n" for line in lines)


_TOKEN_RE = re.compile(
    r"""\s+|\#[^\n]*|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)|(?P<colon>:)|(?P<sep>[;,])
    |(?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
    |(?P<num>[-+]?(?:inf(?:inity)?|nan|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)[fF]?)""",
    re.VERBOSE | re.IGNORECASE,
)
_ESCAPES_IN = {"n": 10, "r": 13, "t": 9, "a": 7, "b": 8, "f": 12, "v": 11, "?": 63}
_UNESCAPE_RE = re.compile(r"\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))", re.DOTALL)


def _unquote(token: str) -> str:
    def one(m: re.Match[str]) -> str:
        octal, hexa, char = m.groups()
        if octal is not None:
            return chr(int(octal, 8) & 0xFF)
        if hexa is not None:
            return chr(int(hexa, 16))
        return chr(_ESCAPES_IN[char]) if char in _ESCAPES_IN else char

    # Work on latin-1 code points = bytes, then decode the byte string as UTF-8.
    body = token[1:-1].encode("utf-8").decode("latin-1")
    return _UNESCAPE_RE.sub(one, body).encode("latin-1").decode("utf-8")


def parse_checkpoint_state(text: str) -> CheckpointState:
    """Parses TF's text format for CheckpointState (comments, ``'``/``"``, adjacent
    string concatenation, ``;``/``,`` separators; a repeated singular field: last wins).

    Raises:
        ValueError: a syntax error, an unknown field, or a value of the wrong kind.
    """
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"unexpected text at offset {pos}: {text[pos : pos + 20]!r}")
        pos = m.end()
        if m.lastgroup is not None:
            tokens.append((m.lastgroup, m.group(m.lastgroup)))
    state = CheckpointState("")
    i = 0
    while i < len(tokens):
        kind, name = tokens[i]
        if kind != "ident":
            raise ValueError(f"expected a field name, got {name!r}")
        if i + 1 >= len(tokens) or tokens[i + 1][0] != "colon":
            raise ValueError(f"expected ':' after {name}")
        i += 2
        if name in ("model_checkpoint_path", "all_model_checkpoint_paths"):
            parts = []
            while i < len(tokens) and tokens[i][0] == "str":
                parts.append(_unquote(tokens[i][1]))
                i += 1
            if not parts:
                raise ValueError(f"{name} needs a string value")
            value = "".join(parts)
            if name == "model_checkpoint_path":
                state.model_checkpoint_path = value
            else:
                state.all_model_checkpoint_paths.append(value)
        elif name in ("all_model_checkpoint_timestamps", "last_preserved_timestamp"):
            if i >= len(tokens) or tokens[i][0] not in ("num", "ident"):
                raise ValueError(f"{name} needs a number")
            literal = tokens[i][1]
            if literal[-1] in "fF" and not literal.lower().endswith("inf"):
                literal = literal[:-1]  # C-style float suffix: 1.5f
            number = float(literal)  # ValueError for other identifiers
            i += 1
            if name == "last_preserved_timestamp":
                state.last_preserved_timestamp = number
            else:
                state.all_model_checkpoint_timestamps.append(number)
        else:
            raise ValueError(f"unknown field {name!r}")
        if i < len(tokens) and tokens[i][0] == "sep":
            i += 1
    return state


# -- paths -----------------------------------------------------------------------------
def _state_filename(save_dir: str, latest_filename: str | None) -> str:
    name = DEFAULT_LATEST_FILENAME if latest_filename is None else latest_filename
    if not name or os.path.basename(name) != name or name in (".", ".."):
        raise CkptsyncValueError(
            f"latest_filename {latest_filename!r} must be a plain file name without a "
            f"directory part."
        )
    return os.path.join(save_dir, name)


def _is_inside(path: str, directory: str, real_dir: str | None = None) -> bool:
    """Whether ``path`` (relative to ``directory``, or absolute) resolves strictly inside
    ``directory`` after ``os.path.realpath`` (symlinks followed). ``real_dir``: the
    directory's realpath, when the caller already has it."""
    if real_dir is None:
        real_dir = os.path.realpath(directory)
    if path and "/" not in path and "\0" not in path and path not in (".", ".."):
        # A plain name: inside unless it is a symlink (one lstat instead of a realpath).
        if not os.path.islink(os.path.join(real_dir, path)):
            return True
    real = os.path.realpath(os.path.join(directory, path))
    return real != real_dir and os.path.commonpath([real, real_dir]) == real_dir


def _first_outside(paths: list[str], directory: str) -> str | None:
    """The first of ``paths`` that does not resolve inside ``directory`` (the prefix, or
    its data file ``<prefix>.h5``: a symlink to a file elsewhere escapes too), or None."""
    real_dir = os.path.realpath(directory)
    return next((p for p in paths if not _is_inside(p, directory, real_dir)
                 or not _is_inside(data_path(p), directory, real_dir)), None)


def file_kind(mode: int) -> str:
    """What a ``st_mode`` names, for an error message: ``"a FIFO (named pipe)"``."""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def read_regular_file(path: str, max_bytes: int) -> bytes:
    """Reads at most ``max_bytes`` of ``path`` if it is a regular file (symlinks followed),
    never blocking on a FIFO or device: it is refused before it is opened (``stat``), and
    the open itself is non-blocking and checked again (``fstat``: no swap in between).

    Raises:
        NotRegularFileError: ``path`` is a FIFO, device, directory or socket.
        FileNotFoundError, OSError: as ``open``.
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFileError(path, file_kind(st.st_mode))
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(path, file_kind(st.st_mode))
        return fh.read(max_bytes)


def _relative_to(save_dir: str, path: str, relative: bool) -> str:
    if os.path.isabs(path):
        if relative and os.path.dirname(path) == os.path.abspath(save_dir):
            return os.path.basename(path)  # a plain name: checked by _first_outside
        if relative and _is_inside(path, save_dir):
            return os.path.relpath(path, os.path.abspath(save_dir))
        return path
    if not os.path.isabs(save_dir):  # TF: relative paths are relative to the cwd here
        return os.path.relpath(path, save_dir)
    return path


def _generate(
    save_dir: str,
    model_checkpoint_path: str,
    all_model_checkpoint_paths: list[str] | None,
    all_model_checkpoint_timestamps: list[float] | None,
    last_preserved_timestamp: float | None,
    relative: bool,
) -> CheckpointState:
    save_dir = os.fspath(save_dir)
    paths = [os.fspath(p) for p in (all_model_checkpoint_paths or [])]
    model = os.fspath(model_checkpoint_path)
    if not paths or paths[-1] != model:
        logger.info("%s is not in all_model_checkpoint_paths. Manually adding it.", model)
        paths.append(model)
    stamps = [float(t) for t in (all_model_checkpoint_timestamps or [])]
    if stamps and len(stamps) != len(paths):
        raise CkptsyncValueError(
            f"Checkpoint timestamps, if provided, must match checkpoint paths (got paths "
            f"{paths} and timestamps {stamps})"
        )
    return CheckpointState(
        _relative_to(save_dir, model, relative),
        [_relative_to(save_dir, p, relative) for p in paths],
        stamps,
        None if last_preserved_timestamp is None else float(last_preserved_timestamp),
    )


def generate_checkpoint_state_proto(
    save_dir: str,
    model_checkpoint_path: str,
    all_model_checkpoint_paths: list[str] | None = None,
    all_model_checkpoint_timestamps: list[float] | None = None,
    last_preserved_timestamp: float | None = None,
) -> CheckpointState:
    """Builds a CheckpointState, as TF1's ``generate_checkpoint_state_proto``.

    ``model_checkpoint_path`` is appended to ``all_model_checkpoint_paths`` unless it is
    already last. Absolute paths inside ``save_dir`` become relative to it; relative
    paths are taken relative to the cwd and rewritten relative to ``save_dir`` when
    ``save_dir`` is itself relative (TF's rule); other paths are kept as given.

    Raises:
        CkptsyncValueError: timestamps given whose count differs from the paths'.
    """
    return _generate(
        save_dir,
        model_checkpoint_path,
        all_model_checkpoint_paths,
        all_model_checkpoint_timestamps,
        last_preserved_timestamp,
        relative=True,
    )


def update_checkpoint_state(
    save_dir: str,
    model_checkpoint_path: str,
    all_model_checkpoint_paths: list[str] | None = None,
    latest_filename: str | None = None,
    all_model_checkpoint_timestamps: list[float] | None = None,
    last_preserved_timestamp: float | None = None,
    save_relative_paths: bool = True,
) -> None:
    """Atomically rewrites ``<save_dir>/<latest_filename>``, as TF1's
    ``update_checkpoint_state`` (temp file, fsync, rename, fsync directory).

    Args:
        save_dir: the checkpoint directory (must exist).
        model_checkpoint_path: the newest prefix.
        all_model_checkpoint_paths: retained prefixes, oldest first.
        latest_filename: state file name, default ``"checkpoint"``; no directory part.
        all_model_checkpoint_timestamps: one per path (seconds since the epoch), or None.
        last_preserved_timestamp: seconds since the epoch, or None.
        save_relative_paths: write paths inside ``save_dir`` relative to it (default,
            so the directory can be moved); False keeps absolute paths as given.

    Raises:
        CkptsyncValueError: a path outside ``save_dir`` (readers would refuse it), bad
            latest_filename, or timestamps not matching paths.
        CkptsyncRuntimeError: the model path is the state file itself.
        ResourceExhaustedError, PermissionDeniedError, DataLossError, UnknownError: the
            write failed (the old state file is left as it was).

    Thread-safety: concurrent updates of one directory are each atomic; the last wins.
    """
    save_dir = os.fspath(save_dir)
    state_path = _state_filename(save_dir, latest_filename)
    state = _generate(
        save_dir,
        model_checkpoint_path,
        all_model_checkpoint_paths,
        all_model_checkpoint_timestamps,
        last_preserved_timestamp,
        relative=save_relative_paths,
    )
    p = _first_outside([state.model_checkpoint_path, *state.all_model_checkpoint_paths],
                       save_dir)
    if p is not None:
        raise CkptsyncValueError(
            f"Checkpoint path {p!r} resolves outside the checkpoint directory "
            f"{save_dir!r}; readers refuse such entries. Save inside the directory."
        )
    model = state.model_checkpoint_path
    plain = model and "/" not in model and "\0" not in model and model not in (".", "..")
    if not (plain and model != os.path.basename(state_path)
            and not os.path.islink(os.path.join(save_dir, model))
            and not os.path.islink(state_path)) and (
        os.path.realpath(os.path.join(save_dir, model)) == os.path.realpath(state_path)
    ):
        raise CkptsyncRuntimeError(
            f"Save path '{model_checkpoint_path}' conflicts with path used for checkpoint "
            f"state.  Please use a different save path."
        )
    data = checkpoint_state_to_text(state).encode("ascii")

    def write(tmp: str) -> None:
        with open(tmp, "xb") as fh:
            fh.write(data)
            fh.flush()

    publish(state_path, write, "write checkpoint state")


class StateFileError(CkptsyncValueError):
    """The state file exists but cannot be read or parsed (the message names it)."""


class NotRegularFileError(StateFileError):
    """The state file is a FIFO, device, directory or socket: refused, never read (a read
    could block forever). ``path`` and ``kind`` (e.g. ``"a FIFO (named pipe)"``)."""

    def __init__(self, path: str, kind: str):
        super().__init__(f"Checkpoint state {path} is {kind}, not a regular file; refusing "
                         f"to read it (replace it with a regular file, or remove it).")
        self.path, self.kind = path, kind


def get_checkpoint_state(
    checkpoint_dir: str, latest_filename: str | None = None
) -> CheckpointState | None:
    """Reads the state file, as TF1's ``tf.train.get_checkpoint_state``.

    Relative entries are joined with ``checkpoint_dir`` (not normalized), absolute ones
    kept. Temp files are never looked at.

    Returns:
        The state, or None when the file is absent, unreadable or unparsable (the last
        two logged as warnings).

    Raises:
        CkptsyncValueError: "Invalid checkpoint state loaded from D" when the model path
            is empty; an entry resolving (after ``os.path.realpath``) outside
            ``checkpoint_dir``, or whose ``.h5`` does (a symlink to a file elsewhere), or
            holding a NUL byte, naming the entry and the directory.
        NotRegularFileError: (a CkptsyncValueError) the state file is a FIFO, device,
            directory or socket; it is not opened for reading, so this never blocks.
    """
    try:
        return read_checkpoint_state(checkpoint_dir, latest_filename)
    except NotRegularFileError:
        raise  # a setup error, not a passing one: never read over silently
    except StateFileError as e:
        logger.warning("%s", e)
        return None


def read_checkpoint_state(
    checkpoint_dir: str, latest_filename: str | None = None
) -> CheckpointState | None:
    """:func:`get_checkpoint_state` for watchers that report a problem once: an
    unreadable or unparsable state file raises :class:`StateFileError` instead of
    logging a warning and returning None. None only when there is no state file."""
    checkpoint_dir = os.fspath(checkpoint_dir)
    path = _state_filename(checkpoint_dir, latest_filename)
    try:
        raw = read_regular_file(path, _MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        return None
    except (NotRegularFileError, ValueError):  # ValueError: a NUL byte in the path
        if "\0" in path:
            raise CkptsyncValueError(
                f"The checkpoint directory {checkpoint_dir!r} contains a NUL byte.") from None
        raise
    except OSError as e:
        raise StateFileError(f"Could not read checkpoint state {path}: {e}") from e
    try:
        if len(raw) > _MAX_STATE_BYTES:
            raise ValueError(f"larger than {_MAX_STATE_BYTES} bytes")
        state = parse_checkpoint_state(raw.decode("utf-8"))
    except (ValueError, CkptsyncError) as e:
        raise StateFileError(f"Unparsable checkpoint state {path}: {e}") from e
    if not state.model_checkpoint_path:
        raise CkptsyncValueError(f"Invalid checkpoint state loaded from {checkpoint_dir}")
    entry = next((p for p in [state.model_checkpoint_path, *state.all_model_checkpoint_paths]
                  if "\0" in p), None)
    if entry is not None:
        raise CkptsyncValueError(
            f"Checkpoint state {path} names {entry!r}, which holds a NUL byte; refusing it.")
    entry = _first_outside([state.model_checkpoint_path, *state.all_model_checkpoint_paths],
                           checkpoint_dir)
    if entry is not None:
        raise CkptsyncValueError(
            f"Checkpoint state {path} names {entry!r}, which resolves outside the "
            f"checkpoint directory {checkpoint_dir!r}; refusing it."
        )

    def join(p: str) -> str:
        return p if os.path.isabs(p) else os.path.join(checkpoint_dir, p)

    state.model_checkpoint_path = join(state.model_checkpoint_path)
    state.all_model_checkpoint_paths = [join(p) for p in state.all_model_checkpoint_paths]
    return state
