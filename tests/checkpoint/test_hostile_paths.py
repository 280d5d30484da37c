"""State files and checkpoint paths that are not what they seem: a FIFO, a directory or
a device where the state file should be is refused at once (never read, so never
blocked on); a `.h5` that is a symlink to a file outside the directory, and an entry
holding a NUL byte, are refused like an entry that escapes."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from ckptsync import checkpoint as ckpt
from ckptsync.checkpoint.state import NotRegularFileError, read_checkpoint_state
from ckptsync.cli.main import main
from ckptsync.errors import CkptsyncValueError
from ckptsync.serving.source import CheckpointSource
from tests.helpers import publish_outside


def _in_thread(fn):
    """Runs ``fn`` in a thread, bounded: a call that blocks (opening a FIFO for reading
    with no writer) fails the test instead of hanging it; the thread is then released by
    opening the FIFO's other end."""
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(_catch(fn)), daemon=True)
    t.start()
    t.join(10)
    return t, out


def _catch(fn):
    try:
        return fn()
    except BaseException as e:
        return e


@pytest.fixture
def fifo_state(tmp_path: Path):
    os.mkfifo(tmp_path / "checkpoint")
    yield tmp_path
    # If a reader did block on it, this unblocks it (O_NONBLOCK: never blocks here).
    try:
        os.close(os.open(tmp_path / "checkpoint", os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def test_a_fifo_state_file_is_refused_without_blocking(fifo_state: Path) -> None:
    t, out = _in_thread(lambda: ckpt.get_checkpoint_state(str(fifo_state)))
    assert not t.is_alive(), "get_checkpoint_state blocked on a FIFO"
    assert isinstance(out[0], NotRegularFileError)
    assert "is a FIFO (named pipe), not a regular file" in str(out[0])
    t, out = _in_thread(lambda: ckpt.latest_checkpoint(str(fifo_state)))
    assert not t.is_alive() and isinstance(out[0], CkptsyncValueError)


@pytest.mark.parametrize("kind", ["directory", "device"])
def test_a_directory_or_device_state_file_is_refused(tmp_path: Path, kind: str) -> None:
    if kind == "directory":
        (tmp_path / "checkpoint").mkdir()
        want = "a directory"
    else:
        (tmp_path / "checkpoint").symlink_to("/dev/zero")  # a device, behind a link
        want = "a character device"
    with pytest.raises(NotRegularFileError, match=want):
        read_checkpoint_state(str(tmp_path))


def test_the_watcher_reports_a_fifo_state_file_and_does_not_block(fifo_state: Path) -> None:
    source = CheckpointSource(str(fifo_state), lambda listing: None, poll=True,
                              rescan_interval_s=30)
    t, out = _in_thread(source.rescan)
    assert not t.is_alive(), "the watcher blocked on a FIFO"
    assert "is a FIFO (named pipe)" in (source.state_error or "")


def test_inspect_says_what_it_found_in_one_line(fifo_state: Path) -> None:
    t, out = _in_thread(lambda: CliRunner().invoke(main, ["inspect", str(fifo_state)]))
    assert not t.is_alive(), "ckptsync inspect blocked on a FIFO"
    result = out[0]
    assert result.exit_code == 1
    assert "is a FIFO (named pipe), not a regular file" in result.output
    assert "Traceback" not in result.output and result.output.count("\n") == 1
    os.mkfifo(fifo_state / "m.h5")
    t, out = _in_thread(lambda: CliRunner().invoke(main, ["inspect", str(fifo_state / "m")]))
    assert not t.is_alive() and out[0].exit_code == 1
    assert "not a regular file" in out[0].output


def test_inspect_of_a_directory_whose_state_names_a_fifo_says_so_in_one_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-5"\n')
    os.mkfifo(tmp_path / "model.ckpt-5.h5")
    t, out = _in_thread(lambda: CliRunner().invoke(main, ["inspect", str(tmp_path)]))
    assert not t.is_alive(), "ckptsync inspect blocked on a FIFO"
    assert out[0].exit_code == 1 and out[0].output.count("\n") == 1, out[0].output
    assert "names " + str(tmp_path / "model.ckpt-5") in out[0].output
    assert "model.ckpt-5.h5 is a FIFO, not a regular file" in out[0].output
    assert not [r for r in caplog.records if r.levelname == "ERROR"], "a stray log line"
    os.unlink(tmp_path / "model.ckpt-5.h5")
    result = CliRunner().invoke(main, ["inspect", str(tmp_path)])
    assert result.exit_code == 1 and "model.ckpt-5.h5 does not exist" in result.output


def test_a_symlinked_h5_pointing_outside_is_refused_like_an_escape(tmp_path: Path) -> None:
    d, _ = publish_outside(tmp_path)
    with pytest.raises(CkptsyncValueError, match="resolves outside the checkpoint directory"):
        ckpt.get_checkpoint_state(str(d))
    with pytest.raises(CkptsyncValueError, match="resolves outside"):
        ckpt.latest_checkpoint(str(d))
    seen = []
    source = CheckpointSource(str(d), seen.append, poll=True, rescan_interval_s=30)
    listing = source.rescan()
    assert listing is None or listing.latest is None  # nothing served
    assert "resolves outside" in (source.state_error or "")
    with pytest.raises(CkptsyncValueError, match="outside"):
        ckpt.update_checkpoint_state(str(d), str(d / "model.ckpt-5"))


def test_a_symlink_inside_the_directory_is_still_fine(tmp_path: Path) -> None:
    prefix = ckpt.write_checkpoint(str(tmp_path / "model.ckpt-4"), {"w": np.ones(2)}, 4)
    (tmp_path / "model.ckpt-5.h5").symlink_to(prefix + ".h5")
    ckpt.update_checkpoint_state(str(tmp_path), str(tmp_path / "model.ckpt-5"))
    assert ckpt.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-5")


def test_a_nul_byte_in_a_state_file_entry_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-5\\000x"\n')
    with pytest.raises(CkptsyncValueError, match="NUL byte"):
        ckpt.get_checkpoint_state(str(tmp_path))
    with pytest.raises(CkptsyncValueError, match="NUL byte"):
        ckpt.get_checkpoint_state(str(tmp_path) + "\0x")


def test_inspect_refuses_a_nul_byte_in_one_line() -> None:
    result = CliRunner().invoke(main, ["inspect", "ckpts\0/model"])
    assert result.exit_code == 2 and "NUL byte" in result.output
    assert "Traceback" not in result.output and result.output.count("\n") == 1


@pytest.mark.parametrize("args", [
    ["trainer", "run", "--model", "m.py", "--checkpoint-dir", "a\0b"],
    ["trainer", "run", "--model", "m\0.py", "--checkpoint-dir", "ckpts"],
    ["infer", "serve", "--model", "m.py", "--checkpoint-dir", "a\0b"],
    ["infer", "serve", "--model", "m.py", "--checkpoint-dir", "d", "--port-file", "p\0f"],
])
def test_a_nul_byte_in_any_flag_is_a_one_line_usage_error(args: list[str]) -> None:
    from ckptsync.cli.infer import main as infer_main
    from ckptsync.cli.trainer import main as trainer_main

    cmd = {"trainer": trainer_main, "infer": infer_main}[args[0]]
    result = CliRunner().invoke(cmd, args[1:], prog_name=args[0])
    assert result.exit_code == 2, result.output
    assert "holds a NUL byte" in result.output and "Traceback" not in result.output
    assert result.output.count("\n") == 1
