"""``tf.linalg``: TF 1.15's linear-algebra namespace over towerflow's
matrix ops (towerflow/ops/linalg_ops.py, einsum_ops.py)::

    x = tf.linalg.solve(a, b)
    l = tf.linalg.cholesky(a)
    y = tf.linalg.matmul(a, b, adjoint_b=True)

Not implemented (TF 1.15 names: ``tf.linalg.<name>`` raises an
AttributeError saying so): cross, eigh, eigvalsh, expm, logm, lstsq, lu,
qr, set_diag, slogdet, sqrtm, svd, tensor_diag, tensor_diag_part,
triangular_solve, tridiagonal_matmul, tridiagonal_solve and the
LinearOperator classes.
"""

from ..ops import array_ops as _array_ops
from ..ops import math_ops as _math_ops
from ..ops.einsum_ops import einsum, tensordot
from ..ops.linalg_ops import (
    cholesky,
    eye,
    matrix_band_part,
    matrix_determinant,
    matrix_diag,
    matrix_diag_part,
    matrix_inverse,
    matrix_solve,
    matrix_transpose,
    norm,
    trace,
)
from ..ops.linalg_ops import linalg_matmul as matmul
from ..ops.logistic_ops import l2_normalize
from . import missing as _missing

__all__ = ["adjoint", "band_part", "cholesky", "cholesky_solve", "det", "diag", "diag_part",
           "einsum", "eye", "inv", "l2_normalize", "logdet", "matmul", "matvec", "norm",
           "solve", "tensordot", "trace", "transpose"]

band_part = matrix_band_part
det = matrix_determinant
diag = matrix_diag
diag_part = matrix_diag_part
inv = matrix_inverse
solve = matrix_solve
transpose = matrix_transpose


def adjoint(matrix, name=None):
    """The conjugate transpose of each matrix (the transpose: towerflow's
    dtypes are real): ``tf.linalg.adjoint(a)``."""
    return matrix_transpose(matrix, name=name or "adjoint")


def matvec(a, b, transpose_a=False, adjoint_a=False, a_is_sparse=False, b_is_sparse=False,
           name=None):
    """a @ b for matrices a [..., m, n] and vectors b [..., n]: ``tf.linalg.matvec(a, v)``."""
    column = _array_ops.expand_dims(b, -1)
    product = matmul(a, column, transpose_a=transpose_a, adjoint_a=adjoint_a)
    return _array_ops.squeeze(product, [-1], name=name)


def logdet(matrix, name=None):
    """log(det(matrix)) of Hermitian positive definite matrices, from their
    Cholesky factor (2 * the sum of the log of its diagonal), as TF 1.15."""
    lower = cholesky(matrix)
    logs = _math_ops.log(matrix_diag_part(lower))
    return _math_ops.multiply(2.0, _math_ops.reduce_sum(logs, -1), name=name or "logdet")


def cholesky_solve(chol, rhs, name=None):
    """x with (chol @ chol^T) x = rhs, given the Cholesky factor ``chol``:
    two solves, as TF 1.15's ``tf.linalg.cholesky_solve``."""
    below = solve(chol, rhs)
    return solve(chol, below, adjoint=True, name=name)


# TF 1.15's tf.linalg names towerflow leaves out (the docstring lists them too).
NOT_IMPLEMENTED = frozenset([
    "cross", "eigh", "eigvalsh", "expm", "logm", "lstsq", "lu", "qr", "set_diag", "slogdet",
    "sqrtm", "svd", "tensor_diag", "tensor_diag_part", "triangular_solve", "tridiagonal_matmul",
    "tridiagonal_solve", "LinearOperator", "LinearOperatorAdjoint", "LinearOperatorBlockDiag",
    "LinearOperatorCirculant", "LinearOperatorCirculant2D", "LinearOperatorCirculant3D",
    "LinearOperatorComposition", "LinearOperatorDiag", "LinearOperatorFullMatrix",
    "LinearOperatorHouseholder", "LinearOperatorIdentity", "LinearOperatorInversion",
    "LinearOperatorKronecker", "LinearOperatorLowRankUpdate", "LinearOperatorLowerTriangular",
    "LinearOperatorScaledIdentity", "LinearOperatorToeplitz", "LinearOperatorZeros"])
# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
__getattr__ = _missing.module_getattr("tf.linalg")
