"""Fixtures for serving tests: a pure-numpy MLP servable, publishing helpers, leak checks."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest

from ckptsync import checkpoint as ckpt
from ckptsync.serving import Servable, Signature, TensorSpec

IN, HID, OUT = 4, 8, 3


class MLPServable(Servable):
    """x float32 [batch, 4] -> relu(x @ w0 + b0) @ w1 + b1: logits [batch, 3], classes."""

    def __init__(self, two_outputs: bool = False):
        f32 = np.dtype("float32")
        outputs = {"logits": TensorSpec("logits", f32, (None, OUT))}
        if two_outputs:
            outputs["classes"] = TensorSpec("classes", np.dtype("int64"), (None,))
        self._signature = Signature({"x": TensorSpec("x", f32, (None, IN))}, outputs)
        self._specs = {
            "dense0/w": TensorSpec("dense0/w", f32, (IN, HID)),
            "dense0/b": TensorSpec("dense0/b", f32, (HID,)),
            "dense1/w": TensorSpec("dense1/w", f32, (HID, OUT)),
            "dense1/b": TensorSpec("dense1/b", f32, (OUT,)),
        }
        self.run_hook = None  # called between the two layers (tests use it to race a swap)

    @property
    def signature(self) -> Signature:
        return self._signature

    @property
    def variable_specs(self) -> Mapping[str, TensorSpec]:
        return self._specs

    def run(self, params, inputs):
        with np.errstate(all="ignore"):  # NaN/Inf inputs give NaN outputs, as in a graph
            h = np.maximum(inputs["x"] @ params["dense0/w"] + params["dense0/b"], 0)
            if self.run_hook is not None:
                self.run_hook()
            logits = h @ params["dense1/w"] + params["dense1/b"]
        out = {"logits": logits}
        if "classes" in self._signature.outputs:
            out["classes"] = logits.argmax(axis=1).astype(np.int64)
        return out


class TableServable(Servable):
    """ids int64 [batch] -> emb[ids] @ w: y float32 [batch, 2]; emb float32 [vocab, dim]
    is read only by gathers (a blocked table on copy-on-write swaps), w [dim, 2]."""

    def __init__(self, vocab: int = 4096, dim: int = 16) -> None:
        f32 = np.dtype("float32")
        self._signature = Signature({"ids": TensorSpec("ids", np.int64, (None,))},
                                    {"y": TensorSpec("y", f32, (None, 2))})
        self._specs = {"emb": TensorSpec("emb", f32, (vocab, dim)),
                       "w": TensorSpec("w", f32, (dim, 2))}

    @property
    def signature(self) -> Signature:
        return self._signature

    @property
    def variable_specs(self) -> Mapping[str, TensorSpec]:
        return self._specs

    @property
    def row_gathered_variables(self) -> frozenset[str]:
        return frozenset({"emb"})

    def run(self, params, inputs):
        emb = params["emb"]
        rows = emb.gather(inputs["ids"]) if hasattr(emb, "gather") else emb[inputs["ids"]]
        return {"y": rows @ params["w"]}


def mlp_params(step: int) -> dict[str, np.ndarray]:
    """Parameters whose every value encodes ``step`` (so outputs identify the version)."""
    rng = np.random.default_rng(step)
    return {
        "dense0/w": rng.standard_normal((IN, HID)).astype(np.float32),
        "dense0/b": np.full((HID,), step, np.float32),
        "dense1/w": rng.standard_normal((HID, OUT)).astype(np.float32),
        "dense1/b": np.full((OUT,), step, np.float32),
    }


def truncate(path: str) -> None:
    """Cuts the last 300 bytes off a file (a damaged checkpoint)."""
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[:-300])


def publish(directory: str | os.PathLike[str], step: int, arrays=None, damage=None) -> str:
    """Writes model.ckpt-<step> and names it in the state file, as a Saver does.

    ``damage(path)``, if given, runs on the data file before the state file names it.
    """
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    prefix = os.path.join(directory, f"model.ckpt-{step}")
    ckpt.write_checkpoint(prefix, mlp_params(step) if arrays is None else arrays, global_step=step)
    if damage is not None:
        damage(prefix + ".h5")
    state = ckpt.get_checkpoint_state(directory)
    previous = list(state.all_model_checkpoint_paths) if state else []
    ckpt.update_checkpoint_state(directory, prefix, previous + [prefix])
    return prefix


def wait_until(predicate, timeout_s: float = 10.0, interval_s: float = 0.01) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(interval_s)


@pytest.fixture
def mlp() -> MLPServable:
    return MLPServable()


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5.0
    while True:
        leaked = [
            t
            for t in threading.enumerate()
            if t not in before and t.is_alive() and not t.name.startswith("AnyIO worker")
        ]
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert not leaked, f"threads leaked: {[t.name for t in leaked]}"


MODEL_SOURCE = '''
import ckptsync as cs


def build_net(graph, device, mode):
    """The same MLP as MLPServable(two_outputs=True), as a ckptsync graph."""
    with graph.as_default(), graph.device(device):
        x = cs.placeholder(cs.float32, [None, 4], name="x")
        with cs.variable_scope("dense0"):
            w0 = cs.get_variable("w", [4, 8], cs.float32)
            b0 = cs.get_variable("b", [8], cs.float32, initializer=cs.zeros_initializer())
        h = cs.nn.relu(cs.matmul(x, w0) + b0)
        with cs.variable_scope("dense1"):
            w1 = cs.get_variable("w", [8, 3], cs.float32)
            b1 = cs.get_variable("b", [3], cs.float32, initializer=cs.zeros_initializer())
        logits = cs.add(cs.matmul(h, w1), b1, name="logits")
        classes = cs.argmax(logits, axis=1, name="classes")
        return cs.ModelSpec(inputs={"x": x}, outputs={"logits": logits, "classes": classes})
'''


@pytest.fixture
def model_file(tmp_path) -> Path:
    """A model file defining build_net for the MLP (variables named as mlp_params)."""
    path = tmp_path / "mlp.py"
    path.write_text(MODEL_SOURCE)
    return path
