"""AsyncCheckpointWriter: every dtype and shape through shared memory, state publishing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ckptsync.checkpoint import get_checkpoint_state, read_checkpoint
from ckptsync.errors import CkptsyncRuntimeError, CkptsyncTypeError, InvalidArgumentError
from ckptsync.workers import AsyncCheckpointWriter, StateUpdate

from .conftest import voluntary_switches


def _arrays(scale: int) -> dict[str, np.ndarray]:
    return {
        "f16": np.arange(5, dtype=np.float16) * scale,
        "c128/x": (np.arange(4) * scale + 1j).astype(np.complex128),
        "flag": np.array(True),
        "scalar": np.int64(scale),
        "empty": np.zeros((0, 3), np.uint16),
        "big/w": np.full((300, 700), scale, np.float32),
        "be": np.arange(3, dtype=">i4") * scale,
    }


def test_every_dtype_and_shape_round_trips_and_state_is_published(tmp_path: Path) -> None:
    with AsyncCheckpointWriter() as writer:
        for step in (1, 2):
            arrays = _arrays(step)
            prefix = str(tmp_path / f"m-{step}")
            writer.submit(prefix, arrays, global_step=step, metadata={"step": step},
                          state=StateUpdate(str(tmp_path), prefix, [prefix]),
                          delete=[str(tmp_path / "m-1")] if step == 2 else [])
            for a in arrays.values():  # the caller may change its arrays at once
                if a.ndim:
                    a[...] = 0
        writer.wait()
        got = read_checkpoint(tmp_path / "m-2")
    for name, want in _arrays(2).items():
        assert got[name].dtype == want.dtype.newbyteorder("=") and got[name].shape == want.shape
        np.testing.assert_array_equal(got[name], want)
    state = get_checkpoint_state(str(tmp_path))
    assert state is not None and state.model_checkpoint_path == str(tmp_path / "m-2")
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "m-2.h5"]


def test_bad_input_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    writer = AsyncCheckpointWriter()
    with pytest.raises(CkptsyncTypeError, match="'s'.*dtype"):
        writer.submit(str(tmp_path / "m"), {"s": np.array(["a"])})
    assert writer.in_flight is None
    writer.close()
    with pytest.raises(CkptsyncRuntimeError, match="closed"):
        writer.submit(str(tmp_path / "m"), {"w": np.ones(1)})
    assert os.listdir(tmp_path) == []


def test_require_finite_refuses_the_bad_variable_and_writes_nothing(tmp_path: Path) -> None:
    arrays = {"a": np.ones(10, np.float32), "step": np.int64(3), "b": np.ones((4, 5), np.float32),
              "c": np.ones(3, np.complex64), "d": np.full(2, 3e38, np.float32)}
    with AsyncCheckpointWriter() as writer:
        # Finite values whose sum overflows to inf are not refused.
        writer.submit(str(tmp_path / "m-1"), arrays, require_finite=True)
        writer.wait()
        for key, bad in [("b", np.nan), ("c", np.inf * 1j), ("a", -np.inf)]:
            broken = {k: v.copy() for k, v in arrays.items()}
            broken[key].flat[-1] = bad
            writer.submit(str(tmp_path / f"m-{key}"), broken, require_finite=True)
            with pytest.raises(InvalidArgumentError,
                               match=f"Variable {key} holds NaN or Inf.*m-{key}"):
                writer.wait()
            assert writer.failed_prefix == str(tmp_path / f"m-{key}")
            assert writer.in_flight is None
        # Without the check the same values are written as given.
        writer.submit(str(tmp_path / "m-2"), broken)
        writer.wait()
    assert sorted(os.listdir(tmp_path)) == ["m-1.h5", "m-2.h5"]
    assert np.isneginf(read_checkpoint(tmp_path / "m-2")["a"][-1])


def test_a_changed_layout_and_a_restarted_worker_get_the_new_layout(tmp_path: Path) -> None:
    with AsyncCheckpointWriter() as writer:
        layouts = [{"w": np.ones(3, np.float32)}, {"w": np.ones(3, np.float32)},
                   {"w": np.ones(4, np.float64), "v": np.int8(1)}, {"w": np.ones(3, np.float32)}]
        for i, arrays in enumerate(layouts):
            if i == 3:  # the worker dies while idle; a fresh one must be told the layout
                assert writer.pid is not None
                os.kill(writer.pid, 9)
                writer.worker.wait(timeout_s=10)
            arrays = {k: v * (i + 1) for k, v in arrays.items()}
            writer.submit(str(tmp_path / f"m-{i}"), arrays, global_step=i)
            writer.wait(timeout_s=30)
            got = read_checkpoint(tmp_path / f"m-{i}", verify=True)
            assert sorted(got) == sorted(arrays)
            for k, v in arrays.items():
                np.testing.assert_array_equal(got[k], v)


def _slow_worker(monkeypatch: pytest.MonkeyPatch, fail_prefix_part: str = "") -> None:
    """A worker whose jobs take 0.3 s, and fail for prefixes containing the marker."""
    import sys

    from ckptsync.workers import async_writer

    code = (
        "import time\n"
        "from ckptsync.workers import _writer_child as a\n"
        "orig = a._run_job\n"
        "def slow(job, arrays):\n"
        "    time.sleep(0.3)\n"
        f"    if {fail_prefix_part!r} and {fail_prefix_part!r} in job['prefix']:\n"
        "        return {'ok': False, 'type': 'DataLossError', 'message': job['prefix'] + ': EIO'}\n"
        "    return orig(job, arrays)\n"
        "a._run_job = slow\n"
        "a.worker_main()\n")
    monkeypatch.setattr(async_writer, "WORKER_COMMAND", [sys.executable, "-c", code])


def test_saves_queue_up_to_max_in_flight_and_are_written_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    _slow_worker(monkeypatch)
    with AsyncCheckpointWriter(max_in_flight=3) as writer:
        writer.submit(str(tmp_path / "m-0"), {"w": np.zeros(4)}, 0)
        writer.wait(timeout_s=30)  # the worker is up
        start = time.monotonic()
        for i in range(1, 4):
            p = str(tmp_path / f"m-{i}")
            writer.submit(p, {"w": np.full(4, float(i))}, i, state=StateUpdate(str(tmp_path), p, [p]))
        assert time.monotonic() - start < 0.25  # three queued without waiting
        assert writer.pending == [str(tmp_path / f"m-{i}") for i in (1, 2, 3)]
        p = str(tmp_path / "m-4")
        writer.submit(p, {"w": np.full(4, 4.0)}, 4, state=StateUpdate(str(tmp_path), p, [p]))
        assert time.monotonic() - start >= 0.25  # the fourth waited for the oldest
        writer.wait(timeout_s=30)
        assert writer.pending == []
    for i in range(1, 5):
        np.testing.assert_array_equal(read_checkpoint(tmp_path / f"m-{i}")["w"], np.full(4, i))
    state = get_checkpoint_state(str(tmp_path))
    assert state is not None and state.model_checkpoint_path == str(tmp_path / "m-4")


def test_a_failed_save_drops_the_saves_queued_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptsync.errors import DataLossError

    _slow_worker(monkeypatch, fail_prefix_part="m-2")
    with AsyncCheckpointWriter(max_in_flight=4) as writer:
        for i in (1, 2, 3, 4):
            p = str(tmp_path / f"m-{i}")
            writer.submit(p, {"w": np.full(4, float(i))}, i, state=StateUpdate(str(tmp_path), p, [p]))
        with pytest.raises(DataLossError, match="m-2: EIO"):
            writer.wait(timeout_s=30)
        assert writer.failed_prefix == str(tmp_path / "m-2") and writer.pending == []
        state = get_checkpoint_state(str(tmp_path))
        assert state is not None and state.model_checkpoint_path == str(tmp_path / "m-1")
        assert sorted(os.listdir(tmp_path)) == ["checkpoint", "m-1.h5"]
        # The writer goes on with the next save.
        p = str(tmp_path / "m-5")
        writer.submit(p, {"w": np.full(4, 5.0)}, 5, state=StateUpdate(str(tmp_path), p, [p]))
        writer.wait(timeout_s=30)
    state = get_checkpoint_state(str(tmp_path))
    assert state is not None and state.model_checkpoint_path == str(tmp_path / "m-5")


def test_an_empty_save_after_a_non_empty_one_is_empty(tmp_path: Path) -> None:
    with AsyncCheckpointWriter() as writer:
        writer.submit(str(tmp_path / "m-1"), {"w": np.ones(3)}, 1)
        writer.submit(str(tmp_path / "m-2"), {}, 2)
        writer.wait(timeout_s=30)
    assert read_checkpoint(tmp_path / "m-2") == {}


def test_layout_fits_what_a_saver_hands_in():
    """The next save of the same variables is copied as it is (no re-normalizing): a
    global step that is a numpy scalar fits; another shape, order, byte order or plain
    Python values do not (they take the checked path)."""
    from ckptsync.checkpoint.writer import prepare_arrays
    from ckptsync.workers.shared_arrays import ArrayLayout

    arrays = {"w": np.ones((2, 3), np.float32), "global_step": np.int64(7)}
    prepared = prepare_arrays(arrays)
    layout = ArrayLayout.of_arrays(prepared)
    assert layout.fits(arrays) and layout.fits(prepared)
    assert layout.fits({"w": np.ones((3, 2), np.float32).T.copy().T.T, "global_step": np.int64(1)})
    assert not layout.fits({"w": np.ones((3, 2), np.float32), "global_step": np.int64(7)})
    assert not layout.fits({"global_step": np.int64(7), "w": np.ones((2, 3), np.float32)})
    assert not layout.fits({"w": np.ones((2, 3), ">f4"), "global_step": np.int64(7)})
    assert not layout.fits({"w": [[1.0] * 3] * 2, "global_step": 7})
    assert not layout.fits({"w": np.ones((2, 3), np.float32)})


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs procfs")
def test_reading_a_reply_does_not_wake_the_idle_worker(tmp_path: Path) -> None:
    # A process asleep in recv() on a Unix socket is woken whenever its peer reads what
    # it sent; the worker waits in poll(POLLIN) instead, so the trainer's read of a reply
    # costs it no wake-up of the other process (an IPI, ~20 us in a VM).
    import select
    import time

    with AsyncCheckpointWriter() as writer:
        writer.submit(str(tmp_path / "m-1"), {"w": np.ones(3)}, global_step=1)
        sock = writer.worker.sock
        assert sock is not None and writer.pid is not None
        assert select.select([sock], [], [], 10.0)[0], "no reply within 10 s"
        before, deadline = -1, time.monotonic() + 10.0
        while time.monotonic() < deadline:  # until the worker is asleep and stays so
            now = voluntary_switches(writer.pid)
            if now == before:
                break
            before = now
            time.sleep(0.05)
        writer.wait()  # reads the reply
        time.sleep(0.1)
        assert voluntary_switches(writer.pid) == before


_CTRL_C_SCRIPT = """
import signal, sys
import numpy as np
signal.signal(signal.SIGINT, lambda *a: None)  # this process survives its Ctrl-C
from ckptsync.workers import AsyncCheckpointWriter
w = AsyncCheckpointWriter()
w.submit(sys.argv[1], {"w": np.ones(3)}, global_step=1)  # queued while it imports
print("started", flush=True)
sys.stdin.readline()  # the Ctrl-C has been sent to the whole group
w.close()
print("saved", flush=True)
"""


def test_a_ctrl_c_to_the_terminals_group_does_not_reach_the_starting_writer(
        tmp_path: Path, procs: list[subprocess.Popen]) -> None:
    # A terminal sends Ctrl-C to its whole foreground process group; the writer has a
    # group of its own, so even one still importing (not yet ignoring SIGINT) survives.
    import signal
    import sys

    p = subprocess.Popen([sys.executable, "-c", _CTRL_C_SCRIPT, str(tmp_path / "m-1")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    procs.append(p)
    assert p.stdout is not None and p.stdin is not None
    assert p.stdout.readline().strip() == "started"
    os.killpg(p.pid, signal.SIGINT)
    p.stdin.write("go\n")
    p.stdin.flush()
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "saved" in out and "KeyboardInterrupt" not in err
    assert (tmp_path / "m-1.h5").exists()
