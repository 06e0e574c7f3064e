"""Ops that rank and count: tf.nn.top_k, tf.nn.in_top_k, tf.nn.zero_fraction,
and TF1's deprecated tf.arg_max / tf.arg_min."""

from .. import dtypes
from ..graph.dimension import dimension_value
from ..graph.registry import register_gradient, register_not_differentiable, register_op
from ..graph.shapes import TensorShape, unknown_shape
from .array_ops import expand_dims
from .constant_ops import convert_to_tensor, zeros
from .index_ops import one_hot
from .math_ops import argmax, argmin, cast, equal, reduce_mean, reduce_sum


def _top_k_shape(inputs, attrs):
    x, k = inputs[0], attrs["k"]
    if x.shape.ndims is None:
        return [(unknown_shape(), x.dtype), (unknown_shape(), dtypes.int32)]
    if x.shape.ndims < 1:
        raise ValueError(f"top_k needs an input of rank >= 1, got {x.name} of shape {x.shape}")
    columns = x.shape.dims[-1]
    if columns is not None and columns < k:
        raise ValueError(f"input must have at least k columns. Had {columns}, needed {k}")
    shape = TensorShape(list(x.shape.dims[:-1]) + [k])
    return [(shape, x.dtype), (shape, dtypes.int32)]


register_op("TopKV2", _top_k_shape)


def top_k(input, k=1, sorted=True, name=None):
    """The ``k`` largest entries of each last-axis row, and their int32
    indices; equal entries come in index order::

        values, indices = tf.nn.top_k([[1., 3., 2.]], k=2)   # [[3., 2.]], [[1, 2]]

    The entries are always sorted (``sorted=False`` leaves the order open in
    TensorFlow). The gradient flows to the input through ``values``.
    """
    x = convert_to_tensor(input)
    k = dimension_value(k)      # k = x.get_shape()[1] // 2, as TF1 programs write it
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"top_k needs k, a non-negative int, got {k!r}")
    op = x.graph.create_op("TopKV2", [x], {"k": k}, name=name or "TopKV2")
    return tuple(op.outputs)


def _top_k_grad(op, grad_values, grad_indices):
    """Each value's gradient goes back to the input entry it came from."""
    x, indices = op.inputs[0], op.outputs[1]
    columns = x.shape.dims[-1] if x.shape.ndims else None
    if columns is None:
        raise ValueError(f"top_k's gradient needs the last dimension known, got {x.shape}")
    if grad_values is None:
        return [None]
    picked = one_hot(indices, columns, dtype=grad_values.dtype)   # [..., k, columns]
    return [reduce_sum(picked * expand_dims(grad_values, -1), axis=-2)]


register_gradient("TopKV2", _top_k_grad)


def _in_top_k_shape(inputs, attrs):
    predictions, targets = inputs
    if predictions.dtype is not dtypes.float32:
        raise TypeError(f"in_top_k needs float32 predictions, got {predictions.dtype.name}")
    if targets.dtype not in (dtypes.int32, dtypes.int64):
        raise TypeError(f"in_top_k needs int32 or int64 targets, got {targets.dtype.name}")
    if predictions.shape.ndims not in (None, 2):
        raise ValueError(f"predictions must be 2-dimensional, got shape {predictions.shape}")
    if targets.shape.ndims not in (None, 1):
        raise ValueError(f"targets must be 1-dimensional, got shape {targets.shape}")
    rows = predictions.shape.dims[0] if predictions.shape.ndims else None
    return [(TensorShape([rows]).merge_with(_rows_of(targets)), dtypes.bool)]


def _rows_of(targets):
    return TensorShape([targets.shape.dims[0] if targets.shape.ndims else None])


register_op("InTopKV2", _in_top_k_shape)
register_not_differentiable("InTopKV2")


def in_top_k(predictions, targets, k, name=None):
    """Whether each row's target class is among its ``k`` highest predictions.
    A target tied with the k-th highest is in; a target out of range, or a
    row with a non-finite prediction, is not (TensorFlow's rule)::

        correct = tf.nn.in_top_k(logits, labels, 1)
    """
    predictions = convert_to_tensor(predictions)
    targets = convert_to_tensor(targets)
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"in_top_k needs k, an int, got {k!r}")
    return predictions.graph.create_op("InTopKV2", [predictions, targets], {"k": k},
                                       name=name or "in_top_k").outputs[0]


def zero_fraction(value, name=None):
    """The fraction of zeros in ``value``, a float32 scalar (sparsity of ReLU
    activations, in TF1's CIFAR-10 summaries)::

        tf.summary.scalar('sparsity', tf.nn.zero_fraction(hidden))
    """
    value = convert_to_tensor(value)
    is_zero = equal(value, zeros([], value.dtype))     # bool values too: TF counts False
    return reduce_mean(cast(is_zero, dtypes.float32), name=name or "zero_fraction")


def arg_max(input, dimension=None, name=None, output_type=dtypes.int64):
    """TF1's deprecated alias of ``tf.argmax(input, axis=dimension)``."""
    return argmax(input, axis=dimension, name=name, output_type=output_type)


def arg_min(input, dimension=None, name=None, output_type=dtypes.int64):
    """TF1's deprecated alias of ``tf.argmin(input, axis=dimension)``."""
    return argmin(input, axis=dimension, name=name, output_type=output_type)
