"""ckptsync against TensorFlow's own answers: every case of ``tests/goldens/cases_*.py``,
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
from tests.goldens.cases import AREAS, areas, load_all
from tests.goldens.runner import run_case

GOLDENS = Path(__file__).resolve().parents[1] / "goldens"
CASES = load_all()
META: dict[str, dict] = {}
ARRAYS: dict[str, np.ndarray] = {}
for _area in areas():
    if (GOLDENS / f"{_area}.json").exists():
        META[_area] = json.loads((GOLDENS / f"{_area}.json").read_text())["cases"]
        with np.load(GOLDENS / f"{_area}.npz") as _npz:
            ARRAYS.update({k: _npz[k] for k in _npz.files})


@pytest.mark.parametrize("area", areas())
def test_every_case_of_an_area_has_a_golden(area):
    assert area in META, f"no {area}.json: run scripts/make-goldens {area}"
    mine = sorted(n for n, a in AREAS.items() if a == area)
    assert sorted(META[area]) == mine, f"rerun scripts/make-goldens {area}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_tensorflow(name):
    want = META[AREAS[name]][name]
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
        if expected.dtype.kind in "fc":
            np.testing.assert_allclose(g["value"], expected, rtol=1e-5, atol=1e-6,
                                       err_msg=label)
        else:
            np.testing.assert_array_equal(g["value"], expected, err_msg=label)
    if want.get("grads") is not None:
        assert [g is not None for g in got["grads"]] == want["grads"]
        for i, present in enumerate(want["grads"]):
            if present:
                np.testing.assert_allclose(got["grads"][i], ARRAYS[f"{name}/grad/{i}"],
                                           rtol=1e-4, atol=1e-5, err_msg=f"gradient {i}")
