"""The op fuzzer's table for the asserts and numerics checks (the checked
tensor passed on after them, TensorFlow's control-dependency idiom),
clipping, and the transposed and separable convolutions.
"""

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
from fuzz_math_cases import draw_dtype, require_dtype
from fuzz_nn_cases import _conv2d, _depthwise, _out_size, _windows

import towerflow as tf

# -- asserts and numerics checks ----------------------------------------------------------


def _after(check_of):
    """A build: ``x`` passed on after the check (TF's control-dependency idiom)."""
    def build(*tensors, **args):
        with tf.control_dependencies([check_of(*tensors, **args)]):
            return tf.identity(tensors[0])
    return build


def _pair_cases(rng):
    shape = random_shape(rng, max_rank=2)
    dtype = choose(rng, NUMERIC_DTYPES)
    x = random_values(rng, shape, dtype, specials=False)
    y = x.copy() if rng.random() < 0.5 else random_values(rng, shape, dtype, specials=False)
    return Case((x, y), {}, static_or_not(rng))


def _comparison(numpy_fn):
    def reference(x, y):
        if not np.all(numpy_fn(x, y)):
            raise Rejected("assertion failed")
        return x.copy()
    return reference


def _sign_cases(rng):
    x = random_values(rng, random_shape(rng, max_rank=2), choose(rng, NUMERIC_DTYPES), False)
    return Case((x,), {}, static_or_not(rng))


def _sign_check(numpy_fn):
    def reference(x):
        if not np.all(numpy_fn(x, 0)):
            raise Rejected("assertion failed")
        return x.copy()
    return reference


def _rank_cases(rng):
    x = random_values(rng, random_shape(rng), np.float32, False)
    return Case((x,), {"rank": int(rng.integers(0, 5))}, static_or_not(rng))


def _assert_rank(x, rank):
    if x.ndim != rank:
        raise Rejected("Tensor must have rank")
    return x.copy()


def _assert_cases(rng):
    x = random_values(rng, random_shape(rng, max_rank=2), choose(rng, NUMERIC_DTYPES), False)
    condition = np.asarray(rng.random() < 0.5)
    if rng.random() < 0.1:
        condition = np.ones(2, bool)            # not a scalar: TF refuses it
    return Case((x, condition), {}, static_or_not(rng))


def _assert_then(x, condition):
    with tf.control_dependencies([tf.Assert(condition, [x])]):
        return tf.identity(x)


def _assert(x, condition):
    if condition.ndim or not condition:
        raise Rejected("assertion failed (or a condition that is not a scalar)")
    return x.copy()


def _numerics_cases(rng):
    x = random_values(rng, random_shape(rng), draw_dtype(rng, FLOAT_DTYPES))
    return Case((x,), {"message": "checked"}, static_or_not(rng))


def _check_numerics(x, message):
    require_dtype(x, FLOAT_DTYPES)
    if not np.all(np.isfinite(x)):
        raise Rejected("Tensor had NaN or Inf values")
    return x.copy()

# -- clipping -------------------------------------------------------------------------


def _clip_norm_cases(rng):
    x = random_values(rng, random_shape(rng), draw_dtype(rng, FLOAT_DTYPES), False)
    return Case((x,), {"clip_norm": float(choose(rng, (0.5, 1.0, 10.0)))}, static_or_not(rng))


def _clip_by_norm(t, clip_norm):
    require_dtype(t, FLOAT_DTYPES)
    norm = np.sqrt(np.sum(np.square(t.astype(np.float64))))
    return (t * clip_norm / max(norm, clip_norm)).astype(t.dtype)


def _norm_list_cases(rng):
    dtype = choose(rng, FLOAT_DTYPES)
    arrays = tuple(random_values(rng, random_shape(rng, max_rank=2), dtype, False)
                   for _ in range(int(rng.integers(1, 4))))
    return Case(arrays, {}, static_or_not(rng))


def _global_norm(*ts):
    return np.asarray(np.sqrt(sum(np.sum(np.square(t.astype(np.float64))) for t in ts)),
                      ts[0].dtype)


def _clip_by_global_norm(*ts):
    norm = _global_norm(*ts).astype(np.float64)
    scale = 1.0 / max(norm, 1.0)
    return [(t * scale).astype(t.dtype) for t in ts] + [norm.astype(ts[0].dtype)]


def _squares_terms(case):
    total = sum(array.size for array in case.inputs)
    return max(total, 1), max(float(np.square(a).max(initial=0)) for a in case.inputs)

# -- transposed and separable convolutions ---------------------------------------------


def _transpose_cases(rng):
    """conv2d_transpose(dy, w, x_shape): dy the gradient of a conv2d of an x of
    ``output_shape``; one time in ten that shape does not give dy's size."""
    n, h, w = int(rng.choice((0, 1, 2))), int(rng.integers(1, 5)), int(rng.integers(1, 5))
    channels, filters = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    window = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    stride, padding = int(rng.integers(1, 3)), choose(rng, ("SAME", "VALID"))
    if window[0] > h or window[1] > w:
        padding = "SAME"
    out_h, out_w = (_out_size(size, k, stride, padding)[0] for size, k in zip((h, w), window))
    out_h += int(rng.random() < 0.1)
    dtype = choose(rng, FLOAT_DTYPES)
    grad = random_values(rng, (n, out_h, out_w, filters), dtype, False)
    kernel = random_values(rng, window + (channels, filters), dtype, False)
    return Case((grad, kernel), {"output_shape": [n, h, w, channels], "stride": stride,
                                 "padding": padding}, True)


def _conv2d_transpose(grad, kernel, output_shape, stride, padding):
    """The gradient of conv2d with respect to its input: each output window
    spreads its gradient back over the input cells it read."""
    n, h, w, channels = output_shape
    (out_h, pad_h), (out_w, pad_w) = (_out_size(size, k, stride, padding)
                                      for size, k in zip((h, w), kernel.shape[:2]))
    if grad.shape[1:3] != (out_h, out_w):
        raise Rejected("Conv2DCustomBackpropInput: Size of out_backprop doesn't match")
    padded = np.zeros((n, h + pad_h, w + pad_w, channels))
    for row in range(out_h):
        for col in range(out_w):
            for i in range(kernel.shape[0]):
                for j in range(kernel.shape[1]):
                    padded[:, row * stride + i, col * stride + j] += \
                        grad[:, row, col].astype(np.float64) @ kernel[i, j].T
    top, left = pad_h // 2, pad_w // 2
    return padded[:, top:top + h, left:left + w].astype(grad.dtype)


def _transpose_terms(case):
    grad, kernel = case.inputs
    return int(np.prod(kernel.shape)), float(np.abs(grad).max(initial=0)) * float(
        np.abs(kernel).max(initial=0))


def _backprop_filter_cases(rng):
    case = _transpose_cases(rng)
    grad, kernel = case.inputs
    x = random_values(rng, tuple(case.args["output_shape"]), grad.dtype, False)
    return Case((x, grad), {"filter_sizes": list(kernel.shape), "stride": case.args["stride"],
                            "padding": case.args["padding"]}, True)


def _backprop_filter(x, grad, filter_sizes, stride, padding):
    if tuple(grad.shape[1:3]) != tuple(_out_size(size, k, stride, padding)[0] for size, k in
                                       zip(x.shape[1:3], filter_sizes[:2])):
        raise Rejected("Conv2DCustomBackpropFilter: Size of out_backprop doesn't match")
    patches = _windows(x, filter_sizes[:2], stride, padding, 0.0)
    return np.einsum("nhwijc,nhwf->ijcf", patches, grad.astype(np.float64)).astype(x.dtype)


def _filter_terms(case):
    x, grad = case.inputs
    return max(grad.shape[0] * grad.shape[1] * grad.shape[2], 1), \
        float(np.abs(x).max(initial=0)) * float(np.abs(grad).max(initial=0))


def _separable_cases(rng):
    n, h, w = (int(rng.choice(dims)) for dims in ((0, 1, 2), (2, 3), (2, 3)))
    channels, multiplier = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    filters = int(rng.integers(1, 3))
    dtype = choose(rng, FLOAT_DTYPES)
    x = random_values(rng, (n, h, w, channels), dtype, False)
    depthwise = random_values(rng, (2, 2, channels, multiplier), dtype, False)
    inner = channels * multiplier + int(rng.random() < 0.1)
    pointwise = random_values(rng, (1, 1, inner, filters), dtype, False)
    return Case((x, depthwise, pointwise), {"padding": choose(rng, ("SAME", "VALID"))}, True)


def _separable(x, depthwise, pointwise, padding):
    return _conv2d(_depthwise(x, depthwise, 1, padding), pointwise, 1, "VALID")


def _separable_terms(case):
    x, depthwise, pointwise = case.inputs
    scale = float(np.abs(x).max(initial=0)) * float(np.abs(depthwise).max(initial=0)) * \
        float(np.abs(pointwise).max(initial=0))
    return depthwise[..., 0].size * pointwise.shape[2], scale


def _flat_clip(tensors):
    clipped, norm = tf.clip_by_global_norm(list(tensors), 1.0)
    return list(clipped) + [norm]


def _spec(name, build, reference, cases, **options):
    return OpSpec(name, build, reference, cases, **options)


CHECK_CONV_SPECS = [
    _spec("assert_equal", _after(tf.assert_equal), _comparison(np.equal), _pair_cases),
    _spec("assert_none_equal", _after(tf.assert_none_equal), _comparison(np.not_equal),
          _pair_cases),
    _spec("assert_less", _after(tf.assert_less), _comparison(np.less), _pair_cases),
    _spec("assert_less_equal", _after(tf.assert_less_equal), _comparison(np.less_equal),
          _pair_cases),
    _spec("assert_greater", _after(tf.assert_greater), _comparison(np.greater), _pair_cases),
    _spec("assert_greater_equal", _after(tf.assert_greater_equal),
          _comparison(np.greater_equal), _pair_cases),
    _spec("assert_positive", _after(tf.assert_positive), _sign_check(np.greater),
          _sign_cases),
    _spec("assert_negative", _after(tf.assert_negative), _sign_check(np.less), _sign_cases),
    _spec("assert_non_negative", _after(tf.assert_non_negative),
          _sign_check(np.greater_equal), _sign_cases),
    _spec("assert_non_positive", _after(tf.assert_non_positive), _sign_check(np.less_equal),
          _sign_cases),
    _spec("assert_rank", _after(tf.assert_rank), _assert_rank, _rank_cases),
    _spec("Assert", lambda x, condition: _assert_then(x, condition), _assert,
          _assert_cases),
    _spec("check_numerics", tf.check_numerics, _check_numerics, _numerics_cases),
    _spec("verify_tensor_all_finite",
          lambda x, message: tf.verify_tensor_all_finite(x, message), _check_numerics,
          _numerics_cases),
    _spec("clip_by_norm", tf.clip_by_norm, _clip_by_norm, _clip_norm_cases,
          tolerance=summed_tolerance(_squares_terms)),
    _spec("global_norm", lambda *ts: tf.global_norm(list(ts)), _global_norm,
          _norm_list_cases, tolerance=summed_tolerance(_squares_terms)),
    _spec("clip_by_global_norm", lambda *ts: _flat_clip(ts), _clip_by_global_norm,
          _norm_list_cases, tolerance=summed_tolerance(_squares_terms)),
    _spec("nn.conv2d_transpose",
          lambda grad, kernel, output_shape, stride, padding: tf.nn.conv2d_transpose(
              grad, kernel, output_shape, [1, stride, stride, 1], padding),
          _conv2d_transpose, _transpose_cases, tolerance=summed_tolerance(_transpose_terms)),
    _spec("nn.conv2d_backprop_input",
          lambda grad, kernel, output_shape, stride, padding: tf.nn.conv2d_backprop_input(
              output_shape, kernel, grad, [1, stride, stride, 1], padding),
          _conv2d_transpose, _transpose_cases, tolerance=summed_tolerance(_transpose_terms)),
    _spec("nn.conv2d_backprop_filter",
          lambda x, grad, filter_sizes, stride, padding: tf.nn.conv2d_backprop_filter(
              x, filter_sizes, grad, [1, stride, stride, 1], padding),
          _backprop_filter, _backprop_filter_cases, tolerance=summed_tolerance(_filter_terms)),
    _spec("nn.separable_conv2d",
          lambda x, depthwise, pointwise, padding: tf.nn.separable_conv2d(
              x, depthwise, pointwise, [1, 1, 1, 1], padding),
          _separable, _separable_cases, tolerance=summed_tolerance(_separable_terms)),
]
