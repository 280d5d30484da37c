"""`trainer run` as a subprocess: results, resume, signals and bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from ckptsync import checkpoint as ckpt

from .conftest import MODEL, cli, env


def run_trainer(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cli("trainer", "run", *args), env=env(), capture_output=True,
                          text=True, timeout=timeout)


def test_trains_digits_to_high_accuracy_with_checkpoints_at_the_promised_steps(tmp_path):
    d = tmp_path / "c"
    r = run_trainer("--model", MODEL, "--checkpoint-dir", str(d), "--steps", "500",
                    "--save-every-steps", "100", "--max-to-keep", "0", "--log-format", "json")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(ln) for ln in r.stdout.splitlines()]
    summary = lines[-1]
    progress = [ln for ln in lines if ln["event"] == "progress"]
    assert progress[0]["loss"] > progress[-1]["loss"]
    assert summary["held_out_accuracy"] >= 0.9
    # max_to_keep=0 keeps every file; as TF1, the state file then lists only the latest.
    steps = sorted(int(p.stem.rsplit("-", 1)[1]) for p in d.glob("model.ckpt-*.h5"))
    assert steps == [0, 100, 200, 300, 400, 500]
    assert ckpt.latest_checkpoint(str(d)) == str(d / "model.ckpt-500")


def test_restart_resumes_from_latest_checkpoint(tmp_path):
    d = str(tmp_path / "c")
    assert run_trainer("--model", MODEL, "--checkpoint-dir", d, "--steps", "100",
                       "--save-every-steps", "50").returncode == 0
    r = run_trainer("--model", MODEL, "--checkpoint-dir", d, "--steps", "150",
                    "--save-every-steps", "50", "--log-format", "json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.splitlines()[-1])
    assert summary["restored_from"].endswith("model.ckpt-100")
    assert summary["steps_run"] == 50 and summary["global_step"] == 150


def test_sigterm_saves_a_final_checkpoint_and_exits_zero(tmp_path):
    d = tmp_path / "c"
    p = subprocess.Popen(cli("trainer", "run", "--model", MODEL, "--checkpoint-dir", str(d),
                             "--steps", "100000", "--save-every-steps", "100000",
                             "--max-steps-per-s", "200"),
                         env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while ckpt.latest_checkpoint(str(d)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    latest = ckpt.latest_checkpoint(str(d))
    step = int(latest.rsplit("-", 1)[1])
    assert step > 0, "the final checkpoint must be written at the step reached"
    assert f"global step {step}" in out


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--model", "missing.py", "--checkpoint-dir", "{d}"], 2, "Model file not found: missing.py"),
    (["--model", MODEL, "--checkpoint-dir", "{d}", "--data", "cifar"], 2, "Unknown --data 'cifar'"),
    (["--model", MODEL, "--checkpoint-dir", "/proc/forbidden/ckpts"], 1,
     "cannot create --checkpoint-dir /proc/forbidden/ckpts"),
    (["--model", MODEL, "--checkpoint-dir", "{d}", "--save-every-steps", "5",
      "--save-every-secs", "5"], 2,
     "--save-every-steps and --save-every-secs are mutually exclusive"),
    (["--model", MODEL, "--checkpoint-dir", "{d}", "--steps", "0"], 2, "--steps"),
])
def test_bad_input_gives_one_clear_line_and_usage_exit_code(tmp_path, args, code, message):
    args = [a.replace("{d}", str(tmp_path / "c")) for a in args]
    r = run_trainer(*args, timeout=60)
    assert r.returncode == code, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert not list(tmp_path.glob("c/*.h5")), "nothing may be written on bad input"
    if code == 2 and "--steps" not in args and "--save-every-secs" not in args:
        assert not (tmp_path / "c").exists(), "a directory made for a refused run is removed"


def test_a_bad_writer_cpus_setting_is_a_usage_error_before_any_step(tmp_path, monkeypatch):
    monkeypatch.setenv("CKPTSYNC_WRITER_CPUS", "fast")
    r = run_trainer("--model", MODEL, "--checkpoint-dir", str(tmp_path / "c"), "--async-save",
                    timeout=60)
    assert r.returncode == 2, r.stderr
    assert "CKPTSYNC_WRITER_CPUS='fast': expected 'none' or a CPU list" in r.stderr
    assert "Traceback" not in r.stderr and not list(tmp_path.glob("c/*.h5"))


def test_model_file_without_build_net_is_a_usage_error(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    r = run_trainer("--model", str(bad), "--checkpoint-dir", str(tmp_path / "c"), timeout=60)
    assert r.returncode == 2
    assert "defines no build_net" in r.stderr and "Traceback" not in r.stderr
