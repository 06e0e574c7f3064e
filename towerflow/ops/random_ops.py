"""Random tensors with TensorFlow-1 seeding: a graph-level seed
(``tf.set_random_seed``) and an optional op-level seed make every op's stream
reproducible; each new Session starts the streams again from the beginning."""

import numpy as np

from .. import dtypes
from ..graph import core
from ..graph.registry import register_not_differentiable, register_op
from ..graph.shapes import as_shape
from .constant_ops import constant_value, convert_to_tensor

# TensorFlow's default graph seed, used when only an op seed is given.
DEFAULT_GRAPH_SEED = 87654321


def set_random_seed(seed):
    """Set the graph-level seed of the default graph: ``tf.set_random_seed(42)``."""
    core.get_default_graph().seed = None if seed is None else int(seed)


def get_seed(op_seed):
    """The seed of a new random op: (graph seed, op seed), plus the tower index
    inside towers 1, 2, ... so each tower draws its own stream from the same
    seeds; (None, None) = unseeded."""
    graph = core.get_default_graph()
    if graph.seed is not None:
        seed = graph.seed, int(op_seed) if op_seed is not None else len(graph._ops)
    elif op_seed is not None:
        seed = DEFAULT_GRAPH_SEED, int(op_seed)
    else:
        return None, None
    return seed + (graph.tower_index,) if graph.tower_index else seed


def _random_shape(inputs, attrs):
    # With an input (the tensor x of ``shape=tf.shape(x)``), x's shape.
    shape = inputs[0].shape if inputs else as_shape(attrs["shape"])
    return [(shape, attrs["dtype"])]


def _random_dims_shape(inputs, attrs):
    from .shape_values import constant_value_as_shape  # it imports constant_ops
    return [(constant_value_as_shape(inputs[0]), attrs["dtype"])]


RANDOM_OP_TYPES = ("RandomStandardNormal", "TruncatedNormal", "RandomUniform",
                   "RandomUniformInt")
for _op_type in RANDOM_OP_TYPES:
    register_op(_op_type, _random_shape, stateful=True, shape_only_inputs=(0,))
    # The same draw of a shape given as an int tensor read when the graph runs
    # (``tf.random_normal([tf.shape(x)[0], 8])``).
    register_op(_op_type + "Dims", _random_dims_shape, stateful=True)


def _random_op(op_type, shape, dtype, seed, params, name):
    """A draw of ``shape``: static dims, or ``tf.shape(x)``/a constant tensor."""
    attrs = {"dtype": dtypes.as_dtype(dtype), "seed": get_seed(seed), "params": params}
    graph = core.get_default_graph()
    if _has_run_time_dims(shape):
        from .array_ops import shape_tensor  # it imports constant_ops
        dims = shape_tensor(shape, op_type)
        return graph.create_op(op_type + "Dims", [dims], dict(attrs, shape=None),
                               name=name).outputs[0]
    static, like = _shape_argument(op_type, shape)
    return graph.create_op(op_type, [like] if like is not None else [],
                           dict(attrs, shape=static), name=name).outputs[0]


def _has_run_time_dims(shape):
    """A list holding scalar tensors the graph does not fix, or a computed
    tensor other than tf.shape(x): its values are read when the graph runs."""
    if isinstance(shape, core.Tensor):
        return constant_value(shape) is None and shape.op.type != "Shape"
    return isinstance(shape, (list, tuple)) and any(
        isinstance(dim, core.Tensor) and constant_value(dim) is None for dim in shape)


def _shape_argument(op_type, shape):
    """(static dims, None), or (None, x) for ``tf.shape(x)`` with x's shape known
    only at run time: the kernel then draws with the shape of x's value."""
    if isinstance(shape, core.Tensor):
        value = constant_value(shape)
        if value is None:   # tf.shape(x) of an x whose shape is known at run time
            return None, shape.op.inputs[0]
        shape = value.tolist()
    elif isinstance(shape, (list, tuple)):
        shape = [constant_value(dim) if isinstance(dim, core.Tensor) else dim
                 for dim in shape]
    dims = as_shape(shape)
    if not dims.is_fully_defined():
        raise ValueError(f"{op_type} needs a fully known shape, got {dims}")
    return tuple(dims.dims), None


def _is_number(value):
    return isinstance(value, (int, float, np.integer, np.floating)) and \
        not isinstance(value, bool)


def _scaled(draw, scale, offset, dtype):
    """``draw * scale + offset`` with tensor (or array) ``scale``/``offset``,
    broadcast as TensorFlow's random ops do."""
    from . import math_ops
    scale = convert_to_tensor(scale, dtype=dtype)
    offset = convert_to_tensor(offset, dtype=dtype)
    return math_ops.add(math_ops.multiply(draw, scale), offset)


def _normal(op_type, shape, mean, stddev, dtype, seed, name):
    _check_float(name, dtype)
    if _is_number(mean) and _is_number(stddev):
        return _random_op(op_type, shape, dtype, seed, (float(mean), float(stddev)), name)
    draw = _random_op(op_type, shape, dtype, seed, (0.0, 1.0), name)
    return _scaled(draw, stddev, mean, dtypes.as_dtype(dtype))


def random_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None):
    """Normal samples: ``tf.random_normal([784, 10], stddev=0.01, seed=1)``.
    ``mean`` and ``stddev`` may be tensors broadcastable to ``shape``, and
    ``shape`` ``tf.shape(x)``: ``tf.random_normal(tf.shape(mu), stddev=sigma)``."""
    return _normal("RandomStandardNormal", shape, mean, stddev, dtype, seed,
                   name or "random_normal")


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None,
                     name=None):
    """Normal samples redrawn until within two standard deviations of the mean;
    tensor arguments as :func:`random_normal`."""
    return _normal("TruncatedNormal", shape, mean, stddev, dtype, seed,
                   name or "truncated_normal")


def random_uniform(shape, minval=0, maxval=None, dtype=dtypes.float32, seed=None,
                   name=None):
    """Uniform samples in [minval, maxval): floats default to [0, 1); integer
    dtypes need ``maxval``. Float ``minval``/``maxval`` may be tensors
    broadcastable to ``shape``: ``tf.random_uniform([4], minval=low, maxval=high)``."""
    dtype = dtypes.as_dtype(dtype)
    if dtype.is_integer:
        if maxval is None:
            raise ValueError("random_uniform with an integer dtype needs maxval")
        if not (_is_number(minval) and _is_number(maxval)):
            raise TypeError(f"random_uniform with dtype {dtype.name} needs Python int "
                            f"bounds, got minval={minval!r}, maxval={maxval!r}")
        if int(maxval) <= int(minval):
            raise ValueError(f"random_uniform needs minval < maxval, got {minval}, {maxval}")
        return _random_op("RandomUniformInt", shape, dtype, seed,
                          (int(minval), int(maxval)), name or "random_uniform")
    _check_float("random_uniform", dtype)
    maxval = 1.0 if maxval is None else maxval
    name = name or "random_uniform"
    if _is_number(minval) and _is_number(maxval):
        return _random_op("RandomUniform", shape, dtype, seed,
                          (float(minval), float(maxval)), name)
    from . import math_ops
    minval = convert_to_tensor(minval, dtype=dtype)
    width = math_ops.subtract(convert_to_tensor(maxval, dtype=dtype), minval)
    draw = _random_op("RandomUniform", shape, dtype, seed, (0.0, 1.0), name)
    return _scaled(draw, width, minval, dtype)


def _check_float(what, dtype):
    if not dtypes.as_dtype(dtype).is_floating:
        raise ValueError(f"{what} needs a floating dtype, got {dtypes.as_dtype(dtype).name}")

register_not_differentiable(*RANDOM_OP_TYPES, *(op_type + "Dims" for op_type in RANDOM_OP_TYPES))


def _multinomial_shape(inputs, attrs):
    logits = inputs[0]
    if logits.shape.ndims not in (None, 2):
        raise ValueError(f"categorical needs logits of shape [batch, classes], got "
                         f"{logits.shape}")
    batch = logits.shape.dims[0] if logits.shape.dims else None
    return [(as_shape([batch, attrs["num_samples"]]), attrs["dtype"])]


register_op("Multinomial", _multinomial_shape, stateful=True)
register_not_differentiable("Multinomial")


def categorical(logits, num_samples, dtype=None, seed=None, name=None):
    """Draw ``num_samples`` class indices per row from ``softmax(logits)``:
    ``tf.random.categorical(logits / temperature, 1)`` samples at a temperature."""
    logits = convert_to_tensor(logits)
    if not logits.dtype.is_floating:
        raise TypeError(f"categorical needs floating logits, got {logits.dtype.name}")
    attrs = {"num_samples": int(num_samples), "seed": get_seed(seed),
             "dtype": dtypes.as_dtype(dtype or dtypes.int64)}
    return logits.graph.create_op("Multinomial", [logits], attrs,
                                  name=name or "categorical").outputs[0]


multinomial = categorical


def _same_shape(inputs, attrs):
    return [(inputs[0].shape, inputs[0].dtype)]


register_op("RandomShuffle", _same_shape, stateful=True)
register_not_differentiable("RandomShuffle")


def random_shuffle(value, seed=None, name=None):
    """``value`` with its slices along dimension 0 in a random order (a new
    order each run): ``tf.random_shuffle(filenames)``."""
    value = convert_to_tensor(value)
    if value.shape.ndims == 0:
        raise ValueError(f"random_shuffle needs a tensor of rank >= 1, got {value.shape}")
    return value.graph.create_op("RandomShuffle", [value], {"seed": get_seed(seed)},
                                 name=name or "RandomShuffle").outputs[0]
