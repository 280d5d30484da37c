"""The protobuf messages of a TF tensor bundle, built at import from a descriptor.

Field for field TF's ``tensorflow/core/protobuf/tensor_bundle.proto`` (with the parts of
``versions.proto``, ``tensor_shape.proto``, ``tensor_slice.proto`` and ``types.proto``
it uses), in a private descriptor pool so they never clash with another copy of TF's
protos (TensorBoard's, TensorFlow's) in the same process::

    message BundleHeaderProto { int32 num_shards = 1; Endianness endianness = 2;
                                VersionDef version = 3; }
    message BundleEntryProto { DataType dtype = 1; TensorShapeProto shape = 2;
        int32 shard_id = 3; int64 offset = 4; int64 size = 5; fixed32 crc32c = 6;
        repeated TensorSliceProto slices = 7; }

Parsing and serializing is the ``protobuf`` package's.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["BundleHeaderProto", "BundleEntryProto", "DATA_TYPES"]

#: TF's DataType enum values (types.proto) for the dtypes a bundle may hold here.
DATA_TYPES = {
    "DT_INVALID": 0, "DT_FLOAT": 1, "DT_DOUBLE": 2, "DT_INT32": 3, "DT_UINT8": 4,
    "DT_INT16": 5, "DT_INT8": 6, "DT_STRING": 7, "DT_COMPLEX64": 8, "DT_INT64": 9,
    "DT_BOOL": 10, "DT_QINT8": 11, "DT_QUINT8": 12, "DT_QINT32": 13, "DT_BFLOAT16": 14,
    "DT_QINT16": 15, "DT_QUINT16": 16, "DT_UINT16": 17, "DT_COMPLEX128": 18,
    "DT_HALF": 19, "DT_RESOURCE": 20, "DT_VARIANT": 21, "DT_UINT32": 22, "DT_UINT64": 23,
}

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED


def _message(file: Any, name: str, fields: list[tuple[str, int, int, str, int]]) -> Any:
    msg = file.message_type.add(name=name)
    for fname, number, ftype, type_name, label in fields:
        field = msg.field.add(name=fname, number=number, type=ftype, label=label)
        if type_name:
            field.type_name = type_name
    return msg


def _build() -> tuple[type, type]:
    file = descriptor_pb2.FileDescriptorProto(
        name="ckptsync/tf_tensor_bundle.proto", package="tensorflow", syntax="proto3")
    dtype = file.enum_type.add(name="DataType")
    for name, number in DATA_TYPES.items():
        dtype.value.add(name=name, number=number)
    _message(file, "VersionDef", [("producer", 1, _F.TYPE_INT32, "", _OPT),
                                  ("min_consumer", 2, _F.TYPE_INT32, "", _OPT),
                                  ("bad_consumers", 3, _F.TYPE_INT32, "", _REP)])
    shape = _message(file, "TensorShapeProto", [
        ("dim", 2, _F.TYPE_MESSAGE, ".tensorflow.TensorShapeProto.Dim", _REP),
        ("unknown_rank", 3, _F.TYPE_BOOL, "", _OPT)])
    dim = shape.nested_type.add(name="Dim")
    dim.field.add(name="size", number=1, type=_F.TYPE_INT64, label=_OPT)
    dim.field.add(name="name", number=2, type=_F.TYPE_STRING, label=_OPT)
    tslice = _message(file, "TensorSliceProto", [
        ("extent", 1, _F.TYPE_MESSAGE, ".tensorflow.TensorSliceProto.Extent", _REP)])
    extent = tslice.nested_type.add(name="Extent")
    extent.field.add(name="start", number=1, type=_F.TYPE_INT64, label=_OPT)
    extent.oneof_decl.add(name="has_length")
    extent.field.add(name="length", number=2, type=_F.TYPE_INT64, label=_OPT, oneof_index=0)
    header = _message(file, "BundleHeaderProto", [
        ("num_shards", 1, _F.TYPE_INT32, "", _OPT),
        ("endianness", 2, _F.TYPE_ENUM, ".tensorflow.BundleHeaderProto.Endianness", _OPT),
        ("version", 3, _F.TYPE_MESSAGE, ".tensorflow.VersionDef", _OPT)])
    endian = header.enum_type.add(name="Endianness")
    endian.value.add(name="LITTLE", number=0)
    endian.value.add(name="BIG", number=1)
    _message(file, "BundleEntryProto", [
        ("dtype", 1, _F.TYPE_ENUM, ".tensorflow.DataType", _OPT),
        ("shape", 2, _F.TYPE_MESSAGE, ".tensorflow.TensorShapeProto", _OPT),
        ("shard_id", 3, _F.TYPE_INT32, "", _OPT),
        ("offset", 4, _F.TYPE_INT64, "", _OPT),
        ("size", 5, _F.TYPE_INT64, "", _OPT),
        ("crc32c", 6, _F.TYPE_FIXED32, "", _OPT),
        ("slices", 7, _F.TYPE_MESSAGE, ".tensorflow.TensorSliceProto", _REP)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName(
                "tensorflow.BundleHeaderProto")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName(
                "tensorflow.BundleEntryProto")))


BundleHeaderProto, BundleEntryProto = _build()
