"""Ops that pick elements by index: tf.range, tf.gather (and
tf.nn.embedding_lookup over it), tf.one_hot, tf.reverse."""

import builtins

from .. import dtypes
from ..graph import shapes
from ..graph.registry import register_gradient, register_not_differentiable, register_op
from ..graph.shapes import TensorShape, unknown_shape
from .array_ops import concat
from .constant_ops import constant, constant_value, convert_to_tensor

_INDEX_DTYPES = (dtypes.int32, dtypes.int64)

# -- range --------------------------------------------------------------------------


def _range_shape(inputs, attrs):
    values = [constant_value(tensor) for tensor in inputs]
    if any(value is None for value in values):
        return [(TensorShape([None]), attrs["dtype"])]
    length = shapes.range_length(*(value.item() for value in values))
    return [(TensorShape([length]), attrs["dtype"])]


register_op("Range", _range_shape)


def range(start, limit=None, delta=1, dtype=None, name="range"):
    """The numbers from ``start`` up to (not including) ``limit`` by ``delta``;
    the widest of the arguments' dtypes: int32 for ints, int64 past int32's
    range, float32 if any argument is a float::

        tf.range(5)              # [0, 1, 2, 3, 4] (int32)
        tf.range(3, 18, 3)       # [3, 6, 9, 12, 15]
        tf.range(1.0, 2.0, 0.5)  # [1.0, 1.5] (float32)
        tf.range(2**31, 2**31 + 2)  # [2147483648, 2147483649] (int64)
    """
    if limit is None:
        start, limit = 0, start
    values = [convert_to_tensor(value) if _is_tensor(value) else value
              for value in (start, limit, delta)]
    dtype = dtypes.as_dtype(dtype) if dtype is not None else _range_dtype(values)
    tensors = [_as_scalar(value, dtype, what)
               for value, what in zip(values, ("start", "limit", "delta"))]
    return tensors[0].graph.create_op("Range", tensors, {"dtype": dtype},
                                      name=name).outputs[0]


def _is_tensor(value):
    return hasattr(value, "dtype") and hasattr(value, "graph")


def _range_dtype(values):
    """TensorFlow's inference: the widest of the dtypes each argument converts
    to on its own (so a Python int past int32 makes the range int64)."""
    order = [dtypes.int32, dtypes.int64, dtypes.float32, dtypes.float64]
    found = [value.dtype if _is_tensor(value) else dtypes.default_for_python_value(value)
             for value in values]
    return max(found, key=lambda dtype: order.index(dtype) if dtype in order else 0)


def _as_scalar(value, dtype, what):
    if not _is_tensor(value):
        return constant(value, dtype=dtype, name=what)
    if value.shape.ndims not in (None, 0):
        raise ValueError(f"range's {what} must be a scalar, got {value.name} of shape "
                         f"{value.shape}")
    if value.dtype is not dtype:
        from .math_ops import cast
        value = cast(value, dtype)
    return value


# -- gather -------------------------------------------------------------------------


def _gather_shape(inputs, attrs):
    params, indices = inputs
    _check_index_dtype("gather", indices)
    axis = attrs["axis"]
    if params.shape.ndims is None or indices.shape.ndims is None:
        return [(unknown_shape(), params.dtype)]
    dims = params.shape.dims
    dims = list(dims[:axis]) + list(indices.shape.dims) + list(dims[axis + 1:])
    return [(TensorShape(dims), params.dtype)]


def _check_index_dtype(what, indices):
    if indices.dtype not in _INDEX_DTYPES:
        raise TypeError(f"{what} needs int32 or int64 indices, got {indices.name} of "
                        f"{indices.dtype.name}")


register_op("GatherV2", _gather_shape)


def gather(params, indices, validate_indices=None, name=None, axis=0):
    """The slices of ``params`` along ``axis`` at ``indices`` (any shape)::

        tf.gather(embeddings, ids)             # [len(ids), dim]
        tf.gather(x, [2, 0], axis=1)           # columns 2 and 0

    Indices outside [0, size) are an error (TensorFlow's CPU rule, on every
    device). Along axis 0 the gradient with respect to ``params`` is a
    ``tf.IndexedSlices`` (the gathered rows' gradients at ``indices``), as in
    TensorFlow 1.15; along another axis it is dense.
    """
    params = convert_to_tensor(params)
    indices = convert_to_tensor(indices)
    (axis,) = shapes.normalize_axes(int(axis), params.shape.ndims, "gather axis")
    return params.graph.create_op("GatherV2", [params, indices], {"axis": axis},
                                  name=name or "GatherV2").outputs[0]


def embedding_lookup(params, ids, partition_strategy="mod", name=None,
                     validate_indices=True, max_norm=None):
    """Rows of an embedding table: ``tf.nn.embedding_lookup(table, ids)``.

    ``params`` may be one tensor or a list of partitions of the table: id ``i``
    is row ``i // n`` of partition ``i % n`` (``'mod'``) or in the
    partitions' contiguous ranges (``'div'``), as TensorFlow splits them.
    """
    if max_norm is not None:
        raise ValueError(f"embedding_lookup's max_norm is not supported, got {max_norm}")
    parts = list(params) if isinstance(params, (list, tuple)) else [params]
    if not parts:
        raise ValueError("embedding_lookup needs params: a tensor or a non-empty list")
    parts = [convert_to_tensor(part) for part in parts]
    ids = convert_to_tensor(ids)
    if len(parts) == 1 or partition_strategy == "div":
        table = parts[0] if len(parts) == 1 else concat(parts, 0)
        return gather(table, ids, name=name or "embedding_lookup")
    if partition_strategy != "mod":
        raise ValueError(f"partition_strategy must be 'mod' or 'div', got "
                         f"{partition_strategy!r}")
    return _mod_lookup(parts, ids, name)


def _mod_lookup(parts, ids, name):
    """Row ``i // n`` of partition ``i % n``: one gather from the partitions
    stacked end to end, at each partition's first row plus ``i // n``."""
    from .math_ops import add, floordiv, floormod
    sizes = [part.shape.dims[0] if part.shape.ndims else None for part in parts]
    if None in sizes:
        raise ValueError("embedding_lookup over partitions needs their row counts known, "
                         f"got shapes {[str(part.shape) for part in parts]}")
    firsts = constant([sum(sizes[:i]) for i in builtins.range(len(sizes))], dtype=ids.dtype)
    count = constant(len(parts), dtype=ids.dtype)
    rows = add(gather(firsts, floormod(ids, count)), floordiv(ids, count))
    return gather(concat(parts, 0), rows, name=name or "embedding_lookup")


# (grad, params, indices) -> zeros shaped as params, the grad rows added at indices.
register_op("GatherGrad", lambda inputs, attrs: [(inputs[1].shape, inputs[0].dtype)],
            shape_only_inputs=(1,))


def _gather_grad(op, grad):
    params, indices = op.inputs
    if op.attrs["axis"] == 0:
        return [_gathered_rows(params, indices, grad), None]
    grad_params = op.graph.create_op("GatherGrad", [grad, params, indices],
                                     {"axis": op.attrs["axis"]}).outputs[0]
    return [grad_params, None]


def _gathered_rows(params, indices, grad):
    """TF 1.15's _GatherV2Grad along axis 0: IndexedSlices of the gradient's
    rows (one per index, flattened) at the indices, dense shape = params'."""
    from .array_ops import reshape, shape
    from .indexed_slices import IndexedSlices
    if params.shape.is_fully_defined():     # TF's shape() folds to a constant too
        dense_shape = constant(params.shape.as_list(), dtype=dtypes.int32)
    else:
        dense_shape = shape(params)
    row_dims = params.shape.dims[1:] if params.shape.ndims is not None else None
    if row_dims is not None and None not in row_dims:
        values = reshape(grad, [-1] + list(row_dims))
    else:
        values = reshape(grad, concat([constant([-1]), dense_shape[1:]], 0))
    return IndexedSlices(values, reshape(indices, [-1]), dense_shape)


register_gradient("GatherV2", _gather_grad)
register_not_differentiable("Range")

# -- one_hot ------------------------------------------------------------------------


def _one_hot_shape(inputs, attrs):
    indices, on_value, off_value = inputs
    _check_index_dtype("one_hot", indices)
    if on_value.dtype is not off_value.dtype:
        raise TypeError(f"one_hot's on_value and off_value must have one dtype, got "
                        f"{on_value.dtype.name} and {off_value.dtype.name}")
    if indices.shape.ndims is None:
        return [(unknown_shape(), on_value.dtype)]
    dims = list(indices.shape.dims)
    axis = attrs["axis"]
    dims.insert(len(dims) if axis == -1 else axis, attrs["depth"])
    return [(TensorShape(dims), on_value.dtype)]


register_op("OneHot", _one_hot_shape)
register_not_differentiable("OneHot")


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None,
            name=None):
    """``on_value`` at each index, ``off_value`` elsewhere, along a new axis of
    size ``depth`` (last by default); indices outside [0, depth) give a row
    of ``off_value``::

        tf.one_hot([0, 2], 3)          # [[1., 0., 0.], [0., 0., 1.]] (float32)
    """
    indices = convert_to_tensor(indices)
    dtype = _one_hot_dtype(on_value, off_value, dtype)
    on_value = _value_of(1 if on_value is None else on_value, dtype, "on_value")
    off_value = _value_of(0 if off_value is None else off_value, dtype, "off_value")
    rank = indices.shape.ndims
    axis = -1 if axis is None or (rank is not None and axis == rank) else int(axis)
    if axis < -1 or (rank is not None and axis > rank):
        raise ValueError(f"one_hot axis must be -1 or in [0, {rank}], got {axis}")
    attrs = {"depth": _depth(depth), "axis": axis}
    return indices.graph.create_op("OneHot", [indices, on_value, off_value], attrs,
                                   name=name or "one_hot").outputs[0]


def _one_hot_dtype(on_value, off_value, dtype):
    if dtype is not None:
        return dtypes.as_dtype(dtype)
    for value in (on_value, off_value):
        if _is_tensor(value):
            return value.dtype
        if value is not None:
            return convert_to_tensor(value).dtype
    return dtypes.float32


def _value_of(value, dtype, what):
    tensor = convert_to_tensor(value) if _is_tensor(value) else constant(value, dtype)
    if tensor.dtype is not dtype:
        raise TypeError(f"one_hot's {what} has dtype {tensor.dtype.name}, expected "
                        f"{dtype.name} (the dtype asked for)")
    return tensor


def _depth(depth):
    if _is_tensor(depth):
        raise TypeError(f"one_hot needs a static depth (an int), got the tensor {depth.name}")
    if int(depth) < 0:
        raise ValueError(f"one_hot depth must be non-negative, got {depth}")
    return int(depth)


# -- reverse ------------------------------------------------------------------------


register_op("ReverseV2", lambda inputs, attrs: [(inputs[0].shape, inputs[0].dtype)],
            exact_gradients=True)


def reverse(tensor, axis, name=None):
    """The elements in reverse order along each of ``axis``: ``tf.reverse(x, [1])``."""
    x = convert_to_tensor(tensor)
    axes = [axis] if isinstance(axis, int) else list(axis)
    normalized = shapes.normalize_axes(axes, x.shape.ndims, "reverse axis")
    if x.shape.ndims is not None and len(set(normalized)) < len(axes):
        raise ValueError(f"axis {axes} names an axis more than once")   # TF's kernel refuses
    axes = normalized
    return x.graph.create_op("ReverseV2", [x], {"axis": tuple(axes)},
                             name=name or "ReverseV2").outputs[0]


register_gradient("ReverseV2", lambda op, grad: [reverse(grad, list(op.attrs["axis"]))])
