"""``tf.estimator.experimental``: the early-stopping hooks (TF 2.15's
``tensorflow_estimator``; see :mod:`ckptsync.estimator.early_stopping`)."""

from .early_stopping import (  # noqa: F401
    make_early_stopping_hook,
    stop_if_higher_hook,
    stop_if_lower_hook,
    stop_if_no_decrease_hook,
    stop_if_no_increase_hook,
)

__all__ = ["make_early_stopping_hook", "stop_if_higher_hook", "stop_if_lower_hook",
           "stop_if_no_decrease_hook", "stop_if_no_increase_hook"]
