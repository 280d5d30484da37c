"""`infer serve --summary-dir`: a real server process writes the serving side's event
file (served version, load time, publish-to-served delay, requests and errors per
second) that TensorBoard's own EventAccumulator reads."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import pytest

from .conftest import publish

EventAccumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator").EventAccumulator
X = [[0.5, -1.0, 2.0, 0.25]]


def _scalars(logdir, tag):
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return acc.Scalars(tag) if tag in acc.Tags()["scalars"] else []


def _wait(predicate, proc, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert proc.poll() is None, f"infer serve exited with {proc.returncode}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_serve_writes_version_load_time_delay_and_request_rates(tmp_path, model_file):
    ckpts, port_file, logdir = tmp_path / "ckpts", tmp_path / "port", tmp_path / "logs" / "serve"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckptsync.cli.infer", "serve", "--grpc-port", "0", "--model", str(model_file),
         "--checkpoint-dir", str(ckpts), "--port", "0", "--port-file", str(port_file),
         "--rescan-interval-s", "0.2", "--log-level", "warning", "--summary-dir", str(logdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait(port_file.exists, proc)
        _wait(lambda: port_file.read_text().strip() != "", proc)
        base = f"http://127.0.0.1:{int(port_file.read_text())}"
        with httpx.Client(base_url=base, timeout=10.0) as client:
            publish(ckpts, 1)
            _wait(lambda: client.get("/readyz").status_code == 200, proc)
            _wait(lambda: _scalars(logdir, "serving/load_secs"), proc)  # seen (polled)
            publish(ckpts, 2)
            _wait(lambda: client.get("/v1/models/mlp").json()["model_version_status"][0]
                  ["version"] == "2", proc)
            deadline = time.monotonic() + 60
            while True:  # requests (and bad ones) until a point shows both rates
                assert proc.poll() is None and time.monotonic() < deadline
                for _ in range(5):
                    assert client.post("/v1/models/mlp:predict",
                                       json={"instances": X}).status_code == 200
                assert client.post("/v1/models/mlp:predict", content=b"{").status_code == 400
                errs = _scalars(logdir, "serving/errors_per_sec")
                if errs and max(e.value for e in errs) > 0 and \
                        max(e.value for e in _scalars(logdir, "serving/version")) == 2:
                    break
                time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert max(e.value for e in _scalars(logdir, "serving/requests_per_sec")) > 0
    loads = _scalars(logdir, "serving/load_secs")
    assert [e.step for e in loads] == [1, 2] and all(e.value >= 0 for e in loads)
    delays = _scalars(logdir, "serving/publish_to_served_secs")
    assert [e.step for e in delays] == [1, 2] and all(0 <= e.value < 60 for e in delays)


def test_a_failing_summary_write_is_one_warning_and_serving_goes_on(tmp_path, caplog):
    """The serving side's writes go through ``write_or_warn``: a logdir replaced by a
    regular file (the writer cannot make a new event file there) is one warning across
    ticks, never an exception out of ``tick`` (which the server's thread would log every
    second)."""
    import shutil
    import types

    from ckptsync.serving.summaries import ServingSummaries

    manager = types.SimpleNamespace(current=None, stats=None)
    logdir = tmp_path / "tb"
    summaries = ServingSummaries(manager, str(logdir))  # type: ignore[arg-type]
    try:
        summaries.tick()
        shutil.rmtree(logdir)
        logdir.write_text("not a directory")
        with caplog.at_level("WARNING"):
            summaries.tick()
            summaries.tick()
        failed = [r for r in caplog.records if "Writing summaries failed" in r.getMessage()]
        assert len(failed) == 1 and "not a directory" in failed[0].getMessage()
    finally:
        logdir.unlink()
        summaries.close()
