"""The Open Inference Protocol (KServe v2) routes of a real ``infer serve`` process, with
Triton's own client (``tritonclient.http``) and raw requests for what a client library
would never send."""

from __future__ import annotations

import json
import subprocess

import httpx
import numpy as np
import pytest
import tritonclient.http as tc
from tritonclient.utils import InferenceServerException

from .conftest import MLPServable, mlp_params, publish
from .test_cli import infer, wait_for_port

X = np.random.default_rng(9).standard_normal((3, 4)).astype(np.float32)


@pytest.fixture
def server(tmp_path, model_file):
    ckpts, port_file = tmp_path / "ckpts", tmp_path / "port"
    proc = subprocess.Popen(
        infer("serve", "--model", str(model_file), "--checkpoint-dir", str(ckpts), "--port", "0",
              "--port-file", str(port_file), "--grpc-port", "0", "--model-name", "mlp",
              "--max-batch-size", "8", "--log-level", "warning"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = wait_for_port(proc, port_file)
        client = tc.InferenceServerClient(f"127.0.0.1:{port}", connection_timeout=30,
                                          network_timeout=30)
        yield client, port, ckpts
        client.close()
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stderr.close()


def wait_ready(client, timeout_s: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not client.is_model_ready("mlp"):
        assert time.monotonic() < deadline, "the model never became ready"
        time.sleep(0.02)


def test_health_and_metadata_as_triton_reads_them(server):
    client, _, ckpts = server
    assert client.is_server_live()
    assert not client.is_server_ready() and not client.is_model_ready("mlp")
    publish(ckpts, 6)
    wait_ready(client)
    assert client.is_server_ready()
    assert client.is_model_ready("mlp", "6") and not client.is_model_ready("mlp", "5")
    assert "binary_tensor_data" in client.get_server_metadata()["extensions"]
    meta = client.get_model_metadata("mlp")
    assert meta["name"] == "mlp" and meta["versions"] == ["6"]
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert {o["name"]: (o["datatype"], o["shape"]) for o in meta["outputs"]} == {
        "logits": ("FP32", [-1, 3]), "classes": ("INT64", [-1])}
    with pytest.raises(InferenceServerException, match="unknown model: 'other'"):
        client.get_model_metadata("other")


@pytest.mark.parametrize("binary", [True, False])
def test_infer_answers_the_served_versions_outputs(server, binary):
    client, port, ckpts = server
    publish(ckpts, 4)
    wait_ready(client)
    x = tc.InferInput("x", list(X.shape), "FP32")
    x.set_data_from_numpy(X, binary_data=binary)
    outputs = [tc.InferRequestedOutput("logits", binary_data=binary),
               tc.InferRequestedOutput("classes", binary_data=binary)]
    result = client.infer("mlp", [x], outputs=outputs, request_id="r1")
    want = MLPServable(two_outputs=True).run(mlp_params(4), {"x": X})
    response = result.get_response()
    assert (response["model_name"], response["model_version"], response["id"]) == (
        "mlp", "4", "r1")
    np.testing.assert_array_equal(result.as_numpy("logits"), want["logits"])
    np.testing.assert_array_equal(result.as_numpy("classes"), want["classes"])
    # The default (no outputs named): every output, as binary; a version in the URL.
    result = client.infer("mlp", [x], model_version="4")
    assert {o["name"] for o in result.get_response()["outputs"]} == {"logits", "classes"}
    np.testing.assert_array_equal(result.as_numpy("logits"), want["logits"])
    # The same values as TF Serving's REST predict on the same server.
    rest = httpx.post(f"http://127.0.0.1:{port}/v1/models/mlp:predict",
                      json={"instances": X.tolist()}, timeout=30).json()
    np.testing.assert_array_equal(
        np.array([r["logits"] for r in rest["predictions"]], np.float32), want["logits"])


def test_bad_requests_are_4xx_naming_what_is_wrong(server):
    client, port, ckpts = server
    url = f"http://127.0.0.1:{port}/v2/models/mlp/infer"
    ok = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    r = httpx.post(url, json=ok, timeout=30)
    assert r.status_code == 503 and "checkpoint" in r.json()["error"]
    publish(ckpts, 2)
    wait_ready(client)

    def tensor(**kw):
        return {"inputs": [{**ok["inputs"][0], **kw}]}

    cases = [
        (b"{nope", {}, 400, "not valid JSON"),
        (json.dumps({"inputs": []}).encode(), {}, 400, '"inputs" must be a non-empty list'),
        (json.dumps(tensor(name="y")).encode(), {}, 400, "unexpected inference input 'y'"),
        (json.dumps(tensor(datatype="FP64")).encode(), {}, 400, "the model expects 'FP32'"),
        (json.dumps(tensor(shape=[2, 4])).encode(), {}, 400, "holds 4 values, shape [2, 4] needs 8"),
        (json.dumps(tensor(shape=[1, 2, 2])).encode(), {}, 400, "must have shape"),
        (json.dumps(tensor(shape=[9, 4], data=[0.0] * 36)).encode(), {}, 400,
         "max_batch_size of 8"),
        (json.dumps(tensor(data=[1, 2, 3, "4"])).encode(), {}, 400, "must be FP32 values"),
        (json.dumps(tensor(shape=[0, 2**70], data=[])).encode(), {}, 400,
         '"shape" must be a list of non-negative integers'),
        (json.dumps(tensor(shape=[2**31, 2**31, 4], data=[1])).encode(), {}, 400,
         "holds 1 values"),
        (json.dumps(tensor(data=[1, 2, 3, 1e300])).encode(), {}, 400, "finite FP32"),
        (json.dumps({**ok, "outputs": [{"name": "nope"}]}).encode(), {}, 400,
         'unexpected inference output "nope"'),
        (json.dumps(tensor(data=None, parameters={"binary_data_size": 16})).encode() + b"\0" * 8,
         {"Inference-Header-Content-Length": str(len(json.dumps(tensor(
             data=None, parameters={"binary_data_size": 16}))))}, 400, "past the end of the body"),
        (json.dumps(ok).encode(), {"Inference-Header-Content-Length": "99999"}, 400,
         "past the end"),
        (json.dumps(ok).encode() + b"extra", {"Inference-Header-Content-Length": str(
            len(json.dumps(ok)))}, 400, "5 bytes of binary tensor data"),
    ]
    for bad in (np.nan, np.inf):  # binary FP32 arrives in the model's dtype: still checked
        head = json.dumps(tensor(data=None, parameters={"binary_data_size": 16})).encode()
        data = np.array([1, 2, bad, 4], np.float32).tobytes()
        cases.append((head + data, {"Inference-Header-Content-Length": str(len(head))}, 400,
                      "contains NaN or Infinity"))
    with httpx.Client(timeout=30) as c:
        for body, headers, status, text in cases:
            r = c.post(url, content=body, headers=headers)
            assert r.status_code == status and text in r.json()["error"], (text, r.text)
        r = c.post(f"http://127.0.0.1:{port}/v2/models/other/infer", json=ok)
        assert r.status_code == 404 and "unknown model: 'other'" in r.json()["error"]
        r = c.post(f"http://127.0.0.1:{port}/v2/models/mlp/versions/9/infer", json=ok)
        assert r.status_code == 404 and "version 9 is not being served" in r.json()["error"]
        too_big = "9" * 25  # no version can be that (a global step is an int64)
        r = c.get(f"http://127.0.0.1:{port}/v2/models/mlp/versions/{too_big}")
        assert r.status_code == 404 and r.json()["error"].startswith(
            f'version "{too_big}" not found: a version is a global step'), r.text
        r = c.get(f"http://127.0.0.1:{port}/v2/models/mlp/versions/{too_big}/ready")
        assert r.status_code == 400
        r = c.get(url)
        assert r.status_code == 405
        # Still answering.
        r = c.post(url, json=ok)
        assert r.status_code == 200 and r.json()["model_version"] == "2"
