"""tf.losses as TF 1.15's losses_impl.py: each loss's elementwise formula, the
four reductions with the weights shapes TF allows, the LOSSES collection and
get_losses / get_total_loss / add_loss, checked against NumPy in float64."""

import numpy as np
import pytest
from gradient_check import check_gradients, floats, grad_case

import towerflow as tf

REDUCTION = tf.losses.Reduction


def numpy_reduced(losses, weights, reduction):
    """TF's compute_weighted_loss in NumPy."""
    weighted = losses * weights
    if reduction == REDUCTION.NONE:
        return weighted
    total = weighted.sum()
    if reduction == REDUCTION.SUM:
        return total
    if reduction == REDUCTION.MEAN:
        denominator = (np.ones_like(losses) * weights).sum()
    else:
        denominator = ((weights != 0) * np.ones_like(losses)).sum()
    return total / denominator if denominator > 0 else 0.0


def huber(error, delta):
    small = np.abs(error) <= delta
    return np.where(small, 0.5 * error ** 2, 0.5 * delta ** 2 + delta * (np.abs(error) - delta))


def unit_rows(rng, shape):
    rows = rng.standard_normal(shape)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


# (name, call(labels, predictions, **kwargs), NumPy per-element losses, labels maker)
LOSSES = [
    ("absolute_difference", tf.losses.absolute_difference,
     lambda y, p: np.abs(p - y), lambda rng, shape: rng.standard_normal(shape)),
    ("mean_squared_error", tf.losses.mean_squared_error,
     lambda y, p: (p - y) ** 2, lambda rng, shape: rng.standard_normal(shape)),
    ("huber_loss", lambda y, p, **kw: tf.losses.huber_loss(y, p, delta=0.7, **kw),
     lambda y, p: huber(p - y, 0.7), lambda rng, shape: rng.standard_normal(shape)),
    ("hinge_loss", tf.losses.hinge_loss,
     lambda y, p: np.maximum(0.0, 1.0 - (2 * y - 1) * p),
     lambda rng, shape: rng.integers(0, 2, shape).astype(np.float64)),
    ("log_loss", lambda y, p, **kw: tf.losses.log_loss(y, 1 / (1 + np.exp(-p)), **kw),
     lambda y, p: -y * np.log(1 / (1 + np.exp(-p)) + 1e-7)
     - (1 - y) * np.log(1 - 1 / (1 + np.exp(-p)) + 1e-7),
     lambda rng, shape: rng.integers(0, 2, shape).astype(np.float64)),
    ("cosine_distance", lambda y, p, **kw: tf.losses.cosine_distance(y, p, axis=1, **kw),
     lambda y, p: 1 - (y * p).sum(axis=1, keepdims=True), unit_rows),
    ("sigmoid_cross_entropy", tf.losses.sigmoid_cross_entropy,
     lambda y, p: np.maximum(p, 0) - p * y + np.log1p(np.exp(-np.abs(p))),
     lambda rng, shape: rng.random(shape)),
]

WEIGHTS = {
    "scalar_one": lambda rng, shape: 1.0,
    "scalar": lambda rng, shape: 2.5,
    "per_example": lambda rng, shape: np.array([1.0, 0.0, 2.0, 0.5])[:, None],
    "per_element_with_zeros": lambda rng, shape: rng.integers(0, 3, shape) * 0.5,
    "all_zero": lambda rng, shape: np.zeros((shape[0], 1)),
}


def run(tensor):
    with tf.Session() as sess:
        return sess.run(tensor)


@pytest.mark.parametrize("reduction", REDUCTION.all())
@pytest.mark.parametrize("weights_name", sorted(WEIGHTS))
@pytest.mark.parametrize("name, call, per_element, make_labels", LOSSES,
                         ids=[case[0] for case in LOSSES])
def test_losses_match_numpy(name, call, per_element, make_labels, weights_name, reduction,
                            rng):
    labels = make_labels(rng, (4, 3))
    predictions = unit_rows(rng, (4, 3)) if name == "cosine_distance" else \
        rng.standard_normal((4, 3))
    weights = WEIGHTS[weights_name](rng, (4, 3))
    if name == "cosine_distance" and np.ndim(weights) == 2 and np.shape(weights)[1] == 3:
        weights = weights[:, :1]        # its losses are [4, 1]: weights [4, 3] are refused
    loss = call(labels, predictions, weights=weights, reduction=reduction)
    losses = per_element(labels, predictions)
    expected = numpy_reduced(losses, weights, reduction)
    assert loss.dtype == tf.float64
    assert loss.shape.as_list() == list(np.shape(expected))
    np.testing.assert_allclose(run(loss), expected, rtol=1e-12, atol=1e-15)


def test_float32_losses_stay_float32(rng):
    labels, predictions = (rng.standard_normal((5, 2)).astype(np.float32) for _ in range(2))
    loss = tf.losses.huber_loss(labels, predictions, weights=np.float32(2.0))
    assert loss.dtype == tf.float32
    expected = 2.0 * huber(predictions.astype(np.float64) - labels, 1.0).mean()
    np.testing.assert_allclose(run(loss), expected, rtol=1e-6)


def test_every_loss_joins_the_losses_collection_and_get_total_loss_sums_them(rng):
    labels, predictions = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
    squared = tf.losses.mean_squared_error(labels, predictions)
    absolute = tf.losses.absolute_difference(labels, predictions, scope="l1")
    classes = tf.losses.sparse_softmax_cross_entropy([0, 1, 1], predictions)
    tf.losses.hinge_loss(labels > 0, predictions, loss_collection=None)   # not collected
    tf.losses.log_loss(labels > 0, 1 / (1 + np.exp(-predictions)), loss_collection="mine")
    assert tf.losses.get_losses() == [squared, absolute, classes]
    assert tf.get_collection(tf.GraphKeys.LOSSES) == [squared, absolute, classes]
    assert tf.losses.get_losses(scope="l1") == [absolute]
    assert len(tf.losses.get_losses(loss_collection="mine")) == 1
    assert absolute.name.startswith("l1/")
    penalty = tf.multiply(0.25, tf.reduce_sum(tf.constant(predictions) ** 2))
    tf.add_to_collection(tf.GraphKeys.REGULARIZATION_LOSSES, penalty)
    extra = tf.constant(1.5, tf.float64)
    tf.losses.add_loss(extra)
    assert tf.losses.get_losses()[-1] is extra
    total = tf.losses.get_total_loss()
    without = tf.losses.get_total_loss(add_regularization_losses=False, name="data_loss")
    assert total.name == "total_loss:0" and without.name == "data_loss:0"
    values = run([squared, absolute, classes, penalty])
    np.testing.assert_allclose(run(total), sum(values) + 1.5, rtol=1e-12)
    np.testing.assert_allclose(run(without), sum(values[:3]) + 1.5, rtol=1e-12)


def test_get_total_loss_without_losses_is_tfs_value_error():
    with pytest.raises(ValueError, match="inputs must be a list of at least one Tensor"):
        tf.losses.get_total_loss()


def test_compute_weighted_loss_takes_integer_losses_and_gives_their_dtype_back():
    loss = tf.losses.compute_weighted_loss(tf.constant([1, 2, 4]), weights=[1.0, 0.0, 1.0])
    assert loss.dtype == tf.int32 and run(loss) == 2      # (1 + 4) / 2, truncated


def test_huber_gradient_at_delta_counts_only_the_quadratic_part():
    """At |error| = delta the gradient is delta (TF's min/subtract form), not 2 delta."""
    predictions = tf.constant([1.0, -0.5, 3.0], tf.float64)
    loss = tf.losses.huber_loss(tf.zeros([3], tf.float64), predictions,
                                reduction=REDUCTION.SUM)
    (grad,) = tf.gradients(loss, predictions)
    np.testing.assert_allclose(run(grad), [1.0, -0.5, 1.0])


@pytest.mark.parametrize("case", [
    grad_case("huber_loss", lambda y, p: tf.losses.huber_loss(y, p, delta=0.8),
              floats(3, 4), floats(3, 4)),
    grad_case("absolute_difference_weighted", lambda y, p, w: tf.losses.absolute_difference(
        y, p, weights=w), floats(3, 2), floats(3, 2), floats(3, 1), unknown=()),
    grad_case("cosine_distance", lambda y, p: tf.losses.cosine_distance(y, p, axis=1),
              floats(3, 4), floats(3, 4)),
    grad_case("log_loss_mean", lambda y, p: tf.losses.log_loss(
        y, tf.sigmoid(p), reduction=REDUCTION.MEAN), floats(2, 3), floats(2, 3)),
], ids=lambda case: case.name)
def test_loss_gradients_match_finite_differences(case, rng):
    check_gradients(case, rng)


@pytest.mark.parametrize("call, message", [
    (lambda: tf.losses.compute_weighted_loss([1.0], reduction="mean"),
     r"^Invalid ReductionKey mean\.$"),
    (lambda: tf.losses.absolute_difference(np.ones((4, 3)), np.ones((4, 3)),
                                           weights=np.ones(4)),
     r"^weights can not be broadcast to values\. values\.rank=2\. weights\.rank=1\."),
    (lambda: tf.losses.mean_squared_error(np.ones((4, 3)), np.ones((4, 3)),
                                          weights=np.ones((4, 2))),
     r"^weights can not be broadcast to values\. Mismatch at dim 1\."),
    (lambda: tf.losses.huber_loss(None, [1.0]), r"^labels must not be None\.$"),
    (lambda: tf.losses.hinge_loss([1.0], None), r"^logits must not be None\.$"),
    (lambda: tf.losses.log_loss([1.0], [0.5], weights=None), r"None values not supported"),
    (lambda: tf.losses.cosine_distance([[1.0]], [[1.0]]), r"^You must specify 'axis'\.$"),
    (lambda: tf.losses.cosine_distance([[1.0]], [[1.0]], axis=1, dim=1),
     r"^Cannot specify both 'axis' and 'dim'$"),
    (lambda: tf.losses.absolute_difference([1.0, 2.0], [1.0, 2.0, 3.0]),
     r"Shapes \(3,\) and \(2,\) are incompatible"),
])
def test_bad_arguments_raise_tensorflows_value_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
