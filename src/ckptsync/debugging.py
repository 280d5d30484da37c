"""``cs.debugging``: TF1's ``tf.debugging`` namespace, the run-time checks of
:mod:`ckptsync.ops.check_ops` (``tf.debugging.assert_equal`` is ``tf.assert_equal``),
``check_numerics``, ``Assert``, and ``is_finite``/``is_nan``/``is_inf``.

Example:
    >>> import ckptsync as tf
    >>> tf.debugging.assert_less is tf.assert_less
    True
"""

from .ops import check_ops
from .ops.elementwise_ops import is_finite, is_inf, is_nan  # noqa: F401

__all__ = ["is_finite", "is_inf", "is_nan"]
globals().update({n: getattr(check_ops, n) for n in check_ops.__all__})
__all__.extend(check_ops.__all__)
