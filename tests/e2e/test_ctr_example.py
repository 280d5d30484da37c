"""examples/ctr_embedding.py: a 1,000,000 x 64 embedding table trained sparsely with
Adagrad on ``--data synthetic-ctr``; its held-out AUC rises in a short run."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tracemalloc

import numpy as np

import ckptsync as cs
from ckptsync.data import BatchIterator, load_dataset

from .conftest import REPO, cli, env

CTR_MODEL = str(REPO / "examples" / "ctr_embedding.py")
DATA = "synthetic-ctr:rows=100000"
TABLE_BYTES = 1_000_000 * 64 * 4


def _example():
    spec = importlib.util.spec_from_file_location("ctr_embedding_example", CTR_MODEL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_training_step_touches_only_the_looked_up_rows():
    """Sparse Adagrad: a step allocates far less than the table (no dense gradient, no
    copy of the table or its accumulator) and changes only the rows it looked up."""
    m = _example()
    graph = cs.Graph()
    spec = m.build_net(graph, "/cpu:0", cs.ModeKeys.TRAIN)
    with graph.as_default():
        init = cs.global_variables_initializer()
        table = next(v for v in cs.global_variables() if v.op.name == "embedding/table")
        accum = next(v for v in cs.global_variables() if v.op.name == "embedding/table/Adagrad")
    data = load_dataset(DATA, ("user_id", "item_id"), ("click",))
    batches = BatchIterator(data.train, 256, seed=0)
    feeds = {**spec.inputs, **spec.labels}
    with cs.Session(graph=graph) as sess:
        sess.run(init)
        sess.run(spec.train_op, {feeds[k]: v for k, v in next(batches).items()})  # plan once
        # Copies: a fetched array the caller keeps is never changed, so holding the
        # session's own arrays would make the step copy them.
        before_t, before_a = (a.copy() for a in sess.run([table, accum]))
        batch = next(batches)
        tracemalloc.start()
        try:
            sess.run(spec.train_op, {feeds[k]: v for k, v in batch.items()})
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        after_t, after_a = sess.run([table, accum])
    assert peak < TABLE_BYTES / 50, f"one step allocated {peak} bytes at its peak"
    looked_up = np.union1d(batch["user_id"], batch["item_id"])
    changed_t = np.flatnonzero(np.any(after_t != before_t, axis=1))
    changed_a = np.flatnonzero(np.any(after_a != before_a, axis=1))
    assert set(changed_t) <= set(looked_up) and set(changed_a) == set(looked_up)
    assert len(changed_t) > 0.9 * len(looked_up)


def test_the_script_trains_and_the_held_out_auc_rises(tmp_path):
    proc = subprocess.run(
        [sys.executable, CTR_MODEL, "--checkpoint-dir", str(tmp_path / "ckpts"), "--steps",
         "200", "--save-every-steps", "1000", "--data", DATA],
        env=env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["global_step"] == 200
    assert abs(out["held_out_auc_first"] - 0.5) < 0.05
    assert out["held_out_auc_last"] > out["held_out_auc_first"] + 0.03
    assert cs.train.latest_checkpoint(str(tmp_path / "ckpts")).endswith("model.ckpt-200")


def test_trainer_run_reports_the_held_out_auc_rising(tmp_path):
    proc = subprocess.run(
        cli("trainer", "run", "--model", CTR_MODEL, "--data", DATA, "--checkpoint-dir",
            str(tmp_path / "ckpts"), "--steps", "200", "--batch-size", "256",
            "--save-every-steps", "1000", "--eval-every", "50", "--max-to-keep", "1",
            "--log-format", "json"),
        env=env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    aucs = [r["eval_metrics"]["auc"] for r in records
            if r["event"] == "progress" and r["eval_metrics"]]
    assert len(aucs) >= 4 and aucs[-1] > aucs[0] + 0.02
    summary = records[-1]
    assert summary["event"] == "summary" and summary["global_step"] == 200
    assert summary["held_out_metrics"]["auc"] == aucs[-1]
    assert summary["held_out_accuracy"] is None  # two inputs: not a classifier
    assert 0.0 < summary["held_out_loss"] < 0.7


def _demo(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        cli("main", "demo", "--model", CTR_MODEL, "--data", DATA, "--steps", "200",
            "--max-steps-per-s", "100", "--interval-s", "0.25", "--checkpoint-dir",
            str(tmp_path / "ckpts"), *extra),
        env=env(), capture_output=True, text=True, timeout=240)


def _served_auc(stdout: str) -> tuple[float, float]:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("served AUC"))
    assert "0 failures" in line, line
    first, last = (float(t) for t in line.split("first ")[1].split(" (")[0].split(" -> last "))
    return first, last


def test_the_incremental_demo_shows_the_served_auc_rising_and_each_checkpoints_bytes(tmp_path):
    r = _demo(tmp_path, "--incremental", "--save-every-steps", "10")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "data: synthetic-ctr:rows=100000, held-out rows: 4000, served metric: AUC" in r.stdout
    first, last = _served_auc(r.stdout)
    assert last > first + 0.02
    # Every checkpoint served gets its line: kind, bytes, publish -> served.
    served = _checkpoint_lines(r.stdout)
    assert served[0][:2] == (0, "full") and served[-1][0] == 200
    full = [size for _, kind, size in served if kind == "full"]
    deltas = [size for _, kind, size in served if kind == "delta"]
    assert all(size >= 2 * TABLE_BYTES for size in full)  # table and Adagrad accumulator
    assert deltas and max(deltas) < TABLE_BYTES / 50
    summary = next(ln for ln in r.stdout.splitlines() if ln.startswith("sync: "))
    assert summary.startswith("sync: 21 checkpoints published (") and " deltas), " in summary
    assert "publish -> served p50" in summary


def _checkpoint_lines(stdout: str) -> list[tuple[int, str, float]]:
    """(version, kind, bytes) of each ``  checkpoint N (kind): X MB, publish -> served
    T ms`` line; the lines of checkpoints the server went past (``not served``) only
    precede a served one's."""
    pattern = re.compile(r"  checkpoint (\d+) \((full|delta)\): ([\d.]+) (MB|kB), "
                         r"(publish -> served \d+ ms|not served \(a newer one was ready "
                         r"first\))")
    lines = [ln for ln in stdout.splitlines() if ln.startswith("  checkpoint ")]
    found = [pattern.fullmatch(ln) for ln in lines]
    assert all(found), lines
    assert "not served" not in lines[-1], lines
    return [(int(m[1]), m[2], float(m[3]) * (1e6 if m[4] == "MB" else 1e3))
            for m in found if m is not None and m[5].startswith("publish")]
