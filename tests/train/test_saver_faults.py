"""Saver faults with real processes and files: SIGKILL, failing fsync, disk full, open
readers, saving over the restored prefix, background failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ckptsync as cs
from ckptsync import checkpoint as ckpt
from ckptsync.errors import DataLossError, ResourceExhaustedError, UnknownError
from ckptsync.workers import async_writer as _async_writer

pytestmark = pytest.mark.slow

# A model of ~2 MB whose every element equals the step it was saved at, so a reader can
# tell a consistent checkpoint from a mixed or partial one.
_SETUP = """
import os, random, signal, sys, json
import numpy as np
import ckptsync as cs
from ckptsync import checkpoint as ckpt
d = sys.argv[1]
g = cs.Graph()
with g.as_default():
    w = cs.get_variable("dense0/w", [500, 1000], initializer=cs.zeros_initializer())
    b = cs.get_variable("dense0/b", [1000], dtype=cs.int64, initializer=cs.zeros_initializer())
    init = cs.global_variables_initializer()
sess = cs.Session(graph=g)
sess.run(init)
_graph_ctx = g.as_default()
_graph_ctx.__enter__()  # Savers below find the variables in g

def set_step(step):
    sess.write_variables({"dense0/w": np.full((500, 1000), step, np.float32),
                           "dense0/b": np.full(1000, step, np.int64)})

def check_latest():
    latest = ckpt.latest_checkpoint(d)
    if latest is None:
        return None
    values = ckpt.read_checkpoint(latest, verify=True)
    step = int(latest.rsplit("-", 1)[1])
    assert (values["dense0/w"] == step).all() and (values["dense0/b"] == step).all(), latest
    return step

def temp_files():
    return [n for n in os.listdir(d) if ".tmp-" in n]
"""


def _run_script(body: str, *args: str, timeout_s: float = 60) -> dict[str, Any]:
    code = textwrap.dedent(_SETUP) + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout_s)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("incremental", [False, True], ids=["full", "incremental"])
def test_writer_sigkilled_at_random_moments_leaves_a_verified_latest(tmp_path: Path,
                                                                     incremental: bool) -> None:
    """60 trainer processes (forked from one warm parent) are SIGKILLed at random moments
    of a save loop: during the data write, fsync, rename, state file, deletion. After
    each kill latest_checkpoint names a checkpoint that reads, verifies and is
    consistent, and the next Saver sweeps the dead writers' temp files. Every tenth
    process is killed on an event, not a clock: it says (through a pipe) that it is
    inside the fsync of its second save's temp file, and waits there for its kill, so
    that some kills surely land mid-write, after a published checkpoint. Incremental:
    every value changes each save, so these are full checkpoints naming their parent
    (tests/e2e/test_incremental_trainer.py kills a trainer writing deltas)."""
    result = _run_script(
        """
        import time
        random.seed(0)
        kills, with_temp, mid_write, steps = 0, 0, 0, []
        step = 0
        for i in range(60):
            step += 1000
            on_event = i % 10 == 0
            ready_r, ready_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(ready_r)
                    if on_event:
                        real_fsync = os.fsync
                        temp_fsyncs = [0]
                        def fsync_then_wait(fd):
                            if ".tmp-" in os.readlink(f"/proc/self/fd/{fd}"):
                                temp_fsyncs[0] += 1
                                # the third: the second save's data file, after the
                                # first save (data file, state file) is published
                                if temp_fsyncs[0] == 3:
                                    os.write(ready_w, b"x")  # inside that fsync
                                    time.sleep(3600)  # until the kill
                            real_fsync(fd)
                        os.fsync = fsync_then_wait
                    saver = cs.train.Saver(max_to_keep=2, incremental=INCREMENTAL)
                    s = step
                    while True:
                        set_step(s)
                        saver.save(sess, os.path.join(d, "model.ckpt"), global_step=s)
                        s += 1
                finally:
                    os._exit(1)
            os.close(ready_w)
            if on_event:
                assert os.read(ready_r, 1) == b"x"  # blocks until the child is mid-write
                mid_write += 1
            else:
                time.sleep(random.uniform(0.0, 0.08))
            os.close(ready_r)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            kills += 1
            with_temp += bool(temp_files())
            steps.append(check_latest())
        saver = cs.train.Saver()
        set_step(10**7)
        saver.save(sess, os.path.join(d, "model.ckpt"), global_step=10**7)
        print(json.dumps({"kills": kills, "with_temp": with_temp, "mid_write": mid_write,
                          "steps": steps, "temp_after": temp_files(),
                          "final": check_latest()}))
        """.replace("INCREMENTAL", str(incremental)),
        str(tmp_path),
        timeout_s=90,
    )
    assert result["kills"] == 60
    assert result["mid_write"] == 6
    assert result["with_temp"] >= result["mid_write"], "a kill mid-write left no temp file"
    assert result["temp_after"] == []
    assert result["final"] == 10**7
    assert any(s is not None for s in result["steps"])


def test_async_writer_process_sigkilled_at_random_moments(tmp_path: Path) -> None:
    """The background writer is SIGKILLed at random moments: the failure surfaces at the
    next save or wait (never a hang), the state file names only complete checkpoints,
    the next save starts a fresh writer, and a later Saver sweeps the dead worker's temp
    files."""
    result = _run_script(
        """
        import time
        from ckptsync.errors import UnknownError
        random.seed(1)
        surfaced, steps = 0, []
        with cs.train.Saver(max_to_keep=2, async_save=True) as saver:
            for i in range(12):
                for k in range(3):
                    step = i * 10 + k
                    set_step(step)
                    try:
                        saver.save(sess, os.path.join(d, "model.ckpt"), global_step=step)
                    except UnknownError:
                        surfaced += 1
                    time.sleep(random.uniform(0.0, 0.01))
                pid = saver._writer.pid
                # Even iterations kill at once (the last save is surely in flight), odd
                # ones after a random pause (in flight or idle).
                time.sleep(random.uniform(0.0, 0.03) if i % 2 else 0.0)
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                try:
                    saver.wait_until_finished()
                except UnknownError:
                    surfaced += 1
                steps.append(check_latest())
            set_step(999)
            for attempt in range(3):  # the last kill may land on a queued job
                try:
                    saver.save(sess, os.path.join(d, "model.ckpt"), global_step=999)
                    saver.wait_until_finished()
                    break
                except UnknownError:
                    surfaced += 1
        final = check_latest()
        # A new Saver's first save sweeps the killed workers' temp files.
        cs.train.Saver().save(sess, os.path.join(d, "other"), write_state=False)
        print(json.dumps({"surfaced": surfaced, "steps": steps, "final": final,
                          "temp_after": temp_files()}))
        """,
        str(tmp_path),
        timeout_s=90,
    )
    assert result["surfaced"] >= 1
    assert result["final"] == 999
    assert result["temp_after"] == []


def test_failing_fsync_fails_the_save_and_keeps_the_previous_state(tmp_path: Path) -> None:
    """A real failing fsync cannot be had here, so the trainer subprocess replaces
    ``os.fsync`` with one raising EIO. The save fails naming the file, leaves no
    partial file, keeps the earlier checkpoint, does not advance the state file; a
    later save writes again from memory."""
    result = _run_script(
        """
        import errno
        from ckptsync.errors import DataLossError
        saver = cs.train.Saver(max_to_keep=2)
        set_step(1)
        saver.save(sess, os.path.join(d, "model.ckpt"), global_step=1)
        real_fsync = os.fsync
        def failing_fsync(fd):
            raise OSError(errno.EIO, "Input/output error")
        os.fsync = failing_fsync
        set_step(2)
        try:
            saver.save(sess, os.path.join(d, "model.ckpt"), global_step=2)
            message = None
        except DataLossError as e:
            message = str(e)
        listing = sorted(os.listdir(d))
        latest_after_failure = check_latest()
        last = saver.last_checkpoints
        os.fsync = real_fsync
        set_step(3)
        saver.save(sess, os.path.join(d, "model.ckpt"), global_step=3)
        print(json.dumps({"message": message, "listing": listing, "last": last,
                          "latest_after_failure": latest_after_failure,
                          "latest_after_retry": check_latest()}))
        """,
        str(tmp_path),
    )
    assert result["message"] is not None
    assert "model.ckpt-2.h5" in result["message"] and "Input/output error" in result["message"]
    assert result["listing"] == ["checkpoint", "model.ckpt-1.h5"]
    assert result["latest_after_failure"] == 1
    assert result["last"] == [str(tmp_path / "model.ckpt-1")]
    assert result["latest_after_retry"] == 3


# -- async failures in the worker, injected through its command line --------------------
def _model(tmp_path: Path) -> tuple[Any, Any]:
    g = cs.Graph()
    with g.as_default():
        cs.get_variable("w", [1000], initializer=cs.ones_initializer())
        init = cs.global_variables_initializer()
    sess = cs.Session(graph=g)
    sess.run(init)
    return g, sess


def _wrapped_worker(monkeypatch: pytest.MonkeyPatch, prelude: str) -> None:
    code = prelude + "\nfrom ckptsync.workers._writer_child import worker_main; worker_main()"
    monkeypatch.setattr(_async_writer, "WORKER_COMMAND", [sys.executable, "-c", code])


def test_async_failed_fsync_surfaces_at_wait_and_save_and_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer process's ``os.fsync`` is replaced with one raising EIO (a real failing
    fsync cannot be had here). The error names the file and is raised by the next
    wait, save or close; the state file never names the failed checkpoint."""
    g, sess = _model(tmp_path)
    good = ckpt.write_checkpoint(tmp_path / "good-0", {"w": np.ones(1000, np.float32)})
    ckpt.update_checkpoint_state(str(tmp_path), good)
    _wrapped_worker(monkeypatch, "import os, errno\n"
                    "def f(fd): raise OSError(errno.EIO, 'Input/output error')\n"
                    "os.fsync = f")
    with g.as_default():
        saver = cs.train.Saver(async_save=True)
    try:
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1)
        assert saver.last_checkpoints == [str(tmp_path / "model.ckpt-1")]
        with pytest.raises(DataLossError, match=r"model\.ckpt-1\.h5: Input/output error"):
            saver.wait_until_finished()
        assert saver.last_checkpoints == []  # forgotten, never reported as saved
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=2)
        with pytest.raises(DataLossError, match=r"model\.ckpt-2\.h5"):  # at a later save
            for step in range(3, 500):
                time.sleep(0.01)
                saver.save(sess, str(tmp_path / "model.ckpt"), global_step=step)
        assert saver.last_checkpoints == []  # it and the saves queued after it
        assert ckpt.latest_checkpoint(str(tmp_path)) == good
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1000)
    finally:
        with pytest.raises(DataLossError, match=r"model\.ckpt-1000\.h5"):  # at close
            saver.close()
        sess.close()
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "good-0.h5"]
    assert ckpt.latest_checkpoint(str(tmp_path)) == good


def test_async_disk_full_surfaces_as_resource_exhausted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer process runs under RLIMIT_FSIZE = 64 KiB (a full disk without root)."""
    g, sess = _model(tmp_path)
    _wrapped_worker(monkeypatch, "import resource, signal\n"
                    "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
                    "resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))")
    with g.as_default():
        big = cs.get_variable("big", [100_000], initializer=cs.zeros_initializer())
        sess.run(big.initializer)
        saver = cs.train.Saver(async_save=True)
    with saver:
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1)
        with pytest.raises(ResourceExhaustedError, match=r"model\.ckpt-1\.h5: File too large"):
            saver.wait_until_finished()
    sess.close()
    assert os.listdir(tmp_path) == []


def test_async_worker_death_surfaces_as_unknown_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    g, sess = _model(tmp_path)
    _wrapped_worker(monkeypatch, "import os\nos._exit(3)")
    with g.as_default():
        saver = cs.train.Saver(async_save=True)
    try:
        with pytest.raises(UnknownError, match=r"writer process|checkpoint writer"):
            saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1)
            saver.wait_until_finished()
    finally:
        saver.close()
        sess.close()
    assert ckpt.latest_checkpoint(str(tmp_path)) is None


# -- readers and overwrites ----------------------------------------------------------
def test_open_reader_neither_blocks_nor_breaks_a_save_or_deletion(tmp_path: Path) -> None:
    """Another process holds the first checkpoint open with plain h5py (default file
    locking) while this one saves over it and then deletes it by retention."""
    g, sess = _model(tmp_path)
    with g.as_default():
        saver = cs.train.Saver(max_to_keep=1)
    first = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1)
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys, h5py
            f = h5py.File(sys.argv[1], "r")
            print("open", flush=True)
            sys.stdin.readline()
            print(float(f["w"][...].sum()), flush=True)
            """), f"{first}.h5"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "open"
        in_process = ckpt.CheckpointReader(first)
        sess.write_variables({"w": np.full(1000, 2.0, np.float32)})
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1)  # over the open file
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=2)  # deletes it
        assert not ckpt.checkpoint_exists(first)
        out, _ = holder.communicate("go\n", timeout=30)
        assert float(out.strip()) == 1000.0  # the old data, still readable
        assert float(in_process.get_tensor("w").sum()) == 1000.0
        in_process.close()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=30)
        sess.close()
    assert float(ckpt.load_variable(str(tmp_path), "w").sum()) == 2000.0


def test_saving_over_the_prefix_just_restored_from(tmp_path: Path) -> None:
    g, sess = _model(tmp_path)
    with g.as_default():
        saver = cs.train.Saver()
    prefix = saver.save(sess, str(tmp_path / "model"))
    saver.restore(sess, prefix)
    sess.write_variables({"w": np.full(1000, 5.0, np.float32)})
    assert saver.save(sess, str(tmp_path / "model")) == prefix
    sess.write_variables({"w": np.zeros(1000, np.float32)})
    saver.restore(sess, prefix)
    np.testing.assert_array_equal(sess.read_variables(["w"])["w"], np.full(1000, 5.0))
    assert ckpt.latest_checkpoint(str(tmp_path)) == prefix
    sess.close()


def _dies_after_publishing(monkeypatch: pytest.MonkeyPatch, marker: str,
                           slow_s: float = 0.0) -> None:
    """A worker that writes and publishes every job, then dies before replying to the
    job whose prefix contains ``marker`` (its jobs take ``slow_s`` longer)."""
    _wrapped_worker(monkeypatch, textwrap.dedent(f"""
        import os, time
        from ckptsync.workers import _writer_child as a
        real = a._run_job
        def run(job, arrays):
            time.sleep({slow_s!r})
            reply = real(job, arrays)
            if {marker!r} in job["prefix"]:
                os._exit(9)
            return reply
        a._run_job = run"""))


def test_async_writer_dying_after_publishing_counts_the_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    g, sess = _model(tmp_path)
    _dies_after_publishing(monkeypatch, "model.ckpt-3")
    with g.as_default():
        saver = cs.train.Saver(max_to_keep=2, async_save=True)
    with saver:
        for step in (1, 2, 3):
            saver.save(sess, str(tmp_path / "model.ckpt"), global_step=step)
            saver.wait_until_finished()  # no error: checkpoint 3 was published
        assert saver.last_checkpoints == [str(tmp_path / f"model.ckpt-{s}") for s in (2, 3)]
        # Its eviction (checkpoint 1) was done by the Saver's side instead.
        assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model.ckpt-2.h5",
                                                "model.ckpt-3.h5"]
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=4)  # a fresh writer
    assert ckpt.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-4")
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model.ckpt-3.h5", "model.ckpt-4.h5"]
    sess.close()


def test_async_writer_dying_after_publishing_loses_only_the_saves_queued_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    g, sess = _model(tmp_path)
    _dies_after_publishing(monkeypatch, "model.ckpt-2", slow_s=0.2)
    with g.as_default():
        saver = cs.train.Saver(max_to_keep=5, async_save=True)
    try:
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1)
        saver.wait_until_finished()
        for step in (2, 3, 4):  # 3 and 4 queue behind 2
            saver.save(sess, str(tmp_path / "model.ckpt"), global_step=step)
        with pytest.raises(UnknownError, match=r"died while writing .*model\.ckpt-3; .*nor "
                                               r"the 1 queued after it"):
            saver.wait_until_finished()
        assert saver.last_checkpoints == [str(tmp_path / f"model.ckpt-{s}") for s in (1, 2)]
        assert ckpt.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-2")
    finally:
        saver.close()
        sess.close()


def test_async_refusal_is_raised_even_if_the_writer_died_after_replying(
        tmp_path: Path) -> None:
    import select
    import signal

    g, sess = _model(tmp_path)
    with g.as_default():
        saver = cs.train.Saver(async_save=True, require_finite=True)
    try:
        sess.write_variables({"w": np.full(1000, np.nan, np.float32)})
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1)
        writer = saver._writer
        assert writer is not None and writer.pid is not None
        # Its refusal is in the socket, not read yet; then the writer dies.
        assert select.select([writer.worker.sock], [], [], 10.0)[0]
        os.kill(writer.pid, signal.SIGKILL)
        time.sleep(0.2)
        with pytest.raises(cs.errors.InvalidArgumentError, match="Variable w holds NaN"):
            saver.wait_until_finished()
        sess.write_variables({"w": np.ones(1000, np.float32)})
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=2)  # a fresh writer
        saver.wait_until_finished()
    finally:
        saver.close()
        sess.close()
    assert ckpt.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-2")


def test_async_retention_keeps_a_prefix_saved_again_when_the_second_save_fails(
        tmp_path: Path) -> None:
    g, sess = _model(tmp_path)
    with g.as_default():
        saver = cs.train.Saver(max_to_keep=3, async_save=True, require_finite=True)
    prefix = str(tmp_path / "model.ckpt-1")
    try:
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1)
        sess.write_variables({"w": np.full(1000, np.inf, np.float32)})
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1)  # refused
        with pytest.raises(cs.errors.InvalidArgumentError):
            saver.wait_until_finished()
        assert saver.last_checkpoints == [prefix]  # the first, written, save stays
        assert ckpt.latest_checkpoint(str(tmp_path)) == prefix
    finally:
        saver.close()
        sess.close()


def test_async_saving_a_published_prefix_again_when_the_writer_dies_is_a_failure(
        tmp_path: Path) -> None:
    """The same step saved again (a final save at the last periodic step): if the writer
    dies before writing it, the state file and the file still look published, but they
    hold the first save's values, so the second save must fail, not count as saved."""
    import signal

    g, sess = _model(tmp_path)
    with g.as_default():
        saver = cs.train.Saver(max_to_keep=3, async_save=True)
    prefix = str(tmp_path / "model.ckpt-5")
    try:
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=5)
        saver.wait_until_finished()
        writer = saver._writer
        assert writer is not None and writer.pid is not None
        pid = writer.pid
        os.kill(pid, signal.SIGSTOP)  # it cannot start the next job
        sess.write_variables({"w": np.full(1000, 7.0, np.float32)})
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=5)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(UnknownError, match="died while writing"):
            saver.wait_until_finished()
        assert ckpt.latest_checkpoint(str(tmp_path)) == prefix
        assert not np.any(ckpt.read_checkpoint(prefix, ["w"])["w"] == 7.0)  # the old values
    finally:
        saver.close()
        sess.close()


_DIE_BEFORE_STATE = """
    import os
    from ckptsync.checkpoint import state
    real = state.update_checkpoint_state
    def update(save_dir, prefix, *args, **kwargs):
        if prefix.endswith("model.ckpt-2"):
            os._exit(9)
        return real(save_dir, prefix, *args, **kwargs)
    state.update_checkpoint_state = update"""
_DIE_IN_DATA_FSYNC = """
    import os
    real = os.fsync
    def fsync(fd):
        if ".model.ckpt-2.h5.tmp-" in os.readlink(f"/proc/self/fd/{fd}"):
            os._exit(9)
        return real(fd)
    os.fsync = fsync"""


@pytest.mark.parametrize("death", [_DIE_BEFORE_STATE, _DIE_IN_DATA_FSYNC],
                         ids=["after-the-data-rename", "in-the-data-fsync"])
def test_async_writer_dying_mid_save_leaves_no_stray_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, death: str) -> None:
    """The worker dies after renaming checkpoint 2's data file into place but before the
    state file names it, or while its temp file is being synced: the save fails, the
    state file still names checkpoint 1, and the dead writer's temp file is removed (a
    renamed data file stays: it cannot be told from one an earlier save wrote)."""
    g, sess = _model(tmp_path)
    _wrapped_worker(monkeypatch, textwrap.dedent(death))
    with g.as_default():
        saver = cs.train.Saver(max_to_keep=3, async_save=True)
    try:
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1)
        saver.wait_until_finished()
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=2)
        with pytest.raises(UnknownError, match="died while writing"):
            saver.wait_until_finished()
        assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no temp file
        state = ckpt.get_checkpoint_state(str(tmp_path))
        assert state.model_checkpoint_path == str(tmp_path / "model.ckpt-1")
        assert state.all_model_checkpoint_paths == [str(tmp_path / "model.ckpt-1")]
    finally:
        saver.close()
        sess.close()


@pytest.mark.parametrize("max_to_keep", [0, 3])
def test_async_resaving_another_savers_checkpoint_when_the_writer_dies_keeps_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_to_keep: int) -> None:
    """A fresh Saver (a restarted trainer that recovered nothing, or one keeping all)
    saves step 5 again, and its writer dies before writing: the save fails (the state
    file and the file only look published: they are the first save's), and the first
    save's file is neither deleted nor changed."""
    g, sess = _model(tmp_path)
    prefix = str(tmp_path / "model.ckpt-5")
    with g.as_default():
        first = cs.train.Saver(max_to_keep=max_to_keep)
    first.save(sess, str(tmp_path / "model.ckpt"), global_step=5)
    before = ckpt.read_checkpoint(prefix, ["w"])["w"].copy()
    _wrapped_worker(monkeypatch, textwrap.dedent("""
        import os
        from ckptsync.checkpoint import writer
        def write_checkpoint(prefix, *args, **kwargs):
            os._exit(9)
        writer.write_checkpoint = write_checkpoint"""))
    with g.as_default():
        saver = cs.train.Saver(max_to_keep=max_to_keep, async_save=True)
    try:
        sess.write_variables({"w": before + 1.0})
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=5)
        with pytest.raises(UnknownError, match="died while writing"):
            saver.wait_until_finished()
    finally:
        saver.close()
        sess.close()
    assert ckpt.latest_checkpoint(str(tmp_path)) == prefix
    np.testing.assert_array_equal(ckpt.read_checkpoint(prefix, ["w"])["w"], before)
