"""The main job end to end: a real trainer process, a real server process, real HTTP."""

from __future__ import annotations

import json
import subprocess
import time

import httpx
import numpy as np
import pytest

from ckptsync import checkpoint as ckpt
from ckptsync.data import load_digits

from .conftest import MODEL, cli, env, serve


def test_served_version_advances_while_trainer_runs_and_every_answer_is_200(tmp_path, procs):
    ckpt_dir = tmp_path / "ckpts"
    port_file = tmp_path / "port"
    port = serve(procs, port_file, MODEL, ckpt_dir, "--model-name", "digits", "--device", "cpu:1")
    base = f"http://127.0.0.1:{port}"
    test = load_digits().test
    body = {"instances": test["x"].tolist()}
    with httpx.Client(timeout=30) as client:
        assert client.get(f"{base}/healthz").status_code == 200
        # Alive before the first checkpoint exists; predicts are refused with 503.
        r = client.post(f"{base}/v1/models/digits:predict", json=body)
        assert r.status_code == 503 and "error" in r.json()

        trainer = subprocess.Popen(
            cli("trainer", "run", "--model", MODEL, "--data", "digits", "--checkpoint-dir",
                str(ckpt_dir), "--steps", "400", "--save-every-steps", "50",
                "--max-steps-per-s", "150", "--device", "cpu:0", "--log-format", "json"),
            env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(trainer)
        versions, accuracies, statuses = [], [], []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            r = client.post(f"{base}/v1/models/digits:predict", json=body)
            if r.status_code == 503 and not versions:
                time.sleep(0.05)
                continue
            statuses.append(r.status_code)
            assert r.status_code == 200, r.text
            out = r.json()
            assert r.headers["X-Model-Version"] == str(out["model_version"])
            versions.append(int(out["model_version"]))
            preds = np.array([p["classes"] for p in out["predictions"]])
            accuracies.append(float(np.mean(preds == test["y"])))
            if trainer.poll() is not None and versions[-1] == 400:
                break
            time.sleep(0.1)
        out, err = trainer.communicate(timeout=30)
        assert trainer.returncode == 0, err
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["global_step"] == 400
        assert summary["held_out_accuracy"] >= 0.9
        status = client.get(f"{base}/v1/models/digits").json()
    assert set(statuses) == {200}
    assert versions == sorted(versions), "served versions must never go back"
    assert versions[0] < versions[-1] == 400
    assert len(set(versions)) >= 3, f"expected several versions to be served, got {set(versions)}"
    assert accuracies[-1] >= 0.9 and accuracies[-1] > accuracies[0]
    assert status["model_version_status"][0] == {
        "version": "400", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    assert ckpt.latest_checkpoint(str(ckpt_dir)).endswith("model.ckpt-400")


def test_demo_command_exits_zero_with_rising_accuracy(tmp_path):
    r = subprocess.run(
        cli("main", "demo", "--steps", "300", "--save-every-steps", "50", "--max-steps-per-s",
            "200", "--interval-s", "0.25", "--checkpoint-dir", str(tmp_path / "ckpts")),
        env=env(), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "served version" in r.stdout
    # Without --keep the summaries go with the work directory: no command to open them.
    assert "tensorboard --logdir" not in r.stdout and "removed at exit" in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("served accuracy"))
    first, last = (float(t) for t in line.split("first ")[1].split(" (")[0].split(" -> last "))
    assert last > first and last >= 0.9
    assert "0 failures" in line


def _cmdlines_with(text: str) -> list[str]:
    import os

    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in line:
            found.append(line)
    return found


@pytest.mark.parametrize("when", ["starting", "running"])
def test_demo_interrupted_exits_130_and_leaves_nothing(procs, when):
    import os
    import signal

    demo = subprocess.Popen(cli("main", "demo", "--max-steps-per-s", "50"), env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(demo)
    assert demo.stdout is not None
    first = demo.stdout.readline()  # "checkpoints: /tmp/ckptsync-demo-XXXX/ckpts"
    work = os.path.dirname(first.split("checkpoints: ", 1)[1].strip())
    deadline = time.monotonic() + 60
    while (when == "running" and time.monotonic() < deadline
           and "served version" not in demo.stdout.readline()):
        pass  # the table has started: trainer and server run
    demo.send_signal(signal.SIGINT)
    out, err = demo.communicate(timeout=60)
    assert demo.returncode == 130, err
    assert "ckptsync: interrupted" in err and "Traceback" not in err
    assert not os.path.exists(work)
    deadline = time.monotonic() + 10
    while _cmdlines_with(work) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _cmdlines_with(work) == []
