"""TF Serving's gRPC messages, built at import from descriptors in a private pool.

Field for field (names, numbers, types, oneofs) the messages of TF Serving's
``tensorflow_serving/apis/{model,predict,get_model_metadata,get_model_status,status,
model_management}.proto`` and ``config/{model_server_config,
file_system_storage_path_source}.proto``, and of TensorFlow's
``core/framework/{tensor,tensor_shape,types}.proto``, ``core/protobuf/meta_graph.proto``
(``TensorInfo``, ``SignatureDef``) and ``error_codes.proto``, under their own package names
(``tensorflow``, ``tensorflow.serving``, ``tensorflow.error``), so the bytes on the wire and
``google.protobuf.Any`` type URLs are TF Serving's: a ``tensorflow-serving-api`` client
reads them unchanged. ``tests/goldens/tfs_descriptors.json`` (from the real packages,
``scripts/make-goldens tfs``) is what a test checks these against. Left out: fields this
server never reads or writes (``TensorProto.resource_handle_val``/``variant_val``,
``PredictRequest.predict_streamed_options``/``request_options``, ``TensorInfo``'s sparse
and composite encodings, ``ModelConfig.logging_config``); a client that sends them is not
refused, protobuf keeps them as unknown fields. Added: ``ModelConfig.model_file``
(number 1000), the graph of a ``--model-config-file`` model.

The pool is private, so these never clash with TensorFlow's or TensorBoard's own copies
of the same messages in one process. Parsing and serializing are the ``protobuf``
package's; the framing is grpcio's.

Example:
    >>> from ckptsync.serving import tfs_protos as pb
    >>> req = pb.PredictRequest()
    >>> req.model_spec.name = "digits"
    >>> pb.PredictRequest.FromString(req.SerializeToString()).model_spec.name
    'digits'
"""

from __future__ import annotations

from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

__all__ = [
    "DATA_TYPES", "ERROR_CODES", "MODEL_STATES", "PREDICT_METHOD_NAME", "TensorProto",
    "TensorShapeProto", "TensorInfo", "SignatureDef", "ModelSpec", "PredictRequest",
    "PredictResponse", "SignatureDefMap", "GetModelMetadataRequest",
    "GetModelMetadataResponse", "GetModelStatusRequest", "GetModelStatusResponse",
    "ModelVersionStatus", "StatusProto", "ModelServerConfig", "ModelConfigList",
    "ModelConfig", "ServableVersionPolicy", "ReloadConfigRequest", "ReloadConfigResponse",
    "BatchingParameters",
]

#: TF's ``DataType`` enum (types.proto), the non-reference types.
DATA_TYPES = {
    "DT_INVALID": 0, "DT_FLOAT": 1, "DT_DOUBLE": 2, "DT_INT32": 3, "DT_UINT8": 4,
    "DT_INT16": 5, "DT_INT8": 6, "DT_STRING": 7, "DT_COMPLEX64": 8, "DT_INT64": 9,
    "DT_BOOL": 10, "DT_QINT8": 11, "DT_QUINT8": 12, "DT_QINT32": 13, "DT_BFLOAT16": 14,
    "DT_QINT16": 15, "DT_QUINT16": 16, "DT_UINT16": 17, "DT_COMPLEX128": 18,
    "DT_HALF": 19, "DT_RESOURCE": 20, "DT_VARIANT": 21, "DT_UINT32": 22, "DT_UINT64": 23,
}
#: TF's (and gRPC's) status codes, ``tensorflow.error.Code``.
ERROR_CODES = {
    "OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4,
    "NOT_FOUND": 5, "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "UNAUTHENTICATED": 16,
    "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9, "ABORTED": 10, "OUT_OF_RANGE": 11,
    "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14, "DATA_LOSS": 15,
}
#: ``ModelVersionStatus.State`` (TF Serving's ManagerState).
MODEL_STATES = {"UNKNOWN": 0, "START": 10, "LOADING": 20, "AVAILABLE": 30,
                "UNLOADING": 40, "END": 50}
#: The number of ``ModelConfig.model_file``, ckptsync's one field beyond TF Serving's:
#: far above TF Serving's numbers, so it never collides with a field they add.
MODEL_FILE_FIELD_NUMBER = 1000
#: ``SignatureDef.method_name`` of a predict signature.
PREDICT_METHOD_NAME = "tensorflow/serving/predict"

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "double": _F.TYPE_DOUBLE, "float": _F.TYPE_FLOAT, "int64": _F.TYPE_INT64,
    "uint64": _F.TYPE_UINT64, "int32": _F.TYPE_INT32, "bool": _F.TYPE_BOOL,
    "string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES, "uint32": _F.TYPE_UINT32,
}


def _field(msg: Any, name: str, number: int, kind: str, *, repeated: bool = False,
           oneof: str | None = None) -> None:
    """Adds field ``name`` = ``number`` to ``msg``: ``kind`` is a scalar type name,
    ``"enum:.pkg.Name"``, ``"msg:.pkg.Name"`` or ``"map:<scalar key>:<kind>"``."""
    label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if kind.startswith("map:"):
        _, key, value = kind.split(":", 2)
        entry = msg.nested_type.add(name="".join(p.title() for p in name.split("_")) + "Entry")
        entry.options.map_entry = True
        _field(entry, "key", 1, key)
        _field(entry, "value", 2, value)
        field = msg.field.add(name=name, number=number, label=_F.LABEL_REPEATED,
                              type=_F.TYPE_MESSAGE, type_name=entry.name)
    elif kind.startswith(("enum:", "msg:")):
        prefix, type_name = kind.split(":", 1)
        field = msg.field.add(name=name, number=number, label=label, type_name=type_name,
                              type=_F.TYPE_ENUM if prefix == "enum" else _F.TYPE_MESSAGE)
    else:
        field = msg.field.add(name=name, number=number, label=label, type=_SCALARS[kind])
    if oneof is not None:
        names = [o.name for o in msg.oneof_decl]
        if oneof not in names:
            msg.oneof_decl.add(name=oneof)
            names.append(oneof)
        field.oneof_index = names.index(oneof)


def _enum(parent: Any, name: str, values: dict[str, int]) -> None:
    enum = parent.enum_type.add(name=name)
    for value_name, number in values.items():
        enum.value.add(name=value_name, number=number)


def _file(name: str, package: str, deps: list[str]) -> Any:
    return descriptor_pb2.FileDescriptorProto(
        name=f"ckptsync/{name}", package=package, syntax="proto3", dependency=deps)


def _tensorflow() -> Any:
    f = _file("tf_tensor.proto", "tensorflow", [])
    _enum(f, "DataType", DATA_TYPES)
    shape = f.message_type.add(name="TensorShapeProto")
    dim = shape.nested_type.add(name="Dim")
    _field(dim, "size", 1, "int64")
    _field(dim, "name", 2, "string")
    _field(shape, "dim", 2, "msg:.tensorflow.TensorShapeProto.Dim", repeated=True)
    _field(shape, "unknown_rank", 3, "bool")
    tensor = f.message_type.add(name="TensorProto")
    for name, number, kind, repeated in (
            ("dtype", 1, "enum:.tensorflow.DataType", False),
            ("tensor_shape", 2, "msg:.tensorflow.TensorShapeProto", False),
            ("version_number", 3, "int32", False), ("tensor_content", 4, "bytes", False),
            ("half_val", 13, "int32", True), ("float_val", 5, "float", True),
            ("double_val", 6, "double", True), ("int_val", 7, "int32", True),
            ("string_val", 8, "bytes", True), ("scomplex_val", 9, "float", True),
            ("int64_val", 10, "int64", True), ("bool_val", 11, "bool", True),
            ("dcomplex_val", 12, "double", True), ("uint32_val", 16, "uint32", True),
            ("uint64_val", 17, "uint64", True), ("float8_val", 18, "bytes", False)):
        _field(tensor, name, number, kind, repeated=repeated)
    info = f.message_type.add(name="TensorInfo")
    _field(info, "name", 1, "string", oneof="encoding")
    _field(info, "dtype", 2, "enum:.tensorflow.DataType")
    _field(info, "tensor_shape", 3, "msg:.tensorflow.TensorShapeProto")
    sig = f.message_type.add(name="SignatureDef")
    _field(sig, "inputs", 1, "map:string:msg:.tensorflow.TensorInfo")
    _field(sig, "outputs", 2, "map:string:msg:.tensorflow.TensorInfo")
    _field(sig, "method_name", 3, "string")
    _field(sig, "defaults", 4, "map:string:msg:.tensorflow.TensorProto")
    return f


def _error_codes() -> Any:
    f = _file("tf_error_codes.proto", "tensorflow.error", [])
    _enum(f, "Code", ERROR_CODES)
    return f


def _serving() -> Any:
    f = _file("tf_serving_apis.proto", "tensorflow.serving", [
        "ckptsync/tf_tensor.proto", "ckptsync/tf_error_codes.proto",
        "google/protobuf/wrappers.proto", "google/protobuf/any.proto"])
    spec = f.message_type.add(name="ModelSpec")
    _field(spec, "name", 1, "string")
    _field(spec, "version", 2, "msg:.google.protobuf.Int64Value", oneof="version_choice")
    _field(spec, "version_label", 4, "string", oneof="version_choice")
    _field(spec, "signature_name", 3, "string")
    req = f.message_type.add(name="PredictRequest")
    _field(req, "model_spec", 1, "msg:.tensorflow.serving.ModelSpec")
    _field(req, "inputs", 2, "map:string:msg:.tensorflow.TensorProto")
    _field(req, "output_filter", 3, "string", repeated=True)
    resp = f.message_type.add(name="PredictResponse")
    _field(resp, "model_spec", 2, "msg:.tensorflow.serving.ModelSpec")
    _field(resp, "outputs", 1, "map:string:msg:.tensorflow.TensorProto")
    sigmap = f.message_type.add(name="SignatureDefMap")
    _field(sigmap, "signature_def", 1, "map:string:msg:.tensorflow.SignatureDef")
    mreq = f.message_type.add(name="GetModelMetadataRequest")
    _field(mreq, "model_spec", 1, "msg:.tensorflow.serving.ModelSpec")
    _field(mreq, "metadata_field", 2, "string", repeated=True)
    mresp = f.message_type.add(name="GetModelMetadataResponse")
    _field(mresp, "model_spec", 1, "msg:.tensorflow.serving.ModelSpec")
    _field(mresp, "metadata", 2, "map:string:msg:.google.protobuf.Any")
    status = f.message_type.add(name="StatusProto")
    _field(status, "error_code", 1, "enum:.tensorflow.error.Code")
    _field(status, "error_message", 2, "string")
    sreq = f.message_type.add(name="GetModelStatusRequest")
    _field(sreq, "model_spec", 1, "msg:.tensorflow.serving.ModelSpec")
    mvs = f.message_type.add(name="ModelVersionStatus")
    _enum(mvs, "State", MODEL_STATES)
    _field(mvs, "version", 1, "int64")
    _field(mvs, "state", 2, "enum:.tensorflow.serving.ModelVersionStatus.State")
    _field(mvs, "status", 3, "msg:.tensorflow.serving.StatusProto")
    sresp = f.message_type.add(name="GetModelStatusResponse")
    _field(sresp, "model_version_status", 1, "msg:.tensorflow.serving.ModelVersionStatus",
           repeated=True)
    # config/file_system_storage_path_source.proto: the version policy only.
    fs = f.message_type.add(name="FileSystemStoragePathSourceConfig")
    policy = fs.nested_type.add(name="ServableVersionPolicy")
    latest = policy.nested_type.add(name="Latest")
    _field(latest, "num_versions", 1, "uint32")
    policy.nested_type.add(name="All")
    specific = policy.nested_type.add(name="Specific")
    _field(specific, "versions", 1, "int64", repeated=True)
    p = ".tensorflow.serving.FileSystemStoragePathSourceConfig.ServableVersionPolicy"
    _field(policy, "latest", 100, f"msg:{p}.Latest", oneof="policy_choice")
    _field(policy, "all", 101, f"msg:{p}.All", oneof="policy_choice")
    _field(policy, "specific", 102, f"msg:{p}.Specific", oneof="policy_choice")
    # config/model_server_config.proto
    _enum(f, "ModelType", {"MODEL_TYPE_UNSPECIFIED": 0, "TENSORFLOW": 1, "OTHER": 2})
    config = f.message_type.add(name="ModelConfig")
    _field(config, "name", 1, "string")
    _field(config, "base_path", 2, "string")
    _field(config, "model_type", 3, "enum:.tensorflow.serving.ModelType")
    _field(config, "model_platform", 4, "string")
    _field(config, "model_version_policy", 7, f"msg:{p}")
    _field(config, "version_labels", 8, "map:string:int64")
    # ckptsync's extension (not TF Serving's): the model file whose graph serves the
    # checkpoints in base_path (TF Serving reads the graph from a SavedModel there).
    _field(config, "model_file", MODEL_FILE_FIELD_NUMBER, "string")
    clist = f.message_type.add(name="ModelConfigList")
    _field(clist, "config", 1, "msg:.tensorflow.serving.ModelConfig", repeated=True)
    server = f.message_type.add(name="ModelServerConfig")
    _field(server, "model_config_list", 1, "msg:.tensorflow.serving.ModelConfigList",
           oneof="config")
    _field(server, "custom_model_config", 2, "msg:.google.protobuf.Any", oneof="config")
    # apis/model_management.proto
    reload = f.message_type.add(name="ReloadConfigRequest")
    _field(reload, "config", 1, "msg:.tensorflow.serving.ModelServerConfig")
    _field(reload, "metric_names", 2, "string", repeated=True)
    reloaded = f.message_type.add(name="ReloadConfigResponse")
    _field(reloaded, "status", 1, "msg:.tensorflow.serving.StatusProto")
    # servables/tensorflow/session_bundle_config.proto (not in the tensorflow-serving-api
    # package, so not in the golden file): --batching_parameters_file's message.
    batching = f.message_type.add(name="BatchingParameters")
    for name, number in (("max_batch_size", 1), ("batch_timeout_micros", 2),
                         ("max_enqueued_batches", 3), ("num_batch_threads", 4)):
        _field(batching, name, number, "msg:.google.protobuf.Int64Value")
    _field(batching, "thread_pool_name", 5, "msg:.google.protobuf.StringValue")
    _field(batching, "allowed_batch_sizes", 6, "int64", repeated=True)
    _field(batching, "pad_variable_length_inputs", 7, "bool")
    # Newer TF Serving fields, known by name so that a file using them gets "not
    # supported" rather than "not TF Serving's" (only their text form is ever read).
    _field(batching, "enable_large_batch_splitting", 8, "msg:.google.protobuf.BoolValue")
    _field(batching, "max_execution_batch_size", 9, "msg:.google.protobuf.Int64Value")
    _field(batching, "batch_padding_policy", 10, "msg:.google.protobuf.StringValue")
    return f


def _build() -> dict[str, type]:
    pool = descriptor_pool.DescriptorPool()
    for module in (wrappers_pb2, any_pb2):
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb))
    for f in (_tensorflow(), _error_codes(), _serving()):
        pool.Add(f)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
            for name in (
                "tensorflow.TensorProto", "tensorflow.TensorShapeProto",
                "tensorflow.TensorInfo", "tensorflow.SignatureDef",
                *(f"tensorflow.serving.{n}" for n in (
                    "ModelSpec", "PredictRequest", "PredictResponse", "SignatureDefMap",
                    "GetModelMetadataRequest", "GetModelMetadataResponse",
                    "GetModelStatusRequest", "GetModelStatusResponse", "ModelVersionStatus",
                    "StatusProto", "ModelServerConfig", "ModelConfigList", "ModelConfig",
                    "FileSystemStoragePathSourceConfig.ServableVersionPolicy",
                    "ReloadConfigRequest", "ReloadConfigResponse", "BatchingParameters")))}


_CLASSES = _build()
TensorProto: Any = _CLASSES["tensorflow.TensorProto"]
TensorShapeProto: Any = _CLASSES["tensorflow.TensorShapeProto"]
TensorInfo: Any = _CLASSES["tensorflow.TensorInfo"]
SignatureDef: Any = _CLASSES["tensorflow.SignatureDef"]
ModelSpec: Any = _CLASSES["tensorflow.serving.ModelSpec"]
PredictRequest: Any = _CLASSES["tensorflow.serving.PredictRequest"]
PredictResponse: Any = _CLASSES["tensorflow.serving.PredictResponse"]
SignatureDefMap: Any = _CLASSES["tensorflow.serving.SignatureDefMap"]
GetModelMetadataRequest: Any = _CLASSES["tensorflow.serving.GetModelMetadataRequest"]
GetModelMetadataResponse: Any = _CLASSES["tensorflow.serving.GetModelMetadataResponse"]
GetModelStatusRequest: Any = _CLASSES["tensorflow.serving.GetModelStatusRequest"]
GetModelStatusResponse: Any = _CLASSES["tensorflow.serving.GetModelStatusResponse"]
ModelVersionStatus: Any = _CLASSES["tensorflow.serving.ModelVersionStatus"]
StatusProto: Any = _CLASSES["tensorflow.serving.StatusProto"]
ModelServerConfig: Any = _CLASSES["tensorflow.serving.ModelServerConfig"]
ModelConfigList: Any = _CLASSES["tensorflow.serving.ModelConfigList"]
ModelConfig: Any = _CLASSES["tensorflow.serving.ModelConfig"]
ServableVersionPolicy: Any = _CLASSES[
    "tensorflow.serving.FileSystemStoragePathSourceConfig.ServableVersionPolicy"]
ReloadConfigRequest: Any = _CLASSES["tensorflow.serving.ReloadConfigRequest"]
ReloadConfigResponse: Any = _CLASSES["tensorflow.serving.ReloadConfigResponse"]
BatchingParameters: Any = _CLASSES["tensorflow.serving.BatchingParameters"]
