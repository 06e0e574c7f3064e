"""``tf.IndexedSlices``: some rows of a tensor, as TensorFlow 1.15 has them.

The gradient of ``tf.gather`` (axis 0) and ``tf.nn.embedding_lookup`` with
respect to the table is an IndexedSlices (the gathered rows' gradients and
their row numbers) rather than a dense tensor of the table's shape, so that an
optimizer updates only those rows. Where an op needs a tensor, an
IndexedSlices converts to one (the rows summed into zeros), with TF's
UserWarning when its dense shape is unknown or huge::

    grad = tf.gradients(loss, table)[0]      # IndexedSlices(values, indices, dense_shape)
    dense = tf.convert_to_tensor(grad)       # zeros with the rows added in
"""

import collections
import warnings

import numpy as np

from .. import dtypes
from ..graph.registry import register_gradient, register_op
from ..graph.shapes import TensorShape, unknown_shape
from .constant_ops import (
    constant_value,
    convert_to_tensor,
    register_tensor_conversion_function,
)

# TF 1.15's threshold (ops.py) past which a known-shape conversion still warns.
_LARGE_SPARSE_NUM_ELEMENTS = 100000000

IndexedSlicesValue = collections.namedtuple("IndexedSlicesValue",
                                            ["values", "indices", "dense_shape"])


class IndexedSlices:
    """``dense[indices[i], ...] = values[i, ...]``: rows ``indices`` of a tensor
    of shape ``dense_shape``; repeated indices add up when it is made dense.

    Example: ``tf.IndexedSlices(tf.ones([2, 3]), [0, 4], [5, 3])``.
    """

    def __init__(self, values, indices, dense_shape=None):
        self._values = convert_to_tensor(values)
        self._indices = convert_to_tensor(indices)
        if self._indices.dtype not in (dtypes.int32, dtypes.int64):
            raise TypeError(f"IndexedSlices needs int32 or int64 indices, got "
                            f"{self._indices.dtype.name}")
        self._dense_shape = None if dense_shape is None else convert_to_tensor(dense_shape)

    values = property(lambda self: self._values)
    indices = property(lambda self: self._indices)
    dense_shape = property(lambda self: self._dense_shape)
    dtype = property(lambda self: self._values.dtype)
    name = property(lambda self: self._values.name)
    op = property(lambda self: self._values.op)
    graph = property(lambda self: self._values.graph)
    device = property(lambda self: self._values.device)

    @property
    def shape(self):
        """The dense tensor's static shape (rows from ``dense_shape`` when known)."""
        rows = None
        if self._dense_shape is not None:
            known = constant_value(self._dense_shape)
            rows = None if known is None else int(known[0])
        values_shape = self._values.shape
        if values_shape.ndims is None:
            return unknown_shape()
        return TensorShape([rows] + list(values_shape.dims[1:]))

    def get_shape(self):
        return self.shape

    def _fetch_parts(self):
        if self._dense_shape is None:
            return (lambda values, indices: IndexedSlicesValue(values, indices, None),
                    [self._values, self._indices])
        return IndexedSlicesValue, [self._values, self._indices, self._dense_shape]

    def __neg__(self):
        from .math_ops import negative
        return IndexedSlices(negative(self._values), self._indices, self._dense_shape)

    def __repr__(self):
        shape = "None" if self._dense_shape is None else self._dense_shape.name
        return (f"IndexedSlices(indices={self._indices.name}, values={self._values.name}, "
                f"dense_shape={shape})")


def _to_dense_shape(inputs, attrs):
    values, _, dense_shape = inputs
    known = constant_value(dense_shape)
    rows = None if known is None else int(known[0])
    if values.shape.ndims is None:
        return [(unknown_shape(), values.dtype)]
    return [(TensorShape([rows] + list(values.shape.dims[1:])), values.dtype)]


# (values, indices, dense_shape) -> zeros of dense_shape[0] rows, the values'
# rows added at indices (TF: unsorted_segment_sum(values, indices, shape[0])).
register_op("IndexedSlicesToDense", _to_dense_shape, shape_only_inputs=())


def _to_dense_grad(op, grad):
    from .index_ops import gather
    return [gather(grad, op.inputs[1]), None, None]


register_gradient("IndexedSlicesToDense", _to_dense_grad)


def _to_tensor(value, dtype=None, name=None):
    """TF 1.15's _indexed_slices_to_tensor: its errors and warnings."""
    if dtype is not None and dtype is not value.dtype:
        raise ValueError(f"Tensor conversion requested dtype {dtype.name} for "
                         f"IndexedSlices with dtype {value.dtype.name}")
    if value.dense_shape is None:
        raise ValueError(f"Tensor conversion requested for IndexedSlices without "
                         f"dense_shape: {value}")
    known = constant_value(value.dense_shape)
    if known is None:
        warnings.warn("Converting sparse IndexedSlices to a dense Tensor of unknown shape. "
                      "This may consume a large amount of memory.", stacklevel=3)
    elif int(np.prod(known)) >= _LARGE_SPARSE_NUM_ELEMENTS:
        warnings.warn(f"Converting sparse IndexedSlices to a dense Tensor with "
                      f"{int(np.prod(known))} elements. This may consume a large amount "
                      "of memory.", stacklevel=3)
    graph = value.graph
    with graph.colocate_with(value.values.op):
        return graph.create_op("IndexedSlicesToDense",
                               [value.values, value.indices, value.dense_shape],
                               name=name or "IndexedSlicesToDense").outputs[0]


register_tensor_conversion_function(IndexedSlices, _to_tensor)


def densify(value):
    """``value`` as a tensor: an IndexedSlices made dense, anything else as is."""
    return convert_to_tensor(value) if isinstance(value, IndexedSlices) else value


def map_values(fn, value):
    """``fn`` applied to a tensor, or to an IndexedSlices' values (same rows):
    how a gradient is scaled without making it dense."""
    if isinstance(value, IndexedSlices):
        return IndexedSlices(fn(value.values), value.indices, value.dense_shape)
    return fn(value)


def values_of(value):
    """The tensor holding ``value``'s numbers: an IndexedSlices' values, or itself."""
    return value.values if isinstance(value, IndexedSlices) else value


def aggregate(grads):
    """TF 1.15's aggregate_indexed_slices_gradients: the sum of gradients of
    which some are IndexedSlices. Any dense one makes the sum dense (add_n);
    else one IndexedSlices of all their rows, concatenated (int64 indices
    when their dtypes differ, as TF casts them)."""
    from .array_ops import concat
    from .math_ops import add_n, cast
    grads = [grad for grad in grads if grad is not None]
    if len(grads) == 1:
        return grads[0]
    if not all(isinstance(grad, IndexedSlices) for grad in grads):
        return add_n([densify(grad) for grad in grads])
    index_dtypes = {grad.indices.dtype for grad in grads}
    indices = [grad.indices if len(index_dtypes) == 1 else cast(grad.indices, dtypes.int64)
               for grad in grads]
    return IndexedSlices(concat([grad.values for grad in grads], 0), concat(indices, 0),
                         grads[0].dense_shape)
