"""Static shapes with unknown dimensions, as TF1's ``tf.TensorShape``.

As in TF1 (v1 shape behaviour), indexing or iterating a shape gives dimensions that carry
``.value`` (``x.get_shape()[-1].value``): a known dim is a :class:`Dimension`, an int
subclass, so it is also usable as a plain int; an unknown dim is ``None`` (TF1 gives
``Dimension(None)``, whose ``.value`` is None: use :func:`dimension_value` for both).
``as_list()`` and ``dims`` give plain ints and ``None``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .errors import CkptsyncValueError

__all__ = ["TensorShape", "Dimension", "dimension_value", "broadcast_static_shape",
           "unknown_shape", "as_shape"]


class Dimension(int):
    """A known dimension, as TF1's ``tf.Dimension``: an int with ``.value``."""

    __slots__ = ()

    @property
    def value(self) -> int:
        return int(self)

    def __repr__(self) -> str:
        return f"Dimension({int(self)})"

    def __str__(self) -> str:  # "3", as TF (int's str would use the repr above)
        return int.__repr__(self)

    def __format__(self, spec: str) -> str:
        return format(int(self), spec)


def dimension_value(d: Any) -> int | None:
    """The int (or None) of a dimension, as ``tf.compat.dimension_value``."""
    if d is None:
        return None
    return int(d.value if hasattr(d, "value") else d)


def _dim(d: int | None) -> Dimension | None:
    return None if d is None else Dimension(d)


class TensorShape:
    """A possibly partial shape: ``None`` rank (unknown) or dims that are int or ``None``.

    Example:
        >>> TensorShape([None, 64]).as_list()
        [None, 64]
    """

    __slots__ = ("_dims",)

    def __init__(self, dims: Any):
        if isinstance(dims, TensorShape):
            self._dims: tuple[int | None, ...] | None = dims._dims
        elif dims is None:
            self._dims = None
        elif isinstance(dims, int):
            self._dims = (dims,)
        else:
            out: list[int | None] = []
            for d in dims:
                if d is None or getattr(d, "value", 0) is None:
                    out.append(None)
                    continue
                di = int(d)
                if di == -1:
                    out.append(None)
                elif di < 0:
                    raise CkptsyncValueError(f"Dimension {d} must be >= 0 in shape {dims}.")
                else:
                    out.append(di)
            self._dims = tuple(out)

    @property
    def ndims(self) -> int | None:
        return None if self._dims is None else len(self._dims)

    rank = ndims

    @property
    def dims(self) -> tuple[int | None, ...] | None:
        return self._dims

    def as_list(self) -> list[int | None]:
        """The dims as a list (``None`` for unknown ones).

        Raises:
            ValueError: the rank is unknown.
        """
        if self._dims is None:
            raise CkptsyncValueError("as_list() is not defined on an unknown TensorShape.")
        return list(self._dims)

    def is_fully_defined(self) -> bool:
        return self._dims is not None and all(d is not None for d in self._dims)

    def num_elements(self) -> int | None:
        if not self.is_fully_defined():
            return None
        n = 1
        for d in self._dims or ():
            n *= d  # type: ignore[operator]
        return n

    def is_compatible_with(self, other: Any) -> bool:
        other = TensorShape(other)
        if self._dims is None or other._dims is None:
            return True
        if len(self._dims) != len(other._dims):
            return False
        return all(a is None or b is None or a == b for a, b in zip(self._dims, other._dims))

    def merge_with(self, other: Any) -> TensorShape:
        """The most specific shape compatible with both.

        Raises:
            ValueError: the shapes are incompatible.
        """
        other = TensorShape(other)
        if self._dims is None:
            return other
        if other._dims is None:
            return self
        if not self.is_compatible_with(other):
            raise CkptsyncValueError(f"Shapes {self} and {other} are not compatible")
        return TensorShape([a if a is not None else b for a, b in zip(self._dims, other._dims)])

    def __len__(self) -> int:
        if self._dims is None:
            raise CkptsyncValueError("Cannot take the length of shape with unknown rank.")
        return len(self._dims)

    def __iter__(self) -> Iterator[Dimension | None]:
        if self._dims is None:
            raise CkptsyncValueError("Cannot iterate over a shape with unknown rank.")
        return iter([_dim(d) for d in self._dims])

    def __getitem__(self, key: Any) -> Any:
        if self._dims is None:
            return TensorShape(None) if isinstance(key, slice) else None
        if isinstance(key, slice):
            return TensorShape(self._dims[key])
        return _dim(self._dims[key])

    def __bool__(self) -> bool:
        return self._dims is not None

    def concatenate(self, other: Any) -> TensorShape:
        """This shape followed by ``other``'s dims (unknown rank if either is)."""
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return TensorShape(None)
        return TensorShape(self._dims + other._dims)

    __add__ = concatenate

    def __radd__(self, other: Any) -> TensorShape:
        return as_shape(other).concatenate(self)

    def assert_is_compatible_with(self, other: Any) -> None:
        """Raises ValueError unless the shapes are compatible."""
        if not self.is_compatible_with(other):
            raise CkptsyncValueError(f"Shapes {self} and {as_shape(other)} are incompatible")

    def assert_has_rank(self, rank: int) -> None:
        if self._dims is not None and len(self._dims) != rank:
            raise CkptsyncValueError(f"Shape {self} must have rank {rank}")

    def assert_same_rank(self, other: Any) -> None:
        other = as_shape(other)
        if self._dims is not None and other._dims is not None and \
                len(self._dims) != len(other._dims):
            raise CkptsyncValueError(f"Shapes {self} and {other} must have the same rank")

    def assert_is_fully_defined(self) -> None:
        if not self.is_fully_defined():
            raise CkptsyncValueError(f"Shape {self} is not fully defined")

    def with_rank(self, rank: int) -> TensorShape:
        """This shape with rank ``rank`` (unknown rank becomes ``rank`` unknown dims).

        Raises:
            ValueError: the rank is known and differs.
        """
        if self._dims is None:
            return TensorShape([None] * rank)
        self.assert_has_rank(rank)
        return self

    def with_rank_at_least(self, rank: int) -> TensorShape:
        if self._dims is not None and len(self._dims) < rank:
            raise CkptsyncValueError(f"Shape {self} must have rank at least {rank}")
        return self

    def with_rank_at_most(self, rank: int) -> TensorShape:
        if self._dims is not None and len(self._dims) > rank:
            raise CkptsyncValueError(f"Shape {self} must have rank at most {rank}")
        return self

    def most_specific_compatible_shape(self, other: Any) -> TensorShape:
        """The most specific shape both shapes are compatible with."""
        other = as_shape(other)
        if self._dims is None or other._dims is None or len(self._dims) != len(other._dims):
            return TensorShape(None)
        return TensorShape([a if a == b else None for a, b in zip(self._dims, other._dims)])

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __eq__(self, other: object) -> bool:
        try:
            return self._dims == TensorShape(other)._dims
        except (TypeError, ValueError):
            return False

    def __hash__(self) -> int:
        return hash(self._dims)

    def __repr__(self) -> str:
        return f"TensorShape({None if self._dims is None else list(self._dims)})"

    def __str__(self) -> str:
        if self._dims is None:
            return "<unknown>"
        inner = ", ".join("?" if d is None else str(d) for d in self._dims)
        return f"({inner},)" if len(self._dims) == 1 else f"({inner})"


def broadcast_static_shape(a: TensorShape, b: TensorShape) -> TensorShape | None:
    """numpy broadcasting on static shapes; ``None`` if they cannot broadcast."""
    if a.dims is None or b.dims is None:
        return TensorShape(None)
    n = max(len(a.dims), len(b.dims))
    one: list[int | None] = [1]
    da = one * (n - len(a.dims)) + list(a.dims)
    db = one * (n - len(b.dims)) + list(b.dims)
    out: list[int | None] = []
    for x, y in zip(da, db):
        if x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif x is None or y is None:
            out.append(x if y is None else y)
        elif x == y:
            out.append(x)
        else:
            return None
    return TensorShape(out)


def unknown_shape(rank: int | None = None) -> TensorShape:
    """A shape of unknown rank, or of ``rank`` unknown dims, as ``tf.TensorShape(None)``."""
    return TensorShape(None if rank is None else [None] * rank)


def as_shape(shape: Any) -> TensorShape:
    return shape if isinstance(shape, TensorShape) else TensorShape(shape)
