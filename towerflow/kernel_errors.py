"""Stage 5b: the tf.errors exception a failed kernel gives, as TensorFlow 1.15
words it.

Kernels check nothing on the hot path: NumPy (or CuPy) refuses bad inputs
itself, with its own exception and words. When a step raises, the executor
(:class:`towerflow.plan.Plan`) asks :func:`op_error` for the exception to
raise instead: TensorFlow's class for the failure (a refused input is an
``InvalidArgumentError``, an allocation that fails a ``ResourceExhaustedError``),
TensorFlow's message where this module knows the kernel's (worked out from
the op's inputs, only once it has failed), and the node that failed::

    Incompatible shapes: [2,3] vs. [4]
    	 [[node add (op: Add) ]]

The original exception stays the new one's ``__cause__``. Kernels that check
an input themselves raise ``errors.InvalidArgumentError(None, None, text)``
with TensorFlow's text; the executor names the op in it.
"""

import re

import numpy as np

from . import errors

# Python exceptions a kernel raises for inputs it cannot take (NumPy's broadcast
# and index errors, integer division by zero): TensorFlow's InvalidArgument.
_REFUSED_INPUT = (ValueError, IndexError, KeyError, TypeError, ArithmeticError)


def op_error(op, inputs, err, device_name=None):
    """The OpError to raise for ``err``, raised by ``op``'s kernel on the
    values ``inputs`` (None where unknown) on ``device_name``::

        op_error(add_op, [np.ones((2, 3)), np.ones(4)], numpy_broadcast_error)
        # InvalidArgumentError('Incompatible shapes: [2,3] vs. [4]\n\t [[node add (op: Add) ]]')
    """
    if isinstance(err, errors.OpError):
        return name_node(err, op)
    text = _tf_message(op, inputs, err, device_name) or _plain_message(err)
    return _error_class(err)(None, op, with_node(text, op))


def name_node(err, op):
    """``err`` (an OpError) naming ``op`` if it named no op: a kernel's check
    that knew TensorFlow's words but not its op. (One that names its op keeps
    its message as it is.)"""
    if err.op is None and op is not None:
        err.op = op
        err.message = with_node(err.message, op)
        err.args = (err.message,)
    return err


def with_node(text, op):
    """TensorFlow's message ends with the node that failed."""
    return f"{text}\n\t [[node {op.name} (op: {op.type}) ]]"


def _error_class(err):
    if isinstance(err, MemoryError):
        return errors.ResourceExhaustedError
    if isinstance(err, NotImplementedError):
        return errors.UnimplementedError
    if isinstance(err, _REFUSED_INPUT):
        return errors.InvalidArgumentError
    return errors.InternalError      # anything else is a kernel's bug, not the input's


def _plain_message(err):
    return f"{type(err).__name__}: {err}"


def _tf_message(op, inputs, err, device_name):
    if isinstance(err, MemoryError):
        return _out_of_memory(err, device_name)
    explain = _EXPLAINERS.get(op.type)
    if explain is None or inputs is None or any(value is None for value in inputs):
        return None
    try:
        return explain(op, [_shape(value) for value in inputs], inputs)
    except Exception:  # noqa: BLE001  (no better words: the plain message will do)
        return None


def _shape(value):
    return tuple(getattr(value, "shape", np.shape(value)))


def _dims(shape):
    """TensorShape::DebugString: ``[2,3]``."""
    return "[" + ",".join(str(int(dim)) for dim in shape) + "]"

# -- out of memory (tensorflow/core/framework/op_kernel.cc, allocate_tensor) -----------


_NUMPY_ALLOCATION = re.compile(r"with shape \(([\d, ]*)\) and data type (\w+)")
_TF_TYPE_NAMES = {"float32": "float", "float64": "double", "float16": "half"}


def _out_of_memory(err, device_name):
    match = _NUMPY_ALLOCATION.search(str(err))
    if match is None:
        return f"OOM: {err}"
    dims = [int(dim) for dim in match.group(1).replace(" ", "").split(",") if dim]
    type_name = _TF_TYPE_NAMES.get(match.group(2), match.group(2))
    where = f" on {device_name}" if device_name else ""
    return f"OOM when allocating tensor with shape{_dims(dims)} and type {type_name}" \
        f"{where} by allocator cpu"

# -- explainers: (op, input shapes, input values) -> TensorFlow's message or None --------


def _broadcast_error(op, shapes, values):
    """tensorflow/core/kernels/cwise_ops_common.cc, BinaryOpState."""
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        return f"Incompatible shapes: {_dims(shapes[0])} vs. {_dims(shapes[1])}"
    return None


def _select_error(op, shapes, values):
    """tensorflow/core/kernels/cwise_op_select.cc, SelectV2Op."""
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        condition, then, other = (_dims(shape) for shape in shapes)
        return f"condition {condition}, then {then}, and else {other} must be broadcastable"
    return None


def _matmul_error(op, shapes, values):
    """tensorflow/core/kernels/matmul_op.cc (rank 2) and batch_matmul_op_impl.h."""
    a, b = shapes
    for index, shape in enumerate(shapes):
        if len(shape) < 2:
            return f"In[{index}] ndims must be >= 2: {len(shape)}"
    transpose_a, transpose_b = op.attrs["transpose_a"], op.attrs["transpose_b"]
    inner_a, inner_b = a[-2 if transpose_a else -1], b[-1 if transpose_b else -2]
    if len(a) == 2 and len(b) == 2:
        return None if inner_a == inner_b else \
            f"Matrix size-incompatible: In[0]: {_dims(a)}, In[1]: {_dims(b)}"
    if a[:-2] != b[:-2]:
        return (f"In[0] and In[1] must have compatible batch dimensions: {_dims(a)} "
                f"vs. {_dims(b)}")
    if inner_a != inner_b:
        return (f"In[0] mismatch In[1] shape: {inner_a} vs. {inner_b}: {_dims(a)} "
                f"{_dims(b)} {int(transpose_a)} {int(transpose_b)}")
    return None


def _reshape_message(size, target):
    """tensorflow/core/kernels/reshape_op.h: TensorFlow's message for reshaping
    ``size`` values to ``target`` (one -1 at most), or None if it fits."""
    unknown = None
    for index, dim in enumerate(target):
        if dim == -1 and unknown is not None:
            return f"Only one input size may be -1, not both {unknown} and {index}"
        if dim == -1:
            unknown = index
        elif dim < 0:
            return f"Size {index} must be non-negative, not {dim}"
    product = int(np.prod([dim for dim in target if dim != -1], dtype=object))
    if unknown is not None:
        if product == 0:
            return ("Reshape cannot infer the missing input size for an empty tensor "
                    "unless all specified input sizes are non-zero")
        if size % product:
            return (f"Input to reshape is a tensor with {size} values, but the requested "
                    f"shape requires a multiple of {product}")
        return None
    if product != size:
        return (f"Input to reshape is a tensor with {size} values, but the requested shape "
                f"has {product}")
    return None


def _reshape_error(op, shapes, values):
    return _reshape_message(int(np.prod(shapes[0], dtype=object)), list(op.attrs["shape"]))


def _dynamic_reshape_error(op, shapes, values):
    target = [int(dim) for dim in np.asarray(_host(values[1])).reshape(-1)]
    return _reshape_message(int(np.prod(shapes[0], dtype=object)), target)


def _host(value):
    get = getattr(value, "get", None)      # a CuPy array: read it back
    return get() if callable(get) else value


def _concat_error(op, shapes, values):
    """tensorflow/core/kernels/concat_op.cc."""
    first, axis = shapes[0], op.attrs["axis"]
    for index, shape in enumerate(shapes):
        if len(shape) != len(first):
            return (f"ConcatOp : Ranks of all input tensors should match: shape[0] = "
                    f"{_dims(first)} vs. shape[{index}] = {_dims(shape)}")
    rank = len(first)
    if not -rank <= axis < rank:
        return (f"ConcatOp : Expected concatenating dimensions in the range [{-rank}, "
                f"{rank}), but got {axis}")
    for index, shape in enumerate(shapes):
        if any(a != b for dim, (a, b) in enumerate(zip(first, shape)) if dim != axis % rank):
            return (f"ConcatOp : Dimensions of inputs should match: shape[0] = "
                    f"{_dims(first)} vs. shape[{index}] = {_dims(shape)}")
    return None


def _pack_error(op, shapes, values):
    """tensorflow/core/kernels/pack_op.cc."""
    for index, shape in enumerate(shapes):
        if shape != shapes[0]:
            return (f"Shapes of all inputs must match: values[0].shape = "
                    f"{_dims(shapes[0])} != values[{index}].shape = {_dims(shape)}")
    return None


def _reduction_error(op, shapes, values):
    """tensorflow/core/kernels/reduction_ops_common.cc, ReductionHelper::Simplify."""
    rank = len(shapes[0])
    for axis in op.attrs["axes"] or ():
        if not -rank <= axis < rank:
            return f"Invalid reduction dimension ({axis} for input with {rank} dimension(s)"
    return None


def _arg_error(op, shapes, values):
    """tensorflow/core/kernels/argmax_op.cc."""
    shape, axis = shapes[0], op.attrs["axis"]
    rank = len(shape)
    if not -rank <= axis < rank:
        return f"Expected dimension in the range [{-rank}, {rank}), but got {axis}"
    if shape[axis] == 0:
        return f"Reduction axis {axis} is empty in shape {_dims(shape)}"
    return None


def _transpose_error(op, shapes, values):
    """tensorflow/core/kernels/transpose_op.cc."""
    if op.attrs["perm"] is None:
        return None
    perm, rank = list(op.attrs["perm"]), len(shapes[0])
    if len(perm) != rank:
        return (f"transpose expects a vector of size {rank}. But input(1) is a vector of "
                f"size {len(perm)}")
    for axis in perm:
        if not 0 <= axis < rank:
            return f"{axis} is out of range [0 .. {rank})"
    missing = [axis for axis in range(rank) if axis not in perm]
    if missing:
        return f"{missing[0]} is missing from {{{','.join(map(str, perm))}}}."
    return None


_BROADCASTING = ("Add", "Sub", "Mul", "RealDiv", "FloorDiv", "FloorMod", "Pow", "Maximum",
                 "Minimum", "SquaredDifference", "Equal", "NotEqual", "Less", "LessEqual",
                 "Greater", "GreaterEqual", "LogicalAnd", "LogicalOr")

_EXPLAINERS = {
    **dict.fromkeys(_BROADCASTING, _broadcast_error),
    "Select": _select_error,
    "MatMul": _matmul_error,
    "Reshape": _reshape_error,
    "DynamicReshape": _dynamic_reshape_error,
    "ConcatV2": _concat_error,
    "Pack": _pack_error,
    **dict.fromkeys(("Sum", "Mean", "Max", "Min", "Prod", "Any", "All"), _reduction_error),
    "ArgMax": _arg_error,
    "ArgMin": _arg_error,
    "Transpose": _transpose_error,
}
