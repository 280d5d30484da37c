"""Exact resume after SIGKILL, NaN handling, signals, env options, data errors."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import numpy as np
import pytest

from ckptsync import checkpoint as ckpt

from .conftest import MODEL, REPO, cli, env


def _params(prefix: str) -> dict[str, np.ndarray]:
    return ckpt.read_checkpoint(prefix)


@pytest.mark.parametrize("extra", [[], ["--incremental", "--full-checkpoint-every-n", "3"]],
                         ids=["full", "incremental"])
def test_sigkill_then_restart_gives_bit_identical_parameters(tmp_path, extra):
    common = ["--model", MODEL, "--steps", "240", "--save-every-steps", "40", "--seed", "3",
              *extra]
    straight = tmp_path / "straight"
    r = subprocess.run(cli("trainer", "run", *common, "--checkpoint-dir", str(straight)),
                       env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    want = _params(str(straight / "model.ckpt-240"))

    killed = tmp_path / "killed"
    p = subprocess.Popen(cli("trainer", "run", *common, "--checkpoint-dir", str(killed),
                             "--max-steps-per-s", "300"),
                         env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            latest = ckpt.latest_checkpoint(str(killed))
            if latest and int(latest.rsplit("-", 1)[1]) >= 80:
                break
            time.sleep(0.02)
        time.sleep(0.07)  # land between checkpoints
        p.send_signal(signal.SIGKILL)
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    killed_at = int(ckpt.latest_checkpoint(str(killed)).rsplit("-", 1)[1])
    assert 80 <= killed_at < 240
    r = subprocess.run(cli("trainer", "run", *common, "--checkpoint-dir", str(killed),
                           "--log-format", "json"),
                       env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.splitlines()[-1])
    assert summary["restored_from"].endswith(f"model.ckpt-{killed_at}")
    assert summary["steps_run"] == 240 - killed_at
    got = _params(str(killed / "model.ckpt-240"))
    assert sorted(got) == sorted(want)
    for name in want:
        assert np.array_equal(got[name], want[name]), f"{name} differs after resume"


def test_nan_loss_exits_1_and_never_publishes_a_nan_checkpoint(tmp_path):
    d = tmp_path / "c"
    r = subprocess.run(cli("trainer", "run", "--model", MODEL, "--checkpoint-dir", str(d),
                           "--steps", "400", "--save-every-steps", "1",
                           "--learning-rate", "1e9"),
                       env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "NaN" in r.stderr and "Traceback" not in r.stderr
    for f in d.glob("*.h5"):
        for name, arr in ckpt.read_checkpoint(str(f)[:-3]).items():
            assert np.all(np.isfinite(arr)), f"{f.name}:{name} is not finite"
    latest = ckpt.latest_checkpoint(str(d))
    assert latest is not None and ckpt.read_checkpoint(latest)


def test_sigint_saves_and_exits_130_and_env_options_apply(tmp_path):
    d = tmp_path / "c"
    e = env()
    e.update({"CKPTSYNC_MODEL": MODEL, "CKPTSYNC_CHECKPOINT_DIR": str(d),
              "CKPTSYNC_STEPS": "100000", "CKPTSYNC_SAVE_EVERY_STEPS": "100000",
              "CKPTSYNC_MAX_STEPS_PER_S": "200"})
    p = subprocess.Popen(cli("trainer", "run"), env=e, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while ckpt.latest_checkpoint(str(d)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err
    assert "interrupted by SIGINT" in err
    assert int(ckpt.latest_checkpoint(str(d)).rsplit("-", 1)[1]) > 0


def test_labels_out_of_range_fail_before_the_first_step(tmp_path):
    data = tmp_path / "d.npz"
    np.savez(data, x=np.random.rand(100, 64).astype(np.float32),
             y=np.full(100, 12, np.int64))
    d = tmp_path / "c"
    r = subprocess.run(cli("trainer", "run", "--model", MODEL, "--checkpoint-dir", str(d),
                           "--data", str(data), "--steps", "10"),
                       env=env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "label value of 12" in r.stderr and "[0, 10)" in r.stderr
    assert not list(d.glob("*.h5"))


def test_npz_shapes_that_do_not_fit_are_refused(tmp_path):
    data = tmp_path / "d.npz"
    np.savez(data, x=np.zeros((50, 32), np.float32), y=np.zeros(50, np.int64))
    r = subprocess.run(cli("trainer", "run", "--model", MODEL, "--checkpoint-dir",
                           str(tmp_path / "c"), "--data", str(data), "--steps", "10"),
                       env=env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "'x'" in r.stderr and "[40, 32]" in r.stderr and "(?, 64)" in r.stderr


def test_mnist_example_trains_on_idx_files(tmp_path):
    import gzip
    import struct

    rng = np.random.default_rng(0)
    d = tmp_path / "mnist"
    d.mkdir()
    for name, arr in (("train-images-idx3-ubyte", rng.integers(0, 256, (128, 28, 28))),
                      ("train-labels-idx1-ubyte", rng.integers(0, 10, 128)),
                      ("t10k-images-idx3-ubyte", rng.integers(0, 256, (32, 28, 28))),
                      ("t10k-labels-idx1-ubyte", rng.integers(0, 10, 32))):
        head = struct.pack(">BBBB", 0, 0, 8, arr.ndim) + struct.pack(">" + "I" * arr.ndim,
                                                                   *arr.shape)
        with gzip.open(d / f"{name}.gz", "wb") as f:
            f.write(head + arr.astype(np.uint8).tobytes())
    r = subprocess.run(cli("trainer", "run", "--model", str(REPO / "examples" / "mnist_mlp.py"),
                           "--checkpoint-dir", str(tmp_path / "c"), "--data", f"mnist:{d}",
                           "--steps", "20", "--save-every-steps", "10", "--log-format", "json"),
                       env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])["global_step"] == 20


def _train(d, steps, *extra):
    return subprocess.run(cli("trainer", "run", "--model", MODEL, "--checkpoint-dir", str(d),
                              "--steps", str(steps), "--save-every-steps", "50",
                              "--log-format", "json", *extra),
                          env=env(), capture_output=True, text=True, timeout=120)


def test_damaged_latest_checkpoint_resumes_from_the_newest_good_one(tmp_path):
    d = tmp_path / "c"
    assert _train(d, 150).returncode == 0
    latest = d / "model.ckpt-150.h5"
    latest.write_bytes(latest.read_bytes()[:1000])  # truncated
    r = _train(d, 200)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.splitlines()[-1])
    assert summary["restored_from"].endswith("model.ckpt-100")
    assert "Not resuming from" in r.stderr and "model.ckpt-150" in r.stderr
    assert summary["global_step"] == 200


def test_missing_latest_file_falls_back_and_broken_state_file_refuses(tmp_path):
    d = tmp_path / "c"
    assert _train(d, 100).returncode == 0
    (d / "model.ckpt-100.h5").unlink()
    r = _train(d, 120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])["restored_from"].endswith("model.ckpt-50")
    (d / "checkpoint").write_bytes(b"\x00\xffgarbage")
    before = sorted(p.name for p in d.glob("*.h5"))
    r = _train(d, 150)
    assert r.returncode == 1
    assert "state file" in r.stderr and "--no-resume" in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in d.glob("*.h5")) == before, "nothing may be overwritten"
    r = _train(d, 10, "--no-resume")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])["restored_from"] is None


def test_a_directory_written_by_another_model_names_the_way_out(tmp_path):
    # A new user's walkthrough: the README's library example saved into the directory a
    # trainer had used; the trainer's restart then failed with TF1's bare restore error.
    ckpt_dir = tmp_path / "ckpts"
    ckpt_dir.mkdir()
    prefix = ckpt.write_checkpoint(str(ckpt_dir / "model.ckpt-1"),
                                   {"dense0/w": np.zeros((64, 10), np.float32)}, global_step=1)
    ckpt.update_checkpoint_state(str(ckpt_dir), prefix)
    r = subprocess.run(cli("trainer", "run", "--model", MODEL, "--data", "digits",
                           "--checkpoint-dir", str(ckpt_dir), "--steps", "5"),
                       env=env(), capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Key dense0/b not found in checkpoint" in r.stderr
    assert (f"resuming from {prefix}: the checkpoints in {ckpt_dir} were written by a "
            "different model; pass --no-resume") in r.stderr
    assert "Traceback" not in r.stderr
