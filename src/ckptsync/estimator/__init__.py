"""``cs.estimator``: TF1's ``tf.estimator`` over ckptsync's monitored sessions.

``ModeKeys`` and ``EstimatorSpec`` (what a ``model_fn`` returns) and ``export`` (serving
input receivers and export outputs), as TF 2.15's ``tensorflow_estimator``. See
``docs/estimator.md``.
"""

from ..model_fn import EstimatorSpec  # noqa: F401
from ..model_spec import ModeKeys  # noqa: F401
from . import export  # noqa: F401

__all__ = ["EstimatorSpec", "ModeKeys", "export"]
