"""``infer serve --model-config-file``: several models in one real server process, each
with its own checkpoints and policy, over TF Serving's REST and gRPC APIs and the Open
Inference Protocol; config reloads from the file and over gRPC that leave the other
models serving; version labels; the CLI's errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ckptsync.serving import tfs_protos as pb
from ckptsync.serving.tensor_proto import make_ndarray

from .conftest import MLPServable, mlp_params, publish, wait_until
from .test_cli import infer, run_infer, wait_for_port
from .test_grpc import TF_CLIENT, TF_CLIENT_STATUS, code_of, free_port, predict_request, stop_server

X = np.random.default_rng(11).standard_normal((2, 4)).astype(np.float32)


def model_config(root: Path, models: dict[str, str]) -> str:
    """A model_config_list of ``models`` (name -> extra fields), each in root/ckpts-<name>
    with root/mlp.py."""
    return "model_config_list {\n" + "".join(
        f'  config {{ name: "{name}" base_path: "{root / f"ckpts-{name}"}" '
        f'model_file: "{root / "mlp.py"}" {extra} }}\n' for name, extra in models.items()) + "}\n"


def write_config(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)  # atomic, as a config management tool writes it


class Server:
    def __init__(self, proc: subprocess.Popen, http_port: int, grpc_port: int):
        self.proc, self.grpc_port = proc, grpc_port
        self.url = f"http://127.0.0.1:{http_port}"
        self.channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=30)

    def post(self, path: str, **kw) -> httpx.Response:
        return httpx.post(self.url + path, timeout=30, **kw)

    def grpc_call(self, service: str, method: str, request, response_type, metadata=None):
        fn = self.channel.unary_unary(f"/tensorflow.serving.{service}/{method}",
                                      request_serializer=lambda m: m.SerializeToString(),
                                      response_deserializer=response_type.FromString)
        return fn(request, timeout=30, metadata=metadata)

    def wait_ready(self, models: dict[str, int], timeout_s: float = 60.0) -> None:
        """Waits on /readyz until it lists exactly ``models`` at those versions."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            r = self.get("/readyz")
            if r.status_code == 200 and {n: m["model_version"] for n, m in
                                         r.json()["models"].items()} == models:
                return
            time.sleep(0.02)
        raise AssertionError(f"not ready with {models}: {r.status_code} {r.text}")


@pytest.fixture
def start(tmp_path, model_file) -> Iterator:
    servers: list[Server] = []

    def _start(config_text: str, *extra: str) -> Server:
        config = tmp_path / "models.config"
        write_config(config, config_text)
        port_file, grpc_port = tmp_path / f"port{len(servers)}", free_port()
        proc = subprocess.Popen(
            infer("serve", "--model-config-file", str(config), "--port", "0", "--port-file",
                  str(port_file), "--grpc-port", str(grpc_port), "--log-level", "info",
                  "--model-config-file-poll-wait-s", "0.05", *extra),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        servers.append(Server(proc, wait_for_port(proc, port_file), grpc_port))
        return servers[-1]

    yield _start
    for s in servers:
        stop_server(s)


def logits(step: int) -> np.ndarray:
    return MLPServable(two_outputs=True).run(mlp_params(step), {"x": X})["logits"]


def test_two_models_serve_their_own_checkpoints_on_every_protocol(start, tmp_path):
    server = start(model_config(tmp_path, {
        "ctr": "", "digits": "model_version_policy { specific { versions: 5 } }"}))
    publish(tmp_path / "ckpts-ctr", 3)
    for step in (5, 6):  # digits is pinned to 5: 6 is not served
        publish(tmp_path / "ckpts-digits", step)
    server.wait_ready({"ctr": 3, "digits": 5})
    for name, step in (("ctr", 3), ("digits", 5)):
        r = server.post(f"/v1/models/{name}:predict", json={"instances": X.tolist()})
        assert r.status_code == 200 and r.headers["x-model-version"] == str(step)
        np.testing.assert_allclose([p["logits"] for p in r.json()["predictions"]], logits(step),
                                   rtol=1e-6)
        v2 = server.post(f"/v2/models/{name}/infer", json={"inputs": [
            {"name": "x", "shape": [2, 4], "datatype": "FP32", "data": X.ravel().tolist()}]})
        assert v2.status_code == 200 and v2.json()["model_version"] == str(step)
        response = server.grpc_call("PredictionService", "Predict",
                                    predict_request(X, name=name), pb.PredictResponse)
        assert (response.model_spec.name, response.model_spec.version.value) == (name, step)
        np.testing.assert_array_equal(make_ndarray(response.outputs["logits"]), logits(step))
        status = server.get(f"/v1/models/{name}").json()["model_version_status"]
        assert [s["version"] for s in status if s["state"] == "AVAILABLE"] == [str(step)]
    # The pin holds: digits' version 6 is on disk but not served.
    assert server.get("/v1/models/digits/versions/6").status_code == 404
    # An unknown model names those served, on every protocol.
    r = server.post("/v1/models/nope:predict", json={"instances": X.tolist()})
    assert r.status_code == 404 and r.json() == {
        "error": 'model "nope" not found; this server serves "ctr", "digits"'}
    assert server.get("/v2/models/nope").status_code == 404
    code, message = code_of(lambda: server.grpc_call(
        "PredictionService", "Predict", predict_request(X, name="nope"), pb.PredictResponse))
    assert code == grpc.StatusCode.NOT_FOUND
    assert message == "Servable not found for request: Latest(nope)"
    # Server-wide routes see every model.
    assert server.get("/healthz").status_code == 200
    assert server.get("/v2/health/ready").status_code == 200
    assert server.get("/v2").json()["name"] == "ckptsync"
    metrics = server.get("/metrics").text
    assert 'ckptsync_served_version{model="ctr"} 3.0' in metrics
    assert 'ckptsync_served_version{model="digits"} 5.0' in metrics
    # Each model's own metrics, labelled with its name, in one family per metric.
    assert 'ckptsync_http_requests_total{code="200",model="digits",route="predict"} 1.0' \
        in metrics
    assert 'ckptsync_http_requests_total{code="404",model="digits",route="status"} 1.0' \
        in metrics
    assert metrics.count("# TYPE ckptsync_http_requests_total counter") == 1
    assert 'ckptsync_config_reloads_total{result="success"} 1.0' in metrics
    assert 'ckptsync_unrouted_requests_total{code="404"} 2.0' in metrics  # the two "nope"s
    health = health_pb2_grpc.HealthStub(server.channel)
    for service in ("", "ctr", "digits"):
        assert health.Check(health_pb2.HealthCheckRequest(service=service), timeout=30).status \
            == health_pb2.HealthCheckResponse.SERVING


def test_a_changed_config_file_adds_and_removes_models_without_dropping_the_others(
        start, tmp_path):
    server = start(model_config(tmp_path, {"a": ""}))
    publish(tmp_path / "ckpts-a", 2)
    publish(tmp_path / "ckpts-b", 4)
    server.wait_ready({"a": 2})
    stop, failures, answered = threading.Event(), [], [0]

    def load() -> None:  # model a is asked all along: no request of it may fail
        with httpx.Client(base_url=server.url, timeout=30) as client:
            while not stop.is_set():
                r = client.post("/v1/models/a:predict", json={"instances": X.tolist()})
                if r.status_code != 200 or r.headers["x-model-version"] != "2":
                    failures.append((r.status_code, r.text))
                answered[0] += 1

    thread = threading.Thread(target=load)
    thread.start()
    try:
        config = tmp_path / "models.config"
        write_config(config, model_config(tmp_path, {"a": "", "b": ""}))
        server.wait_ready({"a": 2, "b": 4})
        # A broken config is logged and changes nothing.
        write_config(config, model_config(tmp_path, {"a": "", "b": ""}).replace(
            'model_file: "', 'model_file: "/nonexistent'))
        write_config(config, "model_config_list { config { name: 'a' ")
        time.sleep(0.3)  # several polls of the file: the models must stay as they were
        server.wait_ready({"a": 2, "b": 4})
        write_config(config, model_config(tmp_path, {"b": ""}))
        deadline = time.monotonic() + 60
        while server.get("/v1/models/a").status_code != 404:
            assert time.monotonic() < deadline, "model a was not removed"
            time.sleep(0.02)
        stop.set()
        thread.join(timeout=60)
        # Requests to a after its removal are 404: count only those before.
        before_removal = [f for f in failures if f[0] != 404]
        assert not before_removal, before_removal[:3]
        assert answered[0] > 0
        server.wait_ready({"b": 4})
    finally:
        stop.set()
        thread.join(timeout=60)
    failed = re.search(r'ckptsync_config_reloads_total\{result="failure"\} ([0-9.]+)',
                       server.get("/metrics").text)
    assert failed and float(failed.group(1)) >= 1  # the broken configs were counted


def test_version_labels_route_rest_and_grpc_and_move_only_to_available_versions(
        start, tmp_path):
    summaries = tmp_path / "summaries"
    server = start(model_config(tmp_path, {
        "a": 'version_labels { key: "stable" value: 3 } '
             'version_labels { key: "canary" value: 9 }'}), "--summary-dir", str(summaries))
    publish(tmp_path / "ckpts-a", 3)
    server.wait_ready({"a": 3})
    r = server.post("/v1/models/a/labels/stable:predict", json={"instances": X.tolist()})
    assert r.status_code == 200 and r.headers["x-model-version"] == "3"
    assert server.get("/v1/models/a/labels/stable").json()["model_version_status"][0][
        "version"] == "3"
    # canary names 9, which has not been AVAILABLE: 503, and gRPC UNAVAILABLE.
    r = server.post("/v1/models/a/labels/canary:predict", json={"instances": X.tolist()})
    assert r.status_code == 503 and "has not been AVAILABLE since the label was set" in r.json()["error"]
    code, _ = code_of(lambda: server.grpc_call("PredictionService", "Predict", predict_request(
        name="a", version_label="canary"), pb.PredictResponse))
    assert code == grpc.StatusCode.UNAVAILABLE
    # An unknown label: TF Serving's INVALID_ARGUMENT (400 on REST).
    r = server.post("/v1/models/a/labels/nope:predict", json={"instances": X.tolist()})
    assert r.status_code == 400 and "Unrecognized servable version label: nope" in r.text
    response = server.grpc_call("PredictionService", "Predict", predict_request(
        name="a", version_label="stable"), pb.PredictResponse)
    assert response.model_spec.version.value == 3
    # 9 is published and served: canary moves to it; stable's 3 is no longer served.
    publish(tmp_path / "ckpts-a", 9)
    server.wait_ready({"a": 9})
    response = server.grpc_call("PredictionService", "Predict", predict_request(
        name="a", version_label="canary"), pb.PredictResponse)
    assert response.model_spec.version.value == 9
    assert server.get("/readyz").json()["models"]["a"]["version_labels"] == {
        "stable": 3, "canary": 9}
    r = server.post("/v1/models/a/labels/stable:predict", json={"instances": X.tolist()})
    assert r.status_code == 404
    # --summary-dir: each model's event files under <dir>/<name>.
    deadline = time.monotonic() + 30
    while not list((summaries / "a").glob("events.out.tfevents.*")):
        assert time.monotonic() < deadline, "no summaries for model a"
        time.sleep(0.05)


def test_reload_config_over_grpc_needs_the_admin_token_and_is_all_or_nothing(
        start, tmp_path):
    server = start(model_config(tmp_path, {"a": ""}), "--admin-token", "s3cret",
                   "--model-config-file-poll-wait-s", "0")
    publish(tmp_path / "ckpts-a", 2)
    publish(tmp_path / "ckpts-b", 8)
    server.wait_ready({"a": 2})
    request = pb.ReloadConfigRequest()
    from google.protobuf import text_format

    text_format.Parse(model_config(tmp_path, {"a": "", "b": ""}), request.config)

    def reload(req, token=None):
        metadata = None if token is None else [("authorization", f"Bearer {token}")]
        return server.grpc_call("ModelService", "HandleReloadConfigRequest", req,
                                pb.ReloadConfigResponse, metadata)

    assert code_of(lambda: reload(request))[0] == grpc.StatusCode.UNAUTHENTICATED
    assert code_of(lambda: reload(request, "wrong"))[0] == grpc.StatusCode.PERMISSION_DENIED
    assert reload(request, "s3cret").status.error_code == 0
    server.wait_ready({"a": 2, "b": 8})
    broken = pb.ReloadConfigRequest()
    text_format.Parse(model_config(tmp_path, {"c": ""}), broken.config)
    broken.config.model_config_list.config[0].model_file = str(tmp_path / "missing.py")
    code, message = code_of(lambda: reload(broken, "s3cret"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "missing.py is not a file" in message
    server.wait_ready({"a": 2, "b": 8})
    # GetModelStatus by name.
    status = pb.GetModelStatusRequest()
    status.model_spec.name = "b"
    got = server.grpc_call("ModelService", "GetModelStatus", status, pb.GetModelStatusResponse)
    assert [(s.version, s.state) for s in got.model_version_status] == [
        (8, pb.MODEL_STATES["AVAILABLE"])]


def test_reload_config_over_grpc_is_refused_without_an_admin_token(start, tmp_path):
    server = start(model_config(tmp_path, {"a": ""}))
    request = pb.ReloadConfigRequest()
    code, message = code_of(lambda: server.grpc_call(
        "ModelService", "HandleReloadConfigRequest", request, pb.ReloadConfigResponse,
        [("authorization", "Bearer x")]))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "--admin-token" in message


def test_bad_model_config_flags_are_one_line_usage_errors(tmp_path, model_file):
    config = tmp_path / "models.config"
    config.write_text(model_config(tmp_path, {"a": ""}))
    cases = [
        (["--model-config-file", str(config), "--model", str(model_file)],
         "--model-config-file names the models", 2),
        ([], "Missing option '--model'", 2),
        (["--model-config-file", str(tmp_path / "nope.config")], "cannot read the model "
         "config file", 2),
    ]
    (tmp_path / "broken.config").write_text("model_config_list { config { name: 'a' ")
    cases.append((["--model-config-file", str(tmp_path / "broken.config")],
                  "is not a ModelServerConfig in text format", 2))
    (tmp_path / "raises.py").write_text("def build_net(graph, device, mode):\n"
                                        "    raise RuntimeError('no graph today')\n")
    (tmp_path / "raises.config").write_text(model_config(tmp_path, {"a": ""}).replace(
        "mlp.py", "raises.py"))
    cases.append((["--model-config-file", str(tmp_path / "raises.config")],
                  'model "a": cannot build the model from', None))
    for args, message, code in cases:
        result = run_infer("serve", "--port", "0", "--grpc-port", "0", *args)
        lines = result.stderr.strip().splitlines()
        assert message in result.stderr, (args, result.stderr)
        assert result.returncode == (code or result.returncode) and result.returncode != 0
        assert "Traceback" not in result.stderr and len(lines) <= 3, result.stderr


EXITS = "import sys\n\n\ndef build_net(graph, device, mode):\n    sys.exit(4)\n"


def test_a_model_file_that_exits_fails_its_reload_and_the_server_keeps_serving(
        start, tmp_path):
    (tmp_path / "exits.py").write_text(EXITS)
    server = start(model_config(tmp_path, {"a": ""}), "--admin-token", "t0k")
    publish(tmp_path / "ckpts-a", 2)
    server.wait_ready({"a": 2})
    request = pb.ReloadConfigRequest()
    from google.protobuf import text_format

    with_exit = model_config(tmp_path, {"a": "", "c": ""}).replace(
        f'{tmp_path / "ckpts-c"}" model_file: "{tmp_path / "mlp.py"}',
        f'{tmp_path / "ckpts-c"}" model_file: "{tmp_path / "exits.py"}')
    text_format.Parse(with_exit, request.config)
    code, message = code_of(lambda: server.grpc_call(
        "ModelService", "HandleReloadConfigRequest", request, pb.ReloadConfigResponse,
        [("authorization", "Bearer t0k")]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and 'model "c"' in message
    # The same from the file: logged; the watcher goes on and applies the next change.
    config = tmp_path / "models.config"
    write_config(config, with_exit)
    deadline = time.monotonic() + 30
    while "failure\"} 2.0" not in server.get("/metrics").text:
        assert time.monotonic() < deadline, "the exiting reload was not counted"
        time.sleep(0.05)
    publish(tmp_path / "ckpts-b", 5)
    write_config(config, model_config(tmp_path, {"a": "", "b": ""}))
    server.wait_ready({"a": 2, "b": 5})


def test_sigterm_is_not_held_up_by_a_reload_stuck_in_a_model_files_import(start, tmp_path):
    marker = tmp_path / "importing"
    (tmp_path / "hangs.py").write_text(
        f"import pathlib, time\npathlib.Path({str(marker)!r}).touch()\ntime.sleep(3600)\n")
    server = start(model_config(tmp_path, {"a": ""}), "--drain-timeout-s", "3")
    publish(tmp_path / "ckpts-a", 2)
    server.wait_ready({"a": 2})
    write_config(tmp_path / "models.config", model_config(tmp_path, {"a": "", "h": ""}).replace(
        f'{tmp_path / "ckpts-h"}" model_file: "{tmp_path / "mlp.py"}',
        f'{tmp_path / "ckpts-h"}" model_file: "{tmp_path / "hangs.py"}'))
    deadline = time.monotonic() + 30
    while not marker.exists():  # the reload has begun: its import sleeps an hour
        assert time.monotonic() < deadline, "the reload never imported hangs.py"
        time.sleep(0.02)
    assert server.get("/v1/models/a").status_code == 200  # still serving meanwhile
    server.proc.terminate()
    assert server.proc.wait(timeout=30) == 0  # the drain (3 s) and the close, not the hour


def test_a_stable_and_a_canary_are_served_at_once_on_every_protocol(start, tmp_path):
    for step in (3, 5, 7):
        publish(tmp_path / "ckpts-a", step)
    server = start(model_config(tmp_path, {"a": (
        "model_version_policy { specific { versions: 3 versions: 7 } } "
        'version_labels { key: "stable" value: 3 } version_labels { key: "canary" value: 7 }')}),
        "--admin-token", "t0ken")
    wait_until(lambda: server.get("/readyz").status_code == 200
               and server.get("/readyz").json()["models"]["a"]["model_versions"] == [7, 3],
               timeout_s=60)
    assert server.get("/readyz").json()["models"]["a"]["model_version"] == 7
    for path, step in (("/v1/models/a", 7), ("/v1/models/a/versions/3", 3),
                       ("/v1/models/a/versions/7", 7), ("/v1/models/a/labels/stable", 3),
                       ("/v1/models/a/labels/canary", 7)):
        r = server.post(path + ":predict", json={"instances": X.tolist()})
        assert r.status_code == 200 and r.headers["x-model-version"] == str(step), path
        np.testing.assert_allclose([p["logits"] for p in r.json()["predictions"]],
                                   logits(step), rtol=1e-6)
    # 5 is on disk and named by no policy: not served, on any route; the answer names
    # what is, and comes before the body is looked at (as TF Serving's servable lookup).
    for r in (server.post("/v1/models/a/versions/5:predict", json={"instances": [[1]]}),
              server.get("/v1/models/a/versions/5/metadata"),
              server.post("/v2/models/a/versions/5/infer", content=b"{"),
              server.get("/v2/models/a/versions/5")):
        assert r.status_code == 404 and r.json()["error"] == (
            "version 5 is not being served (serving versions 7, 3)"), r.text
    assert server.get("/v1/models/a/versions/5").json() == {
        "error": "Could not find version 5 of model a"}  # TF Serving's GetModelStatus
    code, message = code_of(lambda: server.grpc_call(
        "PredictionService", "Predict", predict_request(X, name="a", version=5),
        pb.PredictResponse))
    assert (code, message) == (grpc.StatusCode.NOT_FOUND,
                               "version 5 is not being served (serving versions 7, 3)")
    # Status lists both versions, newest first, on REST and gRPC.
    status = server.get("/v1/models/a").json()["model_version_status"]
    assert [(s["version"], s["state"]) for s in status if s["state"] == "AVAILABLE"] == [
        ("7", "AVAILABLE"), ("3", "AVAILABLE")]
    request = pb.GetModelStatusRequest()
    request.model_spec.name = "a"
    response = server.grpc_call("ModelService", "GetModelStatus", request,
                                pb.GetModelStatusResponse)
    assert [s.version for s in response.model_version_status
            if s.state == pb.MODEL_STATES["AVAILABLE"]] == [7, 3]
    # gRPC by version and by label; the answer names the version that answered.
    for kw, step in (({"version": 3}, 3), ({"version_label": "canary"}, 7), ({}, 7)):
        response = server.grpc_call("PredictionService", "Predict",
                                    predict_request(X, name="a", **kw), pb.PredictResponse)
        assert response.model_spec.version.value == step, kw
        np.testing.assert_array_equal(make_ndarray(response.outputs["logits"]), logits(step))
    # The Open Inference Protocol: both versions in the metadata, each inferable.
    assert server.get("/v2/models/a").json()["versions"] == ["7", "3"]
    v2 = server.post("/v2/models/a/versions/3/infer", json={"inputs": [
        {"name": "x", "shape": [2, 4], "datatype": "FP32", "data": X.ravel().tolist()}]})
    assert v2.status_code == 200 and v2.json()["model_version"] == "3"
    assert server.get("/v2/models/a/versions/3/ready").status_code == 200
    # The config names the versions: :pin is refused, saying so.
    r = server.post("/v1/models/a:pin", json={"version": 5},
                    headers={"authorization": "Bearer t0ken"})
    assert r.status_code == 409 and "model_version_policy" in r.json()["error"]
    # Each version's metrics, apart.
    metrics = server.get("/metrics").text
    assert 'ckptsync_served_version{model="a",specific_version="3"} 3.0' in metrics
    assert 'ckptsync_served_version{model="a",specific_version="7"} 7.0' in metrics
    assert server.get("/healthz").status_code == 200
    # Promote the canary: 3 is unloaded, 7 keeps serving throughout.
    write_config(tmp_path / "models.config", model_config(tmp_path, {"a": (
        "model_version_policy { specific { versions: 7 } } "
        'version_labels { key: "stable" value: 7 }')}))
    wait_until(lambda: server.get("/readyz").json()["models"]["a"]["model_versions"] == [7],
               timeout_s=60)
    r = server.post("/v1/models/a/labels/stable:predict", json={"instances": X.tolist()})
    assert r.status_code == 200 and r.headers["x-model-version"] == "7"
    assert server.post("/v1/models/a/versions/3:predict",
                       json={"instances": X.tolist()}).status_code == 404
    # The unloaded version stays in status as END, as TF Serving's.
    status = server.get("/v1/models/a").json()["model_version_status"]
    assert [(s["version"], s["state"]) for s in status if s["version"] in ("7", "3")] == [
        ("7", "AVAILABLE"), ("3", "END")]


TF_CANARY_SCRIPT = r'''
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import grpc, numpy as np, tensorflow as tf
from tensorflow_serving.apis import (get_model_status_pb2, model_service_pb2_grpc,
    predict_pb2, prediction_service_pb2_grpc)
channel = grpc.insecure_channel(sys.argv[1])
stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
out = {}
for label in ("stable", "canary", ""):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "a"
    if label:
        request.model_spec.version_label = label
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.array(json.loads(sys.argv[2]),
                                                               np.float32)))
    response = stub.Predict(request, timeout=30)
    out[label or "none"] = [response.model_spec.version.value,
                            tf.make_ndarray(response.outputs["logits"]).tolist()]
MODEL = "a"
''' + TF_CLIENT_STATUS


def test_tf_servings_own_client_reaches_a_stable_and_a_canary_by_label(start, tmp_path):
    assert TF_CLIENT.exists(), f"{TF_CLIENT} is missing: scripts/setup-tf-client installs it"
    for step in (3, 7):
        publish(tmp_path / "ckpts-a", step)
    server = start(model_config(tmp_path, {"a": (
        "model_version_policy { specific { versions: 3 versions: 7 } } "
        'version_labels { key: "stable" value: 3 } version_labels { key: "canary" value: 7 }')}))
    wait_until(lambda: server.get("/readyz").status_code == 200
               and server.get("/readyz").json()["models"]["a"]["model_versions"] == [7, 3],
               timeout_s=60)
    r = subprocess.run([str(TF_CLIENT), "-c", TF_CANARY_SCRIPT,
                        f"127.0.0.1:{server.grpc_port}", json.dumps(X.tolist())],
                       capture_output=True, text=True, timeout=240,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for key, step in (("stable", 3), ("canary", 7), ("none", 7)):
        assert out[key][0] == step, key
        np.testing.assert_array_equal(np.array(out[key][1], np.float32), logits(step))
    assert [tuple(s) for s in out["status"]] == [(7, "AVAILABLE"), (3, "AVAILABLE")]
