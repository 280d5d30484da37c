"""Op constructors; each op's numpy kernel and gradient are registered side by side."""

from . import array_ops, math_ops, nn_ops, random_ops, state_ops  # noqa: F401  (registration)
