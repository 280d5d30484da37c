"""``cs.contrib``: the parts of TF1's ``tf.contrib`` that ordinary programs use
(``tf.contrib.layers``' initializers)."""

from typing import TYPE_CHECKING, Any

from ..not_implemented import missing as _missing
from . import layers  # noqa: F401

__all__ = ["layers"]


if not TYPE_CHECKING:  # (for type checkers the module has only the names above)
    def __getattr__(name: str) -> Any:
        """A TF1 name not implemented here: an AttributeError that says so."""
        raise _missing(__name__, name)
