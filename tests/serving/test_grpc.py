"""TF Serving's gRPC API of a real ``infer serve --grpc-port`` process, called with
grpcio over loopback (messages from ``ckptsync.serving.tfs_protos``), and with TF
Serving's own Python client (``tensorflow-serving-api``, in its own venv, as a
subprocess)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ckptsync.serving import tfs_protos as pb
from ckptsync.serving.tensor_proto import make_ndarray, make_tensor_proto

from .conftest import MLPServable, mlp_params, publish
from .test_cli import infer, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
TF_CLIENT = ROOT / os.environ.get("TF_CLIENT_VENV", ".tf-client-venv") / "bin" / "python"
X = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, proc: subprocess.Popen, http_port: int, grpc_port: int, ckpts: Path):
        self.proc, self.http_port, self.grpc_port, self.ckpts = proc, http_port, grpc_port, ckpts
        self.channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")

    def call(self, service: str, method: str, request, response_type, timeout_s: float = 30.0):
        fn = self.channel.unary_unary(f"/tensorflow.serving.{service}/{method}",
                                      request_serializer=lambda m: m.SerializeToString(),
                                      response_deserializer=response_type.FromString)
        return fn(request, timeout=timeout_s)

    def predict(self, request):
        return self.call("PredictionService", "Predict", request, pb.PredictResponse)

    def wait_serving(self, timeout_s: float = 60.0) -> None:
        """Waits on the health service's Watch stream until SERVING."""
        stub = health_pb2_grpc.HealthStub(self.channel)
        for reply in stub.Watch(health_pb2.HealthCheckRequest(service="mlp"), timeout=timeout_s):
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return


@pytest.fixture
def start(tmp_path, model_file) -> Iterator:
    servers: list[Server] = []

    def _start(*extra: str) -> Server:
        ckpts, port_file = tmp_path / "ckpts", tmp_path / f"port{len(servers)}"
        grpc_port = free_port()
        proc = subprocess.Popen(
            infer("serve", "--model", str(model_file), "--checkpoint-dir", str(ckpts),
                  "--port", "0", "--port-file", str(port_file), "--grpc-port", str(grpc_port),
                  "--model-name", "mlp", "--log-level", "warning", *extra),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        server = Server(proc, wait_for_port(proc, port_file), grpc_port, ckpts)
        servers.append(server)
        return server

    yield _start
    for s in servers:
        stop_server(s)


def stop_server(server) -> None:
    """Closes ``server.channel``, SIGTERMs ``server.proc`` and asserts a clean exit 0."""
    server.channel.close()
    server.proc.terminate()
    try:
        assert server.proc.wait(timeout=30) == 0
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(timeout=10)
        server.proc.stderr.close()


def predict_request(x: np.ndarray = X, **spec) -> object:
    request = pb.PredictRequest()
    request.model_spec.name = spec.pop("name", "mlp")
    if "version" in spec:
        request.model_spec.version.value = spec.pop("version")
    for k, v in spec.items():
        setattr(request.model_spec, k, v)
    request.inputs["x"].CopyFrom(make_tensor_proto(x))
    return request


def code_of(fn) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as e:
        fn()
    return e.value.code(), e.value.details()


def test_predict_answers_the_served_versions_outputs_and_names_it(start):
    server = start()
    publish(server.ckpts, 7)
    server.wait_serving()
    response = server.predict(predict_request())
    want = MLPServable(two_outputs=True).run(mlp_params(7), {"x": X})
    assert response.model_spec.name == "mlp"
    assert response.model_spec.version.value == 7
    assert response.model_spec.signature_name == "serving_default"
    assert set(response.outputs) == {"logits", "classes"}
    np.testing.assert_array_equal(make_ndarray(response.outputs["logits"]), want["logits"])
    np.testing.assert_array_equal(make_ndarray(response.outputs["classes"]), want["classes"])
    # The same answer as the REST API's, from the same server.
    rest = httpx.post(f"http://127.0.0.1:{server.http_port}/v1/models/mlp:predict",
                      json={"instances": X.tolist()}, timeout=30).json()
    np.testing.assert_array_equal(
        np.array([row["logits"] for row in rest["predictions"]], np.float32),
        make_ndarray(response.outputs["logits"]))
    # output_filter and a specific version
    only = server.predict(predict_request(version=7))
    filtered = predict_request()
    filtered.output_filter.append("classes")
    assert set(server.predict(filtered).outputs) == {"classes"}
    assert only.model_spec.version.value == 7


def test_errors_carry_tf_servings_status_codes(start):
    server = start("--max-request-bytes", "4096", "--max-batch-size", "8")
    # Nothing served yet: UNAVAILABLE, with the reason.
    code, message = code_of(lambda: server.predict(predict_request()))
    assert code == grpc.StatusCode.UNAVAILABLE and "checkpoint" in message
    publish(server.ckpts, 3)
    server.wait_serving()
    cases = [
        (predict_request(name="other"), grpc.StatusCode.NOT_FOUND,
         "Servable not found for request: Latest(other)"),
        (predict_request(version=2), grpc.StatusCode.NOT_FOUND, "version 2 is not being served"),
        (predict_request(version_label="stable"), grpc.StatusCode.INVALID_ARGUMENT,
         "Unrecognized servable version label: stable"),
        (predict_request(signature_name="nope"), grpc.StatusCode.FAILED_PRECONDITION,
         'Serving signature key "nope" not found.'),
        (predict_request(np.zeros((2, 5), np.float32)), grpc.StatusCode.INVALID_ARGUMENT,
         "input 'x' must have shape"),
        (predict_request(np.zeros((9, 4), np.float32)), grpc.StatusCode.INVALID_ARGUMENT,
         "max_batch_size of 8"),
        (predict_request(np.zeros((2000, 4), np.float32)), grpc.StatusCode.RESOURCE_EXHAUSTED,
         ""),
    ]
    unknown_input = predict_request()
    unknown_input.inputs["y"].CopyFrom(make_tensor_proto(X))
    cases.append((unknown_input, grpc.StatusCode.INVALID_ARGUMENT, "unexpected ['y']"))
    bad_filter = predict_request()
    bad_filter.output_filter.append("nope")
    cases.append((bad_filter, grpc.StatusCode.INVALID_ARGUMENT,
                  "output tensor alias not found in signature: nope"))
    huge = predict_request()  # a few bytes asking for 2**40 rows: refused before decoding
    huge.inputs["x"].Clear()
    huge.inputs["x"].dtype = pb.DATA_TYPES["DT_FLOAT"]
    huge.inputs["x"].tensor_shape.dim.add(size=2**40)
    huge.inputs["x"].tensor_shape.dim.add(size=4)
    huge.inputs["x"].float_val.append(1.0)
    cases.append((huge, grpc.StatusCode.RESOURCE_EXHAUSTED, "more than the server's limit"))
    broken = predict_request()
    broken.inputs["x"].tensor_content = b"\0" * 7
    cases.append((broken, grpc.StatusCode.INVALID_ARGUMENT, "tensor_content holds 7 bytes"))
    duplicate = predict_request()
    duplicate.output_filter.extend(["logits", "logits"])
    cases.append((duplicate, grpc.StatusCode.INVALID_ARGUMENT,
                  "duplicate output tensor alias: logits"))  # TF Serving's words
    for bad in (np.nan, np.inf):  # float32 as float_val and as tensor_content
        x = X.copy()
        x[1, 2] = bad
        cases.append((predict_request(x), grpc.StatusCode.INVALID_ARGUMENT,
                      "input 'x' contains NaN or Infinity"))
        as_values = predict_request(x)
        as_values.inputs["x"].ClearField("tensor_content")
        as_values.inputs["x"].ClearField("float_val")
        as_values.inputs["x"].tensor_content = x.tobytes()
        cases.append((as_values, grpc.StatusCode.INVALID_ARGUMENT, "contains NaN or Infinity"))
    amplified = predict_request()  # a few bytes for 100 rows: refused by rows, undecoded
    amplified.inputs["x"].Clear()
    amplified.inputs["x"].dtype = pb.DATA_TYPES["DT_DOUBLE"]
    amplified.inputs["x"].tensor_shape.dim.add(size=100)
    amplified.inputs["x"].tensor_shape.dim.add(size=4)
    amplified.inputs["x"].double_val.append(1.0)
    cases.append((amplified, grpc.StatusCode.INVALID_ARGUMENT,
                  "input 'x' has a batch of 100 rows, more than the server's max_batch_size"))
    odd_complex = predict_request()
    odd_complex.inputs["x"].Clear()
    odd_complex.inputs["x"].dtype = pb.DATA_TYPES["DT_COMPLEX64"]
    odd_complex.inputs["x"].tensor_shape.dim.add(size=1)
    odd_complex.inputs["x"].scomplex_val.extend([1.0, 2.0, 3.0])
    cases.append((odd_complex, grpc.StatusCode.INVALID_ARGUMENT, "must be even"))
    for request, want_code, want_text in cases:
        code, message = code_of(lambda request=request: server.predict(request))
        assert code == want_code and want_text in message, (want_code, code, message)
    # Bytes that are no PredictRequest: INVALID_ARGUMENT naming the message, not UNKNOWN.
    raw = server.channel.unary_unary("/tensorflow.serving.PredictionService/Predict",
                                     request_serializer=lambda b: b,
                                     response_deserializer=pb.PredictResponse.FromString)
    code, message = code_of(lambda: raw(b"\xff\xff\xff", timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, message)
    assert "not a valid tensorflow.serving.PredictRequest message" in message
    # The server still answers after every refusal.
    assert server.predict(predict_request()).model_spec.version.value == 3


def test_model_metadata_and_status(start):
    server = start()
    publish(server.ckpts, 4)
    server.wait_serving()
    request = pb.GetModelMetadataRequest()
    request.model_spec.name = "mlp"
    request.metadata_field.append("signature_def")
    response = server.call("PredictionService", "GetModelMetadata", request,
                           pb.GetModelMetadataResponse)
    assert response.model_spec.version.value == 4
    sigs = pb.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(sigs)
    sig = sigs.signature_def["serving_default"]
    assert sig.method_name == "tensorflow/serving/predict"
    assert sig.inputs["x"].dtype == pb.DATA_TYPES["DT_FLOAT"]
    assert [d.size for d in sig.inputs["x"].tensor_shape.dim] == [-1, 4]
    assert sig.outputs["classes"].dtype == pb.DATA_TYPES["DT_INT64"]
    request.metadata_field[0] = "nope"
    code, message = code_of(lambda: server.call(
        "PredictionService", "GetModelMetadata", request, pb.GetModelMetadataResponse))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "nope is not supported" in message

    status_request = pb.GetModelStatusRequest()
    status_request.model_spec.name = "mlp"
    status = server.call("ModelService", "GetModelStatus", status_request,
                         pb.GetModelStatusResponse)
    (entry,) = status.model_version_status
    assert (entry.version, entry.state, entry.status.error_code) == (
        4, pb.MODEL_STATES["AVAILABLE"], 0)
    status_request.model_spec.version.value = 99
    code, message = code_of(lambda: server.call(
        "ModelService", "GetModelStatus", status_request, pb.GetModelStatusResponse))
    assert code == grpc.StatusCode.NOT_FOUND and "version 99" in message
    # The calls are counted on /metrics.
    metrics = httpx.get(f"http://127.0.0.1:{server.http_port}/metrics", timeout=30).text
    assert 'ckptsync_grpc_requests_total{code="OK",method="GetModelMetadata"} 1.0' in metrics
    assert 'ckptsync_grpc_requests_total{code="NOT_FOUND",method="GetModelStatus"} 1.0' in metrics


def test_a_port_in_use_is_a_one_line_error_naming_the_flag(tmp_path, model_file):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = subprocess.run(
            infer("serve", "--model", str(model_file), "--checkpoint-dir", str(tmp_path),
                  "--port", "0", "--grpc-port", str(port)),
            capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("infer serve: error: cannot listen for gRPC on 127.0.0.1:")
    assert f"(--grpc-port {port}; 0 turns gRPC off)" in last


# The end of a TF Serving client script: GetModelStatus of MODEL into out, out printed.
TF_CLIENT_STATUS = r'''
status = get_model_status_pb2.GetModelStatusRequest()
status.model_spec.name = MODEL
reply = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(status, timeout=30)
out["status"] = [(s.version, get_model_status_pb2.ModelVersionStatus.State.Name(s.state))
                 for s in reply.model_version_status]
print(json.dumps(out))
'''
TF_CLIENT_SCRIPT = r'''
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import grpc, numpy as np, tensorflow as tf
from tensorflow_serving.apis import (get_model_metadata_pb2, get_model_status_pb2,
    model_service_pb2_grpc, predict_pb2, prediction_service_pb2_grpc)
channel = grpc.insecure_channel(sys.argv[1])
stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
request = predict_pb2.PredictRequest()
request.model_spec.name = "mlp"
request.model_spec.signature_name = "serving_default"
request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.array(json.loads(sys.argv[2]), np.float32)))
response = stub.Predict(request, timeout=30)
out = {"version": response.model_spec.version.value,
       "logits": tf.make_ndarray(response.outputs["logits"]).tolist(),
       "classes": tf.make_ndarray(response.outputs["classes"]).tolist()}
request.model_spec.version.value = 99
try:
    stub.Predict(request, timeout=30)
except grpc.RpcError as e:
    out["wrong_version"] = e.code().name
meta = get_model_metadata_pb2.GetModelMetadataRequest()
meta.model_spec.name = "mlp"
meta.metadata_field.append("signature_def")
sigs = get_model_metadata_pb2.SignatureDefMap()
stub.GetModelMetadata(meta, timeout=30).metadata["signature_def"].Unpack(sigs)
out["inputs"] = {k: v.name for k, v in sigs.signature_def["serving_default"].inputs.items()}
MODEL = "mlp"
''' + TF_CLIENT_STATUS


def test_tf_servings_own_client_works_unchanged(start):
    assert TF_CLIENT.exists(), (
        f"{TF_CLIENT} is missing: scripts/setup-tf-client installs TF Serving's client "
        "(scripts/check runs it)")
    server = start()
    publish(server.ckpts, 5)
    server.wait_serving()
    r = subprocess.run([str(TF_CLIENT), "-c", TF_CLIENT_SCRIPT, f"127.0.0.1:{server.grpc_port}",
                        json.dumps(X.tolist())], capture_output=True, text=True, timeout=240,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    want = MLPServable(two_outputs=True).run(mlp_params(5), {"x": X})
    assert out["version"] == 5
    np.testing.assert_array_equal(np.array(out["logits"], np.float32), want["logits"])
    assert out["classes"] == want["classes"].tolist()
    assert out["wrong_version"] == "NOT_FOUND"
    assert out["inputs"] == {"x": "x:0"}
    assert out["status"] == [[5, "AVAILABLE"]]
    assert sys.executable != str(TF_CLIENT)  # the client never runs in the project's venv
