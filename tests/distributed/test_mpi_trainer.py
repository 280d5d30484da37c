"""``trainer run`` under ``mpiexec -n 2``: the same model as one process with the global
batch, checkpoints from rank 0 only, a server following them, and no silent hang when a
rank dies, fails, stops answering or builds another graph."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from ckptsync import checkpoint as ckpt
from ckptsync.data import load_digits

from .conftest import MODEL, cli, env, mpiexec, needs_mpi, rank_pids, run_mpi

pytestmark = [needs_mpi, pytest.mark.timeout(240)]

TRAIN = ("--model", MODEL, "--data", "digits", "--log-format", "json")


def _files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def _wait(cond, what: str, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"{what}: the job exited early with {proc.returncode}: "
                                 f"{proc.communicate()}")
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s} s"
        time.sleep(0.05)


def test_two_ranks_with_batch_b_train_as_one_process_with_2b_and_only_rank0_writes(tmp_path):
    a, b, single = tmp_path / "rank0", tmp_path / "rank1", tmp_path / "single"

    def two_ranks(steps: int) -> dict:
        flags = (*TRAIN, "--steps", str(steps), "--batch-size", "16", "--save-every-steps", "10")
        # MPMD launch: rank 1 is told another directory, so anything it wrote would show.
        r = run_mpi([*mpiexec(1, *cli("trainer", "run", *flags, "--checkpoint-dir", str(a))),
                     ":", "-n", "1", *cli("trainer", "run", *flags, "--checkpoint-dir", str(b))])
        assert r.returncode == 0, r.stdout + r.stderr
        summaries = [json.loads(ln) for ln in r.stdout.splitlines() if '"summary"' in ln]
        assert len(summaries) == 1, "only rank 0 reports"
        assert _files(b) == [], "rank 1 must not write checkpoints"
        return summaries[0]

    first = two_ranks(20)
    assert first["global_step"] == 20 and first["checkpoints_written"] == 3
    # Resumed: rank 0 restores, every rank gets its values and the data position.
    second = two_ranks(40)
    assert second["restored_from"] == str(a / "model.ckpt-20") and second["global_step"] == 40
    assert [f for f in _files(a) if f.endswith(".h5")] == [
        "model.ckpt-0.h5", "model.ckpt-10.h5", "model.ckpt-20.h5", "model.ckpt-30.h5",
        "model.ckpt-40.h5"]

    one = subprocess.run(
        cli("trainer", "run", *TRAIN, "--steps", "40", "--batch-size", "32",
            "--save-every-steps", "20", "--checkpoint-dir", str(single)),
        env=env(), capture_output=True, text=True, timeout=120)
    assert one.returncode == 0, one.stderr
    for step in (20, 40):
        two = ckpt.read_checkpoint(str(a / f"model.ckpt-{step}"))
        ref = ckpt.read_checkpoint(str(single / f"model.ckpt-{step}"))
        assert sorted(two) == sorted(ref)
        for name in ref:
            np.testing.assert_allclose(two[name], ref[name], rtol=1e-4, atol=1e-6,
                                       err_msg=f"{name} at step {step}")


def test_sigterm_to_one_rank_stops_every_rank_after_the_same_step(tmp_path, procs):
    ckpt_dir = tmp_path / "ckpts"
    job = subprocess.Popen(
        mpiexec(2, *cli("trainer", "run", *TRAIN, "--steps", "100000", "--max-steps-per-s",
                        "50", "--checkpoint-dir", str(ckpt_dir))),
        env=env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    procs.append(job)
    _wait(lambda: (ckpt_dir / "model.ckpt-0.h5").exists(), "training start", job)
    os.kill(rank_pids(job.pid)[1], signal.SIGTERM)
    out, err = job.communicate(timeout=60)
    assert job.returncode == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["global_step"] > 0
    assert ckpt.latest_checkpoint(str(ckpt_dir)).endswith(f"model.ckpt-{summary['global_step']}")


def test_a_server_follows_the_two_rank_trainers_directory(tmp_path, procs):
    ckpt_dir, port_file = tmp_path / "ckpts", tmp_path / "port"
    server = subprocess.Popen(
        cli("infer", "serve", "--grpc-port", "0", "--model", MODEL, "--checkpoint-dir", str(ckpt_dir), "--port", "0",
            "--port-file", str(port_file), "--model-name", "digits"),
        env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    procs.append(server)
    _wait(lambda: port_file.exists() and port_file.read_text().strip(), "server start", server)
    base = f"http://127.0.0.1:{int(port_file.read_text())}"
    trainer = subprocess.Popen(
        mpiexec(2, *cli("trainer", "run", *TRAIN, "--steps", "200", "--save-every-steps", "50",
                        "--max-steps-per-s", "100", "--checkpoint-dir", str(ckpt_dir))),
        env=env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    procs.append(trainer)
    rows = load_digits().test["x"][:8].tolist()
    versions: list[int] = []
    with httpx.Client(timeout=10) as client:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and 200 not in versions:
            r = client.post(f"{base}/v1/models/digits:predict", json={"instances": rows})
            if r.status_code == 200:
                versions.append(int(r.json()["model_version"]))
            else:
                assert r.status_code == 503 and not versions, r.text
            time.sleep(0.05)
    out, err = trainer.communicate(timeout=60)
    assert trainer.returncode == 0, err
    assert versions == sorted(versions) and versions[-1] == 200
    assert len(set(versions)) >= 2, versions


def test_a_killed_rank_ends_the_job_non_zero_within_a_bounded_time(tmp_path, procs):
    ckpt_dir = tmp_path / "ckpts"
    job = subprocess.Popen(
        mpiexec(2, *cli("trainer", "run", *TRAIN, "--steps", "100000", "--max-steps-per-s",
                        "50", "--checkpoint-dir", str(ckpt_dir))),
        env=env(CKPTSYNC_COLLECTIVE_TIMEOUT_S="120"), stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    procs.append(job)
    _wait(lambda: (ckpt_dir / "model.ckpt-0.h5").exists(), "training start", job)
    pids = rank_pids(job.pid)
    assert sorted(pids) == [0, 1], pids
    t0 = time.monotonic()
    os.kill(pids[1], signal.SIGKILL)
    job.wait(timeout=30)
    assert job.returncode != 0
    assert time.monotonic() - t0 < 30


class _Lines:
    """Every line of one of a job's pipes, read by a thread; ``wait_for(text)`` blocks
    until a line holding ``text`` arrived (an event, not a clock) or the pipe closed."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait_for(self, text: str) -> bool:
        """True once a line holds ``text``; False if the pipe closed without one."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or any(text in ln for ln in self.lines))
            return any(text in ln for ln in self.lines)

    def join(self) -> str:
        self._thread.join()
        return "".join(self.lines)


def test_a_rank_that_stops_answering_is_aborted_by_the_collective_watchdog(tmp_path, procs):
    ckpt_dir = tmp_path / "ckpts"
    job = subprocess.Popen(
        mpiexec(2, *cli("trainer", "run", *TRAIN, "--steps", "100000", "--max-steps-per-s",
                        "50", "--checkpoint-dir", str(ckpt_dir))),
        env=env(CKPTSYNC_COLLECTIVE_TIMEOUT_S="3"), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(job)
    out, err = _Lines(job.stdout), _Lines(job.stderr)
    # Rank 0 reports step 1 only after both ranks ran it (its gradients are allreduced).
    assert out.wait_for('"event": "progress"'), (job.wait(), err.join())
    pids = rank_pids(job.pid)
    os.kill(pids[1], signal.SIGSTOP)
    try:
        # The watchdog's line, then the end of the job: events, waited for as such (the
        # module's timeout mark bounds a hang).
        seen = err.wait_for("aborting the job")
        job.wait()
    finally:
        if job.poll() is None:
            os.kill(pids[1], signal.SIGCONT)
    text = err.join()
    out.join()
    assert seen and job.returncode != 0, (job.returncode, text)
    assert "did not complete within 3 s" in text and "aborting the job" in text, (
        job.returncode, text)


def test_a_rank_that_fails_ends_the_job_with_its_exit_code_promptly(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros((10, 3), np.float32), y=np.zeros(10, np.int64))
    ckpt_dir = str(tmp_path / "ckpts")
    good = cli("trainer", "run", *TRAIN, "--steps", "50", "--checkpoint-dir", ckpt_dir)
    t0 = time.monotonic()
    r = run_mpi([*mpiexec(1, *good), ":", "-n", "1",
                 *cli("trainer", "run", "--model", MODEL, "--data", str(bad), "--steps", "50",
                      "--checkpoint-dir", ckpt_dir)],
                timeout_s=60, CKPTSYNC_COLLECTIVE_TIMEOUT_S="120")
    assert r.returncode == 2, r.stdout + r.stderr  # rank 1's usage error, not a hang
    assert "does not fit the model's placeholder" in r.stderr
    assert time.monotonic() - t0 < 60


def test_ranks_that_build_different_graphs_fail_at_start_with_a_clear_error(tmp_path):
    other = tmp_path / "wide.py"
    other.write_text(Path(MODEL).read_text().replace("HIDDEN = (128, 128)", "HIDDEN = (64, 128)"))
    ckpt_dir = str(tmp_path / "ckpts")
    r = run_mpi([*mpiexec(1, *cli("trainer", "run", *TRAIN, "--checkpoint-dir", ckpt_dir)), ":",
                 "-n", "1", *cli("trainer", "run", "--model", str(other), "--data", "digits",
                                 "--checkpoint-dir", ckpt_dir)], timeout_s=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert ("Ranks built different graphs: the graph on rank 1 differs from rank 0: 'dense0/w' "
            "has shape [64, 128], dtype float32 on rank 0 but shape [64, 64]") in r.stderr
    assert not Path(ckpt_dir, "checkpoint").exists()
