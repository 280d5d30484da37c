"""``Saver``: graph variables <-> HDF5 checkpoints, as TF1's ``tf.train.Saver``.

A checkpoint's identity is its prefix; its data is one HDF5 file ``<prefix>.h5`` written
by the format layer (:mod:`ckptsync.checkpoint`)::

    ckpts/
      checkpoint                 state file (TF1 text format, paths relative to ckpts/)
      model.ckpt-1200.h5         one immutable file per checkpoint
      model.ckpt-1100.h5
      .model.ckpt-1300.h5.tmp-<pid>-<n>   being written; never read, swept on start

``save`` order (as TF1, made durable): write the data file through a temp file, fsync,
rename, fsync the directory; then rewrite the state file the same way; then delete what
``max_to_keep`` evicts. A checkpoint exists for readers only once the state file names it.
A failed save raises, leaves no partial file, keeps earlier checkpoints and leaves the
state file as it was. A Saver deletes only files it recorded itself. The first save into
a directory sweeps the temp files of writers that died there.

With ``async_save=True`` the same steps run in a writer process
(:class:`ckptsync.workers.AsyncCheckpointWriter`): ``save`` returns once
the values are copied into shared memory; saves are written one after the other, in
order, with a few queued at most (as many copies as fit in 64 MiB, 1 to 16: a full queue
makes ``save`` wait for the oldest); a failure is raised by a later ``save``,
``wait_until_finished``, ``restore`` or ``close`` (the saves queued after the failed one
are dropped with it), and the state file never names a checkpoint that was not fully
written.

Thread-safety: one Saver may be used from one thread at a time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import numpy as np

from .. import checkpoint as ckpt
from .. import errors
from ..checkpoint.management import remove_evicted
from ..checkpoint.writer import first_nonfinite
from ..errors import CkptsyncRuntimeError, CkptsyncValueError
from ..workers import AsyncCheckpointWriter, StateUpdate
from .saver_incremental import IncrementalSaves, SavedCheckpoint, save_incremental
from .saver_paths import prepare_save_path
from .saver_restore import RestoreSpec, restore_into_session, restore_specs
from .saver_vars import build_var_map, check_session_graph, get_default_graph_step, is_saveable

__all__ = ["Saver"]

log = logging.getLogger(__name__)


def _nonfinite_message(key: str, prefix: str) -> str:
    return (f"Variable {key} holds NaN or Inf; refusing to save checkpoint {prefix} "
            f"(Saver(require_finite=True)).")


class Saver:
    """Saves and restores variables, as ``tf.train.Saver``.

    Args:
        var_list: list of variables (keys are their op names) or dict of checkpoint key ->
            variable; default all ``GLOBAL_VARIABLES``.
        max_to_keep: newest checkpoints to keep; 0 or None keeps all (and records none).
        keep_checkpoint_every_n_hours: additionally keep one checkpoint per this many hours.
        allow_empty: with no variables, ``save`` returns None and ``restore`` does nothing.
        reshape: restore values whose shape differs but element count matches (row-major).
        pad_step_number: name ``prefix-%08d`` instead of ``prefix-%d``.
        save_relative_paths: accepted for TF1 compatibility; the state file always stores
            paths relative to its directory (ckptsync's choice, so directories can move).
        sharded, write_version, ...: accepted for compatibility; one file is written.
        async_save: write in a background process (ckptsync extension, see the module
            docstring). Such a Saver owns a process: ``close()`` it or use ``with``.
        require_finite: refuse to save a NaN or Inf in a floating-point variable
            (ckptsync extension): ``save`` raises ``InvalidArgumentError`` naming the
            variable, as ``tf.debugging.check_numerics`` does, and writes nothing. With
            ``async_save`` the writer process checks (off the training thread), and the
            refusal is raised like a failed write: by the next ``save``,
            ``wait_until_finished`` or ``close``; that save is forgotten.
        incremental: write what changed since the last checkpoint only (ckptsync
            extension, :mod:`.saver_incremental`): deltas composed by every reader, a
            full checkpoint every ``full_checkpoint_every_n`` (>= 1) and when needed.

    Raises:
        ValueError: "No variables to save" (unless allow_empty); duplicate names.
        TypeError: ``var_list`` is not a list or dict.

    Example:
        >>> import os, ckptsync as cs
        >>> os.makedirs("async_ckpts")  # as TF1, the Saver does not create it
        >>> v = cs.get_variable("v", [3], initializer=cs.zeros_initializer())
        >>> step = cs.train.get_or_create_global_step()
        >>> train_op = cs.group(v.assign_add(cs.ones([3])), step.assign_add(1))
        >>> with cs.Session() as sess, cs.train.Saver(max_to_keep=3, async_save=True) as saver:
        ...     sess.run(cs.global_variables_initializer())
        ...     for i in range(30):
        ...         sess.run(train_op)
        ...         if i % 10 == 0:
        ...             _ = saver.save(sess, "async_ckpts/model.ckpt", global_step=step)
        >>> cs.train.latest_checkpoint("async_ckpts")
        'async_ckpts/model.ckpt-21'
        >>> [int(x) for x in cs.train.load_variable("async_ckpts", "v")]
        [21, 21, 21]
    """

    def __init__(self, var_list: Any = None, reshape: bool = False, sharded: bool = False,
                 max_to_keep: int | None = 5, keep_checkpoint_every_n_hours: float = 10000.0,
                 name: str | None = None, restore_sequentially: bool = False,
                 saver_def: Any = None, builder: Any = None, defer_build: bool = False,
                 allow_empty: bool = False, write_version: Any = None,
                 pad_step_number: bool = False, save_relative_paths: bool = False,
                 filename: str | None = None, async_save: bool = False,
                 require_finite: bool = False, incremental: bool = False,
                 full_checkpoint_every_n: int = 16):
        if defer_build and var_list is not None:
            raise CkptsyncValueError(
                "If `var_list` is provided then build cannot be deferred. Either set defer_build "
                "to False or var_list to None.")
        self._var_list_arg = var_list
        self._reshape = reshape
        self._allow_empty = allow_empty
        self._pad = pad_step_number
        self._filename = filename
        self._max_to_keep = max_to_keep or 0
        self._keep_hours = keep_checkpoint_every_n_hours
        self._retention: Any = None
        self._var_map: dict[str, Any] | None = None
        # Per-variable facts, made once: (keys, op names, saveable objects) for save,
        # the restore specs for restore.
        self._key_names: tuple[list[str], list[str], list[tuple[str, Any]]] | None = None
        self._specs: list[RestoreSpec] | None = None
        self._is_empty = False
        self._swept_dirs: set[str] = set()  # absolute and real paths of swept dirs
        self._absolute_paths: dict[str, str] = {}  # path -> abspath while cwd is _cwd
        self._cwd: str | None = ""
        self._relative_cached = False  # _absolute_paths holds a relative path (cwd matters)
        self._require_finite = require_finite
        # async: the writer process, and per queued save the retention state to roll
        # back to if it fails.
        self._writer: AsyncCheckpointWriter | None = None
        self._rollback: list[tuple[str, Any, Any]] = []  # (prefix, retention, incremental)
        self._incremental = IncrementalSaves(full_checkpoint_every_n) if incremental else None
        #: What the last incremental save wrote (kind, bytes), or None.
        self.last_saved: SavedCheckpoint | None = None
        if not defer_build:
            self.build()
        if async_save:
            self._writer = AsyncCheckpointWriter()

    def build(self) -> None:
        """Resolves the variables to save (done by the constructor unless deferred)."""
        if self._var_map is not None:
            return
        var_map = build_var_map(self._var_list_arg)
        if not var_map:
            if not self._allow_empty:
                raise CkptsyncValueError("No variables to save")
            self._is_empty = True
        self._var_map = var_map
        self._retention = ckpt.CheckpointRetention(
            max_to_keep=self._max_to_keep, keep_checkpoint_every_n_hours=self._keep_hours)
        # As TF1's Saver builds its save and restore ops here: the first save and
        # restore then cost what every later one does.
        self._names()
        with contextlib.suppress(ValueError):  # unknown rank: the first restore raises
            self._specs = restore_specs(var_map)

    def _names(self) -> tuple[list[str], list[str], list[tuple[str, Any]]]:
        """The checkpoint keys and the variables' op names, in the same order, and the
        (key, saveable object) pairs (cached)."""
        if self._key_names is None:
            var_map = {k: v for k, v in self._map().items() if not is_saveable(v)}
            self._key_names = list(var_map), [v.op.name for v in var_map.values()], \
                [(k, v) for k, v in self._map().items() if is_saveable(v)]
        return self._key_names

    def _map(self) -> dict[str, Any]:
        if self._var_map is None:
            raise CkptsyncRuntimeError("`build()` should be called before save if defer_build==True")
        return self._var_map

    # ---------------------------------------------------------------- bookkeeping
    @property
    def last_checkpoints(self) -> list[str]:
        """Prefixes of the checkpoints this Saver keeps, oldest first (an async save in
        flight is included)."""
        return list(self._retention.last_checkpoints) if self._retention else []

    def set_last_checkpoints(self, last_checkpoints: list[str]) -> None:
        """Deprecated TF form: records ``last_checkpoints`` with infinite timestamps."""
        self._retention.set_last_checkpoints(last_checkpoints)

    def set_last_checkpoints_with_time(self, last_checkpoints_with_time: list[tuple[str, float]]
                                       ) -> None:
        """Replaces the record with ``(prefix, timestamp)`` pairs, oldest first."""
        self._retention.set_last_checkpoints_with_time(last_checkpoints_with_time)

    def recover_last_checkpoints(self, checkpoint_paths: list[str]) -> None:
        """Adopts existing checkpoints (timestamp = mtime) so retention can delete them.

        Typically ``saver.recover_last_checkpoints(
        get_checkpoint_state(d).all_model_checkpoint_paths)`` after a restart; prefixes
        whose file is gone are dropped.
        """
        self._retention.recover_last_checkpoints(checkpoint_paths)

    # ---------------------------------------------------------------- save
    def save(self, sess: Any, save_path: str, global_step: Any = None,
             latest_filename: str | None = None, meta_graph_suffix: str = "meta",
             write_meta_graph: bool = True, write_state: bool = True,
             strip_default_attrs: bool = False, save_debug_info: bool = False,
             metadata: Mapping[str, Any] | None = None) -> str | None:
        """Writes a checkpoint and returns its prefix (e.g. ``"ckpts/model.ckpt-1200"``).

        Args:
            sess: the session holding the values.
            save_path: prefix without step, e.g. ``"ckpts/model.ckpt"``.
            global_step: int, or a tensor/variable read through ``sess``; appended as
                ``-<step>`` (``-%08d`` with ``pad_step_number``).
            write_state: record the checkpoint, rewrite the state file and apply
                ``max_to_keep``; False writes the data file only.
            metadata: JSON-serializable dict stored in the file (ckptsync extension, e.g.
                the input pipeline's position).

        Returns:
            The prefix; None for an empty ``allow_empty`` Saver. With ``async_save`` the
            file is complete only once ``wait_until_finished()`` returns, or once
            ``pending_saves`` (after ``poll_saves()`` or a later save) no longer lists it.

        Raises:
            ValueError: the parent path is not a directory; ``latest_filename`` has a
                directory part or the prefix collides with it.
            ResourceExhaustedError, PermissionDeniedError, DataLossError, UnknownError: the
                write failed (names the path); nothing partial is left and the state file
                is unchanged. With ``async_save``: an earlier queued save's failure.
        """
        var_map = self._map()
        check_session_graph(sess, var_map)
        if self._is_empty:
            return None
        latest_filename = latest_filename or "checkpoint"
        step: int | None = None
        if global_step is not None:
            step = int(global_step) if isinstance(global_step, (int, np.integer)) else \
                int(sess.run(global_step))
        prefix, save_dir = prepare_save_path(save_path, step, self._pad, latest_filename)
        if self._relative_cached or not os.path.isabs(save_dir):
            try:
                cwd: str | None = os.getcwd()
            except OSError:  # the working directory was removed; absolute paths still work
                cwd = None
            if cwd != self._cwd:  # relative paths now mean other files
                self._absolute_paths.clear()
                self._relative_cached = False
                self._cwd = cwd
        abs_dir = self._absolute(save_dir)
        if abs_dir not in self._swept_dirs:
            real_dir = os.path.realpath(abs_dir)
            if real_dir not in self._swept_dirs:  # e.g. a symlink to a swept one
                ckpt.sweep_temp_files(save_dir)
            self._swept_dirs.update((abs_dir, real_dir))
        gs = get_default_graph_step(sess, var_map) if step is None else step
        if self._incremental is not None and write_state:
            self.last_saved = save_incremental(self, sess, prefix, save_dir, latest_filename,
                                               gs, metadata)
            return prefix
        keys, op_names, saveables = self._names()
        named = dict(zip(keys, sess.read_variables(op_names).values()))
        named.update((k, v.save_value(sess)) for k, v in saveables)
        if self._writer is not None:
            self._save_async(prefix, save_dir, latest_filename, named, gs, metadata, write_state)
            return prefix
        if self._require_finite:
            bad = first_nonfinite(named)
            if bad is not None:
                raise errors.InvalidArgumentError(None, None, _nonfinite_message(bad, prefix))
        ckpt.write_checkpoint(prefix, named, global_step=gs, metadata=metadata,
                              sync_directory=not write_state)
        if write_state:
            evicted, kept = self._record(prefix)
            ckpt.update_checkpoint_state(save_dir, prefix, all_model_checkpoint_paths=kept,
                                         latest_filename=latest_filename)
            remove_evicted(evicted)
        return prefix

    def _record(self, prefix: str, depends_on: str | None = None
                ) -> tuple[list[str], list[str]]:
        """Records ``prefix``; returns (prefixes to delete, prefixes the state lists).

        Retention spans every directory this Saver wrote to, as TF1's ``max_to_keep``;
        a directory's state file lists only the checkpoints in it (TF1 would list the
        other directories' too, which readers here refuse as outside paths)."""
        if not self._max_to_keep:
            return [], [prefix]
        if depends_on is not None:  # named as it was recorded (a relative path stays one)
            target = self._absolute(depends_on)
            depends_on = next((p for p in self._retention.last_checkpoints
                               if self._absolute(p) == target), depends_on)
        evicted = self._retention.record(prefix, time.time(), depends_on)
        here = os.path.dirname(self._absolute(prefix))
        kept = [p for p in self._retention.last_checkpoints
                if os.path.dirname(self._absolute(p)) == here]
        return evicted, kept

    def _save_async(self, prefix: str, save_dir: str, latest_filename: str,
                    named: dict[str, np.ndarray], gs: int | None,
                    metadata: Mapping[str, Any] | None, write_state: bool) -> None:
        assert self._writer is not None
        before = self._retention.copy()
        state: StateUpdate | None = None
        evicted: list[str] = []
        absolute = self._absolute
        if write_state:
            evicted, kept = self._record(prefix)
            state = StateUpdate(absolute(save_dir), absolute(prefix),
                                [absolute(p) for p in kept], latest_filename)
        self._writer.failed_prefix, self._writer.failed_count = None, 0
        target = absolute(prefix)
        try:
            self._writer.submit(target, named, global_step=gs, metadata=metadata,
                                state=state, delete=[absolute(p) for p in evicted],
                                require_finite=self._require_finite,
                                rewrites=any(absolute(p) == target
                                             for p in before.last_checkpoints))
        except BaseException:
            if self._writer.failed_prefix is not None:  # an earlier queued save failed
                self._roll_back()
            else:  # this save was refused before anything was sent
                self._retention = before
            raise
        self._rollback.append((absolute(prefix), before, None))
        self._trim_rollback()

    def _absolute(self, path: str) -> str:
        """``os.path.abspath(path)`` (cached while the working directory stays)."""
        found = self._absolute_paths.get(path)
        if found is None:
            if len(self._absolute_paths) > 1024:
                self._absolute_paths.clear()
                self._relative_cached = False
            found = self._absolute_paths[path] = os.path.abspath(path)
            self._relative_cached = self._relative_cached or not os.path.isabs(path)
        return found

    def _trim_rollback(self) -> None:
        """Forgets the rollback points of saves the writer has confirmed (confirmed in
        submission order, so the unconfirmed ones are the last ``len(pending)``)."""
        pending = self._writer.pending_count if self._writer is not None else 0
        self._confirmed(self._rollback[:len(self._rollback) - pending])
        self._rollback = self._rollback[len(self._rollback) - pending:] if pending else []

    def _confirmed(self, saves: list[tuple[str, Any, Any]]) -> None:
        if self._incremental is not None:
            for prefix, _, _ in saves:
                self._incremental.confirmed(prefix)

    def _finish_async(self, timeout_s: float | None = None) -> None:
        """Waits for the queued async saves; on a failure forgets it (and the saves
        queued after it) and raises."""
        if self._writer is None:
            return
        self._writer.failed_prefix, self._writer.failed_count = None, 0
        try:
            self._writer.wait(timeout_s)
        except errors.DeadlineExceededError:
            self._trim_rollback()
            raise
        except BaseException:
            self._roll_back()
            raise
        self._confirmed(self._rollback)
        self._rollback = []

    def _roll_back(self, writer: AsyncCheckpointWriter | None = None) -> None:
        """Forgets the failed async save and those queued after it (``writer``'s last
        ``failed_count`` saves, default this Saver's writer): retention as before it,
        minus checkpoints whose file is gone (the worker may have died after deleting an
        evicted one)."""
        writer = writer if writer is not None else self._writer
        count = writer.failed_count if writer is not None else 0
        if 0 < count <= len(self._rollback):
            self._retention = self._rollback[-count][1]
            self._retention.forget_missing()
            if self._incremental is not None:  # their changes go back to the tracker
                self._incremental.roll_back([e[2] for e in self._rollback[-count:]])
        self._rollback = []

    @property
    def pending_saves(self) -> list[str]:
        """Absolute prefixes of the async saves started and not yet confirmed on disk
        (data file durable and state file published), oldest first, as of the last
        ``save``, :meth:`poll_saves` or wait; always [] for a synchronous Saver."""
        return [prefix for prefix, _, _ in self._rollback]

    def poll_saves(self) -> int:
        """Takes the writer's confirmations that have arrived, without blocking, and
        returns how many async saves are still pending (0 for a synchronous Saver).

        Raises:
            OpError: a queued save failed; as :meth:`wait_until_finished`, it and the saves
                queued after it are forgotten.
        """
        if self._writer is None or not self._rollback:
            return 0
        try:  # a zero timeout takes the replies already there, then gives up at once
            self._finish_async(0.0)
        except errors.DeadlineExceededError:
            pass
        return len(self._rollback)

    def wait_until_finished(self, timeout_s: float | None = None) -> None:
        """Blocks until the queued async saves are durable and published.

        A no-op for a synchronous Saver.

        Raises:
            OpError: that save failed (the message names the path); the checkpoint is
                forgotten (not in ``last_checkpoints``, not in the state file).
            DeadlineExceededError: ``timeout_s`` passed first (the save continues).
        """
        self._finish_async(timeout_s)

    def close(self) -> None:
        """Waits for the queued async saves and ends the writer process. Idempotent.

        Raises:
            OpError: a queued save failed (raised after the process has ended).
        """
        writer, self._writer = self._writer, None
        if writer is None:
            return
        writer.failed_prefix, writer.failed_count = None, 0
        try:
            writer.wait()
            self._confirmed(self._rollback)
        except BaseException:
            self._roll_back(writer)
            raise
        finally:
            self._rollback = []
            writer.close()

    def __enter__(self) -> Saver:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except Exception as e:  # do not mask the error already propagating
            log.error("Async checkpoint save failed while handling another error: %s", e)

    # ---------------------------------------------------------------- restore
    def restore(self, sess: Any, save_path: str | None) -> None:
        """Loads every variable of ``var_list`` from checkpoint ``save_path``.

        Only the ``var_list`` keys are read; other keys in the file are ignored. Queued
        async saves are waited for first (a failure is raised). The values are read
        into the variables' own arrays where nobody else holds them, and only once the
        whole checkpoint has matched its checksums (:mod:`.saver_restore`): a failed
        restore changes no variable. Restore with no ``run`` in flight on ``sess``.

        Raises:
            ValueError: ``save_path`` is None, or no checkpoint is there ("The passed
                save_path is not a valid checkpoint: P").
            NotFoundError: a key is missing ("Key X not found in checkpoint").
            InvalidArgumentError: a shape or dtype differs (names the variable, both shapes).
            DataLossError: the file is corrupt or fails its checksums.
        """
        var_map = self._map()
        check_session_graph(sess, var_map)
        if self._is_empty:
            return
        if save_path is None:
            raise CkptsyncValueError("Can't load save_path when it is None.")
        self._finish_async()
        if not ckpt.checkpoint_exists(save_path):
            raise CkptsyncValueError(f"The passed save_path is not a valid checkpoint: {save_path}")
        if self._specs is None:
            self._specs = restore_specs(var_map)
        restore_into_session(sess, save_path, self._specs, self._reshape)
        if self._incremental is not None:  # the next save is full, parent save_path
            self._incremental.restored(sess, self._absolute(save_path))

    def as_saver_def(self) -> dict[str, Any]:
        return {"max_to_keep": self._max_to_keep, "filename": self._filename,
                "keep_checkpoint_every_n_hours": self._keep_hours}
