"""Prometheus metrics of the HTTP app: the collector exporting a :class:`ModelManager`'s
state (served version, reload counters, load durations, checkpoint age, pin, watcher and
loader health) at scrape time. :func:`.http.create_app` registers it in each app's
registry, next to the per-route request counter and latency histogram. A private
module: its names are for this package only.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector

from .manager import ModelManager

__all__ = ["ManagerCollector"]


class ManagerCollector(Collector):
    """Exports the manager's state at scrape time.

    Who calls what: the Prometheus registry calls :meth:`collect` at each scrape (on the
    thread answering ``GET /metrics``); it reads the manager's ``version``, ``stats``,
    ``current``, ``policy`` and ``health()``, all thread-safe. Holds no state of its own.
    """

    def __init__(self, manager: ModelManager, model_name: str):
        self._manager, self._model = manager, model_name

    def collect(self) -> Any:
        labels, model = ["model"], [self._model]
        version = self._manager.version
        g = GaugeMetricFamily(
            "ckptsync_served_version",
            "Version (global step) being served; -1 if none",
            labels=labels,
        )
        g.add_metric(model, -1 if version is None else version)
        yield g
        stats = self._manager.stats
        c = CounterMetricFamily(
            "ckptsync_reloads", "Checkpoint loads by result", labels=["model", "result"]
        )
        c.add_metric([self._model, "success"], stats.reloads_succeeded)
        c.add_metric([self._model, "failure"], stats.reloads_failed)
        s = SummaryMetricFamily(
            "ckptsync_load_duration_seconds", "Read+verify time of successful loads", labels=labels
        )
        s.add_metric(
            model, count_value=stats.reloads_succeeded, sum_value=stats.load_duration_s_sum
        )
        yield s
        last = GaugeMetricFamily(
            "ckptsync_last_load_duration_seconds",
            "Duration of the last successful load",
            labels=labels,
        )
        last.add_metric(model, stats.last_load_duration_s)
        yield last
        c.add_metric([self._model, "rejected"], stats.reloads_rejected)
        yield c
        kinds = CounterMetricFamily(
            "ckptsync_loads_by_kind", "Successful loads by how they were made (full read, "
            "or copy-on-write from the served version)", labels=["model", "kind"])
        kinds.add_metric([self._model, "copy_on_write"], stats.copy_on_write_loads)
        kinds.add_metric([self._model, "full"],
                         stats.reloads_succeeded - stats.copy_on_write_loads)
        yield kinds
        read = CounterMetricFamily("ckptsync_load_read_bytes",
                                   "Parameter bytes read by successful loads", labels=labels)
        read.add_metric(model, stats.bytes_read_sum)
        yield read
        last_read = GaugeMetricFamily("ckptsync_last_load_read_bytes",
                                      "Parameter bytes the last successful load read",
                                      labels=labels)
        last_read.add_metric(model, stats.last_bytes_read)
        yield last_read
        snap = self._manager.current
        age = GaugeMetricFamily(
            "ckptsync_checkpoint_age_seconds",
            "Seconds since the served checkpoint's file was written; -1 if none",
            labels=labels,
        )
        age.add_metric(model, -1.0 if snap is None else max(0.0, time.time() - snap.created_unix_s))
        yield age
        pinned = self._manager.policy.pinned
        p = GaugeMetricFamily(
            "ckptsync_pinned_version", "The pinned version; -1 under the latest policy",
            labels=labels,
        )
        p.add_metric(model, -1 if pinned is None else pinned)
        yield p
        health = self._manager.health()
        watcher, loader = health["watcher"], health["loader"]
        alive = GaugeMetricFamily(
            "ckptsync_watcher_alive",
            "1 while the checkpoint directory watcher (observer and rescan timer) runs",
            labels=["model", "mode"],
        )
        alive.add_metric([self._model, watcher["mode"]], 1 if watcher["alive"] else 0)
        yield alive
        restarts = CounterMetricFamily(
            "ckptsync_watcher_restarts",
            "Times the checkpoint watcher (its observer or its process) was restarted",
            labels=labels,
        )
        restarts.add_metric(model, watcher["restarts"])
        yield restarts
        la = GaugeMetricFamily(
            "ckptsync_loader_alive", "1 while the load thread runs and is not stuck",
            labels=labels,
        )
        la.add_metric(model, 1 if loader["alive"] else 0)
        yield la
        rr = CounterMetricFamily(
            "ckptsync_reader_restarts",
            "Times the checkpoint reader process was replaced after dying", labels=labels,
        )
        rr.add_metric(model, loader["reader_restarts"])
        yield rr
