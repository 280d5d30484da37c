"""TensorSpec, Signature, input validation, and GraphServable over the graph runtime."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ckptsync.errors import InvalidArgumentError
from ckptsync.model_spec import ModelFileError
from ckptsync.serving import GraphServable, Signature, TensorSpec, validate_inputs

from .conftest import MLPServable, mlp_params

SIG = Signature(
    inputs={
        "x": TensorSpec("x", np.float32, (None, 2)),
        "ids": TensorSpec("ids", np.int64, (None,)),
    },
    outputs={"y": TensorSpec("y", np.float32, (None,))},
)


def test_tensor_spec():
    spec = TensorSpec("x", "float32", [None, 3])
    assert spec.dtype == np.dtype(np.float32) and spec.shape == (None, 3)
    assert spec.is_compatible_with((5, 3)) and not spec.is_compatible_with((5, 4))
    assert not spec.is_compatible_with((3,))
    assert spec.shape_str() == "[?, 3]"
    assert spec.to_json("x:0") == {
        "dtype": "DT_FLOAT",
        "tensor_shape": {
            "dim": [{"size": "-1", "name": ""}, {"size": "3", "name": ""}],
            "unknown_rank": False,
        },
        "name": "x:0",
    }


def test_validate_inputs_converts_losslessly():
    out = validate_inputs(SIG, {"x": [[1, 2], [3, 4]], "ids": [1.0, 2.0]})
    assert out["x"].dtype == np.float32 and out["ids"].dtype == np.int64
    assert out["x"].flags.c_contiguous


@pytest.mark.parametrize(
    "inputs, match",
    [
        ({"x": [[1, 2]]}, r"missing \['ids'\]"),
        ({"x": [[1, 2]], "ids": [1], "z": 1}, r"unexpected \['z'\]"),
        ({"x": [[1, 2, 3]], "ids": [1]}, r"input 'x' must have shape \[\?, 2\], got \[1, 3\]"),
        ({"x": [[1, 2]], "ids": [1.5]}, r"input 'ids' must be int64, got float64 values"),
        ({"x": [["a", "b"]], "ids": [1]}, r"input 'x' must be float32, got strings"),
        ({"x": [[1, 2], [1]], "ids": [1]}, r"input 'x' is ragged"),
        ({"x": [[1, 2]], "ids": [1, 2]}, r"input 'ids' has batch size 2 but input 'x' has 1"),
        ({"x": [[1, 2]], "ids": [2**70]}, r"input 'ids' must be int64, got non-numeric values"),
    ],
)
def test_validate_inputs_errors(inputs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        validate_inputs(SIG, inputs)


def test_validate_inputs_integer_range():
    sig = Signature({"b": TensorSpec("b", np.uint8, (None,))}, {})
    with pytest.raises(
        InvalidArgumentError, match="input 'b' has values outside the range of uint8"
    ):
        validate_inputs(sig, {"b": [1, 300]})
    assert validate_inputs(sig, {"b": [1, 255]})["b"].dtype == np.uint8


@pytest.mark.parametrize("dtype, bad, edge", [
    (np.int32, 2.0**31, -(2.0**31)),
    (np.int64, 2.0**63, -(2.0**63)),  # 2**63 - 1 is not a float; 2**63 is just past
    (np.uint8, 256.0, 255.0),
    (np.uint8, -1.0, 0.0),
])
def test_integral_floats_outside_an_integer_input_are_refused_not_wrapped(dtype, bad, edge):
    sig = Signature({"b": TensorSpec("b", dtype, (None,))}, {})
    with pytest.raises(InvalidArgumentError, match="outside the range of " + np.dtype(dtype).name):
        validate_inputs(sig, {"b": [1.0, bad]})
    assert validate_inputs(sig, {"b": [1.0, edge]})["b"].tolist() == [1, int(edge)]


def test_graph_servable_matches_numpy_reference(model_file):
    servable = GraphServable.from_model_file(model_file, "cpu:0")
    try:
        sig = servable.signature
        assert sig.inputs["x"].shape == (None, 4) and sig.inputs["x"].dtype == np.float32
        assert sig.outputs["classes"].dtype == np.int64
        assert sig.tensor_names["x"] == "x:0"
        assert dict(servable.variable_specs) == dict(MLPServable().variable_specs)
        x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
        for step in (1, 2):
            got = servable.run(mlp_params(step), {"x": x})
            want = MLPServable(two_outputs=True).run(mlp_params(step), {"x": x})
            np.testing.assert_allclose(got["logits"], want["logits"], rtol=1e-5)
            np.testing.assert_array_equal(got["classes"], want["classes"])
    finally:
        servable.close()


def test_graph_servable_runs_concurrently_on_different_params(model_file):
    servable = GraphServable.from_model_file(model_file)
    x = np.ones((3, 4), np.float32)
    want = {s: MLPServable().run(mlp_params(s), {"x": x})["logits"] for s in range(4)}
    errors = []

    def worker(step):
        try:
            for _ in range(50):
                got = servable.run(mlp_params(step), {"x": x})["logits"]
                np.testing.assert_allclose(got, want[step], rtol=1e-5)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    servable.close()
    assert not errors


def test_graph_servable_errors(tmp_path):
    with pytest.raises(ModelFileError, match="not found"):
        GraphServable.from_model_file(tmp_path / "missing.py")
    with pytest.raises(Exception, match="ModelSpec"):
        GraphServable(lambda graph, device, mode: None)


def test_inputs_that_are_not_a_mapping_name_what_is_expected():
    # A new user's HotReloadingModel.predict(array) got "unhashable type: 'numpy.ndarray'".
    with pytest.raises(InvalidArgumentError,
                       match=r"inputs must be a mapping of input name to array "
                             r"\(\{'ids': \.\.\., 'x': \.\.\.\}\), got ndarray"):
        validate_inputs(SIG, np.zeros((1, 2), np.float32))
