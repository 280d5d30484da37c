"""The library under 2 real MPI ranks: collectives, broadcast, lock-step training."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from .conftest import REPO, WORKER, env, mpiexec, needs_mpi, run_mpi

pytestmark = [needs_mpi, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> list[dict]:
    out_dir = tmp_path_factory.mktemp("mpi_worker")
    r = run_mpi(mpiexec(2, sys.executable, WORKER, str(out_dir), "20"), timeout_s=150)
    assert r.returncode == 0, r.stdout + r.stderr
    out = [json.loads((out_dir / f"rank{k}.json").read_text()) for k in range(2)]
    assert [d["rank"] for d in out] == [0, 1] and all(d["size"] == 2 for d in out)
    return out


def test_allreduce_and_broadcast_are_right_for_many_fused_tensors_of_mixed_dtypes(reports):
    for d in reports:
        assert all(d["collectives"].values()), d["collectives"]


def test_gradient_kernels_write_into_the_fusion_buffer_and_give_the_exact_average(reports):
    for d in reports:
        assert d["fused_gradients"] and all(d["fused_gradients"].values()), d["fused_gradients"]


def test_the_shared_memory_reduction_gives_mpi_allreduces_bits_for_every_op(reports):
    for d in reports:
        assert d["exchange"] and all(d["exchange"].values()), d["exchange"]


def _reduction_reports(out_dir, **env_extra: str) -> list[dict]:
    """The worker's reduction checks only (``STEPS=0``), on 2 ranks."""
    r = run_mpi(mpiexec(2, sys.executable, WORKER, str(out_dir), "0"), timeout_s=120,
                **env_extra)
    assert r.returncode == 0, r.stdout + r.stderr
    return [json.loads((out_dir / f"rank{k}.json").read_text()) for k in range(2)]


def test_shared_windows_skip_small_buckets_and_dropped_graphs_free_theirs(tmp_path):
    for d in _reduction_reports(tmp_path, EXPECT_BIG_SHARED="1"):
        for part in ("exchange", "windows"):
            assert d[part] and all(d[part].values()), d[part]


def test_with_shared_memory_switched_off_the_fused_op_uses_mpi_allreduce(tmp_path):
    for d in _reduction_reports(tmp_path, CKPTSYNC_SHM_ALLREDUCE="0"):
        for part in ("exchange", "windows"):
            assert d[part] and all(d[part].values()), d[part]


def _can_mount_tmpfs() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs -o size=1m tmpfs /mnt"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs root and mount namespaces "
                    "(unshare -m) for a small /dev/shm")
def test_a_small_dev_shm_keeps_big_buckets_on_mpi_allreduce_instead_of_sigbus(tmp_path):
    # A container's default /dev/shm is 64 MiB; a 24 MiB bucket needs 3x that on 2 ranks.
    cmd = " ".join(mpiexec(2, sys.executable, WORKER, str(tmp_path), "0"))
    r = run_mpi(["unshare", "-m", "--propagation", "private", "sh", "-c",
                 f"mount -t tmpfs -o size=64m tmpfs /dev/shm && exec {cmd}"], timeout_s=150,
                EXPECT_BIG_SHARED="0")
    assert r.returncode == 0, r.stdout + r.stderr
    for k in range(2):
        d = json.loads((tmp_path / f"rank{k}.json").read_text())
        for part in ("exchange", "windows"):
            assert d[part] and all(d[part].values()), d[part]


def test_broadcast_makes_ranks_initialized_with_different_seeds_equal(reports):
    r0, r1 = reports
    assert r0["before"] != r1["before"], "the ranks must start different for this test"
    assert r0["after_broadcast"] == r1["after_broadcast"] == r0["before"]


def test_after_n_steps_every_rank_holds_bit_identical_variables(reports):
    r0, r1 = reports
    assert r0["global_step"] == r1["global_step"] == 20
    assert r0["after_training"] == r1["after_training"] != r0["after_broadcast"]
    # The gradients of all variables went through one fused allreduce op.
    assert r0["allreduce_ops"] == 1


def test_the_docs_mpi_example_trains_on_two_ranks_and_rank_0_checkpoints(tmp_path):
    readme = (REPO / "docs" / "mpi.md").read_text()
    start = readme.index("import numpy as np\nimport ckptsync as cs\nfrom ckptsync import distributed")
    (tmp_path / "train_mpi.py").write_text(readme[start:readme.index("```", start)])
    r = subprocess.run(mpiexec(2, sys.executable, "train_mpi.py"), env=env(), cwd=tmp_path,
                       capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(p.name for p in (tmp_path / "mpi_ckpts").glob("*.h5")) == [
        "model.ckpt-0.h5", "model.ckpt-100.h5"]
