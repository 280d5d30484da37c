"""Request batching (ckptsync.serving.batching): concurrent predicts run as one forward on
one snapshot, split back exactly; padding to allowed sizes; a full queue refuses at once;
TF Serving's BatchingParameters text format; the --enable-batching flags."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time

import httpx
import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from ckptsync import errors
from ckptsync.serving import ModelManager, Signature, TensorSpec
from ckptsync.serving._responses import map_error
from ckptsync.serving.batching import (
    BatchingOptions,
    BatchQueueFullError,
    BatchScheduler,
    run_unbatched,
)

from .conftest import MODEL_SOURCE, MLPServable, mlp_params, publish, wait_until
from .test_cli import infer, run_infer, wait_for_port


class RecordingMLP(MLPServable):
    """The MLP, recording the rows of each forward it runs."""

    def __init__(self):
        super().__init__(two_outputs=True)
        self.rows: list[int] = []
        self.threads: list[int] = []  # the thread of each forward

    def run(self, params, inputs):
        self.rows.append(inputs["x"].shape[0])
        self.threads.append(threading.get_ident())
        return super().run(params, inputs)


@pytest.fixture
def manager(tmp_path):
    servable = RecordingMLP()
    publish(tmp_path, 3)
    m = ModelManager(servable, tmp_path)
    m.start()
    wait_until(lambda: m.version == 3)
    yield m
    m.close()


def rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)


def run_all(scheduler: BatchScheduler, xs: list[np.ndarray], version=None):
    async def main():
        return await asyncio.gather(
            *(scheduler.run("serving_default", version, {"x": x}) for x in xs),
            return_exceptions=True)
    return asyncio.run(main())


def test_concurrent_requests_run_as_one_forward_and_get_exactly_their_rows(manager):
    registry = CollectorRegistry()
    scheduler = BatchScheduler(manager, BatchingOptions(
        max_batch_size=12, batch_timeout_micros=10_000_000, num_batch_threads=1), registry)
    try:
        xs = [rows(n, i) for i, n in enumerate([1, 3, 2, 1, 4, 1])]  # 12 rows: one batch
        results = run_all(scheduler, xs)
    finally:
        scheduler.close()
    assert manager.servable.rows == [12] and scheduler.batches_run == 1
    assert registry.get_sample_value("ckptsync_batch_size_sum") == 12
    assert registry.get_sample_value("ckptsync_batch_latency_seconds_count") == 6
    # Exactly the rows of the one forward over all twelve (a forward of 12 rows may round
    # differently from twelve of 1: BLAS picks its kernel by size, as under TF Serving).
    whole = MLPServable(two_outputs=True).run(mlp_params(3), {"x": np.concatenate(xs)})
    start = 0
    for x, (outputs, version) in zip(xs, results):
        assert version == 3
        np.testing.assert_array_equal(outputs["logits"], whole["logits"][start:start + len(x)])
        np.testing.assert_array_equal(outputs["classes"],
                                      whole["classes"][start:start + len(x)])
        start += len(x)


@pytest.mark.parametrize("timeout_micros", [0, 10_000_000])
def test_small_batches_run_on_the_event_loop_with_the_requests_of_one_iteration(
        manager, timeout_micros):
    # No timeout: the requests that reach the scheduler in one loop iteration form one
    # batch, run at the iteration's end; a timeout: the batch runs once full.
    scheduler = BatchScheduler(manager, BatchingOptions(
        max_batch_size=12, batch_timeout_micros=timeout_micros, num_batch_threads=1),
        inline_max_bytes=1 << 18)
    try:
        xs = [rows(n, i) for i, n in enumerate([1, 3, 2, 1, 4, 1])]
        results = run_all(scheduler, xs)
    finally:
        scheduler.close()
    assert manager.servable.rows == [12] and scheduler.batches_run == 1
    assert manager.servable.threads == [threading.get_ident()]  # asyncio.run's thread
    whole = MLPServable(two_outputs=True).run(mlp_params(3), {"x": np.concatenate(xs)})
    np.testing.assert_array_equal(np.concatenate([r[0]["logits"] for r in results]),
                                  whole["logits"])


def test_a_batch_over_the_inline_bound_runs_on_a_batch_thread(manager):
    scheduler = BatchScheduler(manager, BatchingOptions(
        max_batch_size=64, batch_timeout_micros=0, num_batch_threads=1),
        inline_max_bytes=4 * 4 * 4)  # 4 rows of 4 float32
    try:
        small, big = run_all(scheduler, [rows(2, 0)]), run_all(scheduler, [rows(9, 1)])
    finally:
        scheduler.close()
    assert manager.servable.rows == [2, 9]
    loop_thread = threading.get_ident()
    assert manager.servable.threads[0] == loop_thread != manager.servable.threads[1]
    assert small[0][1] == big[0][1] == 3


def test_a_batch_is_padded_to_the_next_allowed_size_and_the_padding_dropped(manager):
    scheduler = BatchScheduler(manager, BatchingOptions(
        max_batch_size=8, batch_timeout_micros=0, num_batch_threads=1,
        allowed_batch_sizes=(2, 4, 8)))
    try:
        x = rows(3, 7)
        ((outputs, _),) = run_all(scheduler, [x])
    finally:
        scheduler.close()
    assert manager.servable.rows == [4]
    assert outputs["logits"].shape == (3, 3)
    padded = np.concatenate([x, x[-1:]])
    np.testing.assert_array_equal(
        outputs["logits"], MLPServable().run(mlp_params(3), {"x": padded})["logits"][:3])


def test_a_full_queue_refuses_at_once_and_the_others_are_answered(manager):
    started, release = threading.Event(), threading.Event()

    def hold():  # the first batch's forward waits until the refusal has been seen
        if not started.is_set():
            started.set()
            release.wait(30)

    manager.servable.run_hook = hold
    scheduler = BatchScheduler(manager, BatchingOptions(
        max_batch_size=1, batch_timeout_micros=0, max_enqueued_batches=1,
        num_batch_threads=1))

    async def main():
        first = asyncio.ensure_future(scheduler.run("serving_default", None, {"x": rows(1, 1)}))
        while not started.is_set():
            await asyncio.sleep(0.001)
        second = asyncio.ensure_future(scheduler.run("serving_default", None, {"x": rows(1, 2)}))
        await asyncio.sleep(0)  # the second is queued (the only thread is busy)
        with pytest.raises(BatchQueueFullError, match="batch queue is full"):
            await scheduler.run("serving_default", None, {"x": rows(1, 3)})
        release.set()
        return await first, await second

    try:
        (a, va), (b, vb) = asyncio.run(main())
    finally:
        release.set()
        scheduler.close()
    assert va == vb == 3 and a["logits"].shape == b["logits"].shape == (1, 3)
    status, message, headers = map_error(
        BatchQueueFullError(None, None, "full"), "POST", "/v1/models/m:predict")
    assert (status, headers) == (429, {"Retry-After": "1"})
    assert BatchQueueFullError.error_code == errors.RESOURCE_EXHAUSTED  # gRPC's code


def test_more_rows_than_max_batch_size_is_refused(manager):
    scheduler = BatchScheduler(manager, BatchingOptions(max_batch_size=4))
    try:
        (result,) = run_all(scheduler, [rows(5, 0)])
    finally:
        scheduler.close()
    assert isinstance(result, errors.InvalidArgumentError)
    assert "Task size 5 is larger than maximum input batch size 4" in str(result)


def test_a_batch_runs_on_one_version_while_versions_change(manager, tmp_path):
    """Batches formed while new versions land: every answer is exactly its version's."""
    scheduler = BatchScheduler(manager, BatchingOptions(
        max_batch_size=16, batch_timeout_micros=500, num_batch_threads=2))
    stop = threading.Event()

    def publisher():
        for step in range(4, 40):
            publish(tmp_path, step)
            if stop.wait(0.01):
                return

    t = threading.Thread(target=publisher)
    t.start()
    try:
        results: list = []
        deadline = time.monotonic() + 60
        i = 0  # at least 30 rounds, and on until a second version has answered
        while i < 30 or (len({v for _, (_, v) in results}) < 2
                         and time.monotonic() < deadline):
            xs = [rows(1 + (j % 3), 100 * i + j) for j in range(8)]
            results += list(zip(xs, run_all(scheduler, xs)))
            i += 1
    finally:
        stop.set()
        t.join(30)
        scheduler.close()
    versions = set()
    for x, (outputs, version) in results:
        versions.add(version)
        want = MLPServable().run(mlp_params(version), {"x": x})
        # Each version's biases are its step: any other version's outputs are far off.
        np.testing.assert_allclose(outputs["logits"], want["logits"], rtol=1e-5, atol=1e-5)
    assert len(versions) > 1


def test_unbatched_runs_on_the_snapshot_of_the_version_asked_for(manager):
    outputs, version = run_unbatched(manager, "serving_default", 3, {"x": rows(2, 1)})
    assert version == 3 and outputs["logits"].shape == (2, 3)
    with pytest.raises(errors.NotFoundError, match="version 9 is not being served"):
        run_unbatched(manager, "serving_default", 9, {"x": rows(2, 1)})


def test_tf_servings_batching_parameters_text_format():
    options = BatchingOptions.from_text(
        "max_batch_size { value: 64 }\nbatch_timeout_micros { value: 2000 }\n"
        "max_enqueued_batches { value: 5 }\nnum_batch_threads { value: 3 }\n"
        "allowed_batch_sizes: 16\nallowed_batch_sizes: 64\n")
    assert options == BatchingOptions(max_batch_size=64, batch_timeout_micros=2000,
                                      max_enqueued_batches=5, num_batch_threads=3,
                                      allowed_batch_sizes=(16, 64))
    with pytest.raises(errors.InvalidArgumentError, match="f.txt: not TF Serving's"):
        BatchingOptions.from_text("max_batch_size: 64", "f.txt")
    with pytest.raises(errors.InvalidArgumentError, match="must increase and end with"):
        BatchingOptions.from_text("max_batch_size { value: 8 } allowed_batch_sizes: 4")
    with pytest.raises(errors.InvalidArgumentError, match="num_batch_threads must be"):
        BatchingOptions(num_batch_threads=0)


@pytest.mark.parametrize("field, accepted", [
    ('thread_pool_name { value: "batch" }', True),
    ("pad_variable_length_inputs: false", True),
    ("enable_large_batch_splitting { value: false }", True),
    ("max_execution_batch_size { value: 64 }", True),
    ('batch_padding_policy { value: "PAD_UP" }', True),
    ("pad_variable_length_inputs: true", False),
    ("enable_large_batch_splitting { value: true }", False),
    ("max_execution_batch_size { value: 16 }", False),
    ('batch_padding_policy { value: "MINIMIZE_TPU_COST_PER_REQUEST" }', False),
])
def test_tf_servings_other_batching_parameters_are_known_and_refused_unless_moot(
        field, accepted):
    text = f"max_batch_size {{ value: 64 }}\n{field}\n"
    if accepted:
        assert BatchingOptions.from_text(text).max_batch_size == 64
        return
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"f.txt: .* is TF Serving's but not supported by ckptsync"):
        BatchingOptions.from_text(text, "f.txt")


def test_the_batching_flags_are_checked_before_serving(tmp_path, model_file):
    bad = tmp_path / "batching.txt"
    bad.write_text("max_batch_size { value: 0 }")
    r = run_infer("serve", "--model", str(model_file), "--checkpoint-dir", str(tmp_path),
                  "--grpc-port", "0", "--enable-batching", "--batching-parameters-file", str(bad))
    assert r.returncode == 2
    assert "Invalid value for '--batching-parameters-file'" in r.stderr
    assert "max_batch_size must be an integer >= 1" in r.stderr
    r = run_infer("serve", "--model", str(model_file), "--checkpoint-dir", str(tmp_path),
                  "--grpc-port", "0", "--batching-parameters-file", str(bad))
    assert r.returncode == 2 and "takes effect only with --enable-batching" in r.stderr
    assert isinstance(r, subprocess.CompletedProcess)


EXITING_FORWARD = MODEL_SOURCE.replace(
    'logits = cs.add(cs.matmul(h, w1), b1, name="logits")',
    'logits = cs.py_func(exit_on_77, [cs.add(cs.matmul(h, w1), b1)], cs.float32)\n'
    '        logits = cs.identity(cs.reshape(logits, [-1, 3]), name="logits")') + """

def exit_on_77(logits_and_x):
    return logits_and_x
"""


@pytest.mark.parametrize("batching", [True, False])
def test_a_forward_that_raises_system_exit_fails_its_request_and_nothing_else(
        tmp_path, batching):
    model = tmp_path / "exits.py"
    model.write_text(EXITING_FORWARD.replace(
        "def exit_on_77(logits_and_x):\n    return logits_and_x",
        "import sys\n\n\ndef exit_on_77(logits):\n"
        "    if logits.shape[0] == 7:\n        sys.exit(5)\n    return logits"))
    publish(tmp_path / "ckpts", 3)
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        infer("serve", "--model", str(model), "--checkpoint-dir", str(tmp_path / "ckpts"),
              "--port", "0", "--port-file", str(port_file), "--grpc-port", "0",
              "--model-name", "mlp", *(["--enable-batching"] if batching else [])),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = wait_for_port(proc, port_file)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            wait_until(lambda: client.get("/readyz").status_code == 200, timeout_s=30)
            r = client.post("/v1/models/mlp:predict", json={"instances": rows(7, 0).tolist()})
            assert r.status_code == 500 and "SystemExit: 5" in r.json()["error"]
            r = client.post("/v1/models/mlp:predict", json={"instances": rows(2, 0).tolist()})
            assert r.status_code == 200 and len(r.json()["predictions"]) == 2
            assert client.get("/healthz").status_code == 200
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        proc.stderr.close()


class RowsServable(MLPServable):
    """x float32 [batch, any] -> y: ``x[x.sum(1) > 0]`` (``mask=True``: not one output row
    per input row, as a boolean_mask) or ``2 * x``; records the rows of each forward."""

    def __init__(self, mask: bool):
        super().__init__()
        f32 = np.dtype("float32")
        self._signature = Signature({"x": TensorSpec("x", f32, (None, None))},
                                    {"y": TensorSpec("y", f32, (None, None))})
        self.mask, self.rows = mask, []

    def run(self, params, inputs):
        x = inputs["x"]
        self.rows.append(x.shape[0])
        return {"y": x[x.sum(axis=1) > 0] if self.mask else 2 * x}


def _rows_manager(tmp_path, mask):
    publish(tmp_path, 3)  # (the MLP's variables: this model reads none of them)
    m = ModelManager(RowsServable(mask), tmp_path)
    m.start()
    wait_until(lambda: m.version == 3)
    return m


def _run_inputs(scheduler, inputs):
    async def main():
        return await asyncio.gather(*(scheduler.run("serving_default", None, {"x": x})
                                      for x in inputs), return_exceptions=True)
    return asyncio.run(main())


def test_outputs_without_a_row_per_input_row_are_never_split_across_requests(
        tmp_path, caplog):
    """A boolean_mask output cannot be split back by rows: each request gets the answer of
    its own rows (run alone on the batch's snapshot), never another request's rows or
    the padding's, and the signature runs unbatched from then on."""
    m = _rows_manager(tmp_path, mask=True)
    scheduler = BatchScheduler(m, BatchingOptions(
        max_batch_size=8, batch_timeout_micros=10_000_000, num_batch_threads=1,
        allowed_batch_sizes=(8,)))
    a = -np.ones((2, 4), np.float32)  # every row masked out: []
    b = np.array([[7] * 4, [8] * 4, [-9] * 4], np.float32)
    c = np.array([[1] * 4, [2] * 4, [3] * 4], np.float32)  # 8 rows in all: one batch
    try:
        got = _run_inputs(scheduler, [a, b, c])
        later = _run_inputs(scheduler, [b, c])
    finally:
        scheduler.close()
        m.close()
    for (outputs, version), x in zip(got + later, [a, b, c, b, c]):
        assert version == 3
        np.testing.assert_array_equal(outputs["y"], x[x.sum(axis=1) > 0])
    assert "output 'y' has" in caplog.text and "run unbatched from now on" in caplog.text
    assert m.servable.rows[:4] == [8, 2, 3, 3]  # the batch, then each request alone
    assert m.servable.rows[4:] == [3, 3]  # unbatched since


def test_requests_whose_rows_differ_past_dim_0_are_batched_apart(tmp_path):
    """[2, 3] and [2, 5] inputs cannot be stacked: each joins a batch of its own shape (it
    was one batch whose concatenate failed every request with a 500)."""
    m = _rows_manager(tmp_path, mask=False)
    scheduler = BatchScheduler(m, BatchingOptions(
        max_batch_size=8, batch_timeout_micros=200_000, num_batch_threads=1))
    xs = [rows(2, 1)[:, :3], rows(2, 2)[:, :3].copy(), np.ones((2, 5), np.float32),
          np.full((1, 5), 3.0, np.float32)]
    try:
        got = _run_inputs(scheduler, xs)
    finally:
        scheduler.close()
        m.close()
    for result, x in zip(got, xs):
        assert not isinstance(result, Exception), result
        np.testing.assert_array_equal(result[0]["y"], 2 * x)
    assert sorted(m.servable.rows) == [3, 4]  # one batch per row shape
