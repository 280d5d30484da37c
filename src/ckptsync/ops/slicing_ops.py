"""Slicing: slice, strided_slice and tensor indexing (x[:, 0], x[1:-1, ..., None]), as TF1 (issue 17)."""

from __future__ import annotations

__all__: list[str] = []
# Names also (or only) exported as ``cs.nn.<name>``.
NN_EXPORTS: tuple[str, ...] = ()
