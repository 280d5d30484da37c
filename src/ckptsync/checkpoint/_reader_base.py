"""What every checkpoint reader answers from its index alone, as TF1's
``NewCheckpointReader``: the name -> shape and name -> dtype maps, ``has_tensor``, and the
context-manager protocol over ``close``. Base of ``CheckpointReader`` (ckptsync's HDF5
files) and ``TFBundleReader`` (TF's V2 bundles)."""

from __future__ import annotations

from types import TracebackType
from typing import Any, TypeVar

import numpy as np

_R = TypeVar("_R", bound="IndexedReader")


class IndexedReader:
    """A reader whose ``_index`` maps each name to an entry with ``shape`` (a tuple of
    ints) and ``dtype`` (numpy), and whose ``close`` is idempotent."""

    _index: dict[str, Any]

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _R) -> _R:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def get_variable_to_shape_map(self) -> dict[str, list[int]]:
        """Returns name → shape (list of ints, ``[]`` for scalars), from the index."""
        return {n: list(e.shape) for n, e in self._index.items()}

    def get_variable_to_dtype_map(self) -> dict[str, np.dtype]:
        """Returns name → numpy dtype (native byte order; ``object`` for a TF string
        tensor), from the index."""
        return {n: e.dtype for n, e in self._index.items()}

    def has_tensor(self, name: str) -> bool:
        """True if the checkpoint lists ``name`` (no ``:0`` suffix)."""
        return name in self._index
