"""``ckptsync demo``: the main job end to end on one machine.

Starts ``trainer run`` and ``infer serve`` of a model file (``--model``; default the
bundled digits MLP, ``examples/digits_mlp.py``) as two OS processes on one fresh checkpoint
directory, asks the server for the held-out rows every ``--interval-s`` seconds, and
prints a live table of the trainer's step, the served version and the served metric:
accuracy for a digits classifier, ROC AUC for a binary model (an output ``logistic``,
e.g. ``examples/ctr_embedding.py`` on ``synthetic-ctr``). Each checkpoint the server
starts serving gets a line with its bytes and its publish-to-served time (``_demo_probe``).
Exits 0 only if the served metric rose, every request after the first checkpoint was
answered 200, and both processes ended cleanly.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import click

from ._common import Int, Real
from ._demo_probe import CheckpointSync, SyncProbe, demo_task

START_TIMEOUT_S = 90.0

#: ``--steps``, ``--save-every-steps``, ``--max-steps-per-s`` by metric when not given:
#: the CTR model's full checkpoints are 512 MB (table and Adagrad accumulator), so
#: without ``--incremental`` it saves less often.
DEFAULTS = {"accuracy": (1500, 50, 100.0), "auc": (1000, 100, 50.0)}
INCREMENTAL_SAVE_EVERY = {"auc": 10}


@dataclass
class _TrainerWatch:
    """Follows the trainer's JSON progress lines on its stdout."""

    step: int = 0
    summary: dict[str, Any] | None = None
    lines: list[str] = field(default_factory=list)

    def follow(self, stream: Any) -> None:
        for line in stream:
            self.lines.append(line)
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("event") in ("progress", "checkpoint"):  # whichever is newer
                self.step = max(self.step, int(rec["step"]))
            elif rec.get("event") == "summary":
                self.summary = rec
                self.step = int(rec["global_step"])


def _model_file(path: str | None) -> str:
    if path is not None:
        return os.path.abspath(path)
    return str(importlib.resources.files("ckptsync.examples") / "digits_mlp.py")


def _summary_dirs(summary_dir: str | None, work: str) -> tuple[str | None, dict[str, list[str]]]:
    """Where both processes write TensorBoard files, and their flags; none (with a note)
    when the tensorboard package is not installed."""
    import importlib.util  # deferred: as the other imports of the demo

    if importlib.util.find_spec("tensorboard") is None:
        click.echo("tensorboard: not installed (pip install 'ckptsync[tensorboard]'); "
                   "no summaries")
        return None, {"train": [], "serve": []}
    root = summary_dir or os.path.join(work, "tensorboard")
    return root, {run: ["--summary-dir", os.path.join(root, run)] for run in ("train", "serve")}


def _wait_port(port_file: str, proc: subprocess.Popen[Any], timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise click.ClickException(f"infer serve exited early with code {proc.returncode}")
        try:
            with open(port_file) as f:
                text = f.read().strip()
            if text:
                return int(text)
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise click.ClickException(f"infer serve did not start within {timeout_s:.0f} s")


def _stop(proc: subprocess.Popen[Any] | None, timeout_s: float = 20.0) -> int | None:
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


@click.command("demo")
@click.option("--model", "model_path", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="A model file (build_net over the digits' x [batch, 64], or a binary "
                   "model such as examples/ctr_embedding.py), e.g. examples/digits_cnn.py; "
                   "default: the bundled digits MLP.")
@click.option("--data", default=None,
              help="The trainer's --data; default: synthetic-ctr for a model with inputs "
                   "user_id and item_id, else digits.")
@click.option("--steps", default=None, type=Int(min=1),
              help="Train until this step [default: 1500; 1000 for a binary model].")
@click.option("--save-every-steps", default=None, type=Int(min=1),
              help="[default: 50; for a binary model 100, 10 with --incremental].")
@click.option("--max-steps-per-s", default=None, type=Real(min=0, min_open=True),
              help="Trainer throttle, so the served version visibly follows it "
                   "[default: 100; 50 for a binary model].")
@click.option("--incremental", is_flag=True,
              help="The trainer writes incremental checkpoints (trainer run --incremental).")
@click.option("--interval-s", default=0.5, show_default=True,
              type=Real(min=0.05), help="How often to query the server.")
@click.option("--checkpoint-dir", default=None, type=click.Path(file_okay=False),
              help="A fresh (empty or missing) directory; default: a temporary one.")
@click.option("--keep", is_flag=True, help="Keep the checkpoint directory and logs.")
@click.option("--summary-dir", default=None, type=click.Path(file_okay=False),
              help="TensorBoard event files of both processes go to DIR/train and DIR/serve "
                   "(default: the work directory's tensorboard/, kept with --keep); open "
                   "them with tensorboard --logdir DIR.")
@click.option("--timeout-s", default=600.0, show_default=True,
              type=Real(min=1), help="Give up after this long.")
def demo(model_path: str | None, data: str | None, steps: int | None,
         save_every_steps: int | None, max_steps_per_s: float | None, incremental: bool,
         interval_s: float, checkpoint_dir: str | None, keep: bool, summary_dir: str | None,
         timeout_s: float) -> None:
    """Train and serve a model (default the digits MLP) side by side; show the served
    version improving and, per checkpoint, its bytes and publish-to-served time."""
    # Deferred: `ckptsync --help` and the other commands start without these.
    import httpx

    from ckptsync.errors import CkptsyncError  # deferred: as above

    if checkpoint_dir is not None and os.path.isdir(checkpoint_dir) and os.listdir(checkpoint_dir):
        raise click.UsageError(f"--checkpoint-dir {checkpoint_dir} is not empty; the demo needs a "
                               "fresh directory.")
    server: subprocess.Popen[Any] | None = None
    trainer: subprocess.Popen[Any] | None = None
    watch = _TrainerWatch()
    failures: list[str] = []
    accs: list[float] = []
    probe: SyncProbe | None = None
    ok = interrupted = False
    work = tempfile.mkdtemp(prefix="ckptsync-demo-")
    logs: list[Any] = []
    try:
        ckpt_dir = checkpoint_dir or os.path.join(work, "ckpts")
        os.makedirs(ckpt_dir, exist_ok=True)
        port_file = os.path.join(work, "port")
        model = _model_file(model_path)
        click.echo(f"checkpoints: {ckpt_dir}\nmodel: {model}")
        try:
            task = demo_task(model, data)
        except CkptsyncError as e:
            raise click.UsageError(str(e)) from None
        d_steps, d_save, d_rate = DEFAULTS[task.metric]
        if incremental:
            d_save = INCREMENTAL_SAVE_EVERY.get(task.metric, d_save)
        steps = steps or d_steps
        save_every_steps = save_every_steps or d_save
        max_steps_per_s = max_steps_per_s or d_rate
        metric = "accuracy" if task.metric == "accuracy" else "AUC"
        click.echo(f"data: {task.data}, held-out rows: {task.rows}, served metric: {metric}")
        if task.metric == "auc":  # what a user should expect to see
            click.echo("  (ROC AUC: 0.5 is chance; the generator's hidden model scores about "
                       "0.88, so a demo-length run rising to about 0.6 is learning)")
        tb_dir, tb_flags = _summary_dirs(summary_dir, work)
        if tb_dir and (keep or summary_dir):
            click.echo(f"tensorboard: tensorboard --logdir {tb_dir}")
        elif tb_dir:  # in the work directory, which goes at exit
            click.echo(f"tensorboard: summaries in {tb_dir}, removed at exit (keep them with "
                       "--keep, or write them elsewhere with --summary-dir DIR)")
        server_log = open(os.path.join(work, "server.log"), "w")
        logs.append(server_log)
        trainer_log = open(os.path.join(work, "trainer.log"), "w")
        logs.append(trainer_log)
        server = subprocess.Popen(
            [sys.executable, "-m", "ckptsync.cli.infer", "serve", "--grpc-port", "0", "--model", model,
             "--checkpoint-dir", ckpt_dir, "--device", "cpu:1", "--port", "0",
             "--port-file", port_file, "--model-name", task.model_name, *tb_flags["serve"]],
            stdout=server_log, stderr=subprocess.STDOUT)
        trainer = subprocess.Popen(
            [sys.executable, "-m", "ckptsync.cli.trainer", "run", "--model", model,
             "--data", task.data, "--checkpoint-dir", ckpt_dir, "--device", "cpu:0",
             "--steps", str(steps), "--save-every-steps", str(save_every_steps),
             "--max-steps-per-s", str(max_steps_per_s), "--log-format", "json",
             *(["--incremental"] if incremental else []), *tb_flags["train"]],
            stdout=subprocess.PIPE, stderr=trainer_log, text=True)
        reader = threading.Thread(target=watch.follow, args=(trainer.stdout,), daemon=True)
        reader.start()
        port = _wait_port(port_file, server, START_TIMEOUT_S)
        url = f"http://127.0.0.1:{port}/v1/models/{task.model_name}:predict"
        click.echo(f"server: http://127.0.0.1:{port}/v1/models/{task.model_name}\n")
        probe = SyncProbe(ckpt_dir, url, task.probe_body)
        probe.start()
        click.echo(f"{'time_s':>7}  {'trainer step':>12}  {'served version':>14}  "
                   f"{'served ' + metric:>15}")
        t0 = time.monotonic()
        final_step: int | None = None
        last_version = None
        with httpx.Client(timeout=30.0) as client:
            while time.monotonic() - t0 < timeout_s:
                tick = time.monotonic()
                for sync in probe.take_new():
                    click.echo(_sync_line(sync))
                try:
                    r = client.post(url, json=task.body)
                except httpx.HTTPError as e:
                    failures.append(f"request error: {e}")
                    r = None
                if r is not None and r.status_code == 200:
                    out = r.json()
                    acc = task.score(out)
                    accs.append(acc)
                    last_version = int(out["model_version"])
                    click.echo(f"{tick - t0:7.1f}  {watch.step:12d}  {last_version:14d}  "
                               f"{acc:15.4f}")
                elif r is not None:
                    if accs or r.status_code != 503:
                        failures.append(f"HTTP {r.status_code}: {r.text[:200]}")
                    click.echo(f"{tick - t0:7.1f}  {watch.step:12d}  {'-':>14}  "
                               f"{'(no checkpoint yet)' if r.status_code == 503 else r.status_code:>15}")
                if trainer.poll() is not None and final_step is None:
                    reader.join(5)
                    if trainer.returncode != 0:
                        failures.append(f"trainer exited with code {trainer.returncode}")
                        break
                    final_step = watch.step
                if final_step is not None and last_version == final_step:
                    break
                time.sleep(max(0.0, interval_s - (time.monotonic() - tick)))
            else:
                failures.append(f"timed out after {timeout_s:.0f} s")
        probe.stop()
        for sync in probe.take_new():
            click.echo(_sync_line(sync))
        rc = _stop(server)
        server = None
        if rc != 0:
            failures.append(f"infer serve exited with code {rc}")
        rose = len(accs) >= 2 and accs[-1] > accs[0]
        click.echo("")
        if accs:
            click.echo(f"served {metric}: first {accs[0]:.4f} -> last {accs[-1]:.4f} "
                       f"({len(accs)} answers, {len(failures)} failures)")
        click.echo(_sync_summary(probe.records()))
        if watch.summary:
            held_out = watch.summary.get("held_out_accuracy") if task.metric == "accuracy" \
                else (watch.summary.get("held_out_metrics") or {}).get("auc")
            acc_text = (f"{held_out:.4f}" if isinstance(held_out, (int, float))
                        else str(held_out))
            click.echo(f"trainer: {watch.summary.get('checkpoints_written')} checkpoints, "
                       f"held-out {metric} {acc_text}")
        for f in failures:
            click.echo(f"failure: {f}", err=True)
        ok = rose and not failures
        if not rose:
            click.echo(f"failure: the served {metric} did not rise", err=True)
    except KeyboardInterrupt:  # Ctrl-C: stop both, keep nothing unless --keep
        interrupted = True
        raise
    finally:
        # A second Ctrl-C must not cut the clean-up short (each stop is bounded).
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if probe is not None:
                probe.stop()
            _stop(trainer)
            _stop(server)
            for f in logs:
                f.close()
            if keep or not (ok or interrupted):
                click.echo(f"logs kept in {work}", err=not ok)
            else:
                shutil.rmtree(work, ignore_errors=True)
        finally:
            signal.signal(signal.SIGINT, previous)
    sys.exit(0 if ok else 1)


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


def _sync_line(sync: CheckpointSync) -> str:
    """``  checkpoint 120 (delta): 1.4 MB, publish -> served 31 ms`` (or ``not served
    ...`` for one the server went past)."""
    lag = sync.publish_to_served_s
    if sync.served_s is None:  # the server went straight to a newer one
        lag_text = "not served (a newer one was ready first)"
    else:
        lag_text = "publish -> served " + ("?" if lag is None else f"{lag * 1e3:.0f} ms")
    return (f"  checkpoint {sync.version} ({sync.kind or '?'}): {_size(sync.bytes)}, "
            f"{lag_text}")


def _sync_summary(records: list[CheckpointSync]) -> str:
    """How many checkpoints were published and served, their median bytes and the
    publish-to-served p50/max."""
    published = [r for r in records if r.published_s is not None]
    lags = sorted(lag for r in records if (lag := r.publish_to_served_s) is not None)
    sizes = sorted(r.bytes for r in published if r.bytes is not None)
    deltas = sum(r.kind == "delta" for r in published)
    text = (f"sync: {len(published)} checkpoints published"
            f"{f' ({deltas} deltas)' if deltas else ''}, "
            f"{sum(r.served_s is not None for r in records)} served")
    if sizes:
        text += f", median {_size(sizes[len(sizes) // 2])} (first {_size(published[0].bytes)})"
    if lags:
        text += (f", publish -> served p50 {lags[len(lags) // 2] * 1e3:.0f} ms, "
                 f"max {lags[-1] * 1e3:.0f} ms")
    return text
