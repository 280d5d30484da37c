"""``cs.random``: TF1's ``tf.random`` namespace (``tf.compat.v1.random``) over the random
ops of :mod:`ckptsync.ops.random_ops`: ``tf.random.normal`` is ``tf.random_normal``,
``uniform`` is ``random_uniform``, ``shuffle`` is ``random_shuffle``; ``set_random_seed``
and ``get_seed`` as at the top level.

Example:
    >>> import ckptsync as tf
    >>> tf.random.normal is tf.random_normal
    True
"""

from .ops.random_ops import get_seed, set_random_seed, truncated_normal
from .ops.random_ops import random_normal as normal
from .ops.random_ops import random_shuffle as shuffle
from .ops.random_ops import random_uniform as uniform

__all__ = ["normal", "uniform", "truncated_normal", "shuffle", "set_random_seed", "get_seed"]
