"""`trainer run --summary-dir`: a real trainer process writes event files that
TensorBoard's own EventAccumulator reads."""

from __future__ import annotations

import subprocess

import pytest

from .conftest import MODEL, cli, env

EventAccumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator").EventAccumulator


_MODEL_WITH_SUMMARIES = """
import importlib.util
import ckptsync as cs
spec_ = importlib.util.spec_from_file_location("digits_mlp", {model!r})
base = importlib.util.module_from_spec(spec_)
spec_.loader.exec_module(base)

def build_net(graph, device, mode):
    spec = base.build_net(graph, device, mode)
    if spec.loss is not None:
        with graph.as_default():
            cs.summary.scalar("model/loss", spec.loss)
    return spec
"""


def test_trainer_writes_loss_speed_held_out_and_checkpoint_time(tmp_path):
    logdir = tmp_path / "logs" / "train"
    model = tmp_path / "with_summaries.py"  # the digits MLP and a summary of its own
    model.write_text(_MODEL_WITH_SUMMARIES.format(model=str(MODEL)))
    r = subprocess.run(cli("trainer", "run", "--model", str(model), "--checkpoint-dir",
                           str(tmp_path / "c"), "--steps", "60", "--eval-every", "20",
                           "--save-every-steps", "20", "--summary-dir", str(logdir),
                           "--summary-every-steps", "10"),
                       env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    tags = acc.Tags()
    assert {"loss", "global_step/sec", "held_out/loss", "held_out/accuracy",
            "checkpoint/write_secs"} <= set(tags["scalars"])
    assert tags["graph"]
    # The trainer's scalars at the steps of the model's own summaries (TF1's
    # SummarySaverHook: the first step, then every 10), and at the last step.
    assert [e.step for e in acc.Scalars("model/loss")] == [1, 11, 21, 31, 41, 51]
    assert [e.step for e in acc.Scalars("loss")] == [1, 11, 21, 31, 41, 51, 60]
    assert all(e.value > 0 for e in acc.Scalars("global_step/sec"))
    # Evaluated at 20, 40, 60; the end (step 60) had its figures already: written once.
    assert [e.step for e in acc.Scalars("held_out/accuracy")] == [20, 40, 60]
    assert [e.step for e in acc.Scalars("held_out/loss")] == [20, 40, 60]
    assert 0.0 <= acc.Scalars("held_out/accuracy")[-1].value <= 1.0
    assert [e.step for e in acc.Scalars("checkpoint/write_secs")] == [0, 20, 40, 60]
    assert all(e.value >= 0 for e in acc.Scalars("checkpoint/write_secs"))


def test_trainer_summary_dir_that_is_a_file_fails_cleanly(tmp_path):
    bad = tmp_path / "file"
    bad.write_text("x")
    r = subprocess.run(cli("trainer", "run", "--model", MODEL, "--checkpoint-dir",
                           str(tmp_path / "c"), "--steps", "5", "--summary-dir", str(bad)),
                       env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr


def test_demo_writes_trainer_and_server_summaries(tmp_path):
    tb = tmp_path / "tb"
    r = subprocess.run(
        cli("main", "demo", "--steps", "200", "--save-every-steps", "50", "--max-steps-per-s",
            "200", "--interval-s", "0.25", "--checkpoint-dir", str(tmp_path / "ckpts"),
            "--summary-dir", str(tb)),
        env=env(), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"tensorboard --logdir {tb}" in r.stdout
    train, serve = EventAccumulator(str(tb / "train")), EventAccumulator(str(tb / "serve"))
    train.Reload()
    serve.Reload()
    assert train.Scalars("loss")[-1].step == 200
    assert max(e.value for e in serve.Scalars("serving/version")) == 200
    assert max(e.value for e in serve.Scalars("serving/requests_per_sec")) > 0


def test_trainer_survives_its_summary_dir_being_deleted(tmp_path):
    # As TF's EventsWriter: the event file gone (its directory deleted mid-run), the next
    # write makes the directory and a new file; training goes on to its final checkpoint.
    import shutil
    import threading

    logdir, ckpts = tmp_path / "sd" / "train", tmp_path / "c"
    proc = subprocess.Popen(
        cli("trainer", "run", "--model", MODEL, "--checkpoint-dir", str(ckpts), "--steps",
            "300", "--save-every-steps", "50", "--summary-dir", str(logdir),
            "--summary-every-steps", "5", "--max-steps-per-s", "40"),
        env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first_progress = threading.Event()
    lines: list[str] = []

    def read_stderr() -> None:  # the progress lines
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("step "):
                first_progress.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert first_progress.wait(timeout=120), "no progress line"
        old = sorted(logdir.glob("events.out.tfevents.*"))
        assert old, "no event file while training"
        shutil.rmtree(tmp_path / "sd")
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    reader.join(timeout=30)
    err = "".join(lines)
    assert proc.returncode == 0, err
    # No traceback: the writer thread that found its file gone (when it flushed first)
    # is a one-line warning, as the writer's own renewal is.
    assert "Traceback" not in err and "Exception in thread" not in err, err
    assert "done: global step 300" in out
    assert (ckpts / "model.ckpt-300.h5").exists()
    new = sorted(logdir.glob("events.out.tfevents.*"))
    assert new and not set(new) & set(old)
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    assert acc.Scalars("loss")[-1].step == 300
