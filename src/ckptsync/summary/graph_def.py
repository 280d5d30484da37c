"""A ckptsync :class:`~ckptsync.graph.Graph` as TF's ``GraphDef`` message, for
TensorBoard's graph dashboard (``FileWriter.add_graph``).

Each op becomes a ``NodeDef`` with its name, type, device and inputs (``"op:1"`` for a
second output, ``"^op"`` for a control input, as TF), ``_output_shapes`` (as TF's
``as_graph_def(add_shapes=True)``), ``dtype`` for ops that have one output, and the op's
attributes that are plain numbers, booleans or strings. Kernel-side values (a constant's
array, a function) are left out: the graph is for viewing, not for running in TF.
"""

from __future__ import annotations

from typing import Any

from .. import dtypes as _dtypes
from . import _tb

__all__ = ["as_graph_def", "datatype_enum"]

_TF_NAMES = {
    "float16": "DT_HALF", "float32": "DT_FLOAT", "float64": "DT_DOUBLE", "int8": "DT_INT8",
    "int16": "DT_INT16", "int32": "DT_INT32", "int64": "DT_INT64", "uint8": "DT_UINT8",
    "uint16": "DT_UINT16", "uint32": "DT_UINT32", "uint64": "DT_UINT64", "bool": "DT_BOOL",
    "complex64": "DT_COMPLEX64", "complex128": "DT_COMPLEX128", "string": "DT_STRING",
}


def datatype_enum(dtype: _dtypes.DType) -> int:
    """TF's ``DataType`` enum value for ``dtype`` (``DT_FLOAT`` for ``float32``)."""
    return int(_tb.proto("types_pb2.DataType").Value(_TF_NAMES[dtype.name]))


def _shape_proto(shape: Any) -> Any:
    cls = _tb.proto("tensor_shape_pb2.TensorShapeProto")
    if shape.ndims is None:
        return cls(unknown_rank=True)
    return cls(dim=[cls.Dim(size=-1 if d is None else int(d)) for d in shape.as_list()])


def _attr(value: Any) -> Any:
    attr_cls = _tb.proto("attr_value_pb2.AttrValue")
    if isinstance(value, bool):
        return attr_cls(b=value)
    if isinstance(value, int):
        return attr_cls(i=value)
    if isinstance(value, float):
        return attr_cls(f=value)
    if isinstance(value, str):
        return attr_cls(s=value.encode())
    if isinstance(value, _dtypes.DType):
        return attr_cls(type=datatype_enum(value))
    return None


def as_graph_def(graph: Any) -> Any:
    """A ``tensorboard.compat.proto.graph_pb2.GraphDef`` of ``graph``'s ops."""
    graph_def = _tb.proto("graph_pb2.GraphDef")()
    attr_cls = _tb.proto("attr_value_pb2.AttrValue")
    for op in graph.get_operations():
        node = graph_def.node.add()
        node.name, node.op, node.device = op.name, op.type, op.device or ""
        node.input.extend(t.op.name if t.value_index == 0 else f"{t.op.name}:{t.value_index}"
                          for t in op.inputs)
        node.input.extend(f"^{c.name}" for c in op.control_inputs)
        if len(op.outputs) == 1:
            node.attr["dtype"].CopyFrom(attr_cls(type=datatype_enum(op.outputs[0].dtype)))
        node.attr["_output_shapes"].CopyFrom(attr_cls(list=attr_cls.ListValue(
            shape=[_shape_proto(t.shape) for t in op.outputs])))
        for key, value in sorted(op.attrs.items()):
            a = _attr(value)
            if a is not None and key not in node.attr:
                node.attr[key].CopyFrom(a)
    return graph_def
