"""The REST app: TF Serving's API, its error mapping, limits and metrics."""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np
import pytest
from starlette.exceptions import StarletteDeprecationWarning

with warnings.catch_warnings():
    # starlette >= 1.x prefers the httpx2 package for its TestClient; httpx still works.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

from ckptsync.serving import HttpOptions, ModelManager, create_app

from .conftest import MLPServable, mlp_params, publish, wait_until

X = [[0.5, -1.0, 2.0, 0.25], [1.0, 1.0, 1.0, 1.0]]


def expected_logits(step, x=X):
    p = mlp_params(step)
    h = np.maximum(np.asarray(x, np.float32) @ p["dense0/w"] + p["dense0/b"], 0)
    return h @ p["dense1/w"] + p["dense1/b"]


@pytest.fixture
def serve(tmp_path):
    """serve(step=..., servable=..., **app_kwargs) -> (client, manager, dir); all closed after."""
    opened = []

    def make(step=7, servable=None, **kwargs):
        if step is not None:
            publish(tmp_path, step)
        manager = ModelManager(servable or MLPServable(), tmp_path, rescan_interval_s=0.05)
        app = create_app(manager, "mlp", own_manager=True, **kwargs)
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        opened.append(client)
        if step is not None:
            manager.wait_for_version(step, timeout_s=10)
        return client, manager, tmp_path

    yield make
    for client in opened:
        client.__exit__(None, None, None)


def test_predict_row_format(serve):
    client, _, _ = serve()
    r = client.post("/v1/models/mlp:predict", json={"instances": X})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model_version"] == 7 and r.headers["X-Model-Version"] == "7"
    np.testing.assert_allclose(body["predictions"], expected_logits(7), rtol=1e-5)
    named = client.post("/v1/models/mlp:predict", json={"instances": [{"x": row} for row in X]})
    assert named.json()["predictions"] == body["predictions"]


def test_predict_columnar_and_versioned_path(serve):
    client, _, _ = serve()
    for body in ({"inputs": X}, {"inputs": {"x": X}, "signature_name": "serving_default"}):
        r = client.post("/v1/models/mlp/versions/7:predict", json=body)
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(r.json()["outputs"], expected_logits(7), rtol=1e-5)


def test_multi_output_formats(serve):
    client, _, _ = serve(servable=MLPServable(two_outputs=True))
    rows = client.post("/v1/models/mlp:predict", json={"instances": X}).json()["predictions"]
    assert isinstance(rows, list) and set(rows[0]) == {"logits", "classes"}
    assert [r["classes"] for r in rows] == expected_logits(7).argmax(1).tolist()
    cols = client.post("/v1/models/mlp:predict", json={"inputs": X}).json()["outputs"]
    assert cols["classes"] == expected_logits(7).argmax(1).tolist()


def test_503_before_any_checkpoint_then_ready(serve):
    client, manager, directory = serve(step=None)
    assert client.get("/healthz").status_code == 200
    r = client.get("/readyz")
    assert r.status_code == 503 and "error" in r.json()
    r = client.post("/v1/models/mlp:predict", json={"instances": X})
    assert r.status_code == 503
    assert "no version of the model is loaded yet" in r.json()["error"]
    # TF Serving's GetModelStatus while no version is known, and for an unknown version.
    r = client.get("/v1/models/mlp")
    assert r.status_code == 404 and r.json() == {
        "error": "Could not find any versions of model mlp"}
    publish(directory, 1)
    manager.wait_for_version(1, timeout_s=10)
    assert client.get("/readyz").json() == {"status": "ready", "model_version": 1}
    assert client.post("/v1/models/mlp:predict", json={"instances": X}).status_code == 200
    assert client.get("/v1/models/mlp").json()["model_version_status"][0]["version"] == "1"
    r = client.get("/v1/models/mlp/versions/7")
    assert r.status_code == 404 and r.json() == {"error": "Could not find version 7 of model mlp"}


@pytest.mark.parametrize(
    "content, match",
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object, got a list"),
        (b"{}", 'exactly one of "instances" (row) or "inputs" (columnar)'),
        (json.dumps({"instances": X, "inputs": X}).encode(), "exactly one of"),
        (json.dumps({"instances": []}).encode(), '"instances" must be a non-empty list'),
        (
            json.dumps({"instances": "abc"}).encode(),
            '"instances" must be a non-empty list, got a string',
        ),
        (
            json.dumps({"instances": [[1, 2, 3, 4], [1, 2, 3]]}).encode(),
            '"instances[1]" of input \'x\' has shape [3], but "instances[0]" has [4]',
        ),
        (
            json.dumps({"instances": [[1, 2, 3]]}).encode(),
            "input 'x' must have shape [?, 4], got [1, 3]",
        ),
        (
            json.dumps({"instances": [[1, 2, "a", 4]]}).encode(),
            "input 'x' must be float32, got strings",
        ),
        (
            json.dumps({"instances": [[1, 2, None, 4]]}).encode(),
            "input 'x' must be float32, got non-numeric",
        ),
        (json.dumps({"instances": [{"x": X[0]}, X[1]]}).encode(), "mixes objects and bare values"),
        (
            json.dumps({"instances": [{"y": X[0]}]}).encode(),
            "\"instances[0]\" must have keys ['x'], got ['y']",
        ),
        (json.dumps({"inputs": [[1, 2], [1]]}).encode(), '"inputs" is ragged'),
        (json.dumps({"inputs": {"x": X, "z": X}}).encode(), "unexpected ['z']"),
        (json.dumps({"inputs": {"x": [1, 2, 3, 4]}}).encode(), "must have shape [?, 4], got [4]"),
        (
            json.dumps({"inputs": X, "signature_name": "other"}).encode(),
            'Serving signature name: "other" not found in signature def',
        ),
    ],
)
def test_bad_requests_are_400_with_error(serve, content, match):
    client, _, _ = serve()
    r = client.post(
        "/v1/models/mlp:predict", content=content, headers={"content-type": "application/json"}
    )
    assert r.status_code == 400, r.text
    assert set(r.json()) == {"error"}
    assert match in r.json()["error"]


def test_batch_over_limit_is_400(serve):
    client, _, _ = serve(max_batch_size=2)
    r = client.post("/v1/models/mlp:predict", json={"instances": X * 2})
    assert r.status_code == 400 and "max_batch_size of 2" in r.json()["error"]
    r = client.post("/v1/models/mlp:predict", json={"inputs": X * 2})
    assert r.status_code == 400 and "max_batch_size of 2" in r.json()["error"]


def test_unknown_model_version_route_are_404(serve):
    client, _, _ = serve()
    cases = [
        client.post("/v1/models/other:predict", json={"instances": X}),
        client.post("/v1/models/mlp/versions/8:predict", json={"instances": X}),
        client.get("/v1/models/other"),
        # The version is looked up before the body is read, as TF Serving's servable.
        client.post("/v1/models/mlp/versions/8:predict", json={"instances": [[1]]}),
        client.post("/v2/models/mlp/versions/8/infer", content=b"{"),
        client.get("/v1/models/mlp/versions/8"),
        client.get("/v1/models/mlp/versions/8/metadata"),
        client.get("/nowhere"),
    ]
    for r in cases:
        assert r.status_code == 404, r.text
        assert set(r.json()) == {"error"}
    assert 'model "other" not found; this server serves "mlp"' in cases[0].json()["error"]
    for r in (cases[1], cases[3], cases[4]):
        assert "version 8 is not being served (serving version 7)" in r.json()["error"]


def test_body_over_cap_is_413_by_header_and_by_stream(serve):
    client, _, _ = serve(max_request_bytes=100)
    r = client.post("/v1/models/mlp:predict", json={"instances": X * 10})
    assert r.status_code == 413 and "exceeds the limit of 100 bytes" in r.json()["error"]

    def chunks():  # no Content-Length: chunked transfer encoding
        for _ in range(10):
            yield b" " * 50

    r = client.post("/v1/models/mlp:predict", content=chunks())
    assert r.status_code == 413 and "exceeds the limit of 100 bytes" in r.json()["error"]


def test_large_body_runs_in_thread_pool(serve):
    client, _, _ = serve(inline_max_body_bytes=10)
    r = client.post("/v1/models/mlp:predict", json={"instances": X})
    assert r.status_code == 200
    np.testing.assert_allclose(r.json()["predictions"], expected_logits(7), rtol=1e-5)


@pytest.mark.parametrize("interval_s", [0.004, None])
def test_a_pool_predict_runs_with_the_switch_interval_raised_then_restored(serve, interval_s):
    servable = MLPServable()
    seen: list[float] = []
    servable.run_hook = lambda: seen.append(sys.getswitchinterval())
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.0001)  # as infer serve runs
    try:
        client, _, _ = serve(servable=servable, options=HttpOptions(
            inline_max_body_bytes=200, pool_switch_interval_s=interval_s))
        small = client.post("/v1/models/mlp:predict", json={"instances": X})  # inline
        big = client.post("/v1/models/mlp:predict", json={"instances": X * 10})  # the pool
        assert (small.status_code, big.status_code) == (200, 200)
        np.testing.assert_allclose(big.json()["predictions"], expected_logits(7, X * 10),
                                   rtol=1e-5)
        assert seen == pytest.approx([0.0001, interval_s or 0.0001])
        assert sys.getswitchinterval() == pytest.approx(0.0001)  # restored
    finally:
        sys.setswitchinterval(before)


def test_unexpected_exception_is_500_and_server_survives(serve):
    servable = MLPServable()
    client, _, _ = serve(servable=servable)

    def explode():
        raise RuntimeError("kaboom")

    servable.run_hook = explode
    r = client.post("/v1/models/mlp:predict", json={"instances": X})
    assert r.status_code == 500 and "kaboom" in r.json()["error"]
    servable.run_hook = None
    assert client.post("/v1/models/mlp:predict", json={"instances": X}).status_code == 200


def test_status_and_metadata(serve):
    client, _, _ = serve()
    assert client.get("/v1/models/mlp").json() == {
        "model_version_status": [
            {
                "version": "7",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }
    assert (
        client.get("/v1/models/mlp/versions/7").json()["model_version_status"][0]["version"] == "7"
    )
    meta = client.get("/v1/models/mlp/metadata").json()
    assert meta["model_spec"] == {"name": "mlp", "signature_name": "", "version": "7"}
    sig = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert sig["inputs"]["x"]["dtype"] == "DT_FLOAT"
    assert sig["inputs"]["x"]["tensor_shape"]["dim"] == [
        {"size": "-1", "name": ""},
        {"size": "4", "name": ""},
    ]
    assert sig["outputs"]["logits"]["tensor_shape"]["dim"][1]["size"] == "3"
    assert client.get("/v1/models/mlp/versions/7/metadata").status_code == 200


def test_corrupt_checkpoint_keeps_serving_and_shows_in_status(serve):
    from .conftest import truncate

    client, manager, directory = serve()
    publish(directory, 8, damage=truncate)
    wait_until(lambda: manager.stats.reloads_failed >= 1)
    r = client.post("/v1/models/mlp:predict", json={"instances": X})
    assert r.status_code == 200 and r.json()["model_version"] == 7
    status = client.get("/v1/models/mlp/versions/8").json()["model_version_status"][0]
    assert status["state"] == "END" and status["status"]["error_code"] == "DATA_LOSS"
    publish(directory, 9)
    manager.wait_for_version(9, timeout_s=10)
    assert client.post("/v1/models/mlp:predict", json={"instances": X}).json()["model_version"] == 9


def test_metrics(serve):
    client, _, _ = serve()
    client.post("/v1/models/mlp:predict", json={"instances": X})
    client.post("/v1/models/mlp:predict", content=b"nope")
    text = client.get("/metrics").text
    assert 'ckptsync_http_requests_total{code="200",route="predict"} 1.0' in text
    assert 'ckptsync_http_requests_total{code="400",route="predict"} 1.0' in text
    assert 'ckptsync_http_request_duration_seconds_bucket{le="0.5",route="predict"}' in text
    assert 'ckptsync_served_version{model="mlp"} 7.0' in text
    assert 'ckptsync_reloads_total{model="mlp",result="success"} 1.0' in text
    assert 'ckptsync_reloads_total{model="mlp",result="failure"} 0.0' in text
    assert 'ckptsync_load_duration_seconds_count{model="mlp"} 1.0' in text


def test_two_apps_have_separate_registries(tmp_path):
    manager = ModelManager(MLPServable(), tmp_path)
    a, b = create_app(manager, "a"), create_app(manager, "b")
    assert a.state.registry is not b.state.registry
    with pytest.raises(ValueError, match="max_request_bytes"):
        create_app(manager, "c", max_request_bytes=0)


def test_predict_has_one_path(serve):
    """Only the PredictHandler answers :predict; no starlette route does."""
    client, _, _ = serve()
    assert not [r.path for r in client.app.routes if ":predict" in r.path]
    for url in ("/v1/models/mlp:predict", "/v1/models/mlp/versions/7:predict"):
        r = client.post(url, json={"instances": X})
        assert r.status_code == 200 and r.headers["X-Model-Version"] == "7", r.text
    metrics = client.get("/metrics").text
    assert 'ckptsync_http_requests_total{code="200",route="predict"} 2.0' in metrics
    assert client.get("/v1/models/mlp:predict").status_code == 405


@pytest.mark.parametrize(("method", "url", "status", "body"), [
    ("GET", "/v1/models/mlp:predict", 405, "method not allowed: ':predict' takes POST"),
    ("GET", "/v1/models/mlp/versions/7:predict", 405,
     "GET /v1/models/mlp/versions/7:predict: Method Not Allowed"),
    ("PUT", "/v1/models/mlp:predict", 405, "PUT /v1/models/mlp:predict: Method Not Allowed"),
    ("POST", "/v1/models/mlp/versions/x:predict", 404,
     "POST /v1/models/mlp/versions/x:predict: Not Found"),
])
def test_predict_urls_with_the_wrong_method_or_version(serve, method, url, status, body):
    client, _, _ = serve()
    r = client.request(method, url, json={"instances": X})
    assert (r.status_code, r.json()) == (status, {"error": body})


@pytest.mark.parametrize("url", ["/v1/models/mlp:predict/", "/v1/models/mlp/versions/7:predict/"])
def test_predict_trailing_slash_redirects(serve, url):
    client, _, _ = serve()
    r = client.post(url, json={"instances": X}, follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "http://testserver" + url[:-1]
    assert client.post(url, json={"instances": X}).status_code == 200  # 307 keeps the POST
