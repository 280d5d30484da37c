"""``trainer run --incremental``: per-checkpoint kind and bytes, and SIGKILL at random
points of a real trainer process (issue #19, items 2 and 3)."""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from ckptsync import checkpoint as ckpt

from .conftest import cli, env

pytestmark = pytest.mark.slow

# Digits through an embedding table: pixel j of value v (0..16) looks up row 17 * j + v
# of a [1088, 8] table; Adagrad updates only the rows a batch touched.
EMBEDDING_MODEL = '''
import numpy as np
import ckptsync as cs


def build_net(graph, device, mode, learning_rate=0.1):
    with graph.as_default(), graph.device(device):
        x = cs.placeholder(cs.float32, [None, 64], name="x")
        ids = cs.cast(cs.round(x * 16.0), cs.int32) + cs.constant(
            (17 * np.arange(64)).astype(np.int32))
        table = cs.get_variable("emb", [17 * 64, 8],
                                initializer=cs.random_normal_initializer(stddev=0.1))
        h = cs.reduce_sum(cs.nn.embedding_lookup(table, ids), axis=1)
        w = cs.get_variable("out/w", [8, 10])
        b = cs.get_variable("out/b", [10], initializer=cs.zeros_initializer())
        logits = cs.matmul(h, w) + b
        outputs = {"classes": cs.argmax(logits, axis=1, name="classes")}
        if mode == cs.ModeKeys.PREDICT:
            return cs.ModelSpec(inputs={"x": x}, outputs=outputs)
        y = cs.placeholder(cs.int64, [None], name="y")
        loss = cs.reduce_mean(
            cs.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        step = cs.train.get_or_create_global_step()
        train_op = cs.train.AdagradOptimizer(learning_rate).minimize(loss, global_step=step)
        return cs.ModelSpec(inputs={"x": x}, outputs=outputs, labels={"y": y}, loss=loss,
                            train_op=train_op)
'''


@pytest.fixture
def model(tmp_path: Path) -> str:
    path = tmp_path / "embedding_model.py"
    path.write_text(EMBEDDING_MODEL)
    return str(path)


def _trainer(model: str, d: Path, *args: str) -> list[str]:
    return cli("trainer", "run", "--model", model, "--checkpoint-dir", str(d), "--batch-size",
               "4", "--save-every-steps", "1", "--incremental", "--seed", "5", *args)


def test_progress_shows_each_checkpoints_kind_and_bytes(tmp_path: Path, model: str) -> None:
    d = tmp_path / "c"
    r = subprocess.run(_trainer(model, d, "--steps", "9", "--full-checkpoint-every-n", "3",
                                "--max-to-keep", "0", "--log-format", "json"),
                       env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    events = [json.loads(ln) for ln in r.stdout.splitlines()]
    written = [e for e in events if e["event"] == "checkpoint"]
    # Step 0's checkpoint (at session start) is replaced by step 1's before a report.
    assert [e["step"] for e in written] == list(range(1, 10))
    # A full checkpoint at steps 0, 3, 6, 9 (every 3rd), deltas between.
    assert [e["kind"] for e in written] == ["delta", "delta", "full"] * 3
    for e in written:
        assert e["bytes"] == (Path(e["path"] + ".h5")).stat().st_size
        assert (e["kind"] == "delta") == (len(ckpt.checkpoint_chain(e["path"])) > 1)
    deltas = [e["bytes"] for e in written if e["kind"] == "delta"]
    fulls = [e["bytes"] for e in written if e["kind"] == "full"]
    assert max(deltas) * 2 < min(fulls)
    text = subprocess.run(_trainer(model, tmp_path / "t", "--steps", "2"), env=env(),
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert f"checkpoint {tmp_path / 't' / 'model.ckpt-2'}: delta, " in text.stderr
    assert "trainer: note:" not in text.stderr


def test_a_model_that_changes_every_variable_is_told_why_it_gets_no_deltas(tmp_path: Path
                                                                            ) -> None:
    # The digits MLP under Adam: every variable changes every step, so every checkpoint
    # is full; the trainer says why, once.
    mlp = str(Path(__file__).parents[2] / "examples" / "digits_mlp.py")
    r = subprocess.run(_trainer(mlp, tmp_path / "c", "--steps", "4"), env=env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count(": full, ") >= 3, r.stderr
    assert r.stderr.count("trainer: note: --incremental wrote a full checkpoint again") == 1
    assert "Adam" in r.stderr and "Adagrad" in r.stderr


def _children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (its async writer)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _wait_gone(pids: list[int], timeout_s: float = 60.0) -> None:
    """Waits until processes ``pids`` have exited (gone, or a zombie nobody reaps): a
    killed trainer's writer process finishes the job it holds, then exits."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            except OSError:
                break
            time.sleep(0.01)
        else:
            raise AssertionError(f"process {pid} did not exit within {timeout_s} s")


def _listed_restorable(d: Path) -> int:
    """Checks that every checkpoint the state file names reads and verifies (composing
    its chain); returns how many it names."""
    state = ckpt.get_checkpoint_state(str(d))
    if state is None:
        return 0
    for p in state.all_model_checkpoint_paths:
        ckpt.read_checkpoint(p, verify=True)
    ckpt.read_checkpoint(state.model_checkpoint_path, verify=True)
    return len(state.all_model_checkpoint_paths)


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_sigkill_at_random_points_leaves_every_listed_checkpoint_restorable(
        tmp_path: Path, model: str, async_save: bool) -> None:
    """A trainer saving an incremental checkpoint every step (max_to_keep 2, a full one
    every 4th) is SIGKILLed at random moments, five times, each restart resuming from the
    last; after every kill each checkpoint the state file names reads and verifies,
    and the run finished after the kills ends with parameters bit-identical to a run
    never killed."""
    common = ["--steps", "200", "--full-checkpoint-every-n", "4", "--max-to-keep", "2",
              *(["--async-save"] if async_save else [])]
    straight = tmp_path / "straight"
    r = subprocess.run(_trainer(model, straight, *common), env=env(), capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    want = ckpt.read_checkpoint(str(straight / "model.ckpt-200"))
    killed = tmp_path / "killed"
    rng = random.Random(11 + async_save)
    steps_at_kill = []
    for _ in range(5):
        before = ckpt.latest_checkpoint(str(killed))
        p = subprocess.Popen(_trainer(model, killed, *common, "--max-steps-per-s", "100"),
                             env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and p.poll() is None:
                latest = ckpt.latest_checkpoint(str(killed))
                if latest is not None and latest != before:
                    break  # this run has published a checkpoint: it is saving every step
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.25))  # a random point of the save loop
            writers = _children(p.pid) if p.poll() is None else []
            p.send_signal(signal.SIGKILL)
            p.wait(10)
            _wait_gone(writers)  # an orphaned writer finishes its job first
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert _listed_restorable(killed) >= 1
        latest = ckpt.latest_checkpoint(str(killed))
        assert latest is not None
        steps_at_kill.append(int(latest.rsplit("-", 1)[1]))
    assert steps_at_kill == sorted(steps_at_kill) and steps_at_kill[-1] < 200
    r = subprocess.run(_trainer(model, killed, *common), env=env(), capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert _listed_restorable(killed) >= 1
    got = ckpt.read_checkpoint(str(killed / "model.ckpt-200"), verify=True)
    assert sorted(got) == sorted(want)
    for name in want:
        assert np.array_equal(got[name], want[name]), f"{name} differs after the kills"
    leftovers = [f.name for f in killed.iterdir() if ".tmp-" in f.name]
    assert leftovers == []
