"""`trainer run --async-save` reports a checkpoint as saved only once it is on disk: a
real trainer process whose writer process is held at a gate (a FIFO it must read before
writing checkpoint 10) while training goes on."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from ckptsync import checkpoint as ckpt

from .conftest import MODEL, env

# The writer process: blocks before writing model.ckpt-10 until the test opens the gate.
_GATED_WORKER = textwrap.dedent("""
    import os
    from ckptsync.workers import _writer_child as child
    real = child._run_job
    def run(job, arrays):
        if job["prefix"].endswith("model.ckpt-10"):
            with open(os.environ["CKPTSYNC_TEST_GATE"]) as gate:
                gate.read()
        return real(job, arrays)
    child._run_job = run
    child.worker_main()
""")
# The trainer: `trainer run` with that writer (WORKER_COMMAND is the tests' seam).
_TRAINER = textwrap.dedent(f"""
    import sys
    from ckptsync.workers import async_writer
    async_writer.WORKER_COMMAND = [sys.executable, "-c", {_GATED_WORKER!r}]
    from ckptsync.cli.trainer import main
    main(["run", *sys.argv[1:]], prog_name="trainer")
""")


def _lines(proc: subprocess.Popen) -> tuple[queue.Queue, threading.Thread]:
    q: queue.Queue = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            q.put(json.loads(line))
        q.put(None)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    return q, t


def _next(q: queue.Queue) -> dict:
    rec = q.get(timeout=60)
    assert rec is not None, "the trainer's output ended early"
    return rec


def _open_gate(gate: Path) -> None:
    """Opens the FIFO for writing (returns once the writer process has it open) and
    closes it: the writer's read ends."""
    t = threading.Thread(target=lambda: open(gate, "w").close(), daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the writer process never reached the gate"


def test_a_queued_async_save_is_reported_as_queued_until_it_is_on_disk(tmp_path):
    d, gate = tmp_path / "c", tmp_path / "gate"
    os.mkfifo(gate)
    err = (tmp_path / "stderr").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-c", _TRAINER, "--model", MODEL, "--checkpoint-dir", str(d),
         "--steps", "100000", "--save-every-steps", "10", "--max-to-keep", "0",
         # 20 steps/s: the writer's queue (16 saves) fills in 8 s, so several progress
         # lines (about one a second) come out while ckpt-10..40 are queued; at 200
         # steps/s it filled before the first line after step 1 and the trainer waited.
         "--async-save", "--max-steps-per-s", "20", "--log-format", "json"],
        env={**env(), "CKPTSYNC_TEST_GATE": str(gate)}, stdout=subprocess.PIPE,
        stderr=err, text=True)
    gate_opened = False
    q, pump = _lines(proc)
    try:
        first = str(d / "model.ckpt-0")
        # The gate is shut: ckpt-10 and the saves after it are queued, not saved.
        while True:
            rec = _next(q)
            assert rec["last_checkpoint"] == first, rec  # the only one on disk
            if rec["step"] >= 40:
                break
        assert rec["queued_checkpoints"][:4] == [str(d / f"model.ckpt-{s}")
                                                 for s in (10, 20, 30, 40)], rec
        assert not (d / "model.ckpt-10.h5").exists()
        assert ckpt.latest_checkpoint(str(d)) == first
        _open_gate(gate)
        gate_opened = True
        # Now each checkpoint reported saved is on disk, in the state file, when reported.
        reported = []
        while len(reported) < 3:
            rec = _next(q)
            path = rec["last_checkpoint"]
            assert path not in rec["queued_checkpoints"]
            if path != first and path not in reported:
                assert os.path.exists(path + ".h5"), rec
                latest = ckpt.latest_checkpoint(str(d))
                assert int(latest.rsplit("-", 1)[1]) >= int(path.rsplit("-", 1)[1])
                reported.append(path)
        proc.send_signal(signal.SIGTERM)
        while (rec := _next(q))["event"] != "summary":
            pass
        assert proc.wait(timeout=60) == 0, (tmp_path / "stderr").read_text()
    finally:
        if not gate_opened:  # free the writer process (and this test's opener thread)
            fd = os.open(gate, os.O_RDWR | os.O_NONBLOCK)
            os.close(fd)
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
        pump.join(60)
        assert proc.stdout is not None
        proc.stdout.close()
        err.close()
    on_disk = sorted(d.glob("model.ckpt-*.h5"))
    assert rec["checkpoints_written"] == len(on_disk), (rec, on_disk)
    assert rec["last_checkpoint"] == ckpt.latest_checkpoint(str(d))
