"""What the graph knows of a shape held in a tensor, before it runs.

TensorFlow's shape functions read shape arguments given as tensors
(``tf.reshape(x, tf.stack([tf.shape(x)[0], 64]))``, ``tf.zeros(tf.shape(x))``)
as *partial* shapes: ``tf.shape(x)`` is x's static shape, a stacked list is
known where its entries are constants, a concat joins the parts, a slice of
``tf.shape(x)`` takes x's dimensions. ``constant_value_as_shape`` does the same::

    x = tf.placeholder(tf.float32, [None, 8, 8, 3])
    constant_value_as_shape(tf.concat([tf.shape(x)[:1], [64, 3]], 0))  # (?, 64, 3)
"""

import numpy as np

from ..graph import core
from ..graph.shapes import TensorShape, unknown_shape
from .constant_ops import _static_index, constant_value


def constant_value_as_shape(tensor):
    """The TensorShape the 1-D int ``tensor`` is known to hold (-1 and
    values known only at run time are unknown dimensions)."""
    op = tensor.op
    if op.type == "Shape":
        return op.inputs[0].shape
    if op.type in ("Identity", "Cast"):
        return constant_value_as_shape(op.inputs[0])
    if op.type == "Pack" and op.attrs["axis"] == 0:
        return TensorShape([scalar_dimension(part) for part in op.inputs])
    if op.type == "ConcatV2":
        return _concatenated(op.inputs)
    if op.type == "StridedSlice" and op.inputs[0].op.type == "Shape":
        dims = _sliced_dims(op)
        if isinstance(dims, tuple):
            return TensorShape(list(dims))
    value = constant_value(tensor)
    if value is not None and np.ndim(value) == 1:
        return TensorShape([None if int(dim) == -1 else int(dim) for dim in value])
    return unknown_shape(tensor.shape.dims[0] if tensor.shape.ndims == 1 else None)


def scalar_dimension(tensor):
    """One dimension given as a scalar: an int where the graph fixes it, else
    None (and for -1). NOTE: as in TF 1.15, ``tf.shape(x)[i]`` is a constant
    only when all of x's shape is known, even if dimension i alone is."""
    if not isinstance(tensor, core.Tensor):
        return None if int(tensor) == -1 else int(tensor)
    value = constant_value(tensor)
    if value is not None and np.ndim(value) == 0:
        return None if int(value) == -1 else int(value)
    return None


def _concatenated(parts):
    dims = []
    for part in parts:
        shape = constant_value_as_shape(part)
        if shape.dims is None:
            return unknown_shape()
        dims.extend(shape.dims)
    return TensorShape(dims)


def _sliced_dims(op):
    """The dims a constant slice of ``tf.shape(x)`` picks: a tuple, one dim,
    or None when the bounds are tensors or x's rank is unknown."""
    source = op.inputs[0].op.inputs[0].shape
    index = _static_index(op.attrs["spec"])
    if source.dims is None or index is None or len(op.inputs) > 1:
        return None
    picked = np.array(source.dims, dtype=object)[index]
    return tuple(picked.tolist()) if isinstance(picked, np.ndarray) else picked


def is_dimension_of(tensor, x, axis):
    """Whether ``tensor`` is ``tf.shape(x)[axis]`` (TF1's way to name one of
    x's sizes in an argument)."""
    op = tensor.op
    if op.type != "StridedSlice" or op.inputs[0].op.type != "Shape" or len(op.inputs) > 1:
        return False
    if op.inputs[0].op.inputs[0] is not x or x.shape.ndims is None:
        return False
    index = _static_index(op.attrs["spec"])
    return index is not None and len(index) == 1 and isinstance(index[0], int) and \
        index[0] % x.shape.ndims == axis
