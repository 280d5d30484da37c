"""``cs.io``: the part of TF's ``tf.io`` that TF1 programs use for files, ``tf.io.gfile``
(:mod:`.gfile`: ``tf.gfile`` under TF 2's lowercase names)."""

from . import gfile

__all__ = ["gfile"]
