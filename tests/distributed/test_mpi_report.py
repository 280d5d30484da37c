"""What ``trainer run`` under ``mpiexec -n 2`` tells the user: the number of ranks and the
global batch (at the start and in the summary), and the held-out loss."""

from __future__ import annotations

import json

import pytest

from .conftest import MODEL, cli, mpiexec, needs_mpi, run_mpi

pytestmark = [needs_mpi, pytest.mark.timeout(240)]


def test_two_ranks_print_the_rank_count_and_the_global_batch(tmp_path):
    flags = ("--model", MODEL, "--steps", "20", "--batch-size", "16", "--save-every-steps", "10")
    r = run_mpi(mpiexec(2, *cli("trainer", "run", *flags, "--log-format", "json",
                                "--checkpoint-dir", str(tmp_path / "j"))))
    assert r.returncode == 0, r.stdout + r.stderr
    (summary,) = [json.loads(ln) for ln in r.stdout.splitlines() if '"summary"' in ln]
    assert summary["ranks"] == 2 and summary["global_batch_size"] == 32
    assert summary["held_out_loss"] > 0 and summary["held_out_accuracy"] is not None
    r = run_mpi(mpiexec(2, *cli("trainer", "run", *flags,
                                "--checkpoint-dir", str(tmp_path / "t"))))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 ranks x batch 16 = global batch 32" in r.stderr  # at the start
    done = [ln for ln in r.stdout.splitlines() if ln.startswith("done:")]
    assert len(done) == 1 and "on 2 ranks (global batch 32 = 2 x 16)" in done[0], r.stdout
