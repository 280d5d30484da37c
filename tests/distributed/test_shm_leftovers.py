"""MPICH's /dev/shm segments of jobs that ended abnormally are removed by the next job's
start; segments a live process holds (mapped, or open) are never touched."""

from __future__ import annotations

import mmap
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ckptsync.distributed._shm_leftovers import remove_dead_segments

from .conftest import mpiexec, needs_mpi, run_mpi

HOLD = textwrap.dedent("""
    import mmap, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR)
    if sys.argv[2] == "map":
        m = mmap.mmap(fd, 0)
        os.close(fd)  # held by the mapping only
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes our stdin
""")


def _segment(directory: Path, name: str) -> Path:
    path = directory / name
    path.write_bytes(b"\0" * (2 << 20))
    return path


def test_only_segments_no_live_process_holds_are_removed(tmp_path: Path) -> None:
    dead = _segment(tmp_path, "mpich_shm_dead_0")
    mapped = _segment(tmp_path, "mpich_shm_mapped_0")
    opened = _segment(tmp_path, "mpich_shm_opened_0")
    other = _segment(tmp_path, "not_mpich_0")
    holders = [subprocess.Popen([sys.executable, "-c", HOLD, str(p), how],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for p, how in ((mapped, "map"), (opened, "open"))]
    try:
        for h in holders:
            assert h.stdout is not None and h.stdout.readline() == "ready\n"
        with open(mapped, "r+b") as f:  # this process maps one too: still only one removed
            m = mmap.mmap(f.fileno(), 0)
        try:
            assert remove_dead_segments(str(tmp_path)) == [str(dead)]
        finally:
            m.close()
        assert not dead.exists() and mapped.exists() and opened.exists() and other.exists()
    finally:
        for h in holders:
            assert h.stdin is not None
            h.stdin.close()
            h.wait(30)
            assert h.stdout is not None
            h.stdout.close()
    # Their holders gone, the next sweep takes them.
    assert sorted(remove_dead_segments(str(tmp_path))) == sorted([str(mapped), str(opened)])
    assert other.exists()


JOB = textwrap.dedent("""
    import sys
    from ckptsync.distributed import _runtime as r
    r.init()
    r.world_comm().Barrier()
    if sys.argv[1] == "abort" and r.rank() == 1:
        r.abort(3)
    r.world_comm().Barrier()
""")


@needs_mpi
@pytest.mark.timeout(180)
def test_an_aborted_jobs_segments_are_removed_by_the_next_job(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm")
    job = tmp_path / "job.py"
    job.write_text(JOB)
    before = set(shm.glob("mpich_shm_*"))
    aborted = run_mpi(mpiexec(2, sys.executable, str(job), "abort"))
    assert aborted.returncode != 0
    left = set(shm.glob("mpich_shm_*")) - before
    assert left, "MPICH left no segment behind (nothing to test)"
    done = run_mpi(mpiexec(2, sys.executable, str(job), "ok"))
    assert done.returncode == 0, done.stderr
    assert not any(p.exists() for p in left), sorted(map(str, left))
