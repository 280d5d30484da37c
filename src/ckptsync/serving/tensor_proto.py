"""``TensorProto`` <-> numpy, as TF Serving reads its requests and writes its answers.

:func:`make_ndarray` decodes a request's tensor as TensorFlow's C++ ``Tensor::FromProto``
does (the code TF Serving runs): ``tensor_content`` when it is set (its length must be
the shape's bytes), else the dtype's typed field (``float_val``, ``int_val``, ...), where
no values mean zeros, fewer values than the shape are padded with the last, and values
beyond the shape are ignored. :func:`make_tensor_proto` encodes an answer's tensor in the
typed field, as TF Serving's predict does by default (``AsProtoField``); TensorFlow's
``tf.make_ndarray`` reads either form.

``tests/goldens/tfs_tensors.json`` (``tf.io.parse_tensor``, i.e. ``Tensor::FromProto``,
on the same protos) is what a test checks these against.

Thread-safety: pure functions.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ckptsync.errors import InvalidArgumentError, ResourceExhaustedError

from . import tfs_protos as pb

__all__ = ["fill_tensor_proto", "make_ndarray", "make_tensor_proto", "numpy_dtype", "tf_dtype"]

# DataType -> (numpy dtype, TensorProto field of its values).
_TYPES: dict[int, tuple[np.dtype, str]] = {
    pb.DATA_TYPES[k]: (np.dtype(d), f) for k, d, f in (
        ("DT_FLOAT", "<f4", "float_val"), ("DT_DOUBLE", "<f8", "double_val"),
        ("DT_INT32", "<i4", "int_val"), ("DT_UINT8", "u1", "int_val"),
        ("DT_INT16", "<i2", "int_val"), ("DT_INT8", "i1", "int_val"),
        ("DT_UINT16", "<u2", "int_val"), ("DT_INT64", "<i8", "int64_val"),
        ("DT_BOOL", "?", "bool_val"), ("DT_HALF", "<f2", "half_val"),
        ("DT_UINT32", "<u4", "uint32_val"), ("DT_UINT64", "<u8", "uint64_val"),
        ("DT_COMPLEX64", "<c8", "scomplex_val"), ("DT_COMPLEX128", "<c16", "dcomplex_val"),
        ("DT_STRING", "O", "string_val"))}
_BY_NUMPY = {d.newbyteorder("=") if d.kind != "O" else d: t for t, (d, _) in _TYPES.items()}
_NAMES = {v: k for k, v in pb.DATA_TYPES.items()}


def numpy_dtype(tf_type: int) -> np.dtype:
    """The numpy dtype of TF ``DataType`` ``tf_type`` (``object`` for ``DT_STRING``:
    bytes).

    Raises:
        InvalidArgumentError: a type numpy has no dtype for here (``DT_BFLOAT16``, the
            quantized and resource types), named.
    """
    try:
        return _TYPES[tf_type][0]
    except KeyError:
        raise InvalidArgumentError(
            None, None, f"tensor dtype {_NAMES.get(tf_type, tf_type)} is not supported "
            f"(use one of {', '.join(_NAMES[t] for t in sorted(_TYPES))})") from None


def tf_dtype(dtype: np.dtype) -> int:
    """The TF ``DataType`` of numpy ``dtype``.

    Raises:
        InvalidArgumentError: no TF type has this dtype (e.g. ``float128``).
    """
    d = np.dtype(dtype)
    t = _BY_NUMPY.get(d if d.kind == "O" else d.newbyteorder("="))
    if t is None:
        raise InvalidArgumentError(None, None, f"no TensorFlow dtype for numpy {d}")
    return t


def make_ndarray(proto: Any, name: str = "tensor", max_bytes: int | None = None) -> np.ndarray:
    """The array ``proto`` (a ``TensorProto``) holds, as ``Tensor::FromProto`` reads it.

    Args:
        proto: a :class:`~.tfs_protos.TensorProto`.
        name: what to call it in errors (the input's name).
        max_bytes: most bytes the decoded array may hold (None: no bound): the typed
            fields fill a shape from one value, so a few bytes on the wire can ask for
            any size.

    Returns:
        An array of the proto's shape and dtype (read-only when it came from
        ``tensor_content``; ``object`` of bytes for ``DT_STRING``).

    Raises:
        InvalidArgumentError: an unknown rank, a negative dimension, an unsupported dtype,
            or ``tensor_content`` whose length is not the shape's bytes; the message
            names ``name``.
        ResourceExhaustedError: the shape holds more than ``max_bytes``.
    """
    shape_proto = proto.tensor_shape
    if shape_proto.unknown_rank:
        raise InvalidArgumentError(None, None, f"{name}: a tensor of unknown rank")
    shape = tuple(d.size for d in shape_proto.dim)
    if any(s < 0 for s in shape):
        raise InvalidArgumentError(None, None, f"{name}: negative dimension in {list(shape)}")
    try:
        dtype = numpy_dtype(proto.dtype)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(None, None, f"{name}: {e.message}") from None
    n = math.prod(shape)  # Python ints: no overflow
    if max_bytes is not None and n * max(dtype.itemsize, 1) > max_bytes:
        raise ResourceExhaustedError(
            None, None, f"{name}: shape {list(shape)} of {_NAMES[proto.dtype]} is "
            f"{n * dtype.itemsize} bytes, more than the server's limit of {max_bytes} bytes "
            "(--max-request-bytes)")
    content = proto.tensor_content
    if content and dtype.kind != "O":
        if len(content) != n * dtype.itemsize:
            raise InvalidArgumentError(
                None, None, f"{name}: tensor_content holds {len(content)} bytes, but shape "
                f"{list(shape)} of {_NAMES[proto.dtype]} needs {n * dtype.itemsize}")
        return np.frombuffer(content, dtype).reshape(shape)
    field = _TYPES[proto.dtype][1]
    values = getattr(proto, field)
    if dtype.kind == "c":  # pairs of (real, imaginary)
        if len(values) % 2:
            raise InvalidArgumentError(
                None, None, f"{name}: {field} holds {len(values)} numbers; a "
                f"{_NAMES[proto.dtype]} is a (real, imaginary) pair, so they must be even")
        flat = np.asarray(values, dtype.type(0).real.dtype).view(dtype)
    elif dtype.kind == "O":
        flat = np.empty(len(values), object)
        flat[:] = list(values)
    elif field == "half_val":  # the float16's bits in an int32
        flat = np.asarray(values, np.int32).astype(np.uint16).view(np.float16)
    elif field == "int_val":  # int32s, cast to the narrower type as C++ does
        flat = np.asarray(values, np.int32).astype(dtype)
    else:
        flat = np.asarray(values, dtype)
    if len(flat) >= n:
        return flat[:n].reshape(shape)
    out = np.empty(n, dtype)
    if len(flat):
        out[:len(flat)] = flat
        out[len(flat):] = flat[-1]
    else:
        out[:] = b"" if dtype.kind == "O" else 0
    return out.reshape(shape)


def make_tensor_proto(arr: np.ndarray) -> Any:
    """``arr`` as a ``TensorProto``, its values in the dtype's typed field.

    Raises:
        InvalidArgumentError: no TF type has ``arr``'s dtype.
    """
    proto = pb.TensorProto()
    fill_tensor_proto(proto, arr)
    return proto


def fill_tensor_proto(proto: Any, arr: np.ndarray) -> None:
    """Writes ``arr`` into the empty ``TensorProto`` ``proto`` (a map entry of an answer,
    say), as :func:`make_tensor_proto`.

    Raises:
        InvalidArgumentError: no TF type has ``arr``'s dtype.
    """
    arr = np.asarray(arr)
    t = tf_dtype(arr.dtype)
    proto.dtype = t
    dims = proto.tensor_shape.dim
    for s in arr.shape:
        dims.add(size=s)
    field = _TYPES[t][1]
    flat = arr.reshape(-1)
    if arr.dtype.kind == "c":
        values: Any = flat.view(flat.real.dtype).tolist()
    elif field == "half_val":
        values = flat.view(np.uint16).tolist()
    else:
        values = flat.tolist()
    getattr(proto, field).extend(values)
