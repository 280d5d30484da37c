"""``cs.losses``: TF1's ``tf.losses`` (``tf.compat.v1.losses``) on the runtime.

Loss functions (``softmax_cross_entropy``, ``sparse_softmax_cross_entropy``,
``sigmoid_cross_entropy``, ``mean_squared_error``, ``absolute_difference``,
``huber_loss``, ``log_loss``, ``hinge_loss``, ``cosine_distance``), each weighted
(``weights=``) and reduced (``reduction=``, a :class:`Reduction`), added to
``GraphKeys.LOSSES``; and the collection helpers ``add_loss``, ``get_losses``,
``get_regularization_losses``, ``get_regularization_loss``, ``get_total_loss``.
"""

from .losses_impl import (  # noqa: F401
    absolute_difference,
    cosine_distance,
    hinge_loss,
    huber_loss,
    log_loss,
    mean_squared_error,
    sigmoid_cross_entropy,
    softmax_cross_entropy,
    sparse_softmax_cross_entropy,
)
from .reduction import Reduction, compute_weighted_loss  # noqa: F401
from .util import (  # noqa: F401
    add_loss,
    get_losses,
    get_regularization_loss,
    get_regularization_losses,
    get_total_loss,
)

__all__ = [
    "Reduction", "absolute_difference", "add_loss", "compute_weighted_loss",
    "cosine_distance", "get_losses", "get_regularization_loss", "get_regularization_losses",
    "get_total_loss", "hinge_loss", "huber_loss", "log_loss", "mean_squared_error",
    "sigmoid_cross_entropy", "softmax_cross_entropy", "sparse_softmax_cross_entropy",
]
