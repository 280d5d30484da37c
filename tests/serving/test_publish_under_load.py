"""A real `infer serve` process while a writer publishes 200 checkpoints under load over
REST (TF Serving's and the Open Inference Protocol's) and gRPC at once: every answer is 200 (OK), carries a published version and exactly
that version's outputs; readiness never drops once ready. Both watching modes (inotify
events, --poll), with --enable-batching, and as one model of a --model-config-file."""

from __future__ import annotations

import subprocess
import threading
import time

import grpc
import httpx
import numpy as np
import pytest

from ckptsync import checkpoint as ckpt
from ckptsync.serving import tfs_protos as pb
from ckptsync.serving.tensor_proto import make_ndarray, make_tensor_proto

from .conftest import MLPServable, mlp_params
from .conftest import publish as publish_to
from .test_cli import infer, wait_for_port
from .test_grpc import free_port

X = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
PUBLISHES = 200


def served_version(readyz: dict) -> int | None:
    """The version of model mlp in a /readyz answer (one model, or many)."""
    return readyz["models"]["mlp"]["model_version"] if "models" in readyz \
        else readyz.get("model_version")


def expected(step: int) -> dict[str, np.ndarray]:
    return MLPServable(two_outputs=True).run(mlp_params(step), {"x": X})


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["events", "poll", "batching", "model-config"])
def test_publish_200_checkpoints_under_load(tmp_path, model_file, mode):
    ckpts, port_file = tmp_path / "ckpts", tmp_path / "port"
    ckpts.mkdir()
    args = ["--rescan-interval-s", "0.05"] + (["--poll"] if mode == "poll" else []) + (
        ["--enable-batching"] if mode == "batching" else [])
    grpc_port = free_port()
    served = ["--model", str(model_file), "--checkpoint-dir", str(ckpts)]
    if mode == "model-config":  # the same model beside another, from a model config file
        config = tmp_path / "models.config"
        config.write_text(
            f'model_config_list {{ config {{ name: "mlp" base_path: "{ckpts}" '
            f'model_file: "{model_file}" }} config {{ name: "other" base_path: '
            f'"{tmp_path / "other"}" model_file: "{model_file}" }} }}')
        served = ["--model-config-file", str(config)]
        publish_to(tmp_path / "other", 1)  # so /readyz (every model) can be 200
    proc = subprocess.Popen(
        infer("serve", "--grpc-port", str(grpc_port), *served, "--port", "0",
              "--port-file", str(port_file), "--log-level", "warning", *args),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    published: list[int] = []
    answers: list[tuple[int, int | None, dict | None]] = []
    grpc_answers: list[tuple[str, int, np.ndarray | None, list | None]] = []
    v2_answers: list[tuple[int, dict | None]] = []
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

        def grpc_load() -> None:
            request = pb.PredictRequest()
            request.model_spec.name = "mlp"
            request.inputs["x"].CopyFrom(make_tensor_proto(X))
            with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                call = channel.unary_unary(
                    "/tensorflow.serving.PredictionService/Predict",
                    request_serializer=lambda m: m.SerializeToString(),
                    response_deserializer=pb.PredictResponse.FromString)
                while not stop.is_set():
                    try:
                        r = call(request, timeout=10)
                    except grpc.RpcError as e:
                        grpc_answers.append((e.code().name, -1, None, None))
                        continue
                    grpc_answers.append(("OK", r.model_spec.version.value,
                                         make_ndarray(r.outputs["logits"]),
                                         make_ndarray(r.outputs["classes"]).tolist()))

        def v2_load() -> None:
            body = {"inputs": [{"name": "x", "shape": list(X.shape), "datatype": "FP32",
                                "data": X.reshape(-1).tolist()}]}
            with httpx.Client(base_url=base, timeout=10.0) as c:
                while not stop.is_set():
                    r = c.post("/v2/models/mlp/infer", json=body)
                    v2_answers.append((r.status_code, r.json() if r.status_code == 200 else None))

        def readiness() -> None:
            with httpx.Client(base_url=base, timeout=10.0) as c:
                while not stop.is_set():
                    ready_codes.append(c.get("/readyz").status_code)
                    time.sleep(0.005)

        threads = [threading.Thread(target=load) for _ in range(2)]
        threads.append(threading.Thread(target=grpc_load))
        threads.append(threading.Thread(target=v2_load))
        threads.append(threading.Thread(target=readiness))
        for t in threads:
            t.start()
        try:
            for step in range(2, PUBLISHES + 1):
                publish(step)
                time.sleep(0.002)
            with httpx.Client(base_url=base, timeout=10.0) as client:
                deadline = time.monotonic() + 30
                while served_version(client.get("/readyz").json()) != PUBLISHES:
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
    assert grpc_answers and all(code == "OK" for code, *_ in grpc_answers), [
        a[:2] for a in grpc_answers if a[0] != "OK"][:3]
    grpc_seen = set()
    for _, version, logits, classes in grpc_answers:
        assert version in published
        grpc_seen.add(version)
        want = cache.setdefault(version, expected(version))
        # Bit-exact unbatched (binary floats); batched, BLAS may round a bigger forward
        # differently (any other version's outputs are far off: biases are its step).
        np.testing.assert_allclose(logits, want["logits"], rtol=0 if mode != "batching" else 1e-6,
                                   atol=0 if mode != "batching" else 1e-6)
        assert classes == want["classes"].tolist()
    assert len(grpc_seen) >= 10
    assert v2_answers and all(code == 200 for code, _ in v2_answers), [
        a for a in v2_answers if a[0] != 200][:3]
    v2_seen = set()
    for _, body in v2_answers:
        version = int(body["model_version"])
        assert version in published
        v2_seen.add(version)
        want = cache.setdefault(version, expected(version))
        outs = {o["name"]: o for o in body["outputs"]}
        np.testing.assert_allclose(
            np.array(outs["logits"]["data"], np.float32).reshape(outs["logits"]["shape"]),
            want["logits"], rtol=1e-6, atol=1e-6)
        assert outs["classes"]["data"] == want["classes"].tolist()
    assert len(v2_seen) >= 10
