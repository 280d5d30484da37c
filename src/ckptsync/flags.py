"""``cs.flags`` (also ``cs.app.flags``): TF1's ``tf.flags``, which is absl's flags
(``absl-py``, the optional extra ``ckptsync[flags]``), as TF's ``platform/flags.py``.

Everything of ``absl.flags`` is here (``DEFINE_string``, ``DEFINE_integer``,
``DEFINE_float``, ``DEFINE_boolean``/``DEFINE_bool``, ``DEFINE_list``, ``DEFINE_enum``,
``DEFINE_multi_string``...), with TF's two differences: the define functions also take
TF's old keyword names (``flag_name``, ``default_value``, ``docstring``), and
:data:`FLAGS` parses ``sys.argv`` the first time a flag is read before any parse
(absl's raises ``UnparsedFlagAccessError``). ``FLAGS`` is absl's process-wide registry,
so a flag name is defined once per process; ``cs.app.run`` parses the command line
(flags it does not know are left in ``argv``, as TF's).

Example:
    >>> from ckptsync import flags
    >>> _ = flags.DEFINE_integer("ckptsync_doc_batch", 32, "Batch size.")
    >>> flags.FLAGS(["prog", "--ckptsync_doc_batch=8"])
    ['prog']
    >>> flags.FLAGS.ckptsync_doc_batch
    8

Raises:
    ImportError: on import, when ``absl-py`` is not installed (names the extra).
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable
from typing import Any

try:
    from absl import flags as _absl_flags
    from absl.flags import *  # noqa: F403 - TF's tf.flags is absl's namespace
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError(
        "tf.flags / tf.app.flags need absl-py, as TF1's: pip install 'ckptsync[flags]' (or "
        "absl-py).") from e

_absl_flags.disclaim_key_flags()

_RENAMED = {"flag_name": "name", "default_value": "default", "docstring": "help"}


def _wrap_define(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def define(*args: Any, **kwargs: Any) -> Any:
        old = [k for k in _RENAMED if k in kwargs]
        for k in old:
            kwargs[_RENAMED[k]] = kwargs.pop(k)
        if old:
            warnings.warn("Use of the keyword argument names (flag_name, default_value, "
                          "docstring) is deprecated, please use (name, default, help) "
                          "instead.", DeprecationWarning, stacklevel=2)
        return fn(*args, **kwargs)

    return define


DEFINE_string = _wrap_define(_absl_flags.DEFINE_string)
DEFINE_boolean = _wrap_define(_absl_flags.DEFINE_boolean)
DEFINE_bool = DEFINE_boolean
DEFINE_float = _wrap_define(_absl_flags.DEFINE_float)
DEFINE_integer = _wrap_define(_absl_flags.DEFINE_integer)


class _FlagValuesWrapper:
    """absl's ``FLAGS`` that parses ``sys.argv`` when a flag is read before any parse,
    as TF's ``tf.flags.FLAGS``."""

    def __init__(self, flags_object: Any):
        self.__dict__["__wrapped"] = flags_object

    def __getattribute__(self, name: str) -> Any:
        if name == "__dict__":
            return super().__getattribute__(name)
        return self.__dict__["__wrapped"].__getattribute__(name)

    def __getattr__(self, name: str) -> Any:
        wrapped = self.__dict__["__wrapped"]
        if name.startswith("__"):  # introspection (inspect.unwrap, doctest): no parse
            raise AttributeError(name)
        if not wrapped.is_parsed():
            wrapped(sys.argv)
        return wrapped.__getattr__(name)

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__["__wrapped"].__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        self.__dict__["__wrapped"].__delattr__(name)

    def __dir__(self) -> list[str]:
        return list(self.__dict__["__wrapped"].__dir__())

    def __getitem__(self, name: str) -> Any:
        return self.__dict__["__wrapped"].__getitem__(name)

    def __setitem__(self, name: str, flag: Any) -> None:
        self.__dict__["__wrapped"].__setitem__(name, flag)

    def __len__(self) -> int:
        return int(self.__dict__["__wrapped"].__len__())

    def __iter__(self) -> Any:
        return self.__dict__["__wrapped"].__iter__()

    def __str__(self) -> str:
        return str(self.__dict__["__wrapped"].__str__())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__dict__["__wrapped"].__call__(*args, **kwargs)


FLAGS: Any = _FlagValuesWrapper(_absl_flags.FLAGS)  # type: ignore[no-redef]


def run(main: Callable[[list[str]], Any] | None = None, argv: list[str] | None = None) -> None:
    """Parses the command line into :data:`FLAGS` and calls ``main(argv)`` (default: the
    ``main`` of ``__main__``), then exits with its result, as TF1's ``tf.app.run``
    (through ``absl.app.run``; flags it does not know stay in ``argv``; ``--help``
    prints the flags and exits).

    Raises:
        SystemExit: always (``main``'s return value as the exit status).
    """
    from absl import app as _absl_app  # here: absl.app and absl.logging load only to run

    fn = main or sys.modules["__main__"].main

    def parse(args: list[str]) -> list[str]:
        return list(FLAGS(sys.argv if args is None else args, known_only=True))

    _absl_app.run(main=fn, argv=argv, flags_parser=parse)
