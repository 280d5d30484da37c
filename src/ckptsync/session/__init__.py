"""``Session``: runs a graph with numpy, as TF1's ``tf.Session``.

Modules, in the order a run uses them:

==================== =================================================================
``session``          :class:`Session`, :class:`InteractiveSession`: feeds, fetches,
                     the variable values, the plan cache, ``run``/``make_callable``.
``config``           :class:`~.config.ConfigProto` (the BLAS thread cap) and TF1's
                     other option records.
``fetches``          :class:`~.fetches.FetchMapper`: nested fetches <-> a flat list.
``planner``          :func:`~.planner.compile_plan`, the one planner: prune, order,
                     one step per kernel call.
``plan``             :class:`~.plan.Plan`, its :data:`~.plan.Step` type and the
                     :class:`~.plan.RunContext` a step sees.
``steps``            an op's step (the hot loop's closures).
``fused_matmul``     ``MatMul -> BiasAdd [-> Relu]`` as one step (TF's remapper).
``inplace_inputs``   producers that write straight into a consumer's buffers
                     (``out=``; the distributed allreduce).
``changes``          :class:`~.changes.ChangeTracker`: which variables (rows) runs
                     changed (``Session.track_changes``).
==================== =================================================================

The default-session stack lives beside the default graph, in :mod:`ckptsync.graph`.
"""

from ..graph import get_default_session
from .changes import ChangeTracker
from .config import (
    ConfigProto,
    GPUOptions,
    GraphOptions,
    OptimizerOptions,
    RunMetadata,
    RunOptions,
)
from .session import ArrayCallable, InteractiveSession, Session

__all__ = ["Session", "InteractiveSession", "get_default_session", "ArrayCallable",
           "ChangeTracker",
           "ConfigProto", "GPUOptions", "GraphOptions", "OptimizerOptions", "RunOptions",
           "RunMetadata"]
