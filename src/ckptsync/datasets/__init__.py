"""Training data as numpy arrays: the bundled digits, MNIST IDX files, ``.npz`` files,
synthetic click logs (``synthetic-ctr``) with the ROC AUC they are judged by, and a
deterministic, resumable batch iterator (layer 1: knows no graph).

``cs.data`` re-exports these beside TF's ``tf.data.Dataset`` (:mod:`ckptsync.data`).
"""

from .ctr import CTR_BUCKETS, CTR_FEATURES, CTR_LABEL, load_synthetic_ctr, roc_auc  # noqa: F401
from .loaders import (  # noqa: F401
    DataError,
    LabeledData,
    load_dataset,
    load_digits,
    load_mnist,
    load_npz,
)
from .pipeline import BatchIterator  # noqa: F401
