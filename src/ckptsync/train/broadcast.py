"""``cs.train.broadcast_global_variables``: Horovod's ``hvd.broadcast_global_variables``
under the ``tf.train`` name TF1 programs written for Horovod-style setups call it by.

The op itself is :func:`ckptsync.distributed.broadcast_global_variables`; that package
sits above this layer, so it is loaded on the first call (as ``ckptsync``'s lazy
subpackages), never when ``ckptsync.train`` is imported.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["broadcast_global_variables"]


def broadcast_global_variables(root_rank: int = 0, graph: Any = None) -> Any:
    """An op setting every ``GLOBAL_VARIABLES`` variable to rank ``root_rank``'s value
    (0, the chief, by default; Horovod requires it); a no-op in a single process.
    Build it before the graph is finalized (e.g. in a hook's ``begin``) and run it after
    the session is created. See :func:`ckptsync.distributed.broadcast_global_variables`.

    Raises:
        ValueError: ``root_rank`` is not a rank of this job.
    """
    distributed = importlib.import_module("ckptsync.distributed")  # the layer above: see module doc
    return distributed.broadcast_global_variables(root_rank, graph)
