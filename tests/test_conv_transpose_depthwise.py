"""tf.nn.conv2d_transpose, conv2d_backprop_input / _filter, depthwise_conv2d(_native)
and separable_conv2d:
forward against NumPy references written from TF's definitions (and PyTorch
where installed) on every device of op_device, gradients w.r.t. every input
against float64 finite differences, and TF 1.15's shape-check errors."""

import numpy as np
import pytest
from gradient_check import check_gradients, grad_case
from gradient_check import floats as floats64
from test_ops import case, check_run_against_numpy, floats

import towerflow as tf

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed: "
                                 "the NumPy references stand alone")


def same_pads(size, window, stride):
    """(out, pad_before) by TF's SAME rule."""
    out = -(-size // stride)
    return out, max((out - 1) * stride + window - size, 0) // 2


def window_taps(out_hw, window, stride, padding, in_hw):
    """(i, j, a, b, row, col) for every output pixel (i, j) of a conv2d and tap
    (a, b) of its window that reads an input pixel (row, col) (not padding)."""
    pads = [same_pads(size, k, stride)[1] if padding == "SAME" else 0
            for size, k in zip(in_hw, window)]
    for i in range(out_hw[0]):
        for j in range(out_hw[1]):
            for a in range(window[0]):
                for b in range(window[1]):
                    row, col = i * stride + a - pads[0], j * stride + b - pads[1]
                    if 0 <= row < in_hw[0] and 0 <= col < in_hw[1]:
                        yield i, j, a, b, row, col


def transpose_reference(value, w, out_shape, stride, padding):
    """conv2d_transpose by its definition: every value pixel scatters its
    w[a, b] @ value[i, j] to output pixel (i * stride + a - pad, j * stride + b - pad)."""
    out = np.zeros(out_shape, np.float64)
    for i, j, a, b, row, col in window_taps(value.shape[1:3], w.shape[:2], stride, padding,
                                            out_shape[1:3]):
        out[:, row, col] += value[:, i, j] @ w[a, b].T
    return out.astype(value.dtype)


def filter_grad_reference(x, out_backprop, filter_sizes, stride, padding):
    """conv2d's filter gradient by its definition: dw[a, b] sums, over every
    output pixel (i, j), the input pixel its tap (a, b) read (TF's zero-padded
    input) times that pixel's gradient."""
    dw = np.zeros(filter_sizes, np.float64)
    for i, j, a, b, row, col in window_taps(out_backprop.shape[1:3], filter_sizes[:2], stride,
                                            padding, x.shape[1:3]):
        dw[a, b] += x[:, row, col].T @ out_backprop[:, i, j]
    return dw.astype(x.dtype)


def depthwise_reference(x, w, stride, padding, rate=(1, 1)):
    """Output channel c * M + m = sum over taps of x[.., c] * w[a, b, c, m], on
    TF's zero-padded input, the window dilated by ``rate``."""
    kh, kw, channels, multiplier = w.shape
    windows = [(k - 1) * r + 1 for k, r in zip((kh, kw), rate)]
    padded, outs = x.astype(np.float64), []
    for axis, (size, window) in enumerate(zip(x.shape[1:3], windows), start=1):
        if padding == "SAME":
            out = -(-size // stride)
            total = max((out - 1) * stride + window - size, 0)
            pad = [(0, 0)] * 4
            pad[axis] = (total // 2, total - total // 2)
            padded = np.pad(padded, pad)
        else:
            out = (size - window) // stride + 1
        outs.append(out)
    y = np.zeros((x.shape[0], *outs, channels, multiplier))
    for i in range(outs[0]):
        for j in range(outs[1]):
            for a in range(kh):
                for b in range(kw):
                    pixel = padded[:, i * stride + a * rate[0], j * stride + b * rate[1]]
                    y[:, i, j] += pixel[..., None] * w[a, b]
    return y.reshape(x.shape[0], *outs, channels * multiplier).astype(x.dtype)


def separable_reference(x, depthwise_w, pointwise_w, stride, padding):
    depthwise = depthwise_reference(x, depthwise_w, stride, padding).astype(np.float64)
    return (depthwise @ pointwise_w[0, 0]).astype(x.dtype)


def transpose_case(name, value_shape, w_shape, out_shape, stride, padding):
    return case(name, lambda v, w: tf.nn.conv2d_transpose(
                    v, w, out_shape, [1, stride, stride, 1], padding),
                lambda v, w: transpose_reference(v, w, out_shape, stride, padding),
                floats(*value_shape), floats(*w_shape), needs_known_shape=True)


def backprop_input_case(name, grad_shape, w_shape, input_sizes, stride, padding):
    """conv2d_backprop_input is conv2d_transpose's op, its arguments in TF's order."""
    return case(name, lambda g, w: tf.nn.conv2d_backprop_input(
                    input_sizes, w, g, [1, stride, stride, 1], padding),
                lambda g, w: transpose_reference(g, w, input_sizes, stride, padding),
                floats(*grad_shape), floats(*w_shape), needs_known_shape=True)


def backprop_filter_case(name, x_shape, grad_shape, filter_sizes, stride, padding):
    return case(name, lambda x, g: tf.nn.conv2d_backprop_filter(
                    x, filter_sizes, g, [1, stride, stride, 1], padding),
                lambda x, g: filter_grad_reference(x, g, filter_sizes, stride, padding),
                floats(*x_shape), floats(*grad_shape), needs_known_shape=True)


def depthwise_case(name, x_shape, w_shape, stride, padding, rate=None):
    return case(name, lambda x, w: tf.nn.depthwise_conv2d(
                    x, w, [1, stride, stride, 1], padding, rate=rate),
                lambda x, w: depthwise_reference(x, w, stride, padding, rate or (1, 1)),
                floats(*x_shape), floats(*w_shape), needs_known_shape=True)


CASES = [
    transpose_case("conv2d_transpose_same_stride2", (2, 3, 4, 3), (3, 3, 2, 3),
                   [2, 6, 8, 2], 2, "SAME"),
    transpose_case("conv2d_transpose_same_stride2_odd", (1, 3, 3, 2), (3, 3, 4, 2),
                   [1, 5, 6, 4], 2, "SAME"),
    transpose_case("conv2d_transpose_valid_stride1", (2, 3, 3, 2), (2, 3, 3, 2),
                   [2, 4, 5, 3], 1, "VALID"),
    transpose_case("conv2d_transpose_valid_stride2", (1, 4, 2, 3), (3, 3, 2, 3),
                   [1, 9, 5, 2], 2, "VALID"),
    transpose_case("conv2d_transpose_1x1", (2, 3, 3, 4), (1, 1, 2, 4),
                   [2, 3, 3, 2], 1, "SAME"),
    # stride > kernel leaves output pixels no input reaches; output sizes TF
    # accepts beyond the smallest (VALID 10 of 3 inputs, stride 3, kernel 2)
    transpose_case("conv2d_transpose_valid_stride_over_kernel", (1, 3, 3, 2), (2, 2, 3, 2),
                   [1, 10, 9, 3], 3, "VALID"),
    transpose_case("conv2d_transpose_1x1_stride2_valid", (2, 4, 3, 3), (1, 1, 2, 3),
                   [2, 8, 6, 2], 2, "VALID"),
    backprop_input_case("conv2d_backprop_input_same_stride2", (2, 3, 4, 2), (3, 3, 3, 2),
                        [2, 6, 8, 3], 2, "SAME"),
    backprop_input_case("conv2d_backprop_input_valid_stride1", (1, 3, 3, 4), (2, 3, 2, 4),
                        [1, 4, 5, 2], 1, "VALID"),
    backprop_filter_case("conv2d_backprop_filter_same_stride2", (2, 6, 7, 3), (2, 3, 4, 2),
                         [3, 3, 3, 2], 2, "SAME"),
    backprop_filter_case("conv2d_backprop_filter_valid_stride1", (1, 5, 6, 2), (1, 4, 4, 3),
                         [2, 3, 2, 3], 1, "VALID"),
    depthwise_case("depthwise_valid_stride_over_kernel", (1, 8, 7, 2), (2, 2, 2, 2), 3,
                   "VALID"),
    depthwise_case("depthwise_1x1_stride2", (1, 5, 5, 2), (1, 1, 2, 3), 2, "SAME"),
    depthwise_case("depthwise_same_stride1", (2, 5, 6, 3), (3, 3, 3, 2), 1, "SAME"),
    depthwise_case("depthwise_same_stride2", (2, 5, 6, 3), (3, 2, 3, 1), 2, "SAME"),
    depthwise_case("depthwise_valid_stride2", (1, 7, 6, 2), (3, 3, 2, 3), 2, "VALID"),
    depthwise_case("depthwise_rate2_same", (1, 6, 7, 2), (3, 3, 2, 2), 1, "SAME", [2, 2]),
    depthwise_case("depthwise_rate_valid", (2, 7, 6, 2), (2, 3, 2, 1), 1, "VALID", [3, 2]),
    case("depthwise_conv2d_native", lambda x, w: tf.nn.depthwise_conv2d_native(
             x, w, [1, 2, 1, 1], "VALID"),
         lambda x, w: depthwise_reference(x, w, 1, "VALID")[:, ::2],
         floats(2, 6, 5, 3), floats(2, 2, 3, 2), needs_known_shape=True),
    case("separable_conv2d", lambda x, d, p: tf.nn.separable_conv2d(
             x, d, p, [1, 1, 1, 1], "SAME"),
         lambda x, d, p: separable_reference(x, d, p, 1, "SAME"),
         floats(2, 5, 5, 3), floats(3, 3, 3, 2), floats(1, 1, 6, 4), needs_known_shape=True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_forward_matches_numpy(case, op_device, rng, capsys):
    check_run_against_numpy(case, rng, op_device, capsys.readouterr)


def test_output_shape_may_be_a_tensor_with_a_run_time_batch(op_device, rng):
    """TF1 programs write output_shape as tf.stack([tf.shape(x)[0], h, w, c])
    or tf.shape(images) for a batch known only when the graph runs."""
    value, w = floats(3, 2, 2, 4)(rng), floats(3, 3, 2, 4)(rng)
    with tf.device(op_device):
        v = tf.placeholder(tf.float32, [None, 2, 2, 4])
        images = tf.placeholder(tf.float32, [None, 4, 4, 2])
        stacked = tf.nn.conv2d_transpose(v, w, tf.stack([tf.shape(v)[0], 4, 4, 2]),
                                         [1, 2, 2, 1])
        like = tf.nn.conv2d_transpose(v, w, tf.shape(images), [1, 2, 2, 1])
        constant = tf.nn.conv2d_transpose(v, w, tf.constant([3, 4, 4, 2]), [1, 2, 2, 1])
    assert stacked.shape.as_list() == like.shape.as_list() == [None, 4, 4, 2]
    assert constant.shape.as_list() == [3, 4, 4, 2]
    with tf.Session() as session:
        results = session.run([stacked, like, constant], {v: value})
    expected = transpose_reference(value, w, (3, 4, 4, 2), 2, "SAME")
    for result in results:
        np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("build, pattern", [
    (lambda v, w: tf.nn.conv2d_transpose(v, w, [2, 6, 6], [1, 2, 2, 1]),
     r"output_shape must have shape \(4,\), got \(3,\)"),
    (lambda v, w: tf.nn.conv2d_transpose(v, w, [2, 6, 6, 5], [1, 2, 2, 1]),
     "output_shape does not match filter's output channels, 5 != 2"),
    (lambda v, w: tf.nn.conv2d_transpose(v, tf.zeros([3, 3, 2, 4]), [2, 6, 6, 2], 2),
     "input channels does not match filter's input channels, 3 != 4"),
    (lambda v, w: tf.nn.conv2d_transpose(v, w, [2, 8, 6, 2], [1, 2, 2, 1]),
     ("Conv2DCustomBackpropInput: Size of out_backprop doesn't match computed: "
      "actual = 3, computed = 4 spatial_dim: 1 input: 8 filter: 3 output: 3 stride: 2")),
    (lambda v, w: tf.nn.conv2d_transpose(v, w, [4, 6, 6, 2], [1, 2, 2, 1]),
     ("input and out_backprop must have the same batch size, input batch: 4 "
      "outbackprop batch: 2")),
    (lambda v, w: tf.nn.conv2d_transpose(v, w, [2, 6, 6, 2], [1, 2, 2, 1], "FULL"),
     "padding must be 'SAME' or 'VALID', got 'FULL'"),
    (lambda v, w: tf.nn.conv2d_backprop_input([2, 6, 6, 3], w, v, [1, 2, 2, 1], "SAME"),
     "Conv2DCustomBackpropInput: input depth must be evenly divisible by filter depth"),
    (lambda v, w: tf.nn.conv2d_backprop_input([2, 6, 6, 4], w, v, [1, 2, 2, 1], "SAME"),
     r"Conv2DCustomBackpropInput: grouped convolutions \(input depth 4, filter depth 2\)"),
    (lambda v, w: tf.nn.conv2d_backprop_input([2, 6, 6, 3], tf.zeros([3, 3, 3, 2]), v,
                                              [1, 2, 2, 1], "SAME"),
     "Conv2DCustomBackpropInput: filter and out_backprop must have the same out_depth"),
    (lambda v, w: tf.nn.conv2d_backprop_input([2, 7, 6, 3], tf.zeros([3, 3, 3, 3]), v,
                                              [1, 1, 1, 1], "SAME"),
     ("Conv2DCustomBackpropInput: Size of out_backprop doesn't match computed: "
      "actual = 3, computed = 7 spatial_dim: 1 input: 7 filter: 3 output: 3 stride: 1")),
    (lambda v, w: tf.nn.conv2d_backprop_input([2, 6, 6], w, v, [1, 2, 2, 1], "SAME"),
     r"input_sizes must have shape \(4,\), got \(3,\)"),
    (lambda v, w: tf.nn.conv2d_backprop_filter(v, [3, 3, 2, 3], v, [1, 1, 1, 1], "SAME"),
     "Conv2DCustomBackpropFilter: input depth must be evenly divisible by filter depth"),
    (lambda v, w: tf.nn.conv2d_backprop_filter(v, [3, 3, 3, 2], v, [1, 1, 1, 1], "SAME"),
     "Conv2DCustomBackpropFilter: filter and out_backprop must have the same out_depth"),
    (lambda v, w: tf.nn.conv2d_backprop_filter(v, [3, 3, 3, 3], v, [1, 2, 2, 1], "SAME"),
     ("Conv2DCustomBackpropFilter: Size of out_backprop doesn't match computed: "
      "actual = 3, computed = 2 spatial_dim: 1 input: 3 filter: 3 output: 3 stride: 2")),
    (lambda v, w: tf.nn.conv2d_backprop_filter(v, [3, 3, 3, 3], tf.zeros([4, 3, 3, 3]),
                                               [1, 1, 1, 1], "SAME"),
     ("Conv2DCustomBackpropFilter: input and out_backprop must have the same batch size, "
      "input batch: 2 outbackprop batch: 4")),
    (lambda v, w: tf.nn.conv2d_backprop_filter(
        v, tf.placeholder(tf.int32, [4]), v, [1, 1, 1, 1], "SAME"),
     "conv2d_backprop_filter needs all its sizes known when the graph is built"),
    (lambda v, w: tf.nn.conv2d_backprop_filter(
        v, [3, 3, 3, 3], tf.placeholder(tf.float32, [2, None, None, 3]), [1, 1, 1, 1],
        "SAME"),
     "conv2d_backprop_filter needs the height and width of input and out_backprop known"),
    (lambda v, w: tf.nn.depthwise_conv2d(tf.zeros([1, 5, 5, 4]), w, [1, 1, 1, 1], "SAME"),
     "input has 4 channels but the filter expects 2"),
    (lambda v, w: tf.nn.depthwise_conv2d(tf.zeros([1, 5, 5, 2]), w, [1, 2, 2, 1], "SAME",
                                         rate=2),
     "strides > 1 not supported in conjunction with dilation_rate > 1"),
    (lambda v, w: tf.nn.separable_conv2d(tf.zeros([1, 5, 5, 2]), w, tf.zeros([3, 3, 6, 2]),
                                         [1, 1, 1, 1], "SAME"),
     r"pointwise_filter must be \[1, 1, in_channels \* channel_multiplier, out_channels\]"),
])
def test_bad_arguments_give_tf_errors(build, pattern):
    value, w = tf.zeros([2, 3, 3, 3]), tf.zeros([3, 3, 2, 3])
    with pytest.raises(ValueError, match=pattern):
        build(value, w)


def test_a_fed_batch_unlike_output_shapes_is_an_invalid_argument(op_device):
    with tf.device(op_device):
        v = tf.placeholder(tf.float32, [None, 3, 3, 3])
        y = tf.nn.conv2d_transpose(v, tf.zeros([3, 3, 2, 3]), [2, 6, 6, 2], [1, 2, 2, 1])
    with tf.Session() as session, pytest.raises(
            tf.errors.InvalidArgumentError,
            match="same batch size, input batch: 2 outbackprop batch: 5"):
        session.run(y, {v: np.zeros((5, 3, 3, 3), np.float32)})


@pytest.mark.parametrize("channels", [3, 16], ids=["im2col", "winograd"])
def test_the_backprop_ops_are_conv2d_s_own_gradients(channels, rng):
    """The same kernels as tf.gradients of conv2d, so the same bits; with 16
    channels (3x3, stride 1) they run by Winograd, within its float32 bound
    (2e-5 of the largest value, backends/winograd.py) of the float64 sums."""
    x, w = rng.standard_normal((2, 8, 8, channels)), rng.standard_normal((3, 3, channels, 4))
    dy = rng.standard_normal((2, 8, 8, 4))
    xt, wt, dyt = (tf.constant(array.astype(np.float32)) for array in (x, w, dy))
    grads = tf.gradients(tf.nn.conv2d(xt, wt, [1, 1, 1, 1], "SAME"), [xt, wt], grad_ys=dyt)
    ours = [tf.nn.conv2d_backprop_input([2, 8, 8, channels], wt, dyt, [1, 1, 1, 1], "SAME"),
            tf.nn.conv2d_backprop_filter(xt, [3, 3, channels, 4], dyt, [1, 1, 1, 1], "SAME")]
    with tf.Session() as session:
        expected, got = session.run([grads, ours])
    references = [transpose_reference(dy, w, (2, 8, 8, channels), 1, "SAME"),
                  filter_grad_reference(x, dy, (3, 3, channels, 4), 1, "SAME")]
    for result, gradient, reference in zip(got, expected, references):
        np.testing.assert_array_equal(result, gradient)
        assert np.abs(result - reference).max() <= 2e-5 * np.abs(reference).max()


@pytest.mark.parametrize("fed_shape, pattern", [
    ((1, 5, 5, 3), ("Size of out_backprop doesn't match computed: actual = 5, computed = 3 "
                    "spatial_dim: 1 input: 6 filter: 3 output: 5 stride: 2")),
    ((1, 3, 5, 3), ("Size of out_backprop doesn't match computed: actual = 5, computed = 4 "
                    "spatial_dim: 2 input: 8 filter: 3 output: 5 stride: 2")),
    ((1, 3, 4, 2), "filter and out_backprop must have the same out_depth")])
def test_a_fed_out_backprop_of_other_sizes_is_an_invalid_argument(op_device, fed_shape,
                                                                  pattern):
    """Sizes the graph left open are checked when the gradient is fed, as TF's
    kernel checks them (before, the first rows were read as if they fit)."""
    with tf.device(op_device):
        grad = tf.placeholder(tf.float32, [None, None, None, None])
        dx = tf.nn.conv2d_backprop_input([1, 6, 8, 2], tf.zeros([3, 3, 2, 3]), grad,
                                         [1, 2, 2, 1], "SAME")
    with tf.Session() as session:
        session.run(dx, {grad: np.zeros((1, 3, 4, 3), np.float32)})
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match="Conv2DCustomBackpropInput: " + pattern):
            session.run(dx, {grad: np.zeros(fed_shape, np.float32)})


# -- gradients -------------------------------------------------------------------------


def transpose_grad(out_shape, stride, padding):
    return lambda v, w: tf.nn.conv2d_transpose(v, w, out_shape, [1, stride, stride, 1],
                                               padding)


GRAD_CASES = [
    grad_case("conv2d_transpose_same_stride2", transpose_grad([2, 5, 6, 2], 2, "SAME"),
              floats64(2, 3, 3, 3), floats64(3, 3, 2, 3), unknown=(0,)),
    grad_case("conv2d_transpose_valid_stride1", transpose_grad([1, 4, 5, 2], 1, "VALID"),
              floats64(1, 3, 3, 3), floats64(2, 3, 2, 3), unknown=(0,)),
    grad_case("conv2d_transpose_valid_stride2", transpose_grad([1, 7, 5, 3], 2, "VALID"),
              floats64(1, 3, 2, 2), floats64(3, 3, 3, 2), unknown=(0,)),
    grad_case("conv2d_transpose_valid_stride_over_kernel",
              transpose_grad([1, 10, 8, 2], 3, "VALID"), floats64(1, 3, 3, 3),
              floats64(2, 2, 2, 3), unknown=(0,)),
    grad_case("conv2d_transpose_same_stride2_even", transpose_grad([1, 8, 7, 2], 2, "SAME"),
              floats64(1, 4, 4, 3), floats64(3, 3, 2, 3), unknown=(0,)),
    grad_case("conv2d_backprop_input", lambda g, w: tf.nn.conv2d_backprop_input(
        [1, 5, 6, 2], w, g, [1, 2, 2, 1], "SAME"), floats64(1, 3, 3, 3),
        floats64(3, 3, 2, 3)),
    grad_case("depthwise_valid_stride_over_kernel", lambda x, w: tf.nn.depthwise_conv2d(
        x, w, [1, 3, 3, 1], "VALID"), floats64(1, 8, 7, 2), floats64(2, 2, 2, 2)),
    grad_case("depthwise_same_stride1", lambda x, w: tf.nn.depthwise_conv2d(
        x, w, [1, 1, 1, 1], "SAME"), floats64(2, 4, 5, 3), floats64(3, 3, 3, 2)),
    grad_case("depthwise_valid_stride2", lambda x, w: tf.nn.depthwise_conv2d(
        x, w, [1, 2, 2, 1], "VALID"), floats64(1, 6, 5, 2), floats64(3, 2, 2, 2)),
    grad_case("depthwise_same_stride2", lambda x, w: tf.nn.depthwise_conv2d(
        x, w, [1, 2, 2, 1], "SAME"), floats64(1, 5, 6, 2), floats64(2, 3, 2, 1)),
    grad_case("depthwise_rate2", lambda x, w: tf.nn.depthwise_conv2d(
        x, w, [1, 1, 1, 1], "SAME", rate=2), floats64(1, 5, 5, 2), floats64(2, 2, 2, 2)),
    grad_case("separable_conv2d", lambda x, d, p: tf.nn.separable_conv2d(
        x, d, p, [1, 1, 1, 1], "VALID"), floats64(2, 4, 4, 2), floats64(2, 2, 2, 2),
        floats64(1, 1, 4, 3)),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case, op_device, rng):
    check_gradients(case, rng, op_device)


@pytest.mark.parametrize("case", [case for case in GRAD_CASES if case.name in (
    "conv2d_transpose_same_stride2", "depthwise_same_stride1")], ids=lambda c: c.name)
def test_gradient_with_unknown_batch_and_sizes(case, rng):
    check_gradients(case, rng, unknown_dims=True)


def test_conv2d_gradient_of_its_gradient_is_the_transpose_gradient(rng):
    """Conv2DBackpropInput now has a gradient: conv2d's input gradient can be
    differentiated again (w.r.t. the filter and the incoming gradient)."""
    case = grad_case("conv2d_input_grad", lambda x, w, g: tf.gradients(
        tf.nn.conv2d(x, w, [1, 2, 2, 1], "SAME"), x, grad_ys=g)[0],
        floats64(1, 5, 5, 2), floats64(3, 3, 2, 3), floats64(1, 3, 3, 3), wrt=(1, 2),
        unknown=())
    check_gradients(case, rng)


# -- PyTorch as a second oracle --------------------------------------------------------


def nchw(array):
    return torch.from_numpy(np.ascontiguousarray(array.transpose(0, 3, 1, 2)))


@needs_torch
@pytest.mark.parametrize("stride, padding, out_hw", [(2, "SAME", (7, 8)), (1, "VALID", (6, 6)),
                                                     (2, "VALID", (9, 9))])
def test_conv2d_transpose_agrees_with_torch(stride, padding, out_hw, rng):
    value, w = rng.standard_normal((2, 4, 4, 3)), rng.standard_normal((3, 3, 2, 3))
    out_shape = (2, *out_hw, 2)
    ours = tf.Session().run(tf.nn.conv2d_transpose(value, w, list(out_shape),
                                                   [1, stride, stride, 1], padding))
    full = F.conv_transpose2d(nchw(value), torch.from_numpy(w.transpose(3, 2, 0, 1).copy()),
                              stride=stride).numpy().transpose(0, 2, 3, 1)
    pads = [same_pads(size, 3, stride)[1] if padding == "SAME" else 0 for size in out_hw]
    cropped = full[:, pads[0]:pads[0] + out_hw[0], pads[1]:pads[1] + out_hw[1]]
    np.testing.assert_allclose(ours, cropped, rtol=1e-10, atol=1e-10)


@needs_torch
@pytest.mark.parametrize("stride, padding", [(1, "SAME"), (2, "VALID")])
def test_depthwise_conv2d_agrees_with_torch_groups(stride, padding, rng):
    x, w = rng.standard_normal((2, 7, 7, 3)), rng.standard_normal((3, 3, 3, 2))
    ours = tf.Session().run(tf.nn.depthwise_conv2d(x, w, [1, stride, stride, 1], padding))
    pad = 1 if padding == "SAME" else 0
    weight = torch.from_numpy(w.transpose(2, 3, 0, 1).reshape(6, 1, 3, 3).copy())
    theirs = F.conv2d(nchw(x), weight, stride=stride, padding=pad, groups=3)
    np.testing.assert_allclose(ours, theirs.numpy().transpose(0, 2, 3, 1), rtol=1e-10,
                               atol=1e-10)


# -- the Winograd fast path ------------------------------------------------------------


def test_a_winograd_conv2d_transpose_trains_as_the_im2col_one_does(monkeypatch):
    """A 3x3 stride-1 conv2d_transpose of 16 channels is Conv2DBackpropInput on
    Winograd's path where the compiled kernels run: ten training steps of a
    decoder follow the im2col run's losses to float32 rounding (the bound of
    test_winograd.py's CNN), and the filter gradient's conv2d runs on it too."""
    rng = np.random.default_rng(5)
    codes = rng.standard_normal((6, 5, 5, 16)).astype(np.float32)
    targets = rng.standard_normal((6, 7, 7, 2)).astype(np.float32)

    def losses(winograd_flag):
        monkeypatch.setenv("TOWERFLOW_WINOGRAD", winograd_flag)
        with tf.Graph().as_default():
            tf.set_random_seed(4)
            w = tf.Variable(tf.random_normal([3, 3, 2, 16], stddev=0.1, seed=1))
            up = tf.nn.conv2d_transpose(codes, w, [6, 7, 7, 2], [1, 1, 1, 1], "VALID")
            loss = tf.reduce_mean(tf.square(up - targets))
            train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                return [sess.run([loss, train])[0] for _ in range(10)]
    with_winograd, with_im2col = losses("1"), losses("0")
    np.testing.assert_allclose(with_winograd, with_im2col, rtol=1e-4)
    assert with_winograd[-1] < 0.9 * with_winograd[0]
