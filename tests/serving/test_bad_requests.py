"""No request, however malformed, gets a 5xx: a corpus of RELIABILITY.md's bad requests and
a hypothesis-generated one, against the real app (and raw bytes against a real process)."""

from __future__ import annotations

import json
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.exceptions import StarletteDeprecationWarning

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

from ckptsync.serving import ModelManager, create_app

from .conftest import MLPServable, publish


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ckpts")
    publish(directory, 7)
    manager = ModelManager(MLPServable(two_outputs=True), directory, rescan_interval_s=0.05)
    app = create_app(manager, "mlp", own_manager=True, max_batch_size=64,
                     max_request_bytes=1 << 20)
    with TestClient(app, raise_server_exceptions=False) as c:
        manager.wait_for_version(7, timeout_s=10)
        yield c


CORPUS = [
    b"",
    b"null",
    b"1e999",
    b'"instances"',
    b"[" * 100_000 + b"]" * 100_000,
    b'{"instances": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    b'{"instances": [[' + b"9" * 5000 + b", 1, 2, 3]]}",
    b'{"instances": [[1e400, 1, 2, 3]]}',
    b'{"instances": [[NaN, Infinity, -Infinity, 1]]}',
    b'{"instances": [[true, false, 1, 2]]}',
    b'{"instances": [{"x": [1, 2, 3, 4], "x": [1, 2, 3, 4]}]}',
    b'{"instances": [[1, 2, 3, 4]], "signature_name": ["a"]}',
    b'{"instances": [[1, 2, 3, 4]], "signature_name": {"a": 1}}',
    b'{"inputs": {"x": {"y": 1}}}',
    b'{"inputs": {"x": [[1, 2, 3, [4]]]}}',
    b'{"inputs": {"x": [[1, 2, 3, {"b64": "AA=="}]]}}',
    b'{"inputs": {}}',
    b'{"inputs": null}',
    b'{"inputs": 3}',
    b'{"inputs": [[]]}',
    b'{"instances": [[]]}',
    b'{"instances": [[[]]]}',
    b'{"instances": [null]}',
    b'{"instances": [[1, 2, 3, 4]] * 65}',
    json.dumps({"instances": [[1, 2, 3, 4]] * 65}).encode(),
    json.dumps({"inputs": [[1, 2, 3, 4]] * 65}).encode(),
    json.dumps({"instances": [[[[[[1]]]]]] * 2}).encode(),
    b"\x00\x01\x02\xff",
    "{\"instances\": [[\"\u00e9\", 1, 2, 3]]}".encode(),
]


@pytest.mark.parametrize("body", CORPUS, ids=range(len(CORPUS)))
def test_corpus_gets_4xx_with_error(client, body):
    r = client.post("/v1/models/mlp:predict", content=body,
                    headers={"content-type": "application/json"})
    if r.status_code == 200:  # a few are valid (NaN, booleans, bigger-than-float32 values)
        assert "predictions" in r.json()
        return
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert set(r.json()) == {"error"} and r.json()["error"]


def test_other_routes_and_methods(client):
    for method, path in [
        ("GET", "/v1/models/mlp:predict"),
        ("PUT", "/v1/models/mlp"),
        ("GET", "/v1/models/mlp/versions/abc"),
        ("GET", "/v1/models/mlp/versions/99999999999999999999999"),
        ("POST", "/v1/models/mlp/versions/99999999999999999999999:predict"),
        ("GET", "/v1/models/%00"),
        ("POST", "/v1/models/mlp:classify"),
    ]:
        r = client.request(method, path)
        assert 400 <= r.status_code < 500, (method, path, r.status_code, r.text)
        assert "error" in r.json()
    r = client.post("/v1/models/mlp:predict", content=b"{}", headers={"content-length": "abc"})
    assert 400 <= r.status_code < 500


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.sampled_from(["x", "instances", "inputs", "y", "b64"]), children,
                      max_size=3),
    max_leaves=30,
)
rows = st.lists(
    st.lists(st.one_of(st.floats(), st.integers(-(2**70), 2**70), st.booleans(), st.none(),
                       st.text(max_size=2)), min_size=0, max_size=6),
    min_size=0, max_size=4,
)
bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"instances": rows}).map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"inputs": st.dictionaries(st.sampled_from(["x", "z"]), rows)}).map(
        lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {"instances": st.lists(st.dictionaries(st.sampled_from(["x", "z"]), rows), max_size=3)}
    ).map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies, versioned=st.booleans())
def test_generated_requests_never_5xx(client, body, versioned):
    path = "/v1/models/mlp/versions/7:predict" if versioned else "/v1/models/mlp:predict"
    r = client.post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code < 500, (body, r.status_code, r.text)
    if r.status_code != 200:
        assert set(r.json()) == {"error"}
