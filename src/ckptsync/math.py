"""``cs.math``: TF1's ``tf.math`` namespace — the math ops under their ``tf.math`` names
(``tf.math.log``, ``tf.math.reduce_sum``, ``tf.math.segment_sum``, ``tf.math.top_k``), the
same functions as at the top level and in ``cs.nn``."""

from .ops import elementwise_ops, math_ops, reduction_ops, segment_ops
from .ops.linalg_ops import matmul  # noqa: F401
from .ops.nn_impl import (  # noqa: F401
    elu,
    log_sigmoid,
    selu,
    softplus,
    softsign,
)
from .ops.nn_ops import log_softmax, sigmoid, softmax, tanh  # noqa: F401
from .ops.nn_topk import in_top_k, top_k  # noqa: F401

__all__ = ["matmul", "elu", "log_sigmoid", "selu", "softplus", "softsign", "log_softmax",
           "sigmoid", "softmax", "tanh", "in_top_k", "top_k"]

for _module in (math_ops, reduction_ops, elementwise_ops, segment_ops):
    _names = [n for n in _module.__all__ if not n.startswith("to_")]
    globals().update({n: getattr(_module, n) for n in _names})
    __all__.extend(_names)
del _module, _names
