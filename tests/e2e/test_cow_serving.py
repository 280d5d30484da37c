"""A real ``infer serve`` following a directory of incremental checkpoints: each delta
on the served version is applied copy-on-write, and every answer equals that of the
model loaded in full from the same version."""

from __future__ import annotations

import json
import textwrap
import time
import urllib.request

import numpy as np

from ckptsync import checkpoint as ckpt
from ckptsync.serving import GraphServable

from .conftest import serve

VOCAB, DIM = 4096, 16  # a 256 KiB table: stored in blocks by the server

MODEL = textwrap.dedent(f"""
    import ckptsync as cs

    def build_net(graph, device, mode):
        with graph.as_default(), graph.device(device):
            ids = cs.placeholder(cs.int64, [None], name="ids")
            table = cs.get_variable("embedding/table", [{VOCAB}, {DIM}])
            w = cs.get_variable("dense/w", [{DIM}, 2])
            score = cs.matmul(cs.nn.embedding_lookup(table, ids), w, name="score")
            return cs.ModelSpec(inputs={{"ids": ids}}, outputs={{"score": score}})
""")


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as resp:
        return resp.read().decode()


def _predict(port: int, ids: list[int]) -> np.ndarray:
    body = json.dumps({"inputs": {"ids": ids}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models/model:predict", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return np.asarray(json.loads(resp.read())["outputs"], np.float32)


def _wait_served(port: int, version: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        status = json.loads(_get(port, "/v1/models/model"))["model_version_status"]
        if any(s["version"] == str(version) and s["state"] == "AVAILABLE" for s in status):
            return
        assert time.monotonic() < deadline, f"version {version} not served: {status}"
        time.sleep(0.05)


def test_infer_serve_follows_incremental_checkpoints_copy_on_write(tmp_path, procs):
    model = tmp_path / "model.py"
    model.write_text(MODEL)
    ckpts = tmp_path / "ckpts"
    ckpts.mkdir()
    rng = np.random.default_rng(0)
    params = {"embedding/table": rng.standard_normal((VOCAB, DIM)).astype(np.float32),
              "dense/w": rng.standard_normal((DIM, 2)).astype(np.float32)}
    full_model = GraphServable.from_model_file(model)
    ids = [0, 1, 63, 64, 2048, VOCAB - 1]
    prefixes: list[str] = []
    port = None
    for step in range(1, 8):
        changes: dict[str, np.ndarray | None] = {}
        if prefixes:
            rows = np.unique(np.concatenate([rng.integers(0, VOCAB, 20), [ids[step % 6]]]))
            params["embedding/table"][rows] = rng.standard_normal((rows.size, DIM))
            changes["embedding/table"] = rows
            if step % 3 == 0:
                params["dense/w"] = params["dense/w"] * 0.5
                changes["dense/w"] = None
        digests = {k: ckpt.variable_digest(ckpt.block_digests(v)) for k, v in params.items()}
        prefix = ckpt.write_incremental_checkpoint(
            str(ckpts / f"model.ckpt-{step}"), params, changes,
            prefixes[-1] if prefixes else None, digests, full=not prefixes or step == 5,
            global_step=step)
        prefixes.append(prefix)
        ckpt.update_checkpoint_state(str(ckpts), prefix, prefixes)
        if port is None:
            port = serve(procs, tmp_path / "port", model, ckpts, "--rescan-interval-s", "0.1")
        _wait_served(port, step)
        # The answer equals the model loaded in full from this version (composed).
        composed = ckpt.read_checkpoint(prefix, verify=True)
        want = full_model.run(composed, {"ids": np.asarray(ids, np.int64)})["score"]
        np.testing.assert_array_equal(_predict(port, ids), want, err_msg=f"step {step}")
    metrics = _get(port, "/metrics")
    kinds = {line.split("kind=\"")[1].split("\"")[0]: float(line.rsplit(" ", 1)[1])
             for line in metrics.splitlines()
             if line.startswith("ckptsync_loads_by_kind_total{")}
    # The first load is full; each later one applied its changes to the one before.
    assert kinds == {"copy_on_write": 6.0, "full": 1.0}, metrics
    served = json.loads(_get(port, "/healthz"))["loader"]["served"]
    assert served["version"] == 7 and served["load_kind"] == "copy_on_write"
    assert 0 < served["bytes_read"] < VOCAB * DIM * 4 / 10  # the changed rows, not the table
