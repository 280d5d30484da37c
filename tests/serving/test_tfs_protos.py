"""ckptsync's copies of TF Serving's messages against TF Serving's own descriptors
(tests/goldens/tfs_descriptors.json, written from the real tensorflow-serving-api and
tensorflow packages by tests/goldens/tfs_descriptors.py)."""

from __future__ import annotations

import json
import os

import pytest
from google.protobuf import text_format

from ckptsync.serving import tfs_protos as pb

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "goldens", "tfs_descriptors.json")
# Fields the module leaves out on purpose (its docstring says why).
LEFT_OUT = {
    ("tensorflow.TensorProto", "resource_handle_val"), ("tensorflow.TensorProto", "variant_val"),
    ("tensorflow.TensorInfo", "coo_sparse"), ("tensorflow.TensorInfo", "composite_tensor"),
    ("tensorflow.serving.PredictRequest", "predict_streamed_options"),
    ("tensorflow.serving.PredictRequest", "client_id"),
    ("tensorflow.serving.PredictRequest", "request_options"),
    ("tensorflow.serving.ModelConfig", "logging_config"),
    ("tensorflow.serving.ReloadConfigResponse", "metric"),
}
# Fields the module adds (ckptsync's extensions, numbered far from TF Serving's).
ADDED = {("tensorflow.serving.ModelConfig", "model_file")}


@pytest.fixture(scope="module")
def golden() -> dict:
    with open(GOLDEN) as f:
        return json.load(f)


def _ours(name: str):
    top = pb.TensorProto.DESCRIPTOR.file.pool
    return top.FindMessageTypeByName(name)


def test_every_message_matches_tf_servings_field_for_field(golden):
    for name, fields in golden["messages"].items():
        d = _ours(name)
        ours = {f.name: f for f in d.fields}
        for fname, want in fields.items():
            if (name, fname) in LEFT_OUT:
                assert fname not in ours
                continue
            assert fname in ours, f"{name}.{fname} is missing"
            f = ours[fname]
            got = {
                "number": f.number, "type": f.type, "repeated": f.is_repeated,
                "type_name": (f.message_type or f.enum_type).full_name
                if (f.message_type or f.enum_type) else "",
                "oneof": f.containing_oneof.name if f.containing_oneof else "",
            }
            assert got == want, f"{name}.{fname}"
        added = {f for f in ours if (name, f) in ADDED}
        assert set(ours) - added <= set(fields), f"{name} has fields TF Serving's has not"
        assert not added & set(fields), f"{name}: an added field is now TF Serving's"
        assert all(ours[f].number >= 1000 for f in added)


def test_enums_use_tf_servings_numbers(golden):
    pool = pb.TensorProto.DESCRIPTOR.file.pool
    for name, values in golden["enums"].items():
        ours = {v.name: v.number for v in pool.FindEnumTypeByName(name).values}
        assert ours.items() <= values.items(), name
    assert pb.DATA_TYPES.items() <= golden["enums"]["tensorflow.DataType"].items()
    assert pb.ERROR_CODES == {k: v for k, v in golden["enums"]["tensorflow.error.Code"].items()
                              if not k.startswith("DO_NOT_USE")}
    assert pb.MODEL_STATES == golden["enums"]["tensorflow.serving.ModelVersionStatus.State"]


def test_a_model_config_list_parses_in_tf_servings_text_format():
    config = text_format.Parse(
        'model_config_list { config { name: "ctr" base_path: "/ckpts/ctr" '
        'model_platform: "tensorflow" model_version_policy { specific { versions: 7 } } '
        'version_labels { key: "stable" value: 7 } } }', pb.ModelServerConfig())
    (model,) = config.model_config_list.config
    assert (model.name, model.base_path, list(model.model_version_policy.specific.versions),
            dict(model.version_labels)) == ("ctr", "/ckpts/ctr", [7], {"stable": 7})


def test_a_signature_map_packs_into_any_under_tf_servings_type_url():
    response = pb.GetModelMetadataResponse()
    sigs = pb.SignatureDefMap()
    sigs.signature_def["serving_default"].method_name = pb.PREDICT_METHOD_NAME
    response.metadata["signature_def"].Pack(sigs)
    assert response.metadata["signature_def"].type_url == \
        "type.googleapis.com/tensorflow.serving.SignatureDefMap"
    back = pb.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(back)
    assert back.signature_def["serving_default"].method_name == "tensorflow/serving/predict"
