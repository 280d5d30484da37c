"""Saver(incremental=True): deltas between full checkpoints, bit-identical to full saves
(issue #19, items 2, 3 and 5), with real sessions, files and writer processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ckptsync as cs
from ckptsync import checkpoint as ckpt
from ckptsync.data import load_digits
from ckptsync.errors import CkptsyncValueError, InvalidArgumentError

ROWS, DIM = 500, 16


def _embedding_adagrad() -> tuple[Any, Any, Any]:
    """An embedding table [500, 16] looked up by ids, a dense layer, Adagrad (sparse row
    updates of the table and its accumulator), a tf.data iterator's state as a saveable."""
    g = cs.Graph()
    with g.as_default():
        table = cs.get_variable("emb", [ROWS, DIM],
                                initializer=cs.random_normal_initializer(seed=1))
        w = cs.get_variable("w", [DIM, 1], initializer=cs.random_normal_initializer(seed=2))
        ds = cs.data.Dataset.range(10**6).map(lambda i: (i * 7919) % ROWS).batch(8)
        it = ds.make_one_shot_iterator()
        cs.add_to_collection(cs.GraphKeys.SAVEABLE_OBJECTS,
                             cs.data.experimental.make_saveable_from_iterator(it))
        ids = cs.cast(it.get_next(), cs.int32)
        loss = cs.reduce_sum(cs.square(cs.matmul(cs.nn.embedding_lookup(table, ids), w) - 3.0))
        step = cs.train.get_or_create_global_step()
        train = cs.train.AdagradOptimizer(0.1).minimize(loss, global_step=step)
        init = cs.global_variables_initializer()
    return g, train, init


def _mlp_adam() -> tuple[Any, Any, Any]:
    """The digits MLP shape (64 -> 32 -> 10), Adam: every variable changes every step."""
    data = load_digits()
    g = cs.Graph()
    with g.as_default():
        x = cs.constant(data.train["x"][:64])
        y = cs.constant(data.train["y"][:64])
        h = cs.nn.relu(cs.matmul(x, cs.get_variable("w0", [64, 32])) +
                       cs.get_variable("b0", [32], initializer=cs.zeros_initializer()))
        logits = cs.matmul(h, cs.get_variable("w1", [32, 10]))
        loss = cs.reduce_mean(cs.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits))
        step = cs.train.get_or_create_global_step()
        train = cs.train.AdamOptimizer(0.01).minimize(loss, global_step=step)
        init = cs.global_variables_initializer()
    return g, train, init


def _assert_same_bytes(got_prefix: str, want_prefix: str) -> None:
    """Every variable of both checkpoints: same keys, dtype, shape and bytes, through
    read_checkpoint and through NewCheckpointReader."""
    got = ckpt.read_checkpoint(got_prefix, verify=True)
    want = ckpt.read_checkpoint(want_prefix, verify=True)
    assert sorted(got) == sorted(want)
    reader = ckpt.NewCheckpointReader(got_prefix)
    for k, w in want.items():
        g = got[k]
        assert (g.dtype, g.shape) == (w.dtype, w.shape), k
        assert g.tobytes() == w.tobytes(), f"{k} of {got_prefix} differs from the full save"
        assert reader.get_tensor(k).tobytes() == w.tobytes(), k


@pytest.mark.parametrize("model", [_embedding_adagrad, _mlp_adam], ids=["embedding", "mlp"])
@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_every_composed_checkpoint_is_bit_identical_to_a_full_save(
        tmp_path: Path, model: Any, async_save: bool) -> None:
    g, train, init = model()
    inc_dir, full_dir = tmp_path / "inc", tmp_path / "full"
    inc_dir.mkdir()
    full_dir.mkdir()
    with g.as_default():
        inc = cs.train.Saver(max_to_keep=None, incremental=True, full_checkpoint_every_n=5,
                             async_save=async_save)
        full = cs.train.Saver(max_to_keep=None)
    kinds = []
    with cs.Session(graph=g) as sess, inc:
        sess.run(init)
        for step in range(24):
            if step:
                sess.run(train)
            inc.save(sess, str(inc_dir / "model.ckpt"), global_step=step)
            full.save(sess, str(full_dir / "model.ckpt"), global_step=step)
            assert inc.last_saved is not None
            kinds.append(inc.last_saved.kind)
        inc.wait_until_finished()
    for step in range(24):
        _assert_same_bytes(str(inc_dir / f"model.ckpt-{step}"),
                           str(full_dir / f"model.ckpt-{step}"))
    if model is _embedding_adagrad:
        # A full one every 5th, deltas between; the deltas are much smaller.
        assert kinds == (["full (no parent)"] + ["delta"] * 4 + (["full"] + ["delta"] * 4) * 4
                         )[:24]
        delta = os.path.getsize(inc_dir / "model.ckpt-3.h5")
        assert delta * 3 < os.path.getsize(full_dir / "model.ckpt-3.h5")
        assert len(ckpt.checkpoint_chain(str(inc_dir / "model.ckpt-9"))) == 5
    else:  # every value changes each step: a delta would be the whole model, and
        # naming a parent would tell a server nothing: plain full checkpoints
        assert set(kinds) == {"full (no parent)"}
        assert all(len(ckpt.checkpoint_chain(str(inc_dir / f"model.ckpt-{s}"))) == 1
                   for s in range(24))


def _listed(d: Path) -> list[str]:
    state = ckpt.get_checkpoint_state(str(d))
    return [] if state is None else list(state.all_model_checkpoint_paths)


def _check_restorable(d: Path, g: Any, saver: Any) -> None:
    """Every checkpoint the state file names reads, verifies, and restores."""
    with cs.Session(graph=g) as sess:
        for p in _listed(d):
            for link in ckpt.checkpoint_chain(p):
                assert os.path.exists(link + ".h5"), f"{p} needs {link}, which is gone"
            ckpt.read_checkpoint(p, verify=True)
            saver.restore(sess, p)


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_retention_never_leaves_an_unrestorable_listed_checkpoint(
        tmp_path: Path, async_save: bool, relative: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # relative: saved to "model.ckpt" in the working directory, as `trainer run
    # --checkpoint-dir ckpts` does; the bases must be held under the names recorded.
    g, train, init = _embedding_adagrad()
    with g.as_default():
        saver = cs.train.Saver(max_to_keep=2, incremental=True, full_checkpoint_every_n=4,
                               async_save=async_save)
        reader = cs.train.Saver()
    if relative:
        monkeypatch.chdir(tmp_path)
    save_path = "model.ckpt" if relative else str(tmp_path / "model.ckpt")
    listed_counts = []
    with cs.Session(graph=g) as sess, saver:
        sess.run(init)
        for step in range(15):
            sess.run(train)
            saver.save(sess, save_path, global_step=step)
            saver.wait_until_finished()
            listed = _listed(tmp_path)
            listed_counts.append(len(listed))
            assert listed == [os.path.abspath(p) for p in saver.last_checkpoints]
            _check_restorable(tmp_path, g, reader)
            # Nothing leaks: every file on disk is listed.
            on_disk = sorted(str(tmp_path / f[:-3]) for f in os.listdir(tmp_path)
                             if f.endswith(".h5"))
            assert on_disk == sorted(listed)
    # Full checkpoints at steps 0, 4, 8, 12; max_to_keep=2 holds the chain behind the two
    # newest: at step 4 (3 is kept, a delta on 2 on 1 on 0) five are listed; at step 5
    # (a delta on 4) 3 is evicted and its chain goes with it.
    assert listed_counts[:6] == [1, 2, 3, 4, 5, 2]
    assert max(listed_counts) == 5


def test_restore_makes_the_next_save_full_and_the_one_after_a_delta_on_it(tmp_path: Path
                                                                         ) -> None:
    g, train, init = _embedding_adagrad()
    with g.as_default():
        saver = cs.train.Saver(max_to_keep=None, incremental=True)
    with cs.Session(graph=g) as sess:
        sess.run(init)
        for step in range(3):
            sess.run(train)
            saver.save(sess, str(tmp_path / "model.ckpt"), global_step=step)
        assert saver.last_saved is not None and saver.last_saved.kind == "delta"
        saver.restore(sess, str(tmp_path / "model.ckpt-2"))  # a delta: composed
        sess.run(train)
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=3)
        # The restore rewrote every variable: a full checkpoint, naming no parent (it
        # could tell a server at model.ckpt-2 nothing it would not read anyway).
        assert saver.last_saved.kind == "full (no parent)"
        assert saver.last_saved.parent is None
        sess.run(train)
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=4)
        assert saver.last_saved.kind == "delta"
        values = sess.read_variables(["emb", "w"])
    # A new session: nothing known of what changed; a full checkpoint without parent.
    with cs.Session(graph=g) as sess2:
        saver.restore(sess2, str(tmp_path / "model.ckpt-4"))
        got = sess2.read_variables(["emb", "w"])
        assert all(got[k].tobytes() == values[k].tobytes() for k in values)
        sess2.run(train)
        saver.save(sess2, str(tmp_path / "model.ckpt"), global_step=5)
        assert saver.last_saved.kind == "full (no parent)"
        saver.save(sess2, str(tmp_path / "model.ckpt"), global_step=6)
        assert saver.last_saved.kind == "delta"
    with cs.Session(graph=g) as sess3:
        sess3.run(init)
        saver.save(sess3, str(tmp_path / "model.ckpt"), global_step=7)
        assert saver.last_saved.kind == "full (no parent)"


def test_saving_again_over_a_base_drops_the_deltas_composed_through_it(tmp_path: Path
                                                                       ) -> None:
    """Back to step 1 and on: step 2 is saved again, so the old step 3 (a delta on the
    old step 2) no longer reads; it is dropped from the state file and deleted, and
    every checkpoint the state file names restores."""
    g, train, init = _embedding_adagrad()
    with g.as_default():
        saver = cs.train.Saver(max_to_keep=10, incremental=True)
        reader = cs.train.Saver()
    with cs.Session(graph=g) as sess:
        sess.run(init)
        for step in range(4):
            sess.run(train)
            saver.save(sess, str(tmp_path / "model.ckpt"), global_step=step)
        saver.restore(sess, str(tmp_path / "model.ckpt-1"))
        sess.run(train)
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=2)
        assert _listed(tmp_path) == [str(tmp_path / f"model.ckpt-{i}") for i in range(3)]
        assert not (tmp_path / "model.ckpt-3.h5").exists()
        _check_restorable(tmp_path, g, reader)
        sess.run(train)
        saver.save(sess, str(tmp_path / "model.ckpt"), global_step=3)
        assert saver.last_saved.kind == "delta"
        want = sess.read_variables(["emb", "w"])
    got = ckpt.read_checkpoint(str(tmp_path / "model.ckpt-3"), verify=True)
    assert all(got[k].tobytes() == want[k].tobytes() for k in want)


def test_no_usable_predecessor_gives_a_full_checkpoint(tmp_path: Path) -> None:
    """Another directory, a deleted or replaced predecessor, write_state=False."""
    g, train, init = _embedding_adagrad()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with g.as_default():
        saver = cs.train.Saver(max_to_keep=None, incremental=True)
    with cs.Session(graph=g) as sess:
        sess.run(init)
        saver.save(sess, str(tmp_path / "a/m"), global_step=0)
        sess.run(train)
        saver.save(sess, str(tmp_path / "b/m"), global_step=1)
        assert saver.last_saved.kind == "full (no parent)"
        sess.run(train)
        saver.save(sess, str(tmp_path / "b/m"), global_step=2)
        assert saver.last_saved.kind == "delta"
        os.unlink(tmp_path / "b/m-2.h5")
        sess.run(train)
        saver.save(sess, str(tmp_path / "b/m"), global_step=3)
        assert saver.last_saved.kind == "full (no parent)"
        # Replaced by another file of that name: not the predecessor this Saver wrote.
        ckpt.write_checkpoint(str(tmp_path / "b/m-3"), sess.read_variables(["emb"]))
        sess.run(train)
        saver.save(sess, str(tmp_path / "b/m"), global_step=4)
        assert saver.last_saved.kind == "full (no parent)"
        before = saver.last_saved
        saver.save(sess, str(tmp_path / "b/other"), write_state=False)  # a plain full one
        assert saver.last_saved is before
        assert ckpt.checkpoint_chain(str(tmp_path / "b/other")) == [str(tmp_path / "b/other")]
        sess.run(train)
        saver.save(sess, str(tmp_path / "b/m"), global_step=5)
        assert saver.last_saved.kind == "delta" and saver.last_saved.parent == \
            str(tmp_path / "b/m-4")
        want = sess.read_variables(["emb", "w"])
    got = ckpt.read_checkpoint(str(tmp_path / "b/m-5"))
    assert all(got[k].tobytes() == want[k].tobytes() for k in want)


def test_after_an_async_saver_closes_its_saves_go_on_as_deltas(tmp_path: Path) -> None:
    g, train, init = _embedding_adagrad()
    with g.as_default():
        saver = cs.train.Saver(max_to_keep=None, incremental=True, async_save=True)
    with cs.Session(graph=g) as sess:
        sess.run(init)
        saver.save(sess, str(tmp_path / "m"), global_step=0)
        sess.run(train)
        saver.save(sess, str(tmp_path / "m"), global_step=1)
        saver.close()  # written by the writer process; from now on synchronously
        sess.run(train)
        saver.save(sess, str(tmp_path / "m"), global_step=2)
        assert saver.last_saved.kind == "delta"
        assert saver.last_saved.parent == str(tmp_path / "m-1")
        want = sess.read_variables(["emb", "w"])
    got = ckpt.read_checkpoint(str(tmp_path / "m-2"), verify=True)
    assert all(got[k].tobytes() == want[k].tobytes() for k in want)


def test_a_delta_over_half_a_full_checkpoint_is_written_full(tmp_path: Path) -> None:
    g = cs.Graph()
    with g.as_default():
        t = cs.get_variable("t", [100, 8], initializer=cs.zeros_initializer())
        rows = cs.placeholder(cs.int32, [None])
        upd = cs.scatter_update(t, rows, cs.ones_like(cs.gather(t, rows)))
        saver = cs.train.Saver(max_to_keep=None, incremental=True)
    with cs.Session(graph=g) as sess:
        sess.run(t.initializer)
        saver.save(sess, str(tmp_path / "m"), global_step=0)
        sess.run(upd, {rows: np.arange(10)})
        saver.save(sess, str(tmp_path / "m"), global_step=1)
        assert saver.last_saved.kind == "delta"
        assert saver.last_saved.stored_bytes == 10 * (8 * 4 + 8)
        sess.run(upd, {rows: np.arange(60)})  # 60 rows: over half the table
        saver.save(sess, str(tmp_path / "m"), global_step=2)
        assert saver.last_saved.kind == "full"
        got = ckpt.read_checkpoint(str(tmp_path / "m-2"))["t"]
    assert (got[:60] == 1).all() and (got[60:] == 0).all()


def test_a_nan_refusal_gives_the_changed_rows_back(tmp_path: Path) -> None:
    g = cs.Graph()
    with g.as_default():
        t = cs.get_variable("t", [100, 8], initializer=cs.zeros_initializer())
        rows = cs.placeholder(cs.int32, [None])
        vals = cs.placeholder(cs.float32, [None, 8])
        upd = cs.scatter_update(t, rows, vals)
        saver = cs.train.Saver(max_to_keep=None, incremental=True, require_finite=True)
    with cs.Session(graph=g) as sess:
        sess.run(t.initializer)
        saver.save(sess, str(tmp_path / "m"), global_step=0)
        sess.run(upd, {rows: [3], vals: np.full((1, 8), np.nan, np.float32)})
        with pytest.raises(InvalidArgumentError, match="Variable t holds NaN"):
            saver.save(sess, str(tmp_path / "m"), global_step=1)
        assert not os.path.exists(tmp_path / "m-1.h5")
        sess.run(upd, {rows: [3], vals: np.ones((1, 8), np.float32)})
        saver.save(sess, str(tmp_path / "m"), global_step=2)  # row 3 given back, now fine
        assert saver.last_saved.kind == "delta"
        got = ckpt.read_checkpoint(str(tmp_path / "m-2"))["t"]
    assert (got[3] == 1).all() and (np.delete(got, 3, axis=0) == 0).all()


def test_bad_full_checkpoint_every_n() -> None:
    with cs.Graph().as_default():
        cs.get_variable("v", [1])
        with pytest.raises(CkptsyncValueError, match="full_checkpoint_every_n must be an int"):
            cs.train.Saver(incremental=True, full_checkpoint_every_n=0)
        for wrong_type in ("3", 1.5, True):
            with pytest.raises(TypeError, match="full_checkpoint_every_n must be an int"):
                cs.train.Saver(incremental=True, full_checkpoint_every_n=wrong_type)


# -- a failed delta write loses no change ---------------------------------------------
_FAILING_WRITE = """
import errno, json, os, resource, signal, sys
import numpy as np
import ckptsync as cs
from ckptsync import checkpoint as ckpt
from ckptsync import errors
from ckptsync.workers import async_writer
d, async_save, how = sys.argv[1], sys.argv[2] == "async", sys.argv[3]
FLAG = d + "/fail-now"
# "fsync": while FLAG exists fsync fails with EIO (a real failing fsync cannot be had
# here), in this process and in the writer process.
FAILING_FSYNC = (
    "import errno, os\\n"
    "_real_fsync = os.fsync\\n"
    "def _fsync(fd):\\n"
    f"    if os.path.exists({FLAG!r}):\\n"
    "        raise OSError(errno.EIO, 'Input/output error')\\n"
    "    _real_fsync(fd)\\n"
    "os.fsync = _fsync\\n")
if how == "fsync":
    exec(FAILING_FSYNC)
    async_writer.WORKER_COMMAND = [sys.executable, "-c", FAILING_FSYNC +
        "from ckptsync.workers._writer_child import worker_main; worker_main()"]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write over the limit fails with EFBIG
g = cs.Graph()
with g.as_default():
    t = cs.get_variable("t", [2000, 16], initializer=cs.zeros_initializer())
    rows = cs.placeholder(cs.int32, [None])
    step = cs.placeholder(cs.float32, [])
    upd = cs.scatter_add(t, rows, cs.fill([cs.size(rows), 16], step))
    saver = cs.train.Saver(max_to_keep=3, incremental=True, async_save=async_save)
    full = cs.train.Saver(max_to_keep=None)
sess = cs.Session(graph=g)
sess.run(t.initializer)
os.makedirs(d + "/inc"); os.makedirs(d + "/full")
FAILING = (4, 5, 9)

def failing(on):
    if how == "fsync":
        if on:
            open(FLAG, "w").close()
        else:
            os.unlink(FLAG)
        return
    # "efbig": files over 1 KiB cannot be written (RLIMIT_FSIZE): a full disk
    size = 1024 if on else resource.RLIM_INFINITY
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
    if async_save:  # the writer process takes its limits when it starts: start another
        saver._writer._stop()

expected = errors.DataLossError if how == "fsync" else errors.ResourceExhaustedError
failures, kinds = 0, []
for s in range(1, 13):
    sess.run(upd, {rows: [(s * 37 + k * 101) % 2000 for k in range(5)], step: float(s)})
    if s in FAILING:
        state_before = open(d + "/inc/checkpoint").read()
        failing(True)
    try:
        saver.save(sess, d + "/inc/model.ckpt", global_step=s)
        saver.wait_until_finished()
        kinds.append(saver.last_saved.kind)
    except expected:
        failures += 1
        assert open(d + "/inc/checkpoint").read() == state_before
        assert not [n for n in os.listdir(d + "/inc") if ".tmp-" in n]
        assert not os.path.exists(d + f"/inc/model.ckpt-{s}.h5")
    finally:
        if s in FAILING:
            failing(False)
    full.save(sess, d + "/full/model.ckpt", global_step=s)
saver.close()
same = []
for s in range(1, 13):
    if s in FAILING:
        continue
    got = ckpt.read_checkpoint(d + f"/inc/model.ckpt-{s}", verify=True)
    want = ckpt.read_checkpoint(d + f"/full/model.ckpt-{s}")
    same.append(all(got[k].tobytes() == want[k].tobytes() for k in want))
print(json.dumps({"failures": failures, "kinds": kinds, "same": same,
                  "listed": ckpt.get_checkpoint_state(d + "/inc").all_model_checkpoint_paths}))
"""



@pytest.mark.parametrize("how", ["fsync", "efbig"])
@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_a_failed_delta_write_loses_no_change(tmp_path: Path, async_save: bool, how: str
                                              ) -> None:
    """Saves 4, 5 and 9 fail: fsync raises EIO, or the disk is full (RLIMIT_FSIZE of
    1 KiB on the writing process: a real EFBIG from the kernel). Each failure leaves no
    file and the state file as it was, and every later checkpoint composes to exactly
    the full save of its step: the failed saves' changed rows were given back and
    written by the next delta."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_FAILING_WRITE),
                           str(tmp_path), "async" if async_save else "sync", how],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["failures"] == 3
    assert len(result["same"]) == 9 and all(result["same"]), result
    assert result["kinds"].count("delta") >= 6, result["kinds"]
    for p in result["listed"]:
        ckpt.read_checkpoint(p, verify=True)


_STAGING_LIMITED = r"""
import json, os, resource, signal, sys
import numpy as np
import ckptsync as cs
from ckptsync import errors
d = sys.argv[1]
g = cs.Graph()
with g.as_default():
    t = cs.Variable(np.ones((4096, 16), np.float32), name="t")
    saver = cs.train.Saver(incremental=True, async_save=True)
sess = cs.Session(graph=g)
sess.run(t.initializer)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.RLIM_INFINITY))
try:
    saver.save(sess, d + "/model.ckpt", global_step=1)
    saver.wait_until_finished()
    outcome = "saved"
except errors.ResourceExhaustedError as e:
    outcome = str(e)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
saver.save(sess, d + "/model.ckpt", global_step=2)
saver.close()
print(json.dumps({"outcome": outcome, "files": sorted(os.listdir(d))}))
"""


def test_an_async_save_whose_staging_memory_cannot_grow_is_resource_exhausted(
        tmp_path: Path) -> None:
    """The trainer's shared buffer for an async save is a file (memfd): under
    RLIMIT_FSIZE its growth fails with EFBIG, which is the save's ResourceExhaustedError
    naming the checkpoint (not a bare OSError); the next save, with room, writes."""
    proc = subprocess.run([sys.executable, "-c", _STAGING_LIMITED, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["outcome"].startswith(f"Failed to stage in memory {tmp_path}/model.ckpt-1: "
                                        "File too large"), result
    assert result["files"] == ["checkpoint", "model.ckpt-2.h5"]
