"""Elementwise arithmetic, comparisons, matmul, reductions, casts and the
Python operators on tensors (``a + b``, ``a @ b``, ``-a``, ``a < b``)."""

from .. import dtypes
from ..graph import core, shapes
from ..graph.registry import register_op
from .constant_ops import constant_value, convert_to_tensor

# -- shape rules ---------------------------------------------------------------


def _same_as_input(inputs, attrs):
    return [(inputs[0].shape, inputs[0].dtype)]


def _broadcast_same_dtype(inputs, attrs):
    x, y = inputs
    return [(shapes.broadcast(x.shape, y.shape), x.dtype)]


def _broadcast_to_bool(inputs, attrs):
    x, y = inputs
    return [(shapes.broadcast(x.shape, y.shape), dtypes.bool)]


def _float_to_bool(inputs, attrs):
    x, = inputs     # a float: its type list says so
    return [(x.shape, dtypes.bool)]


def _select_shape(inputs, attrs):
    condition, x, y = inputs
    if not condition.dtype.is_bool:
        raise TypeError(f"where's condition must be bool, got {condition.name} of "
                        f"{condition.dtype.name}")
    if x.dtype is not y.dtype:
        raise TypeError(f"where's x and y must have one dtype, got {x.name} of "
                        f"{x.dtype.name} and {y.name} of {y.dtype.name}")
    return [(shapes.broadcast(condition.shape, shapes.broadcast(x.shape, y.shape)), x.dtype)]


def _bool_input(inputs, attrs):
    for tensor in inputs:
        if not tensor.dtype.is_bool:
            raise TypeError(f"expected bool inputs, got {tensor.name} of {tensor.dtype.name}")
    return [(inputs[0].shape if len(inputs) == 1 else
             shapes.broadcast(inputs[0].shape, inputs[1].shape), dtypes.bool)]


UNARY_OPS = ("Neg", "Abs", "Square", "Sqrt", "Rsqrt", "Exp", "Log", "Log1p", "Sign",
             "Reciprocal", "Floor", "Ceil", "Round", "Sin", "Cos", "Tanh", "Sigmoid")
BINARY_OPS = ("Add", "Sub", "Mul", "RealDiv", "FloorDiv", "FloorMod", "Pow", "Maximum",
              "Minimum", "SquaredDifference")
FLOAT_CHECK_OPS = ("IsFinite", "IsNan", "IsInf")     # float -> bool, elementwise
COMPARISON_OPS = ("Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual")

# TensorFlow's type lists: signed numbers for these, floats for the other unary ops.
SIGNED_UNARY_OPS = ("Neg", "Abs", "Square", "Sign", "Reciprocal", "Round")
ORDERED_COMPARISONS = ("Less", "LessEqual", "Greater", "GreaterEqual")

for _op_type in UNARY_OPS:
    register_op(_op_type, _same_as_input, type_list=dtypes.SIGNED_TYPES
                if _op_type in SIGNED_UNARY_OPS else dtypes.FLOATING_TYPES)
for _op_type in BINARY_OPS:
    register_op(_op_type, _broadcast_same_dtype, type_list=dtypes.REAL_TYPES)
for _op_type in COMPARISON_OPS:
    register_op(_op_type, _broadcast_to_bool, type_list=dtypes.REAL_TYPES
                if _op_type in ORDERED_COMPARISONS else None)
register_op("LogicalNot", _bool_input)
register_op("Select", _select_shape)
for _op_type in FLOAT_CHECK_OPS:
    register_op(_op_type, _float_to_bool, type_list=dtypes.FLOATING_TYPES)
register_op("LogicalAnd", _bool_input)
register_op("LogicalOr", _bool_input)

# -- builders --------------------------------------------------------------------


def _unary(op_type, x, name):
    x = convert_to_tensor(x)
    return x.graph.create_op(op_type, [x], name=name or op_type).outputs[0]


def _binary(op_type, x, y, name):
    x, y = _convert_pair(op_type, x, y)
    return x.graph.create_op(op_type, [x, y], name=name or op_type).outputs[0]


def _convert_pair(op_type, x, y):
    """Convert both operands; a Python/NumPy operand takes the tensor's dtype.
    Two tensors of different dtypes are an error, as in TensorFlow."""
    x_is_tensor = _is_tensor_like(x)
    y_is_tensor = _is_tensor_like(y)
    # NOTE: a Python operand becomes a constant in the tensor's graph, which
    # need not be the default graph (TensorFlow 1.x does the same).
    if x_is_tensor:
        x = convert_to_tensor(x)
        with x.graph.as_default():
            y = convert_to_tensor(y, dtype=None if y_is_tensor else x.dtype)
    else:
        y = convert_to_tensor(y)
        with y.graph.as_default():
            x = convert_to_tensor(x, dtype=y.dtype if y_is_tensor else None)
    if x.dtype is not y.dtype:
        raise TypeError(f"Input 'y' of '{op_type}' Op has type {y.dtype.name} that does "
                        f"not match type {x.dtype.name} of argument 'x'.")
    return x, y


def _is_tensor_like(value):
    return isinstance(value, core.Tensor) or hasattr(value, "_as_graph_element")


def _unary_builder(op_type, doc_name):
    def build(x, name=None):
        return _unary(op_type, x, name)
    build.__name__ = doc_name
    build.__doc__ = f"Elementwise {doc_name}: ``tf.{doc_name}(x)`` (op type {op_type})."
    return build


def _binary_builder(op_type, doc_name):
    def build(x, y, name=None):
        return _binary(op_type, x, y, name)
    build.__name__ = doc_name
    build.__doc__ = f"Elementwise {doc_name} with broadcasting: ``tf.{doc_name}(x, y)``."
    return build


negative = _unary_builder("Neg", "negative")
abs = _unary_builder("Abs", "abs")  # noqa: A001 (TensorFlow's public name)
square = _unary_builder("Square", "square")
sqrt = _unary_builder("Sqrt", "sqrt")
rsqrt = _unary_builder("Rsqrt", "rsqrt")
exp = _unary_builder("Exp", "exp")
log = _unary_builder("Log", "log")
log1p = _unary_builder("Log1p", "log1p")
sign = _unary_builder("Sign", "sign")
reciprocal = _unary_builder("Reciprocal", "reciprocal")
floor = _unary_builder("Floor", "floor")
ceil = _unary_builder("Ceil", "ceil")
round = _unary_builder("Round", "round")  # noqa: A001
sin = _unary_builder("Sin", "sin")
cos = _unary_builder("Cos", "cos")
tanh = _unary_builder("Tanh", "tanh")
sigmoid = _unary_builder("Sigmoid", "sigmoid")
logical_not = _unary_builder("LogicalNot", "logical_not")
is_finite = _unary_builder("IsFinite", "is_finite")
is_nan = _unary_builder("IsNan", "is_nan")
is_inf = _unary_builder("IsInf", "is_inf")



def where(condition, x, y, name=None):
    """Elementwise ``x`` where ``condition`` is true, else ``y`` (all three
    broadcast together, as TensorFlow 2's ``where``):
    ``tf.where(step_ok, new_scale, scale)``. Unlike TensorFlow's, ``x`` and
    ``y`` are both required."""
    condition = convert_to_tensor(condition)
    x, y = _convert_pair("Select", x, y)
    return condition.graph.create_op("Select", [condition, x, y],
                                     name=name or "Select").outputs[0]


add = _binary_builder("Add", "add")
subtract = _binary_builder("Sub", "subtract")
multiply = _binary_builder("Mul", "multiply")
floordiv = _binary_builder("FloorDiv", "floordiv")
floormod = _binary_builder("FloorMod", "floormod")
pow = _binary_builder("Pow", "pow")  # noqa: A001
maximum = _binary_builder("Maximum", "maximum")
minimum = _binary_builder("Minimum", "minimum")
squared_difference = _binary_builder("SquaredDifference", "squared_difference")
equal = _binary_builder("Equal", "equal")
not_equal = _binary_builder("NotEqual", "not_equal")
less = _binary_builder("Less", "less")
less_equal = _binary_builder("LessEqual", "less_equal")
greater = _binary_builder("Greater", "greater")
greater_equal = _binary_builder("GreaterEqual", "greater_equal")
logical_and = _binary_builder("LogicalAnd", "logical_and")
logical_or = _binary_builder("LogicalOr", "logical_or")
sub, mul, mod = subtract, multiply, floormod


def divide(x, y, name=None):
    """True division ``x / y``; integers are divided as floats, as in TensorFlow:
    8- and 16-bit ones as float32, wider ones as float64 (``tf.constant(7) / 2``)."""
    x, y = _convert_pair("RealDiv", x, y)
    if x.dtype.is_bool:
        raise TypeError(f"x / y is not defined for {x.dtype.name} tensors")
    if not x.dtype.is_floating:
        as_float = dtypes.float32 if x.dtype.size <= 2 else dtypes.float64
        x, y = cast(x, as_float), cast(y, as_float)
    return x.graph.create_op("RealDiv", [x, y], name=name or "truediv").outputs[0]


truediv = divide


def div(x, y, name=None):
    """TF1's ``tf.div``: Python 2's ``/``, which floors the quotient of
    integers and divides floats exactly: ``tf.div(7, 2)`` is 3,
    ``tf.div(7., 2.)`` is 3.5."""
    x, y = _convert_pair("FloorDiv", x, y)
    if x.dtype.is_integer:
        return floordiv(x, y, name=name or "div")
    return divide(x, y, name=name or "div")

# -- matmul ----------------------------------------------------------------------


def _matmul_shape(inputs, attrs):
    a, b = inputs
    shape = shapes.matmul(a.shape, b.shape, attrs["transpose_a"], attrs["transpose_b"])
    return [(shape, a.dtype)]


register_op("MatMul", _matmul_shape, typed_input="a",
            type_list=dtypes.FLOATING_TYPES + (dtypes.int32, dtypes.int64))


def matmul(a, b, transpose_a=False, transpose_b=False, name=None):
    """Matrix product of the two last axes (batched over the leading ones)::

        tf.matmul(a, b)                    # [2, 3] @ [3, 2] -> [2, 2]
        tf.matmul(x, w, transpose_b=True)
    """
    a, b = _convert_pair("MatMul", a, b)
    attrs = {"transpose_a": bool(transpose_a), "transpose_b": bool(transpose_b)}
    return a.graph.create_op("MatMul", [a, b], attrs, name=name or "MatMul").outputs[0]

# -- reductions ------------------------------------------------------------------

REDUCTION_OPS = ("Sum", "Mean", "Max", "Min", "Prod", "Any", "All")


def _reduce_shape(inputs, attrs):
    x = inputs[0]
    if attrs["_op"] in ("Any", "All") and not x.dtype.is_bool:
        raise TypeError(f"reduce_{attrs['_op'].lower()} needs a bool tensor, got "
                        f"{x.dtype.name}")
    return [(shapes.reduce(x.shape, attrs["axes"], attrs["keepdims"]), x.dtype)]


for _op_type in REDUCTION_OPS:
    register_op(_op_type, _reduce_shape, typed_input="input",
                type_list=None if _op_type in ("Any", "All") else dtypes.REAL_TYPES)


def _static_axes(axis, public_name):
    """Axes given as a constant tensor (TF accepts any int tensor) as ints."""
    if not isinstance(axis, core.Tensor):
        return axis
    value = constant_value(axis)
    if value is None:
        raise ValueError(f"{public_name} needs its axis known when the graph is built (a "
                         f"list or a constant), got the computed tensor {axis.name}")
    return value.tolist()


def _reducer(op_type, public_name):
    def reduce(input_tensor, axis=None, keepdims=None, name=None,
               reduction_indices=None, keep_dims=None):
        x = convert_to_tensor(input_tensor)
        if axis is not None and reduction_indices is not None:
            raise ValueError("Give axis or reduction_indices, not both")
        axis = _static_axes(reduction_indices if axis is None else axis, public_name)
        keepdims = bool(keepdims if keepdims is not None else keep_dims)
        axes = shapes.normalize_axes(axis, x.shape.ndims)
        attrs = {"axes": axes, "keepdims": keepdims, "_op": op_type}
        return x.graph.create_op(op_type, [x], attrs, name=name or op_type).outputs[0]
    reduce.__name__ = public_name
    reduce.__doc__ = (f"``tf.{public_name}(x, axis=None, keepdims=False)``; "
                      "``reduction_indices`` and ``keep_dims`` are accepted aliases.")
    return reduce


reduce_sum = _reducer("Sum", "reduce_sum")
reduce_mean = _reducer("Mean", "reduce_mean")
reduce_max = _reducer("Max", "reduce_max")
reduce_min = _reducer("Min", "reduce_min")
reduce_prod = _reducer("Prod", "reduce_prod")
reduce_any = _reducer("Any", "reduce_any")
reduce_all = _reducer("All", "reduce_all")

# -- casts, argmax, add_n --------------------------------------------------------


def _cast_shape(inputs, attrs):
    return [(inputs[0].shape, attrs["dtype"])]


# NOTE: a cast to the input's own dtype returns the input itself.
register_op("Cast", _cast_shape, aliases_input=True)


def cast(x, dtype, name=None):
    """``x`` converted to ``dtype`` (floats to ints truncate toward zero)."""
    x = convert_to_tensor(x)
    dtype = dtypes.as_dtype(dtype)
    return x.graph.create_op("Cast", [x], {"dtype": dtype}, name=name or "Cast").outputs[0]


def _cast_to(dtype, public_name, default_name):
    def cast_to(x, name=default_name):
        return cast(x, dtype, name=name)
    cast_to.__name__ = public_name
    cast_to.__doc__ = f"TF1's ``tf.{public_name}(x)``: ``tf.cast(x, tf.{dtype.name})``."
    return cast_to


to_float = _cast_to(dtypes.float32, "to_float", "ToFloat")
to_double = _cast_to(dtypes.float64, "to_double", "ToDouble")
to_int32 = _cast_to(dtypes.int32, "to_int32", "ToInt32")
to_int64 = _cast_to(dtypes.int64, "to_int64", "ToInt64")


def cast_if_needed(x, dtype):
    """``x`` as ``dtype``: ``x`` itself when it already has it, else a Cast."""
    x = convert_to_tensor(x)
    return x if x.dtype is dtypes.as_dtype(dtype) else cast(x, dtype)


def _arg_shape(inputs, attrs):
    x = inputs[0]
    shape = shapes.reduce(x.shape, (attrs["axis"],), keepdims=False)
    return [(shape, attrs["output_type"])]


register_op("ArgMax", _arg_shape, type_list=dtypes.REAL_TYPES, typed_input="input")
register_op("ArgMin", _arg_shape, type_list=dtypes.REAL_TYPES, typed_input="input")


def _arg_builder(op_type, public_name):
    def arg(input, axis=None, name=None, dimension=None, output_type=dtypes.int64):
        x = convert_to_tensor(input)
        axis = dimension if axis is None else axis
        axis = 0 if axis is None else axis
        (axis,) = shapes.normalize_axes(int(axis), x.shape.ndims)
        attrs = {"axis": axis, "output_type": dtypes.as_dtype(output_type)}
        return x.graph.create_op(op_type, [x], attrs, name=name or op_type).outputs[0]
    arg.__name__ = public_name
    arg.__doc__ = f"Index of the {public_name[3:]} along ``axis``: ``tf.{public_name}(y, 1)``."
    return arg


argmax = _arg_builder("ArgMax", "argmax")
argmin = _arg_builder("ArgMin", "argmin")


def _add_n_shape(inputs, attrs):
    shape = inputs[0].shape
    for tensor in inputs[1:]:
        if tensor.dtype is not inputs[0].dtype:
            raise TypeError(f"add_n inputs must share one dtype, got "
                            f"{[t.dtype.name for t in inputs]}")
        shape = shape.merge_with(tensor.shape)
    return [(shape, inputs[0].dtype)]


register_op("AddN", _add_n_shape, aliases_input=True, type_list=dtypes.REAL_TYPES,
            typed_input="inputs")  # one input: returned as is


def add_n(inputs, name=None):
    """The elementwise sum of a list of same-shaped tensors, in list order."""
    if not inputs:
        raise ValueError("add_n needs at least one input tensor")
    tensors = [convert_to_tensor(value) for value in inputs]
    return tensors[0].graph.create_op("AddN", tensors, name=name or "AddN").outputs[0]

# -- Python operators on tensors -------------------------------------------------


def _reverse(fn):
    return lambda x, y: fn(y, x)


_OPERATORS = {
    "__add__": add, "__radd__": _reverse(add), "__sub__": subtract,
    "__rsub__": _reverse(subtract), "__mul__": multiply, "__rmul__": _reverse(multiply),
    "__truediv__": divide, "__rtruediv__": _reverse(divide), "__floordiv__": floordiv,
    "__rfloordiv__": _reverse(floordiv), "__mod__": floormod, "__rmod__": _reverse(floormod),
    "__pow__": pow, "__rpow__": _reverse(pow), "__matmul__": matmul,
    "__rmatmul__": _reverse(matmul), "__lt__": less, "__le__": less_equal,
    "__gt__": greater, "__ge__": greater_equal, "__and__": logical_and,
    "__rand__": _reverse(logical_and), "__or__": logical_or, "__ror__": _reverse(logical_or),
    "__neg__": negative, "__abs__": abs, "__invert__": logical_not,
}


def overload_operators(cls):
    """Install the Python operators on ``cls`` (Tensor, and Variable)."""
    for method, fn in _OPERATORS.items():
        setattr(cls, method, lambda self, *other, _fn=fn: _fn(self, *other))


overload_operators(core.Tensor)

# The gradients of these ops are in math_grad.py (imported last: it builds on them).
from . import math_grad  # noqa: F401
