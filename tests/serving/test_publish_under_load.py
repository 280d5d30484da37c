"""A real `infer serve` process while a writer publishes 200 checkpoints under load: every
answer is 200, carries a published version and exactly that version's outputs; readiness
never drops once ready. Both watching modes (inotify events, --poll)."""

from __future__ import annotations

import subprocess
import threading
import time

import httpx
import numpy as np
import pytest

from ckptsync import checkpoint as ckpt

from .conftest import MLPServable, mlp_params
from .test_cli import infer, wait_for_port

X = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
PUBLISHES = 200


def expected(step: int) -> dict[str, np.ndarray]:
    return MLPServable(two_outputs=True).run(mlp_params(step), {"x": X})


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["events", "poll"])
def test_publish_200_checkpoints_under_load(tmp_path, model_file, mode):
    ckpts, port_file = tmp_path / "ckpts", tmp_path / "port"
    ckpts.mkdir()
    args = ["--rescan-interval-s", "0.05"] + (["--poll"] if mode == "poll" else [])
    proc = subprocess.Popen(
        infer("serve", "--model", str(model_file), "--checkpoint-dir", str(ckpts), "--port", "0",
              "--port-file", str(port_file), "--log-level", "warning", *args),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    published: list[int] = []
    answers: list[tuple[int, int | None, dict | None]] = []
    ready_codes: list[int] = []
    stop = threading.Event()
    try:
        port = wait_for_port(proc, port_file)
        base = f"http://127.0.0.1:{port}"
        kept: list[str] = []

        def publish(step: int) -> None:
            prefix = str(ckpts / f"model.ckpt-{step}")
            ckpt.write_checkpoint(prefix, mlp_params(step), global_step=step)
            kept.append(prefix)
            ckpt.update_checkpoint_state(str(ckpts), prefix, kept[-5:])
            published.append(step)
            while len(kept) > 5:  # retention, as a Saver does
                ckpt.remove_checkpoint(kept.pop(0))

        publish(1)
        with httpx.Client(base_url=base, timeout=10.0) as client:
            deadline = time.monotonic() + 30
            while client.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline, "first checkpoint never loaded"
                time.sleep(0.01)

        def load() -> None:
            body = {"instances": X.tolist()}
            with httpx.Client(base_url=base, timeout=10.0) as c:
                while not stop.is_set():
                    r = c.post("/v1/models/mlp:predict", json=body)
                    data = r.json() if r.status_code == 200 else None
                    answers.append((r.status_code, r.headers.get("x-model-version"), data))

        def readiness() -> None:
            with httpx.Client(base_url=base, timeout=10.0) as c:
                while not stop.is_set():
                    ready_codes.append(c.get("/readyz").status_code)
                    time.sleep(0.005)

        threads = [threading.Thread(target=load) for _ in range(2)]
        threads.append(threading.Thread(target=readiness))
        for t in threads:
            t.start()
        try:
            for step in range(2, PUBLISHES + 1):
                publish(step)
                time.sleep(0.002)
            with httpx.Client(base_url=base, timeout=10.0) as client:
                deadline = time.monotonic() + 30
                while client.get("/readyz").json().get("model_version") != PUBLISHES:
                    assert time.monotonic() < deadline, "never served the last checkpoint"
                    time.sleep(0.01)
            time.sleep(0.05)
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stderr.close()

    assert len(published) == PUBLISHES
    assert answers and all(code == 200 for code, _, _ in answers), [
        a for a in answers if a[0] != 200
    ][:3]
    assert ready_codes and all(code == 200 for code in ready_codes)
    cache: dict[int, dict[str, np.ndarray]] = {}
    seen = set()
    for _, header, body in answers:
        version = body["model_version"]
        assert header == str(version) and version in published
        seen.add(version)
        want = cache.setdefault(version, expected(version))
        rows = body["predictions"]
        got_logits = np.array([row["logits"] for row in rows], np.float32)
        got_classes = [row["classes"] for row in rows]
        # Exactly this version's outputs (float32 round-trips through JSON exactly).
        np.testing.assert_allclose(got_logits, want["logits"], rtol=1e-6, atol=1e-6)
        assert got_classes == want["classes"].tolist()
    assert PUBLISHES in seen and len(seen) >= 10
