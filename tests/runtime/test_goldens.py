"""ckptsync against TensorFlow's own answers: every case of ``tests/goldens/cases.py``,
run by ``tensorflow.compat.v1`` in graph mode (``scripts/make-goldens``, in a venv of its
own) and by ckptsync here, must agree on values, gradients, static shapes, dtypes, op
and variable names, and error classes. No TensorFlow is needed to run this test.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import ckptsync as cs
from tests.goldens.cases import CASES
from tests.goldens.runner import run_case

GOLDENS = Path(__file__).resolve().parents[1] / "goldens"
META = json.loads((GOLDENS / "ops.json").read_text())
with np.load(GOLDENS / "ops.npz") as _npz:
    ARRAYS = {k: _npz[k] for k in _npz.files}


def test_every_case_has_a_golden():
    assert sorted(META["cases"]) == sorted(CASES), "rerun scripts/make-goldens"


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_tensorflow(name):
    want = META["cases"][name]
    got = run_case(cs, CASES[name])
    if "error" in want:
        assert "error" in got, f"TensorFlow raised {want['error'][0]}, ckptsync did not"
        assert want["error"][0] in got["error"] or any(
            c in got["error"] for c in want["error"] if c in ("ValueError", "TypeError")), (
            f"TensorFlow raised {want['error']}, ckptsync {got['error']}")
        return
    assert "error" not in got, f"ckptsync raised {got['error']}, TensorFlow did not"
    assert got["names"] == want["names"]
    for label, w in want["fetch"].items():
        g = got["fetch"][label]
        assert (g["dtype"], g["shape"]) == (w["dtype"], w["shape"]), label
        expected = ARRAYS[f"{name}/fetch/{label}"]
        assert g["value"].dtype == expected.dtype and g["value"].shape == expected.shape, label
        np.testing.assert_allclose(g["value"], expected, rtol=1e-5, atol=1e-6, err_msg=label)
    if want.get("grads") is not None:
        assert [g is not None for g in got["grads"]] == want["grads"]
        for i, present in enumerate(want["grads"]):
            if present:
                np.testing.assert_allclose(got["grads"][i], ARRAYS[f"{name}/grad/{i}"],
                                           rtol=1e-4, atol=1e-5, err_msg=f"gradient {i}")
