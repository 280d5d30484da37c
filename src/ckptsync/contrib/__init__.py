"""``cs.contrib``: the parts of TF1's ``tf.contrib`` that ordinary programs use
(``tf.contrib.layers``' initializers)."""

from . import layers  # noqa: F401

__all__ = ["layers"]
