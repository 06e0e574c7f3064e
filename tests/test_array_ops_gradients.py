"""Gradients of the array, math and loss ops of issue 16 against float64
finite differences on every device of op_device; their static shapes and
the errors TF gives for bad arguments; PyTorch as a second oracle where it
is installed."""

import numpy as np
import pytest
from gradient_check import check_gradients, distinct, grad_case, positive
from gradient_check import floats as floats64

import towerflow as tf


def probabilities64(*shape):
    return lambda rng: rng.uniform(0, 1, shape)


MASK_2D = [[True, False, True], [False, False, True]]

GRAD_CASES = [
    grad_case("gather_nd_repeated_elements", lambda p: tf.gather_nd(
        p, [[1, 2], [0, 0], [1, 2]]), floats64(3, 4)),
    grad_case("gather_nd_slices", lambda p: tf.gather_nd(p, [[[1], [0]], [[1], [1]]]),
              floats64(3, 2, 2)),
    grad_case("scatter_nd_updates", lambda u: tf.scatter_nd([[1], [3], [1]], u, [5]),
              floats64(3)),
    grad_case("scatter_nd_slices", lambda u: tf.scatter_nd([[2, 0], [0, 1]], u, [3, 2, 2]),
              floats64(2, 2)),
    grad_case("pad_constant", lambda x: tf.pad(x, [[1, 2], [0, 1]], constant_values=3.0),
              floats64(2, 3)),
    grad_case("pad_reflect", lambda x: tf.pad(x, [[2, 1], [1, 3]], "REFLECT"),
              floats64(3, 4)),
    grad_case("pad_symmetric", lambda x: tf.pad(x, [[3, 1], [2, 2]], "SYMMETRIC"),
              floats64(3, 2)),
    grad_case("tile", lambda x: tf.tile(x, [2, 1, 3]), floats64(2, 3, 2)),
    grad_case("tile_by_run_time_multiples", lambda x: tf.tile(    # DynamicTile
        x, tf.placeholder_with_default([2, 1, 3], [3])), floats64(2, 3, 2)),
    grad_case("cumsum", lambda x: tf.cumsum(x, 1), floats64(3, 4)),
    grad_case("cumsum_exclusive_reverse", lambda x: tf.cumsum(
        x, 0, exclusive=True, reverse=True), floats64(4, 2)),
    grad_case("cumprod", lambda x: tf.cumprod(x, -1), positive(2, 4)),
    grad_case("cumprod_exclusive_reverse", lambda x: tf.cumprod(
        x, exclusive=True, reverse=True), positive(5)),
    grad_case("reduce_logsumexp_axis1", lambda x: tf.reduce_logsumexp(x, 1), floats64(3, 4)),
    grad_case("reduce_logsumexp_all_keepdims", lambda x: tf.reduce_logsumexp(
        x, keepdims=True), floats64(2, 3)),
    grad_case("sort_values_descending_axis0", lambda x: tf.sort(x, 0, "DESCENDING"),
              distinct(4, 3)),
    grad_case("boolean_mask_rows", lambda x: tf.boolean_mask(x, [True, False, True, True]),
              floats64(4, 2)),
    grad_case("boolean_mask_2d_mask_axis1", lambda x: tf.boolean_mask(x, MASK_2D, axis=1),
              floats64(2, 2, 3)),
    grad_case("sigmoid_cross_entropy_with_logits", lambda z, x: tf.nn.
              sigmoid_cross_entropy_with_logits(labels=z, logits=x),
              probabilities64(3, 4), floats64(3, 4)),
    grad_case("weighted_cross_entropy_with_logits", lambda z, x: tf.nn.
              weighted_cross_entropy_with_logits(z, x, 2.5),
              probabilities64(3, 4), floats64(3, 4)),
    grad_case("losses_sigmoid_cross_entropy_smoothed", lambda z, x: tf.losses.
              sigmoid_cross_entropy(z, x, label_smoothing=0.2),
              probabilities64(2, 3), floats64(2, 3)),
    grad_case("l2_normalize_axis1", lambda x: tf.nn.l2_normalize(x, 1), floats64(3, 4)),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_gradient_matches_finite_differences(case, op_device, rng):
    check_gradients(case, rng, op_device)


def run(fetch, feed=None):
    with tf.Session() as session:
        return session.run(fetch, feed)


def test_logsumexp_gradient_is_softmax_even_for_huge_inputs():
    """Stable: exp(1000) would overflow a naive graph to NaN."""
    x = tf.constant([1000.0, 1000.0, 990.0])
    grad = run(tf.gradients(tf.reduce_logsumexp(x), x)[0])
    softmax = np.exp([0.0, 0.0, -10.0]) / np.exp([0.0, 0.0, -10.0]).sum()
    np.testing.assert_allclose(grad, softmax, rtol=1e-6)


def test_sigmoid_cross_entropy_gradient_is_sigmoid_minus_labels_at_huge_logits():
    logits = tf.constant([200.0, -200.0, 0.0])
    loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=[0.0, 1.0, 1.0], logits=logits)
    np.testing.assert_array_equal(run(tf.gradients(loss, logits)[0]), [1.0, -1.0, -0.5])


def test_values_dependent_sizes_are_unknown_statically():
    x = tf.placeholder(tf.float32, [4, 3, 2])
    assert tf.boolean_mask(x, tf.placeholder(tf.bool, [4])).shape.as_list() == [None, 3, 2]
    assert tf.boolean_mask(x, tf.placeholder(tf.bool, [3, 2]), axis=1).shape.as_list() == \
        [4, None]
    y, idx = tf.unique(tf.placeholder(tf.int32, [7]))
    assert y.shape.as_list() == [None] and idx.shape.as_list() == [7]
    assert tf.sequence_mask(tf.placeholder(tf.int32, [2, 3]), 4).shape.as_list() == [2, 3, 4]
    assert tf.gather_nd(x, tf.placeholder(tf.int32, [5, 2])).shape.as_list() == [5, 2]
    assert tf.pad(x, [[1, 1], [0, 2], [0, 0]]).shape.as_list() == [6, 5, 2]
    assert tf.tile(x, [1, 2, 3]).shape.as_list() == [4, 6, 6]


def test_unique_and_argsort_pass_no_gradient():
    x = tf.placeholder(tf.float32, [4])
    y, _ = tf.unique(x)
    order = tf.cast(tf.argsort(x), tf.float32)
    assert tf.gradients(tf.reduce_sum(y), x) == [None]
    assert tf.gradients(tf.reduce_sum(order), x) == [None]


@pytest.mark.parametrize("build, error, pattern", [
    (lambda x: tf.nn.sigmoid_cross_entropy_with_logits(x, x), ValueError,
     r"Only call `sigmoid_cross_entropy_with_logits` with named arguments"),
    (lambda x: tf.nn.sigmoid_cross_entropy_with_logits(logits=x), ValueError,
     r"Both labels and logits must be provided"),
    (lambda x: tf.nn.sigmoid_cross_entropy_with_logits(labels=x[0], logits=x), ValueError,
     r"logits and labels must have the same shape \(\(4, 5, 6\) vs \(5, 6\)\)"),
    (lambda x: tf.nn.weighted_cross_entropy_with_logits(x[0], x, 2.0), ValueError,
     r"logits and targets must have the same shape"),
    (lambda x: tf.pad(x, [[1, 1]] * 3, "WRAP"), ValueError, r"Unknown padding mode: WRAP"),
    (lambda x: tf.pad(x, [[4, 0], [0, 0], [0, 0]], "REFLECT"), ValueError,
     r"paddings must be less than the dimension size: 4, 0 not less than 4"),
    (lambda x: tf.pad(x, [[0, 0], [0, 6], [0, 0]], "SYMMETRIC"), ValueError,
     r"paddings must be no greater than the dimension size: 0, 6 greater than 5"),
    (lambda x: tf.tile(x, [1, 2]), ValueError, r"Shape must be rank 2 but is rank 3"),
    (lambda x: tf.tile(x, [1, -1, 1]), ValueError, r"Expected multiples\[1\] >= 0, but got -1"),
    (lambda x: tf.cumsum(x, 3), ValueError,
     r"Expected scan axis in the range \[-3, 3\), but got 3"),
    (lambda x: tf.argsort(x, direction="UP"), ValueError,
     r"UP should be one of ASCENDING, DESCENDING"),
    (lambda x: tf.unique(x), ValueError, r"unique expects a 1D vector"),
    (lambda x: tf.boolean_mask(x, True), ValueError, r"mask cannot be scalar"),
    (lambda x: tf.boolean_mask(x, [True, False]), ValueError,
     r"Shapes \(4,\) and \(2,\) are incompatible"),
    (lambda x: tf.boolean_mask(x, tf.placeholder(tf.bool)), ValueError,
     r"Number of mask dimensions must be specified"),
    (lambda x: tf.sequence_mask([1, 2], [3, 4]), ValueError,
     r"maxlen must be scalar for sequence_mask"),
    (lambda x: tf.gather_nd(x, [[0, 0, 0, 0]]), ValueError,
     r"indices.shape\[-1\] must be <= params.rank"),
    (lambda x: tf.gather_nd(x, [[0.0]]), TypeError, r"int32 or int64 indices"),
    (lambda x: tf.scatter_nd([[0]], x, [4, 5, 7]), ValueError,
     r"updates.shape \(4, 5, 6\) must be indices.shape\[:-1\] \+ shape\[K:\]"),
])
def test_bad_arguments_give_tf_errors(build, error, pattern):
    with pytest.raises(error, match=pattern):
        build(tf.placeholder(tf.float32, [4, 5, 6]))


@pytest.mark.parametrize("build, rows, feed, pattern", [
    (lambda x, i: tf.gather_nd(x, tf.stack([tf.stack([0, 1]), tf.stack([i, 2])])), 4, 4,
     r"indices\[1\] = \[4, 2\] does not index into param shape \[4,3\]"),
    (lambda x, i: tf.gather_nd(x, tf.reshape(tf.stack([0, i]), [1, 2, 1])), 4, -1,
     r"indices\[0,1\] = \[-1\] does not index into param shape \[4,3\]"),
    (lambda x, i: tf.scatter_nd(tf.reshape(i, [1, 1]), [1.0], [3]), 4, 3,
     r"indices\[0\] = \[3\] does not index into shape \[3\]"),
    (lambda x, i: tf.pad(x, [[0, 3], [0, 0]], "REFLECT"), 2, 0,
     r"paddings must be less than the dimension size: 0, 3 not less than 2"),
    (lambda x, i: tf.boolean_mask(x, tf.fill([3], True)), 2, 0,
     r"Shapes \(2,\) and \(3,\) are incompatible"),
])
def test_bad_run_time_values_name_the_value(build, rows, feed, pattern, op_device):
    with tf.device(op_device):
        x, i = tf.placeholder(tf.float32, [None, 3]), tf.placeholder(tf.int32, [])
        built = build(x, i)
    with pytest.raises(tf.errors.InvalidArgumentError, match=pattern):
        run(built, {x: np.zeros((rows, 3), np.float32), i: feed})


def test_value_sized_outputs_stay_right_run_after_run_on_the_gpu(gpu_backend, capsys):
    """unique and boolean_mask read their output's size on the host, which a
    CUDA graph cannot replay: the plan runs op by op, says why, and every
    run sees its own feed."""
    with tf.device("/gpu:0"):
        x = tf.placeholder(tf.int32, [6])
        values, idx = tf.unique(x)
        kept = tf.boolean_mask(x, tf.greater(x, 2))
    feeds = [np.array(row, np.int32) for row in
             ([3, 1, 3, 5, 1, 0], [2, 2, 2, 2, 2, 2], [9, 8, 7, 9, 8, 7], [0, 5, 1, 6, 2, 7])]
    with tf.Session() as session:
        for feed in feeds:
            got_values, got_idx, got_kept = session.run([values, idx, kept], {x: feed})
            first = sorted(set(feed.tolist()), key=feed.tolist().index)
            np.testing.assert_array_equal(got_values, first)
            np.testing.assert_array_equal(got_idx, [first.index(v) for v in feed.tolist()])
            np.testing.assert_array_equal(got_kept, feed[feed > 2])
    assert "reads its output's size on the host" in capsys.readouterr().err
