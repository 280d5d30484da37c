"""Writes the TensorFlow goldens: every case of :mod:`cases` run by
``tensorflow.compat.v1`` in graph mode. Run by ``scripts/make-goldens`` in its own venv
(TensorFlow is the oracle, never a dependency of ckptsync or its tests).

    .goldens-venv/bin/python tests/goldens/generate.py
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cases import CASES  # noqa: E402
from runner import run_case  # noqa: E402


def main() -> None:
    import tensorflow.compat.v1 as tf  # here: the suite imports this module without TF

    tf.disable_v2_behavior()
    tf.logging.set_verbosity(tf.logging.ERROR)
    meta: dict[str, object] = {"tensorflow": tf.__version__, "cases": {}}
    arrays: dict[str, np.ndarray] = {}
    for name, build in CASES.items():
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
    np.savez_compressed(os.path.join(HERE, "ops.npz"), **arrays)
    with open(os.path.join(HERE, "ops.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {len(CASES)} cases from TensorFlow {tf.__version__} to {HERE}")


if __name__ == "__main__":
    main()
