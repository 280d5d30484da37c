"""``cs.distributed``: data-parallel training under MPI (mpi4py), as Horovod's TF1 API.

One process per rank, started by ``mpiexec``; every rank builds the same graph. Rank 0
restores or initializes, :func:`broadcast_global_variables` makes every rank equal,
:class:`DistributedOptimizer` averages the gradients with one fused allreduce per step,
and only rank 0 writes checkpoints. Without ``mpiexec`` (or without ``mpi4py``) this is a
world of one: ``size() == 1``, collectives return copies, the optimizer wrapper is the
identity, and MPI is never imported.

Example (``mpiexec -n 2 python train.py``)::

    import ckptsync as cs
    from ckptsync import distributed as dist

    loss = ...
    opt = dist.DistributedOptimizer(cs.train.AdamOptimizer(1e-3 * dist.size()))
    train_op = opt.minimize(loss, global_step=cs.train.get_or_create_global_step())
    hooks = [dist.BroadcastGlobalVariablesHook(0), cs.train.StopAtStepHook(last_step=1000)]
    ckpt_dir = "ckpts" if dist.rank() == 0 else None
    with cs.train.MonitoredTrainingSession(checkpoint_dir=ckpt_dir, hooks=hooks) as sess:
        while not sess.should_stop():
            sess.run(train_op, feed_dict=my_shard_of_the_next_batch())
"""

from ._runtime import (  # noqa: F401
    abort,
    failure_ends_job,
    init,
    is_initialized,
    launched_under_mpi,
    local_rank,
    local_size,
    rank,
    size,
)
from .collectives import (  # noqa: F401
    Average,
    Max,
    Min,
    ReduceOp,
    Sum,
    allgather_object,
    allreduce,
    barrier,
    broadcast,
    broadcast_object,
)
from .graph_ops import (  # noqa: F401
    allreduce_tensors,
    broadcast_global_variables,
    check_same_graph,
)
from .hooks import BroadcastGlobalVariablesHook  # noqa: F401
from .optimizer import DistributedOptimizer, allreduce_gradients  # noqa: F401
