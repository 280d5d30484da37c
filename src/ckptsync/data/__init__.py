"""``cs.data``: TF1's ``tf.data`` (``Dataset``, iterators) and the training data of
``trainer run`` (the bundled digits, MNIST, ``.npz`` files, synthetic click logs as numpy
arrays, the ROC AUC of a binary model's scores, and the
seeded :class:`BatchIterator`, from :mod:`ckptsync.datasets`).

``cs.data.Dataset`` is TF's input pipeline; the named arrays a loader returns are a
:class:`LabeledData`.
"""

from types import SimpleNamespace as _Namespace

from ..datasets import (  # noqa: F401
    BatchIterator,
    DataError,
    LabeledData,
    load_dataset,
    load_digits,
    load_mnist,
    load_npz,
    load_synthetic_ctr,
    roc_auc,
)
from .dataset_ops import Dataset, TensorSpec  # noqa: F401
from .iterator_ops import (  # noqa: F401
    Iterator,
    IteratorSaveable,
    get_output_classes,
    get_output_shapes,
    get_output_types,
    make_initializable_iterator,
    make_one_shot_iterator,
    make_saveable_from_iterator,
)

AUTOTUNE = -1
DatasetV1 = Dataset

# tf.data.experimental: the parts TF1 programs use.
experimental = _Namespace(
    AUTOTUNE=AUTOTUNE,
    make_saveable_from_iterator=make_saveable_from_iterator,
    get_structure=lambda d: d.element_spec,
)
