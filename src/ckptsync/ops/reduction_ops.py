"""Reductions (reduce_*, argmin/argmax, cumsum) and their TF1 spellings (keep_dims, reduction_indices), as TF1 (issue 17)."""

from __future__ import annotations

__all__: list[str] = []
# Names also (or only) exported as ``cs.nn.<name>``.
NN_EXPORTS: tuple[str, ...] = ()
