"""Writes ``text.json``: the scenarios of ``text_cases.py`` (printed text, check messages,
``tf.gfile``) run by ``tensorflow.compat.v1`` in graph mode. Run by
``scripts/make-text-goldens`` in the goldens venv (TensorFlow is the oracle, never a
dependency of ckptsync or its tests).

    .goldens-venv/bin/python tests/goldens/generate_text.py
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository root

from tests.goldens.text_cases import run_all  # noqa: E402


def main() -> None:
    import tensorflow.compat.v1 as tf  # here: the suite imports the cases without TF

    tf.disable_v2_behavior()
    tf.logging.set_verbosity(tf.logging.ERROR)
    out = {"tensorflow": tf.__version__, "scenarios": run_all(tf)}
    with open(os.path.join(HERE, "text.json"), "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote text.json from TensorFlow {tf.__version__}")


if __name__ == "__main__":
    main()
