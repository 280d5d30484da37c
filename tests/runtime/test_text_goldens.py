"""ckptsync against TensorFlow's own text: what ``tf.Print`` / ``tf.print`` write, the
messages of failing checks, and ``tf.gfile``'s results and errors, scenario by scenario
(``tests/goldens/text_cases.py``; TF's answers in ``tests/goldens/text.json``, written
by ``scripts/make-text-goldens``). No TensorFlow is needed to run this test."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import ckptsync as cs
from tests.goldens.text_cases import SCENARIOS, run_all

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "goldens" / "text.json").read_text())
WANT = GOLDEN["scenarios"]
GOT = {}


def _got():
    if not GOT:
        GOT.update(json.loads(json.dumps(run_all(cs))))  # as JSON would hold it
    return GOT


def _normal(value):
    # TF numbers its registered Python functions per process (pyfunc_0, pyfunc_1...).
    return json.loads(re.sub(r"pyfunc_\d+", "pyfunc_N", json.dumps(value)))


def test_every_scenario_has_a_golden():
    assert sorted(WANT) == sorted(SCENARIOS), "rerun scripts/make-text-goldens"


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_matches_tensorflow(scenario):
    want, got = _normal(WANT[scenario]), _normal(_got()[scenario])
    assert [label for label, _ in got] == [label for label, _ in want]
    diffs = [(label, w, g) for (label, w), (_, g) in zip(want, got) if w != g]
    assert not diffs, "\n".join(f"{label}:\n  TF:       {w!r}\n  ckptsync: {g!r}"
                                for label, w, g in diffs)
