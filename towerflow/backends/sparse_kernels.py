"""Kernels of the SparseTensor ops (towerflow/ops/sparse_ops.py), written
once against the array module ``xp``.

NOTE: shapes and the index checks are read on the host (TF keeps the
shapes in host memory too)."""

import numpy as np

from .. import errors


def build_sparse_kernels(xp):
    return {"SparseToDense": lambda ctx: _sparse_to_dense(xp, ctx),
            "SparseReorder": lambda ctx: _reorder(xp),
            "SparseTensorDenseMatMul": lambda ctx: _matmul(xp, ctx)}


def _text(row):
    return "[" + ",".join(str(int(value)) for value in row) + "]"


def _validate(indices, shape):
    """sparse_tensor.cc's IndicesValid: in bounds, strictly increasing in
    row-major order (so none repeated), with its words."""
    host = np.asarray(indices.get() if hasattr(indices, "get") else indices)
    for n, index in enumerate(host):
        if (index < 0).any() or (index >= shape).any():
            raise errors.InvalidArgumentError(
                None, None, f"indices[{n}] = {_text(index)} is out of bounds: need 0 <= "
                f"index < {_text(shape)}")
        if n and tuple(index) <= tuple(host[n - 1]):
            word = "repeated" if tuple(index) == tuple(host[n - 1]) else "out of order"
            raise errors.InvalidArgumentError(
                None, None, f"indices[{n}] = {_text(index)} is {word}")


def _sparse_to_dense(xp, ctx):
    validate = ctx.attrs["validate_indices"]

    def to_dense(indices, output_shape, values, default_value):
        shape = tuple(int(dim) for dim in output_shape.reshape(-1).tolist())
        matrix = indices.reshape(-1, 1) if indices.ndim < 2 else indices
        if matrix.shape[1] != len(shape):
            raise errors.InvalidArgumentError(
                None, None, f"sparse_indices has {matrix.shape[1]} columns, but "
                f"output_shape has {len(shape)} dims")
        count = matrix.shape[0]
        if values.ndim and values.shape[0] != count:
            raise errors.InvalidArgumentError(
                None, None, f"sparse_values has incorrect shape {list(values.shape)}, "
                f"should be [] or [{count}]")
        if validate:
            _validate(matrix, np.array(shape))
        out = xp.full(shape, default_value, dtype=values.dtype)
        if count:
            out[tuple(matrix.T)] = values     # a repeated index: the last one written
        return out
    return to_dense


def _reorder(xp):
    def reorder(indices, values, dense_shape):
        host = np.asarray(indices.get() if hasattr(indices, "get") else indices)
        order = np.lexsort(host.T[::-1]) if host.shape[0] else np.arange(0)  # on the host
        order = xp.asarray(order)
        return indices[order], values[order]
    return reorder


def _matmul(xp, ctx):
    adjoint_a, adjoint_b = ctx.attrs["adjoint_a"], ctx.attrs["adjoint_b"]

    def matmul(indices, values, a_shape, b):
        a_dims = [int(dim) for dim in a_shape.tolist()]
        rows_a, inner = a_dims[::-1] if adjoint_a else a_dims
        b = b.T if adjoint_b else b
        if b.shape[0] != inner:
            raise errors.InvalidArgumentError(    # sparse_tensor_dense_matmul_op.cc
                None, None, f"Cannot multiply A and B because inner dimension does not "
                f"match: {inner} vs. {b.shape[0]}.  Did you forget a transpose?  "
                f"Dimensions of A: [{a_dims[0]}, {a_dims[1]}).  Dimensions "
                f"of B: {list(b.shape)}")
        rows, cols = indices[:, 0], indices[:, 1]
        if adjoint_a:
            rows, cols = cols, rows
        _check_bounds(cols, inner, "k", 1 if not adjoint_a else 0)
        _check_bounds(rows, rows_a, "i", 0 if not adjoint_a else 1)
        out = xp.zeros((rows_a, b.shape[1]), dtype=b.dtype)
        xp.add.at(out, rows, values[:, None] * b[cols])
        return out
    return matmul


def _check_bounds(column, limit, what, position):
    outside = (column < 0) | (column >= limit)
    if column.size and bool(outside.any()):
        first = int(outside.argmax())
        raise errors.InvalidArgumentError(
            None, None, f"{what} ({int(column[first])}) from index[{first},{position}] out "
            f"of bounds (>={limit})")
