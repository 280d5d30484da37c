"""gRPC side of bench_serving.py: a bare grpcio server doing the digits MLP's forward with
TF Serving's messages, and a load generator (grpc.aio, N calls in flight at once, one
pre-serialized PredictRequest), each run as its own process.

    python benchmarks/_grpc_load.py bare PORT_FILE CHECKPOINT_PREFIX
    python benchmarks/_grpc_load.py load PORT CONCURRENCY WARMUP_S DURATION_S < request.bin
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time

import numpy as np


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def predict_request_bytes(x: np.ndarray, model_name: str = "digits") -> bytes:
    from ckptsync.serving import tfs_protos as pb
    from ckptsync.serving.tensor_proto import make_tensor_proto

    request = pb.PredictRequest()
    request.model_spec.name = model_name
    request.inputs["x"].CopyFrom(make_tensor_proto(x))
    return request.SerializeToString()


def bare_main(port_file: str, prefix: str) -> None:
    """The same forward as infer serve's graph, the same messages, nothing else."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    import grpc

    from ckptsync import checkpoint as ckpt
    from ckptsync.serving import tfs_protos as pb
    from ckptsync.serving.tensor_proto import make_ndarray, make_tensor_proto

    p = ckpt.read_checkpoint(prefix)
    w0, b0, w1, b1, w2, b2 = (p[k] for k in ("dense0/w", "dense0/b", "dense1/w", "dense1/b",
                                             "dense2/w", "dense2/b"))

    async def predict(request, context):
        x = make_ndarray(request.inputs["x"])
        h = np.maximum(x @ w0 + b0, 0)
        h = np.maximum(h @ w1 + b1, 0)
        logits = h @ w2 + b2
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        response = pb.PredictResponse()
        response.model_spec.name = request.model_spec.name
        response.model_spec.version.value = 1
        response.outputs["probabilities"].CopyFrom(
            make_tensor_proto(e / e.sum(axis=1, keepdims=True)))
        response.outputs["classes"].CopyFrom(make_tensor_proto(logits.argmax(axis=1)))
        return response

    async def serve() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "tensorflow.serving.PredictionService",
            {"Predict": grpc.unary_unary_rpc_method_handler(
                predict, request_deserializer=pb.PredictRequest.FromString,
                response_serializer=pb.PredictResponse.SerializeToString)})])
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        with open(port_file + ".tmp", "w") as f:
            f.write(str(port))
        os.replace(port_file + ".tmp", port_file)
        await server.wait_for_termination()

    asyncio.run(serve())


async def _load(port: int, request: bytes, concurrency: int, warmup_s: float,
                duration_s: float) -> dict:
    import grpc

    lat: list[float] = []
    codes: dict[str, int] = {}
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary("/tensorflow.serving.PredictionService/Predict",
                                   request_serializer=None, response_deserializer=None)
        t_start = time.perf_counter() + warmup_s
        t_end = t_start + duration_s

        async def worker() -> None:
            while True:
                t0 = time.perf_counter()
                if t0 >= t_end:
                    return
                try:
                    await call(request, timeout=30)
                    code = "OK"
                except grpc.RpcError as e:
                    code = e.code().name
                if t0 >= t_start:
                    lat.append(time.perf_counter() - t0)
                    codes[code] = codes.get(code, 0) + 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    lat.sort()
    n = len(lat)
    return {"requests": n, "rps": n / duration_s, "p50_ms": lat[n // 2] * 1e3 if n else None,
            "p99_ms": lat[min(n - 1, int(n * 0.99))] * 1e3 if n else None, "codes": codes}


def load_main(argv: list[str]) -> None:
    port, concurrency, warmup_s, duration_s = (int(argv[0]), int(argv[1]), float(argv[2]),
                                               float(argv[3]))
    request = sys.stdin.buffer.read()
    print(json.dumps(asyncio.run(_load(port, request, concurrency, warmup_s, duration_s))))


if __name__ == "__main__":
    if sys.argv[1] == "bare":
        bare_main(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "load":
        load_main(sys.argv[2:])
    else:
        raise SystemExit(f"usage: {__doc__}")
