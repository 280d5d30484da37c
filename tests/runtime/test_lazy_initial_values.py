"""Issue #16 item 9: building a graph allocates no initial value.

A server builds the PREDICT graph and restores every variable from a checkpoint, so an
initial value the graph holds is memory it never uses. The peak is measured in a fresh
subprocess (``VmHWM`` of ``/proc/self/status``) for a 256 MiB model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import ckptsync as cs

PARAM_MIB = 256

_CHILD = r"""
import json, sys
import numpy as np

def hwm_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise SystemExit("no VmHWM")

import ckptsync as cs
from ckptsync.model_spec import ModelSpec
from ckptsync.serving.servable import GraphServable

mib = int(sys.argv[1])
cols = mib * (1 << 20) // 4 // 1024 // 4  # four variables of mib/4 each
base = hwm_kib()

def build_net(graph, device, mode):
    x = cs.placeholder(cs.float32, [None, 1024], name="x")
    y = x
    inits = [cs.zeros_initializer(), cs.ones_initializer(), cs.constant_initializer(0.5),
             cs.zeros_initializer(dtype=cs.float32)]
    out = 0
    for i, init in enumerate(inits):
        w = cs.get_variable(f"w{i}", [1024, cols], initializer=init)
        out = out + cs.reduce_sum(cs.matmul(y, w))
    return ModelSpec(inputs={"x": x}, outputs={"y": out})

servable = GraphServable(build_net)
print(json.dumps({"base_kib": base, "peak_kib": hwm_kib()}))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc (Linux)")
def test_server_graph_holds_no_initial_values() -> None:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(PARAM_MIB)], capture_output=True,
                         text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    grown_mib = (got["peak_kib"] - got["base_kib"]) / 1024
    # Before: the zeros/ones/constant initial values were built as constants (1x the
    # parameters held, 2x at peak for constant_initializer). Now only the graph itself.
    assert grown_mib < 0.1 * PARAM_MIB, got


@pytest.mark.parametrize("init, expect", [
    (cs.zeros_initializer(), 0.0), (cs.ones_initializer(), 1.0),
    (cs.constant_initializer(0.5), 0.5), (cs.constant_initializer(7, dtype=cs.int64), 7),
])
def test_lazy_initializers_still_initialize(init: object, expect: float) -> None:
    g = cs.Graph()
    with g.as_default():
        dtype = getattr(init, "dtype", None) or cs.float32
        v = cs.get_variable("v", [3, 2], dtype=dtype, initializer=init)
        s = cs.get_variable("s", [], dtype=dtype, initializer=init)
        with cs.Session(graph=g) as sess:
            sess.run(cs.global_variables_initializer())
            got, scalar = sess.run([v, s])
    assert got.shape == (3, 2) and scalar.shape == ()
    assert got.dtype == np.dtype(dtype.as_numpy_dtype)
    np.testing.assert_array_equal(got, np.full((3, 2), expect))
    assert scalar == expect


def test_constant_initializer_with_full_value_keeps_values() -> None:
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = cs.Graph()
    with g.as_default():
        v = cs.get_variable("v", [2, 3], initializer=cs.constant_initializer(value))
        with cs.Session(graph=g) as sess:
            sess.run(v.initializer)
            np.testing.assert_array_equal(sess.run(v), value)
    assert json.dumps(value.tolist())  # the caller's array is untouched
