"""``cs.linalg``: TF1's ``tf.linalg`` namespace (the common part): matmul, einsum,
tensordot, norm, trace, matrix_transpose (``adjoint`` for real matrices), diag_part."""

from .ops.linalg_ops import (  # noqa: F401
    einsum,
    matmul,
    matrix_diag_part,
    matrix_transpose,
    norm,
    tensordot,
    trace,
)

adjoint = matrix_transpose
diag_part = matrix_diag_part
transpose = matrix_transpose

__all__ = ["einsum", "matmul", "norm", "tensordot", "trace", "matrix_transpose", "adjoint",
           "diag_part", "matrix_diag_part", "transpose"]
