"""``trainer run``: train a model file on a data set, publishing checkpoints.

Every option can also come from an environment variable ``CKPTSYNC_<OPTION>`` (e.g.
``CKPTSYNC_STEPS=500``). Exit codes: 0 done (or stopped by SIGTERM after a final
checkpoint), 1 runtime failure (NaN loss, I/O error), 2 usage error (bad flag, missing
model file or data), 130 interrupted by Ctrl-C (after a final checkpoint).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from typing import Any

import click

from ._common import (
    CONTEXT_SETTINGS,
    EXIT_RUNTIME,
    EXIT_USAGE,
    Int,
    OneLineErrorGroup,
    Real,
    fail,
    limit_blas_threads,
    setup_logging,
)
from ._common import option as _opt


@click.group(name="trainer", cls=OneLineErrorGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(package_name="ckptsync")
def main() -> None:
    """The ckptsync trainer: train a model file, publishing TF1-style checkpoints."""


@main.command("run")
@_opt("--model", "model_path", required=True, type=click.Path(dir_okay=False),
      help="Model file defining build_net(graph, device, mode) or TF1's "
           "model_fn(features, labels, mode, params).")
@_opt("--data", default="digits", show_default=True,
      help="'digits', 'mnist:DIR', 'synthetic-ctr[:rows=N,seed=S,...]' (synthetic click "
           "logs) or a FILE.npz with arrays named after the model's inputs.")
@_opt("--checkpoint-dir", required=True, type=click.Path(file_okay=False),
      help="Where checkpoints and the 'checkpoint' state file are written.")
@_opt("--device", default="cpu:0", show_default=True, help="TF device name, e.g. cpu:0.")
@_opt("--steps", default=2000, show_default=True, type=Int(min=1),
      help="Train until this global step.")
@_opt("--batch-size", default=64, show_default=True, type=Int(min=1),
      help="Rows per training step.")
@_opt("--learning-rate", type=Real(min=0, min_open=True), default=None,
      help="Passed to build_net(learning_rate=...) (a model_fn: params['learning_rate']).")
@_opt("--save-every-steps", type=Int(min=1), default=None,
      help="Checkpoint every N steps (default 100).")
@_opt("--save-every-secs", type=Real(min=0, min_open=True), default=None,
      help="Checkpoint every N seconds instead.")
@_opt("--max-to-keep", default=5, show_default=True, type=Int(min=0),
      help="Newest checkpoints to keep; 0 keeps all.")
@_opt("--seed", default=0, show_default=True, type=int, help="Graph seed and data order.")
@_opt("--resume/--no-resume", default=True, show_default=True,
      help="Continue from the latest checkpoint in --checkpoint-dir.")
@_opt("--eval-every", default=0, show_default=True, type=Int(min=0),
      help="Held-out accuracy every N steps (0: only at the end).")
@_opt("--async-save/--no-async-save", default=False, show_default=True,
      help="Write checkpoints in a background writer process; training continues once "
           "the values are copied. CKPTSYNC_WRITER_CPUS=0,2-3 pins the writer to "
           "those CPUs (default: none, where the scheduler puts it).")
@_opt("--incremental/--no-incremental", default=False, show_default=True,
      help="Incremental checkpoints: each stores only what changed since the previous "
           "one (a delta every reader composes), with a full one every "
           "--full-checkpoint-every-n and whenever a delta would be over half a full one.")
@_opt("--full-checkpoint-every-n", default=16, show_default=True, type=Int(min=1),
      help="With --incremental: every N-th checkpoint is a full one.")
@_opt("--summary-dir", type=click.Path(file_okay=False), default=None,
      help="Write TensorBoard event files here (loss, steps/s, held-out loss and accuracy, "
           "checkpoint write time, the model's tf.summary ops); open with "
           "tensorboard --logdir DIR.")
@_opt("--summary-every-steps", default=10, show_default=True, type=Int(min=1),
      help="Steps between the --summary-dir loss and model summaries.")
@_opt("--max-steps-per-s", type=Real(min=0, min_open=True), default=None,
      help="Throttle training (demos; sharing a machine).")
@_opt("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
      help="json: progress and summary as JSON lines on stdout.")
@_opt("--log-level", type=click.Choice(["debug", "info", "warning", "error"],
                                       case_sensitive=False), default="info", show_default=True,
      help="Log level (logs go to stderr).")
@_opt("--intra-op-threads", default=1, show_default=True, type=Int(min=1),
      help="BLAS threads for numpy.")
def run(**kw: Any) -> None:
    """Train --model on --data, writing checkpoints to --checkpoint-dir.

    Under mpiexec, one rank per process: rank 0 restores, checkpoints and reports; a rank
    that fails ends the whole job with its exit code.
    """
    from ckptsync import distributed  # deferred: --help starts without numpy
    from ckptsync.errors import CkptsyncError  # deferred: as above

    with distributed.failure_ends_job():
        try:
            chief = distributed.rank() == 0
        except CkptsyncError as e:  # launched by mpiexec without the MPI extra
            fail(str(e), EXIT_RUNTIME)
        _run(chief, **kw)


def _run(chief: bool, **kw: Any) -> None:
    from ckptsync.app import TrainerOptions, run_training  # deferred: start-up time
    from ckptsync.data import DataError  # deferred: start-up time
    from ckptsync.errors import CkptsyncError, CkptsyncValueError  # deferred: as above
    from ckptsync.model_spec import ModelFileError  # deferred: as above
    from ckptsync.train.basic_hooks import NanLossDuringTrainingError  # deferred: as above
    from ckptsync.workers.placement import check_setting as check_writer_cpus  # as above

    log_format = kw.pop("log_format")
    log_level = kw.pop("log_level")
    setup_logging(log_level if chief else "warning", log_format)
    limit_blas_threads(kw.pop("intra_op_threads"))
    if kw["save_every_steps"] is not None and kw["save_every_secs"] is not None:
        fail("--save-every-steps and --save-every-secs are mutually exclusive; pass one "
             "(they may also come from CKPTSYNC_SAVE_EVERY_STEPS / CKPTSYNC_SAVE_EVERY_SECS).",
             EXIT_USAGE)
    try:
        opts = TrainerOptions(**kw)
        if opts.async_save:
            check_writer_cpus()  # CKPTSYNC_WRITER_CPUS, before any work
    except CkptsyncValueError as e:
        fail(str(e), EXIT_USAGE)
    created_dir = not os.path.isdir(opts.checkpoint_dir)
    try:
        os.makedirs(opts.checkpoint_dir, exist_ok=True)
    except OSError as e:
        fail(f"cannot create --checkpoint-dir {opts.checkpoint_dir}: {e.strerror}", EXIT_RUNTIME)

    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        received.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    report = _Reporter(opts.steps, log_format, opts.incremental)
    try:
        summary = run_training(opts, on_progress=report if chief else None, stop_event=stop)
    except (ModelFileError, DataError) as e:
        report.close()
        if created_dir:  # refused before the first step: leave no empty directory behind
            with contextlib.suppress(OSError):
                os.rmdir(opts.checkpoint_dir)
        fail(str(e), EXIT_USAGE)
    except NanLossDuringTrainingError as e:
        report.close()
        fail(f"{e} Training stopped; no checkpoint was written for the diverged model.",
             EXIT_RUNTIME)
    except (CkptsyncError, OSError, ImportError) as e:  # ImportError: --summary-dir, no tensorboard
        report.close()
        fail(str(e), EXIT_RUNTIME)
    report.close()
    if not chief:
        return
    if summary.stopped_by_signal:
        name = "SIGINT" if received and received[-1] == signal.SIGINT else "SIGTERM"
        click.echo(f"interrupted by {name}: saved a final checkpoint at step "
                   f"{summary.global_step}", err=True)
    result = {
        "event": "summary", "global_step": summary.global_step, "steps_run": summary.steps_run,
        "final_loss": summary.final_loss, "held_out_accuracy": summary.held_out_accuracy,
        "checkpoints_written": summary.checkpoints_written,
        "last_checkpoint": summary.last_checkpoint, "restored_from": summary.restored_from,
        "held_out_loss": summary.held_out_loss, "ranks": summary.ranks,
        "global_batch_size": summary.global_batch_size,
        "held_out_metrics": summary.held_out_metrics,
    }
    if log_format == "json":
        click.echo(json.dumps(result))
    else:
        loss = "n/a" if summary.final_loss is None else f"{summary.final_loss:.4f}"
        held = "n/a" if summary.held_out_loss is None else f"{summary.held_out_loss:.4f}"
        acc = "" if summary.held_out_accuracy is None else \
            f", held-out accuracy {summary.held_out_accuracy:.4f}"
        acc += _metrics_text(summary.held_out_metrics, ", held-out metrics ")
        ranks = "" if summary.ranks == 1 else (
            f" on {summary.ranks} ranks (global batch {summary.global_batch_size} = "
            f"{summary.ranks} x {summary.global_batch_size // summary.ranks})")
        click.echo(f"done: global step {summary.global_step} ({summary.steps_run} steps this run"
                   f"{ranks}), final loss {loss}, held-out loss {held}{acc}, "
                   f"{summary.checkpoints_written} checkpoint"
                   f"{'' if summary.checkpoints_written == 1 else 's'} written (the one at session "
                   f"start included, as TF1's CheckpointSaverHook), last "
                   f"{summary.last_checkpoint}")
    if received and received[-1] == signal.SIGINT:
        sys.exit(130)


def _metrics_text(metrics: dict[str, Any], prefix: str) -> str:
    """``prefix + "accuracy 0.9712, auc 0.99"`` (a model_fn's eval_metric_ops), or ""."""
    if not metrics:
        return ""
    return prefix + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                              for k, v in metrics.items())


def _size(nbytes: int) -> str:
    """``6.8 KiB``, ``256.0 MiB``: a file size for people."""
    size, unit = float(nbytes), "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            break
        size /= 1024
    return f"{nbytes} bytes" if unit == "bytes" else f"{size:.1f} {unit}"


class _Reporter:
    """A progress bar on a terminal; a line per second otherwise (JSON with --log-format json)."""

    def __init__(self, total: int, fmt: str, per_checkpoint: bool = False):
        self._fmt = fmt
        self._per_checkpoint = per_checkpoint  # a line per checkpoint: kind and bytes
        self._tty = sys.stderr.isatty() and fmt == "text"
        self._bar: Any = None
        self._total = total
        self._last_line = 0.0
        self._shown = 0
        self._last_kind = ""  # " (delta, 6.8 KiB)": the last checkpoint written
        self._plain_fulls = 0  # consecutive full checkpoints naming no parent

    def _note_kind(self, c: Any) -> None:
        """Says once why an incremental run writes no deltas: a full checkpoint naming no
        parent (every variable changed as a whole) twice in a row (not a restart's
        first)."""
        plain = c.kind == "full" and c.parent is None
        self._plain_fulls = self._plain_fulls + 1 if plain else 0
        if self._plain_fulls == 2:
            click.echo(
                "trainer: note: --incremental wrote a full checkpoint again: every variable "
                "changed as a whole since the last one (a dense model, or an optimizer such "
                "as Adam, which as TF1's moves every row of an embedding each step); deltas "
                "need updates of some rows only (GradientDescent, Momentum, Adagrad, Ftrl, "
                "RMSProp, Adadelta on embedding lookups)", err=True)

    def __call__(self, p: Any) -> None:
        if self._tty:
            if self._bar is None:
                self._bar = click.progressbar(length=self._total, file=sys.stderr,
                                              label="training", show_pos=True,
                                              item_show_func=lambda s: s)
                self._bar.__enter__()
                self._shown = p.step - 1
            sps = f"{p.steps_per_s:.0f}" if p.steps_per_s else "-"
            ck = os.path.basename(p.last_checkpoint) if p.last_checkpoint else "-"
            if p.checkpoint is not None and self._per_checkpoint:
                self._last_kind = f" ({p.checkpoint.kind}, {_size(p.checkpoint.nbytes)})"
                self._note_kind(p.checkpoint)
            ck += self._last_kind if p.last_checkpoint else ""
            if p.queued_checkpoints:
                ck += f" (+{len(p.queued_checkpoints)} queued)"
            self._bar.update(max(0, p.step - self._shown), f"loss {p.loss:.4f} {sps} steps/s {ck}")
            self._shown = p.step
            return
        c = p.checkpoint
        if c is not None and self._per_checkpoint:  # a line per checkpoint, unthrottled
            self._last_kind = f" ({c.kind}, {_size(c.nbytes)})"
            self._note_kind(c)
            if self._fmt == "json":
                click.echo(json.dumps({"event": "checkpoint", "step": p.step, "path": c.path,
                                       "kind": c.kind, "bytes": c.nbytes}))
            else:
                click.echo(f"checkpoint {c.path}: {c.kind}, {c.nbytes} bytes", err=True)
        now = time.monotonic()
        interval = 0.25 if self._fmt == "json" else 1.0
        evaluated = p.eval_accuracy is not None or p.eval_loss is not None
        if now - self._last_line < interval and p.step < p.last_step and not evaluated:
            return
        self._last_line = now
        rec = {"event": "progress", "step": p.step, "loss": round(p.loss, 6),
               "steps_per_s": None if p.steps_per_s is None else round(p.steps_per_s, 1),
               "last_checkpoint": p.last_checkpoint, "eval_accuracy": p.eval_accuracy,
               "eval_loss": p.eval_loss, "queued_checkpoints": list(p.queued_checkpoints),
               "eval_metrics": p.eval_metrics}
        if self._fmt == "json":
            click.echo(json.dumps(rec))
        else:
            sps = f"{p.steps_per_s:.0f} steps/s" if p.steps_per_s else "starting"
            queued = "" if not p.queued_checkpoints else (
                f" (queued, not yet on disk: {', '.join(p.queued_checkpoints)})")
            extra = "" if p.eval_loss is None else f" held-out loss {p.eval_loss:.4f}"
            if p.eval_accuracy is not None:
                extra += f" held-out accuracy {p.eval_accuracy:.4f}"
            extra += _metrics_text(p.eval_metrics or {}, " held-out metrics ")
            last = f"{p.last_checkpoint}{self._last_kind}" if p.last_checkpoint else "-"
            click.echo(f"step {p.step}/{p.last_step} loss {p.loss:.4f} {sps}, last "
                       f"checkpoint {last}{queued}{extra}", err=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None


if __name__ == "__main__":
    main(prog_name="trainer")
