"""A deterministic, resumable batch iterator.

Epoch ``e`` visits the rows in the order ``permutation(seed, e)``; the position is just
``(epoch, offset)``, so a checkpoint that records it resumes the exact data order (the
permutation is recomputed from the seed; no RNG state needs saving).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import CkptsyncValueError

__all__ = ["BatchIterator"]


class BatchIterator:
    """Yields dicts of ``[batch_size, ...]`` slices of ``arrays``, reshuffled each epoch.

    A final partial batch of an epoch is dropped, so every batch has ``batch_size`` rows.

    Args:
        arrays: name -> array, same first dimension ``n`` (>= ``batch_size``).
        batch_size: rows per batch (> 0).
        seed: shuffling seed.

    Raises:
        ValueError: bad ``batch_size`` or arrays of different lengths.

    Thread-safety: not thread-safe.
    """

    def __init__(self, arrays: Mapping[str, np.ndarray], batch_size: int, seed: int = 0):
        lens = {len(a) for a in arrays.values()}
        if len(lens) != 1:
            raise CkptsyncValueError(f"BatchIterator: arrays differ in length: "
                                     f"{ {k: len(a) for k, a in arrays.items()} }.")
        self._n = lens.pop()
        if batch_size <= 0 or batch_size > self._n:
            raise CkptsyncValueError(
                f"batch_size must be in [1, {self._n}] (the number of training rows), got "
                f"{batch_size}.")
        self._arrays = dict(arrays)
        self._batch = batch_size
        self._seed = seed
        self._epoch = 0
        self._offset = 0
        self._perm = self._permutation(0)

    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self._seed, epoch]).permutation(self._n)

    @property
    def position(self) -> dict[str, Any]:
        """``{"epoch", "offset", "seed", "batch_size"}`` (JSON-serializable)."""
        return {"epoch": self._epoch, "offset": self._offset, "seed": self._seed,
                "batch_size": self._batch}

    def restore(self, position: Mapping[str, Any]) -> None:
        """Continues from a recorded ``position``.

        Raises:
            ValueError: it was recorded with another seed or batch size.
        """
        if position.get("seed") != self._seed or position.get("batch_size") != self._batch:
            raise CkptsyncValueError(
                f"Cannot resume the data order: the checkpoint was written with seed "
                f"{position.get('seed')} and global batch size {position.get('batch_size')}, "
                f"this run uses seed {self._seed} and global batch size {self._batch} (the "
                f"global batch is ranks x --batch-size); use the same, or another "
                f"--checkpoint-dir.")
        self._epoch = int(position["epoch"])
        self._offset = int(position["offset"])
        self._perm = self._permutation(self._epoch)

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self._offset + self._batch > self._n:
            self._epoch += 1
            self._offset = 0
            self._perm = self._permutation(self._epoch)
        idx = self._perm[self._offset:self._offset + self._batch]
        self._offset += self._batch
        return {k: a[idx] for k, a in self._arrays.items()}
