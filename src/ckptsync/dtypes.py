"""TF1 dtype names over numpy dtypes (`tf.float32`, `tf.int64`, ...).

A :class:`DType` wraps one numpy dtype. ``as_dtype`` accepts a DType, a numpy dtype or
type, or a TF name such as ``"float32"``. ``base_dtype`` is the DType itself (ckptsync has
no reference dtypes).

Promotion: ckptsync never promotes silently between TF dtypes. A binary op whose two graph
inputs have different dtypes raises ``TypeError``, as TF1 does; Python scalars and lists
are converted to the other operand's dtype.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from .errors import CkptsyncTypeError

__all__ = [
    "DType",
    "as_dtype",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "complex64",
    "complex128",
    "string",
]


class DType:
    """A tensor element type, as TF's ``tf.DType``. Immutable and hashable."""

    __slots__ = ("_np",)

    def __init__(self, np_dtype: Any):
        self._np = np.dtype(np_dtype)

    @property
    def name(self) -> str:
        """TF's name, e.g. ``"float32"``, ``"bool"``, ``"string"``."""
        return "string" if self._np.kind == "O" else str(self._np)

    @property
    def as_numpy_dtype(self) -> type:
        """The numpy scalar type, e.g. ``np.float32``."""
        return self._np.type

    @property
    def np(self) -> np.dtype:
        """The numpy dtype object."""
        return self._np

    @property
    def base_dtype(self) -> DType:
        return self

    @property
    def is_floating(self) -> builtins.bool:
        return self._np.kind == "f"

    @property
    def is_integer(self) -> builtins.bool:
        return self._np.kind in "iu"

    @property
    def is_bool(self) -> builtins.bool:
        return self._np.kind == "b"

    @property
    def is_complex(self) -> builtins.bool:
        return self._np.kind == "c"

    @property
    def is_numeric(self) -> builtins.bool:
        return self._np.kind in "iufc"

    @property
    def size(self) -> int:
        """Bytes per element."""
        return self._np.itemsize

    def __eq__(self, other: object) -> builtins.bool:
        if isinstance(other, DType):
            return self._np == other._np
        try:
            return self._np == as_dtype(other)._np  # type: ignore[arg-type]
        except TypeError:
            return False

    def __ne__(self, other: object) -> builtins.bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self._np)

    def __repr__(self) -> str:
        return f"tf.{self.name}"

    def __str__(self) -> str:
        return f"<dtype: '{self.name}'>"


float16 = DType(np.float16)
float32 = DType(np.float32)
float64 = DType(np.float64)
int8 = DType(np.int8)
int16 = DType(np.int16)
int32 = DType(np.int32)
int64 = DType(np.int64)
uint8 = DType(np.uint8)
uint16 = DType(np.uint16)
uint32 = DType(np.uint32)
uint64 = DType(np.uint64)
bool = DType(np.bool_)  # noqa: A001 - TF's name
complex64 = DType(np.complex64)
complex128 = DType(np.complex128)
# TF's tf.string: byte strings held in numpy object arrays (summary ops' output).
string = DType(np.object_)

_BY_NAME = {
    d.name: d
    for d in (float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32,
              uint64, bool, complex64, complex128, string)
}
_BY_NAME.update({"half": float16, "float": float32, "double": float64})


def as_dtype(value: Any) -> DType:
    """Converts ``value`` to a :class:`DType`.

    Args:
        value: a DType, a numpy dtype or scalar type, or a TF name (``"float32"``).

    Raises:
        TypeError: ``value`` names no supported dtype (strings, objects and
            structured dtypes are not supported).
    """
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in _BY_NAME:
        return _BY_NAME[value]
    try:
        np_dtype = np.dtype(value)
    except TypeError as e:
        raise CkptsyncTypeError(f"Cannot convert {value!r} to a dtype: {e}") from None
    if np_dtype.kind in "OSU":
        return string
    dt = _BY_NAME.get(str(np_dtype))
    if dt is None:
        raise CkptsyncTypeError(
            f"Unsupported dtype {np_dtype!s}; expected one of {sorted(_BY_NAME)}."
        )
    return dt
