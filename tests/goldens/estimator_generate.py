"""Records ``tests/goldens/estimator.json``: ``estimator_program.run`` under TF 2.15's
``tf.estimator`` (the last TF that has it), the oracle for ``tests/estimator/
test_goldens.py``. Run by ``scripts/make-goldens-estimator`` in a venv of its own
(``tensorflow-cpu==2.15.1 tensorflow-estimator==2.15.0``); never imported by tests."""

from __future__ import annotations

import json
import os
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import estimator_program  # noqa: E402


def main() -> None:
    import tensorflow.compat.v1 as tf  # here, not at import: pytest's doctest walk imports this file

    tf.disable_v2_behavior()
    tf.logging.set_verbosity(tf.logging.ERROR)
    with tempfile.TemporaryDirectory() as workdir:
        os.environ.pop("TF_CONFIG", None)
        out = estimator_program.run(tf, workdir)
    out["tensorflow_version"] = tf.__version__
    target = HERE / "estimator.json"
    target.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"estimator_generate: wrote {target}")


if __name__ == "__main__":
    main()
