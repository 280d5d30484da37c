"""TF's switches between TF1 and TF2 behaviour, for programs written for
``tensorflow.compat.v1``: ckptsync is TF1's graph mode and nothing else, so the
``disable_*`` calls that TF1 programs start with do nothing, ``executing_eagerly()`` is
False, and the ``enable_*`` calls that ask for TF2 behaviour raise.

Example:
    >>> import ckptsync as tf
    >>> tf.disable_v2_behavior()
    >>> tf.executing_eagerly()
    False
"""

from __future__ import annotations

from .errors import CkptsyncValueError

__all__ = ["disable_v2_behavior", "disable_eager_execution", "disable_resource_variables",
           "disable_tensor_equality", "disable_control_flow_v2", "disable_v2_tensorshape",
           "enable_v2_behavior", "enable_eager_execution", "executing_eagerly"]


def disable_v2_behavior() -> None:
    """Nothing to do: ckptsync is always TF1's graph mode (``tf.disable_v2_behavior``)."""


def disable_eager_execution() -> None:
    """Nothing to do: ckptsync never executes eagerly (``tf.disable_eager_execution``)."""


def disable_resource_variables() -> None:
    """Nothing to do: variables are TF1's reference variables."""


def disable_tensor_equality() -> None:
    """Nothing to do: tensors compare by identity, as TF1's."""


def disable_control_flow_v2() -> None:
    """Nothing to do: ckptsync has one control flow."""


def disable_v2_tensorshape() -> None:
    """Nothing to do: ``TensorShape`` dims are TF1's ``Dimension`` objects."""


def executing_eagerly() -> bool:
    """Always False: ckptsync runs graphs in sessions, as TF1."""
    return False


def _no_v2(what: str) -> None:
    raise CkptsyncValueError(f"{what}: ckptsync runs TF1's graph mode only (build a graph, "
                             "run it in a tf.Session); remove this call.")


def enable_v2_behavior() -> None:
    """Raises: ckptsync has no TF2 behaviour.

    Raises:
        ValueError: always.
    """
    _no_v2("enable_v2_behavior")


def enable_eager_execution(config: object = None, device_policy: object = None,
                           execution_mode: object = None) -> None:
    """Raises: ckptsync has no eager execution.

    Raises:
        ValueError: always.
    """
    _no_v2("enable_eager_execution")
