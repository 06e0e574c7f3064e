"""Sparse updates of variables in place: ``tf.scatter_update``, ``scatter_add``,
``scatter_sub``, ``scatter_mul``, ``scatter_div``, ``scatter_max``,
``scatter_min`` (rows along axis 0) and ``tf.scatter_nd_update``,
``scatter_nd_add``, ``scatter_nd_sub`` (coordinate tuples), as TensorFlow
1.15's ref-variable ops: each returns the updated variable (its buffer), and
an index outside the variable is an InvalidArgumentError::

    w = tf.Variable(tf.zeros([4, 2]))
    sess.run(tf.scatter_add(w, [0, 0, 3], tf.ones([3, 2])))   # rows 0 (twice) and 3
"""

import re

from .. import dtypes
from ..graph.registry import register_not_differentiable, register_op
from ..graph.shapes import TensorShape
from .constant_ops import convert_to_tensor

ROW_SCATTERS = ("ScatterUpdate", "ScatterAdd", "ScatterSub", "ScatterMul", "ScatterDiv",
                "ScatterMax", "ScatterMin")
ND_SCATTERS = ("ScatterNdUpdate", "ScatterNdAdd", "ScatterNdSub")


def _check_common(op_type, var, indices, updates):
    if indices.dtype not in (dtypes.int32, dtypes.int64):
        raise TypeError(f"{op_type} needs int32 or int64 indices, got {indices.name} of "
                        f"{indices.dtype.name}")
    if updates.dtype is not var.dtype:
        raise TypeError(f"{op_type}: updates {updates.name} are {updates.dtype.name}, but "
                        f"variable {var.op.name} is {var.dtype.name}: they must match")


def _row_scatter_shape(inputs, attrs):
    """TF's rule: updates.shape = indices.shape + var.shape[1:], or a scalar."""
    indices, updates = inputs
    var = attrs["variable"].outputs[0]
    _check_common(attrs["op_type"], var, indices, updates)
    if var.shape.ndims == 0:
        raise ValueError(f"{attrs['op_type']} needs a variable of rank >= 1, got "
                         f"{var.op.name} of shape ()")
    if updates.shape.ndims != 0 and indices.shape.ndims is not None and \
            var.shape.ndims is not None:
        expected = TensorShape(list(indices.shape.dims) + list(var.shape.dims[1:]))
        if not updates.shape.is_compatible_with(expected):
            raise ValueError(f"Must have updates.shape = indices.shape + params.shape[1:] "
                             f"or updates.shape = [], got updates.shape {updates.shape}, "
                             f"indices.shape {indices.shape}, params.shape {var.shape}")
    return [(var.shape, var.dtype)]


def _nd_scatter_shape(inputs, attrs):
    """TF's rule: updates.shape = indices.shape[:-1] + var.shape[K:]."""
    indices, updates = inputs
    var = attrs["variable"].outputs[0]
    _check_common(attrs["op_type"], var, indices, updates)
    known = indices.shape.ndims is not None and var.shape.ndims is not None
    depth = indices.shape.dims[-1] if known and indices.shape.ndims else None
    if known and depth is not None:
        if depth > var.shape.ndims:
            raise ValueError(f"The last dimension of indices ({depth}) must be <= the rank "
                             f"of the variable {var.op.name} ({var.shape.ndims})")
        expected = TensorShape(list(indices.shape.dims[:-1]) + list(var.shape.dims[depth:]))
        if not updates.shape.is_compatible_with(expected):
            raise ValueError(f"Must have updates.shape = indices.shape[:-1] + "
                             f"params.shape[K:] = {expected}, got updates.shape "
                             f"{updates.shape}, indices.shape {indices.shape}, "
                             f"params.shape {var.shape}")
    return [(var.shape, var.dtype)]


for _op_type in ROW_SCATTERS:
    register_op(_op_type, _row_scatter_shape, stateful=True, aliases_state=True)
for _op_type in ND_SCATTERS:
    register_op(_op_type, _nd_scatter_shape, stateful=True, aliases_state=True)
register_not_differentiable(*ROW_SCATTERS, *ND_SCATTERS)


def _scatter(op_type, ref, indices, updates, name):
    if not hasattr(ref, "_variable_op"):
        raise TypeError(f"tf.{_public_name(op_type)} updates a tf.Variable in place; "
                        f"got {ref!r}")
    variable_op = ref._variable_op
    graph = variable_op.graph
    with graph.as_default():
        indices = convert_to_tensor(indices)
        updates = convert_to_tensor(updates, dtype=ref.dtype)
        with graph.colocate_with(variable_op):
            return graph.create_op(op_type, [indices, updates],
                                   {"variable": variable_op, "op_type": op_type},
                                   name=name or op_type).outputs[0]


def _public_name(op_type):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", op_type).lower()     # ScatterNdAdd: scatter_nd_add


def scatter_update(ref, indices, updates, use_locking=True, name=None):
    """Rows ``indices`` of ``ref`` set to ``updates`` (a repeated index: one of
    its updates wins); returns the updated variable.
    ``tf.scatter_update(w, [2, 0], [[1., 1.], [2., 2.]])``."""
    return _scatter("ScatterUpdate", ref, indices, updates, name)


def scatter_add(ref, indices, updates, use_locking=False, name=None):
    """``ref[indices[i]] += updates[i]`` (repeated indices add up):
    ``tf.scatter_add(w, [0, 0], tf.ones([2, 3]))`` adds 2 to row 0."""
    return _scatter("ScatterAdd", ref, indices, updates, name)


def scatter_sub(ref, indices, updates, use_locking=False, name=None):
    """``ref[indices[i]] -= updates[i]`` (repeated indices subtract each):
    ``tf.scatter_sub(w, [1], [[1., 1.]])``."""
    return _scatter("ScatterSub", ref, indices, updates, name)


def scatter_mul(ref, indices, updates, use_locking=False, name=None):
    """``ref[indices[i]] *= updates[i]``: ``tf.scatter_mul(w, [1], [[2., 2.]])``."""
    return _scatter("ScatterMul", ref, indices, updates, name)


def scatter_div(ref, indices, updates, use_locking=False, name=None):
    """``ref[indices[i]] /= updates[i]``: ``tf.scatter_div(w, [1], [[2., 2.]])``."""
    return _scatter("ScatterDiv", ref, indices, updates, name)


def scatter_max(ref, indices, updates, use_locking=False, name=None):
    """``ref[indices[i]] = max(ref[indices[i]], updates[i])``:
    ``tf.scatter_max(w, [0], [[5., 0.]])``."""
    return _scatter("ScatterMax", ref, indices, updates, name)


def scatter_min(ref, indices, updates, use_locking=False, name=None):
    """``ref[indices[i]] = min(ref[indices[i]], updates[i])``:
    ``tf.scatter_min(w, [0], [[5., 0.]])``."""
    return _scatter("ScatterMin", ref, indices, updates, name)


def scatter_nd_update(ref, indices, updates, use_locking=True, name=None):
    """The slices of ``ref`` at the coordinate tuples of ``indices`` (last axis)
    set to ``updates``: ``tf.scatter_nd_update(w, [[0, 1], [2, 0]], [5., 6.])``."""
    return _scatter("ScatterNdUpdate", ref, indices, updates, name)


def scatter_nd_add(ref, indices, updates, use_locking=False, name=None):
    """``updates`` added at the coordinate tuples of ``indices`` (repeated ones
    add up): ``tf.scatter_nd_add(w, [[1], [1]], [[1., 1.], [1., 1.]])``."""
    return _scatter("ScatterNdAdd", ref, indices, updates, name)


def scatter_nd_sub(ref, indices, updates, use_locking=False, name=None):
    """``updates`` subtracted at the coordinate tuples of ``indices``:
    ``tf.scatter_nd_sub(w, [[0, 0]], [1.])``."""
    return _scatter("ScatterNdSub", ref, indices, updates, name)
