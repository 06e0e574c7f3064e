"""``tf.losses``: mean losses over a batch, TensorFlow 1.x style."""

from ..graph import core
from ..graph.core import GraphKeys
from ..ops import array_ops, constant_ops, logistic_ops, math_ops, nn_ops
from ..ops.constant_ops import convert_to_tensor


def softmax_cross_entropy(onehot_labels, logits, weights=1.0, label_smoothing=0.0,
                          name=None):
    """Mean cross-entropy of softmax(logits) against one-hot labels, with optional
    label smoothing: ``tf.losses.softmax_cross_entropy(y, logits, label_smoothing=0.1)``."""
    per_example = nn_ops.softmax_cross_entropy_with_logits(
        labels=onehot_labels, logits=logits, label_smoothing=label_smoothing)
    return _weighted_mean(per_example, weights, name or "softmax_cross_entropy_loss")


def sparse_softmax_cross_entropy(labels, logits, weights=1.0, name=None):
    """Mean cross-entropy against integer class labels."""
    per_example = nn_ops.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                  logits=logits)
    return _weighted_mean(per_example, weights, name or "sparse_softmax_cross_entropy_loss")


def sigmoid_cross_entropy(multi_class_labels, logits, weights=1.0, label_smoothing=0,
                          scope=None):
    """Mean of tf.nn.sigmoid_cross_entropy_with_logits over every element
    (weighted as the other losses); ``label_smoothing`` pulls the labels
    toward 1/2: ``z * (1 - s) + s / 2``::

        loss = tf.losses.sigmoid_cross_entropy(multi_hot_labels, logits)
    """
    logits = convert_to_tensor(logits)
    labels = convert_to_tensor(multi_class_labels, dtype=logits.dtype)
    if label_smoothing:
        labels = labels * (1.0 - label_smoothing) + 0.5 * label_smoothing
    per_element = logistic_ops.sigmoid_cross_entropy_with_logits(labels=labels,
                                                                 logits=logits)
    return _weighted_mean(per_element, weights, scope or "sigmoid_cross_entropy_loss")


def mean_squared_error(labels, predictions, weights=1.0, name=None):
    predictions = convert_to_tensor(predictions)
    labels = convert_to_tensor(labels, dtype=predictions.dtype)
    predictions.shape.merge_with(labels.shape)      # TF's static check: a ValueError
    return _weighted_mean(math_ops.squared_difference(predictions, labels), weights,
                          name or "mean_squared_error")


def _weighted_mean(values, weights, name):
    """sum(values * weights) / (count of nonzero weights, broadcast to values):
    TensorFlow 1.x's SUM_BY_NONZERO_WEIGHTS, so weight-0 (padding) examples do
    not dilute the mean; 0 when every weight is 0."""
    if isinstance(weights, (int, float)) and weights == 1.0:
        return _mean_or_zero(values, name)
    weights = convert_to_tensor(weights, dtype=values.dtype)
    present = math_ops.cast(math_ops.not_equal(weights, 0.0), values.dtype) * \
        constant_ops.ones_like(values)
    total = math_ops.reduce_sum(values * weights)
    return math_ops.divide(total, math_ops.maximum(math_ops.reduce_sum(present), 1.0),
                           name=name)


def _mean_or_zero(values, name):
    """The mean of ``values``; 0 when there are none (an empty batch), where
    TensorFlow divides with div_no_nan and reduce_mean would give NaN. The mean
    itself, bits and gradient, is reduce_mean's."""
    mean = math_ops.reduce_mean(values)
    count = math_ops.reduce_prod(array_ops.shape(values))
    return math_ops.where(math_ops.greater(count, 0), mean, constant_ops.zeros_like(mean),
                          name=name)


def get_regularization_losses(scope=None):
    """The regularization losses collected so far (``tf.get_variable(...,
    regularizer=)`` and the layers' ``kernel_regularizer`` add them), those
    whose name matches ``scope`` (a regular expression) when given."""
    return core.get_default_graph().get_collection(GraphKeys.REGULARIZATION_LOSSES, scope)


def get_regularization_loss(scope=None, name="total_regularization_loss"):
    """Their sum, or a 0.0 constant when there are none::

        loss = cross_entropy + tf.losses.get_regularization_loss()
    """
    losses = get_regularization_losses(scope)
    if losses:
        return math_ops.add_n(losses, name=name)
    return constant_ops.constant(0.0)

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.losses")
