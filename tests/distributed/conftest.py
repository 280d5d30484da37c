"""Helpers for MPI tests: the venv's ``mpiexec`` (from the ``mpich`` wheel), 2 ranks.

MPI tests are skipped only where no ``mpiexec`` or no ``mpi4py`` is installed; CI installs
the ``mpi`` extra, so they run there. Every launch has a timeout.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = str(REPO / "examples" / "digits_mlp.py")
WORKER = str(Path(__file__).with_name("mpi_worker.py"))


def _find_mpiexec() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    return shutil.which("mpiexec")


MPIEXEC = _find_mpiexec()
_missing = ("no mpiexec found (install the MPI extra: pip install -e '.[mpi]')" if MPIEXEC is None
            else "mpi4py is not installed (pip install -e '.[mpi]')"
            if importlib.util.find_spec("mpi4py") is None else None)
needs_mpi = pytest.mark.skipif(_missing is not None, reason=_missing or "")


def env(**extra: str) -> dict[str, str]:
    """The test's environment, unbuffered, with a short collective timeout (no test may
    hang on a stuck rank), and without any launcher variables of an outer mpiexec."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDI_", "MPI_LOCAL"))}
    e["PYTHONUNBUFFERED"] = "1"
    e.setdefault("CKPTSYNC_COLLECTIVE_TIMEOUT_S", "60")
    e.update(extra)
    return e


def cli(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"ckptsync.cli.{module}", *args]


def mpiexec(n: int, *cmd: str) -> list[str]:
    assert MPIEXEC is not None
    return [MPIEXEC, "-n", str(n), *cmd]


def _mapped_files() -> set[str]:
    """Every file some process has mapped (from /proc/*/maps)."""
    mapped: set[str] = set()
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/maps") as f:
                mapped.update(line.split(None, 5)[5].strip() for line in f
                              if line.count(" ") >= 5 and "/dev/shm/" in line)
        except (OSError, IndexError):
            continue
    return mapped


@pytest.fixture(autouse=True)
def _no_leaked_mpich_segments() -> Iterator[None]:
    """MPICH leaves its shared-memory segment in /dev/shm when a job ends by MPI_Abort
    (every failing rank of these tests does): remove the ones this test's jobs left."""
    shm = Path("/dev/shm")
    before = set(shm.glob("mpich_shm_*")) if shm.is_dir() else set()
    yield
    if not shm.is_dir():
        return
    new = set(shm.glob("mpich_shm_*")) - before
    if new:
        in_use = _mapped_files()
        for path in new:
            if str(path) not in in_use:
                path.unlink(missing_ok=True)


def run_mpi(argv: list[str], timeout_s: float = 120,
            **env_extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env(**env_extra), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout_s, cwd=str(REPO))


def rank_pids(root_pid: int) -> dict[int, int]:
    """rank -> pid of the Python ranks under the ``mpiexec`` process ``root_pid``."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out: dict[int, int] = {}
    stack = list(children.get(root_pid, []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if b"python" not in cmdline:
            continue
        for item in environ:
            if item.startswith(b"PMI_RANK="):
                out[int(item.split(b"=", 1)[1])] = pid
    return out


