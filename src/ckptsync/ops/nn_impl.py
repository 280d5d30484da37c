"""tf.nn beyond the basics: activations, dropout, normalization, losses, top_k, as TF1 (issue 17)."""

from __future__ import annotations

__all__: list[str] = []
# Names also (or only) exported as ``cs.nn.<name>``.
NN_EXPORTS: tuple[str, ...] = ()
