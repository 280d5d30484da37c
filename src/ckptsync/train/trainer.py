"""The training loop behind ``trainer run``: a model file, a data set, a checkpoint
directory, and TF1's monitored session with the standard hooks.

The loop is deterministic given ``seed``: the graph seed fixes initial values and the
:class:`~ckptsync.data.BatchIterator` fixes the data order. Each checkpoint records the
iterator's position in its metadata, so a restarted trainer resumes with the same
global step *and* the same next batch.

Thread-safety: ``run_training`` runs in the calling thread; ``stop_event`` may be set from
any thread (or a signal handler) to stop after the current step, save and return.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import checkpoint as ckpt
from ..data import BatchIterator, DataError, load_dataset
from ..device import canonical_device
from ..errors import CkptsyncValueError, InvalidArgumentError, OpError
from ..graph import Graph, GraphKeys
from ..model_spec import ModeKeys, ModelFileError, load_build_net
from ..ops.random_ops import set_random_seed
from .basic_hooks import (
    CheckpointSaverHook,
    NanLossDuringTrainingError,
    NanTensorHook,
    StopAtStepHook,
)
from .monitored_session import ChiefSessionCreator, MonitoredSession, Scaffold
from .saver import Saver
from .session_run_hook import SessionRunArgs, SessionRunContext, SessionRunHook, SessionRunValues
from .training_util import get_global_step

__all__ = ["TrainerOptions", "TrainingSummary", "Progress", "run_training"]

log = logging.getLogger("ckptsync.trainer")
EVAL_BATCH = 4096


@dataclass(frozen=True)
class TrainerOptions:
    """Options of one training run; validated on construction.

    Raises:
        ValueError: a value out of range, or both ``save_every_steps`` and
            ``save_every_secs`` (the message names both).
    """

    model_path: str
    checkpoint_dir: str
    data: str = "digits"
    device: str = "cpu:0"
    steps: int = 2000
    batch_size: int = 64
    learning_rate: float | None = None
    save_every_steps: int | None = None
    save_every_secs: float | None = None
    max_to_keep: int = 5
    seed: int = 0
    resume: bool = True
    eval_every: int = 0
    max_steps_per_s: float | None = None
    async_save: bool = False

    def __post_init__(self) -> None:
        if self.steps <= 0:
            raise CkptsyncValueError(f"steps must be > 0, got {self.steps}.")
        if self.batch_size <= 0:
            raise CkptsyncValueError(f"batch_size must be > 0, got {self.batch_size}.")
        if self.save_every_steps is not None and self.save_every_secs is not None:
            raise CkptsyncValueError(
                "save_every_steps and save_every_secs are mutually exclusive; give one "
                f"(got save_every_steps={self.save_every_steps}, "
                f"save_every_secs={self.save_every_secs}).")
        if self.save_every_steps is not None and self.save_every_steps <= 0:
            raise CkptsyncValueError(f"save_every_steps must be > 0, got {self.save_every_steps}.")
        if self.save_every_secs is not None and not self.save_every_secs > 0:
            raise CkptsyncValueError(f"save_every_secs must be > 0, got {self.save_every_secs}.")
        if self.max_to_keep < 0:
            raise CkptsyncValueError(f"max_to_keep must be >= 0, got {self.max_to_keep}.")
        if self.learning_rate is not None and not (self.learning_rate > 0
                                                   and math.isfinite(self.learning_rate)):
            raise CkptsyncValueError(f"learning_rate must be > 0, got {self.learning_rate}.")
        if self.eval_every < 0:
            raise CkptsyncValueError(f"eval_every must be >= 0, got {self.eval_every}.")
        if self.max_steps_per_s is not None and not self.max_steps_per_s > 0:
            raise CkptsyncValueError(f"max_steps_per_s must be > 0, got {self.max_steps_per_s}.")
        canonical_device(self.device)

    @property
    def save_steps(self) -> int | None:
        if self.save_every_steps is None and self.save_every_secs is None:
            return 100
        return self.save_every_steps


@dataclass
class Progress:
    """A snapshot of the run for progress displays."""

    step: int
    last_step: int
    loss: float
    steps_per_s: float | None
    last_checkpoint: str | None
    eval_accuracy: float | None = None


@dataclass
class TrainingSummary:
    """What ``run_training`` returns."""

    global_step: int
    steps_run: int
    final_loss: float | None
    held_out_accuracy: float | None
    checkpoints_written: int
    last_checkpoint: str | None
    restored_from: str | None
    stopped_by_signal: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class _FiniteSaver(Saver):
    """A Saver that refuses to publish non-finite parameters (never a NaN checkpoint):
    ``Saver(require_finite=True)``, its refusal raised as NanLossDuringTrainingError
    (with ``async_save`` the writer process checks, and the refusal surfaces at the next
    save or wait).

    With ``async_save``, the first save (at session creation) is waited for: training
    starts only once one checkpoint is durable and the writer process is up, so an
    unwritable directory stops the trainer before its first step.
    """

    _saved_once = False

    def __init__(self, **kw: Any):
        super().__init__(require_finite=True, **kw)

    def save(self, sess: Any, save_path: str, global_step: Any = None,  # type: ignore[override]
             **kw: Any) -> str | None:
        try:  # not ``with _nan_refusal()``: this runs every few steps, keep it short
            prefix = super().save(sess, save_path, global_step, **kw)
        except InvalidArgumentError as e:
            raise NanLossDuringTrainingError(e.message) from e
        if not self._saved_once:
            self._saved_once = True
            self.wait_until_finished()
        return prefix

    def wait_until_finished(self, timeout_s: float | None = None) -> None:
        with _nan_refusal():
            super().wait_until_finished(timeout_s)


@contextlib.contextmanager
def _nan_refusal() -> Iterator[None]:
    """Raises a ``require_finite`` refusal as NanLossDuringTrainingError."""
    try:
        yield
    except InvalidArgumentError as e:
        raise NanLossDuringTrainingError(e.message) from e


class _LoopHook(SessionRunHook):
    """Fetches the loss, measures speed, evaluates, throttles and reports progress."""

    def __init__(self, opts: TrainerOptions, loss: Any, evaluate: Callable[[Any], float | None],
                 saver_hook: CheckpointSaverHook, on_progress: Callable[[Progress], None] | None,
                 stop_event: threading.Event):
        self._opts, self._loss, self._evaluate = opts, loss, evaluate
        self._saver_hook, self._on_progress, self._stop = saver_hook, on_progress, stop_event
        self.loss: float | None = None
        self.steps_run = 0
        self.accuracy: float | None = None
        self._t0 = time.perf_counter()
        self._window: list[float] = []

    def begin(self) -> None:
        self._gs = get_global_step()
        self.start_step = 0

    def after_create_session(self, session: Any, coord: Any) -> None:
        self.start_step = int(session.run(self._gs))

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        return SessionRunArgs({"loss": self._loss, "step": self._gs})

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        self.loss = float(run_values.results["loss"])
        step = int(run_values.results["step"]) + 1
        self.steps_run += 1
        now = time.perf_counter()
        self._window.append(now)
        if len(self._window) > 50:
            self._window.pop(0)
        sps = (len(self._window) - 1) / (self._window[-1] - self._window[0]) \
            if len(self._window) > 1 and self._window[-1] > self._window[0] else None
        acc = None
        if self._opts.eval_every and step % self._opts.eval_every == 0:
            acc = self.accuracy = self._evaluate(run_context.session)
        if self._on_progress:
            self._on_progress(Progress(step, self._opts.steps, self.loss, sps,
                                       self._saver_hook.last_saved_path, acc))
        if self._opts.max_steps_per_s:
            wait = self._t0 + self.steps_run / self._opts.max_steps_per_s - time.perf_counter()
            if wait > 0:
                self._stop.wait(wait)
        if self._stop.is_set():
            run_context.request_stop()

    def end(self, session: Any) -> None:
        self.accuracy = self._evaluate(session)


def _call_build_net(build_net: Callable[..., Any], graph: Graph, device: str, mode: str,
                    learning_rate: float | None, path: str) -> Any:
    kwargs = {}
    if learning_rate is not None:
        params = inspect.signature(build_net).parameters
        if "learning_rate" not in params and not any(
                p.kind == p.VAR_KEYWORD for p in params.values()):
            raise ModelFileError(
                f"--learning-rate was given but build_net in {path} takes no learning_rate "
                "argument; add `learning_rate=...` to its signature.")
        kwargs["learning_rate"] = learning_rate
    try:
        return build_net(graph, device, mode, **kwargs)
    except ModelFileError:
        raise
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a user's build_net may raise anything
        raise ModelFileError(
            f"build_net in {path} failed: {type(e).__name__}: {e}") from e


def _check_feeds(name: str, placeholder: Any, arr: np.ndarray, source: str) -> None:
    shape = placeholder.get_shape()
    if shape.ndims is None:
        return
    if shape.ndims != arr.ndim or not shape[1:].is_compatible_with(arr.shape[1:]):
        raise DataError(
            f"Data array {name!r} from {source} has shape {list(arr.shape)}, which does not fit "
            f"the model's placeholder {placeholder.name} of shape {shape}.")


def run_training(opts: TrainerOptions, on_progress: Callable[[Progress], None] | None = None,
                 stop_event: threading.Event | None = None) -> TrainingSummary:
    """Trains ``opts.model_path`` on ``opts.data``, checkpointing into ``opts.checkpoint_dir``.

    Raises:
        ModelFileError: the model file is missing or its ``build_net`` is unusable.
        DataError: the data set is missing or does not fit the model (before step 1).
        NanLossDuringTrainingError: the loss became NaN (no NaN checkpoint is written).
        OpError: a checkpoint could not be written or restored.
    """
    stop_event = stop_event or threading.Event()
    # Data parallelism under mpiexec (identity in one process): see ckptsync.distributed.
    from ..distributed._trainer import DataParallel

    par = DataParallel(stop_event)
    stop_event = par.stop_event
    build_net = load_build_net(opts.model_path)
    graph = Graph()
    with graph.as_default():
        set_random_seed(opts.seed)
        device = canonical_device(opts.device)
        with par.building(graph):
            spec = _call_build_net(build_net, graph, device, ModeKeys.TRAIN, opts.learning_rate,
                                   opts.model_path)
        if not hasattr(spec, "require_training"):
            raise ModelFileError(f"build_net in {opts.model_path} must return a cs.ModelSpec, "
                                 f"got {type(spec).__name__}.")
        spec.require_training()
        if get_global_step(graph) is None:
            raise ModelFileError(
                f"build_net in {opts.model_path} must create the global step "
                "(cs.train.get_or_create_global_step()) and pass it to minimize().")
        par.check_graph(graph, opts.model_path)
        data = load_dataset(opts.data, tuple(spec.inputs), tuple(spec.labels))
        feeds = {**spec.inputs, **spec.labels}
        for name, t in feeds.items():
            _check_feeds(name, t, data.train[name], opts.data)
        iterator = BatchIterator(data.train, par.global_batch_size(opts.batch_size),
                                 seed=opts.seed)
        resume_path = resume_point(opts.checkpoint_dir) if opts.resume and par.is_chief \
            else None
        restored_meta = par.from_chief(lambda: _position(resume_path))
        if restored_meta is not None:
            iterator.restore(restored_meta)
        evaluate = _make_evaluator(spec, data.test)
        # Only the chief saves: other ranks start no writer process.
        saver = _FiniteSaver(max_to_keep=opts.max_to_keep,
                             async_save=opts.async_save and par.is_chief)
        graph.add_to_collection(GraphKeys.SAVERS, saver)
        scaffold = Scaffold(saver=saver)
        saver_hook = CheckpointSaverHook(
            opts.checkpoint_dir, save_steps=opts.save_steps, save_secs=opts.save_every_secs,
            scaffold=scaffold, metadata_fn=lambda: {"data": iterator.position})
        loop = _LoopHook(opts, spec.loss, evaluate, saver_hook, on_progress, stop_event)
        preflight = _PreflightHook(spec, data.train, opts.data)
        hooks = [*par.hooks(), preflight, NanTensorHook(spec.loss),
                 *par.chief_only([saver_hook]), loop, StopAtStepHook(last_step=opts.steps)]
        creator = ChiefSessionCreator(
            scaffold=scaffold, checkpoint_dir=opts.checkpoint_dir if resume_path else None,
            checkpoint_filename_with_path=resume_path)
        with MonitoredSession(creator, hooks=hooks) as sess:
            train_op = spec.train_op
            # A run restored at or past --steps trains no further (no extra step).
            while not sess.should_stop() and loop.start_step < opts.steps:
                batch = par.shard(next(iterator))
                sess.run(train_op, feed_dict={feeds[k]: v for k, v in batch.items()})
        step = saver_hook.last_saved_step or 0
        return TrainingSummary(
            global_step=step, steps_run=loop.steps_run, final_loss=loop.loss,
            held_out_accuracy=loop.accuracy, checkpoints_written=saver_hook.saves,
            last_checkpoint=saver_hook.last_saved_path, restored_from=creator.restored_from,
            stopped_by_signal=stop_event.is_set())


class _PreflightHook(SessionRunHook):
    """Runs the loss over the whole training set once before step 1, so bad labels or
    shapes fail with a clear error before any training or checkpoint."""

    def __init__(self, spec: Any, train: Any, source: str):
        self._spec, self._train, self._source, self._done = spec, train, source, False

    def after_create_session(self, session: Any, coord: Any) -> None:
        if self._done:
            return
        self._done = True
        feeds = {**self._spec.inputs, **self._spec.labels}
        n = len(next(iter(self._train.values())))
        try:
            for i in range(0, n, EVAL_BATCH):
                session.run(self._spec.loss,
                            {feeds[k]: v[i:i + EVAL_BATCH] for k, v in self._train.items()})
        except InvalidArgumentError as e:
            raise DataError(f"The training data from {self._source} does not fit the model: "
                            f"{e.message}") from None


def _make_evaluator(spec: Any, test: Any) -> Callable[[Any], float | None]:
    """Held-out accuracy from the ``classes`` output (or the argmax of a sole output)."""
    if len(spec.labels) != 1 or len(spec.inputs) != 1:
        return lambda sess: None
    out = spec.outputs.get("classes")
    if out is None and len(spec.outputs) == 1:
        from ..ops.math_ops import argmax

        (only,) = spec.outputs.values()
        if only.get_shape().ndims == 2:
            with only.graph.as_default():
                out = argmax(only, axis=1)
    if out is None:
        return lambda sess: None
    (x_name, x), = spec.inputs.items()
    (y_name, _), = spec.labels.items()
    xs, ys = test[x_name], test[y_name]

    def evaluate(sess: Any) -> float | None:
        if len(xs) == 0:
            return None
        preds = np.concatenate([sess.run(out, {x: xs[i:i + EVAL_BATCH]})
                                for i in range(0, len(xs), EVAL_BATCH)])
        return float(np.mean(preds.reshape(-1) == ys.reshape(-1)))

    return evaluate


def resume_point(checkpoint_dir: str) -> str | None:
    """The checkpoint a resumed run starts from: the newest one the state file lists that
    reads and verifies. None for a directory with no checkpoints yet.

    Unlike TF1 (which starts over when ``latest_checkpoint`` is None), a directory whose
    checkpoints are damaged or whose state file is broken is never silently trained over:

    Raises:
        CkptsyncValueError: the state file is unreadable or names no readable checkpoint
            while checkpoint files exist (the message lists what was tried; use
            ``--no-resume`` to start over deliberately).
    """
    try:
        state = ckpt.get_checkpoint_state(checkpoint_dir)
        problem = None
    except CkptsyncValueError as e:
        state, problem = None, str(e)
    if state is None:
        existing = sorted(p for p in os.listdir(checkpoint_dir)
                          if p.endswith(".h5") and not p.startswith(".")) \
            if os.path.isdir(checkpoint_dir) else []
        if not existing:
            return None
        raise CkptsyncValueError(
            f"{checkpoint_dir} holds checkpoints ({', '.join(existing[:3])}"
            f"{', ...' if len(existing) > 3 else ''}) but its 'checkpoint' state file is "
            f"{problem or 'missing or unreadable'}; repair it or pass --no-resume to start over.")
    candidates = [state.model_checkpoint_path] + [
        p for p in reversed(state.all_model_checkpoint_paths) if p != state.model_checkpoint_path]
    tried = []
    for path in candidates:
        try:
            ckpt.read_checkpoint(path, verify=True)
        except OpError as e:
            tried.append(f"{path}: {e}")
            log.warning("Not resuming from %s: %s", path, e)
            continue
        if tried:
            log.warning("Resuming from %s, the newest checkpoint that reads and verifies.", path)
        return path
    raise CkptsyncValueError(
        f"No checkpoint listed in {checkpoint_dir}/checkpoint reads and verifies ("
        + "; ".join(tried) + "); pass --no-resume to start over.")


def _position(path: str | None) -> dict[str, Any] | None:
    """The data position recorded in checkpoint ``path`` (None: start of the data)."""
    if path is None:
        return None
    with ckpt.CheckpointReader(path) as reader:
        pos = reader.metadata.get("data")
    if pos is None:
        log.warning("Checkpoint %s records no data position; the data order restarts.", path)
    return pos
