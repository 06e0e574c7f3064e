"""Every op's forward pass against a NumPy reference, on every logical CPU.

Each case builds its op inside ``with tf.device('/cpu:i')`` from placeholders
fed with random inputs (constants are folded when a plan compiles, so only fed
inputs make the kernel run), then checks the value, the dtype, the static shape
against the run-time shape, and the placement log.
"""

import re
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest
from conftest import placed_name

import towerflow as tf
from towerflow.backends.numpy_backend import KERNELS
from towerflow.graph import registry

PLACEMENT_LINE = re.compile(r"^(\S+): (/job:localhost/replica:0/task:0/device:\S+)$", re.MULTILINE)

# -- input makers: each returns ``rng -> array`` ----------------------------------


def floats(*shape, dtype=np.float32):
    return lambda rng: rng.standard_normal(shape).astype(dtype)


def positive(*shape, dtype=np.float32):
    return lambda rng: rng.uniform(0.5, 3.0, shape).astype(dtype)


def nonzero(*shape, dtype=np.float32):
    """Divisors of both signs, never zero (ints: magnitudes 1..5)."""
    def make(rng):
        floating = np.dtype(dtype).kind == "f"
        size = rng.uniform(0.5, 3.0, shape) if floating else rng.integers(1, 6, shape)
        return (rng.choice([-1, 1], shape) * size).astype(dtype)
    return make


def ints(*shape, low=-9, high=10, dtype=np.int32):
    return lambda rng: rng.integers(low, high, shape).astype(dtype)


def bools(*shape):
    return lambda rng: rng.random(shape) < 0.5


def halves(*shape, dtype=np.float32):
    """Multiples of 0.5, so rounding meets its ties (TensorFlow: half to even)."""
    return lambda rng: (rng.integers(-8, 9, shape) / 2).astype(dtype)


def fixed(*values, dtype=np.float32):
    return lambda rng: np.array(values, dtype=dtype)


# -- the cases --------------------------------------------------------------------


class Case(NamedTuple):
    name: str
    build: Callable       # placeholders -> tensor, or list of tensors
    reference: Callable   # arrays -> array, or list; its dtype is the expected dtype
    inputs: tuple         # one maker per placeholder
    needs_known_shape: bool = False  # the builder reads static dims (skip unknown-dims test)


def case(name, build, reference, *inputs, needs_known_shape=False):
    return Case(name, build, reference, inputs, needs_known_shape)


def int_mean(x, axis):
    """TensorFlow's mean of integers: an integer sum divided with truncation."""
    total, count = x.sum(axis=axis, dtype=np.int64), x.size // x.sum(axis=axis).size
    return (np.sign(total) * (np.abs(total) // count)).astype(x.dtype)


LEFT = np.array([1.5, -2.0, 4.0], dtype=np.float32)   # a NumPy operand on the left
LEFT_MATRIX = np.arange(6, dtype=np.float32).reshape(2, 3)
LEFT_BOOLS = np.array([True, False, True])

UNARY = [
    case("negative", tf.negative, np.negative, floats(2, 3)),
    case("negative_i32", tf.negative, np.negative, ints(2, 3)),
    case("abs", tf.abs, np.abs, floats(2, 3)),
    case("abs_i32", tf.abs, np.abs, ints(2, 3)),
    case("square", tf.square, np.square, floats(2, 3)),
    case("square_i32", tf.square, np.square, ints(2, 3)),
    case("sqrt", tf.sqrt, np.sqrt, positive(2, 3)),
    case("sqrt_f64", tf.sqrt, np.sqrt, positive(2, 3, dtype=np.float64)),
    case("rsqrt", tf.rsqrt, lambda x: 1 / np.sqrt(x), positive(2, 3)),
    case("exp", tf.exp, np.exp, floats(2, 3)),
    case("exp_f64", tf.exp, np.exp, floats(2, 3, dtype=np.float64)),
    case("log", tf.log, np.log, positive(2, 3)),
    case("log1p", tf.log1p, np.log1p, positive(2, 3)),
    case("sign", tf.sign, np.sign, floats(2, 3)),
    case("sign_i32", tf.sign, np.sign, ints(2, 3)),
    case("reciprocal", tf.reciprocal, lambda x: 1 / x, nonzero(2, 3)),
    case("floor", tf.floor, np.floor, floats(2, 3)),
    case("floor_f64", tf.floor, np.floor, halves(2, 3, dtype=np.float64)),
    case("ceil", tf.ceil, np.ceil, floats(2, 3)),
    case("ceil_f64", tf.ceil, np.ceil, halves(2, 3, dtype=np.float64)),
    case("round_half_to_even", tf.round, np.round, halves(3, 4)),
    case("round_f64", tf.round, np.round, halves(3, 4, dtype=np.float64)),
    case("sin", tf.sin, np.sin, floats(2, 3)),
    case("cos", tf.cos, np.cos, floats(2, 3)),
    case("tanh", tf.tanh, np.tanh, floats(2, 3)),
    case("sigmoid", tf.sigmoid, lambda x: 1 / (1 + np.exp(-x)), floats(2, 3)),
    case("sigmoid_f64", tf.sigmoid, lambda x: 1 / (1 + np.exp(-x)),
         floats(2, 3, dtype=np.float64)),
    case("logical_not", tf.logical_not, np.logical_not, bools(2, 3)),
    case("is_finite", tf.is_finite, np.isfinite, fixed(1.0, np.inf, -np.inf, np.nan)),
    case("is_nan", tf.is_nan, np.isnan, fixed(1.0, np.inf, -np.inf, np.nan, dtype=np.float64)),
    case("is_inf", tf.is_inf, np.isinf, fixed(1.0, np.inf, -np.inf, np.nan)),
]

BINARY = [  # shapes broadcast: [2, 3] with [3], [2, 1] with [1, 3], [] with [2, 3]
    case("add", tf.add, np.add, floats(2, 3), floats(3)),
    case("add_i32", tf.add, np.add, ints(2, 1), ints(1, 3)),
    case("subtract", tf.subtract, np.subtract, floats(2, 1), floats(1, 3)),
    case("subtract_i32", tf.subtract, np.subtract, ints(), ints(2, 3)),
    case("multiply", tf.multiply, np.multiply, floats(), floats(2, 3)),
    case("multiply_f64", tf.multiply, np.multiply, floats(2, 3, dtype=np.float64),
         floats(3, dtype=np.float64)),
    case("divide", tf.divide, np.divide, floats(2, 3), nonzero(3)),
    case("truediv_f64", tf.truediv, np.divide, floats(2, 3, dtype=np.float64),
         nonzero(2, 1, dtype=np.float64)),
    case("divide_i32_is_f64", tf.divide, lambda x, y: x / y.astype(np.float64),
         ints(2, 3), nonzero(3, dtype=np.int32)),
    case("truediv_i16_is_f32", tf.truediv,
         lambda x, y: x.astype(np.float32) / y.astype(np.float32),
         ints(2, 3, dtype=np.int16), nonzero(3, dtype=np.int16)),
    case("floordiv", tf.floordiv, lambda x, y: np.floor(x / y), floats(2, 3), nonzero(3)),
    case("floordiv_is_floor_of_quotient", tf.floordiv, lambda x, y: np.floor(x / y),
         fixed(1.0, -1.0, 0.7), fixed(0.1, 0.1, 0.1)),
    case("floordiv_i32", tf.floordiv, np.floor_divide, ints(2, 3), nonzero(3, dtype=np.int32)),
    case("floormod", tf.floormod, np.mod, floats(2, 3), nonzero(3)),
    case("floormod_f64", tf.floormod, np.mod, floats(2, 3, dtype=np.float64),
         nonzero(2, 3, dtype=np.float64)),
    case("floormod_i32_signs", tf.floormod, np.mod, ints(2, 3), nonzero(2, 3, dtype=np.int32)),
    case("mod_alias", tf.mod, np.mod, ints(2, 3), nonzero(3, dtype=np.int32)),
    case("pow", tf.pow, np.power, positive(2, 3), floats(3)),
    case("pow_i32", tf.pow, np.power, ints(2, 3, low=-4, high=5), ints(3, low=0, high=4)),
    case("maximum", tf.maximum, np.maximum, floats(2, 3), floats(3)),
    case("maximum_i32", tf.maximum, np.maximum, ints(2, 1), ints(1, 3)),
    case("minimum", tf.minimum, np.minimum, floats(2, 1), floats(1, 3)),
    case("squared_difference", tf.squared_difference, lambda x, y: (x - y) ** 2,
         floats(2, 3), floats(3)),
    case("squared_difference_i32", tf.squared_difference, lambda x, y: (x - y) ** 2,
         ints(2, 3), ints()),
    case("logical_and", tf.logical_and, np.logical_and, bools(2, 3), bools(3)),
    case("logical_or", tf.logical_or, np.logical_or, bools(2, 1), bools(1, 3)),
    case("where", tf.where, np.where, bools(2, 3), floats(2, 3), floats(3)),
    case("where_i32", tf.where, np.where, bools(3), ints(2, 3), ints(2, 3)),
]

COMPARISONS = [  # few distinct values, so equal ones are common
    case(f"{builder.__name__}_{dtype.__name__}", builder, reference,
         ints(2, 3, low=0, high=3, dtype=dtype), ints(3, low=0, high=3, dtype=dtype))
    for builder, reference in [(tf.equal, np.equal), (tf.not_equal, np.not_equal),
                               (tf.less, np.less), (tf.less_equal, np.less_equal),
                               (tf.greater, np.greater), (tf.greater_equal, np.greater_equal)]
    for dtype in (np.int32, np.float32)
]

MATMUL = [
    case("matmul", tf.matmul, np.matmul, floats(2, 3), floats(3, 4)),
    case("matmul_f64", tf.matmul, np.matmul, floats(2, 3, dtype=np.float64),
         floats(3, 4, dtype=np.float64)),
    case("matmul_i32", tf.matmul, np.matmul, ints(2, 3), ints(3, 4)),
    case("matmul_transpose_a", lambda a, b: tf.matmul(a, b, transpose_a=True),
         lambda a, b: a.T @ b, floats(3, 2), floats(3, 4)),
    case("matmul_transpose_b", lambda a, b: tf.matmul(a, b, transpose_b=True),
         lambda a, b: a @ b.T, floats(2, 3), floats(4, 3)),
    case("matmul_transpose_both", lambda a, b: tf.matmul(a, b, transpose_a=True, transpose_b=True),
         lambda a, b: a.T @ b.T, floats(3, 2), floats(4, 3)),
    case("matmul_batched", tf.matmul, np.matmul, floats(5, 2, 3), floats(5, 3, 4)),
    case("matmul_batched_transpose_b", lambda a, b: tf.matmul(a, b, transpose_b=True),
         lambda a, b: a @ b.transpose(0, 2, 1), floats(5, 2, 3), floats(5, 4, 3)),
    case("matmul_batch_broadcast", tf.matmul, np.matmul, floats(5, 2, 3), floats(3, 4)),
]

REDUCTIONS = [
    case("reduce_sum_all", tf.reduce_sum, np.sum, floats(2, 3, 4)),
    case("reduce_sum_axis", lambda x: tf.reduce_sum(x, 1), lambda x: x.sum(1), floats(2, 3, 4)),
    case("reduce_sum_negative_axis", lambda x: tf.reduce_sum(x, axis=-1),
         lambda x: x.sum(-1), floats(2, 3, 4)),
    case("reduce_sum_axis_list", lambda x: tf.reduce_sum(x, [0, 2]),
         lambda x: x.sum((0, 2)), floats(2, 3, 4)),
    case("reduce_sum_empty_axis_list", lambda x: tf.reduce_sum(x, []), lambda x: x, floats(2, 3)),
    case("reduce_sum_keepdims", lambda x: tf.reduce_sum(x, 1, keepdims=True),
         lambda x: x.sum(1, keepdims=True), floats(2, 3, 4)),
    case("reduce_sum_keepdims_all", lambda x: tf.reduce_sum(x, keepdims=True),
         lambda x: x.sum(keepdims=True), floats(2, 3)),
    case("reduce_sum_aliases", lambda x: tf.reduce_sum(x, reduction_indices=[1], keep_dims=True),
         lambda x: x.sum(1, keepdims=True), floats(2, 3, 4)),
    case("reduce_sum_i32_stays_i32", tf.reduce_sum, lambda x: x.sum(dtype=np.int32), ints(3, 4)),
    case("reduce_sum_i32_axis", lambda x: tf.reduce_sum(x, 0),
         lambda x: x.sum(0, dtype=np.int32), ints(3, 4)),
    case("reduce_mean", lambda x: tf.reduce_mean(x, 0), lambda x: x.mean(0), floats(2, 3, 4)),
    case("reduce_mean_f64", tf.reduce_mean, np.mean, floats(2, 3, dtype=np.float64)),
    case("reduce_mean_i32_truncates", lambda x: tf.reduce_mean(x, 1),
         lambda x: int_mean(x, 1), ints(4, 3)),
    case("reduce_mean_i32_all", tf.reduce_mean, lambda x: int_mean(x, None), ints(4, 3)),
    case("reduce_max", lambda x: tf.reduce_max(x, -1), lambda x: x.max(-1), floats(2, 3, 4)),
    case("reduce_max_i32", tf.reduce_max, np.max, ints(2, 3)),
    case("reduce_min", lambda x: tf.reduce_min(x, [0, 1]), lambda x: x.min((0, 1)),
         floats(2, 3, 4)),
    case("reduce_prod", lambda x: tf.reduce_prod(x, 1), lambda x: x.prod(1), positive(2, 3)),
    case("reduce_prod_i32", tf.reduce_prod, lambda x: x.prod(dtype=np.int32),
         ints(2, 3, low=-3, high=4)),
    case("reduce_any", lambda x: tf.reduce_any(x, 1), lambda x: x.any(1), bools(4, 2)),
    case("reduce_any_all_axes", tf.reduce_any, np.any, bools(2, 3)),
    case("reduce_all", lambda x: tf.reduce_all(x, 0, keepdims=True),
         lambda x: x.all(0, keepdims=True), bools(2, 4)),
    case("reduce_all_all_axes", tf.reduce_all, np.all, bools(2, 3)),
]

CASTS = [
    case("cast_float_to_int_truncates", lambda x: tf.cast(x, tf.int32),
         lambda x: np.trunc(x).astype(np.int32), lambda rng: floats(3, 4)(rng) * 5),
    case("cast_float_to_bool", lambda x: tf.cast(x, tf.bool), lambda x: x != 0,
         ints(3, 4, low=-2, high=3, dtype=np.float32)),
    case("cast_int_to_float", lambda x: tf.cast(x, tf.float32),
         lambda x: x.astype(np.float32), ints(2, 3)),
    case("cast_bool_to_float", lambda x: tf.cast(x, tf.float32),
         lambda x: x.astype(np.float32), bools(2, 3)),
    case("cast_float32_to_float64", lambda x: tf.cast(x, tf.float64),
         lambda x: x.astype(np.float64), floats(2, 3)),
    case("cast_to_same_dtype", lambda x: tf.cast(x, tf.float32), lambda x: x, floats(2, 3)),
    # TF1's deprecated casts
    case("to_float", tf.to_float, lambda x: x.astype(np.float32), ints(2, 3)),
    case("to_double", tf.to_double, lambda x: x.astype(np.float64), floats(2, 3)),
    case("to_int32", tf.to_int32, lambda x: np.trunc(x).astype(np.int32),
         lambda rng: floats(3, 4)(rng) * 5),
    case("to_int64", tf.to_int64, lambda x: x.astype(np.int64), ints(2, 3)),
    # clip_by_norm: rows over and under the norm, and an all-zero row
    case("clip_by_norm_rows", lambda x: tf.clip_by_norm(x, 1.0, axes=[1]),
         lambda x: x / np.maximum(np.sqrt((x * x).sum(1, keepdims=True)), 1.0),
         lambda rng: np.array([[3, 4, 0], [0.1, 0.2, 0.2], [0, 0, 0]], np.float32)),
    case("clip_by_norm_whole", lambda x: tf.clip_by_norm(x, 2.0),
         lambda x: x * 2 / np.maximum(np.sqrt((x * x).sum()), 2.0),
         lambda rng: floats(3, 4)(rng) * 3),
]

ARRAY = [
    case("identity", tf.identity, lambda x: x, floats(2, 3)),
    case("reshape_inferred", lambda x: tf.reshape(x, [-1, 4]), lambda x: x.reshape(-1, 4),
         floats(2, 3, 4)),
    case("reshape_inferred_last", lambda x: tf.reshape(x, [6, -1]),
         lambda x: x.reshape(6, -1), ints(2, 3, 4)),
    case("reshape_flat", lambda x: tf.reshape(x, [24]), lambda x: x.reshape(24), floats(2, 3, 4)),
    # shapes known only when the graph runs: TF1's reshape(x, [tf.shape(x)[0], -1])
    case("reshape_to_a_run_time_shape", lambda x: tf.reshape(x, [tf.shape(x)[0], -1]),
         lambda x: x.reshape(x.shape[0], -1), floats(2, 3, 4)),
    case("reshape_like_another_tensor", lambda x, y: tf.reshape(x, tf.shape(y)),
         lambda x, y: x.reshape(y.shape), floats(2, 12), floats(2, 3, 4)),
    case("transpose_default", tf.transpose, np.transpose, floats(2, 3, 4)),
    case("transpose_perm", lambda x: tf.transpose(x, [1, 0, 2]),
         lambda x: x.transpose(1, 0, 2), floats(2, 3, 4)),
    case("concat_axis1", lambda a, b: tf.concat([a, b], 1),
         lambda a, b: np.concatenate([a, b], 1), floats(2, 3), floats(2, 2)),
    case("concat_axis0_three", lambda *xs: tf.concat(list(xs), 0),
         lambda *xs: np.concatenate(xs, 0), ints(2, 3), ints(1, 3), ints(3, 3)),
    case("concat_negative_axis", lambda a, b: tf.concat([a, b], -1),
         lambda a, b: np.concatenate([a, b], -1), floats(2, 2, 1), floats(2, 2, 3)),
    case("split_equal", lambda x: tf.split(x, 3, axis=1), lambda x: np.split(x, 3, 1),
         floats(4, 6), needs_known_shape=True),
    case("split_sizes", lambda x: tf.split(x, [1, 3], axis=0),
         lambda x: np.split(x, [1], 0), floats(4, 6)),
    case("split_sizes_inferred", lambda x: tf.split(x, [2, -1, 1], axis=-1),
         lambda x: np.split(x, [2, 5], -1), ints(4, 6)),
    case("stack", lambda *xs: tf.stack(list(xs)), lambda *xs: np.stack(xs),
         floats(2, 3), floats(2, 3), floats(2, 3)),
    case("stack_axis1", lambda a, b: tf.stack([a, b], axis=1),
         lambda a, b: np.stack([a, b], 1), ints(2, 3), ints(2, 3)),
    case("stack_negative_axis", lambda a, b: tf.stack([a, b], axis=-1),
         lambda a, b: np.stack([a, b], -1), floats(2, 3), floats(2, 3)),
    case("unstack_axis1", lambda x: tf.unstack(x, axis=1), lambda x: list(np.moveaxis(x, 1, 0)),
         floats(2, 3, 4), needs_known_shape=True),
    case("expand_dims_0", lambda x: tf.expand_dims(x, 0), lambda x: x[None], floats(2, 3)),
    case("expand_dims_negative", lambda x: tf.expand_dims(x, -1), lambda x: x[..., None],
         floats(2, 3)),
    case("squeeze_all", tf.squeeze, np.squeeze, floats(1, 3, 1, 2), needs_known_shape=True),
    case("squeeze_axis", lambda x: tf.squeeze(x, [2]), lambda x: x.squeeze(2), floats(1, 3, 1, 2)),
    case("squeeze_negative_axis", lambda x: tf.squeeze(x, -1), lambda x: x[:, 0], ints(2, 1)),
    case("shape", tf.shape, lambda x: np.array(x.shape, np.int32), floats(2, 3, 4)),
    case("shape_int64", lambda x: tf.shape(x, out_type=tf.int64),
         lambda x: np.array(x.shape, np.int64), floats(5)),
    case("add_n", lambda *xs: tf.add_n(list(xs)), lambda a, b, c: (a + b) + c,
         floats(2, 3), floats(2, 3), floats(2, 3)),
    case("add_n_i32", lambda *xs: tf.add_n(list(xs)), lambda a, b: a + b, ints(3), ints(3)),
    case("add_n_single", lambda x: tf.add_n([x]), lambda x: x, floats(2, 3)),
    case("argmax", lambda x: tf.argmax(x, 1), lambda x: x.argmax(1).astype(np.int64),
         floats(3, 4, 5)),
    case("argmax_int32_output", lambda x: tf.argmax(x, -1, output_type=tf.int32),
         lambda x: x.argmax(-1).astype(np.int32), floats(3, 4)),
    case("argmax_dimension_alias", lambda x: tf.argmax(x, dimension=0),
         lambda x: x.argmax(0).astype(np.int64), ints(7, 2, low=-1000, high=1000)),
    case("argmin", lambda x: tf.argmin(x, 0), lambda x: x.argmin(0).astype(np.int64),
         floats(3, 4)),
    case("argmin_int32_output", lambda x: tf.argmin(x, 2, output_type=tf.int32),
         lambda x: x.argmin(2).astype(np.int32), floats(3, 4, 5)),
    case("fill", lambda v: tf.fill([2, 3], v), lambda v: np.full((2, 3), v), floats()),
    case("fill_i32", lambda v: tf.fill([4], v), lambda v: np.full(4, v), ints()),
    case("zeros", lambda: tf.zeros([2, 3]), lambda: np.zeros((2, 3), np.float32)),
    case("zeros_i32", lambda: tf.zeros([4], tf.int32), lambda: np.zeros(4, np.int32)),
    case("ones", lambda: tf.ones([3, 2]), lambda: np.ones((3, 2), np.float32)),
    case("ones_f64", lambda: tf.ones([2], tf.float64), lambda: np.ones(2, np.float64)),
    case("zeros_like", tf.zeros_like, np.zeros_like, floats(2, 3)),
    case("zeros_like_dtype", lambda x: tf.zeros_like(x, dtype=tf.int32),
         lambda x: np.zeros(x.shape, np.int32), floats(2, 3)),
    case("ones_like", tf.ones_like, np.ones_like, ints(2, 3)),
    case("ones_like_dtype", lambda x: tf.ones_like(x, dtype=tf.float64),
         lambda x: np.ones(x.shape), floats(4)),
    case("placeholder_with_default", lambda x: tf.placeholder_with_default(x, [2, 3]),
         lambda x: x, floats(2, 3)),
]

OPERATORS = [  # Python operators; reversed forms take a Python scalar or NumPy array
    case("op_add", lambda x, y: x + y, np.add, floats(2, 3), floats(3)),
    case("op_radd_scalar", lambda x: 2 + x, lambda x: 2 + x, floats(2, 3)),
    case("op_sub", lambda x, y: x - y, np.subtract, floats(2, 3), floats(3)),
    case("op_rsub_numpy", lambda x: LEFT - x, lambda x: LEFT - x, floats(2, 3)),
    case("op_mul", lambda x, y: x * y, np.multiply, ints(2, 3), ints(3)),
    case("op_rmul_scalar", lambda x: 3.0 * x, lambda x: 3.0 * x, floats(2, 3)),
    case("op_truediv", lambda x, y: x / y, np.divide, floats(2, 3), nonzero(3)),
    case("op_truediv_i32", lambda x, y: x / y, lambda x, y: x / y, ints(2, 3),
         nonzero(3, dtype=np.int32)),
    case("op_rtruediv_scalar", lambda x: 1 / x, lambda x: 1 / x, nonzero(2, 3)),
    case("op_rtruediv_scalar_i32", lambda x: 7 / x, lambda x: 7 / x,
         nonzero(2, 3, dtype=np.int32)),
    case("op_floordiv", lambda x, y: x // y, np.floor_divide, ints(2, 3),
         nonzero(3, dtype=np.int32)),
    case("op_rfloordiv_scalar", lambda x: 7 // x, lambda x: 7 // x, nonzero(2, 3, dtype=np.int32)),
    case("op_mod", lambda x, y: x % y, np.mod, ints(2, 3), nonzero(3, dtype=np.int32)),
    case("op_rmod_scalar", lambda x: -7 % x, lambda x: -7 % x, nonzero(2, 3, dtype=np.int32)),
    case("op_pow", lambda x: x ** 2, lambda x: x ** 2, floats(2, 3)),
    case("op_rpow_scalar", lambda x: 2.0 ** x, lambda x: 2.0 ** x, floats(2, 3)),
    case("op_matmul", lambda a, b: a @ b, np.matmul, floats(2, 3), floats(3, 4)),
    case("op_rmatmul_numpy", lambda b: LEFT_MATRIX @ b, lambda b: LEFT_MATRIX @ b, floats(3, 4)),
    case("op_neg", lambda x: -x, np.negative, floats(2, 3)),
    case("op_abs", lambda x: abs(x), np.abs, ints(2, 3)),
    case("op_lt", lambda x, y: x < y, np.less, floats(2, 3), floats(3)),
    case("op_le", lambda x, y: x <= y, np.less_equal, ints(2, 3, low=0, high=3),
         ints(3, low=0, high=3)),
    case("op_gt", lambda x, y: x > y, np.greater, floats(2, 3), floats(3)),
    case("op_ge", lambda x, y: x >= y, np.greater_equal, ints(2, 3, low=0, high=3),
         ints(3, low=0, high=3)),
    case("op_scalar_lt_tensor", lambda x: 0.5 < x, lambda x: 0.5 < x, floats(2, 3)),
    case("op_and", lambda x, y: x & y, np.logical_and, bools(2, 3), bools(3)),
    case("op_rand_numpy", lambda x: LEFT_BOOLS & x, lambda x: LEFT_BOOLS & x, bools(2, 3)),
    case("op_or", lambda x, y: x | y, np.logical_or, bools(2, 3), bools(3)),
    case("op_ror_scalar", lambda x: False | x, lambda x: False | x, bools(2, 3)),
    case("op_invert", lambda x: ~x, np.logical_not, bools(2, 3)),
]

CASES = UNARY + BINARY + COMPARISONS + MATMUL + REDUCTIONS + CASTS + ARRAY + OPERATORS

# Op types no case builds, each tested elsewhere or implicitly.
NOT_COVERED_HERE = {
    "Const", "Placeholder",               # the inputs of every case
    "NoOp",                               # does nothing: no value to check
    "VariableV2", "Assign", "AssignAdd", "AssignSub",   # session state: variable tests
    "RandomStandardNormal", "TruncatedNormal",          # values are no NumPy function
    "RandomUniform", "RandomUniformInt",                # of the inputs: random tests
    "RandomStandardNormalDims", "TruncatedNormalDims",  # (and test_tf1_shapes.py)
    "RandomUniformDims", "RandomUniformIntDims",
    # gradient helper ops: test_gradients*.py (finite differences)
    "UnbroadcastGrad", "StopGradient", "ReductionGrad", "ReduceExtremumGrad", "ReshapeLike",
    "DynamicTileGrad",
    "ConcatGrad", "TanhGrad", "SigmoidGrad", "ReluGrad", "EluGrad", "GeluGrad",
    "BiasAddGrad", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MaxPoolGrad",
    "AvgPoolGrad", "FusedBatchNormGrad",
    "MaxPoolGradGrad",          # second order: test_second_order.py (finite differences)
    # NN ops: test_nn_ops.py (NumPy and torch) and test_layers.py (Dropout, Multinomial)
    "Relu", "Elu", "Gelu", "Softmax", "LogSoftmax", "SoftmaxCrossEntropyWithLogits",
    "SparseSoftmaxCrossEntropyWithLogits", "BiasAdd", "Conv2D", "MaxPool", "AvgPool",
    "FusedBatchNorm", "Dropout", "Multinomial",
    # in-place updates and schedules: test_train.py, test_optimizers_tf1.py
    "ApplyGradientDescent", "ApplyMomentum", "ApplyAdam", "LearningRateSchedule",
    "ApplyRMSProp", "ApplyCenteredRMSProp", "ApplyAdagrad", "ApplyAdadelta",
    "ReadVariable",                                       # variable tests
    # towers: sharding, weighting and gradient buckets: test_parallel.py
    "ShardBatch", "ShardFraction", "ScaleOrZero", "PackBucket", "UnpackBucket",
    "MpiAllReduce", "MpiBroadcast",                       # real MPI ranks: test_mpi.py
    "MpiAllGather",                                       # hvd.allgather: test_horovod.py
    "NcclAllReduce",                                      # GPU only: test_nccl.py
    # gradient helper ops of the slicing, indexing and image ops: finite
    # differences in test_index_ops.py and test_image_ops.py
    # issue 34's ops: NumPy float64 references and central differences in
    # test_nn_names.py
    "LeakyRelu", "LeakyReluGrad", "Relu6", "Relu6Grad", "Selu", "SeluGrad", "Softplus",
    "SoftplusGrad", "Softsign", "SoftsignGrad", "Einsum", "EinsumGrad", "ReverseSequence",
    "LinSpace", "MatrixInverse", "Cholesky", "CholeskyGrad", "MatrixDeterminant",
    "MatrixSolve", "MatrixBandPart", "MatrixDiag", "MatrixDiagPart", "MatrixDiagPartGrad",
    "StridedSliceGrad", "GatherGrad", "LRNGrad", "ResizeBilinearGrad",
    "ResizeNearestNeighborGrad",
    # ... and of the array ops of issue 16: test_array_ops_gradients.py
    "GatherNdGrad", "PadGrad", "TileGrad", "SortGrad", "BooleanMaskGrad",
    # the backward loop of tf.while_loop: finite differences in test_control_flow.py
    "WhileGrad",
    # gradient helper ops of depthwise_conv2d: test_conv_transpose_depthwise.py
    "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter",
    # queues, readers, decode_raw, random_shuffle, count_up_to: test_queues.py
    "FIFOQueueV2", "RandomShuffleQueueV2", "QueueEnqueueV2", "QueueEnqueueManyV2",
    "QueueDequeueV2", "QueueDequeueManyV2", "QueueDequeueUpToV2", "QueueCloseV2",
    "QueueSizeV2", "QueueIsClosedV2", "FixedLengthRecordReaderV2", "ReaderReadV2",
    "DecodeRaw", "RandomShuffle", "CountUpTo",
    "PrintV2",                                # writes a stream: test_string_tensors.py
    # Python calls, printing and run-time checks: test_debugging_ops.py
    "PyFunc", "PyFuncStateless", "Print", "Assert", "CheckNumerics",
    # summaries, built on the host from protobufs: test_summary.py
    "ScalarSummary", "HistogramSummary", "ImageSummary", "TensorSummaryV2", "MergeSummary",
    # tf.data iterators (host state): test_dataset.py, test_dataset_iterators.py
    "IteratorV2", "MakeIterator", "IteratorGetNext",
    # sparse updates, scatter ops on variables, FTRL, SparseTensor ops, candidate
    # samplers: against NumPy in test_sparse_updates.py
    "ApplyFtrl", "SparseApplyMomentum", "SparseApplyAdagrad", "SparseApplyRMSProp",
    "SparseApplyCenteredRMSProp", "SparseApplyAdadelta", "SparseApplyFtrl", "SparseApplyAdam",
    "ScatterUpdate", "ScatterAdd", "ScatterSub", "ScatterMul", "ScatterDiv", "ScatterMax",
    "ScatterMin", "ScatterNdUpdate", "ScatterNdAdd", "ScatterNdSub", "IndexedSlicesToDense",
    "SparseToDense", "SparseReorder", "SparseTensorDenseMatMul", "CandidateSampler",
    "ComputeAccidentalHits",
    # records, text and image files, Example parsing: test_records.py
    "TFRecordReaderV2", "TextLineReaderV2", "WholeFileReaderV2", "ReadFile", "WriteFile",
    "DecodeCSV", "ParseExample", "DecodePng", "DecodeJpeg", "DecodeImage", "EncodePng",
    "EncodeJpeg",
    # lookup tables, py_function and identity_n: test_graph_names.py, test_gradients.py
    "HashTableV2", "InitializeTableV2", "InitializeTableFromTextFileV2", "LookupTableFindV2",
    "LookupTableSizeV2", "EagerPyFunc", "IdentityN",
    # synchronized batch norm's cross-tower sums: test_sync_batch_norm.py
    "CrossTowerSum",
    # all-reduces overlapping the backward pass: test_allreduce_overlap.py (MPI),
    # test_nccl_overlap.py (NCCL on simulated GPUs), test_mpi_nccl_overlap.py (NCCL
    # between processes, captured)
    "MpiAllReduceStart", "MpiAllReduceWait", "NcclAllReduceStart", "NcclAllReduceWait",
}

# -- running and checking ----------------------------------------------------------


def build_case(case, rng, unknown_dims=False):
    """Random inputs, their placeholders, and the case's output tensors."""
    arrays = [make(rng) for make in case.inputs]
    feeds = [tf.placeholder(tf.as_dtype(array.dtype),
                            [None] * array.ndim if unknown_dims else array.shape)
             for array in arrays]
    outputs = case.build(*feeds)
    return arrays, feeds, outputs if isinstance(outputs, list) else [outputs]


def run_case(case, rng, device=None, unknown_dims=False):
    with tf.device(device):
        arrays, feeds, outputs = build_case(case, rng, unknown_dims)
    session = tf.Session(config=tf.ConfigProto(log_device_placement=True))
    values = session.run(outputs, feed_dict=dict(zip(feeds, arrays)))
    expected = case.reference(*arrays)
    expected = expected if isinstance(expected, list) else [expected]
    assert len(values) == len(expected) == len(outputs)
    return outputs, [np.asarray(v) for v in values], [np.asarray(e) for e in expected]


def check_run_against_numpy(case, rng, device=None, read_output=None, unknown_dims=False):
    """Run ``case`` (on ``device``): each output's value and dtype match the
    NumPy reference and its static shape fits the value; given
    ``read_output`` (capsys.readouterr, to read the placement log after the
    run), the first output ran on ``device``. For op suites beside this one."""
    outputs, values, expected = run_case(case, rng, device, unknown_dims)
    for tensor, value, want in zip(outputs, values, expected):
        check_value(tensor, value, want)
        assert tensor.shape.is_compatible_with(value.shape), (tensor, value.shape)
    if read_output is not None:
        placed = placement(read_output().err)
        assert placed[outputs[0].op.name].endswith(placed_name(device)), placed


def numpy_case_tests(cases):
    """The two tests an op suite beside this one runs over its ``cases``:
    ``test_forward_matches_numpy`` on every op_device, and
    ``test_unknown_dims_give_a_compatible_static_shape`` over the cases that
    do not need a known shape. Bind them to those names in the suite."""

    @pytest.mark.parametrize("case", cases, ids=lambda c: c.name)
    def test_forward_matches_numpy(case, op_device, rng, capsys):
        check_run_against_numpy(case, rng, op_device, capsys.readouterr)

    @pytest.mark.parametrize("case", [c for c in cases if not c.needs_known_shape],
                             ids=lambda c: c.name)
    def test_unknown_dims_give_a_compatible_static_shape(case, rng):
        check_run_against_numpy(case, rng, unknown_dims=True)

    return test_forward_matches_numpy, test_unknown_dims_give_a_compatible_static_shape


def check_value(tensor, value, expected):
    assert value.dtype == expected.dtype, f"{tensor.name}: {value.dtype} != {expected.dtype}"
    assert tensor.dtype.as_numpy_dtype == value.dtype, f"static dtype of {tensor}"
    if value.dtype.kind == "f":
        tolerance = 1e-5 if value.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(value, expected, rtol=tolerance, atol=tolerance)
    else:
        np.testing.assert_array_equal(value, expected, strict=True)


def placement(log):
    """``{op name: device}`` from a ``log_device_placement`` log."""
    return dict(PLACEMENT_LINE.findall(log))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_forward_matches_numpy(case, op_device, rng, capsys):
    outputs, values, expected = run_case(case, rng, op_device)
    for tensor, value, want in zip(outputs, values, expected):
        check_value(tensor, value, want)
        assert tensor.shape.as_list() == list(value.shape), tensor
    placed = placement(capsys.readouterr().err)
    assert {tensor.op.name for tensor in outputs} <= set(placed), placed
    wanted = f"/job:localhost/replica:0/task:0/device:{placed_name(op_device)}"
    assert {name: device for name, device in placed.items() if device != wanted} == {}


# Cases whose output shape only the run knows (the static shape is the rank at most)
RUN_TIME_SHAPED = [
    case("reshape_to_a_fed_shape", tf.reshape, lambda x, shape: x.reshape(shape),
         floats(2, 12), lambda rng: np.array([4, -1, 2], np.int32)),
    case("fill_to_a_fed_shape", lambda shape: tf.fill(shape, 2.5),
         lambda shape: np.full(shape, 2.5, np.float32), lambda rng: np.array([3, 2], np.int32)),
    case("tile_by_fed_multiples", tf.tile, np.tile,
         floats(2, 3), lambda rng: np.array([2, 3], np.int32)),
]


@pytest.mark.parametrize("case", RUN_TIME_SHAPED, ids=lambda c: c.name)
def test_run_time_shaped_outputs_match_numpy(case, op_device, rng, capsys):
    check_run_against_numpy(case, rng, op_device, read_output=capsys.readouterr)


def test_a_reshape_to_a_fed_shape_of_the_wrong_size_gives_tfs_error(op_device):
    with tf.device(op_device):
        x = tf.placeholder(tf.float32, [2, 12])
        shape = tf.placeholder(tf.int32, [None])
        reshaped = tf.reshape(x, shape)
    with tf.Session() as session:
        for fed, message in [([5, 5], "the requested shape has 25"),
                             ([5, -1], "the requested shape requires a multiple of 5"),
                             ([-1, -1], "Only one input size may be -1, not both 0 and 1")]:
            with pytest.raises(tf.errors.InvalidArgumentError, match=message):
                session.run(reshaped, {x: np.zeros((2, 12)), shape: fed})


@pytest.mark.parametrize("case", [c for c in CASES if not c.needs_known_shape],
                         ids=lambda c: c.name)
def test_unknown_dims_give_a_compatible_static_shape(case, rng):
    """Placeholders of known rank but unknown dims: the static shape keeps the
    rank and never contradicts the run-time shape."""
    outputs, values, expected = run_case(case, rng, unknown_dims=True)
    for tensor, value, want in zip(outputs, values, expected):
        check_value(tensor, value, want)
        assert tensor.shape.ndims == value.ndim, tensor
        assert tensor.shape.is_compatible_with(value.shape), (tensor, value.shape)


def test_placeholder_with_default_fed_and_not_fed(op_device, rng, capsys):
    default = rng.standard_normal((2, 3)).astype(np.float32)
    fed = rng.standard_normal((5, 3)).astype(np.float32)
    with tf.device(op_device):
        x = tf.placeholder_with_default(default, [None, 3])
        doubled = x * 2.0
    assert x.shape.as_list() == [None, 3] and x.dtype == tf.float32
    session = tf.Session(config=tf.ConfigProto(log_device_placement=True))
    for feed, want in [(None, default), ({x: fed}, fed)]:
        value, twice = session.run([x, doubled], feed_dict=feed)
        np.testing.assert_array_equal(value, want, strict=True)
        np.testing.assert_array_equal(twice, want * 2, strict=True)
    placed = placement(capsys.readouterr().err)
    assert placed[x.op.name].endswith(placed_name(op_device))
    assert placed[doubled.op.name].endswith(placed_name(op_device))


ALIASING = {  # builders whose NumPy kernel may return its input, or a view of it
    "identity": tf.identity, "cast_same_dtype": lambda v: tf.cast(v, tf.float32),
    "add_n_single": lambda v: tf.add_n([v]), "split": lambda v: tf.split(v, 2)[0],
    "reshape": lambda v: tf.reshape(v, [4]), "transpose": tf.transpose,
    "expand_dims": lambda v: tf.expand_dims(v, 0), "squeeze": lambda v: tf.squeeze(v, []),
    "reduce_no_axes": lambda v: tf.reduce_sum(v, []), "concat_one": lambda v: tf.concat([v], 0),
    "placeholder_with_default": lambda v: tf.placeholder_with_default(v, [2, 2]),
}


@pytest.mark.parametrize("source", ["variable", "constant"])
@pytest.mark.parametrize("build", ALIASING.values(), ids=ALIASING.keys())
def test_fetched_values_never_alias_stored_values(build, source):
    """The caller owns a fetched array: changing it changes no variable or constant."""
    initial = np.arange(4, dtype=np.float32).reshape(2, 2)
    stored = tf.Variable(initial) if source == "variable" else tf.constant(initial)
    output = build(stored)
    with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        fetched = session.run(output)
        expected = fetched.copy()
        fetched += 100
        np.testing.assert_array_equal(session.run(output), expected)


def test_bad_dtypes_raise_type_error():
    with pytest.raises(TypeError, match=r"int32.*float32|float32.*int32"):
        tf.constant(1.0) + tf.constant(1)
    with pytest.raises(TypeError, match="float64"):
        tf.matmul(tf.placeholder(tf.float32, [2, 2]), tf.placeholder(tf.float64, [2, 2]))
    with pytest.raises(TypeError, match="bool"):  # TensorFlow has no true division of bools
        tf.placeholder(tf.bool, [2]) / True


@pytest.mark.parametrize("build, shape_a, shape_b", [
    (tf.add, [2, 3], [4]), (tf.maximum, [2, 3], [3, 2]), (tf.less, [5, 1, 3], [2, 4]),
    (tf.matmul, [2, 3], [4, 5]), (tf.matmul, [7, 2, 3], [7, 2, 3]),
    (lambda a, b: tf.matmul(a, b, transpose_b=True), [2, 3], [3, 4]),
], ids=["add", "maximum", "less", "matmul", "matmul_batched", "matmul_transpose_b"])
def test_incompatible_shapes_raise_value_error_naming_them(build, shape_a, shape_b):
    a, b = tf.placeholder(tf.float32, shape_a), tf.placeholder(tf.float32, shape_b)
    with pytest.raises(ValueError) as raised:
        build(a, b)
    message = str(raised.value)
    assert str(a.shape) in message and str(b.shape) in message, message


def test_split_sizes_are_checked_when_built_or_run():
    with pytest.raises(ValueError, match=r"at most one -1"):
        tf.split(tf.placeholder(tf.float32, [4]), [-1, -1])
    # TensorFlow's words (split_v_op.cc), when built and when run
    with pytest.raises(ValueError, match=r"^Determined shape must either match input shape "
                       r"along split_dim exactly .*  Got: 2"):
        tf.split(tf.placeholder(tf.float32, [4]), [1, 1])
    x = tf.placeholder(tf.float32, [None])  # unknown size: checked when it runs
    with tf.Session() as session, pytest.raises(tf.errors.InvalidArgumentError,
                                               match=r"^Determined shape .*  Got: 2\n"):
        session.run(tf.split(x, [1, 1]), {x: np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match=r"Got: 1"):    # a -1 left nothing, or less
        tf.split(tf.placeholder(tf.float32, [0]), [0, -1, 1])


# Op types that only run on GPUs, by design.
GPU_ONLY = {"NcclAllReduce", "NcclAllReduceStart", "NcclAllReduceWait"}


def test_every_op_type_has_a_cpu_kernel():
    kernels = {registry.get_op_def(t).kernel for t in registry.registered_op_types()}
    assert kernels - set(KERNELS) == GPU_ONLY, "op types without a CPU kernel"


def test_cases_cover_every_registered_op_type():
    import test_array_ops
    import test_control_flow
    import test_conv_transpose_depthwise
    import test_image_ops
    import test_index_ops
    covered = set()
    for each in (CASES + test_index_ops.CASES + test_image_ops.CASES + test_array_ops.CASES
                 + test_conv_transpose_depthwise.CASES + test_control_flow.WHILE_CASES
                 + test_control_flow.COND_CASES + test_control_flow.MAP_CASES
                 + RUN_TIME_SHAPED):
        with tf.Graph().as_default() as graph:
            build_case(each, np.random.default_rng(0))
        covered |= {op.type for op in graph.get_operations()}
    registered = set(registry.registered_op_types())
    assert NOT_COVERED_HERE <= registered, "stale entries in NOT_COVERED_HERE"
    assert registered - covered - NOT_COVERED_HERE == set(), "op types no case builds"
