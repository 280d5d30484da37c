"""TensorProto decoding against TensorFlow's C++ Tensor::FromProto (the golden file
tests/goldens/tfs_tensors.json, from tf.io.parse_tensor on the same bytes), and encoding
round trips."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ckptsync.errors import InvalidArgumentError
from ckptsync.serving import tfs_protos as pb
from ckptsync.serving.tensor_proto import make_ndarray, make_tensor_proto

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "goldens", "tfs_tensors.json")
with open(GOLDEN) as _f:
    CASES = json.load(_f)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_request_tensor_reads_as_tensorflow_reads_it(name):
    case = CASES[name]
    proto = pb.TensorProto.FromString(bytes.fromhex(case["proto_hex"]))
    if "error" in case:
        with pytest.raises(InvalidArgumentError, match="input 'x'"):
            make_ndarray(proto, "input 'x'")
        return
    arr = make_ndarray(proto)
    assert list(arr.shape) == case["shape"]
    flat = arr.reshape(-1)
    if arr.dtype.kind == "c":
        assert [[v.real, v.imag] for v in flat] == case["values"]
    else:
        assert flat.tolist() == case["values"]


@pytest.mark.parametrize("dtype", ["<f4", "<f8", "i1", "u1", "<i2", "<u2", "<i4", "<i8",
                                   "<u4", "<u8", "?", "<f2", "<c8", "<c16"])
def test_an_answer_tensor_round_trips_through_its_typed_field(dtype):
    arr = (np.arange(6).reshape(2, 3) % 2 == 1) if dtype == "?" else \
        (np.arange(6).reshape(2, 3) * 3 - 4).astype(dtype)
    proto = make_tensor_proto(arr)
    assert not proto.tensor_content  # AsProtoField, as TF Serving's predict answers
    back = make_ndarray(pb.TensorProto.FromString(proto.SerializeToString()))
    assert back.dtype == arr.dtype and back.shape == arr.shape
    np.testing.assert_array_equal(back, arr)


def test_unsupported_and_malformed_tensors_are_named():
    p = pb.TensorProto(dtype=pb.DATA_TYPES["DT_BFLOAT16"])
    with pytest.raises(InvalidArgumentError, match="images: tensor dtype DT_BFLOAT16"):
        make_ndarray(p, "images")
    p = pb.TensorProto(dtype=pb.DATA_TYPES["DT_FLOAT"])
    p.tensor_shape.unknown_rank = True
    with pytest.raises(InvalidArgumentError, match="unknown rank"):
        make_ndarray(p)
    p = pb.TensorProto(dtype=pb.DATA_TYPES["DT_FLOAT"])
    p.tensor_shape.dim.add(size=-1)
    with pytest.raises(InvalidArgumentError, match="negative dimension"):
        make_ndarray(p)
