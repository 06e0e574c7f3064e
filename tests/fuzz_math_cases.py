"""The op fuzzer's table for tf.* math: elementwise unary and binary ops,
comparisons, reductions, arg-reductions, scans, casts and matmul.

Each reference is TensorFlow 1.15's semantics written with NumPy: it raises
where TensorFlow refuses the input (a dtype outside the op's type list, an
integer division by zero, an empty arg-reduction).
"""

import numpy as np
from fuzz_harness import (
    FLOAT_DTYPES,
    NUMERIC_DTYPES,
    Case,
    OpSpec,
    Rejected,
    broadcastable_shapes,
    choose,
    random_shape,
    random_values,
    summed_tolerance,
)

import towerflow as tf

# -- dtypes ---------------------------------------------------------------------


def require_dtype(array, allowed):
    """TensorFlow's op type lists: outside them, a TypeError at build."""
    if array.dtype.type not in allowed:
        raise Rejected(f"{array.dtype} is not in the op's type list")


def draw_dtype(rng, allowed, others=NUMERIC_DTYPES + (np.bool_,)):
    """Mostly an allowed dtype; one time in eight any other, which TF refuses."""
    outside = [dtype for dtype in others if dtype not in allowed]
    if outside and rng.random() < 0.125:
        return choose(rng, outside)
    return choose(rng, allowed)


# -- unary elementwise ------------------------------------------------------------


def unary_cases(allowed):
    def cases(rng):
        array = random_values(rng, random_shape(rng), draw_dtype(rng, allowed))
        return Case((array,), {}, bool(rng.random() < 0.3))
    return cases


def unary(name, build, numpy_fn, allowed=FLOAT_DTYPES):
    def reference(x):
        require_dtype(x, allowed)
        return numpy_fn(x)
    return OpSpec(name, build, reference, unary_cases(allowed))


def _sigmoid(x):
    return (1 / (1 + np.exp(-x.astype(np.float64)))).astype(x.dtype)


def _rsqrt(x):
    return (1 / np.sqrt(x.astype(np.float64))).astype(x.dtype)


def _elu(x):
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


def _relu(x):
    return np.where(np.isnan(x), x, np.maximum(x, 0)).astype(x.dtype)


def _leaky_relu(x):
    x = x.astype(np.float32) if x.dtype.kind == "i" else x     # TF 1.15 casts ints
    return np.where(x > 0, x, x * x.dtype.type(0.2))


def _relu6(x):
    return np.minimum(np.maximum(x, 0), 6).astype(x.dtype)


def _selu(x):
    wide = x.astype(np.float64)
    scale, alpha = 1.0507009873554805, 1.6732632423543772
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(wide > 0, scale * wide, scale * alpha * np.expm1(wide)).astype(x.dtype)


def _softplus(x):
    return np.logaddexp(0.0, x.astype(np.float64)).astype(x.dtype)


def _softsign(x):
    wide = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        return (wide / (1 + np.abs(wide))).astype(x.dtype)


def _swish(x):
    with np.errstate(over="ignore", invalid="ignore"):
        return (x.astype(np.float64) * _sigmoid(x).astype(np.float64)).astype(x.dtype)


def _log_sigmoid(x):
    return (-np.logaddexp(0.0, -x.astype(np.float64))).astype(x.dtype)


def _reciprocal(x):
    _integer_divisor(x, x)
    return np.reciprocal(x)


SIGNED = NUMERIC_DTYPES          # neg, abs, square, sign: floats and ints
BOOL = (np.bool_,)

UNARY = [
    unary("negative", tf.negative, np.negative, SIGNED),
    unary("abs", tf.abs, np.abs, SIGNED),
    unary("square", tf.square, np.square, SIGNED),
    unary("sign", tf.sign, np.sign, SIGNED),
    unary("sqrt", tf.sqrt, np.sqrt),
    unary("rsqrt", tf.rsqrt, _rsqrt),
    unary("exp", tf.exp, np.exp),
    unary("log", tf.log, np.log),
    unary("log1p", tf.log1p, np.log1p),
    unary("reciprocal", tf.reciprocal, _reciprocal, SIGNED),
    unary("floor", tf.floor, np.floor),
    unary("ceil", tf.ceil, np.ceil),
    unary("round", tf.round, np.round, SIGNED),
    unary("sin", tf.sin, np.sin),
    unary("cos", tf.cos, np.cos),
    unary("tanh", tf.tanh, np.tanh),
    unary("nn.tanh", tf.nn.tanh, np.tanh),
    unary("sigmoid", tf.sigmoid, _sigmoid),
    unary("nn.sigmoid", tf.nn.sigmoid, _sigmoid),
    unary("nn.relu", tf.nn.relu, _relu, SIGNED),
    unary("nn.elu", tf.nn.elu, _elu),
    unary("nn.leaky_relu", tf.nn.leaky_relu, _leaky_relu, NUMERIC_DTYPES),
    unary("nn.relu6", tf.nn.relu6, _relu6, SIGNED),
    unary("nn.selu", tf.nn.selu, _selu),
    unary("nn.softplus", tf.nn.softplus, _softplus),
    unary("nn.softsign", tf.nn.softsign, _softsign),
    unary("nn.swish", tf.nn.swish, _swish),
    unary("log_sigmoid", tf.log_sigmoid, _log_sigmoid),
    unary("is_finite", tf.is_finite, np.isfinite),
    unary("is_nan", tf.is_nan, np.isnan),
    unary("is_inf", tf.is_inf, np.isinf),
    unary("logical_not", tf.logical_not, np.logical_not, BOOL),
    unary("identity", tf.identity, np.copy, NUMERIC_DTYPES + BOOL),
    unary("stop_gradient", tf.stop_gradient, np.copy, NUMERIC_DTYPES + BOOL),
    unary("zeros_like", tf.zeros_like, np.zeros_like, NUMERIC_DTYPES + BOOL),
    unary("ones_like", tf.ones_like, np.ones_like, NUMERIC_DTYPES + BOOL),
]

# -- binary elementwise -----------------------------------------------------------


def binary_cases(allowed):
    def cases(rng):
        first, second = broadcastable_shapes(rng, compatible=rng.random() < 0.8)
        dtype = draw_dtype(rng, allowed)
        other = dtype if rng.random() < 0.9 else draw_dtype(rng, allowed)
        return Case((random_values(rng, first, dtype), random_values(rng, second, other)),
                    {}, bool(rng.random() < 0.3))
    return cases


def binary(name, build, numpy_fn, allowed=NUMERIC_DTYPES):
    def reference(x, y):
        require_dtype(x, allowed)
        if x.dtype != y.dtype:
            raise Rejected("operands of two dtypes")
        return numpy_fn(x, np.broadcast_to(y, np.broadcast_shapes(x.shape, y.shape)))
    return OpSpec(name, build, reference, binary_cases(allowed))


def _integer_divisor(x, y):
    """Integer division and modulo by zero: TF's 'Integer division by zero'
    (when the result is not empty: a zero that divides nothing is no error)."""
    if x.dtype.kind in "iu" and (y == 0).any() and np.broadcast(x, y).size:
        raise Rejected("Integer division by zero")


def _floordiv(x, y):
    _integer_divisor(x, y)
    if x.dtype.kind == "f":   # TF floors the rounded quotient (kernels.py's NOTE)
        return np.floor(x / y)
    return np.floor_divide(x, y)


def _floormod(x, y):
    _integer_divisor(x, y)
    return np.mod(x, y)


def _truediv(x, y):
    """Integers divide as float64 (int32, int64), as in TensorFlow."""
    if x.dtype.kind in "iu":
        x, y = x.astype(np.float64), y.astype(np.float64)
    return x / y


def _div(x, y):
    """TF1's tf.div: Python 2's ``/``, floor division of integers."""
    return _floordiv(x, y) if x.dtype.kind in "iu" else x / y


def _pow(x, y):
    if x.dtype.kind in "iu" and (y < 0).any():
        raise Rejected("Integers to negative integer powers are not allowed")
    return np.power(x, y)


def _squared_difference(x, y):
    return np.square(x - y)


def _logical(numpy_fn):
    return lambda x, y: numpy_fn(x, y)


BINARY = [
    binary("add", tf.add, np.add),
    binary("subtract", tf.subtract, np.subtract),
    binary("sub", tf.sub, np.subtract),
    binary("multiply", tf.multiply, np.multiply),
    binary("mul", tf.mul, np.multiply),
    binary("truediv", tf.truediv, _truediv),
    binary("divide", tf.divide, _truediv),
    binary("div", tf.div, _div),
    binary("floordiv", tf.floordiv, _floordiv),
    binary("floormod", tf.floormod, _floormod),
    binary("mod", tf.mod, _floormod),
    binary("pow", tf.pow, _pow),
    binary("maximum", tf.maximum, np.maximum),
    binary("minimum", tf.minimum, np.minimum),
    binary("squared_difference", tf.squared_difference, _squared_difference),
    binary("equal", tf.equal, np.equal, NUMERIC_DTYPES + BOOL),
    binary("not_equal", tf.not_equal, np.not_equal, NUMERIC_DTYPES + BOOL),
    binary("less", tf.less, np.less),
    binary("less_equal", tf.less_equal, np.less_equal),
    binary("greater", tf.greater, np.greater),
    binary("greater_equal", tf.greater_equal, np.greater_equal),
    binary("logical_and", tf.logical_and, np.logical_and, BOOL),
    binary("logical_or", tf.logical_or, np.logical_or, BOOL),
]

# -- matmul -----------------------------------------------------------------------


def _matmul_cases(rng):
    batch = random_shape(rng, max_rank=1)
    rows, inner, cols = (int(rng.choice((0, 1, 2, 3, 7))) for _ in range(3))
    other_inner = inner if rng.random() < 0.8 else inner + 1
    transpose_a, transpose_b = bool(rng.random() < 0.3), bool(rng.random() < 0.3)
    a_shape = batch + ((inner, rows) if transpose_a else (rows, inner))
    b_shape = batch + ((cols, other_inner) if transpose_b else (other_inner, cols))
    if rng.random() < 0.1:
        a_shape = a_shape[1:]          # rank 1 (or a rank mismatch): TF refuses
    dtype = draw_dtype(rng, NUMERIC_DTYPES)
    return Case((random_values(rng, a_shape, dtype, specials=False),
                 random_values(rng, b_shape, dtype, specials=False)),
                {"transpose_a": transpose_a, "transpose_b": transpose_b},
                bool(rng.random() < 0.3))


def _matmul(a, b, transpose_a, transpose_b):
    """TF 1.15's matmul of rank > 2 is BatchMatMulV2: batch dimensions broadcast."""
    require_dtype(a, NUMERIC_DTYPES)
    if a.dtype != b.dtype or min(a.ndim, b.ndim) < 2:
        raise Rejected("matmul needs matrices of one dtype")
    a = np.swapaxes(a, -1, -2) if transpose_a else a
    b = np.swapaxes(b, -1, -2) if transpose_b else b
    return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype) \
        if a.dtype.kind == "f" else np.matmul(a, b)


def _matmul_terms(case):
    a, b = case.inputs
    inner = a.shape[-2 if case.args["transpose_a"] else -1] if a.ndim else 0
    scale = float(np.abs(a).max(initial=0)) * float(np.abs(b).max(initial=0))
    return inner, scale


MATMUL = [OpSpec("matmul", tf.matmul, _matmul, _matmul_cases,
                 tolerance=summed_tolerance(_matmul_terms))]

# -- reductions --------------------------------------------------------------------


def reduction_cases(allowed, specials=True):
    def cases(rng):
        array = random_values(rng, random_shape(rng), draw_dtype(rng, allowed), specials)
        return Case((array,), {"axis": _draw_axes(rng, array.ndim),
                               "keepdims": bool(rng.random() < 0.3)},
                    bool(rng.random() < 0.7))
    return cases


def _draw_axes(rng, rank):
    """None, one axis or a list; negative ones, and one time in ten out of range."""
    if rng.random() < 0.25:
        return None
    span = rank + 1 if rng.random() < 0.1 else max(rank, 1)
    axes = [int(rng.integers(-span, span)) for _ in range(int(rng.integers(1, 3)))]
    return axes[0] if len(axes) == 1 else axes


def normalized_axes(axis, rank):
    """TF's reduction axes: each in [-rank, rank), duplicates allowed."""
    if axis is None:
        return tuple(range(rank))
    axes = [axis] if np.isscalar(axis) else list(axis)
    for value in axes:
        if not -rank <= value < rank:       # a scalar has no axis to reduce
            raise Rejected(f"Invalid reduction dimension {value} for input with {rank} "
                           "dimensions")
    return tuple(sorted({value % rank for value in axes}))


def reduction(name, build, numpy_fn, allowed=NUMERIC_DTYPES, tolerance=None):
    def reference(x, axis, keepdims):
        require_dtype(x, allowed)
        axes = normalized_axes(axis, x.ndim)
        return np.asarray(numpy_fn(x, axes, keepdims), dtype=_result_dtype(x))
    return OpSpec(name, build, reference, reduction_cases(allowed), tolerance=tolerance)


def _result_dtype(x):
    return x.dtype


def _sum(x, axes, keepdims):
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


def _mean(x, axes, keepdims):
    """TF sums in the input's dtype (an int32 sum wraps), then divides: an
    integer mean truncates toward zero, an empty one divides by zero."""
    count = int(np.prod([x.shape[axis] for axis in axes]))
    if x.dtype.kind == "f":     # summed in its dtype: a float32 sum may overflow, as TF's
        total = np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)
        return (total / x.dtype.type(count)).astype(x.dtype) if count else total * np.nan
    total = np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)
    if total.size == 0:             # no mean computed: nothing divided by zero
        return total
    if count == 0:
        raise Rejected("Integer division by zero")
    floored = total // count
    return floored + ((total % count != 0) & (total < 0))


def _extremum(numpy_fn, float_identity, int_identity):
    """TF reduces an empty axis to the identity: -inf for max of floats, the
    lowest int for ints (and the reverse for min)."""
    def reduce(x, axes, keepdims):
        initial = float_identity if x.dtype.kind == "f" else int_identity(np.iinfo(x.dtype))
        return numpy_fn(x, axis=axes, keepdims=keepdims, initial=initial)
    return reduce


def _prod(x, axes, keepdims):
    return np.prod(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


def _all(x, axes, keepdims):
    return np.all(x, axis=axes, keepdims=keepdims)


def _any(x, axes, keepdims):
    return np.any(x, axis=axes, keepdims=keepdims)


def _logsumexp(x, axes, keepdims):
    wide = x.astype(np.float64)
    peak = np.max(wide, axis=axes, keepdims=True, initial=-np.inf)
    peak = np.where(np.isfinite(peak), peak, 0)
    total = np.log(np.sum(np.exp(wide - peak), axis=axes, keepdims=True)) + peak
    return total if keepdims else np.squeeze(total, axis=axes)


def _reduced_terms(case):
    x = case.inputs[0]
    finite = np.abs(x[np.isfinite(x)]) if x.dtype.kind == "f" else np.abs(x)
    return max(x.size, 1), float(finite.max(initial=0))


REDUCTIONS = [
    reduction("reduce_sum", tf.reduce_sum, _sum, tolerance=summed_tolerance(_reduced_terms)),
    reduction("reduce_mean", tf.reduce_mean, _mean,
              tolerance=summed_tolerance(_reduced_terms)),
    reduction("reduce_max", tf.reduce_max, _extremum(np.max, -np.inf, lambda i: i.min)),
    reduction("reduce_min", tf.reduce_min, _extremum(np.min, np.inf, lambda i: i.max)),
    reduction("reduce_prod", tf.reduce_prod, _prod,
              tolerance=summed_tolerance(_reduced_terms)),
    reduction("reduce_all", tf.reduce_all, _all, BOOL),
    reduction("reduce_any", tf.reduce_any, _any, BOOL),
    reduction("reduce_logsumexp", tf.reduce_logsumexp, _logsumexp, FLOAT_DTYPES,
              tolerance=summed_tolerance(_reduced_terms)),
]

# -- arg-reductions ---------------------------------------------------------------


def _arg_cases(rng):
    array = random_values(rng, random_shape(rng), draw_dtype(rng, NUMERIC_DTYPES))
    rank = max(array.ndim, 1)
    axis = int(rng.integers(-rank - 1, rank + 1)) if rng.random() < 0.2 else \
        int(rng.integers(-rank, rank))
    output_type = choose(rng, (tf.int32, tf.int64))
    return Case((array,), {"axis": axis, "output_type": output_type},
                bool(rng.random() < 0.5))


def _arg(numpy_fn):
    """TF's ArgMax/ArgMin: an empty axis is refused ('Reduction axis 0 is empty');
    NaN: NumPy's first NaN wins, as on TensorFlow's CPU."""
    def reference(x, axis, output_type):
        require_dtype(x, NUMERIC_DTYPES)
        if not -x.ndim <= axis < x.ndim:
            raise Rejected(f"Expected dimension in the range [{-x.ndim}, {x.ndim})")
        if x.shape[axis] == 0:
            raise Rejected(f"Reduction axis {axis} is empty in shape {list(x.shape)}")
        return numpy_fn(x, axis=axis).astype(output_type.as_numpy_dtype)
    return reference


def arg_spec(name, build, numpy_fn):
    return OpSpec(name, build, _arg(numpy_fn), _arg_cases)


ARG_REDUCTIONS = [
    arg_spec("argmax", tf.argmax, np.argmax),
    arg_spec("argmin", tf.argmin, np.argmin),
    arg_spec("arg_max", lambda x, axis, output_type: tf.arg_max(x, axis, output_type=output_type),
             np.argmax),
    arg_spec("arg_min", lambda x, axis, output_type: tf.arg_min(x, axis, output_type=output_type),
             np.argmin),
]

# -- scans -------------------------------------------------------------------------


def _scan_cases(rng):
    array = random_values(rng, random_shape(rng, min_rank=1), draw_dtype(rng, NUMERIC_DTYPES),
                          specials=False)
    rank = array.ndim
    axis = int(rng.integers(-rank - 1, rank + 1)) if rng.random() < 0.2 else \
        int(rng.integers(-rank, rank))
    # NOTE: static shapes only: towerflow's cumsum needs the rank when it is
    # built (TensorFlow's takes a rank known at run time only).
    return Case((array,), {"axis": axis, "exclusive": bool(rng.random() < 0.5),
                           "reverse": bool(rng.random() < 0.5)}, True)


def _scan(numpy_fn, identity):
    def reference(x, axis, exclusive, reverse):
        require_dtype(x, NUMERIC_DTYPES)
        if not -x.ndim <= axis < x.ndim:
            raise Rejected("axis out of range")
        values = np.flip(x, axis) if reverse else x
        if exclusive and values.shape[axis]:
            pad = np.full_like(np.take(values, [0], axis=axis), identity)
            values = np.concatenate([pad, np.delete(values, -1, axis=axis)], axis=axis)
        result = numpy_fn(values, axis=axis, dtype=x.dtype)
        return np.flip(result, axis) if reverse else result
    return reference


def _scan_terms(case):
    x = case.inputs[0]
    return max(x.size, 1), float(np.abs(x).max(initial=0))


def _cumprod_tolerance(case, expected):
    eps = np.finfo(expected.dtype).eps if expected.dtype.kind == "f" else 0
    return 64 * eps, 0.0


SCANS = [
    OpSpec("cumsum", tf.cumsum, _scan(np.cumsum, 0), _scan_cases,
           tolerance=summed_tolerance(_scan_terms)),
    OpSpec("cumprod", tf.cumprod, _scan(np.cumprod, 1), _scan_cases,
           tolerance=_cumprod_tolerance),
]

# -- casts -------------------------------------------------------------------------

CAST_TARGETS = (tf.float32, tf.float64, tf.int32, tf.int64, tf.bool)


def _cast_cases(rng):
    dtype = choose(rng, NUMERIC_DTYPES + (np.bool_,))
    # NOTE: no NaN, inf or out-of-range floats: a float to int cast of those is
    # undefined in C++, and TensorFlow's result is the CPU's, not a rule.
    array = random_values(rng, random_shape(rng), dtype, specials=dtype not in FLOAT_DTYPES)
    return Case((array,), {"dtype": choose(rng, CAST_TARGETS)}, bool(rng.random() < 0.5))


def _cast(x, dtype):
    return x.astype(dtype.as_numpy_dtype)


def _cast_to(dtype):
    return lambda x: x.astype(dtype.as_numpy_dtype)


def _fixed_cast_cases(rng):
    case = _cast_cases(rng)
    return Case(case.inputs, {}, case.static)


CASTS = [OpSpec("cast", tf.cast, _cast, _cast_cases)] + [
    OpSpec(name, getattr(tf, name), _cast_to(dtype), _fixed_cast_cases)
    for name, dtype in (("to_float", tf.float32), ("to_double", tf.float64),
                        ("to_int32", tf.int32), ("to_int64", tf.int64))]


MATH_SPECS = UNARY + BINARY + MATMUL + REDUCTIONS + ARG_REDUCTIONS + SCANS + CASTS
