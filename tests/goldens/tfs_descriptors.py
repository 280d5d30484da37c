"""Writes tfs_descriptors.json: TF Serving's and TensorFlow's own descriptors of the
messages and enums ``ckptsync.serving.tfs_protos`` defines, read from the real
``tensorflow-serving-api`` and ``tensorflow`` packages (TensorFlow is the oracle).

    scripts/setup-tf-client && .tf-client-venv/bin/python tests/goldens/tfs_descriptors.py
"""

import json
import os

MESSAGES = [
    "tensorflow.TensorProto", "tensorflow.TensorShapeProto", "tensorflow.TensorShapeProto.Dim",
    "tensorflow.TensorInfo", "tensorflow.SignatureDef",
    *(f"tensorflow.serving.{n}" for n in (
        "ModelSpec", "PredictRequest", "PredictResponse", "SignatureDefMap",
        "GetModelMetadataRequest", "GetModelMetadataResponse", "GetModelStatusRequest",
        "GetModelStatusResponse", "ModelVersionStatus", "StatusProto", "ModelServerConfig",
        "ModelConfigList", "ModelConfig",
        "FileSystemStoragePathSourceConfig.ServableVersionPolicy",
        "FileSystemStoragePathSourceConfig.ServableVersionPolicy.Latest",
        "FileSystemStoragePathSourceConfig.ServableVersionPolicy.Specific",
        "ReloadConfigRequest", "ReloadConfigResponse")),
]
ENUMS = ["tensorflow.DataType", "tensorflow.error.Code",
         "tensorflow.serving.ModelVersionStatus.State", "tensorflow.serving.ModelType"]


def main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # Imported here: pytest's doctest collection imports this file without TensorFlow.
    from google.protobuf import descriptor_pool
    from tensorflow_serving.apis import (  # noqa: F401  (they fill the default pool)
        get_model_metadata_pb2,
        get_model_status_pb2,
        model_management_pb2,
        predict_pb2,
    )
    from tensorflow_serving.config import model_server_config_pb2  # noqa: F401

    pool = descriptor_pool.Default()
    out = {"messages": {}, "enums": {}}
    names = list(MESSAGES)
    for name in names:
        d = pool.FindMessageTypeByName(name)
        names += [f.message_type.full_name for f in d.fields if f.message_type
                  and f.message_type.GetOptions().map_entry
                  and f.message_type.full_name not in names]
        out["messages"][name] = {
            f.name: {
                "number": f.number, "type": f.type,
                "repeated": f.is_repeated,
                "type_name": (f.message_type or f.enum_type).full_name
                if (f.message_type or f.enum_type) else "",
                "oneof": f.containing_oneof.name
                if f.containing_oneof and not f.containing_oneof.name.startswith("_") else "",
            } for f in d.fields}
    for name in ENUMS:
        e = pool.FindEnumTypeByName(name)
        out["enums"][name] = {v.name: v.number for v in e.values}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tfs_descriptors.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
