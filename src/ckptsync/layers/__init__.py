"""``cs.layers``: TF1's ``tf.layers`` (``tf.compat.v1.layers``): ``dense``/``Dense``,
``conv1d``/``conv2d``, ``max_pooling2d``/``average_pooling2d`` (and 1-D),
``dropout``, ``batch_normalization``, ``flatten``, with variables named as TF1 names them
(``dense/kernel``, ``dense_1/bias``, ``conv2d/kernel``,
``batch_normalization/moving_mean``), so checkpoints line up name for name with TF's.

Example:
    >>> import ckptsync as cs
    >>> g = cs.Graph()
    >>> with g.as_default():
    ...     x = cs.placeholder(cs.float32, [None, 3])
    ...     h = cs.layers.dense(x, 4, activation=cs.nn.relu)
    ...     y = cs.layers.dense(h, 2)
    >>> [v.name for v in g.get_collection(cs.GraphKeys.TRAINABLE_VARIABLES)]
    ['dense/kernel:0', 'dense/bias:0', 'dense_1/kernel:0', 'dense_1/bias:0']
"""

from .base import InputSpec, Layer
from .convolutional import *  # noqa: F401,F403
from .convolutional import __all__ as _conv_all
from .core import *  # noqa: F401,F403
from .core import __all__ as _core_all
from .normalization import *  # noqa: F401,F403
from .normalization import __all__ as _norm_all

__all__ = ["Layer", "InputSpec", *_core_all, *_conv_all, *_norm_all]
