"""``cs.io.gfile``: TF's ``tf.io.gfile``, the functions of :mod:`ckptsync.gfile` under
TF 2's names (``exists``, ``makedirs``, ``listdir``, ``rmtree``...), for local paths,
with the same errors.

Example:
    >>> import ckptsync as tf
    >>> tf.io.gfile.exists is tf.gfile.Exists and tf.io.gfile.GFile is tf.gfile.GFile
    True
"""

from __future__ import annotations

import os

from ..gfile import Copy as copy
from ..gfile import DeleteRecursively as rmtree
from ..gfile import Exists as exists
from ..gfile import GFile
from ..gfile import Glob as glob
from ..gfile import IsDirectory as isdir
from ..gfile import ListDirectory as listdir
from ..gfile import MakeDirs as makedirs
from ..gfile import MkDir as mkdir
from ..gfile import Remove as remove
from ..gfile import Rename as rename
from ..gfile import Stat as stat
from ..gfile import Walk as walk

__all__ = ["GFile", "copy", "exists", "get_registered_schemes", "glob", "isdir", "join",
           "listdir", "makedirs", "mkdir", "remove", "rename", "rmtree", "stat", "walk"]

join = os.path.join


def get_registered_schemes() -> list[str]:
    """The URI schemes there are file systems for: only local paths (``"file"``)."""
    return ["file"]
