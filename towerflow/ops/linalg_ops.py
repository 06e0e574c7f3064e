"""TF 1.15's dense linear algebra: ``matrix_inverse``, ``cholesky``,
``matrix_determinant``, ``matrix_solve``, ``matrix_band_part``,
``matrix_diag`` / ``matrix_diag_part``, ``trace``, ``eye``, ``norm`` and
the matrix ``transpose``, each over the last two axes (batched over the
leading ones). Kernels are NumPy's (CuPy's) ``linalg``; the gradients are
TF's (linalg_grad.py), built from these ops and matmul, but Cholesky's,
which is one kernel. Exposed as ``tf.linalg`` and TF1's top-level names::

    x = tf.linalg.solve(a, b)               # a @ x = b
    l = tf.linalg.cholesky(a)               # a = l @ l^T
    d = tf.linalg.det(a)
"""

import numpy as np

from .. import dtypes
from ..graph.registry import register_gradient, register_op
from ..graph.shapes import TensorShape
from . import array_ops, math_ops
from .constant_ops import constant, convert_to_tensor

_LINALG_TYPES = (dtypes.float32, dtypes.float64)


def _create(op_type, inputs, attrs=None, name=None):
    return inputs[0].graph.create_op(op_type, inputs, attrs or {},
                                     name=name or op_type).outputs[0]


def _square_dims(x, what):
    """The leading dims and n of a [..., n, n] tensor (ValueError otherwise)."""
    dims = None if x.shape.dims is None else list(x.shape.dims)
    if dims is None:
        return None, None
    if len(dims) < 2:
        raise ValueError(f"Shape must be at least rank 2 but is rank {len(dims)} for "
                         f"'{what}' with input shape {x.shape}")
    if None not in dims[-2:] and dims[-2] != dims[-1]:
        raise ValueError(f"Dimensions must be equal, but are {dims[-2]} and {dims[-1]} "
                         f"for '{what}' with input shape {x.shape}")
    return dims[:-2], dims[-1] if dims[-1] is not None else dims[-2]


def _square_shape(inputs, attrs):
    _square_dims(inputs[0], attrs.get("_what", "matrix op"))
    return [(inputs[0].shape, inputs[0].dtype)]


def _determinant_shape(inputs, attrs):
    batch, _n = _square_dims(inputs[0], "MatrixDeterminant")
    return [(TensorShape(batch), inputs[0].dtype)]   # None: rank unknown


def _solve_shape(inputs, attrs):
    matrix, rhs = inputs
    batch, n = _square_dims(matrix, "MatrixSolve")
    if rhs.dtype is not matrix.dtype:
        raise TypeError(f"Input 'rhs' of 'MatrixSolve' Op has type {rhs.dtype.name} that "
                        f"does not match type {matrix.dtype.name} of argument 'matrix'.")
    if rhs.shape.ndims is not None and matrix.shape.ndims is not None:
        if rhs.shape.ndims != matrix.shape.ndims:
            raise ValueError(f"Shape must be rank {matrix.shape.ndims} but is rank "
                             f"{rhs.shape.ndims} for 'MatrixSolve'")
        TensorShape(batch + [n]).merge_with(TensorShape(list(rhs.shape.dims[:-1])))
    return [(rhs.shape, rhs.dtype)]


def _register_linalg(op_type, shape_fn, typed_input="input"):
    register_op(op_type, shape_fn, type_list=_LINALG_TYPES, typed_input=typed_input)


_register_linalg("MatrixInverse", _square_shape)
_register_linalg("Cholesky", _square_shape)
_register_linalg("MatrixDeterminant", _determinant_shape)
_register_linalg("MatrixSolve", _solve_shape, typed_input="matrix")
register_op("CholeskyGrad", lambda inputs, attrs: [(inputs[0].shape, inputs[0].dtype)])


def matrix_inverse(input, adjoint=False, name=None):
    """The inverse of each [n, n] matrix (of its transpose with ``adjoint``);
    a singular one is an InvalidArgumentError: ``tf.linalg.inv(a)``."""
    x = convert_to_tensor(input, name="input")
    if adjoint:
        x = matrix_transpose(x)
    return _create("MatrixInverse", [x], {"_what": "MatrixInverse"}, name)


def cholesky(input, name=None):
    """The lower-triangular l with l @ l^T = input, for symmetric positive
    definite matrices: ``tf.linalg.cholesky(a)``."""
    x = convert_to_tensor(input, name="input")
    return _create("Cholesky", [x], {"_what": "Cholesky"}, name)


def matrix_determinant(input, name=None):
    """The determinant of each [n, n] matrix: ``tf.linalg.det(a)``."""
    return _create("MatrixDeterminant", [convert_to_tensor(input, name="input")], None, name)


def matrix_solve(matrix, rhs, adjoint=False, name=None):
    """x with matrix @ x = rhs (matrix^T @ x with ``adjoint``), rhs [..., n, k]:
    ``tf.linalg.solve(a, b)``."""
    matrix = convert_to_tensor(matrix, name="matrix")
    rhs = convert_to_tensor(rhs, dtype=matrix.dtype, name="rhs")   # TF infers T from matrix
    return _create("MatrixSolve", [matrix, rhs], {"adjoint": bool(adjoint)}, name)


def _inverse_grad(op, grad):
    inverse = op.outputs[0]
    return [-math_ops.matmul(inverse, math_ops.matmul(grad, inverse, transpose_b=True),
                             transpose_a=True)]


def _determinant_grad(op, grad):
    """d det(a) / da = det(a) * inv(a)^T."""
    scale = array_ops.expand_dims(array_ops.expand_dims(grad * op.outputs[0], -1), -1)
    return [scale * matrix_transpose(matrix_inverse(op.inputs[0]))]


def _solve_grad(op, grad):
    matrix, solution, adjoint = op.inputs[0], op.outputs[0], op.attrs["adjoint"]
    grad_rhs = matrix_solve(matrix, grad, adjoint=not adjoint)
    if adjoint:
        return [-math_ops.matmul(solution, grad_rhs, transpose_b=True), grad_rhs]
    return [-math_ops.matmul(grad_rhs, solution, transpose_b=True), grad_rhs]


register_gradient("MatrixInverse", _inverse_grad)
register_gradient("MatrixDeterminant", _determinant_grad)
register_gradient("MatrixSolve", _solve_grad)
register_gradient("Cholesky", lambda op, grad: [
    _create("CholeskyGrad", [op.outputs[0], grad])])

# -- band part, diagonals, trace ----------------------------------------------------


def _at_least_matrix(inputs, attrs):
    x = inputs[0]
    if x.shape.ndims is not None and x.shape.ndims < 2:
        raise ValueError(f"Shape must be at least rank 2 but is rank {x.shape.ndims} for "
                         f"'{attrs['_what']}' with input shape {x.shape}")
    return x


def _band_part_shape(inputs, attrs):
    x = _at_least_matrix(inputs, attrs)
    return [(x.shape, x.dtype)]


def _diag_shape(inputs, attrs):
    x = inputs[0]
    if x.shape.ndims is not None and x.shape.ndims < 1:
        raise ValueError(f"Shape must be at least rank 1 but is rank 0 for 'MatrixDiag' "
                         f"with input shape {x.shape}")
    dims = None if x.shape.dims is None else list(x.shape.dims)
    return [(TensorShape(None if dims is None else dims + [dims[-1]]), x.dtype)]


def _diag_part_shape(inputs, attrs):
    x = _at_least_matrix(inputs, attrs)
    dims = None if x.shape.dims is None else list(x.shape.dims)
    if dims is None:
        return [(TensorShape(None), x.dtype)]
    rows, columns = dims[-2:]
    size = None if None in (rows, columns) else min(rows, columns)
    return [(TensorShape(dims[:-2] + [size]), x.dtype)]


register_op("MatrixBandPart", _band_part_shape, exact_gradients=True)
register_op("MatrixDiag", _diag_shape, exact_gradients=True)
register_op("MatrixDiagPart", _diag_part_shape, exact_gradients=True)
# (grad, input) -> zeros of input's shape with grad on the diagonal
register_op("MatrixDiagPartGrad", lambda inputs, attrs: [(inputs[1].shape, inputs[0].dtype)],
            shape_only_inputs=(1,))


def matrix_band_part(input, num_lower, num_upper, name=None):
    """The band of each matrix: ``num_lower`` subdiagonals and ``num_upper``
    superdiagonals kept (a negative count keeps them all), the rest zeroed::

        tf.linalg.band_part(a, -1, 0)     # the lower triangle
    """
    x = convert_to_tensor(input, name="input")
    attrs = {"num_lower": _static_int(num_lower, "num_lower"),
             "num_upper": _static_int(num_upper, "num_upper"), "_what": "MatrixBandPart"}
    return _create("MatrixBandPart", [x], attrs, name)


def _static_int(value, what):
    from .constant_ops import constant_value
    if hasattr(value, "op"):
        value = constant_value(value)
        if value is None:
            raise ValueError(f"matrix_band_part needs {what} known when the graph is built")
    return int(value)


def matrix_diag(diagonal, name=None, k=0, num_rows=-1, num_cols=-1, padding_value=0):
    """[..., n] -> [..., n, n] with the values on the diagonal: ``tf.linalg.diag(v)``
    (the main diagonal only: k, num_rows, num_cols and padding_value as
    their defaults)."""
    if (k, num_rows, num_cols, padding_value) != (0, -1, -1, 0):
        raise NotImplementedError("matrix_diag supports the main diagonal only (k=0, "
                                  "num_rows=-1, num_cols=-1, padding_value=0)")
    return _create("MatrixDiag", [convert_to_tensor(diagonal, name="diagonal")], None, name)


def matrix_diag_part(input, name=None, k=0, padding_value=0):
    """[..., m, n] -> [..., min(m, n)], the main diagonal: ``tf.linalg.diag_part(a)``."""
    if (k, padding_value) != (0, 0):
        raise NotImplementedError("matrix_diag_part supports the main diagonal only "
                                  "(k=0, padding_value=0)")
    x = convert_to_tensor(input, name="input")
    return _create("MatrixDiagPart", [x], {"_what": "MatrixDiagPart"}, name)


register_gradient("MatrixBandPart", lambda op, grad: [_create(
    "MatrixBandPart", [grad], dict(op.attrs))])
register_gradient("MatrixDiag", lambda op, grad: [matrix_diag_part(grad)])
register_gradient("MatrixDiagPart", lambda op, grad: [_create(
    "MatrixDiagPartGrad", [grad, op.inputs[0]])])


def trace(x, name=None):
    """The sum of each matrix's diagonal: ``tf.linalg.trace(a)``."""
    x = convert_to_tensor(x, name="x")
    return math_ops.reduce_sum(matrix_diag_part(x), -1, name=name or "trace")


def matrix_transpose(a, name="matrix_transpose", conjugate=False):
    """The last two axes swapped: ``tf.linalg.transpose(a)`` ([..., m, n] -> [..., n, m])."""
    a = convert_to_tensor(a, name="a")
    rank = a.shape.ndims
    if rank is None:
        raise ValueError("matrix_transpose needs the rank known when the graph is built")
    if rank < 2:
        raise ValueError(f"Argument 'a' should be a (batch) matrix, with rank >= 2.  "
                         f"Found: {a.shape}")
    return array_ops.transpose(a, list(range(rank - 2)) + [rank - 1, rank - 2], name=name)


def eye(num_rows, num_columns=None, batch_shape=None, dtype=dtypes.float32, name=None):
    """The identity matrix [num_rows, num_columns] (repeated over
    ``batch_shape``): ``tf.eye(3)``; the sizes are Python ints."""
    num_columns = num_rows if num_columns is None else num_columns
    ones = np.eye(int(num_rows), int(num_columns))
    if batch_shape is not None:
        ones = np.broadcast_to(ones, [*map(int, batch_shape), *ones.shape])
    return constant(np.ascontiguousarray(ones), dtype=dtypes.as_dtype(dtype),
                    name=name or "eye")


def linalg_matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False,
                  adjoint_b=False, a_is_sparse=False, b_is_sparse=False, name=None):
    """``tf.linalg.matmul``: ``tf.matmul`` with TF's adjoint flags (the
    transpose, for real matrices)."""
    if transpose_a and adjoint_a:
        raise ValueError("Only one of transpose_a and adjoint_a can be True.")
    if transpose_b and adjoint_b:
        raise ValueError("Only one of transpose_b and adjoint_b can be True.")
    return math_ops.matmul(a, b, transpose_a or adjoint_a, transpose_b or adjoint_b, name=name)


_MATRIX_NORMS = ["euclidean", "fro", 1, 2, np.inf]
_VECTOR_NORMS = ["euclidean", 1, 2, np.inf]


def norm(tensor, ord="euclidean", axis=None, keepdims=None, name=None, keep_dims=None):
    """The vector norm of ``tensor`` (flattened, or along ``axis``) or, with
    ``axis`` a pair, the matrix norm of each matrix, as TF 1.15's ``tf.norm``:
    ord 'euclidean' / 'fro' / 2, 1, np.inf or (vectors) any p > 0::

        tf.norm(v)                        # sqrt(sum(v ** 2))
        tf.norm(m, ord=1, axis=[-2, -1])  # the largest column sum
    """
    keepdims = bool(keep_dims if keepdims is None else keepdims)
    matrix = isinstance(axis, (tuple, list)) and len(axis) == 2
    axes = _norm_axes(axis, ord, matrix)
    x = convert_to_tensor(tensor, name="tensor")
    if ord in ("fro", "euclidean", 2, 2.0):
        if matrix and ord in (2, 2.0):
            raise NotImplementedError("the matrix 2-norm (its largest singular value) needs "
                                      "an SVD, which towerflow does not have")
        result = math_ops.sqrt(math_ops.reduce_sum(x * x, axes, keepdims=True))
    else:
        result = _other_norm(math_ops.abs(x), ord, axes, matrix)
    return result if keepdims else array_ops.squeeze(result, axes, name=name)


def _norm_axes(axis, ord, matrix):
    """TF's checks of ``axis`` and ``ord``; the axes as a list, or None."""
    if matrix:
        if not all(isinstance(each, int) for each in axis) or axis[0] == axis[1]:
            raise ValueError("'axis' must be None, an integer, or a tuple of 2 unique "
                             "integers")
        if ord not in _MATRIX_NORMS:
            raise ValueError(f"'ord' must be a supported matrix norm in {_MATRIX_NORMS}, "
                             f"got {ord}")
        return list(axis)
    if not (isinstance(axis, int) or axis is None):
        raise ValueError("'axis' must be None, an integer, or a tuple of 2 unique integers")
    if ord not in _VECTOR_NORMS and (isinstance(ord, str) or not np.isreal(ord) or ord <= 0):
        raise ValueError(f"'ord' must be a supported vector norm, got {ord}")
    return None if axis is None else [axis]


def _other_norm(magnitude, ord, axes, matrix):
    if ord == 1:
        result = math_ops.reduce_sum(magnitude, None if axes is None else axes[0],
                                     keepdims=True)
        return math_ops.reduce_max(result, axes[-1], keepdims=True) if matrix else result
    if ord == np.inf:
        if matrix:
            magnitude = math_ops.reduce_sum(magnitude, axes[1], keepdims=True)
        return math_ops.reduce_max(magnitude, None if axes is None else axes[0],
                                   keepdims=True)
    powered = math_ops.reduce_sum(math_ops.pow(magnitude, float(ord)), axes, keepdims=True)
    return math_ops.pow(powered, 1.0 / ord)
