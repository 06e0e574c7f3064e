"""``tf.math``: TF 1.15's math namespace over the core ops (the same
functions as ``tf.log``, ``tf.reduce_sum``, ``tf.nn.softplus``, ...)::

    tf.math.reduce_sum(x, axis=1)
    tf.math.log(p)
    tf.math.softplus(logits)

Not implemented (TF 1.15 names: ``tf.math.<name>`` raises an
AttributeError saying so): accumulate_n, acos, acosh, angle, asin, asinh,
atan, atan2, atanh, bessel_i0, bessel_i0e, bessel_i1, bessel_i1e, betainc,
bincount, confusion_matrix, conj, cosh, count_nonzero,
cumulative_logsumexp, digamma, divide_no_nan, erf, erfc, expm1, igamma,
igammac, imag, invert_permutation, is_non_decreasing,
is_strictly_increasing, lbeta, lgamma, logical_xor, multiply_no_nan,
polygamma, polyval, real, reciprocal_no_nan, reduce_euclidean_norm, rint,
scalar_mul, segment_max, segment_mean, segment_min, segment_prod,
segment_sum, sinh, tan, unsorted_segment_max, unsorted_segment_mean,
unsorted_segment_min, unsorted_segment_prod, unsorted_segment_sqrt_n,
unsorted_segment_sum, xdivy, xlogy, zeta.
"""

from ..ops import math_ops as _math_ops
from ..ops.activation_ops import softplus, softsign
from ..ops.logistic_ops import l2_normalize
from ..ops.math_ops import (
    abs,
    add,
    add_n,
    argmax,
    argmin,
    ceil,
    cos,
    divide,
    equal,
    exp,
    floor,
    floordiv,
    floormod,
    greater,
    greater_equal,
    is_finite,
    is_inf,
    is_nan,
    less,
    less_equal,
    log,
    log1p,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    mod,
    multiply,
    negative,
    not_equal,
    pow,
    reciprocal,
    reduce_all,
    reduce_any,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_prod,
    reduce_sum,
    round,
    rsqrt,
    sigmoid,
    sign,
    sin,
    sqrt,
    square,
    squared_difference,
    subtract,
    tanh,
    truediv,
)
from ..ops.nn_ops import log_softmax, softmax
from ..ops.scan_ops import cumprod, cumsum, reduce_logsumexp
from ..ops.select_ops import in_top_k, top_k, zero_fraction
from . import missing as _missing

__all__ = ["abs", "add", "add_n", "argmax", "argmin", "ceil", "cos", "cumprod", "cumsum",
           "divide", "equal", "exp", "floor", "floordiv", "floormod", "greater",
           "greater_equal", "in_top_k", "is_finite", "is_inf", "is_nan", "l2_normalize",
           "less", "less_equal", "log", "log1p", "log_sigmoid", "log_softmax", "logical_and",
           "logical_not", "logical_or", "maximum", "minimum", "mod", "multiply", "negative",
           "not_equal", "pow", "reciprocal", "reduce_all", "reduce_any", "reduce_logsumexp",
           "reduce_max", "reduce_mean", "reduce_min", "reduce_prod", "reduce_std",
           "reduce_sum", "reduce_variance", "round", "rsqrt", "sigmoid", "sign", "sin",
           "softmax", "softplus", "softsign", "sqrt", "square", "squared_difference",
           "subtract", "tanh", "top_k", "truediv", "zero_fraction"]


def log_sigmoid(x, name=None):
    """log(sigmoid(x)) = -softplus(-x), without overflow: ``tf.math.log_sigmoid(x)``."""
    return negative(softplus(negative(x)), name=name)


def reduce_variance(input_tensor, axis=None, keepdims=False, name=None):
    """The variance over ``axis``, as TF 1.15: the mean of the squared
    deviations from the mean: ``tf.math.reduce_variance(x, 0)``."""
    means = reduce_mean(input_tensor, axis, keepdims=True)
    deviations = square(_math_ops.abs(_math_ops.subtract(input_tensor, means)))
    return reduce_mean(deviations, axis, keepdims=keepdims, name=name)


def reduce_std(input_tensor, axis=None, keepdims=False, name=None):
    """The standard deviation over ``axis``: sqrt(reduce_variance)."""
    return sqrt(reduce_variance(input_tensor, axis, keepdims), name=name)


# TF 1.15's tf.math names towerflow leaves out (the docstring lists them too).
NOT_IMPLEMENTED = frozenset([
    "accumulate_n", "acos", "acosh", "angle", "asin", "asinh", "atan", "atan2", "atanh",
    "bessel_i0", "bessel_i0e", "bessel_i1", "bessel_i1e", "betainc", "bincount",
    "confusion_matrix", "conj", "cosh", "count_nonzero", "cumulative_logsumexp", "digamma",
    "divide_no_nan", "erf", "erfc", "expm1", "igamma", "igammac", "imag", "invert_permutation",
    "is_non_decreasing", "is_strictly_increasing", "lbeta", "lgamma", "logical_xor",
    "multiply_no_nan", "polygamma", "polyval", "real", "reciprocal_no_nan",
    "reduce_euclidean_norm", "rint", "scalar_mul", "segment_max", "segment_mean", "segment_min",
    "segment_prod", "segment_sum", "sinh", "tan", "unsorted_segment_max", "unsorted_segment_mean",
    "unsorted_segment_min", "unsorted_segment_prod", "unsorted_segment_sqrt_n",
    "unsorted_segment_sum", "xdivy", "xlogy", "zeta"])
# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
__getattr__ = _missing.module_getattr("tf.math")
