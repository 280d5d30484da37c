"""``cs.nn``: neural-network ops, as ``tf.nn``."""

from typing import TYPE_CHECKING, Any

from .not_implemented import missing as _missing
from .ops import MODULES as _OP_MODULES
from .ops.nn_ops import (  # noqa: F401
    bias_add,
    log_softmax,
    relu,
    sigmoid,
    softmax,
    softmax_cross_entropy_with_logits,
    softmax_cross_entropy_with_logits_v2,
    sparse_softmax_cross_entropy_with_logits,
    tanh,
)

__all__ = [
    "bias_add", "log_softmax", "relu", "sigmoid", "softmax", "softmax_cross_entropy_with_logits",
    "softmax_cross_entropy_with_logits_v2", "sparse_softmax_cross_entropy_with_logits", "tanh",
]

# The op modules' tf.nn names (each module's NN_EXPORTS), e.g. conv2d, dropout.
for _module in _OP_MODULES:
    globals().update({n: getattr(_module, n) for n in _module.NN_EXPORTS})
    __all__.extend(_module.NN_EXPORTS)
del _module


if not TYPE_CHECKING:  # (for type checkers the module has only the names above)
    def __getattr__(name: str) -> Any:
        """A TF1 name not implemented here: an AttributeError that says so."""
        raise _missing(__name__, name)
