"""``BroadcastGlobalVariablesHook``: makes every rank start from the root's variables."""

from __future__ import annotations

import contextlib
from typing import Any

from ..graph import get_default_graph
from ..train.session_run_hook import SessionRunHook
from .graph_ops import broadcast_global_variables

__all__ = ["BroadcastGlobalVariablesHook"]


class BroadcastGlobalVariablesHook(SessionRunHook):
    """Broadcasts every global variable from ``root_rank`` once per session creation, as
    Horovod's hook of the same name.

    ``begin`` builds the :func:`broadcast_global_variables` op; ``after_create_session``
    runs it, so it runs after any restore (the root's restored values reach every rank)
    and again after a monitored session recovers. Put it first in the hook list, so the
    other hooks' ``after_create_session`` already see the broadcast values.

    Args:
        root_rank: the rank whose values win (usually 0, the chief).
        device: device for the op (accepted for Horovod compatibility).

    Example:
        >>> hook = BroadcastGlobalVariablesHook(0)
    """

    def __init__(self, root_rank: int, device: str = ""):
        self.root_rank = root_rank
        self.device = device
        self.bcast_op: Any = None

    def begin(self) -> None:
        graph = get_default_graph()
        if self.bcast_op is None or self.bcast_op.graph is not graph:
            with graph.device(self.device) if self.device else contextlib.nullcontext():
                self.bcast_op = broadcast_global_variables(self.root_rank, graph)

    def after_create_session(self, session: Any, coord: Any) -> None:
        session.run(self.bcast_op)
