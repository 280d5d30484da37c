"""``cs.nn``: neural-network ops, as ``tf.nn``."""

from .ops.nn_ops import (  # noqa: F401
    bias_add,
    log_softmax,
    relu,
    sigmoid,
    softmax,
    softmax_cross_entropy_with_logits,
    sparse_softmax_cross_entropy_with_logits,
    tanh,
)
from .ops.nn_ops import softmax_cross_entropy_with_logits as softmax_cross_entropy_with_logits_v2  # noqa: F401

__all__ = [
    "bias_add", "log_softmax", "relu", "sigmoid", "softmax", "softmax_cross_entropy_with_logits",
    "softmax_cross_entropy_with_logits_v2", "sparse_softmax_cross_entropy_with_logits", "tanh",
]
