"""``infer serve --ssl-certfile/--ssl-keyfile``: REST (TF Serving's and v2) and gRPC over
TLS with a self-signed certificate (made by the openssl command), plain requests
refused; mismatched or unreadable flags are usage errors; --admin-token on a non-loopback
address without TLS is warned about."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import time

import grpc
import httpx
import numpy as np
import pytest

from ckptsync.serving import tfs_protos as pb
from ckptsync.serving.tensor_proto import make_ndarray, make_tensor_proto

from .conftest import publish
from .test_cli import infer, run_infer, wait_for_port
from .test_grpc import free_port

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="needs the openssl command to make a certificate")


@pytest.fixture
def cert(tmp_path):
    key, crt = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(crt), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return key, crt


def test_rest_and_grpc_are_served_over_tls(tmp_path, model_file, cert):
    key, crt = cert
    ckpts, port_file, grpc_port = tmp_path / "ckpts", tmp_path / "port", free_port()
    publish(ckpts, 3)
    proc = subprocess.Popen(
        infer("serve", "--model", str(model_file), "--checkpoint-dir", str(ckpts),
              "--port", "0", "--port-file", str(port_file), "--grpc-port", str(grpc_port),
              "--model-name", "mlp", "--ssl-certfile", str(crt), "--ssl-keyfile", str(key),
              "--log-level", "warning"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = wait_for_port(proc, port_file)
        verify = ssl.create_default_context(cafile=str(crt))
        with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=verify,
                          timeout=30) as c:
            deadline = time.monotonic() + 60
            while c.get("/readyz").status_code != 200:  # the first load
                assert time.monotonic() < deadline, "never ready"
                time.sleep(0.02)
            r = c.post("/v1/models/mlp:predict", json={"instances": [[1, 2, 3, 4]]})
            assert r.status_code == 200 and r.json()["model_version"] == 3
            assert c.get("/v2/health/ready").status_code == 200
        with pytest.raises(httpx.HTTPError):  # plain HTTP is not answered
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
        creds = grpc.ssl_channel_credentials(root_certificates=crt.read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{grpc_port}", creds) as channel:
            call = channel.unary_unary(
                "/tensorflow.serving.PredictionService/Predict",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=pb.PredictResponse.FromString)
            request = pb.PredictRequest()
            request.model_spec.name = "mlp"
            request.inputs["x"].CopyFrom(make_tensor_proto(np.ones((1, 4), np.float32)))
            response = call(request, timeout=30)
            assert response.model_spec.version.value == 3
            assert make_ndarray(response.outputs["logits"]).shape == (1, 3)
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            plain = channel.unary_unary("/tensorflow.serving.PredictionService/Predict",
                                        request_serializer=lambda m: m.SerializeToString(),
                                        response_deserializer=pb.PredictResponse.FromString)
            with pytest.raises(grpc.RpcError) as e:
                plain(request, timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stderr.close()


def test_tls_flags_are_checked(tmp_path, model_file, cert):
    key, crt = cert
    base = ["serve", "--model", str(model_file), "--checkpoint-dir", str(tmp_path),
            "--grpc-port", "0", "--port", "0"]
    r = run_infer(*base, "--ssl-certfile", str(crt))
    assert r.returncode == 2 and "--ssl-certfile and --ssl-keyfile go together" in r.stderr
    r = run_infer(*base, "--ssl-certfile", str(crt), "--ssl-keyfile", str(crt))
    assert r.returncode == 2 and "is not a PEM file holding a private key" in r.stderr
    r = run_infer(*base, "--ssl-certfile", str(tmp_path / "nope.pem"), "--ssl-keyfile", str(key))
    assert r.returncode == 2 and "cannot read" in r.stderr and "'--ssl-certfile'" in r.stderr


def test_an_admin_token_on_a_public_address_without_tls_is_warned_about(tmp_path, model_file):
    # 192.0.2.1 (TEST-NET-1) is assigned to no interface here: the warning comes first,
    # then the bind fails, so nothing ever listens beyond loopback.
    r = run_infer("serve", "--model", str(model_file), "--checkpoint-dir", str(tmp_path),
                  "--host", "192.0.2.1", "--port", "0", "--grpc-port", "0",
                  "--admin-token", "s3cret")
    assert "--admin-token is sent in the clear: --host 192.0.2.1" in r.stderr
    assert r.returncode == 1 and "cannot listen on 192.0.2.1" in r.stderr
    r = run_infer("serve", "--model", str(model_file), "--checkpoint-dir", str(tmp_path),
                  "--host", "192.0.2.1", "--port", "0", "--grpc-port", "0")
    assert "sent in the clear" not in r.stderr
