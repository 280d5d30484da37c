"""``FileWriter`` and ``FileWriterCache``, as TF1's ``tf.summary.FileWriter``: events
files TensorBoard reads, written through tensorboard's own ``EventFileWriter`` (files
``events.out.tfevents.<time>.<host>...`` in ``logdir``; the first event of each file is
its ``file_version``; writes are queued and flushed every ``flush_secs``).

As TF's ``EventsWriter``, a writer whose event file disappeared (its directory deleted
mid-run) makes a new one, recreating the directory, on the next write or flush; events
queued for the lost file are lost (a warning says so). ``write_or_warn`` is how hooks and
the trainer write: a failed summary write is a warning, never the end of training."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import gfile as _gfile
from ..errors import OpError
from ..graph import Graph, get_default_graph
from . import _tb
from .graph_def import as_graph_def

__all__ = ["FileWriter", "FileWriterCache", "write_or_warn"]

log = logging.getLogger("ckptsync.summary")
_warned: set[tuple[str, str]] = set()


_hook_lock = threading.Lock()


def _quiet_writer_threads() -> None:
    """Installed with each writer unless there: an ``OSError`` that kills one of tensorboard's event writer
    threads (its file deleted under it) is a warning, not a traceback on stderr; the
    ``FileWriter`` recovers on its next call. Other threads' exceptions go to the hook
    that was there before."""
    with _hook_lock:
        if getattr(threading.excepthook, "_ckptsync_writer", False):
            return  # ours (checked, not remembered: a test runner may swap hooks back)
        previous = threading.excepthook

        def hook(args: Any) -> None:
            if (type(args.thread).__name__ == "_AsyncWriterThread"
                    and isinstance(args.exc_value, OSError)):
                log.warning("Event writer thread stopped: %s (a new event file is made on "
                            "the next write)", args.exc_value)
                return
            previous(args)

        hook._ckptsync_writer = True  # type: ignore[attr-defined]
        threading.excepthook = hook


def write_or_warn(write: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
    """Calls ``write(*args, **kwargs)`` (a ``FileWriter`` method); an ``OSError`` or
    ``OpError`` from it is logged as a warning, once per cause (its class and message)
    in the process, and swallowed: summaries never stop training. Returns whether it
    worked. Thread-safety: as ``write``."""
    try:
        write(*args, **kwargs)
        return True
    except (OSError, OpError) as e:
        cause = (type(e).__name__, str(e))
        if cause not in _warned:
            _warned.add(cause)
            log.warning("Writing summaries failed (training goes on without them): %s: %s",
                        type(e).__name__, e)
        return False


class FileWriter:
    """Writes ``Summary`` protos and events to an event file in ``logdir``.

    Args:
        logdir: the directory (created if missing).
        graph: a ``Graph`` written as the file's graph (``add_graph``), as TF1.
        max_queue: events queued before a write; flush_secs: seconds between flushes.
        filename_suffix: appended to the event file's name.

    ``add_*`` after ``close`` are dropped, as TF1; ``reopen`` starts a new file. When the
    event file disappeared, the next ``add_*``/``flush`` makes the directory and a new
    file, as TF's ``EventsWriter``.

    Raises:
        FailedPreconditionError: ``logdir`` (or a parent) is not a directory ("<path> is
            not a directory", TF's message).
        PermissionDeniedError, UnknownError...: the directory or file cannot be made
            (``"<path>; <reason>"``).

    Thread-safety: the methods may be called from any thread.
    """

    def __init__(self, logdir: str, graph: Graph | None = None, max_queue: int = 10,
                 flush_secs: float = 120, graph_def: Any = None,
                 filename_suffix: str | None = None, session: Any = None):
        self._logdir = str(logdir)
        self._args = (max_queue, flush_secs, filename_suffix or "")
        self._lock = threading.Lock()
        self._seen_tags: set[str] = set()
        self._closed = True
        self.reopen()
        if graph is not None or graph_def is not None:
            self.add_graph(graph, graph_def=graph_def)

    def get_logdir(self) -> str:
        return self._logdir

    def reopen(self) -> None:
        """Starts a new event file after ``close`` (no-op while open), as TF1."""
        with self._lock:
            if not self._closed:
                return
            self._open()

    def _open(self) -> None:
        _quiet_writer_threads()
        _gfile.MakeDirs(self._logdir)
        max_queue, flush_secs, suffix = self._args
        try:
            self._writer = _tb.event_file_writer()(self._logdir, max_queue_size=max_queue,
                                                   flush_secs=flush_secs,
                                                   filename_suffix=suffix)
        except OSError as e:
            raise _gfile._os_error(e.filename or self._logdir, e) from None
        self._closed = False

    def _file_gone(self) -> bool:
        name = getattr(self._writer, "_file_name", None)
        return name is not None and not os.path.exists(name)

    def _renew(self) -> None:
        """As TF's EventsWriter: the event file is gone; a new one (and directory)."""
        log.warning("Event file %s disappeared; writing to a new one in %s (events not yet "
                    "written are lost)", getattr(self._writer, "_file_name", "?"),
                    self._logdir)
        try:
            self._writer.close()
        except Exception:  # noqa: BLE001 - the old file is lost anyway
            pass
        self._closed = True
        self._open()

    def _call(self, method: str, *args: Any) -> None:
        # Under self._lock. A write failing because the file went away is retried once
        # on a new file.
        if self._file_gone():
            self._renew()
        try:
            getattr(self._writer, method)(*args)
        except OSError:
            if not self._file_gone():
                raise
            self._renew()
            getattr(self._writer, method)(*args)

    def add_event(self, event: Any) -> None:
        """Writes one ``Event`` proto (dropped once closed)."""
        with self._lock:
            if not self._closed:
                self._call("add_event", event)

    def _event(self, step: Any = None, **fields: Any) -> None:
        event = _tb.proto("event_pb2.Event")(wall_time=time.time(), **fields)
        if step is not None:
            event.step = int(step)
        self.add_event(event)

    def add_summary(self, summary: Any, global_step: Any = None) -> None:
        """Writes a ``Summary`` (a proto or its serialized bytes, e.g. a summary op's
        value) at ``global_step``. As TF1, a tag's ``metadata`` is written only the
        first time the tag is seen."""
        summary_cls = _tb.proto("summary_pb2.Summary")
        if isinstance(summary, (bytes, bytearray)):
            summary = summary_cls.FromString(bytes(summary))
        elif hasattr(summary, "item") and not isinstance(summary, summary_cls):
            summary = summary_cls.FromString(summary.item())  # a 0-d object array
        out = summary_cls()
        out.CopyFrom(summary)
        for value in out.value:
            if not value.HasField("metadata"):
                continue
            if value.tag in self._seen_tags:
                value.ClearField("metadata")
            else:
                self._seen_tags.add(value.tag)
        self._event(global_step, summary=out)

    def add_session_log(self, session_log: Any, global_step: Any = None) -> None:
        """Writes a ``SessionLog`` (``START``/``STOP``/``CHECKPOINT``)."""
        self._event(global_step, session_log=session_log)

    def add_graph(self, graph: Graph | None, global_step: Any = None,
                  graph_def: Any = None) -> None:
        """Writes ``graph`` (or a ready ``graph_def``) as the graph event and a
        ``meta_graph_def`` holding it, as TF1's ``FileWriter(logdir, graph)``."""
        if graph_def is None:
            graph_def = as_graph_def(graph if graph is not None else get_default_graph())
        self._event(global_step, graph_def=graph_def.SerializeToString())
        meta = _tb.proto("meta_graph_pb2.MetaGraphDef")(graph_def=graph_def)
        self._event(global_step, meta_graph_def=meta.SerializeToString())

    def flush(self) -> None:
        """Writes the queued events to disk."""
        with self._lock:
            if not self._closed:
                self._call("flush")

    def close(self) -> None:
        """Flushes and closes the file; later ``add_*`` are dropped until ``reopen``."""
        with self._lock:
            if not self._closed:
                self._closed = True
                try:
                    self._writer.close()
                except OSError:
                    if not self._file_gone():
                        raise

    def __enter__(self) -> FileWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class FileWriterCache:
    """One ``FileWriter`` per directory, shared (as TF1's ``tf.summary.FileWriterCache``)."""

    _lock = threading.Lock()
    _cache: dict[str, FileWriter] = {}

    @staticmethod
    def get(logdir: str) -> FileWriter:
        """The writer for ``logdir``, created (with the default graph) on first use; one
        that was closed is reopened (a new event file), so a cached writer always writes.

        Thread-safety: safe to call from any thread."""
        key = os.path.abspath(str(logdir))
        with FileWriterCache._lock:
            w = FileWriterCache._cache.get(key)
            if w is None:
                w = FileWriter(logdir, graph=get_default_graph())
                FileWriterCache._cache[key] = w
            else:
                w.reopen()
            return w

    @staticmethod
    def clear() -> None:
        """Closes and forgets every cached writer."""
        with FileWriterCache._lock:
            for w in FileWriterCache._cache.values():
                w.close()
            FileWriterCache._cache.clear()
