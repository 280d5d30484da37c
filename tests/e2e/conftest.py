"""Helpers for tests that run real trainer and server processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = str(REPO / "examples" / "digits_mlp.py")


def cli(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"ckptsync.cli.{module}", *args]


def wait_for_file(path: Path, proc: subprocess.Popen, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"process exited early with {proc.returncode}")
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} did not appear within {timeout_s} s")


def serve(procs: list[subprocess.Popen], port_file: Path, model: str | Path,
          checkpoint_dir: str | Path, *args: str) -> int:
    """Starts ``infer serve --model MODEL --checkpoint-dir DIR --port 0 --port-file FILE
    ARGS`` (stdout dropped, stderr piped), adds it to ``procs`` (ended by that fixture),
    and returns its port once the port file names it (60 s at most)."""
    server = subprocess.Popen(
        cli("infer", "serve", "--grpc-port", "0", "--model", str(model), "--checkpoint-dir", str(checkpoint_dir),
            "--port", "0", "--port-file", str(port_file), *args),
        env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    procs.append(server)
    return int(wait_for_file(port_file, server))


def wait_ready(port: int, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    """Polls ``GET /readyz`` until it answers 200 (a version is served); fails if
    ``proc`` exits or ``timeout_s`` passes first."""
    import httpx

    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=5.0) as client:
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"the server exited with code {proc.returncode}"
            try:
                if client.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    raise AssertionError(f"the server on port {port} served no version in {timeout_s} s")


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONUNBUFFERED"] = "1"
    return e
