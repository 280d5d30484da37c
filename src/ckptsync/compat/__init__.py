"""``cs.compat``: TF's ``tf.compat``. ``tf.compat.v1`` is ckptsync itself, so code
written for ``import tensorflow.compat.v1 as tf`` runs as ``import ckptsync.compat.v1 as
tf`` and ``tf.compat.v1.X`` is ``tf.X``; and TF's string helpers ``as_bytes``,
``as_text``, ``as_str``, ``as_str_any``, ``path_to_str``.

Example:
    >>> import ckptsync.compat.v1 as tf
    >>> import ckptsync
    >>> tf is ckptsync and tf.compat.v1.constant is ckptsync.constant
    True
    >>> tf.compat.as_text(b"caf\\xc3\\xa9")
    'café'
"""

from __future__ import annotations

import os
import sys
from typing import Any

import ckptsync as v1

__all__ = ["v1", "as_bytes", "as_text", "as_str", "as_str_any", "path_to_str"]

# ``import ckptsync.compat.v1`` finds the package itself here.
sys.modules[__name__ + ".v1"] = v1


def as_bytes(bytes_or_text: Any, encoding: str = "utf-8") -> bytes:
    """``bytes`` as they are, ``str`` encoded, as TF's ``tf.compat.as_bytes``.

    Raises:
        TypeError: anything else.
    """
    if isinstance(bytes_or_text, bytearray):
        return bytes(bytes_or_text)
    if isinstance(bytes_or_text, str):
        return bytes_or_text.encode(encoding)
    if isinstance(bytes_or_text, bytes):
        return bytes_or_text
    raise TypeError(f"Expected binary or unicode string, got {bytes_or_text!r}")


def as_text(bytes_or_text: Any, encoding: str = "utf-8") -> str:
    """``str`` as it is, ``bytes`` decoded, as TF's ``tf.compat.as_text``.

    Raises:
        TypeError: anything else.
    """
    if isinstance(bytes_or_text, str):
        return bytes_or_text
    if isinstance(bytes_or_text, bytes):
        return bytes_or_text.decode(encoding)
    raise TypeError(f"Expected binary or unicode string, got {bytes_or_text!r}")


as_str = as_text


def as_str_any(value: Any, encoding: str = "utf-8") -> str:
    """``bytes`` decoded, anything else through ``str``."""
    return as_text(value, encoding) if isinstance(value, bytes) else str(value)


def path_to_str(path: Any) -> Any:
    """An ``os.PathLike`` as its ``str``; anything else unchanged."""
    return os.fspath(path) if isinstance(path, os.PathLike) else path
