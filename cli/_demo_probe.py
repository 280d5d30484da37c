"""What ``ckptsync demo`` measures, besides the served metric: per checkpoint, its bytes
and its publish-to-served time.

* :func:`demo_task`: the held-out request and its metric for a model file: a binary
  model (an output ``logistic``) is scored by ROC AUC, on ``synthetic-ctr`` when its
  inputs are ``user_id`` and ``item_id``; any other by the accuracy of ``classes`` on
  the digits.
* :class:`SyncProbe`: a thread that watches the ``checkpoint`` state file (publish = its
  mtime when it first names a checkpoint; bytes = that checkpoint's data file) and asks
  the server for one row every ``interval_s`` (served = the first response carrying that
  version).

Thread-safety: a :class:`SyncProbe` runs in its own thread; :meth:`SyncProbe.take_new`
and :meth:`SyncProbe.records` may be called from another.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["DemoTask", "CheckpointSync", "SyncProbe", "demo_task"]

#: Held-out rows of ``synthetic-ctr`` the demo sends each time (within the server's default max_batch_size; AUC's noise ~0.01).
CTR_QUERY_ROWS = 4000


@dataclass(frozen=True)
class DemoTask:
    """The demo's data and metric for one model file.

    Attributes:
        data: the ``--data`` the trainer gets (``digits``, ``synthetic-ctr``, ...).
        model_name: the name the server serves it under.
        metric: ``"accuracy"`` or ``"auc"``.
        body: the JSON predict body (held-out rows).
        probe_body: a one-row predict body.
        score: the response's JSON -> the metric over the held-out rows.
        rows: how many rows ``body`` holds.
    """

    data: str
    model_name: str
    metric: str
    body: dict[str, Any]
    probe_body: dict[str, Any]
    score: Callable[[dict[str, Any]], float]
    rows: int


def demo_task(model: str, data: str | None) -> DemoTask:
    """The task for ``model`` (a model file) on ``data`` (None: by the model's inputs).

    Raises:
        ModelFileError: the model file cannot be built in PREDICT mode.
        DataError: ``data`` does not fit the model.
    """
    # Deferred: `ckptsync --help` and the other commands start without these.
    from ckptsync.data import load_dataset, roc_auc
    from ckptsync.datasets import CTR_FEATURES  # deferred: as above
    from ckptsync.serving import GraphServable  # deferred: as above

    signature = GraphServable.from_model_file(model).signature
    inputs = tuple(signature.inputs)
    if data is None:
        data = "synthetic-ctr" if sorted(inputs) == sorted(CTR_FEATURES) else "digits"
    test = load_dataset(data, inputs, ("y",)).test
    if "logistic" in signature.outputs:
        rows = {k: v[:CTR_QUERY_ROWS] for k, v in test.items()}
        y = rows["y"]

        def auc(out: dict[str, Any]) -> float:
            return roc_auc(y, np.asarray(out["outputs"]["logistic"], dtype=np.float64))

        name = "ctr" if data.startswith("synthetic-ctr") else "model"
        return DemoTask(data, name, "auc", {"inputs": {k: rows[k].tolist() for k in inputs}},
                        {"inputs": {k: rows[k][:1].tolist() for k in inputs}}, auc, len(y))
    (x_name,) = inputs if len(inputs) == 1 else (None,)
    if x_name is None or "classes" not in signature.outputs:
        from ckptsync.model_spec import ModelFileError  # deferred: as above

        raise ModelFileError(
            f"{model}: the demo scores a model with one input and a 'classes' output "
            f"(accuracy) or a 'logistic' output (AUC); it has inputs {list(inputs)} and "
            f"outputs {list(signature.outputs)}.")
    x, y = test[x_name], test["y"]

    def accuracy(out: dict[str, Any]) -> float:
        preds = np.asarray([p["classes"] for p in out["predictions"]])
        return float(np.mean(preds == y))

    return DemoTask(data, "digits", "accuracy", {"instances": x.tolist()},
                    {"instances": x[:1].tolist()}, accuracy, len(y))


@dataclass
class CheckpointSync:
    """One checkpoint's way from the trainer to the server.

    Attributes:
        version: its global step.
        bytes: its data file's size (``<prefix>.h5``), or None if it was gone.
        published_s: wall-clock time (``time.time()``) of the state file's mtime when it
            first named the checkpoint; None if never seen there.
        served_s: wall-clock time of the first probe response with this version; None
            if none (the server skipped it).
        kind: ``"delta"`` (an incremental checkpoint's changes) or ``"full"``; None if
            the file was gone.
    """

    version: int
    bytes: int | None = None
    published_s: float | None = None
    served_s: float | None = None
    kind: str | None = None

    @property
    def publish_to_served_s(self) -> float | None:
        if self.published_s is None or self.served_s is None:
            return None
        return self.served_s - self.published_s


def _file_facts(prefix: str) -> tuple[int | None, str | None]:
    """(bytes of ``prefix``'s data file, "delta" or "full"), None where it is gone."""
    from ckptsync import checkpoint as ckpt  # deferred: as the demo's other imports
    from ckptsync.errors import OpError  # deferred: as above

    try:
        size = os.stat(prefix + ".h5").st_size
        with ckpt.CheckpointReader(prefix) as reader:
            return size, "delta" if reader.is_delta else "full"
    except (OSError, OpError):
        return None, None


def _step_of(path: str) -> int | None:
    tail = os.path.basename(path).rpartition("-")[2]
    return int(tail) if tail.isdigit() else None


class SyncProbe(threading.Thread):
    """Watches ``checkpoint_dir``'s state file and probes ``url`` every ``interval_s``
    seconds with ``probe_body``; see the module docstring. Stop with :meth:`stop`."""

    def __init__(self, checkpoint_dir: str, url: str, probe_body: dict[str, Any],
                 interval_s: float = 0.02):
        super().__init__(name="demo-sync-probe", daemon=True)
        self._dir, self._url, self._body, self._interval = (checkpoint_dir, url, probe_body,
                                                             interval_s)
        self._state = os.path.join(checkpoint_dir, "checkpoint")
        self._lock = threading.Lock()
        self._records: dict[int, CheckpointSync] = {}
        self._reported: set[int] = set()
        self._stopping = threading.Event()
        self._mtime_ns: int | None = None

    def stop(self) -> None:
        self._stopping.set()
        self.join(10)

    def _record(self, version: int) -> CheckpointSync:
        rec = self._records.get(version)
        if rec is None:
            rec = self._records[version] = CheckpointSync(version)
        return rec

    def _watch_state(self) -> None:
        from ckptsync import checkpoint as ckpt  # deferred: as the demo's other imports

        try:
            mtime_ns = os.stat(self._state).st_mtime_ns
        except OSError:
            return
        if mtime_ns == self._mtime_ns:
            return
        self._mtime_ns = mtime_ns
        state = ckpt.get_checkpoint_state(self._dir)
        if state is None:
            return
        for path in [*state.all_model_checkpoint_paths, state.model_checkpoint_path]:
            step = _step_of(path)
            if step is None:
                continue
            with self._lock:
                rec = self._record(step)
                if rec.published_s is not None:
                    continue
                rec.published_s = mtime_ns / 1e9
            size, kind = _file_facts(path)
            with self._lock:
                rec.bytes, rec.kind = size, kind

    def run(self) -> None:
        import httpx  # deferred: as the demo's other imports

        with httpx.Client(timeout=10.0) as client:
            while not self._stopping.is_set():
                tick = time.monotonic()
                self._watch_state()
                try:
                    r = client.post(self._url, json=self._body)
                except httpx.HTTPError:
                    r = None
                now = time.time()
                if r is not None and r.status_code == 200:
                    version = int(r.json()["model_version"])
                    with self._lock:
                        rec = self._record(version)
                        if rec.served_s is None:
                            rec.served_s = now
                self._stopping.wait(max(0.0, self._interval - (time.monotonic() - tick)))

    def take_new(self) -> list[CheckpointSync]:
        """The checkpoints first served since the last call, and those published that
        a newer served one overtook (never served: the server went straight past them),
        by version."""
        with self._lock:
            served = [v for v, r in self._records.items() if r.served_s is not None]
            newest = max(served, default=-1)
            new = sorted((r for v, r in self._records.items() if v not in self._reported
                          and (r.served_s is not None
                               or (r.published_s is not None and v < newest))),
                         key=lambda r: r.version)
            self._reported.update(r.version for r in new)
            return [CheckpointSync(r.version, r.bytes, r.published_s, r.served_s, r.kind)
                    for r in new]

    def records(self) -> list[CheckpointSync]:
        """Every checkpoint seen (published or served), by version."""
        with self._lock:
            return [CheckpointSync(r.version, r.bytes, r.published_s, r.served_s, r.kind)
                    for _, r in sorted(self._records.items())]
