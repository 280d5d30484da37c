"""``cs.gfile``: TF1's ``tf.gfile`` file API for local paths, with TF's error classes
and messages.

``GFile(path, mode)`` (also ``Open``, ``FastGFile``) is a file object: ``read(n=-1)``,
``readline()``, ``readlines()``, iteration over lines, ``write(str | bytes)``,
``seek``/``tell``, ``size()``, ``flush``/``close``, and a context manager. As TF's, it
opens the file at its first read or write (so a missing file raises ``NotFoundError``
there, not in the constructor); text modes read ``str`` (UTF-8), ``"b"`` modes read
``bytes``, and every mode writes both.

Errors (all :mod:`ckptsync.errors` classes, as TF's for a local file system):
``NotFoundError`` (``"<path>; No such file or directory"``, ``"Could not find directory
<path>"``), ``AlreadyExistsError`` (``Copy``/``Rename`` onto an existing file without
``overwrite``), ``FailedPreconditionError`` (a directory where a file is needed and the
reverse), ``PermissionDeniedError`` (writing a file opened for reading and the reverse),
``InvalidArgumentError`` (an unknown mode).

Example:
    >>> import os, tempfile
    >>> import ckptsync as tf
    >>> d = tempfile.mkdtemp()
    >>> with tf.gfile.GFile(os.path.join(d, "a.txt"), "w") as f:
    ...     _ = f.write("one\\ntwo\\n")
    >>> [line for line in tf.gfile.GFile(os.path.join(d, "a.txt"))]
    ['one\\n', 'two\\n']
    >>> tf.gfile.ListDirectory(d)
    ['a.txt']

Thread-safety: module functions are as safe as the OS calls they make; a ``GFile`` is
for one thread at a time.
"""

from __future__ import annotations

import errno
import glob as _glob
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from .errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    OpError,
    PermissionDeniedError,
    UnknownError,
)

__all__ = ["GFile", "Open", "FastGFile", "Exists", "IsDirectory", "ListDirectory", "Glob",
           "MakeDirs", "MkDir", "Remove", "Rename", "Copy", "DeleteRecursively", "Stat",
           "Walk", "FileStatistics"]

_MODES = ("r", "w", "a", "r+", "w+", "a+")


def _os_error(path: str, e: OSError) -> OpError:
    """TF's error for an OS failure on ``path`` (``"<path>; <strerror>"``)."""
    text = f"{path}; {e.strerror or os.strerror(e.errno or 0)}"
    if e.errno == errno.ENOENT:
        return NotFoundError(None, None, text)
    if e.errno in (errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY):
        return FailedPreconditionError(None, None, text)
    if e.errno in (errno.EACCES, errno.EPERM):
        return PermissionDeniedError(None, None, text)
    if e.errno == errno.EEXIST:
        return AlreadyExistsError(None, None, text)
    return UnknownError(None, None, text)


class GFile:
    """A local file, as TF1's ``tf.gfile.GFile`` (see the module docstring).

    Args:
        name: the path.
        mode: ``"r"``, ``"w"``, ``"a"``, ``"r+"``, ``"w+"``, ``"a+"``, each optionally with
            ``"b"`` (bytes from reads).

    Raises:
        InvalidArgumentError: an unknown mode.
    """

    def __init__(self, name: str | os.PathLike[str], mode: str = "r"):
        self.__name = os.fspath(name)
        self.__mode = mode
        self.__binary = "b" in mode
        base = mode.replace("b", "")
        if base not in _MODES:
            raise InvalidArgumentError(
                None, None, "mode is not 'r' or 'w' or 'a' or 'r+' or 'w+' or 'a+'")
        self.__readable = base.startswith("r") or "+" in base
        self.__writable = not base == "r"
        self.__file: IO[bytes] | None = None

    @property
    def name(self) -> str:
        return self.__name

    @property
    def mode(self) -> str:
        return self.__mode

    def _open(self) -> IO[bytes]:
        if self.__file is None:
            try:
                self.__file = open(self.__name, self.__mode.replace("b", "") + "b")  # noqa: SIM115
            except OSError as e:
                raise _os_error(self.__name, e) from None
        return self.__file

    def _reader(self) -> IO[bytes]:
        if not self.__readable:
            raise PermissionDeniedError(None, None, "File isn't open for reading")
        return self._open()

    def _text(self, b: bytes) -> str | bytes:
        return b if self.__binary else b.decode("utf-8")

    def read(self, n: int = -1) -> str | bytes:
        """Up to ``n`` bytes (all when negative), as ``str`` in text modes."""
        return self._text(self._reader().read(n))

    def readline(self) -> str | bytes:
        """The next line with its ``"\\n"`` (empty at the end)."""
        return self._text(self._reader().readline())

    def readlines(self) -> list[str | bytes]:
        return [self._text(line) for line in self._reader().readlines()]

    def __iter__(self) -> Iterator[str | bytes]:
        return self

    def __next__(self) -> str | bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def write(self, file_content: str | bytes) -> None:
        """Writes ``file_content`` (``str`` as UTF-8)."""
        if not self.__writable:
            raise PermissionDeniedError(None, None, "File isn't open for writing")
        data = file_content.encode("utf-8") if isinstance(file_content, str) else file_content
        self._open().write(bytes(data))

    def seek(self, offset: int | None = None, whence: int = 0,
             position: int | None = None) -> int:
        """Moves to ``offset`` (or ``position``, TF's older name) from ``whence``."""
        where = position if offset is None else offset
        return self._open().seek(0 if where is None else where, whence)

    def tell(self) -> int:
        return self._open().tell()

    def size(self) -> int:
        """The file's length in bytes."""
        return Stat(self.__name).length

    def flush(self) -> None:
        if self.__file is not None:
            self.__file.flush()

    def close(self) -> None:
        """Closes the file (a later read or write opens it again, as TF's)."""
        if self.__file is not None:
            self.__file.close()
            self.__file = None

    def seekable(self) -> bool:
        return True

    def __del__(self) -> None:  # as TF's: a dropped GFile closes its file, with no warning
        f = getattr(self, "_GFile__file", None)
        if f is not None:
            f.close()

    def __enter__(self) -> GFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


Open = GFile


class FastGFile(GFile):
    """TF1's deprecated ``tf.gfile.FastGFile``: a :class:`GFile`."""


@dataclass(frozen=True)
class FileStatistics:
    """What ``Stat`` says of a path, as TF's ``FileStatistics``."""

    length: int
    mtime_nsec: int
    is_directory: bool


def Exists(filename: str) -> bool:  # noqa: N802 - TF's names
    """Whether ``filename`` (a file or directory) exists."""
    return os.path.exists(filename)


def IsDirectory(dirname: str) -> bool:  # noqa: N802
    """Whether ``dirname`` is a directory (False if it does not exist)."""
    return os.path.isdir(dirname)


def ListDirectory(dirname: str) -> list[str]:  # noqa: N802
    """The entries of ``dirname`` (names, no ``.``/``..``; in the OS's order).

    Raises:
        NotFoundError: ``dirname`` is not a directory (``"Could not find directory ..."``).
    """
    if not os.path.isdir(dirname):
        raise NotFoundError(None, None, f"Could not find directory {dirname}")
    return os.listdir(dirname)


def Glob(filename: str) -> list[str]:  # noqa: N802
    """The paths matching the pattern ``filename`` (``*``, ``?``, ``[...]``)."""
    return _glob.glob(filename)


def MkDir(dirname: str) -> None:  # noqa: N802
    """Makes directory ``dirname`` (its parent must exist; an existing one is fine, as
    TF 2's local file system).

    Raises:
        NotFoundError: the parent does not exist.
    """
    try:
        os.mkdir(dirname)
    except FileExistsError:
        if not os.path.isdir(dirname):
            raise FailedPreconditionError(None, None, f"{dirname} is not a directory") from None
    except OSError as e:
        raise _os_error(dirname, e) from None


def MakeDirs(dirname: str) -> None:  # noqa: N802
    """Makes ``dirname`` and any missing parents (an existing directory is fine).

    Raises:
        FailedPreconditionError: the path (or a parent) is a file.
    """
    if os.path.isdir(dirname):
        return
    up = dirname
    while up and not os.path.exists(up):  # as TF: the first existing non-directory
        parent = os.path.dirname(up)
        up = parent if parent != up else ""
    if up and not os.path.isdir(up):
        raise FailedPreconditionError(None, None, f"{up} is not a directory")
    try:
        os.makedirs(dirname, exist_ok=True)
    except OSError as e:
        raise _os_error(dirname, e) from None


def Remove(filename: str) -> None:  # noqa: N802
    """Deletes file ``filename``.

    Raises:
        NotFoundError: it does not exist.
        FailedPreconditionError: it is a directory (``"...; Is a directory"``).
    """
    if os.path.isdir(filename):
        raise FailedPreconditionError(None, None, f"{filename}; Is a directory")
    try:
        os.remove(filename)
    except OSError as e:
        raise _os_error(filename, e) from None


def _check_target(newpath: str, overwrite: bool) -> None:
    if not overwrite and os.path.exists(newpath):
        raise AlreadyExistsError(None, None, "file already exists")


def Rename(oldname: str, newname: str, overwrite: bool = False) -> None:  # noqa: N802
    """Renames a file or directory (atomic on one file system).

    Raises:
        NotFoundError: ``oldname`` does not exist.
        AlreadyExistsError: ``newname`` exists and ``overwrite`` is False.
    """
    if not os.path.exists(oldname):
        raise NotFoundError(None, None, f"{oldname}; No such file or directory")
    _check_target(newname, overwrite)
    try:
        os.replace(oldname, newname)
    except OSError as e:
        raise _os_error(oldname, e) from None


def Copy(oldpath: str, newpath: str, overwrite: bool = False) -> None:  # noqa: N802
    """Copies file ``oldpath`` to ``newpath``.

    Raises:
        NotFoundError: ``oldpath`` does not exist.
        AlreadyExistsError: ``newpath`` exists and ``overwrite`` is False.
    """
    if not os.path.exists(oldpath):
        raise NotFoundError(None, None, f"{oldpath}; No such file or directory")
    _check_target(newpath, overwrite)
    try:
        shutil.copyfile(oldpath, newpath)
    except OSError as e:
        raise _os_error(oldpath, e) from None


def DeleteRecursively(dirname: str) -> None:  # noqa: N802
    """Deletes ``dirname`` and everything under it (a file: the file).

    Raises:
        NotFoundError: it does not exist (``"<path> not found"``).
    """
    if not os.path.lexists(dirname):
        raise NotFoundError(None, None, f"{dirname} not found")
    try:
        if os.path.isdir(dirname) and not os.path.islink(dirname):
            shutil.rmtree(dirname)
        else:
            os.remove(dirname)
    except OSError as e:
        raise _os_error(dirname, e) from None


def Stat(filename: str) -> FileStatistics:  # noqa: N802
    """Length, modification time (ns) and kind of ``filename``.

    Raises:
        NotFoundError: it does not exist.
    """
    try:
        st = os.stat(filename)
    except OSError as e:
        raise _os_error(filename, e) from None
    return FileStatistics(int(st.st_size), int(st.st_mtime_ns), os.path.isdir(filename))


def Walk(top: str, in_order: bool = True) -> Iterator[tuple[str, list[str], list[str]]]:  # noqa: N802
    """``(dirname, subdirectories, files)`` for ``top`` and every directory below it,
    parents first (``in_order=False``: children first); nothing for a missing ``top``."""
    yield from os.walk(top, topdown=in_order)
