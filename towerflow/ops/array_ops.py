"""Ops that rearrange values: identity, reshape, transpose, concat, split,
stack, expand_dims, squeeze, shape; and the grouping ops no_op / group."""

import numpy as np

from .. import dtypes
from ..graph import core, shapes
from ..graph.dimension import Dimension
from ..graph.registry import register_op
from ..graph.shapes import TensorShape
from . import shape_values
from .constant_ops import constant_value, convert_to_tensor, plain_dims, zeros_like


def _same_as_input(inputs, attrs):
    return [(inputs[0].shape, inputs[0].dtype)]


register_op("Identity", _same_as_input, forwards_input=True)


def identity(input, name=None):
    """The same value as ``input``, as a new op (useful to pin a copy to a device)."""
    x = convert_to_tensor(input)
    return x.graph.create_op("Identity", [x], name=name or "Identity").outputs[0]


def _reshape_shape(inputs, attrs):
    return [(shapes.reshape(inputs[0].shape, attrs["shape"]), inputs[0].dtype)]


register_op("Reshape", _reshape_shape, aliases_input=True, exact_gradients=True)


def reshape(tensor, shape, name=None):
    """``tf.reshape(x, [-1, 784])``: same values, new shape (one -1 is inferred).

    ``shape`` may also be an int tensor known only when the graph runs
    (``tf.reshape(x, tf.shape(y))``, ``tf.reshape(x, [tf.shape(x)[0], -1])``):
    the op then reads it on the host each run, as TF's Reshape reads its
    shape input from host memory.
    """
    x = convert_to_tensor(tensor)
    static = _static_target(shape)
    if static is not None:
        return x.graph.create_op("Reshape", [x], {"shape": tuple(static)},
                                 name=name or "Reshape").outputs[0]
    target = shape_tensor(shape)
    return x.graph.create_op("DynamicReshape", [x, target], name=name or "Reshape").outputs[0]


def _static_target(shape):
    """The target as ints where the graph fixes it, else None."""
    if isinstance(shape, core.Tensor):
        value = constant_value(shape)
        return None if value is None else [int(dim) for dim in value.reshape(-1)]
    if isinstance(shape, (list, tuple)):
        shape = plain_dims(shape)     # Dimensions as ints; TF's error for an unknown one
        values = [dim if not isinstance(dim, core.Tensor) else constant_value(dim)
                  for dim in shape]
        if any(value is None and isinstance(dim, core.Tensor)
               for dim, value in zip(shape, values)):
            return None
        return [-1 if value is None else int(value) for value in values]
    return plain_dims(shapes.as_shape(shape))


def shape_tensor(shape, what="reshape"):
    """A 1-D int32 tensor of the target (a list mixing ints and scalar tensors
    is stacked, as TF converts it)."""
    if isinstance(shape, core.Tensor):
        if shape.dtype not in (dtypes.int32, dtypes.int64) or shape.shape.ndims not in (None, 1):
            raise TypeError(f"{what}'s shape must be a 1-D int32 or int64 tensor, got "
                            f"{shape.name} of dtype {shape.dtype.name} and shape {shape.shape}")
        return shape
    from .math_ops import cast_if_needed
    return stack([cast_if_needed(dim, dtypes.int32) if isinstance(dim, core.Tensor)
                  else convert_to_tensor(int(dim), dtypes.int32) for dim in shape])


def _dynamic_reshape_shape(inputs, attrs):
    target = shape_values.constant_value_as_shape(inputs[1])
    return [(shapes.reshape_partial(inputs[0].shape, target), inputs[0].dtype)]


register_op("DynamicReshape", _dynamic_reshape_shape, aliases_input=True,
            shape_only_inputs=())


def _transpose_shape(inputs, attrs):
    return [(shapes.transpose(inputs[0].shape, attrs["perm"]), inputs[0].dtype)]


register_op("Transpose", _transpose_shape, aliases_input=True)


def transpose(a, perm=None, name=None):
    """Permute axes; the default reverses them (a matrix transpose for rank 2)."""
    x = convert_to_tensor(a)
    if perm is None and x.shape.ndims is not None:
        perm = tuple(reversed(range(x.shape.ndims)))
    # NOTE: perm None (a rank known at run time only) reverses the axes then
    attrs = {"perm": None if perm is None else tuple(int(axis) for axis in perm)}
    return x.graph.create_op("Transpose", [x], attrs, name=name or "transpose").outputs[0]


def _concat_shape(inputs, attrs):
    _check_one_dtype("concat", inputs)
    if any(tensor.shape.ndims == 0 for tensor in inputs):
        raise ValueError("Can't concatenate scalars (use tf.stack instead)")   # TF's words
    return [(shapes.concat([t.shape for t in inputs], attrs["axis"]), inputs[0].dtype)]


def _check_one_dtype(what, inputs):
    names = {t.dtype.name for t in inputs}
    if len(names) > 1:
        raise TypeError(f"{what} inputs must share one dtype, got {sorted(names)}")


register_op("ConcatV2", _concat_shape)


def concat(values, axis, name="concat"):
    """Join tensors along ``axis``: ``tf.concat([a, b], 0)``."""
    tensors = [convert_to_tensor(value) for value in values]
    if not tensors:
        raise ValueError("concat needs at least one tensor")
    (axis,) = shapes.normalize_axes(int(axis), tensors[0].shape.ndims, "concat axis")
    return tensors[0].graph.create_op("ConcatV2", tensors, {"axis": axis},
                                      name=name).outputs[0]


def _split_shape(inputs, attrs):
    """Sizes of None (equal parts of a dimension unknown until run time)
    leave that dimension unknown, as TF's shape function does."""
    x, axis, sizes = inputs[0], attrs["axis"], attrs["sizes"]
    if x.shape.dims is None:
        return [(shapes.unknown_shape(), x.dtype)] * len(sizes)
    total = x.shape.dims[axis]
    if total is not None and None not in sizes and sum(sizes) != total:
        raise ValueError(f"split sizes {list(sizes)} do not add up to dimension {axis} "
                         f"of shape {x.shape} ({total})")
    return [(_with_dim(x.shape, axis, None if size in (-1, None) else size), x.dtype)
            for size in sizes]


def _with_dim(shape, axis, size):
    dims = list(shape.dims)
    dims[axis] = size
    return TensorShape(dims)


# NOTE: the pieces are views of the input: fetching one must copy it when
# the input is a variable's or a constant's buffer.
register_op("Split", _split_shape, aliases_input=True, variadic_outputs=True)


def split(value, num_or_size_splits, axis=0, num=None, name="split"):
    """Split along ``axis`` into equal parts (an int) or parts of given sizes,
    one of which may be -1 (the rest)::

        a, b = tf.split(x, 2, axis=1)
        a, b = tf.split(x, [3, -1], axis=0)
    """
    x = convert_to_tensor(value)
    (axis,) = shapes.normalize_axes(int(axis), x.shape.ndims, "split axis")
    sizes = _split_sizes(x, num_or_size_splits, axis)
    attrs = {"axis": axis, "sizes": sizes}
    return list(x.graph.create_op("Split", [x], attrs, name=name).outputs)


def _split_sizes(x, num_or_size_splits, axis):
    """The size of each part; None for equal parts of a dimension known only
    at run time (the kernel then checks it divides, as TF's does)."""
    total = x.shape.dims[axis] if x.shape.dims is not None else None
    if isinstance(num_or_size_splits, Dimension):
        num_or_size_splits = num_or_size_splits.value
    if not isinstance(num_or_size_splits, (int, np.integer)):
        return _size_list([int(size) for size in num_or_size_splits], total)
    num_split = int(num_or_size_splits)
    if num_split <= 0:
        raise ValueError(f"Number of ways to split should be > 0, but got {num_split}")
    if total is None:
        return (None,) * num_split
    if total % num_split:
        raise ValueError(shapes.split_count_message(axis, total, num_split))
    return (total // num_split,) * num_split


def _size_list(sizes, total):
    """Sizes with their -1 inferred when the dimension is known (kept otherwise:
    the kernel infers it at run time)."""
    if sizes.count(-1) > 1 or any(size < -1 for size in sizes):
        raise ValueError(f"split sizes {sizes} must be >= 0, with at most one -1 "
                         "(the size inferred from the rest)")
    determined = sum(size for size in sizes if size != -1)
    if total is not None and (determined > total or -1 not in sizes and determined != total):
        raise ValueError(shapes.split_sizes_message(determined))
    if -1 in sizes and total is not None:
        sizes[sizes.index(-1)] = total - determined
    return tuple(sizes)


def _stack_shape(inputs, attrs):
    _check_one_dtype("stack", inputs)
    shape = inputs[0].shape
    for tensor in inputs[1:]:
        shape = shape.merge_with(tensor.shape)
    if shape.dims is None:
        return [(shapes.unknown_shape(), inputs[0].dtype)]
    dims = list(shape.dims)
    dims.insert(attrs["axis"], len(inputs))
    return [(TensorShape(dims), inputs[0].dtype)]


register_op("Pack", _stack_shape)


def stack(values, axis=0, name="stack"):
    """Stack same-shaped tensors along a new axis: ``tf.stack([a, b])``."""
    tensors = [convert_to_tensor(value) for value in values]
    rank = tensors[0].shape.ndims
    (axis,) = shapes.normalize_axes(int(axis), None if rank is None else rank + 1)
    return tensors[0].graph.create_op("Pack", tensors, {"axis": axis},
                                      name=name).outputs[0]


def _expand_dims_shape(inputs, attrs):
    x = inputs[0]
    if x.shape.dims is None:
        return [(shapes.unknown_shape(), x.dtype)]
    dims = list(x.shape.dims)
    dims.insert(attrs["axis"], 1)
    return [(TensorShape(dims), x.dtype)]


register_op("ExpandDims", _expand_dims_shape, aliases_input=True)


def expand_dims(input, axis, name=None):
    """Insert an axis of size 1 at ``axis`` (negative counts from the end)."""
    x = convert_to_tensor(input)
    rank = x.shape.ndims
    (axis,) = shapes.normalize_axes(int(axis), None if rank is None else rank + 1)
    return x.graph.create_op("ExpandDims", [x], {"axis": axis},
                             name=name or "ExpandDims").outputs[0]


def _squeeze_shape(inputs, attrs):
    x, axes = inputs[0], attrs["axes"]
    if x.shape.dims is None or axes is None:    # None: every axis of size 1, at run time
        return [(shapes.unknown_shape(), x.dtype)]
    for axis in axes:
        if x.shape.dims[axis] not in (1, None):
            raise ValueError(f"Cannot squeeze dimension {axis} of shape {x.shape}: "
                             "it is not 1")
    keep = [d for i, d in enumerate(x.shape.dims) if i not in axes]
    return [(TensorShape(keep), x.dtype)]


register_op("Squeeze", _squeeze_shape, aliases_input=True)


def squeeze(input, axis=None, name=None):
    """Remove axes of size 1 (all of them, or those in ``axis``)."""
    x = convert_to_tensor(input)
    if axis is None:    # the axes of size 1: known now, or only when the graph runs
        axes = tuple(i for i, dim in enumerate(x.shape.dims) if dim == 1) \
            if x.shape.is_fully_defined() else None
    else:
        axes = shapes.normalize_axes(axis, x.shape.ndims)
    return x.graph.create_op("Squeeze", [x], {"axes": axes},
                             name=name or "Squeeze").outputs[0]


def _shape_shape(inputs, attrs):
    rank = inputs[0].shape.ndims
    return [(TensorShape([rank]), attrs["out_type"])]


register_op("Shape", _shape_shape, shape_only_inputs=(0,))


def shape(input, name=None, out_type=dtypes.int32):
    """The run-time shape of ``input`` as a 1-D int32 tensor."""
    x = convert_to_tensor(input)
    attrs = {"out_type": dtypes.as_dtype(out_type)}
    return x.graph.create_op("Shape", [x], attrs, name=name or "Shape").outputs[0]


register_op("NoOp", lambda inputs, attrs: [])


def no_op(name=None):
    """An op that does nothing; useful as a target for control dependencies."""
    return core.get_default_graph().create_op("NoOp", [], name=name or "NoOp")


def group(*inputs, name=None):
    """One op that runs all of ``inputs`` (ops, tensors, variables): ``tf.group(a, b)``."""
    graph = core.get_default_graph()
    with graph.control_dependencies(list(inputs)):
        return no_op(name=name or "group_deps")


# -- unstack ------------------------------------------------------------------------


def _unpack_shape(inputs, attrs):
    x, axis, count = inputs[0], attrs["axis"], attrs["num"]
    if x.shape.dims is None:
        return [(shapes.unknown_shape(), x.dtype)] * count
    dims = [d for i, d in enumerate(x.shape.dims) if i != axis]
    return [(TensorShape(dims), x.dtype)] * count


register_op("Unpack", _unpack_shape, aliases_input=True, variadic_outputs=True)


def unstack(value, num=None, axis=0, name="unstack"):
    """Split along ``axis`` into tensors with that axis removed: ``a, b = tf.unstack(x)``."""
    x = convert_to_tensor(value)
    (axis,) = shapes.normalize_axes(int(axis), x.shape.ndims, "unstack axis")
    num = num if num is not None else (x.shape.dims[axis] if x.shape.dims else None)
    if num is None:
        raise ValueError(f"unstack needs num= when dimension {axis} of {x.shape} is unknown")
    attrs = {"axis": axis, "num": int(num)}
    return list(x.graph.create_op("Unpack", [x], attrs, name=name).outputs)


# -- gradients ---------------------------------------------------------------------

from ..graph.registry import register_gradient, register_not_differentiable  # noqa: E402

register_not_differentiable("Shape", "ZerosLike", "OnesLike", "NoOp")


def _like_shape_of_second(inputs, attrs):
    return [(inputs[1].shape, inputs[0].dtype)]


# (grad, input) -> grad reshaped to the input's run-time shape.
register_op("ReshapeLike", _like_shape_of_second, aliases_input=True,
            shape_only_inputs=(1,))


def _reshape_like(grad, tensor):
    return grad.graph.create_op("ReshapeLike", [grad, tensor]).outputs[0]


def _concat_grad_shape(inputs, attrs):
    return [(tensor.shape, inputs[0].dtype) for tensor in inputs[1:]]


# (grad, *inputs) -> grad split along the concat axis by the inputs' run-time sizes.
register_op("ConcatGrad", _concat_grad_shape, aliases_input=True, variadic_outputs=True)


def _concat_grad(op, grad):
    return list(grad.graph.create_op("ConcatGrad", [grad] + list(op.inputs),
                                     {"axis": op.attrs["axis"]}).outputs)


def _split_grad(op, *grads):
    return [concat(_zeros_for_missing(grads, op.outputs), op.attrs["axis"])]


def _zeros_for_missing(grads, outputs):
    """Outputs no gradient reached contribute zeros."""
    return [grad if grad is not None else zeros_like(output)
            for grad, output in zip(grads, outputs)]


def _transpose_grad(op, grad):
    perm = op.attrs["perm"]
    if perm is None:            # reversed axes: their own inverse
        return [transpose(grad)]
    inverse = [0] * len(perm)
    for position, axis in enumerate(perm):
        inverse[axis] = position
    return [transpose(grad, inverse)]


def _unpack_grad(op, *grads):
    return [stack(_zeros_for_missing(grads, op.outputs), axis=op.attrs["axis"])]


register_gradient("Identity", lambda op, grad: [grad])
register_gradient("PlaceholderWithDefault", lambda op, grad: [grad])
register_gradient("Reshape", lambda op, grad: [_reshape_like(grad, op.inputs[0])])
register_gradient("DynamicReshape",
                  lambda op, grad, *_: [_reshape_like(grad, op.inputs[0]), None])
register_gradient("ExpandDims", lambda op, grad: [_reshape_like(grad, op.inputs[0])])
register_gradient("Squeeze", lambda op, grad: [_reshape_like(grad, op.inputs[0])])
register_gradient("Transpose", _transpose_grad)
register_gradient("ConcatV2", _concat_grad)
register_gradient("Split", _split_grad)
register_gradient("Pack", lambda op, grad: unstack(grad, len(op.inputs), op.attrs["axis"]))
register_gradient("Unpack", _unpack_grad)
