"""Sources of values: constants, placeholders, filled tensors, and the
conversion of Python/NumPy values (and Variables) to tensors."""

import math

import numpy as np

from .. import dtypes
from ..graph import core
from ..graph.dimension import Dimension
from ..graph.registry import register_op
from ..graph.shapes import TensorShape, as_shape

_conversion_functions = []


def register_tensor_conversion_function(base_type, conversion_func):
    """Let objects of ``base_type`` be used where tensors are expected;
    ``conversion_func(value, dtype, name)`` returns a Tensor."""
    _conversion_functions.append((base_type, conversion_func))


def convert_to_tensor(value, dtype=None, name=None, preferred_dtype=None):
    """A Tensor from a Tensor, Variable, NumPy array or Python value.

    Example: ``convert_to_tensor([1.0, 2.0])`` adds a float32 Const op.
    """
    dtype = dtypes.as_dtype(dtype) if dtype is not None else None
    if isinstance(value, core.Tensor):
        if dtype is not None and value.dtype is not dtype:
            raise TypeError(f"Tensor conversion requested dtype {dtype.name} for Tensor "
                            f"{value.name} with dtype {value.dtype.name}")
        return value
    for base_type, conversion_func in _conversion_functions:
        if isinstance(value, base_type):
            return conversion_func(value, dtype, name)
    if dtype is None and preferred_dtype is not None:
        try:
            return constant(value, dtype=preferred_dtype, name=name)
        except TypeError:
            pass
    return constant(value, dtype=dtype, name=name)


def _const_shape(inputs, attrs):
    value = attrs["value"]
    return [(TensorShape(value.shape), dtypes.as_dtype(value.dtype))]


# The plan folds a constant once and hands out the same array every run.
register_op("Const", _const_shape, aliases_state=True)


def constant(value, dtype=None, shape=None, name="Const"):
    """A constant tensor. ``shape=`` reshapes a list of the right size, or
    broadcasts a scalar / one-element list to fill it::

        tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[2, 3])
        tf.constant(0.5, shape=[3])     # [0.5, 0.5, 0.5]
    """
    array = to_numpy(value, dtype)
    if shape is not None:
        array = _fit_to_shape(array, as_shape(shape).as_list())
    graph = core.get_default_graph()
    return graph.create_op("Const", [], {"value": array}, name=name).outputs[0]


def to_numpy(value, dtype=None):
    """``value`` as a NumPy array of ``dtype`` (default: TensorFlow's inference);
    TypeError if the value cannot be represented in that dtype."""
    if dtype is not None and dtypes.as_dtype(dtype) is dtypes.string or \
            dtype is None and dtypes.is_string_value(value):
        return dtypes.to_string_array(value)
    value = plain_dims(value)
    try:
        source = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise TypeError(f"Cannot convert {value!r} to a tensor: {err}") from None
    int_bounds = dtypes.python_int_bounds(value, source)
    kind = "i" if int_bounds is not None else dtypes.numpy_kind(source.dtype)
    # NOTE: checked before inferring a dtype, whose error would not name the value.
    if kind not in "biuf":
        raise TypeError(f"Cannot convert {value!r} of type {type(value).__name__} to a "
                        f"tensor of dtype {dtype_name(dtype)}: expected numbers or booleans"
                        " (or str/bytes for tf.string)")
    target = dtypes.as_dtype(dtype) if dtype is not None else \
        dtypes.default_for_python_value(value)
    if int_bounds is not None and target.is_integer:
        _check_ints_fit(value, int_bounds, target)
    # NOTE: an empty value loses nothing: tf.constant([], tf.int32) is TF's
    # way to spell an empty int tensor (decode_csv's required column).
    if (kind == "f" and target.is_integer or kind in "fiu" and target.is_bool) and \
            source.size:
        raise TypeError(f"Expected {target.name}, got {value!r} of dtype {source.dtype}: "
                        "that would lose information; cast explicitly with tf.cast")
    return np.array(source, dtype=target.as_numpy_dtype)


def plain_dims(value):
    """Static shapes given as values: a Dimension, a TensorShape or a list
    holding Dimensions becomes ints, as TF 1.15 converts them to tensors."""
    if isinstance(value, Dimension):
        if value.value is None:
            raise ValueError(f"Cannot convert an unknown Dimension to a Tensor: {value}")
        return value.value
    if isinstance(value, TensorShape):
        if not value.is_fully_defined():
            raise ValueError(
                f"Cannot convert a partially known TensorShape to a Tensor: {value}")
        return value.as_list()
    if isinstance(value, (list, tuple)) and any(isinstance(item, Dimension) for item in value):
        return [plain_dims(item) for item in value]
    return value


def _check_ints_fit(value, int_bounds, dtype):
    """TypeError unless ``dtype`` holds every Python int of ``value``, which
    NumPy's cast would wrap around. NumPy arrays are not checked: they keep
    NumPy's cast, as TensorFlow's ``astype`` does."""
    outside = dtypes.int_outside(int_bounds, dtype)
    if outside is not None:
        raise TypeError(f"Cannot convert {dtypes.short_repr(value)} to a tensor of dtype "
                        f"{dtype.name}: {outside} is outside its range "
                        f"{dtypes.int_range_text(dtype)}")


def dtype_name(dtype):
    return "<inferred>" if dtype is None else dtypes.as_dtype(dtype).name


def _fit_to_shape(array, shape):
    size = int(np.prod(shape))
    if array.size == size:
        return array.reshape(shape)
    if array.size == 1:
        return np.full(shape, array.reshape(()), dtype=array.dtype)
    raise TypeError(f"Cannot make a constant of shape {shape} ({size} elements) from "
                    f"a value with {array.size} elements; give {size} values or one")


def constant_value(tensor):
    """The value of ``tensor`` if the graph fixes it (a constant, its
    identity or cast, the shape of a fully known tensor), else None.

    Example: ``constant_value(tf.shape(tf.zeros([2, 3])))`` is ``array([2, 3])``.
    """
    op = tensor.op
    if op.type == "Const":
        return op.attrs["value"]
    if op.type in ("Identity", "StopGradient", "Cast"):
        value = constant_value(op.inputs[0])
        return None if value is None else value.astype(tensor.dtype.as_numpy_dtype)
    if op.type == "Shape" and op.inputs[0].shape.is_fully_defined():
        return np.array(op.inputs[0].shape.as_list(), dtype=tensor.dtype.as_numpy_dtype)
    if op.type == "StridedSlice":   # tf.shape(x)[0] of a known x
        value = constant_value(op.inputs[0])
        index = _static_index(op.attrs["spec"])
        return None if value is None or index is None else np.asarray(value[index])
    return None


def _static_index(spec):
    """A strided slice's spec as a NumPy index, or None if a bound is a tensor."""
    index = []
    for kind, *bounds in spec:
        if any(not isinstance(bound, (int, type(None))) for bound in bounds):
            return None
        if kind == "size":
            begin, size = bounds
            index.append(slice(begin, None if size == -1 else begin + size))
        else:
            index.append({"...": Ellipsis, "new": None}.get(kind) if not bounds else
                         bounds[0] if kind == "index" else slice(*bounds))
    return tuple(index)


def static_ints(value, what):
    """A list of ints from a Python sequence or a tensor the graph fixes
    (see constant_value); None for a tensor known only when the graph runs."""
    if hasattr(value, "graph"):
        value = constant_value(value)
        if value is None:
            return None
    try:
        return [int(item) for item in value]
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a 1-D list of ints, got {value!r}") from None


def _placeholder_shape(inputs, attrs):
    return [(attrs["shape"], attrs["dtype"])]


register_op("Placeholder", _placeholder_shape)


def placeholder(dtype, shape=None, name=None):
    """A value fed at run time: ``x = tf.placeholder(tf.float32, [None, 784])``
    then ``sess.run(y, feed_dict={x: batch})``."""
    attrs = {"dtype": dtypes.as_dtype(dtype), "shape": as_shape(shape)}
    graph = core.get_default_graph()
    return graph.create_op("Placeholder", [], attrs, name=name or "Placeholder").outputs[0]


def _with_default_shape(inputs, attrs):
    default = inputs[0]
    if not attrs["shape"].is_compatible_with(default.shape):
        raise ValueError(f"Default value of shape {default.shape} does not fit the "
                         f"placeholder shape {attrs['shape']}")
    return [(attrs["shape"], default.dtype)]


register_op("PlaceholderWithDefault", _with_default_shape, forwards_input=True)


def placeholder_with_default(value, shape, name=None):
    """A placeholder that yields ``value`` when it is not fed."""
    default = convert_to_tensor(value)
    graph = core.get_default_graph()
    attrs = {"shape": as_shape(shape)}
    return graph.create_op("PlaceholderWithDefault", [default], attrs,
                           name=name or "PlaceholderWithDefault").outputs[0]


def _fill_shape(inputs, attrs):
    return [(TensorShape(attrs["shape"]), inputs[0].dtype)]


register_op("Fill", _fill_shape)


def _dynamic_fill_shape(inputs, attrs):
    from .shape_values import constant_value_as_shape  # it imports this module
    return [(constant_value_as_shape(inputs[1]), inputs[0].dtype)]


# The dims are read on the host when the graph runs (TF's Fill with a dims
# tensor); the static shape is what the graph knows of them.
register_op("DynamicFill", _dynamic_fill_shape, shape_only_inputs=())


def fill(dims, value, name=None):
    """A tensor of shape ``dims`` holding ``value`` everywhere: ``tf.fill([2, 3], 9)``.
    ``dims`` may be a tensor, or a list holding scalar tensors:
    ``tf.fill(tf.shape(x), 1.0)``, ``tf.fill([tf.shape(x)[0], 4], 0.0)``."""
    value = convert_to_tensor(value)
    if value.shape.ndims not in (None, 0):   # unknown: the kernel checks it
        raise ValueError(f"fill needs a scalar value, got shape {value.shape}")
    graph = core.get_default_graph()
    if _known_at_run_time(dims):
        return graph.create_op("DynamicFill", [value, _dims_tensor(dims)],
                               name=name or "Fill").outputs[0]
    return graph.create_op("Fill", [value], {"shape": _static_dims(dims, "fill")},
                           name=name or "Fill").outputs[0]


def _known_at_run_time(dims):
    """Whether ``dims`` is a tensor the graph does not fix, or a list holding one."""
    if isinstance(dims, core.Tensor):
        return constant_value(dims) is None
    return isinstance(dims, (list, tuple)) and \
        any(isinstance(dim, core.Tensor) and constant_value(dim) is None for dim in dims)


def _fixed_dims(dims):
    """Dims given as tensors the graph fixes (see constant_value), as ints."""
    if isinstance(dims, core.Tensor):
        return constant_value(dims).tolist()
    return [int(constant_value(dim)) if isinstance(dim, core.Tensor) else dim for dim in dims]


def _dims_tensor(dims):
    """``dims`` as a 1-D int32 tensor (a list of ints and scalar tensors is
    stacked, as TF converts it)."""
    from .array_ops import shape_tensor  # it imports this module
    return shape_tensor(dims, "fill")


def _static_dims(dims, what):
    if isinstance(dims, core.Tensor) or isinstance(dims, (list, tuple)) and \
            any(isinstance(dim, core.Tensor) for dim in dims):
        dims = _fixed_dims(dims)
    dims = as_shape(dims)
    if not dims.is_fully_defined():
        raise ValueError(f"{what} needs a fully known shape, got {dims}")
    return tuple(dims.dims)


def zeros(shape, dtype=dtypes.float32, name=None):
    """``tf.zeros([2, 3])``: a float32 tensor of zeros."""
    return _filled(shape, dtype, 0, name or "zeros")


def ones(shape, dtype=dtypes.float32, name=None):
    """``tf.ones([2, 3])``: a float32 tensor of ones."""
    return _filled(shape, dtype, 1, name or "ones")


def _filled(shape, dtype, value, name):
    """A constant below 1000 elements, else a Fill op (TensorFlow's rule): a
    shape too big for memory then fails when the graph runs, with a
    ResourceExhaustedError, instead of while it is built."""
    dtype = dtypes.as_dtype(dtype)
    if _known_at_run_time(shape):
        return fill(shape, constant(value, dtype), name=name)
    dims = _static_dims(shape, name)
    if math.prod(dims) < 1000:
        return constant(np.full(dims, value, dtype.as_numpy_dtype), name=name)
    return fill(dims, constant(value, dtype), name=name)


def _like_shape(inputs, attrs):
    dtype = attrs.get("dtype") or inputs[0].dtype
    return [(inputs[0].shape, dtype)]


register_op("ZerosLike", _like_shape, shape_only_inputs=(0,))
register_op("OnesLike", _like_shape, shape_only_inputs=(0,))


def zeros_like(tensor, dtype=None, name=None):
    """Zeros with the shape (and by default the dtype) of ``tensor``."""
    return _like("ZerosLike", tensor, dtype, name)


def ones_like(tensor, dtype=None, name=None):
    """Ones with the shape (and by default the dtype) of ``tensor``."""
    return _like("OnesLike", tensor, dtype, name)


def _like(op_type, tensor, dtype, name):
    tensor = convert_to_tensor(tensor)
    attrs = {"dtype": dtypes.as_dtype(dtype) if dtype is not None else None}
    graph = core.get_default_graph()
    return graph.create_op(op_type, [tensor], attrs, name=name).outputs[0]


# -- gradients ---------------------------------------------------------------------

from ..graph.registry import register_gradient, register_not_differentiable

register_not_differentiable("Const", "Placeholder")
register_gradient("Fill", lambda op, grad: [_sum_all(grad)])
register_gradient("DynamicFill", lambda op, grad: [_sum_all(grad), None])


def _sum_all(grad):
    from .math_ops import reduce_sum  # math_ops imports this module
    return reduce_sum(grad)
