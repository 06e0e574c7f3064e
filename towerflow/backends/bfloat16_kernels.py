"""bfloat16 for every kernel table: ops that compute run in float32 on their
bfloat16 inputs (exact, as bfloat16 values are float32 values) and round
each bfloat16 output once; ops that only move, select or compare values,
and the stateful ones, run on the bfloat16 arrays themselves.

Matmuls, convolutions, reductions, softmax cross-entropy and batch-norm
statistics thus accumulate in float32, and the kernels need no bfloat16
code of their own. Slow but exact; and NumPy on ml_dtypes' bfloat16 (0.6,
NumPy 2.4) is not: its elementwise ufuncs work (each computes in float32
and rounds), but ``sum``, ``mean`` and ``cumsum`` accumulate in bfloat16
(``np.ones(1000, bfloat16).sum()`` is 256), ``np.matmul`` of two bfloat16
arrays returns float32, ``bfloat16_array * 0.5`` is float32 (an output
would leak out as float32), ``einsum``, ``np.finfo`` and random draws
refuse it, and its kind is 'V' (the kernels' float checks would send it
down integer paths). The compiled kernels (native.py) and Winograd take
float32 and float64 only, so they only ever see the widened arrays::

    table = with_bfloat16(build_kernels(np))     # every kernel, bfloat16-ready
    table["MatMul"](ctx)(a, b)                   # a, b bfloat16 -> float32 GEMM -> bfloat16

Outside a graph that holds bfloat16 tensors the table's kernels are the
original ones: an op without a bfloat16 input or output pays nothing.
"""

import dataclasses

import numpy as np

from .. import errors
from ..dtypes import is_bfloat16

FLOAT32 = np.dtype(np.float32)

# Kernels that run on bfloat16 arrays as they are: they move, select or
# compare values (no rounding can happen), or read and update stored state in
# place (the state's own buffer must be the one written).
NATIVE_BFLOAT16_KERNELS = frozenset({
    "Const", "Placeholder", "PlaceholderWithDefault", "Identity", "StopGradient", "NoOp",
    "Fill", "DynamicFill", "ZerosLike", "OnesLike", "Cast", "Reshape", "DynamicReshape", "Transpose",
    "Squeeze",
    "ExpandDims", "ConcatV2", "Pack", "Split", "Unpack", "Shape", "ConcatGrad",
    "ReshapeLike", "ShardBatch", "PackBucket", "UnpackBucket", "Select",
    "Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual",
    "IsFinite", "IsNan", "IsInf",
    "VariableV2", "ReadVariable", "Assign", "AssignAdd", "AssignSub",
    "ApplyGradientDescent", "ApplyMomentum", "ApplyAdam", "LearningRateSchedule",
    "ApplyRMSProp", "ApplyCenteredRMSProp", "ApplyAdagrad", "ApplyAdadelta", "ApplyFtrl",
    "SparseApplyMomentum", "SparseApplyAdagrad", "SparseApplyRMSProp",
    "SparseApplyCenteredRMSProp", "SparseApplyAdadelta", "SparseApplyFtrl", "SparseApplyAdam",
    "ScatterUpdate", "ScatterAdd", "ScatterSub", "ScatterMul", "ScatterDiv", "ScatterMax",
    "ScatterMin", "ScatterNdUpdate", "ScatterNdAdd", "ScatterNdSub",
    # control flow: the body plans' own kernels handle bfloat16
    "BodyArg", "While", "WhileGrad", "If",
})


def with_bfloat16(table, native=NATIVE_BFLOAT16_KERNELS, unsupported=None):
    """``table`` ({kernel name: maker}) with every kernel not in ``native``
    computing bfloat16 in float32 (see the module docstring).
    ``unsupported``: None, or why this backend cannot hold bfloat16 arrays
    at all; a kernel of an op with a bfloat16 input or output then raises
    UnimplementedError saying so when its plan is compiled.

    Example: ``with_bfloat16({"MatMul": make_matmul})["MatMul"](ctx)``.
    """
    return {name: _guarded(make, name in native, unsupported)
            for name, make in table.items()}


def _guarded(make, native, unsupported):
    def make_kernel(ctx):
        if not _touches_bfloat16(ctx):
            return make(ctx)
        if unsupported is not None:
            raise errors.UnimplementedError(
                None, ctx.op, f"op '{ctx.op.name}' ({ctx.op.type}) has bfloat16 tensors, "
                f"which {ctx.device.name} cannot hold: {unsupported}")
        return make(ctx) if native else _in_float32(make, ctx)
    return make_kernel


def _touches_bfloat16(ctx):
    return any(is_bfloat16(dtype) for dtype in ctx.output_dtypes) or any(
        tensor.dtype.name == "bfloat16" for tensor in getattr(ctx.op, "inputs", ()))


def _in_float32(make, ctx):
    """The kernel of ``make`` for the op, made for float32 where the op has
    bfloat16; its bfloat16 inputs widened, its bfloat16 outputs rounded."""
    float_ctx = dataclasses.replace(ctx, output_dtypes=[
        FLOAT32 if is_bfloat16(dtype) else dtype for dtype in ctx.output_dtypes])
    kernel = make(float_ctx)
    shape_only = set(getattr(ctx.op.op_def, "shape_only_inputs", ()))
    widen = [index for index, tensor in enumerate(ctx.op.inputs)
             if tensor.dtype.name == "bfloat16" and index not in shape_only]
    narrow = {index: dtype for index, dtype in enumerate(ctx.output_dtypes)
              if is_bfloat16(dtype)}

    def run(*inputs):
        if widen:
            inputs = list(inputs)
            for index in widen:
                inputs[index] = inputs[index].astype(FLOAT32)
        return _rounded(kernel(*inputs), narrow)
    return run


def _rounded(result, narrow):
    """The kernel's ``result`` (an array, a sequence, or None) with the
    outputs at the positions of ``narrow`` rounded to their dtype."""
    if isinstance(result, (tuple, list)):
        return type(result)(_round(value, narrow.get(index))
                            for index, value in enumerate(result))
    return _round(result, narrow.get(0))


def _round(value, dtype):
    if dtype is None or value is None or value.dtype == dtype:
        return value
    return value.astype(dtype)
