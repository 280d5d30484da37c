"""Writes the TensorFlow goldens: every case of the ``cases_<area>.py`` modules run by
``tensorflow.compat.v1`` in graph mode, one ``<area>.json`` + ``<area>.npz`` per area.
Run by ``scripts/make-goldens`` in its own venv (TensorFlow is the oracle, never a
dependency of ckptsync or its tests).

    .goldens-venv/bin/python tests/goldens/generate.py [AREA ...]   (default: every area)
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository root

from tests.goldens.cases import AREAS, areas, load_all  # noqa: E402
from tests.goldens.runner import run_case  # noqa: E402


def write_area(tf, area: str, cases: dict) -> None:
    meta: dict[str, object] = {"tensorflow": tf.__version__, "cases": {}}
    arrays: dict[str, np.ndarray] = {}
    for name, build in sorted(cases.items()):
        rec = run_case(tf, build)
        if "error" in rec:
            meta["cases"][name] = {"error": rec["error"]}  # type: ignore[index]
            continue
        for label, f in rec["fetch"].items():
            arrays[f"{name}/fetch/{label}"] = f.pop("value")
        for i, g in enumerate(rec.get("grads") or []):
            if g is not None:
                arrays[f"{name}/grad/{i}"] = g
        rec["grads"] = [g is not None for g in rec.get("grads") or []] if "grads" in rec else None
        meta["cases"][name] = rec  # type: ignore[index]
    np.savez_compressed(os.path.join(HERE, f"{area}.npz"), **arrays)
    with open(os.path.join(HERE, f"{area}.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {len(cases)} cases of area {area!r} from TensorFlow {tf.__version__}")


def main(argv: list[str]) -> None:
    import tensorflow.compat.v1 as tf  # here: the suite imports the cases without TF

    tf.disable_v2_behavior()
    tf.logging.set_verbosity(tf.logging.ERROR)
    cases = load_all()
    wanted = argv or areas()
    unknown = sorted(set(wanted) - set(areas()))
    if unknown:
        raise SystemExit(f"generate.py: no cases_<area>.py for {unknown}; areas: {areas()}")
    for area in wanted:
        write_area(tf, area, {n: c for n, c in cases.items() if AREAS[n] == area})


if __name__ == "__main__":
    main(sys.argv[1:])
