"""TensorBoard scalars of a server (``infer serve --summary-dir``), written by one small
thread to an event file, next to the trainer's (``tensorboard --logdir`` of their common
parent shows both runs). The thread looks at the served version every ``poll_s`` (a
version served for less than that may go unrecorded) and writes rates every
``interval_s``.

Tags, at step = whole seconds since the writer started (TensorBoard's wall-time axis
lines them up with the trainer's): ``serving/version`` (the served global step; -1
before one), ``serving/requests_per_sec`` and ``serving/errors_per_sec`` (HTTP
responses, errors being status >= 400, over the last interval). Once per newly served
version, at step = that version: ``serving/load_secs`` (read + verify) and
``serving/publish_to_served_secs`` (checkpoint file written to version served).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from .. import summary as _summary
from ..summary.writer import write_or_warn
from .manager import ModelManager

__all__ = ["ServingSummaries"]

log = logging.getLogger("ckptsync.serving")
_REQUESTS = "ckptsync_http_requests"


def _request_counts(registry: Any) -> tuple[float, float]:
    """(all responses, responses with status >= 400) so far, from the app's registry."""
    total = errors = 0.0
    for family in registry.collect():
        if family.name != _REQUESTS:
            continue
        for s in family.samples:
            if s.name.endswith("_total"):
                total += s.value
                if int(s.labels.get("code", 0)) >= 400:
                    errors += s.value
    return total, errors


class ServingSummaries:
    """The writer thread: ``start()``, then ``close()`` (stops it, writes a last point and
    closes the file). ``registry`` is the HTTP app's Prometheus registry
    (``app.state.registry``) or None (no request rates)."""

    def __init__(self, manager: ModelManager, logdir: str, registry: Any = None,
                 interval_s: float = 1.0, poll_s: float = 0.05):
        self._manager, self._registry, self._interval = manager, registry, float(interval_s)
        self._poll = float(poll_s)
        self._writer = _summary.FileWriter(logdir)
        self._summary = _summary.Summary  # tensorboard's message class
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ckptsync-summaries",
                                        daemon=True)
        self._t0 = time.monotonic()
        self._last: tuple[float, float, float] | None = None
        self._version: int | None = None

    def start(self) -> ServingSummaries:
        self._thread.start()
        return self

    def _scalars(self, step: int, values: dict[str, float]) -> None:
        cls = self._summary
        write_or_warn(self._writer.add_summary,  # a full disk never stops serving
                      cls(value=[cls.Value(tag=k, simple_value=float(v))
                                 for k, v in values.items()]), step)

    def tick(self) -> None:
        """Writes one point of the rates and the served version (called by the thread
        every ``interval_s``; callable directly in tests)."""
        now = time.monotonic()
        step = int(now - self._t0)
        self.check_version()
        version = self._version
        values = {"serving/version": -1.0 if version is None else float(version)}
        if self._registry is not None:
            total, errors = _request_counts(self._registry)
            if self._last is not None and now > self._last[0]:
                dt = now - self._last[0]
                values["serving/requests_per_sec"] = (total - self._last[1]) / dt
                values["serving/errors_per_sec"] = (errors - self._last[2]) / dt
            self._last = (now, total, errors)
        self._scalars(step, values)
        write_or_warn(self._writer.flush)

    def check_version(self) -> None:
        """Writes ``load_secs`` and ``publish_to_served_secs`` of a newly served version."""
        snap = self._manager.current
        if snap is None or snap.version == self._version:
            return
        self._version = snap.version
        per_version = {"serving/load_secs": self._manager.stats.last_load_duration_s}
        if snap.created_unix_s:
            per_version["serving/publish_to_served_secs"] = max(
                0.0, snap.loaded_unix_s - snap.created_unix_s)
        self._scalars(int(snap.version), per_version)
        write_or_warn(self._writer.flush)

    def _run(self) -> None:
        next_tick = time.monotonic() + self._interval
        while not self._stop.wait(self._poll):
            try:
                if time.monotonic() >= next_tick:
                    next_tick += self._interval
                    self.tick()
                else:
                    self.check_version()
            except Exception:  # noqa: BLE001 - summaries never take the server down
                log.exception("writing serving summaries failed")

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        try:
            self.tick()
        except Exception:  # noqa: BLE001 - as in the thread
            log.exception("writing the last serving summaries failed")
        finally:
            self._writer.close()
