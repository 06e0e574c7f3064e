"""Forward values of the NN ops on every logical CPU, against NumPy references
and, where it imports, against PyTorch (NCHW, so inputs are transposed and
TensorFlow's asymmetric SAME padding is applied explicitly); and the errors
that bad inputs give."""

import math
from typing import Callable, NamedTuple, Optional

import numpy as np
import pytest

import towerflow as tf
from conftest import placed_name

TOLERANCE = {np.float32: 2e-5, np.float64: 1e-12}

# -- NumPy references ------------------------------------------------------------------

erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x, approximate):
    if approximate:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def log_softmax(x, axis=-1):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def smoothed(labels, smoothing):
    return labels * (1 - smoothing) + smoothing / labels.shape[-1]


def same_pads(size, window, stride, padding):
    """(out, before, after) along one axis, by TensorFlow's rules (extra at the end)."""
    if padding == "VALID":
        return (size - window) // stride + 1, 0, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + window - size, 0)
    return out, total // 2, total - total // 2


def windows(x, window, strides, padding, fill):
    """[N, OH, OW, KH, KW, C]: every window of x, padded with ``fill``."""
    (kh, kw), (sh, sw) = window, strides
    out_h, top, bottom = same_pads(x.shape[1], kh, sh, padding)
    out_w, left, right = same_pads(x.shape[2], kw, sw, padding)
    padded = np.pad(x, [(0, 0), (top, bottom), (left, right), (0, 0)], constant_values=fill)
    return np.stack([np.stack([padded[:, i * sh:i * sh + kh, j * sw:j * sw + kw]
                               for j in range(out_w)], 1) for i in range(out_h)], 1)


def conv2d(x, w, strides, padding):
    patches = windows(x, w.shape[:2], strides, padding, 0.0)
    return np.einsum("nijabc,abco->nijo", patches, w)


def max_pool(x, window, strides, padding):
    return windows(x, window, strides, padding, -np.inf).max(axis=(3, 4))


def avg_pool(x, window, strides, padding):
    return np.nanmean(windows(x, window, strides, padding, np.nan), axis=(3, 4))


# -- PyTorch references (NCHW) ---------------------------------------------------------


def torch_nchw(x):
    import torch
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


def torch_nhwc(t):
    return t.numpy().transpose(0, 2, 3, 1)


def torch_pad(t, window, strides, padding, value=0.0):
    """TensorFlow's SAME padding on an NCHW tensor, more at the bottom/right."""
    import torch.nn.functional as F
    _, top, bottom = same_pads(t.shape[2], window[0], strides[0], padding)
    _, left, right = same_pads(t.shape[3], window[1], strides[1], padding)
    return F.pad(t, (left, right, top, bottom), value=value)


def torch_conv2d(x, w, strides, padding):
    import torch
    import torch.nn.functional as F
    filters = torch.from_numpy(np.ascontiguousarray(w.transpose(3, 2, 0, 1)))
    padded = torch_pad(torch_nchw(x), w.shape[:2], strides, padding)
    return torch_nhwc(F.conv2d(padded, filters, stride=strides))


def torch_max_pool(x, window, strides, padding):
    import torch.nn.functional as F
    padded = torch_pad(torch_nchw(x), window, strides, padding, value=-math.inf)
    return torch_nhwc(F.max_pool2d(padded, window, strides))


def torch_avg_pool(x, window, strides, padding):
    """Averages over real cells only: TensorFlow's extra bottom/right cell is
    torch's ceil_mode, the rest symmetric padding with count_include_pad=False."""
    import torch.nn.functional as F
    _, top, bottom = same_pads(x.shape[1], window[0], strides[0], padding)
    _, left, right = same_pads(x.shape[2], window[1], strides[1], padding)
    pooled = F.avg_pool2d(torch_nchw(x), window, strides, padding=(top, left),
                          ceil_mode=(bottom, right) != (top, left), count_include_pad=False)
    return torch_nhwc(pooled)


def torch_call(name, *arrays, **options):
    import torch
    import torch.nn.functional as F
    tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
    fn = getattr(torch, name, None) or getattr(F, name)
    return fn(*tensors, **options).numpy()


# -- cases -----------------------------------------------------------------------------


class Case(NamedTuple):
    name: str
    build: Callable              # placeholders -> tensor
    reference: Callable          # arrays -> array (NumPy)
    torch_reference: Optional[Callable]
    inputs: tuple                # makers ``(rng, dtype) -> array``


def floats(*shape, scale=1.0):
    return lambda rng, dtype: (rng.standard_normal(shape) * scale).astype(dtype)


def distributions(*shape):
    def make(rng, dtype):
        raw = rng.uniform(0.1, 1.0, shape)
        return (raw / raw.sum(-1, keepdims=True)).astype(dtype)
    return make


def class_ids(count, classes):
    return lambda rng, dtype: rng.integers(0, classes, count).astype(np.int64)


def xent(smoothing=0.0):
    return lambda logits, labels: tf.nn.softmax_cross_entropy_with_logits(
        labels=labels, logits=logits, label_smoothing=smoothing)


def torch_xent(smoothing=0.0):
    return lambda logits, labels: torch_call("cross_entropy", logits, labels,
                                             reduction="none", label_smoothing=smoothing)


def window_case(op, reference, torch_reference, window, strides, padding, shape):
    name = f"{op.__name__}_{window}x{window}_s{strides}_{padding}_{'x'.join(map(str, shape))}"
    build = lambda x: op(x, [1, window, window, 1], [1, strides, strides, 1], padding)  # noqa
    pair, stride_pair = (window, window), (strides, strides)
    return Case(name, build, lambda x: reference(x, pair, stride_pair, padding),
                lambda x: torch_reference(x, pair, stride_pair, padding), (floats(*shape),))


def conv_case(kernel, strides, padding, shape, out_channels):
    name = f"conv2d_{kernel}x{kernel}_s{strides}_{padding}_{'x'.join(map(str, shape))}"
    return Case(name, lambda x, w: tf.nn.conv2d(x, w, [1, strides, strides, 1], padding),
                lambda x, w: conv2d(x, w, (strides,) * 2, padding),
                lambda x, w: torch_conv2d(x, w, (strides,) * 2, padding),
                (floats(*shape), floats(kernel, kernel, shape[-1], out_channels)))


CASES = [
    Case("relu", tf.nn.relu, lambda x: np.maximum(x, 0), lambda x: torch_call("relu", x),
         (floats(3, 5),)),
    Case("elu", tf.nn.elu, lambda x: np.where(x > 0, x, np.expm1(x)),
         lambda x: torch_call("elu", x), (floats(3, 5, scale=3),)),
    Case("gelu", tf.nn.gelu, lambda x: gelu(x, False),
         lambda x: torch_call("gelu", x, approximate="none"), (floats(3, 5, scale=3),)),
    Case("gelu_tanh", lambda x: tf.nn.gelu(x, approximate=True), lambda x: gelu(x, True),
         lambda x: torch_call("gelu", x, approximate="tanh"), (floats(3, 5, scale=3),)),
    Case("sigmoid_large_inputs", tf.nn.sigmoid, lambda x: 0.5 * (1 + np.tanh(x / 2)),
         lambda x: torch_call("sigmoid", x), (floats(3, 5, scale=40),)),
    Case("softmax", tf.nn.softmax, lambda x: np.exp(log_softmax(x)),
         lambda x: torch_call("softmax", x, dim=-1), (floats(4, 6, scale=20),)),
    Case("softmax_axis0", lambda x: tf.nn.softmax(x, axis=0),
         lambda x: np.exp(log_softmax(x, 0)), lambda x: torch_call("softmax", x, dim=0),
         (floats(4, 6),)),
    Case("log_softmax", tf.nn.log_softmax, log_softmax,
         lambda x: torch_call("log_softmax", x, dim=-1), (floats(4, 6, scale=20),)),
    Case("log_softmax_axis0", lambda x: tf.nn.log_softmax(x, axis=0),
         lambda x: log_softmax(x, 0), lambda x: torch_call("log_softmax", x, dim=0),
         (floats(4, 6),)),
    Case("softmax_xent", xent(), lambda x, y: -(y * log_softmax(x)).sum(-1), torch_xent(),
         (floats(5, 4, scale=10), distributions(5, 4))),
    Case("softmax_xent_label_smoothing", xent(0.1),
         lambda x, y: -(smoothed(y, 0.1) * log_softmax(x)).sum(-1), torch_xent(0.1),
         (floats(5, 4), distributions(5, 4))),
    Case("sparse_xent", lambda x, y: tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=x), lambda x, y: -log_softmax(x)[np.arange(len(y)), y],
        torch_xent(), (floats(6, 3, scale=10), class_ids(6, 3))),
    Case("sparse_xent_rank3", lambda x, y: tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=x), lambda x, y: -np.take_along_axis(
            log_softmax(x), y[..., None], -1)[..., 0],
        None, (floats(2, 3, 4, scale=10), lambda rng, dtype: rng.integers(0, 4, (2, 3)))),
    Case("softmax_xent_rank3", xent(), lambda x, y: -(y * log_softmax(x)).sum(-1), None,
         (floats(2, 3, 4), distributions(2, 3, 4))),
    Case("bias_add", tf.nn.bias_add, np.add, None, (floats(2, 3, 3, 4), floats(4))),
    Case("l2_loss", tf.nn.l2_loss, lambda x: np.array((x * x).sum() / 2, x.dtype), None,
         (floats(3, 4),)),
    conv_case(1, 1, "SAME", (2, 4, 4, 3), 2),
    conv_case(1, 2, "VALID", (1, 5, 5, 2), 3),
    conv_case(2, 2, "SAME", (2, 5, 5, 1), 2),     # pads only bottom/right
    conv_case(3, 1, "SAME", (1, 6, 5, 2), 4),
    conv_case(3, 2, "SAME", (2, 6, 6, 3), 2),     # asymmetric: 0 top, 1 bottom
    conv_case(3, 2, "VALID", (1, 7, 6, 2), 1),
    conv_case(5, 1, "SAME", (1, 6, 7, 1), 2),
    conv_case(5, 2, "SAME", (2, 8, 7, 2), 3),
    conv_case(5, 1, "SAME", (1, 3, 3, 2), 1),     # window larger than the image
] + [
    window_case(op, reference, torch_reference, *geometry)
    for op, reference, torch_reference in [(tf.nn.max_pool, max_pool, torch_max_pool),
                                           (tf.nn.avg_pool, avg_pool, torch_avg_pool)]
    for geometry in [(2, 2, "VALID", (2, 4, 4, 3)), (2, 2, "VALID", (1, 5, 5, 2)),
                     (2, 2, "SAME", (1, 5, 5, 2)), (3, 2, "SAME", (2, 5, 5, 2)),
                     (3, 2, "SAME", (1, 6, 6, 1)), (3, 2, "VALID", (1, 7, 6, 2)),
                     (3, 1, "SAME", (2, 4, 5, 3)), (3, 1, "VALID", (1, 5, 5, 1))]
]


def run_case(case, dtype, rng, device=None):
    arrays = [make(rng, dtype) for make in case.inputs]
    with tf.device(device):
        feeds = [tf.placeholder(tf.as_dtype(a.dtype), a.shape) for a in arrays]
        output = case.build(*feeds)
    config = tf.ConfigProto(log_device_placement=device is not None)
    with tf.Session(config=config) as session:
        value = session.run(output, dict(zip(feeds, arrays)))
    assert value.dtype == dtype and output.shape.as_list() == list(value.shape), output
    return arrays, value


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_forward_matches_numpy(case, op_device, dtype, rng, capsys):
    arrays, value = run_case(case, dtype, rng, op_device)
    placed = [line for line in capsys.readouterr().err.splitlines() if ": /job:" in line]
    assert placed and all(line.endswith(placed_name(op_device)) for line in placed), placed
    expected = case.reference(*[a.astype(np.float64) if a.dtype.kind == "f" else a
                                for a in arrays])
    np.testing.assert_allclose(value, expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", [c for c in CASES if c.torch_reference],
                         ids=lambda c: c.name)
def test_forward_matches_torch(case, dtype, rng):
    pytest.importorskip("torch")
    arrays, value = run_case(case, dtype, rng)
    expected = case.torch_reference(*arrays)
    assert expected.shape == value.shape
    np.testing.assert_allclose(value, expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


# -- fused batch normalisation ---------------------------------------------------------

EPSILON = 1e-3


def batch_norm_inputs(rng, dtype, channels=3):
    x = (rng.standard_normal((2, 3, 4, channels)) * 2 + 1).astype(dtype)
    scale, offset = rng.uniform(0.5, 2, channels), rng.standard_normal(channels)
    mean, variance = rng.standard_normal(channels), rng.uniform(0.5, 2, channels)
    return x, *[a.astype(dtype) for a in (scale, offset, mean, variance)]


def batch_norm_reference(x, scale, offset, mean, variance, training):
    """(y, batch mean, batch variance with Bessel's correction) over N, H, W."""
    if training:
        mean, variance = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))
        count = x.size // x.shape[-1]
        return ((x - mean) / np.sqrt(variance + EPSILON) * scale + offset, mean,
                variance * count / (count - 1))
    return (x - mean) / np.sqrt(variance + EPSILON) * scale + offset, mean, variance


def run_fused(arrays, training, device=None, feed_training=None):
    with tf.device(device):
        feeds = [tf.placeholder(tf.as_dtype(a.dtype), a.shape) for a in arrays]
        is_training = tf.placeholder(tf.bool, []) if feed_training is not None else training
        outputs = tf.nn.fused_batch_norm(*feeds, epsilon=EPSILON, is_training=is_training)
    feed = dict(zip(feeds, arrays))
    if feed_training is not None:
        feed[is_training] = feed_training
    with tf.Session() as session:
        return session.run(list(outputs), feed)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
def test_fused_batch_norm_matches_numpy(training, op_device, dtype, rng):
    arrays = batch_norm_inputs(rng, dtype)
    values = run_fused(arrays, training, op_device)
    expected = batch_norm_reference(*[a.astype(np.float64) for a in arrays], training)
    for value, want in zip(values, expected):
        assert value.dtype == dtype
        np.testing.assert_allclose(value, want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@pytest.mark.parametrize("relu", [False, True], ids=["plain", "relu"])
def test_batch_norm_of_an_empty_batch_has_nan_statistics_and_zero_gradients(op_device, relu):
    """TF's FusedBatchNorm on an empty batch: NaN batch mean and variance (no
    error), and zero scale and offset gradients."""
    with tf.device(op_device):
        x = tf.placeholder(tf.float32, [None, 4, 4, 3])
        scale, offset = tf.ones([3]), tf.zeros([3])
        y, mean, variance = tf.nn.fused_batch_norm(x, scale, offset, is_training=True)
        if relu:     # the fused batch norm + ReLU chain and its gradient
            y = tf.nn.relu(y)
        grads = tf.gradients(tf.reduce_sum(y * 2.0), [x, scale, offset])
    with tf.Session() as session:
        values = session.run([y, mean, variance] + grads,
                             {x: np.zeros((0, 4, 4, 3), np.float32)})
    y, mean, variance, dx, dscale, doffset = values
    assert y.shape == dx.shape == (0, 4, 4, 3)
    assert np.isnan(mean).all() and np.isnan(variance).all()
    np.testing.assert_array_equal(dscale, np.zeros(3))
    np.testing.assert_array_equal(doffset, np.zeros(3))


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
def test_fused_batch_norm_matches_torch(training, rng):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    x, scale, offset, mean, variance = batch_norm_inputs(rng, np.float64)
    running_mean, running_var = torch.tensor(mean), torch.tensor(variance)
    if training:   # momentum 1: the running statistics become the batch's (unbiased)
        running_mean, running_var = torch.zeros(3, dtype=torch.float64), torch.zeros(
            3, dtype=torch.float64)
    y = F.batch_norm(torch_nchw(x), running_mean, running_var, torch.tensor(scale),
                     torch.tensor(offset), training=training, momentum=1.0, eps=EPSILON)
    values = run_fused((x, scale, offset, mean, variance), training)
    np.testing.assert_allclose(values[0], torch_nhwc(y), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(values[1], running_mean.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(values[2], running_var.numpy(), rtol=1e-12, atol=1e-12)


def test_fused_batch_norm_mode_from_a_bool_tensor(rng):
    arrays = batch_norm_inputs(rng, np.float64)
    for training in (True, False, True):
        values = run_fused(arrays, None, feed_training=training)
        for value, want in zip(values, batch_norm_reference(*arrays, training)):
            np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-12)


def test_moments_and_batch_normalization_match_numpy(rng):
    x = rng.standard_normal((4, 3, 2)) * 3 + 1
    feed = tf.placeholder(tf.float64, x.shape)
    mean, variance = tf.nn.moments(feed, [0, 1])
    kept_mean, _ = tf.nn.moments(feed, [0, 1], keepdims=True)
    y = tf.nn.batch_normalization(feed, mean, variance, 0.5, 2.0, EPSILON)
    with tf.Session() as session:
        got = session.run([mean, variance, kept_mean, y], {feed: x})
    np.testing.assert_allclose(got[0], x.mean((0, 1)), rtol=1e-12)
    np.testing.assert_allclose(got[1], x.var((0, 1)), rtol=1e-12)
    assert got[2].shape == (1, 1, 2)
    expected = (x - x.mean((0, 1))) / np.sqrt(x.var((0, 1)) + EPSILON) * 2.0 + 0.5
    np.testing.assert_allclose(got[3], expected, rtol=1e-12)


# -- bad inputs ------------------------------------------------------------------------


def image(shape=(1, 5, 5, 3), dtype=tf.float32):
    return tf.placeholder(dtype, shape)


BAD_INPUTS = [  # (name, builder, error type, message pattern)
    ("conv2d_rank3", lambda: tf.nn.conv2d(image((5, 5, 3)), image((3, 3, 3, 2)), 1, "SAME"),
     ValueError, r"4-D NHWC input, got shape \(5, 5, 3\)"),
    ("conv2d_channels", lambda: tf.nn.conv2d(image(), image((3, 3, 2, 4)), 1, "SAME"),
     ValueError, "input has 3 channels but the filter expects 2"),
    ("conv2d_filter_rank", lambda: tf.nn.conv2d(image(), image((3, 3, 3)), 1, "SAME"),
     ValueError, r"filter must be 4-D \[h, w, in, out\]"),
    ("conv2d_padding", lambda: tf.nn.conv2d(image(), image((3, 3, 3, 2)), 1, "FULL"),
     ValueError, "padding must be 'SAME' or 'VALID', got 'FULL'"),
    ("conv2d_batch_stride", lambda: tf.nn.conv2d(image(), image((1, 1, 3, 2)), [2, 1, 1, 1],
                                                 "SAME"), ValueError, "strides over the batch"),
    ("conv2d_nchw", lambda: tf.nn.conv2d(image(), image((1, 1, 3, 2)), 1, "SAME",
                                         data_format="NCHW"), ValueError, "NHWC"),
    ("conv2d_int", lambda: tf.nn.conv2d(image(dtype=tf.int32), image((1, 1, 3, 2), tf.int32),
                                        1, "SAME"), TypeError, "floating"),
    ("max_pool_padding", lambda: tf.nn.max_pool(image(), [1, 2, 2, 1], [1, 2, 2, 1], "same!"),
     ValueError, "padding must be 'SAME' or 'VALID'"),
    ("avg_pool_rank", lambda: tf.nn.avg_pool(image((5, 5)), [1, 2, 2, 1], [1, 2, 2, 1], "SAME"),
     ValueError, "4-D NHWC input"),
    ("pool_batch_window", lambda: tf.nn.max_pool(image(), [2, 2, 2, 1], [1, 1, 1, 1], "SAME"),
     ValueError, "ksize over the batch and channel axes must be 1"),
    ("pool_ksize_length", lambda: tf.nn.max_pool(image(), [2, 2, 2], [1, 1, 1, 1], "SAME"),
     ValueError, r"ksize must be 4 positive ints"),
    ("bias_rank", lambda: tf.nn.bias_add(image((2, 3)), image((1, 3))), ValueError,
     "bias must be 1-D"),
    ("bias_channels", lambda: tf.nn.bias_add(image((2, 3)), image((4,))), ValueError,
     r"Shapes \(3,\) and \(4,\) are not compatible.*BiasAdd"),
    ("xent_rank3_shapes", lambda: tf.nn.softmax_cross_entropy_with_logits(
        labels=image((2, 3, 5)), logits=image((2, 3, 4))), ValueError,
     r"Shapes \(2, 3, 4\) and \(2, 3, 5\) are not compatible"),
    ("xent_shapes", lambda: tf.nn.softmax_cross_entropy_with_logits(
        labels=image((2, 4)), logits=image((2, 3))), ValueError,
     r"Shapes \(2, 3\) and \(2, 4\) are not compatible"),
    ("sparse_label_count", lambda: tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=image((3,), tf.int32), logits=image((2, 3))), ValueError,
     r"\(2,\) and \(3,\) are not compatible"),
    ("sparse_label_rank", lambda: tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=image((2,), tf.int32), logits=image((2, 3, 4))), ValueError,
     r"^Rank mismatch: Rank of labels \(received 1\) should equal rank of logits minus 1 "
     r"\(received 3\)\.$"),
    ("sparse_float_labels", lambda: tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=image((2,)), logits=image((2, 3))), TypeError, "int32 or int64, got float32"),
    ("softmax_axis", lambda: tf.nn.softmax(image((2, 3)), axis=2), ValueError,
     "axis 2 is out of range for a tensor of rank 2"),
    ("softmax_int", lambda: tf.nn.softmax(image((2, 3), tf.int32)), TypeError,
     "parameter 'logits' has DataType int32 not in list of allowed values"),
    ("relu_bool", lambda: tf.nn.relu(image((2, 3), tf.bool)), TypeError,   # ints: TF's relu
     "parameter 'features' has DataType bool not in list of allowed values"),
    ("batch_norm_no_mean", lambda: tf.nn.fused_batch_norm(
        image(), image((3,)), image((3,)), is_training=False), ValueError, "needs mean="),
    ("batch_norm_channels", lambda: tf.nn.fused_batch_norm(image(), image((4,)), image((4,))),
     ValueError, r"Shapes \(3,\) and \(4,\) are not compatible"),
    ("dropout_rate", lambda: tf.nn.dropout(image(), rate=1.0), ValueError, r"\[0, 1\), got 1.0"),
    ("dropout_both", lambda: tf.nn.dropout(image(), keep_prob=0.5, rate=0.5), ValueError,
     "exactly one of rate= and keep_prob="),
    ("categorical_rank", lambda: tf.random.categorical(image((3,)), 2), ValueError,
     r"\[batch, classes\]"),
]


@pytest.mark.parametrize("build, error, pattern", [case[1:] for case in BAD_INPUTS],
                         ids=[case[0] for case in BAD_INPUTS])
def test_bad_inputs_give_clear_errors(build, error, pattern):
    with pytest.raises(error, match=pattern):
        build()


@pytest.mark.parametrize("bad_label", [3, -1])
def test_label_out_of_range_names_the_label(bad_label):
    logits = tf.placeholder(tf.float32, [3, 3])
    targets = tf.placeholder(tf.int32, [3])
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
    with tf.Session() as session, pytest.raises(
            tf.errors.InvalidArgumentError,
            match=rf"^Received a label value of {bad_label} which is outside the valid range "
                  rf"of \[0, 3\)\.  Label values: 0 {bad_label} 2$"):
        session.run(loss, {logits: np.zeros((3, 3)), targets: [0, bad_label, 2]})
