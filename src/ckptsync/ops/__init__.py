"""Op constructors; each op's numpy kernel and gradient are registered side by side.

Every module here is imported for its registrations. A module's ``__all__`` is exported as
``cs.<name>`` and its ``NN_EXPORTS`` as ``cs.nn.<name>`` (see ``ckptsync/__init__.py`` and
``ckptsync/nn.py``); :data:`MODULES` lists the modules whose names are exported that way.
"""

from . import (  # noqa: F401  (registration)  # noqa: F401  (registration; exported through __all__ / NN_EXPORTS)
    array_ops,
    check_ops,
    clip_ops,
    control_flow_ops,
    conv_ops,
    elementwise_ops,
    embedding_ops,
    index_ops,
    linalg_ops,
    logging_ops,
    manip_ops,
    math_ops,
    nn_dropout,
    nn_impl,
    nn_losses,
    nn_norm,
    nn_ops,
    nn_topk,
    random_ops,
    reduction_ops,
    scatter_ops,
    script_ops,
    segment_ops,
    selection_ops,
    slicing_ops,
    sort_ops,
    state_ops,
)

MODULES = (
    reduction_ops,
    elementwise_ops,
    linalg_ops,
    clip_ops,
    slicing_ops,
    manip_ops,
    selection_ops,
    segment_ops,
    index_ops,
    embedding_ops,
    scatter_ops,
    conv_ops,
    nn_impl,
    nn_norm,
    nn_losses,
    nn_topk,
    nn_dropout,
    control_flow_ops,
)
