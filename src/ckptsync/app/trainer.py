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

import inspect
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import checkpoint as ckpt
from ..checkpoint.state import NotRegularFileError
from ..data import BatchIterator, DataError, load_dataset
from ..device import canonical_device
from ..errors import CkptsyncValueError, InvalidArgumentError, NotFoundError, OpError
from ..graph import Graph, GraphKeys
from ..model_fn_file import DataSignature, ModelFnNet
from ..model_spec import BUILD_NET_SIGNATURE, ModeKeys, ModelFileError, load_build_net
from ..ops.random_ops import set_random_seed
from ..train.basic_hooks import CheckpointSaverHook, NanTensorHook, StopAtStepHook
from ..train.monitored_session import ChiefSessionCreator, MonitoredSession, Scaffold
from ..train.training_util import get_global_step
from .data_parallel import DataParallel
from .eval_graph import make_eval_graph_evaluator
from .hooks import FiniteSaver, LoopHook, PreflightHook, make_evaluator
from .model_inputs import check_feedable, load_model_fn_data
from .options import Progress, TrainerOptions, TrainingSummary
from .summaries import TrainerSummaries

__all__ = ["TrainerOptions", "TrainingSummary", "Progress", "run_training", "resume_point"]

log = logging.getLogger("ckptsync.trainer")


def _call_build_net(build_net: Callable[..., Any], graph: Graph, device: str, mode: str,
                    learning_rate: float | None, path: str, **kwargs: Any) -> Any:
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
    # Data parallelism under mpiexec (identity in one process): see .data_parallel.
    par = DataParallel(stop_event)
    stop_event = par.stop_event
    build_net = load_build_net(opts.model_path)
    # A model_fn file is built for its data (features and labels shaped from --data).
    model_fn = build_net if isinstance(build_net, ModelFnNet) else None
    data = load_model_fn_data(opts.data) if model_fn else None
    signature = DataSignature.of_arrays(data.train, data.feature_names, data.label_names,
                                        opts.data) if data else None
    contract = "model_fn" if model_fn else "build_net"
    graph = Graph()
    with graph.as_default():
        set_random_seed(opts.seed)
        device = canonical_device(opts.device)
        with par.building(graph):
            spec = _call_build_net(build_net, graph, device, ModeKeys.TRAIN, opts.learning_rate,
                                   opts.model_path, **({"data": signature} if signature else {}))
        if not hasattr(spec, "require_training"):
            raise ModelFileError(f"build_net in {opts.model_path} must return a cs.ModelSpec "
                                 f"({BUILD_NET_SIGNATURE}), got {type(spec).__name__}.")
        spec.require_training()
        if get_global_step(graph) is None:
            raise ModelFileError(
                f"{contract} in {opts.model_path} must create the global step "
                "(cs.train.get_or_create_global_step()) and pass it to minimize().")
        par.check_graph(graph, opts.model_path)
        if data is None:
            data = load_dataset(opts.data, tuple(spec.inputs), tuple(spec.labels))
        feeds = {**spec.inputs, **spec.labels}
        for name, t in feeds.items():
            _check_feeds(name, t, data.train[name], opts.data)
        check_feedable(spec, data, opts.model_path, opts.data, contract)
        iterator = BatchIterator(data.train, par.global_batch_size(opts.batch_size),
                                 seed=opts.seed)
        if par.size > 1 and par.is_chief:
            log.info("Data parallel: %d ranks x batch %d = global batch %d per step.",
                     par.size, opts.batch_size, par.global_batch_size(opts.batch_size))
        resume_path = resume_point(opts.checkpoint_dir) if opts.resume and par.is_chief \
            else None
        restored_meta = par.from_chief(lambda: _position(resume_path))
        if restored_meta is not None:
            iterator.restore(restored_meta)
        evaluate = make_eval_graph_evaluator(
            build_net, device, signature, data.test, graph, opts.seed, opts.learning_rate,
            opts.model_path) if signature else make_evaluator(spec, data.test)
        est = spec.extra.get("estimator_spec")  # a model_fn's hooks run as TF's Estimator's
        model_hooks = [*est.training_hooks, *par.chief_only(list(est.training_chief_hooks))] \
            if est is not None else []
        # Only the chief saves: other ranks start no writer process.
        saver = FiniteSaver(max_to_keep=opts.max_to_keep,
                             async_save=opts.async_save and par.is_chief,
                             incremental=opts.incremental,
                             full_checkpoint_every_n=opts.full_checkpoint_every_n)
        graph.add_to_collection(GraphKeys.SAVERS, saver)
        scaffold = Scaffold(saver=saver)
        tb = TrainerSummaries(opts.summary_dir, graph, opts.summary_every_steps) \
            if opts.summary_dir and par.is_chief else None
        saver_hook = CheckpointSaverHook(
            opts.checkpoint_dir, save_steps=opts.save_steps, save_secs=opts.save_every_secs,
            scaffold=scaffold, metadata_fn=lambda: {"data": iterator.position},
            listeners=[tb] if tb else None)
        loop = LoopHook(opts, spec.loss, evaluate, saver_hook,
                        tb.wrap(on_progress) if tb else on_progress, stop_event)
        preflight = PreflightHook(spec, data.train, opts.data)
        # The model's summaries before the loop's scalars: its SessionLog START comes
        # first at a step (TensorBoard drops what a START's step had before it).
        hooks = [*par.hooks(), preflight, NanTensorHook(spec.loss),
                 *par.chief_only([saver_hook]), *(tb.hooks(scaffold) if tb else []), loop,
                 StopAtStepHook(last_step=opts.steps), *model_hooks]
        creator = ChiefSessionCreator(
            scaffold=scaffold, checkpoint_dir=opts.checkpoint_dir if resume_path else None,
            checkpoint_filename_with_path=resume_path)
        try:
            with _resumed_session(creator, hooks, resume_path, opts.checkpoint_dir) as sess:
                train_op = spec.train_op
                # A run restored at or past --steps trains no further (no extra step).
                while not sess.should_stop() and loop.start_step < opts.steps:
                    batch = par.shard(next(iterator))
                    sess.run(train_op, feed_dict={feeds[k]: v for k, v in batch.items()})
            if tb and loop.evaluated_at_end:  # the held-out figures of the end (LoopHook.end)
                tb.held_out(saver_hook.last_saved_step or 0, loop.eval_loss, loop.accuracy,
                            loop.eval_metrics)
        finally:
            if tb:
                tb.close()
        step = saver_hook.last_saved_step or 0
        return TrainingSummary(
            global_step=step, steps_run=loop.steps_run, final_loss=loop.loss,
            held_out_accuracy=loop.accuracy, checkpoints_written=saver_hook.saves,
            last_checkpoint=saver_hook.last_saved_path, restored_from=creator.restored_from,
            stopped_by_signal=stop_event.is_set(), held_out_loss=loop.eval_loss,
            ranks=par.size, global_batch_size=par.global_batch_size(opts.batch_size),
            held_out_metrics=dict(loop.eval_metrics))


def _resumed_session(creator: ChiefSessionCreator, hooks: list[Any], resume_path: str | None,
                     checkpoint_dir: str) -> MonitoredSession:
    """The monitored session (restoring ``resume_path`` if any); a checkpoint that does not
    fit the model (a missing variable, another shape or dtype: TF1's restore errors) says
    which directory it came from and what to do."""
    try:
        return MonitoredSession(creator, hooks=hooks)
    except (NotFoundError, InvalidArgumentError) as e:
        if resume_path is None:
            raise
        raise type(e)(e.node_def, e.op, (
            f"{e.message} -- resuming from {resume_path}: the checkpoints in {checkpoint_dir} "
            "were written by a different model; pass --no-resume to train over them, or "
            "use another --checkpoint-dir.")) from e


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
    except NotRegularFileError:
        raise  # a FIFO or device as the state file: say so, never train over it
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
