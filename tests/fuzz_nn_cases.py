"""The op fuzzer's table for tf.nn and tf.losses: activations, softmax and the
cross-entropies, bias add, normalisations, convolutions and pools.

Convolutions and pools draw small NHWC inputs whose windows may not fit (a
VALID window larger than the input, a filter of other channels) and empty
batches; their values are finite (TensorFlow leaves NaN ordering in a max
pool to the CPU).
"""

import math

import numpy as np
from fuzz_harness import (
    FLOAT_DTYPES,
    NUMERIC_DTYPES,
    Case,
    OpSpec,
    Rejected,
    choose,
    random_shape,
    random_values,
    static_or_not,
    summed_tolerance,
)
from fuzz_math_cases import _mean, draw_dtype, require_dtype

import towerflow as tf


def float_array(rng, shape, specials=True):
    return random_values(rng, shape, draw_dtype(rng, FLOAT_DTYPES), specials)


def wide(x):
    return x.astype(np.float64)

# -- softmax family -------------------------------------------------------------------


def _softmax_cases(rng):
    x = float_array(rng, random_shape(rng, min_rank=1, max_rank=3))
    axis = choose(rng, (-1, -1, 0, x.ndim, -x.ndim - 1))
    return Case((x,), {"axis": axis}, static_or_not(rng))


def _shifted(x, axis):
    require_dtype(x, FLOAT_DTYPES)
    if not -x.ndim <= axis < x.ndim:
        raise Rejected("axis out of range")
    x = wide(x)
    return x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)


def _softmax(x, axis):
    shifted = _shifted(x, axis)
    exps = np.exp(shifted)
    return (exps / np.sum(exps, axis=axis, keepdims=True)).astype(x.dtype)


def _log_softmax(x, axis):
    shifted = _shifted(x, axis)
    return (shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))).astype(x.dtype)


def _rows_cases(rng, labels_of):
    rows, classes = int(rng.choice((0, 1, 3))), int(rng.choice((1, 2, 5)))
    logits = float_array(rng, (rows, classes))
    return Case((labels_of(rng, logits), logits), {}, static_or_not(rng))


def _distributions(rng, logits):
    shape = logits.shape if rng.random() < 0.9 else (logits.shape[0], logits.shape[1] + 1)
    weights = rng.random(shape)
    return (weights / np.maximum(weights.sum(-1, keepdims=True), 1e-9)).astype(logits.dtype)


def _class_labels(rng, logits):
    classes = logits.shape[1]
    labels = rng.integers(0, classes, logits.shape[0])
    if labels.size and rng.random() < 0.25:
        labels[0] = choose(rng, (-1, classes))
    return labels.astype(choose(rng, (np.int32, np.int64)))


def _softmax_xent(labels, logits):
    if labels.shape != logits.shape:
        raise Rejected("logits and labels must be broadcastable")
    log_probs = _log_softmax(logits, -1).astype(np.float64)
    return (-np.sum(np.where(labels == 0, 0, labels * log_probs), axis=-1)).astype(logits.dtype)


def _sparse_xent(labels, logits):
    classes = logits.shape[-1]
    bad = labels[(labels < 0) | (labels >= classes)]
    if bad.size:
        raise Rejected(f"Received a label value of {bad[0]} which is outside the valid "
                       f"range of [0, {classes})")
    log_probs = _log_softmax(logits, -1).astype(np.float64)
    return (-np.take_along_axis(log_probs, labels[:, None].astype(np.int64), -1)[:, 0])\
        .astype(logits.dtype)


def _elementwise_pair_cases(rng):
    """Labels and logits; of two shapes only when static (TF 1.15 checks them
    when it builds the graph, and broadcasts shapes it cannot see)."""
    shape = random_shape(rng, max_rank=3)
    mismatch = rng.random() < 0.1
    other = shape + (2,) if mismatch else shape
    dtype = draw_dtype(rng, FLOAT_DTYPES)
    labels = np.asarray(rng.random(other), dtype)
    return Case((labels, random_values(rng, shape, dtype)), {},
                mismatch or static_or_not(rng))


def _sigmoid_xent(labels, logits):
    require_dtype(logits, FLOAT_DTYPES)
    if labels.shape != logits.shape:
        raise Rejected("logits and labels must have the same shape")
    x, z = logits, labels       # in their dtype: TF's float32 overflows where float64 would not
    return np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x)))


def _weighted_xent(targets, logits, pos_weight):
    require_dtype(logits, FLOAT_DTYPES)
    if targets.shape != logits.shape:
        raise Rejected("logits and targets must have the same shape")
    x, z = logits, targets
    log_weight = 1 + (x.dtype.type(pos_weight) - 1) * z
    return (1 - z) * x + log_weight * (np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0))


def _weighted_cases(rng):
    case = _elementwise_pair_cases(rng)
    return Case(case.inputs, {"pos_weight": float(choose(rng, (0.5, 1.0, 3.0)))}, case.static)

# -- bias add, l2, normalisations -------------------------------------------------------


def _bias_add_cases(rng):
    value = float_array(rng, random_shape(rng, min_rank=1, max_rank=4))
    channels = value.shape[-1] if rng.random() < 0.85 else value.shape[-1] + 1
    return Case((value, random_values(rng, (channels,), value.dtype)), {},
                static_or_not(rng))


def _bias_add(value, bias):
    require_dtype(value, NUMERIC_DTYPES)
    if value.ndim < 2:
        raise Rejected("Input tensor must be at least 2D")
    if bias.shape != value.shape[-1:]:
        raise Rejected("Must provide as many biases as the last dimension of the input")
    return value + bias


def _one_float_cases(rng):
    return Case((float_array(rng, random_shape(rng)),), {}, static_or_not(rng))


def _l2_loss(x):
    require_dtype(x, FLOAT_DTYPES)
    return (np.sum(np.square(wide(x))) / 2).astype(x.dtype)


def _squares_terms(case):
    x = case.inputs[0]
    finite = wide(x)[np.isfinite(x)]
    return max(x.size, 1), float(np.square(finite).max(initial=0))


def _zero_fraction(x):
    return np.float32(np.mean(x == 0)) if x.size else np.float32(np.nan)


def _l2_normalize_cases(rng):
    x = float_array(rng, random_shape(rng, min_rank=1, max_rank=3))
    return Case((x,), {"axis": int(rng.integers(-x.ndim, x.ndim))}, static_or_not(rng))


def _l2_normalize(x, axis):
    require_dtype(x, FLOAT_DTYPES)
    squares = np.sum(np.square(x), axis=axis, keepdims=True)   # float32 squares overflow
    return x / np.sqrt(np.maximum(squares, x.dtype.type(1e-12)))


def _moments_cases(rng):
    x = float_array(rng, random_shape(rng, min_rank=1, max_rank=3), specials=False)
    axes = sorted({int(rng.integers(0, x.ndim)) for _ in range(int(rng.integers(1, 3)))})
    return Case((x,), {"axes": axes}, static_or_not(rng))


def _moments(x, axes):
    """Integers: TF's integer means, truncated (fuzz_math_cases._mean)."""
    require_dtype(x, NUMERIC_DTYPES)
    if x.dtype.kind in "iu":
        mean = _mean(x, tuple(axes), True)
        variance = _mean(np.square(x - mean), tuple(axes), False)
        return [np.squeeze(mean, tuple(axes)), variance]
    mean = np.mean(wide(x), axis=tuple(axes), keepdims=True)
    variance = np.mean(np.square(wide(x) - mean), axis=tuple(axes))
    return [np.squeeze(mean, tuple(axes)).astype(x.dtype), variance.astype(x.dtype)]


def _batch_norm_cases(rng):
    x = float_array(rng, random_shape(rng, min_rank=1, max_rank=4), specials=False)
    channels = x.shape[-1] if rng.random() < 0.9 else x.shape[-1] + 1
    mean, offset, scale = (random_values(rng, (channels,), x.dtype, False) for _ in range(3))
    variance = np.abs(random_values(rng, (channels,), x.dtype, False))
    return Case((x, mean, variance, offset, scale), {"variance_epsilon": 1e-3},
                static_or_not(rng))


def _batch_normalization(x, mean, variance, offset, scale, variance_epsilon):
    require_dtype(x, FLOAT_DTYPES)
    inv = 1 / np.sqrt(wide(variance) + variance_epsilon) * scale
    return (x * inv + (offset - mean * inv)).astype(x.dtype)


def _fused_batch_norm_cases(rng):
    shape = random_shape(rng, min_rank=1, max_rank=4, dims=(1, 2, 3))
    x = np.asarray(rng.standard_normal(shape), np.float32)
    channels = shape[-1] if rng.random() < 0.9 else shape[-1] + 1
    scale, offset = (np.asarray(rng.standard_normal(channels), np.float32) for _ in range(2))
    return Case((x, scale, offset), {}, static_or_not(rng))


def _fused_batch_norm(x, scale, offset, epsilon=0.001):
    """Training mode: normalised with the batch's variance; the variance
    returned (for the moving average) has Bessel's correction. NOTE: over
    every axis but the last, at any rank (towerflow's extension of TF's 4-D
    op, which its dense batch-norm layers use)."""
    if scale.shape != x.shape[-1:]:
        raise Rejected("scale must have the input's channels")
    axes = tuple(range(x.ndim - 1))
    mean = np.mean(wide(x), axis=axes)
    variance = np.mean(np.square(wide(x) - mean), axis=axes)
    count = x.size // max(x.shape[-1], 1)
    y = (wide(x) - mean) / np.sqrt(variance + epsilon) * scale + offset
    corrected = variance * count / max(count - 1, 1)
    return [y.astype(np.float32), mean.astype(np.float32), corrected.astype(np.float32)]


def _lrn_cases(rng):
    x = np.asarray(rng.standard_normal(random_shape(rng, min_rank=3, max_rank=4,
                                                    dims=(1, 2, 3, 5))), np.float32)
    return Case((x,), {"depth_radius": int(rng.integers(0, 3))}, static_or_not(rng))


def _lrn(x, depth_radius):
    if x.ndim != 4:
        raise Rejected("input must be 4-dimensional")
    squares = np.square(wide(x))
    channels = x.shape[-1]
    total = np.zeros_like(squares)
    for channel in range(channels):
        low, high = max(0, channel - depth_radius), min(channels, channel + depth_radius + 1)
        total[..., channel] = squares[..., low:high].sum(-1)
    return (wide(x) / np.power(1 + total, 0.5)).astype(np.float32)


def _gelu(x):
    require_dtype(x, FLOAT_DTYPES)
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return (0.5 * wide(x) * (1 + erf(wide(x) / math.sqrt(2)))).astype(x.dtype) \
        if x.size else x.copy()


def _gelu_tolerance(case, expected):
    """1 + erf(x / sqrt 2) cancels for negative x: erf's error of a few ulps
    becomes an absolute error of |x| times that in x * (1 + erf) / 2."""
    x = case.inputs[0]
    eps = float(np.finfo(x.dtype).eps)
    magnitude = float(np.abs(x[np.isfinite(x)]).max(initial=1.0))
    return 8 * eps, 16 * eps * magnitude


def _in_top_k_cases(rng):
    case = _rows_cases(rng, _class_labels)
    targets, predictions = case.inputs
    k = int(rng.integers(0, predictions.shape[1] + 2))
    return Case((predictions.astype(np.float32), targets), {"k": k}, case.static)


def _in_top_k(predictions, targets, k):
    """A target out of range, or a row with a non-finite value, is not in."""
    rows = []
    for row, target in zip(predictions, targets):
        finite = np.isfinite(row).all()
        inside = 0 <= target < row.size
        rows.append(bool(finite and inside and (row > row[target]).sum() < k))
    return np.array(rows, bool)

# -- convolutions and pools ---------------------------------------------------------


def _out_size(size, window, stride, padding):
    """TensorFlow's output size: VALID's is (size - window + stride) / stride
    with C's division, refused only below 0 (empty when the window exceeds
    the input by less than the stride)."""
    if padding == "SAME":
        return -(-size // stride), max((-(-size // stride) - 1) * stride + window - size, 0)
    out = int((size - window + stride) / stride)
    if out < 0:
        raise Rejected(f"Computed output size would be negative: {out}")
    return out, 0


def _windows(x, window, stride, padding, fill):
    """[n, out_h, out_w, kh, kw, c] windows of NHWC ``x``, padded with ``fill``."""
    (out_h, pad_h), (out_w, pad_w) = (_out_size(x.shape[i], window[i - 1], stride, padding)
                                      for i in (1, 2))
    padded = np.pad(wide(x), [(0, 0), (pad_h // 2, pad_h - pad_h // 2),
                              (pad_w // 2, pad_w - pad_w // 2), (0, 0)],
                    constant_values=fill)
    rows = np.arange(out_h)[:, None] * stride + np.arange(window[0])[None, :]
    cols = np.arange(out_w)[:, None] * stride + np.arange(window[1])[None, :]
    return padded[:, rows[:, None, :, None], cols[None, :, None, :], :]


def _conv_cases(rng):
    n, h, w = (int(rng.choice(dims)) for dims in ((0, 1, 2), (1, 3, 4), (1, 3, 4)))
    channels, filters = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    window = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    filter_channels = channels if rng.random() < 0.9 else channels + 1
    dtype = choose(rng, FLOAT_DTYPES)
    x = random_values(rng, (n, h, w, channels), dtype, specials=False)
    kernel = random_values(rng, window + (filter_channels, filters), dtype, specials=False)
    # NOTE: a window larger than the input only with shapes known at run time:
    # TF's shape inference refuses what its kernels take (an empty result when
    # the excess is below the stride), and the reference follows the kernels.
    static = static_or_not(rng) and window[0] <= h and window[1] <= w
    return Case((x, kernel), {"stride": int(rng.integers(1, 3)),
                              "padding": choose(rng, ("SAME", "VALID"))}, static)


def _conv2d(x, kernel, stride, padding):
    if kernel.shape[2] != x.shape[3]:
        raise Rejected("input depth must be evenly divisible by filter depth")
    patches = _windows(x, kernel.shape[:2], stride, padding, 0.0)
    return np.einsum("nhwijc,ijcf->nhwf", patches, wide(kernel)).astype(x.dtype)


def _conv_terms(case):
    x, kernel = case.inputs
    count = int(np.prod(kernel.shape[:3]))
    return count, float(np.abs(x).max(initial=0)) * float(np.abs(kernel).max(initial=0))


def _depthwise(x, kernel, stride, padding):
    if kernel.shape[2] != x.shape[3]:
        raise Rejected("input and filter must have the same depth")
    patches = _windows(x, kernel.shape[:2], stride, padding, 0.0)
    out = np.einsum("nhwijc,ijcm->nhwcm", patches, wide(kernel))
    return out.reshape(out.shape[:3] + (out.shape[3] * out.shape[4],)).astype(x.dtype)


def _pool_cases(rng):
    case = _conv_cases(rng)
    window = case.inputs[1].shape[:2]
    return Case(case.inputs[:1], {"window": window, **case.args}, case.static)


def _max_pool(x, window, stride, padding):
    return _windows(x, window, stride, padding, -np.inf).max(axis=(3, 4)).astype(x.dtype)


def _avg_pool(x, window, stride, padding):
    """SAME windows average the cells inside the input only."""
    total = _windows(x, window, stride, padding, 0.0).sum(axis=(3, 4))
    count = _windows(np.ones_like(x), window, stride, padding, 0.0).sum(axis=(3, 4))
    return (total / count).astype(x.dtype)


def _pool_builder(pool):
    def build(x, window, stride, padding):
        return pool(x, [1, *window, 1], [1, stride, stride, 1], padding)
    return build


def _conv_builder(conv):
    def build(x, kernel, stride, padding):
        return conv(x, kernel, [1, stride, stride, 1], padding)
    return build


def _tol_pool(case, expected):
    eps = np.finfo(expected.dtype).eps
    return 16 * eps, 16 * eps * float(np.abs(case.inputs[0]).max(initial=1))

# -- losses ---------------------------------------------------------------------------


def _mean_squared_error(labels, predictions):
    if labels.shape != predictions.shape:
        raise Rejected("shapes must be equal")
    squares = np.square(wide(predictions) - wide(labels))
    return np.float32(squares.mean()) if squares.size else np.float32(0)


def _mse_cases(rng):
    """Of two shapes only when static, as in _elementwise_pair_cases."""
    shape = random_shape(rng, max_rank=3)
    mismatch = rng.random() < 0.1
    other = shape + (3,) if mismatch else shape
    return Case((np.asarray(rng.standard_normal(other), np.float32),
                 random_values(rng, shape, np.float32)), {}, mismatch or static_or_not(rng))


def _mean_loss(per_example):
    def loss(labels, logits, **args):
        losses = per_example(labels, logits, **args)
        dtype = logits.dtype if logits.dtype.kind == "f" else np.float32    # to_float
        return np.asarray(wide(losses).mean() if losses.size else 0, dtype)
    return loss


def _same_shapes(per_element):
    """A loss's elements, refused (as TF's static check) for two shapes; ints
    and bools made float32 first (TF's to_float)."""
    def losses(labels, predictions, **args):
        if predictions.dtype.kind != "f":
            predictions = predictions.astype(np.float32)
        if labels.shape != predictions.shape:
            raise Rejected("labels and predictions must have the same shape")
        return per_element(labels.astype(predictions.dtype), predictions, **args)
    return losses


def _huber(labels, predictions):
    error = np.abs(predictions - labels)
    quadratic = np.minimum(error, predictions.dtype.type(1.0))
    return 0.5 * np.square(quadratic) + (error - quadratic)


def _log_loss(labels, predictions):
    eps = predictions.dtype.type(1e-7)
    return -labels * np.log(predictions + eps) - (1 - labels) * np.log(1 - predictions + eps)


def _cosine_distance(labels, predictions, axis):
    return 1 - np.sum(predictions * labels, axis=axis, keepdims=True)


def _cosine_cases(rng):
    case = _elementwise_pair_cases(rng)
    while case.inputs[1].ndim == 0:
        case = _elementwise_pair_cases(rng)
    rank = case.inputs[1].ndim
    return Case(case.inputs, {"axis": int(rng.integers(-rank, rank))}, case.static)


def _summed_terms(case):
    arrays = [wide(array) for array in case.inputs]
    magnitude = max(float(np.abs(a[np.isfinite(a)]).max(initial=0)) for a in arrays)
    return max(max(array.size for array in arrays), 1), magnitude


NN_SPECS = [
    OpSpec("nn.softmax", tf.nn.softmax, _softmax, _softmax_cases,
           tolerance=summed_tolerance(_summed_terms)),
    OpSpec("nn.log_softmax", tf.nn.log_softmax, _log_softmax, _softmax_cases,
           tolerance=summed_tolerance(_summed_terms)),
    OpSpec("nn.softmax_cross_entropy_with_logits",
           lambda labels, logits: tf.nn.softmax_cross_entropy_with_logits(
               labels=labels, logits=logits), _softmax_xent,
           lambda rng: _rows_cases(rng, _distributions),
           tolerance=summed_tolerance(_summed_terms)),
    OpSpec("nn.softmax_cross_entropy_with_logits_v2",
           lambda labels, logits: tf.nn.softmax_cross_entropy_with_logits_v2(
               labels=labels, logits=logits), _softmax_xent,
           lambda rng: _rows_cases(rng, _distributions),
           tolerance=summed_tolerance(_summed_terms)),
    OpSpec("nn.sparse_softmax_cross_entropy_with_logits",
           lambda labels, logits: tf.nn.sparse_softmax_cross_entropy_with_logits(
               labels=labels, logits=logits), _sparse_xent,
           lambda rng: _rows_cases(rng, _class_labels),
           tolerance=summed_tolerance(_summed_terms)),
    OpSpec("nn.sigmoid_cross_entropy_with_logits",
           lambda labels, logits: tf.nn.sigmoid_cross_entropy_with_logits(
               labels=labels, logits=logits), _sigmoid_xent, _elementwise_pair_cases,
           tolerance=summed_tolerance(_summed_terms)),
    OpSpec("nn.weighted_cross_entropy_with_logits", tf.nn.weighted_cross_entropy_with_logits,
           _weighted_xent, _weighted_cases, tolerance=summed_tolerance(_summed_terms)),
    OpSpec("nn.bias_add", tf.nn.bias_add, _bias_add, _bias_add_cases),
    OpSpec("nn.l2_loss", tf.nn.l2_loss, _l2_loss, _one_float_cases,
           tolerance=summed_tolerance(_squares_terms)),
    OpSpec("nn.zero_fraction", tf.nn.zero_fraction, _zero_fraction, _one_float_cases),
    OpSpec("nn.l2_normalize", tf.nn.l2_normalize, _l2_normalize, _l2_normalize_cases,
           tolerance=summed_tolerance(_squares_terms)),
    OpSpec("nn.moments", tf.nn.moments, _moments, _moments_cases,
           tolerance=summed_tolerance(_squares_terms)),
    OpSpec("nn.batch_normalization", tf.nn.batch_normalization, _batch_normalization,
           _batch_norm_cases, tolerance=summed_tolerance(_summed_terms)),
    OpSpec("nn.fused_batch_norm", lambda x, scale, offset: list(
        tf.nn.fused_batch_norm(x, scale, offset)), _fused_batch_norm,
           _fused_batch_norm_cases, tolerance=summed_tolerance(_summed_terms)),
    OpSpec("nn.lrn", tf.nn.lrn, _lrn, _lrn_cases, tolerance=summed_tolerance(_squares_terms)),
    OpSpec("nn.local_response_normalization", tf.nn.local_response_normalization, _lrn,
           _lrn_cases, tolerance=summed_tolerance(_squares_terms)),
    OpSpec("nn.gelu", tf.nn.gelu, _gelu, _one_float_cases, tolerance=_gelu_tolerance),
    OpSpec("nn.in_top_k", tf.nn.in_top_k, _in_top_k, _in_top_k_cases),
    OpSpec("nn.conv2d", _conv_builder(tf.nn.conv2d), _conv2d, _conv_cases,
           tolerance=summed_tolerance(_conv_terms)),
    OpSpec("nn.depthwise_conv2d", _conv_builder(tf.nn.depthwise_conv2d), _depthwise,
           _conv_cases, tolerance=summed_tolerance(_conv_terms)),
    OpSpec("nn.depthwise_conv2d_native", _conv_builder(tf.nn.depthwise_conv2d_native),
           _depthwise, _conv_cases, tolerance=summed_tolerance(_conv_terms)),
    OpSpec("nn.max_pool", _pool_builder(tf.nn.max_pool), _max_pool, _pool_cases),
    OpSpec("nn.avg_pool", _pool_builder(tf.nn.avg_pool), _avg_pool, _pool_cases,
           tolerance=_tol_pool),
    OpSpec("losses.mean_squared_error", tf.losses.mean_squared_error, _mean_squared_error,
           _mse_cases, tolerance=summed_tolerance(_squares_terms)),
    OpSpec("losses.sparse_softmax_cross_entropy", tf.losses.sparse_softmax_cross_entropy,
           _mean_loss(_sparse_xent), lambda rng: _rows_cases(rng, _class_labels),
           tolerance=summed_tolerance(_summed_terms)),
    OpSpec("losses.softmax_cross_entropy", tf.losses.softmax_cross_entropy,
           _mean_loss(_softmax_xent), lambda rng: _rows_cases(rng, _distributions),
           tolerance=summed_tolerance(_summed_terms)),
    OpSpec("losses.sigmoid_cross_entropy", tf.losses.sigmoid_cross_entropy,
           _mean_loss(_sigmoid_xent), _elementwise_pair_cases,
           tolerance=summed_tolerance(_summed_terms)),
    OpSpec("losses.absolute_difference", tf.losses.absolute_difference,
           _mean_loss(_same_shapes(lambda y, p: np.abs(p - y))), _elementwise_pair_cases,
           tolerance=summed_tolerance(_summed_terms)),
    OpSpec("losses.huber_loss", tf.losses.huber_loss, _mean_loss(_same_shapes(_huber)),
           _elementwise_pair_cases, tolerance=summed_tolerance(_summed_terms)),
    OpSpec("losses.hinge_loss", tf.losses.hinge_loss, _mean_loss(_same_shapes(
        lambda y, p: np.maximum(0, 1 - (2 * y - 1) * p))), _elementwise_pair_cases,
           tolerance=summed_tolerance(_summed_terms)),
    OpSpec("losses.log_loss", tf.losses.log_loss, _mean_loss(_same_shapes(_log_loss)),
           _elementwise_pair_cases, tolerance=summed_tolerance(_summed_terms)),
    OpSpec("losses.cosine_distance", tf.losses.cosine_distance,
           _mean_loss(_same_shapes(_cosine_distance)), _cosine_cases,
           tolerance=summed_tolerance(_summed_terms)),
    OpSpec("losses.compute_weighted_loss", tf.losses.compute_weighted_loss,
           lambda x: np.asarray(wide(x).mean() if x.size else 0, x.dtype), _one_float_cases,
           tolerance=summed_tolerance(_summed_terms)),
]
