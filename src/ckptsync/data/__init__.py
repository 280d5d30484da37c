"""Training data: the bundled digits, MNIST IDX files, ``.npz`` files, and a
deterministic, resumable batch iterator."""

from .datasets import DataError, Dataset, load_dataset, load_digits, load_mnist, load_npz  # noqa: F401
from .pipeline import BatchIterator  # noqa: F401
