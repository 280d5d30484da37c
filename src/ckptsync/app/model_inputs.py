"""What the trainer feeds a model file: the data a ``model_fn`` file is built for, and the
check that the loss needs no placeholder the data cannot fill.

* :func:`load_model_fn_data`: a ``model_fn`` file names no inputs before it is built, so
  the data comes first and names the features and labels (``digits``/``mnist:DIR``:
  feature ``x``, label ``y``; an ``.npz``: label ``y``, every other array a feature).
* :func:`check_feedable`: a placeholder that ``loss`` or ``train_op`` needs and that is
  neither an input nor a label is a model-file error (one line naming the file, the
  function and the placeholder), not "the training data does not fit".
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..data import DataError, LabeledData, load_dataset
from ..datasets import CTR_FEATURES
from ..graph import Operation, Tensor
from ..model_spec import ModelFileError

__all__ = ["LABEL_NAME", "check_feedable", "load_model_fn_data", "unfed_placeholders"]

#: The label array of the data a ``model_fn`` file is trained on (built-in sets: ``y``).
LABEL_NAME = "y"


def load_model_fn_data(spec: str) -> LabeledData:
    """The ``--data`` set of a ``model_fn`` model file: ``digits`` and ``mnist:DIR`` give
    feature ``x`` ``[rows, 64]`` / ``[rows, 784]`` float32 and label ``y`` ``[rows]``
    int64; ``synthetic-ctr`` features ``user_id``, ``item_id`` and label ``y`` (clicks),
    int64 ``[rows]``; a ``FILE.npz`` gives label ``y`` and every other array (less the ``NAME_test``
    held-out arrays) as a feature, sorted by name.

    Raises:
        DataError: any loader error, or an ``.npz`` without an array ``y`` or without a
            feature array.
    """
    if spec == "synthetic-ctr" or spec.startswith("synthetic-ctr:"):
        return load_dataset(spec, CTR_FEATURES, (LABEL_NAME,))
    if not spec.endswith(".npz"):
        return load_dataset(spec, ("x",), (LABEL_NAME,))
    try:
        with np.load(spec, allow_pickle=False) as z:
            names = list(z.files)
    except (OSError, ValueError, zipfile.BadZipFile):  # load_dataset says what is wrong
        return load_dataset(spec, ("x",), (LABEL_NAME,))
    if LABEL_NAME not in names:
        raise DataError(f"{spec} has no label array {LABEL_NAME!r} (it has {sorted(names)}); "
                        f"a model_fn model file is trained on the array {LABEL_NAME!r} as "
                        "labels and every other array as features.")
    features = tuple(sorted(n for n in names if n != LABEL_NAME and not (
        n.endswith("_test") and n[:-len("_test")] in names)))
    if not features:
        raise DataError(f"{spec} holds only the label array {LABEL_NAME!r}; a model_fn model "
                        "file needs at least one feature array beside it.")
    return load_dataset(spec, features, (LABEL_NAME,))


def unfed_placeholders(fetches: Iterable[Any], fed: Iterable[Tensor]) -> list[Tensor]:
    """The ``Placeholder`` outputs that running ``fetches`` (tensors or operations) needs
    and that are not in ``fed``, in the order found (a ``placeholder_with_default`` has a
    value and is not one of them)."""
    fed_ids = {id(t) for t in fed}
    stack: list[Operation] = [f.op if isinstance(f, Tensor) else f for f in fetches
                              if f is not None]
    seen: set[int] = set()
    found: list[Tensor] = []
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        if op.type == "Placeholder":
            if id(op.outputs[0]) not in fed_ids:
                found.append(op.outputs[0])
            continue
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return found


def check_feedable(spec: Any, data: LabeledData, model_path: str, data_name: str,
                   contract: str) -> None:
    """Raises ModelFileError if ``spec.loss`` or ``spec.train_op`` needs a placeholder that
    is neither in ``spec.inputs`` nor in ``spec.labels``.

    Args:
        contract: ``"build_net"`` or ``"model_fn"``, the function the message names.
    """
    feeds: Mapping[str, Tensor] = {**spec.inputs, **(spec.labels or {})}
    missing = unfed_placeholders([spec.loss, spec.train_op], feeds.values())
    if not missing:
        return
    t = missing[0]
    dims = t.get_shape().as_list() if t.get_shape().ndims is not None else "unknown shape"
    what = f"placeholder {t.op.name!r} ({dims} {t.dtype.name})"
    arrays = ", ".join(f"{k} {list(v.shape)}" for k, v in data.train.items())
    if contract == "model_fn":
        hint = ("expected a model_fn whose loss and train_op depend only on its features and "
                "labels (use tf.placeholder_with_default for a value to tune)")
    else:
        hint = ("expected every placeholder the loss needs in ModelSpec.inputs or "
                "ModelSpec.labels, named after a data array (or a placeholder_with_default)")
    raise ModelFileError(
        f"{contract} in {model_path}: the loss/train_op needs {what}, which the training "
        f"data (--data {data_name}: {arrays}) cannot fill; {hint}.")
