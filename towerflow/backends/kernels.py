"""Kernels written once against an array module ``xp`` (NumPy or CuPy).

``build_kernels(xp)`` returns the table ``{kernel name: make_kernel}``. The
plan calls ``make_kernel(ctx)`` once per op when it compiles (``ctx`` is a
:class:`~towerflow.backends.KernelContext`) and gets back a plain function of
the input arrays, so attributes are bound before the hot loop, never looked
up in it. A kernel returns one array, a tuple (several outputs) or None.
"""

import functools
import itertools
import threading

import numpy as np

from .. import errors
from ..graph import shapes
from . import parallel_gemm
from .activation_kernels import build_activation_kernels
from .control_flow_kernels import build_control_flow_kernels
from .cpu_threads import SERIAL
from .debugging_kernels import build_debugging_kernels
from .depthwise_kernels import build_depthwise_kernels
from .gradient_kernels import build_gradient_kernels
from .image_kernels import build_image_kernels
from .index_kernels import build_index_kernels
from .linalg_kernels import build_linalg_kernels
from .lrn_kernels import build_lrn_kernels
from .nn_kernels import build_nn_kernels
from .parallel_kernels import build_parallel_kernels
from .random_kernels import build_random_kernels
from .reduction_kernels import build_reduction_kernels
from .scatter_kernels import build_scatter_kernels
from .sort_kernels import build_sort_kernels
from .sparse_kernels import build_sparse_kernels
from .sparse_training_kernels import build_sparse_training_kernels
from .state_scatter_kernels import build_state_scatter_kernels
from .training_kernels import build_training_kernels


def build_kernels(xp, parallel=SERIAL, fused_updates=None):
    """The kernel table for array module ``xp``; ``parallel`` (see
    :mod:`.cpu_threads`) splits the big kernels across CPU threads;
    ``fused_updates``: see training_kernels.build_training_kernels."""
    table = {}
    table.update(_source_kernels(xp))
    table.update(_elementwise_kernels(xp, parallel))
    table.update(build_reduction_kernels(xp))
    table.update(_array_kernels(xp))
    table.update(build_random_kernels(xp))
    table.update(_state_kernels(xp))
    table.update(build_gradient_kernels(xp))
    table.update(build_activation_kernels(xp, parallel))
    table.update(build_nn_kernels(xp, parallel))
    table.update(build_training_kernels(xp, fused_updates))
    table.update(build_sparse_training_kernels(xp))
    table.update(build_state_scatter_kernels(xp))
    table.update(build_sparse_kernels(xp))
    table.update(build_parallel_kernels(xp))
    table.update(build_index_kernels(xp))
    table.update(build_image_kernels(xp))
    table.update(build_lrn_kernels(xp))
    table.update(build_linalg_kernels(xp))    # einsum, linalg, reverse_sequence
    table.update(build_scatter_kernels(xp))    # gather_nd, scatter_nd, pad, tile
    table.update(build_sort_kernels(xp))       # sort, unique, boolean_mask, cumsum
    table.update(build_debugging_kernels(xp))
    table.update(build_depthwise_kernels(xp))
    table.update(build_control_flow_kernels(xp))
    return table


def _fixed(fn):
    """A maker for kernels that need nothing from the op."""
    return lambda ctx: fn


def _identity(x):
    return x


def _source_kernels(xp):
    def const(ctx):
        value = ctx.device.to_device(ctx.attrs["value"])
        return lambda: value

    def placeholder(ctx):
        def unfed():
            raise errors.InvalidArgumentError(
                None, ctx.op, f"You must feed a value for placeholder tensor '{ctx.op.name}'")
        return unfed

    def fill(ctx):
        shape, dtype = ctx.attrs["shape"], ctx.output_dtypes[0]

        def filled(value):
            if value.ndim:      # a value of rank unknown when the graph was built
                raise errors.InvalidArgumentError(      # fill_op.cc's words
                    None, None, "value must be a scalar, got shape "
                    + "[" + ",".join(map(str, value.shape)) + "]")
            return xp.full(shape, value, dtype=dtype)
        return filled

    def dynamic_fill(ctx):
        dtype = ctx.output_dtypes[0]

        def filled(value, dims):
            if value.ndim:
                raise errors.InvalidArgumentError(      # fill_op.cc's words
                    None, None, "value must be a scalar, got shape "
                    + "[" + ",".join(map(str, value.shape)) + "]")
            return xp.full(read_dims(dims), value, dtype=dtype)
        return filled

    def like(fill_value):
        def make(ctx):
            dtype = ctx.output_dtypes[0]
            return lambda x: xp.full(xp.shape(x), fill_value, dtype=dtype)
        return make

    return {"Const": const, "Placeholder": placeholder, "Fill": fill,
            "DynamicFill": dynamic_fill,
            "PlaceholderWithDefault": _fixed(_identity), "Identity": _fixed(_identity),
            "IdentityN": _fixed(lambda *values: list(values)),
            "ZerosLike": like(0), "OnesLike": like(1), "NoOp": _fixed(lambda: None)}


def _elementwise_kernels(xp, parallel):
    def rsqrt(x):
        return xp.reciprocal(xp.sqrt(x))

    def sigmoid(x):
        # NOTE: tanh form: never overflows, unlike 1 / (1 + exp(-x)).
        return (xp.tanh(x * 0.5) + 1) * 0.5

    def squared_difference(x, y):
        return xp.square(x - y)

    fns = {
        "Neg": xp.negative, "Abs": xp.abs, "Square": xp.square, "Sqrt": xp.sqrt,
        "Rsqrt": rsqrt, "Exp": xp.exp, "Log": xp.log, "Log1p": xp.log1p, "Sign": xp.sign,
        "Reciprocal": xp.reciprocal, "Floor": xp.floor, "Ceil": xp.ceil, "Round": xp.round,
        "Sin": xp.sin, "Cos": xp.cos, "Tanh": xp.tanh, "Sigmoid": sigmoid,
        "Add": xp.add, "Sub": xp.subtract, "Mul": xp.multiply, "RealDiv": xp.true_divide,
        "FloorMod": xp.mod, "Pow": xp.power,
        "Maximum": xp.maximum, "Minimum": xp.minimum,
        "SquaredDifference": squared_difference,
        "Equal": xp.equal, "NotEqual": xp.not_equal, "Less": xp.less,
        "LessEqual": xp.less_equal, "Greater": xp.greater, "GreaterEqual": xp.greater_equal,
        "LogicalAnd": xp.logical_and, "LogicalOr": xp.logical_or,
        "LogicalNot": xp.logical_not,
        "IsFinite": xp.isfinite, "IsNan": xp.isnan, "IsInf": xp.isinf,
        "Select": xp.where,
    }
    table = {name: _fixed(fn) for name, fn in fns.items()}
    table["MatMul"] = lambda ctx: _matmul_kernel(xp, ctx.attrs, parallel)
    table["Cast"] = lambda ctx: functools.partial(_cast, dtype=ctx.output_dtypes[0])
    table["AddN"] = _fixed(_add_n)
    table["FloorDiv"] = lambda ctx: _floor_div_kernel(xp, ctx.output_dtypes[0])
    for name, fn in (("FloorMod", xp.mod), ("Reciprocal", xp.reciprocal)):
        table[name] = _integer_division(xp, fn)
    return table


def _floor_div_kernel(xp, dtype):
    if dtype.kind != "f":
        return _checked_divisor(xp, xp.floor_divide)
    # NOTE: TensorFlow floors the rounded quotient: floordiv(1.0, 0.1) is 10.0,
    # where NumPy's floor_divide (like Python's //) gives 9.0.
    return lambda x, y: xp.floor(xp.true_divide(x, y))


def _integer_division(xp, fn):
    """A kernel maker: ``fn`` itself on floats, with the divisor checked on ints."""
    def make(ctx):
        return fn if ctx.output_dtypes[0].kind == "f" else _checked_divisor(xp, fn)
    return make


def _checked_divisor(xp, fn):
    """``fn`` refusing an integer division by zero, as TensorFlow's CPU kernels do
    (tensorflow/core/kernels/cwise_ops_common.cc), where NumPy returns 0 and
    warns. GPUs skip the check (it would read the divisor back to the host), as
    TensorFlow's GPU kernels do."""
    if xp is not np:
        return fn

    def divide(*operands):
        with np.errstate(divide="ignore"):
            quotient = fn(*operands)
        # NOTE: a zero divisor that divides nothing (an empty result) is no error
        if quotient.size and not operands[-1].all():    # the divisor, or 1/x's x
            raise errors.InvalidArgumentError(None, None, "Integer division by zero")
        return quotient
    return divide


def _matmul_kernel(xp, attrs, parallel):
    return _of_matrices(_matmul_of(xp, attrs, parallel))


def _of_matrices(matmul):
    """``matmul`` refusing vectors, which NumPy would take (batch_matmul_op_impl.h's
    words), for ranks the graph left open."""
    def checked(a, b):
        for index, operand in enumerate((a, b)):
            if operand.ndim < 2:
                raise errors.InvalidArgumentError(
                    None, None, f"In[{index}] ndims must be >= 2: {operand.ndim}")
        return matmul(a, b)
    return checked


def _matmul_of(xp, attrs, parallel):
    transpose_a, transpose_b = attrs["transpose_a"], attrs["transpose_b"]
    if not parallel.host and not (transpose_a or transpose_b):
        return xp.matmul

    def matmul(a, b):
        if a.ndim == 2 and b.ndim == 2:
            out = parallel_gemm.compiled_matmul(parallel, a, b, transpose_a, transpose_b)
            if out is not None:
                return out
        if transpose_a:
            a = xp.swapaxes(a, -1, -2)
        if transpose_b:
            b = xp.swapaxes(b, -1, -2)
        if a.ndim == 2 and b.ndim == 2:
            return parallel_gemm.matmul(xp, parallel, a, b)
        return xp.matmul(a, b)
    return matmul


def _cast(x, dtype):
    return x.astype(dtype, copy=False)


def _add_n(*values):
    for index, value in enumerate(values[1:], 1):     # no broadcasting (aggregate_ops.cc)
        if value.shape != values[0].shape:
            raise errors.InvalidArgumentError(
                None, None, "Inputs to operation AddN of type AddN must have the same size "
                f"and shape.  Input 0: {_dims(values[0].shape)} != input {index}: "
                f"{_dims(value.shape)}")
    # NOTE: a fixed left-to-right order, so every run sums bit-identically.
    total = values[0]
    for value in values[1:]:
        total = total + value
    return total


def _dims(shape):
    return "[" + ",".join(str(dim) for dim in shape) + "]"


def _array_kernels(xp):
    def split(ctx):
        sizes, axis = ctx.attrs["sizes"], ctx.attrs["axis"]
        if None in sizes:   # equal parts of a dimension known only now
            return lambda x: tuple(xp.split(x, _equal_cuts(x.shape[axis], axis, len(sizes)),
                                            axis=axis))
        if ctx.op.inputs[0].shape[axis].value is not None:  # sizes checked when built
            cuts = _split_cuts(sizes)
            return lambda x: tuple(xp.split(x, cuts, axis=axis))
        return lambda x: tuple(xp.split(x, _split_cuts(_split_sizes(sizes, x.shape[axis])),
                                        axis=axis))

    def shape(ctx):
        dtype = ctx.output_dtypes[0]
        return lambda x: _filled_shape(xp, xp.shape(x), dtype)

    def method(name, key):
        """Call the array's own method (NumPy and CuPy arrays share these)."""
        return lambda ctx: _bound_method(name, ctx.attrs[key])

    return {
        "Reshape": method("reshape", "shape"),
        "DynamicReshape": lambda ctx: _reshape_to_read_shape,
        "Transpose": _transpose,
        "Squeeze": method("squeeze", "axes"),
        "ExpandDims": lambda ctx: functools.partial(xp.expand_dims, axis=ctx.attrs["axis"]),
        "ConcatV2": lambda ctx: lambda *xs: xp.concatenate(xs, axis=ctx.attrs["axis"]),
        "Pack": lambda ctx: lambda *xs: xp.stack(xs, axis=ctx.attrs["axis"]),
        "Split": split, "Shape": shape,
    }


def _transpose(ctx):
    """The array's own transpose; perm checked each run when the graph did not
    know the rank (NumPy would take a negative axis)."""
    perm = ctx.attrs["perm"]
    if perm is None or ctx.op.inputs[0].shape.ndims is not None:
        return _bound_method("transpose", perm)

    def transpose(x):
        if sorted(perm) != list(range(x.ndim)):     # kernel_errors words it as TF does
            raise ValueError(f"perm {list(perm)} is not a permutation of {x.ndim} axes")
        return x.transpose(perm)
    return transpose


def _split_cuts(sizes):
    return list(itertools.accumulate(sizes))[:-1]


def _equal_cuts(total, axis, num_split):
    """Where to cut ``total`` into ``num_split`` equal parts; TF's
    InvalidArgumentError when they do not divide it."""
    if total % num_split:
        raise errors.InvalidArgumentError(
            None, None, shapes.split_count_message(axis, total, num_split))
    return _split_cuts([total // num_split] * num_split)


def _split_sizes(sizes, total):
    """``sizes`` with a -1 inferred; InvalidArgumentError if they do not split ``total``."""
    known = sum(size for size in sizes if size != -1)
    if known > total or -1 not in sizes and known != total:
        raise errors.InvalidArgumentError(None, None, shapes.split_sizes_message(known))
    return [total - known if size == -1 else size for size in sizes]


def read_dims(dims):
    """The int tensor ``dims`` read on the host (a GPU's costs one small copy);
    InvalidArgumentError (TF's words) for a negative dimension."""
    if dims.ndim != 1:
        raise errors.InvalidArgumentError(
            None, None, f"dims must be a vector, got shape {_dims(dims.shape)}")
    values = [int(dim) for dim in dims.tolist()]
    for dim in values:
        if dim < 0:
            raise errors.InvalidArgumentError(None, None, f"Dimension {dim} must be >= 0")
    return values


def _reshape_to_read_shape(x, shape):
    """``x`` reshaped to the values of the int tensor ``shape``, read on the
    host (a GPU's shape tensor costs one small copy), with TF's errors."""
    dims = [int(dim) for dim in shape.tolist()]
    inferred = [axis for axis, dim in enumerate(dims) if dim == -1]
    if len(inferred) > 1:
        raise errors.InvalidArgumentError(
            None, None, f"Only one input size may be -1, not both {inferred[0]} and "
            f"{inferred[1]}")
    known = 1
    for dim in dims:
        known *= dim if dim != -1 else 1
    if inferred and (known == 0 or x.size % known) or not inferred and known != x.size:
        wanted = f"requires a multiple of {known}" if inferred else f"has {known}"
        raise errors.InvalidArgumentError(
            None, None, f"Input to reshape is a tensor with {x.size} values, but the "
            f"requested shape {wanted}")
    return x.reshape(dims)


def _filled_shape(xp, shape, dtype):
    """``shape`` as a 1-D array, each entry filled on the device. NOTE: not
    xp.asarray(shape): on a GPU that is a host-to-device copy, which CuPy 14
    refuses while a stream captures a CUDA graph. A fill is a kernel whose
    value the graph holds: a graph is captured per fed shape, so it is right."""
    out = xp.empty(len(shape), dtype=dtype)
    for axis, size in enumerate(shape):
        out[axis] = size
    return out


def _bound_method(name, argument):
    def call(x):
        return getattr(x, name)(argument)
    return call


class VariableCell:
    """A variable's storage in one Session: ``value`` is None until initialised."""

    __slots__ = ("value",)

    def __init__(self):
        self.value = None


def _state_kernels(xp):
    def cell_of(ctx, variable_op):
        return ctx.resource(("variable", variable_op), VariableCell)

    def variable(ctx):
        cell, op = cell_of(ctx, ctx.op), ctx.op

        def read():
            if cell.value is None:
                raise errors.FailedPreconditionError(
                    None, op, f"Attempting to use uninitialized value {op.name}: run its "
                    "initializer first (sess.run(tf.global_variables_initializer()))")
            return cell.value
        return read

    def assign(ctx):
        variable_op = ctx.attrs["variable"]
        cell, dtype = cell_of(ctx, variable_op), ctx.output_dtypes[0]

        def assign_value(value):
            current = cell.value
            if current is None or current.shape != xp.shape(value):
                _check_assign_shape(ctx, variable_op, value)
                cell.value = xp.array(value, dtype=dtype, copy=True)
            else:
                current[...] = value  # in place: the buffer stays where it is
            return cell.value
        return assign_value

    def update(ufunc):
        def make(ctx):
            variable_op = ctx.attrs["variable"]
            read = variable(_VariableReadContext(ctx, variable_op))

            def update_in_place(delta):
                return ufunc(read(), delta, out=cell_of(ctx, variable_op).value)
            return update_in_place
        return make

    def read_variable(ctx):
        return variable(_VariableReadContext(ctx, ctx.attrs["variable"]))

    def count_up_to(ctx):
        variable_op, limit, dtype = ctx.attrs["variable"], ctx.attrs["limit"], ctx.output_dtypes[0]
        read = variable(_VariableReadContext(ctx, variable_op))
        # NOTE: queue runner threads run it concurrently: read and add as one.
        lock = ctx.resource(("count_up_to", variable_op), threading.Lock)

        def count():
            with lock:
                value = read()
                before = int(value)
                if before >= limit:
                    raise errors.OutOfRangeError(None, ctx.op, f"Reached limit of {limit}")
                value += 1      # in place: the variable's own buffer
            return xp.asarray(before, dtype=dtype)
        return count

    return {"VariableV2": variable, "ReadVariable": read_variable, "Assign": assign,
            "AssignAdd": update(xp.add), "AssignSub": update(xp.subtract),
            "CountUpTo": count_up_to}


def _check_assign_shape(ctx, variable_op, value):
    static = variable_op.outputs[0].shape
    if ctx.attrs["validate_shape"] and not static.is_compatible_with(value.shape):
        raise errors.InvalidArgumentError(
            None, ctx.op, f"Cannot assign a value of shape {tuple(value.shape)} to "
            f"variable '{variable_op.name}' of shape {static}")


class _VariableReadContext:
    """A view of ``ctx`` as if the op were the variable itself (for its read)."""

    def __init__(self, ctx, variable_op):
        self.op = variable_op
        self.resource = ctx.resource
