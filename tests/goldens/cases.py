"""The registry of the cases TensorFlow answers for the suite (the cases themselves are
in ``cases_<area>.py`` beside this file, one module per area): each builds a small graph with whatever
module it is handed as ``tf`` (``tensorflow.compat.v1`` in ``generate.py``, ckptsync in
``tests/runtime/test_goldens.py``) and says what to feed, fetch and differentiate.

A case is ``def name(tf) -> dict`` with keys:
    feeds: {placeholder tensor: numpy array}
    fetch: {label: tensor}  (values, static shapes, dtypes and op names are compared)
    grads: optional (label of a fetched float tensor, [tensors to differentiate]);
        the upstream gradient is a fixed random array of the fetched value's shape
    init: optional bool, run ``global_variables_initializer()`` first
    before: optional [(op or tensor, times)], each run ``times`` times (with the feeds)
        after the initializer and before the fetch (training steps, assignments)
    names: optional [str], op or variable names compared as they are
    runs: optional int: the fetch is run this many times (an iterator's elements in
        order), each run's values recorded as ``label@i`` (no grads with it)
A case that raises while building records the error class instead (``raises``).

Only numpy and the standard library may be imported here.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

import numpy as np

Case = Callable[[Any], dict]
CASES: dict[str, Case] = {}
# case name -> its area: the ``cases_<area>.py`` module that defines it, whose goldens are
# ``<area>.json`` and ``<area>.npz`` beside it (so areas are regenerated independently).
AREAS: dict[str, str] = {}
HERE = os.path.dirname(os.path.abspath(__file__))


def case(fn: Case) -> Case:
    module = fn.__module__.rsplit(".", 1)[-1]
    if not module.startswith("cases_"):
        raise ValueError(f"golden case {fn.__name__} must live in a cases_<area>.py module")
    if fn.__name__ in CASES:
        raise ValueError(f"golden case {fn.__name__} is defined twice")
    CASES[fn.__name__] = fn
    AREAS[fn.__name__] = module[len("cases_"):]
    return fn


def load_all() -> dict[str, Case]:
    """Imports every ``cases_<area>.py`` beside this file; returns :data:`CASES`."""
    package = __name__.rsplit(".", 1)[0] if "." in __name__ else None
    for fname in sorted(os.listdir(HERE)):
        if fname.startswith("cases_") and fname.endswith(".py"):
            mod = fname[:-3]
            importlib.import_module(f"{package}.{mod}" if package else mod)
    return CASES


def areas() -> list[str]:
    return sorted(set(AREAS.values()))


def rand(seed: int, *shape: int, dtype: Any = np.float32, low: float = -2.0,
         high: float = 2.0) -> np.ndarray:
    return np.random.RandomState(seed).uniform(low, high, shape).astype(dtype)
