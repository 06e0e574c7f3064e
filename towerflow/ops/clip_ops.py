"""Clipping values and gradients: ``clip_by_value``, ``clip_by_norm``,
``global_norm``, ``clip_by_global_norm``. As in TensorFlow 1.15, an
IndexedSlices (a gradient of tf.gather) is clipped through its values, rows
as they are (a repeated index counts once per row), and stays IndexedSlices."""

from . import math_ops
from .constant_ops import convert_to_tensor, ones_like
from .indexed_slices import IndexedSlices


def _values_of(t):
    """The tensor a norm is taken of: an IndexedSlices' values, else ``t``."""
    return convert_to_tensor(t.values if isinstance(t, IndexedSlices) else t)


def _like(t, values):
    """``values`` in the form of ``t``: IndexedSlices at its rows, or a tensor."""
    return IndexedSlices(values, t.indices, t.dense_shape) if isinstance(t, IndexedSlices) \
        else values


def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    """Elementwise min(max(t, clip_value_min), clip_value_max)."""
    t = convert_to_tensor(t)
    return math_ops.minimum(math_ops.maximum(t, clip_value_min), clip_value_max,
                            name=name or "clip_by_value")


def clip_by_norm(t, clip_norm, axes=None, name=None):
    """``t`` scaled so that its L2 norm (over ``axes``, default all) is at most
    ``clip_norm``: ``t * clip_norm / max(norm, clip_norm)``, as TF 1.15 computes
    it (an all-zero ``t`` stays zero, with a finite gradient).
    ``tf.clip_by_norm([3.0, 4.0], 1.0)`` gives ``[0.6, 0.8]``."""
    if isinstance(t, IndexedSlices):
        return _like(t, clip_by_norm(t.values, clip_norm, axes, name))
    t = convert_to_tensor(t)
    squares = math_ops.reduce_sum(t * t, axes, keepdims=True)
    nonzero = math_ops.greater(squares, 0.0)
    # NOTE: sqrt of a safe 1 where the sum is 0, so the gradient stays finite.
    safe = math_ops.where(nonzero, squares, ones_like(squares))
    norm = math_ops.where(nonzero, math_ops.sqrt(safe), squares)
    clip_norm = math_ops.cast(clip_norm, t.dtype)
    return math_ops.divide(t * clip_norm, math_ops.maximum(norm, clip_norm),
                           name=name or "clip_by_norm")


def global_norm(t_list, name=None):
    """sqrt(sum of squares of every element of every tensor); None entries are skipped."""
    tensors = [_values_of(t) for t in t_list if t is not None]
    if not tensors:
        raise ValueError("global_norm needs at least one tensor")
    squares = [math_ops.reduce_sum(math_ops.square(t)) for t in tensors]
    return math_ops.sqrt(math_ops.add_n(squares), name=name or "global_norm")


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    """Scale every tensor by clip_norm / max(global_norm, clip_norm), so their
    joint norm is at most ``clip_norm``. Returns (clipped list, global norm);
    None entries stay None. ``grads, _ = tf.clip_by_global_norm(grads, 5.0)``."""
    t_list = list(t_list)
    norm = use_norm if use_norm is not None else global_norm(t_list)
    scale = clip_norm / math_ops.maximum(norm, clip_norm)
    clipped = [None if t is None else _like(t, _scaled(_values_of(t), scale, name))
               for t in t_list]
    return clipped, norm


def _scaled(values, scale, name):
    return math_ops.multiply(values, math_ops.cast(scale, values.dtype), name=name)
