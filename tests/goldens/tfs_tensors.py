"""Writes tfs_tensors.json: how TensorFlow's C++ ``Tensor::FromProto`` (the code TF
Serving runs on a request's tensors; ``tf.io.parse_tensor`` calls it) reads each case of
CASES, built with TensorFlow's own ``TensorProto``: the values and shape, or that it fails.

    scripts/setup-tf-client && .tf-client-venv/bin/python tests/goldens/tfs_tensors.py
"""

import json
import os

import numpy as np

# name -> (dtype name, shape, TensorProto fields)
CASES = {
    "float_content": ("DT_FLOAT", [2, 3],
                      {"tensor_content": np.arange(6, dtype="<f4").tobytes()}),
    "float_val_fewer_pads_with_last": ("DT_FLOAT", [2, 3], {"float_val": [1.5, 2.5]}),
    "float_val_none_is_zeros": ("DT_FLOAT", [2], {}),
    "float_val_more_than_shape": ("DT_FLOAT", [2], {"float_val": [1.0, 2.0, 3.0]}),
    "scalar": ("DT_FLOAT", [], {"float_val": [5.0]}),
    "double_val": ("DT_DOUBLE", [3], {"double_val": [0.1, 0.2, 0.3]}),
    "int8_in_int_val": ("DT_INT8", [3], {"int_val": [-128, 0, 127]}),
    "uint8_in_int_val": ("DT_UINT8", [2], {"int_val": [0, 255]}),
    "int16_in_int_val": ("DT_INT16", [2], {"int_val": [-300, 300]}),
    "int32_fewer": ("DT_INT32", [4], {"int_val": [7]}),
    "int64_val": ("DT_INT64", [2, 2], {"int64_val": [1, -2, 3, 2 ** 40]}),
    "uint32_val": ("DT_UINT32", [2], {"uint32_val": [1, 2 ** 32 - 1]}),
    "uint64_val": ("DT_UINT64", [1], {"uint64_val": [2 ** 64 - 1]}),
    "bool_val": ("DT_BOOL", [3], {"bool_val": [True, False, True]}),
    "half_val_bits": ("DT_HALF", [2], {"half_val": [int(np.float16(1.5).view(np.uint16)),
                                                    int(np.float16(-2).view(np.uint16))]}),
    "scomplex_val_pairs": ("DT_COMPLEX64", [2], {"scomplex_val": [1, 2, 3, 4]}),
    "int64_content": ("DT_INT64", [3], {"tensor_content": np.array([5, 6, 7], "<i8").tobytes()}),
    "content_of_the_wrong_length": ("DT_FLOAT", [3],
                                    {"tensor_content": np.arange(2, dtype="<f4").tobytes()}),
    "empty_shape_with_values": ("DT_FLOAT", [0, 3], {"float_val": [1.0]}),
}


def _plain(a: np.ndarray) -> list:
    if a.dtype.kind == "c":
        return [[float(v.real), float(v.imag)] for v in a.reshape(-1)]
    return [v.item() if hasattr(v, "item") else v for v in a.reshape(-1)]


def main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # Imported here: pytest's doctest collection imports this file without TensorFlow.
    import tensorflow as tf
    from tensorflow.core.framework import tensor_pb2

    tf_types = {"DT_FLOAT": tf.float32, "DT_DOUBLE": tf.float64, "DT_INT8": tf.int8,
                "DT_UINT8": tf.uint8, "DT_INT16": tf.int16, "DT_INT32": tf.int32,
                "DT_INT64": tf.int64, "DT_UINT32": tf.uint32, "DT_UINT64": tf.uint64,
                "DT_BOOL": tf.bool, "DT_HALF": tf.float16, "DT_COMPLEX64": tf.complex64}
    out = {}
    for name, (dtype, shape, fields) in CASES.items():
        proto = tensor_pb2.TensorProto(dtype=tf.dtypes.as_dtype(tf_types[dtype]).as_datatype_enum)
        for s in shape:
            proto.tensor_shape.dim.add(size=s)
        for k, v in fields.items():
            if isinstance(v, bytes):
                setattr(proto, k, v)
            else:
                getattr(proto, k).extend(v)
        serialized = proto.SerializeToString()
        try:
            a = tf.io.parse_tensor(serialized, tf_types[dtype]).numpy()
            result = {"shape": list(a.shape), "values": _plain(a)}
        except tf.errors.OpError as e:
            result = {"error": type(e).__name__}
        out[name] = {"proto_hex": serialized.hex(), "dtype": dtype, **result}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tfs_tensors.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
