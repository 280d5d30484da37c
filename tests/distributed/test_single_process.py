"""Without mpiexec: a world of one, nothing MPI imported, behaviour unchanged."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import ckptsync as cs
from ckptsync import distributed as dist
from ckptsync.distributed.collectives import plan_buckets

from .conftest import env


def test_world_of_one():
    assert (dist.rank(), dist.size(), dist.local_rank(), dist.local_size()) == (0, 1, 0, 1)
    assert not dist.launched_under_mpi()


def test_collectives_return_copies_of_the_inputs():
    a = [np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(3)]
    for op in dist.ReduceOp:
        out = dist.allreduce(a, op)
        assert all(np.array_equal(x, y) and x is not y and x.dtype == y.dtype
                   for x, y in zip(out, a))
    single = dist.allreduce(a[0])
    assert isinstance(single, np.ndarray) and np.array_equal(single, a[0])
    assert np.array_equal(dist.broadcast(a[1], 0), a[1])
    assert dist.broadcast_object({"k": 1}) == {"k": 1}
    assert dist.allgather_object(7) == [7]
    dist.barrier()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"root_rank must be in \[0, 1\), got 1"):
        dist.broadcast(np.ones(2), 1)
    with pytest.raises(TypeError, match="op must be a cs.distributed.ReduceOp"):
        dist.allreduce(np.ones(2), "sum")
    with pytest.raises(TypeError, match="dtype bool are not supported with SUM"):
        dist.allreduce(np.ones(2, bool), dist.ReduceOp.SUM)
    with pytest.raises(ValueError, match="root_rank must be in"):
        dist.broadcast_global_variables(3)
    with pytest.raises(ValueError, match="backward_passes_per_step must be 1"):
        dist.DistributedOptimizer(cs.train.AdamOptimizer(0.1), backward_passes_per_step=2)
    with pytest.raises(ValueError, match="op must be Average"):
        dist.DistributedOptimizer(cs.train.AdamOptimizer(0.1), op=dist.ReduceOp.MAX)


def test_fusion_packs_many_tensors_into_one_buffer_per_dtype_under_the_threshold():
    arrays = [np.zeros(10, np.float32)] * 30 + [np.zeros(4, np.int64)] * 3
    assert plan_buckets(arrays, 64 * 2**20) == [list(range(30)), [30, 31, 32]]
    # 40-byte arrays, 100-byte buffers: two per buffer; a bigger array gets its own.
    assert plan_buckets([np.zeros(10, np.float32)] * 5 + [np.zeros(100, np.float32)], 100) == [
        [0, 1], [2, 3], [4], [5]]


def test_distributed_optimizer_is_the_identity_with_one_rank():
    def train(wrap: bool) -> np.ndarray:
        g = cs.Graph()
        with g.as_default():
            cs.set_random_seed(1)
            w = cs.get_variable("w", [3, 2])
            loss = cs.reduce_sum(cs.square(cs.matmul(cs.constant(np.ones((4, 3), np.float32)), w)))
            opt = cs.train.MomentumOptimizer(0.01, 0.9)
            if wrap:
                opt = dist.DistributedOptimizer(opt)
                assert opt.get_name() == "DistributedMomentum"
            train_op = opt.minimize(loss, global_step=cs.train.get_or_create_global_step())
            assert not any(op.type == "MpiAllreduce" for op in g.get_operations())
            hooks = [dist.BroadcastGlobalVariablesHook(0), cs.train.StopAtStepHook(last_step=5)]
            with cs.train.SingularMonitoredSession(hooks=hooks) as sess:
                while not sess.should_stop():
                    sess.run(train_op)
                if wrap:
                    assert opt.get_slot(w, "momentum") is not None
                    assert opt.get_slot_names() == ["momentum"]
                return sess.raw_session().run(w)

    np.testing.assert_array_equal(train(True), train(False))


def test_broadcast_global_variables_op_is_a_no_op_with_one_rank():
    g = cs.Graph()
    with g.as_default():
        v = cs.Variable([1.0, 2.0], name="v")
        op = dist.broadcast_global_variables(0)
        assert op.type == "BroadcastGlobalVariables" and op.attrs["variables"] == ["v"]
        with cs.Session() as sess:
            sess.run(v.initializer)
            sess.run(op)
            assert sess.run(v).tolist() == [1.0, 2.0]


def test_mpi4py_is_never_imported_without_mpiexec():
    code = ("import sys, numpy as np; from ckptsync import distributed as d; "
            "d.allreduce([np.ones(2)]); d.broadcast(np.ones(2), 0); "
            "from ckptsync.app import DataParallel; import threading; "
            "p = DataParallel(threading.Event()); assert p.is_chief and p.hooks() == []; "
            "print(d.size(), d.rank(), 'mpi4py' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "0", "False"]


def test_no_mpi4py_installed_means_one_process_and_a_clear_error_under_mpiexec():
    block = "import sys; sys.modules['mpi4py'] = None; from ckptsync import distributed as d; "
    r = subprocess.run([sys.executable, "-c", block + "print(d.size())"], env=env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr
    r = subprocess.run([sys.executable, "-c", block + "d.size()"],
                       env=env(PMI_SIZE="2", PMI_RANK="0"), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    assert "launched by mpiexec but mpi4py is not installed" in r.stderr
    assert "pip install 'ckptsync[mpi]'" in r.stderr
