"""Sequence ops of TF 1.15: ``tf.reverse_sequence`` (one op, its gradient
the same reversal), ``tf.linspace`` (the LinSpace op) and ``tf.meshgrid``
(reshapes broadcast against each other, as TF's array_ops builds it)::

    backwards = tf.reverse_sequence(x, lengths, seq_axis=1, batch_axis=0)
    grid = tf.linspace(0.0, 1.0, 5)            # [0, 0.25, 0.5, 0.75, 1]
    xs, ys = tf.meshgrid([1, 2, 3], [4, 5])    # each [2, 3]
"""

from .. import dtypes
from ..graph.registry import register_gradient, register_not_differentiable, register_op
from ..graph.shapes import TensorShape
from . import array_ops, math_ops
from .constant_ops import constant_value, convert_to_tensor, ones_like

# -- reverse_sequence ---------------------------------------------------------------


def _reverse_sequence_shape(inputs, attrs):
    x, lengths = inputs
    seq_dim, batch_dim = attrs["seq_dim"], attrs["batch_dim"]
    if not lengths.dtype in (dtypes.int32, dtypes.int64):
        raise TypeError(f"Value passed to parameter 'seq_lengths' has DataType "
                        f"{lengths.dtype.name} not in list of allowed values: int32, int64")
    if lengths.shape.ndims not in (None, 1):
        raise ValueError(f"Shape must be rank 1 but is rank {lengths.shape.ndims} for "
                         f"seq_lengths of shape {lengths.shape}")
    rank = x.shape.ndims
    if rank is not None:
        for what, axis in (("seq_dim", seq_dim), ("batch_dim", batch_dim)):
            if not 0 <= axis < rank:
                raise ValueError(f"Invalid {what} {axis} for input of rank {rank}")
        TensorShape([x.shape.dims[batch_dim]]).merge_with(lengths.shape)
    if seq_dim == batch_dim:
        raise ValueError(f"seq_dim must not equal batch_dim: both are {seq_dim}")
    return [(x.shape, x.dtype)]


register_op("ReverseSequence", _reverse_sequence_shape, exact_gradients=True)
register_gradient("ReverseSequence", lambda op, grad: [op.graph.create_op(
    "ReverseSequence", [grad, op.inputs[1]], dict(op.attrs)).outputs[0], None])


def reverse_sequence(input, seq_lengths, seq_axis=None, batch_axis=None, name=None,
                     seq_dim=None, batch_dim=None):
    """For each slice b along ``batch_axis``, its first ``seq_lengths[b]``
    elements along ``seq_axis`` reversed, the rest left as they are::

        tf.reverse_sequence([[1, 2, 3, 4]], [3], seq_axis=1)   # [[3, 2, 1, 4]]
    """
    seq_axis = _either(seq_axis, seq_dim, "seq_axis", "seq_dim")
    batch_axis = _either(batch_axis, batch_dim, "batch_axis", "batch_dim")
    if seq_axis is None:
        raise TypeError("reverse_sequence() missing required argument 'seq_axis'")
    x = convert_to_tensor(input, name="input")
    lengths = convert_to_tensor(seq_lengths, name="seq_lengths")
    attrs = {"seq_dim": _positive_axis(seq_axis, x), "batch_dim":
             _positive_axis(batch_axis or 0, x)}
    return x.graph.create_op("ReverseSequence", [x, lengths], attrs,
                             name=name or "ReverseSequence").outputs[0]


def _either(new, old, new_name, old_name):
    """TF's deprecated_argument_lookup."""
    if new is not None and old is not None:
        raise ValueError(f"Cannot specify both '{new_name}' and '{old_name}'")
    return new if new is not None else old


def _positive_axis(axis, x):
    axis = int(axis)
    if axis < 0 and x.shape.ndims is not None:
        axis += x.shape.ndims
    return axis

# -- linspace -----------------------------------------------------------------------


def _linspace_shape(inputs, attrs):
    start, stop, num = inputs
    for what, tensor in (("start", start), ("stop", stop), ("num", num)):
        if tensor.shape.ndims not in (None, 0):
            raise ValueError(f"Shape must be rank 0 but is rank {tensor.shape.ndims} for "
                             f"'{what}'")
    if start.dtype not in (dtypes.float32, dtypes.float64, dtypes.bfloat16):
        raise TypeError(f"Value passed to parameter 'start' has DataType "
                        f"{start.dtype.name} not in list of allowed values: bfloat16, "
                        "float32, float64")
    if stop.dtype is not start.dtype:
        raise TypeError(f"Input 'stop' of 'LinSpace' Op has type {stop.dtype.name} that "
                        f"does not match type {start.dtype.name} of argument 'start'.")
    if num.dtype not in (dtypes.int32, dtypes.int64):
        raise TypeError(f"Value passed to parameter 'num' has DataType {num.dtype.name} "
                        "not in list of allowed values: int32, int64")
    count = constant_value(num)
    return [(TensorShape([None if count is None else int(count)]), start.dtype)]


register_op("LinSpace", _linspace_shape)
register_not_differentiable("LinSpace")


def linspace(start, stop, num, name=None):
    """``num`` evenly spaced values from ``start`` to ``stop``, both included:
    ``tf.linspace(10.0, 12.0, 3)`` is [10, 11, 12]."""
    start = convert_to_tensor(start, name="start")
    stop = convert_to_tensor(stop, name="stop")
    num = convert_to_tensor(num, name="num")
    return start.graph.create_op("LinSpace", [start, stop, num], {},
                                 name=name or "LinSpace").outputs[0]


lin_space = linspace

# -- meshgrid -----------------------------------------------------------------------


def meshgrid(*args, **kwargs):
    """N-D coordinate arrays from N 1-D ones, as NumPy's ``meshgrid``:
    ``indexing='xy'`` (the default) swaps the first two output axes::

        xs, ys = tf.meshgrid([1, 2, 3], [4, 5])   # xs [[1, 2, 3], [1, 2, 3]]
    """
    indexing = kwargs.pop("indexing", "xy")
    kwargs.pop("name", None)
    if kwargs:
        key = next(iter(kwargs))
        raise TypeError(f"'{key}' is an invalid keyword argument for this function")
    if indexing not in ("xy", "ij"):
        raise ValueError("indexing parameter must be either 'xy' or 'ij'")
    vectors = [array_ops.reshape(convert_to_tensor(arg), [-1]) for arg in args]
    ndim = len(vectors)
    shapes = [[-1 if axis == place else 1 for axis in range(ndim)] for place in range(ndim)]
    if indexing == "xy" and ndim > 1:
        shapes[0][:2], shapes[1][:2] = [1, -1], [-1, 1]
    grids = [array_ops.reshape(vector, shape) for vector, shape in zip(vectors, shapes)]
    # Each grid times the others' ones: the full shape, known or not when the
    # graph is built (TF multiplies by ones of the full shape the same way).
    ones = [ones_like(grid) for grid in grids]
    return [_times_ones(grid, [one for k, one in enumerate(ones) if k != index])
            for index, grid in enumerate(grids)]


def _times_ones(grid, ones):
    for one in ones:
        grid = math_ops.multiply(grid, math_ops.cast(one, grid.dtype))
    return grid
