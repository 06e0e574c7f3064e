"""``tf.SparseTensor`` and its everyday ops, as TensorFlow 1.15 has them:
``sparse_to_dense`` / ``sparse.to_dense``, ``sparse.reorder``,
``sparse_tensor_dense_matmul``, ``sparse_placeholder``. A fetched
SparseTensor is a ``SparseTensorValue``; one may be fed to a sparse
placeholder::

    sp = tf.SparseTensor(indices=[[0, 1], [2, 0]], values=[5.0, 7.0], dense_shape=[3, 2])
    dense = tf.sparse.to_dense(sp)              # [[0, 5], [0, 0], [7, 0]]
    product = tf.sparse_tensor_dense_matmul(sp, tf.ones([2, 4]))
"""

import collections

from .. import dtypes
from ..graph.registry import register_gradient, register_not_differentiable, register_op
from ..graph.shapes import TensorShape, unknown_shape
from .constant_ops import constant_value, convert_to_tensor

SparseTensorValue = collections.namedtuple("SparseTensorValue",
                                           ["indices", "values", "dense_shape"])


class SparseTensor:
    """``dense[tuple(indices[i])] = values[i]``, zeros elsewhere, of shape
    ``dense_shape`` (indices int64 [N, rank], values [N], dense_shape int64 [rank]).

    Example: ``tf.SparseTensor([[0, 0], [1, 2]], [1.0, 2.0], [3, 4])``.
    """

    def __init__(self, indices, values, dense_shape):
        self._indices = convert_to_tensor(indices, dtype=dtypes.int64, name="indices")
        self._values = convert_to_tensor(values, name="values")
        self._dense_shape = convert_to_tensor(dense_shape, dtype=dtypes.int64,
                                              name="dense_shape")
        _check_components(self._indices, self._values, self._dense_shape)

    @classmethod
    def from_value(cls, sparse_tensor_value):
        """A SparseTensor of constants from a SparseTensorValue (or a SparseTensor)."""
        if isinstance(sparse_tensor_value, SparseTensor):
            return sparse_tensor_value
        return cls(*sparse_tensor_value)

    indices = property(lambda self: self._indices)
    values = property(lambda self: self._values)
    dense_shape = property(lambda self: self._dense_shape)
    dtype = property(lambda self: self._values.dtype)
    op = property(lambda self: self._values.op)
    graph = property(lambda self: self._values.graph)

    @property
    def shape(self):
        """The static dense shape: known where ``dense_shape`` is a constant."""
        known = constant_value(self._dense_shape)
        if known is not None:
            return TensorShape([int(dim) for dim in known])
        rank = self._indices.shape.dims[1] if self._indices.shape.ndims == 2 else None
        return unknown_shape() if rank is None else TensorShape([None] * rank)

    def get_shape(self):
        return self.shape

    def eval(self, feed_dict=None, session=None):
        from ..graph import core
        return core._session_for(self.graph, session).run(self, feed_dict=feed_dict)

    def _fetch_parts(self):
        return SparseTensorValue, [self._indices, self._values, self._dense_shape]

    def _feeds_of(self, value):
        return feeds_of(self, value)

    def __repr__(self):
        return (f"SparseTensor(indices={self._indices.name}, values={self._values.name}, "
                f"dense_shape={self._dense_shape.name})")


def _check_components(indices, values, dense_shape):
    """TF's construction checks: ranks 2, 1, 1 and agreeing sizes."""
    for tensor, rank, what in ((indices, 2, "indices"), (values, 1, "values"),
                               (dense_shape, 1, "dense_shape")):
        if tensor.shape.ndims not in (None, rank):
            raise ValueError(f"Shape {tensor.shape} must have rank {rank} (SparseTensor's "
                             f"{what})")
    if indices.shape.ndims == 2 and values.shape.ndims == 1 and \
            None not in (indices.shape.dims[0], values.shape.dims[0]) and \
            indices.shape.dims[0] != values.shape.dims[0]:
        raise ValueError(f"Dimensions {indices.shape.dims[0]} and {values.shape.dims[0]} are "
                         "not compatible (SparseTensor's indices rows and values)")
    if indices.shape.ndims == 2 and dense_shape.shape.ndims == 1 and \
            None not in (indices.shape.dims[1], dense_shape.shape.dims[0]) and \
            indices.shape.dims[1] != dense_shape.shape.dims[0]:
        raise ValueError(f"Dimensions {indices.shape.dims[1]} and "
                         f"{dense_shape.shape.dims[0]} are not compatible (SparseTensor's "
                         "indices columns and dense_shape)")


def sparse_placeholder(dtype, shape=None, name=None):
    """A SparseTensor of three placeholders (``name/indices``, ``name/values``,
    ``name/shape``; the shape a constant when fully given): feed it a
    SparseTensorValue or an (indices, values, dense_shape) tuple.
    ``sp = tf.sparse_placeholder(tf.float32, shape=[3, 4])``."""
    from .constant_ops import placeholder

    def named(part):
        return None if name is None else f"{name}/{part}"
    rank = None if shape is None else len(shape)
    if shape is None or None in list(shape):
        dense_shape = placeholder(dtypes.int64, shape=[rank], name=named("shape"))
    else:
        dense_shape = convert_to_tensor(list(shape), dtype=dtypes.int64, name=named("shape"))
    return SparseTensor(placeholder(dtypes.int64, shape=[None, rank], name=named("indices")),
                        placeholder(dtype, shape=[None], name=named("values")), dense_shape)


def feeds_of(key, value):
    """The (tensor, value) feeds that feeding ``value`` (a SparseTensorValue or
    an (indices, values, dense_shape) triple) to the SparseTensor ``key``
    stands for: all three, a constant dense shape too, as TF feeds them."""
    if isinstance(value, SparseTensor):
        raise TypeError(f"A SparseTensor cannot be fed a SparseTensor ({value}); feed a "
                        "tf.SparseTensorValue")
    try:
        indices, values, dense_shape = value
    except (TypeError, ValueError):
        raise TypeError(f"The value fed to a SparseTensor must be a SparseTensorValue or "
                        f"an (indices, values, dense_shape) triple, got {value!r}") from None
    return [(key.indices, indices), (key.values, values), (key.dense_shape, dense_shape)]


# -- sparse_to_dense ----------------------------------------------------------------


def _sparse_to_dense_shape(inputs, attrs):
    _, output_shape, values, default_value = inputs
    if values.dtype is not default_value.dtype:
        raise TypeError(f"sparse_to_dense's default_value is {default_value.dtype.name}, "
                        f"but its values are {values.dtype.name}")
    known = constant_value(output_shape)
    if known is not None:
        return [(TensorShape([int(dim) for dim in known.reshape(-1)]), values.dtype)]
    rank = output_shape.shape.dims[0] if output_shape.shape.ndims == 1 else None
    return [(unknown_shape() if rank is None else TensorShape([None] * rank), values.dtype)]


register_op("SparseToDense", _sparse_to_dense_shape)


def _sparse_to_dense_grad(op, grad):
    """TF 1.15's _SparseToDenseGrad: the values' gradient is the gradient at
    their indices; the default value's, the rest of the gradient's sum."""
    from .math_ops import reduce_sum
    from .scatter_ops import gather_nd
    indices = op.inputs[0]
    values_grad = gather_nd(grad, indices if indices.shape.ndims == 2 else
                            _as_matrix(indices))
    return [None, None, values_grad, reduce_sum(grad) - reduce_sum(values_grad)]


def _as_matrix(indices):
    from .array_ops import reshape
    return reshape(indices, [-1, 1])


register_gradient("SparseToDense", _sparse_to_dense_grad)


def sparse_to_dense(sparse_indices, output_shape, sparse_values, default_value=0,
                    validate_indices=True, name=None):
    """A dense tensor of ``output_shape``: ``sparse_values`` (or one scalar) at
    ``sparse_indices``, ``default_value`` elsewhere; ``validate_indices``
    checks the indices are in bounds, sorted and distinct (TF's errors).
    ``tf.sparse_to_dense([[0, 1]], [2, 2], 5.0)`` is ``[[0, 5], [0, 0]]``."""
    sparse_values = convert_to_tensor(sparse_values)
    indices = convert_to_tensor(sparse_indices)
    if indices.dtype not in (dtypes.int32, dtypes.int64):
        raise TypeError(f"sparse_to_dense needs int32 or int64 indices, got "
                        f"{indices.dtype.name}")
    output_shape = convert_to_tensor(output_shape, dtype=indices.dtype) \
        if not hasattr(output_shape, "dtype") else output_shape
    default = convert_to_tensor(default_value, dtype=sparse_values.dtype)
    return indices.graph.create_op(
        "SparseToDense", [indices, output_shape, sparse_values, default],
        {"validate_indices": bool(validate_indices)}, name=name or "SparseToDense").outputs[0]


def sparse_tensor_to_dense(sp_input, default_value=0, validate_indices=True, name=None):
    """The dense tensor ``sp_input`` stands for (``default_value`` where it has
    no value): ``tf.sparse.to_dense(sp)``."""
    sp_input = _as_sparse(sp_input, "sparse_tensor_to_dense")
    return sparse_to_dense(sp_input.indices, sp_input.dense_shape, sp_input.values,
                           default_value, validate_indices, name or "SparseToDense")


def _as_sparse(value, what):
    if isinstance(value, SparseTensorValue):
        return SparseTensor.from_value(value)
    if not isinstance(value, SparseTensor):
        raise TypeError(f"{what} needs a SparseTensor, got {value!r}")
    return value


# -- reorder ------------------------------------------------------------------------


def _reorder_shape(inputs, attrs):
    indices, values, _ = inputs
    return [(indices.shape, indices.dtype), (values.shape, values.dtype)]


register_op("SparseReorder", _reorder_shape, variadic_outputs=True)
register_not_differentiable("SparseReorder")


def sparse_reorder(sp_input, name=None):
    """The same SparseTensor with its entries in row-major order of their
    indices (most ops expect it): ``tf.sparse.reorder(sp)``."""
    sp_input = _as_sparse(sp_input, "sparse_reorder")
    op = sp_input.graph.create_op(
        "SparseReorder", [sp_input.indices, sp_input.values, sp_input.dense_shape],
        name=name or "SparseReorder")
    return SparseTensor(op.outputs[0], op.outputs[1], sp_input.dense_shape)


# -- sparse_tensor_dense_matmul -----------------------------------------------------


def _matmul_shape(inputs, attrs):
    _, values, a_shape, b = inputs
    if values.dtype is not b.dtype:
        raise TypeError(f"sparse_tensor_dense_matmul: the sparse values are "
                        f"{values.dtype.name}, but b is {b.dtype.name}")
    if b.shape.ndims not in (2, None):
        raise ValueError(f"Shape {b.shape} must have rank 2 (sparse_tensor_dense_matmul's b)")
    known = constant_value(a_shape)
    rows = None if known is None else int(known[1 if attrs["adjoint_a"] else 0])
    inner = None if known is None else int(known[0 if attrs["adjoint_a"] else 1])
    b_dims = b.shape.dims if b.shape.ndims == 2 else [None, None]
    b_inner, cols = (b_dims[1], b_dims[0]) if attrs["adjoint_b"] else (b_dims[0], b_dims[1])
    if None not in (inner, b_inner) and inner != b_inner:
        raise ValueError(f"Cannot multiply A and B because inner dimension does not match: "
                         f"{inner} vs. {b_inner}. Did you forget a transpose? Dimensions "
                         f"of A: [{known[0]}, {known[1]}). Dimensions of B: {b.shape}")
    return [(TensorShape([rows, cols]), b.dtype)]


register_op("SparseTensorDenseMatMul", _matmul_shape)


def _matmul_grad(op, grad):
    """TF 1.15's _SparseTensorDenseMatMulGrad: b's gradient is A^T grad; the
    values' gradient, each grad row dotted with its b row."""
    from .array_ops import transpose
    from .index_ops import gather
    from .math_ops import reduce_sum
    indices, values, a_shape, b = op.inputs
    adjoint_a, adjoint_b = op.attrs["adjoint_a"], op.attrs["adjoint_b"]
    b_grad = _sparse_matmul(indices, values, a_shape, grad, not adjoint_a, False)
    if adjoint_b:
        b_grad = transpose(b_grad)
    rows, cols = indices[:, 0], indices[:, 1]
    if adjoint_a:
        rows, cols = cols, rows
    b_rows = gather(transpose(b) if adjoint_b else b, cols)
    values_grad = reduce_sum(gather(grad, rows) * b_rows, 1)
    return [None, values_grad, None, b_grad]


register_gradient("SparseTensorDenseMatMul", _matmul_grad)


def _sparse_matmul(indices, values, a_shape, b, adjoint_a, adjoint_b, name=None):
    return b.graph.create_op("SparseTensorDenseMatMul", [indices, values, a_shape, b],
                             {"adjoint_a": bool(adjoint_a), "adjoint_b": bool(adjoint_b)},
                             name=name or "SparseTensorDenseMatMul").outputs[0]


def sparse_tensor_dense_matmul(sp_a, b, adjoint_a=False, adjoint_b=False, name=None):
    """The product of the rank-2 SparseTensor ``sp_a`` and the dense matrix ``b``
    (each optionally transposed; repeated indices add up):
    ``tf.sparse_tensor_dense_matmul(sp, w)``."""
    sp_a = _as_sparse(sp_a, "sparse_tensor_dense_matmul")
    b = convert_to_tensor(b, dtype=sp_a.dtype)
    return _sparse_matmul(sp_a.indices, sp_a.values, sp_a.dense_shape, b, adjoint_a,
                          adjoint_b, name)
