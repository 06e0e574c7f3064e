"""Gradients of the neural-network ops (activations, softmax, cross-entropy,
convolution, pooling, batch normalisation, dropout) against float64 central
differences, on the logical CPUs (see gradient_check.py)."""

import numpy as np
import pytest

import towerflow as tf
from gradient_check import (away_from_zero, case_id, check_float32_matches_float64,
                            check_gradients, distinct, floats, grad_case, labels, positive,
                            probabilities)

ACTIVATIONS = [
    grad_case("relu", tf.nn.relu, away_from_zero(3, 4)),
    grad_case("elu", tf.nn.elu, away_from_zero(3, 4)),
    grad_case("gelu", tf.nn.gelu, floats(3, 4)),
    grad_case("gelu_tanh", lambda x: tf.nn.gelu(x, approximate=True), floats(3, 4)),
    grad_case("nn_sigmoid", tf.nn.sigmoid, floats(3, 4)),
    grad_case("nn_tanh", tf.nn.tanh, floats(3, 4)),
]

SOFTMAX = [
    grad_case("softmax", tf.nn.softmax, floats(3, 4)),
    grad_case("softmax_axis0", lambda x: tf.nn.softmax(x, axis=0), floats(3, 4)),
    grad_case("softmax_3d_middle_axis", lambda x: tf.nn.softmax(x, axis=1), floats(2, 3, 2)),
    grad_case("log_softmax", tf.nn.log_softmax, floats(3, 4)),
    grad_case("log_softmax_axis0", lambda x: tf.nn.log_softmax(x, axis=0), floats(3, 4)),
    grad_case("softmax_temperature", lambda x: tf.nn.softmax(x / 0.6), floats(2, 5)),
]


def xent(label_smoothing=0.0):
    return lambda logits, targets: tf.nn.softmax_cross_entropy_with_logits(
        labels=targets, logits=logits, label_smoothing=label_smoothing)


def sparse_xent(logits, targets):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)


CROSS_ENTROPY = [
    grad_case("xent", xent(), floats(4, 5), probabilities(4, 5)),
    grad_case("xent_label_smoothing", xent(0.1), floats(4, 5), probabilities(4, 5),
              unknown=(1,)),
    grad_case("xent_v2", lambda logits, targets: tf.nn.softmax_cross_entropy_with_logits_v2(
        labels=targets, logits=logits), floats(3, 3), probabilities(3, 3)),
    grad_case("sparse_xent", sparse_xent, floats(4, 5), labels(4, 5)),
    # logits of rank 3 (a sequence model's [batch, time, classes]): TF flattens
    # the leading dims; the builder's reshapes need all but one of them known
    grad_case("sparse_xent_rank3", sparse_xent, floats(2, 3, 5),
              lambda rng: rng.integers(0, 5, (2, 3)).astype(np.int32), unknown=()),
    grad_case("xent_rank3", xent(), floats(2, 3, 4), probabilities(2, 3, 4), unknown=()),
    grad_case("losses_softmax_cross_entropy", lambda logits, targets:
              tf.losses.softmax_cross_entropy(targets, logits, label_smoothing=0.2),
              floats(4, 3), probabilities(4, 3), unknown=(1,)),
    grad_case("losses_sparse", lambda logits, targets:
              tf.losses.sparse_softmax_cross_entropy(targets, logits), floats(4, 3),
              labels(4, 3)),
    grad_case("losses_mean_squared_error", tf.losses.mean_squared_error, floats(3, 2),
              floats(3, 2)),
    grad_case("losses_zero_weights", lambda logits, targets: tf.losses.sparse_softmax_cross_entropy(
        targets, logits, weights=[1.0, 0.0, 2.0, 0.5]), floats(4, 3), labels(4, 3)),
]

MISC = [
    grad_case("bias_add", tf.nn.bias_add, floats(3, 4), floats(4)),
    grad_case("bias_add_nhwc", tf.nn.bias_add, floats(2, 3, 2, 3), floats(3)),
    grad_case("l2_loss", tf.nn.l2_loss, floats(3, 4)),
]


def conv(strides, padding):
    return lambda x, w: tf.nn.conv2d(x, w, [1, strides, strides, 1], padding)


def conv_case(batch, size, channels, kernel, out_channels, strides, padding):
    height, width = size
    return grad_case(f"conv_{kernel}x{kernel}_s{strides}_{padding}_n{batch}_{height}x{width}_"
                     f"c{channels}to{out_channels}", conv(strides, padding),
                     floats(batch, height, width, channels),
                     floats(kernel, kernel, channels, out_channels), unknown=(0,))


CONV = [
    conv_case(1, (4, 4), 1, 1, 1, 1, "SAME"),
    conv_case(2, (5, 3), 3, 1, 2, 1, "VALID"),
    conv_case(1, (5, 5), 2, 1, 3, 2, "SAME"),
    conv_case(2, (4, 5), 2, 2, 3, 1, "SAME"),
    conv_case(1, (5, 5), 3, 2, 2, 2, "VALID"),
    conv_case(2, (4, 4), 1, 2, 4, 2, "SAME"),
    conv_case(1, (5, 5), 2, 3, 2, 1, "SAME"),
    conv_case(2, (5, 4), 3, 3, 1, 1, "VALID"),
    conv_case(1, (7, 7), 1, 3, 2, 2, "SAME"),
    conv_case(2, (6, 5), 2, 3, 3, 2, "VALID"),
    conv_case(1, (6, 6), 2, 5, 2, 1, "SAME"),
    conv_case(1, (7, 5), 1, 5, 1, 2, "SAME"),
    conv_case(2, (7, 7), 1, 5, 2, 1, "VALID"),
    conv_case(1, (3, 3), 2, 5, 2, 1, "SAME"),   # window larger than the image
    grad_case("conv_rectangular_strides", lambda x, w: tf.nn.conv2d(x, w, [1, 1, 2, 1], "SAME"),
              floats(1, 5, 6, 2), floats(3, 2, 2, 2), unknown=(0,)),
]


def pool(fn, window, strides, padding):
    return lambda x: fn(x, [1, window, window, 1], [1, strides, strides, 1], padding)


POOL = [
    grad_case(f"{fn.__name__}_{window}x{window}_s{strides}_{padding}_{height}x{width}",
              pool(fn, window, strides, padding), distinct(batch, height, width, 2))
    for fn in (tf.nn.max_pool, tf.nn.avg_pool)
    for window, strides, padding, batch, (height, width) in [
        (2, 2, "VALID", 2, (4, 4)), (2, 2, "VALID", 1, (5, 5)), (2, 2, "SAME", 1, (5, 3)),
        (3, 2, "SAME", 2, (5, 5)), (3, 2, "VALID", 1, (6, 7)), (3, 1, "SAME", 1, (4, 4)),
        (3, 1, "VALID", 2, (4, 5))]
]


def fused(is_training, epsilon=0.001):
    def build(x, scale, offset, mean, variance):
        return tf.nn.fused_batch_norm(x, scale, offset, mean, variance, epsilon,
                                      is_training=is_training)[0]
    return build


def fused_switched(x, scale, offset, mean, variance, is_training):
    return tf.nn.fused_batch_norm(x, scale, offset, mean, variance,
                                  is_training=is_training)[0]


def flag(value):
    return lambda rng: np.array(value)


def moments(axes, keepdims=False):
    return lambda x: list(tf.nn.moments(x, axes, keepdims=keepdims))


NORM = [
    grad_case("fused_batch_norm_training", fused(True), floats(2, 3, 2, 3), positive(3),
              floats(3), floats(3), positive(3), wrt=(0, 1, 2)),
    grad_case("fused_batch_norm_training_2d", fused(True, 1e-5), floats(5, 4), positive(4),
              floats(4), floats(4), positive(4), wrt=(0, 1, 2)),
    grad_case("fused_batch_norm_inference", fused(False), floats(2, 2, 3, 3), positive(3),
              floats(3), floats(3), positive(3), wrt=(0, 1, 2)),
    # ReLU after: the CPU and GPU plans fuse both ways (fusion.py)
    grad_case("fused_batch_norm_training_relu", lambda *a: tf.nn.relu(fused(True)(*a)),
              floats(3, 2, 2, 5), positive(5), floats(5), floats(5), positive(5),
              wrt=(0, 1, 2)),
    grad_case("fused_batch_norm_training_relu_33_channels",
              lambda *a: tf.nn.relu(fused(True)(*a)), floats(1, 2, 3, 33), positive(33),
              floats(33), floats(33), positive(33), wrt=(0, 1, 2)),
    # and a max pool after the ReLU: one kernel on the CPU (_FusedBatchNormReluPool)
    grad_case("fused_batch_norm_training_relu_max_pool",
              lambda *a: tf.nn.max_pool(tf.nn.relu(fused(True)(*a)), [1, 2, 2, 1], [1, 2, 2, 1],
                                       "VALID"),
              floats(2, 4, 6, 3), positive(3), floats(3), floats(3), positive(3),
              wrt=(0, 1, 2)),
    *[grad_case(f"fused_batch_norm_mode_fed_{mode}", fused_switched, floats(4, 2, 3),
                positive(3), floats(3), floats(3), positive(3), flag(mode), wrt=(0, 1, 2))
      for mode in (True, False)],
    grad_case("batch_normalization", lambda x, m, v, b, g: tf.nn.batch_normalization(
        x, m, v, b, g, 1e-3), floats(4, 3), floats(3), positive(3), floats(3), positive(3)),
    grad_case("batch_normalization_no_scale", lambda x, m, v: tf.nn.batch_normalization(
        x, m, v, None, None, 1e-3), floats(4, 3), floats(3), positive(3)),
    grad_case("moments_axis0", moments([0]), floats(5, 3)),
    grad_case("moments_nhwc_keepdims", moments([0, 1, 2], keepdims=True), floats(2, 3, 2, 2)),
    grad_case("batch_norm_composite", lambda x: tf.nn.batch_normalization(
        x, *tf.nn.moments(x, [0]), None, None, 1e-3), floats(4, 3)),
]

CASES = ACTIVATIONS + SOFTMAX + CROSS_ENTROPY + MISC + CONV + POOL + NORM


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_gradient_matches_finite_differences(case, op_device, rng):
    check_gradients(case, rng, op_device)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_gradient_with_unknown_dims(case, rng):
    """Inputs of known rank only (conv filters and smoothed logits keep theirs)."""
    check_gradients(case, rng, unknown_dims=True)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_float32_gradient_stays_float32(case):
    check_float32_matches_float64(case)


def test_sparse_labels_get_no_gradient():
    logits = tf.placeholder(tf.float64, [2, 3])
    targets = tf.placeholder(tf.int32, [2])
    loss = tf.reduce_sum(sparse_xent(logits, targets))
    assert tf.gradients(loss, targets) == [None]


def test_fused_batch_norm_statistics_outputs_pass_no_gradient(rng):
    """As in TensorFlow, the batch mean and variance outputs (for moving
    averages) are constants to tf.gradients: using them adds nothing."""
    x = tf.placeholder(tf.float64, [4, 3])
    y, mean, variance = tf.nn.fused_batch_norm(x, tf.ones([3], tf.float64),
                                               tf.zeros([3], tf.float64))
    weights = rng.standard_normal((4, 3))
    (grad_stats,) = tf.gradients(tf.reduce_sum(mean) + tf.reduce_sum(variance), x)
    (grad_y,) = tf.gradients(tf.reduce_sum(y * weights), x)
    (grad_both,) = tf.gradients(tf.reduce_sum(y * weights) + tf.reduce_sum(mean), x)
    with tf.Session() as session:
        got = session.run([grad_stats, grad_y, grad_both], {x: rng.standard_normal((4, 3))})
    np.testing.assert_array_equal(got[0], np.zeros((4, 3)))
    np.testing.assert_allclose(got[2], got[1], rtol=1e-12)


def test_fused_batch_norm_inference_passes_no_gradient_to_the_statistics():
    x = tf.placeholder(tf.float64, [4, 3])
    mean, variance = tf.placeholder(tf.float64, [3]), tf.placeholder(tf.float64, [3])
    y = fused(False)(x, tf.ones([3], tf.float64), tf.zeros([3], tf.float64), mean, variance)
    assert tf.gradients(tf.reduce_sum(y), [mean, variance]) == [None, None]


@pytest.mark.parametrize("noise_shape", [None, [1, 4]], ids=["elementwise", "shared_rows"])
def test_dropout_gradient_is_its_mask(op_device, noise_shape, rng):
    """Dropout draws a new mask every run, so the gradient is checked within one
    run: d(sum(y * R))/dx = R * mask, and mask = y / x where x != 0."""
    x_value = away_from_zero(3, 4)(rng)
    weights = rng.standard_normal((3, 4))
    with tf.device(op_device):
        x = tf.placeholder(tf.float64, [3, 4])
        y = tf.nn.dropout(x, rate=0.5, noise_shape=noise_shape, seed=7)
        (grad,) = tf.gradients(tf.reduce_sum(y * weights), x)
    with tf.Session() as session:
        masks = []
        for _ in range(3):
            y_value, grad_value = session.run([y, grad], {x: x_value})
            mask = y_value / x_value
            np.testing.assert_allclose(grad_value, weights * mask, rtol=1e-12)
            assert set(np.unique(mask)) <= {0.0, 2.0}
            masks.append(mask)
    assert not all(np.array_equal(masks[0], m) for m in masks[1:]), "one mask every run"


@pytest.mark.parametrize("pool, window, strides, padding", [
    (tf.nn.max_pool, 2, 2, "VALID"), (tf.nn.max_pool, 3, 2, "SAME"),
], ids=["tiling_windows", "overlapping_windows"])
def test_max_pool_ties_route_the_gradient_to_the_first_maximum(pool, window, strides, padding):
    """TensorFlow's convention (central differences would split it)."""
    x = np.zeros((1, 4, 4, 1))
    x[0, 1, 0, 0] = x[0, 1, 1, 0] = 5.0                # a tie in the first window
    feed = tf.placeholder(tf.float64, x.shape)
    y = pool(feed, [1, window, window, 1], [1, strides, strides, 1], padding)
    (grad,) = tf.gradients(tf.reduce_sum(y), feed)
    with tf.Session() as session:
        y_value, grad_value = session.run([y, grad], {feed: x})
    assert grad_value[0, 1, 0, 0] > 0 and grad_value[0, 1, 1, 0] == 0
    assert grad_value.sum() == y_value.size             # each window passes its gradient once
