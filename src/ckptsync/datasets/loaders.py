"""Data sets for ``trainer run --data``: ``digits``, ``mnist:DIR``, ``FILE.npz``,
``synthetic-ctr`` (:mod:`.ctr`).

Every loader returns a :class:`LabeledData`: a train and a held-out split of named arrays.
Features are float32 scaled to [0, 1]; labels are int64.

- ``digits``: scikit-learn's bundled 8x8 digits (1,797 images): features ``[n, 64]``
  (pixel / 16), labels ``[n]``; a fixed held-out split of 20 % (seeded permutation 0).
- ``mnist:DIR``: the four standard IDX files (``train-images-idx3-ubyte`` etc., raw or
  ``.gz``) from DIR: features ``[n, 784]`` (pixel / 255); the official test set is held out.
- ``FILE.npz``: arrays named after the model's input and label keys; optional arrays
  ``<name>_test`` give the held-out split, else the last 20 % is held out.
- ``synthetic-ctr[:rows=N,seed=S,users=U,items=I]``: synthetic click logs (int64
  ``user_id``, ``item_id`` hashed into 1,000,000 buckets, label ``click`` in {0, 1});
  see :mod:`.ctr`.
"""

from __future__ import annotations

import gzip
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import CkptsyncValueError

__all__ = ["LabeledData", "DataError", "load_digits", "load_mnist", "load_npz", "load_dataset"]

HELD_OUT_FRACTION = 0.2


class DataError(CkptsyncValueError):
    """Bad training data: a missing file or array, a corrupt header, shapes or labels that
    do not fit the model."""


@dataclass(frozen=True)
class LabeledData:
    """Named arrays, split into train and held-out (test) parts.

    Attributes:
        name: e.g. ``"digits"``.
        train, test: name -> array, all with the same first dimension within a split.
        feature_names, label_names: which arrays are features and labels.
    """

    name: str
    train: Mapping[str, np.ndarray]
    test: Mapping[str, np.ndarray]
    feature_names: tuple[str, ...]
    label_names: tuple[str, ...]

    @property
    def num_train(self) -> int:
        return len(next(iter(self.train.values())))

    @property
    def num_test(self) -> int:
        return len(next(iter(self.test.values())))


def _split(features: np.ndarray, labels: np.ndarray, name: str) -> LabeledData:
    n = len(features)
    perm = np.random.default_rng(0).permutation(n)
    n_test = int(round(n * HELD_OUT_FRACTION))
    tr, te = perm[n_test:], perm[:n_test]
    return LabeledData(name, {"x": features[tr], "y": labels[tr]},
                       {"x": features[te], "y": labels[te]}, ("x",), ("y",))


def load_digits() -> LabeledData:
    """scikit-learn's bundled digits: ``x`` float32 ``[n, 64]`` in [0, 1], ``y`` int64 ``[n]``.

    Raises:
        DataError: scikit-learn is not installed (``pip install 'ckptsync[examples]'``).
    """
    try:
        from sklearn.datasets import load_digits as _sk_digits
    except ImportError:
        raise DataError("--data digits needs scikit-learn: pip install 'ckptsync[examples]'"
                        ) from None
    d = _sk_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    return _split(x, y, "digits")


def _open(path: str) -> bytes:
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            return f.read()
    except (OSError, EOFError) as e:
        raise DataError(f"Cannot read IDX file {path}: {e}") from None


def _read_idx(path: str, want_dims: int) -> np.ndarray:
    raw = _open(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DataError(f"{path} is not an IDX file: bad magic number {raw[:4].hex()}.")
    if raw[2] != 0x08:
        raise DataError(f"{path}: unsupported IDX element type 0x{raw[2]:02x} (expected 0x08, "
                        "unsigned byte).")
    ndim = raw[3]
    if ndim != want_dims:
        raise DataError(f"{path}: has {ndim} dimensions, expected {want_dims}.")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: truncated IDX header.")
    dims = struct.unpack(">" + "I" * ndim, raw[4:header])
    count = int(np.prod(dims))
    if len(raw) - header != count:
        raise DataError(f"{path}: header says {count} bytes of data for shape {list(dims)}, file "
                        f"has {len(raw) - header}.")
    return np.frombuffer(raw, np.uint8, offset=header).reshape(dims)


def _find(directory: str, stem: str) -> str:
    for cand in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        p = os.path.join(directory, cand)
        if os.path.isfile(p):
            return p
    raise DataError(f"MNIST file {stem}[.gz] not found in {directory}.")


def load_mnist(directory: str) -> LabeledData:
    """MNIST from the four IDX files in ``directory``: ``x`` float32 ``[n, 784]``, ``y`` int64.

    Raises:
        DataError: a file is missing, its header is corrupt, or counts disagree.
    """
    if not os.path.isdir(directory):
        raise DataError(f"MNIST directory not found: {directory}")
    parts: dict[str, dict[str, np.ndarray]] = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        imgs = _read_idx(_find(directory, f"{prefix}-images-idx3-ubyte"), 3)
        lbls = _read_idx(_find(directory, f"{prefix}-labels-idx1-ubyte"), 1)
        if len(imgs) != len(lbls):
            raise DataError(f"MNIST {split}: {len(imgs)} images but {len(lbls)} labels.")
        parts[split] = {"x": (imgs.reshape(len(imgs), -1) / 255.0).astype(np.float32),
                        "y": lbls.astype(np.int64)}
    return LabeledData("mnist", parts["train"], parts["test"], ("x",), ("y",))


def load_npz(path: str, feature_names: tuple[str, ...], label_names: tuple[str, ...]
             ) -> LabeledData:
    """Arrays named after the model's inputs and labels from an ``.npz`` file.

    Raises:
        DataError: the file is missing or not an npz, or an array is missing or the arrays
            disagree in length.
    """
    if not os.path.isfile(path):
        raise DataError(f"Data file not found: {path}")
    import zipfile

    if not zipfile.is_zipfile(path):
        raise DataError(f"{path} is not an .npz file (expected a zip archive of .npy arrays, as "
                        "np.savez writes).")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise DataError(f"{path} is not a readable .npz file: {e}") from None
    names = tuple(feature_names) + tuple(label_names)
    missing = [n for n in names if n not in arrays]
    if missing:
        raise DataError(f"{path} lacks arrays {missing}; it has {sorted(arrays)}. Name the arrays "
                        f"after the model's inputs and labels: {list(names)}.")
    n = len(arrays[names[0]])
    if n == 0:
        raise DataError(f"{path}: array {names[0]!r} has no rows.")
    for k in names:
        if arrays[k].dtype.kind not in "biuf":
            raise DataError(f"{path}: array {k!r} has dtype {arrays[k].dtype}; expected numbers.")
        if arrays[k].dtype.kind == "f" and not np.all(np.isfinite(arrays[k])):
            raise DataError(f"{path}: array {k!r} contains NaN or Inf.")
        if len(arrays[k]) != n:
            raise DataError(f"{path}: array {k!r} has {len(arrays[k])} rows, {names[0]!r} has {n}.")
    if all(f"{k}_test" in arrays for k in names):
        train = {k: arrays[k] for k in names}
        test = {k: arrays[f"{k}_test"] for k in names}
    else:
        n_test = int(round(n * HELD_OUT_FRACTION))
        train = {k: arrays[k][: n - n_test] for k in names}
        test = {k: arrays[k][n - n_test:] for k in names}
    return LabeledData(os.path.basename(path), train, test, tuple(feature_names),
                       tuple(label_names))


def load_dataset(spec: str, feature_names: tuple[str, ...], label_names: tuple[str, ...]
                 ) -> LabeledData:
    """Loads ``digits``, ``mnist:DIR`` or ``FILE.npz`` and renames a built-in set's single
    feature/label array to the model's names.

    Raises:
        DataError: an unknown spec, or any loader error.
    """
    if spec == "synthetic-ctr" or spec.startswith("synthetic-ctr:"):
        return _load_ctr(spec, feature_names, label_names)
    if spec == "digits":
        ds = load_digits()
    elif spec.startswith("mnist:"):
        ds = load_mnist(spec[len("mnist:"):])
    elif spec.endswith(".npz"):
        return load_npz(spec, feature_names, label_names)
    else:
        raise DataError(f"Unknown --data {spec!r}: expected 'digits', 'mnist:DIR', "
                        "'synthetic-ctr' or a FILE.npz.")
    if len(feature_names) != 1 or len(label_names) != 1:
        raise DataError(
            f"--data {spec} provides one feature and one label array, but the model has inputs "
            f"{list(feature_names)} and labels {list(label_names)}; use an .npz file instead.")
    fx, fy = feature_names[0], label_names[0]
    return LabeledData(ds.name, {fx: ds.train["x"], fy: ds.train["y"]},
                   {fx: ds.test["x"], fy: ds.test["y"]}, (fx,), (fy,))


def _load_ctr(spec: str, feature_names: tuple[str, ...], label_names: tuple[str, ...]
              ) -> LabeledData:
    """``synthetic-ctr``: the model's inputs must be ``user_id`` and ``item_id``; its one
    label gets ``click``."""
    from .ctr import (  # deferred: .ctr imports this module (DataError, LabeledData)
        CTR_FEATURES,
        CTR_LABEL,
        load_synthetic_ctr,
        parse_synthetic_ctr,
    )

    if sorted(feature_names) != sorted(CTR_FEATURES) or len(label_names) != 1:
        raise DataError(
            f"--data {spec} provides features {list(CTR_FEATURES)} (int64 [batch]) and one "
            f"label {CTR_LABEL!r}, but the model has inputs {list(feature_names)} and labels "
            f"{list(label_names)}; name the inputs {' and '.join(CTR_FEATURES)} and give it "
            "one label (see examples/ctr_embedding.py).")
    ds = load_synthetic_ctr(**parse_synthetic_ctr(spec))
    (fy,) = label_names

    def rename(split: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {**{k: split[k] for k in CTR_FEATURES}, fy: split[CTR_LABEL]}

    return LabeledData(ds.name, rename(ds.train), rename(ds.test), CTR_FEATURES, (fy,))
