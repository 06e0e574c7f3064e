"""``tf.metrics``: streaming metrics. Each returns ``(value, update_op)``: the
update op adds a batch to running totals kept in local variables
(LOCAL_VARIABLES and METRIC_VARIABLES, named as TF names them:
``accuracy/total``, ``accuracy/count``) and yields the metric so far; the
value reads the totals without changing them::

    acc, update_acc = tf.metrics.accuracy(labels, predictions)
    sess.run(tf.local_variables_initializer())     # zeroes the totals
    for batch in batches:
        sess.run(update_acc, {x: batch[0], y: batch[1]})
    sess.run(acc)                                  # over every batch seen

Built from ordinary ops, so a metric runs on whatever device its inputs are on.
"""

import numpy as np

from .. import dtypes
from ..graph import core
from ..graph.core import GraphKeys
from ..ops import array_ops, constant_ops, math_ops, state_ops


def metric_variable(shape, dtype, validate_shape=True, name=None):
    """A zero-initialised local variable in LOCAL_VARIABLES and METRIC_VARIABLES."""
    dtype = dtypes.as_dtype(dtype)
    return state_ops.Variable(np.zeros(shape, dtype.as_numpy_dtype), trainable=False,
                              name=name, validate_shape=validate_shape,
                              collections=[GraphKeys.LOCAL_VARIABLES,
                                           GraphKeys.METRIC_VARIABLES])


def mean(values, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """The (weighted) mean of every value seen: total / count.

    Example: ``mean_loss, update = tf.metrics.mean(loss)``.
    """
    graph = core.get_default_graph()
    with graph.name_scope(name or "mean"):
        values = math_ops.cast_if_needed(values, dtypes.float32)
        total = metric_variable([], dtypes.float32, name="total")
        count = metric_variable([], dtypes.float32, name="count")
        if weights is None:
            num_values = math_ops.reduce_sum(constant_ops.ones_like(values))
        else:
            values, weights = _weighted(values, weights)
            values = math_ops.multiply(values, weights)
            num_values = math_ops.reduce_sum(weights)
        # NOTE: TF orders the count's update after ``values`` with a control
        # dependency; a plan runs ops in creation order, which already does.
        update_total = state_ops.assign_add(total, math_ops.reduce_sum(values))
        update_count = state_ops.assign_add(count, num_values)
        value = _safe_div(total.value(), count.value(), "value")
        update_op = _safe_div(update_total, update_count, "update_op")
    return _collected(value, update_op, metrics_collections, updates_collections)


def accuracy(labels, predictions, weights=None, metrics_collections=None,
             updates_collections=None, name=None):
    """How often ``predictions`` equal ``labels`` (weighted by ``weights``)::

        acc, update = tf.metrics.accuracy(labels, tf.argmax(logits, 1))
    """
    labels, predictions, weights = _squeezed(labels, predictions, weights)
    if not predictions.shape.is_compatible_with(labels.shape):
        raise ValueError(f"Shapes {predictions.shape} and {labels.shape} are incompatible")
    predictions = math_ops.cast_if_needed(predictions, labels.dtype)
    is_correct = math_ops.cast(math_ops.equal(predictions, labels), dtypes.float32)
    return mean(is_correct, weights, metrics_collections, updates_collections,
                name or "accuracy")


def mean_squared_error(labels, predictions, weights=None, metrics_collections=None,
                       updates_collections=None, name=None):
    """The mean of (labels - predictions)^2: ``tf.metrics.mean_squared_error(y, y_hat)``."""
    labels, predictions, weights = _squeezed(labels, predictions, weights)
    squared = math_ops.squared_difference(labels, predictions)
    return mean(squared, weights, metrics_collections, updates_collections,
                name or "mean_squared_error")


def mean_absolute_error(labels, predictions, weights=None, metrics_collections=None,
                        updates_collections=None, name=None):
    """The mean of |predictions - labels|: ``tf.metrics.mean_absolute_error(y, y_hat)``."""
    labels, predictions, weights = _squeezed(labels, predictions, weights)
    absolute = math_ops.abs(math_ops.subtract(predictions, labels))
    return mean(absolute, weights, metrics_collections, updates_collections,
                name or "mean_absolute_error")


def true_positives(labels, predictions, weights=None, metrics_collections=None,
                   updates_collections=None, name=None):
    """The (weighted) count of labels and predictions both true (as bool)."""
    return _count_where(labels, predictions, True, True, weights, metrics_collections,
                        updates_collections, name or "true_positives")


def false_positives(labels, predictions, weights=None, metrics_collections=None,
                    updates_collections=None, name=None):
    """The (weighted) count of predictions true where labels are false."""
    return _count_where(labels, predictions, False, True, weights, metrics_collections,
                        updates_collections, name or "false_positives")


def true_negatives(labels, predictions, weights=None, metrics_collections=None,
                   updates_collections=None, name=None):
    """The (weighted) count of labels and predictions both false."""
    return _count_where(labels, predictions, False, False, weights, metrics_collections,
                        updates_collections, name or "true_negatives")


def false_negatives(labels, predictions, weights=None, metrics_collections=None,
                    updates_collections=None, name=None):
    """The (weighted) count of predictions false where labels are true."""
    return _count_where(labels, predictions, True, False, weights, metrics_collections,
                        updates_collections, name or "false_negatives")


def precision(labels, predictions, weights=None, metrics_collections=None,
              updates_collections=None, name=None):
    """true_positives / (true_positives + false_positives), 0 before any
    positive prediction: ``tf.metrics.precision(labels, predictions)``."""
    return _ratio(labels, predictions, weights, false_positives, metrics_collections,
                  updates_collections, name or "precision")


def recall(labels, predictions, weights=None, metrics_collections=None,
           updates_collections=None, name=None):
    """true_positives / (true_positives + false_negatives), 0 before any
    positive label: ``tf.metrics.recall(labels, predictions)``."""
    return _ratio(labels, predictions, weights, false_negatives, metrics_collections,
                  updates_collections, name or "recall")


def _ratio(labels, predictions, weights, other_count, metrics_collections,
           updates_collections, name):
    graph = core.get_default_graph()
    with graph.name_scope(name):
        true_p, update_true_p = true_positives(labels, predictions, weights)
        other, update_other = other_count(labels, predictions, weights)
        value = _positive_ratio(true_p, other, "value")
        update_op = _positive_ratio(update_true_p, update_other, "update_op")
    return _collected(value, update_op, metrics_collections, updates_collections)


def _positive_ratio(true_p, other, name):
    return _safe_div(true_p, math_ops.add(true_p, other), name)


def _count_where(labels, predictions, label_value, prediction_value, weights,
                 metrics_collections, updates_collections, name):
    graph = core.get_default_graph()
    with graph.name_scope(name):
        labels, predictions, weights = _squeezed(
            math_ops.cast_if_needed(labels, dtypes.bool),
            math_ops.cast_if_needed(predictions, dtypes.bool), weights)
        hits = math_ops.logical_and(_is(labels, label_value), _is(predictions, prediction_value))
        hits = math_ops.cast(hits, dtypes.float32)
        if weights is not None:
            hits, weights = _weighted(hits, weights)
            hits = math_ops.multiply(hits, weights)
        count = metric_variable([], dtypes.float32, name="count")
        update_op = state_ops.assign_add(count, math_ops.reduce_sum(hits))
        value = array_ops.identity(count.value(), name="value")
    return _collected(value, update_op, metrics_collections, updates_collections)


def _is(tensor, value):
    return tensor if value else math_ops.logical_not(tensor)


def _weighted(values, weights):
    """``values`` and ``weights`` (float32) broadcast to ``values``' shape."""
    weights = math_ops.cast_if_needed(weights, dtypes.float32)
    if not _broadcastable(weights.shape, values.shape):
        raise ValueError(f"weights of shape {weights.shape} cannot be broadcast to "
                         f"values of shape {values.shape}")
    return values, math_ops.multiply(weights, constant_ops.ones_like(values))


def _broadcastable(weights_shape, values_shape):
    if weights_shape.dims is None or values_shape.dims is None:
        return True
    if len(weights_shape.dims) > len(values_shape.dims):
        return False
    pairs = zip(reversed(weights_shape.dims), reversed(values_shape.dims))
    return all(w in (1, None) or v is None or w == v for w, v in pairs)


def _squeezed(labels, predictions, weights):
    """Tensors, with a trailing dimension of 1 dropped from predictions or
    labels whose rank is one more than the other's (TF's rule)."""
    predictions = constant_ops.convert_to_tensor(predictions)
    labels = constant_ops.convert_to_tensor(labels)
    rank_p, rank_l = predictions.shape.ndims, labels.shape.ndims
    if rank_p is not None and rank_l is not None:
        if rank_p == rank_l + 1 and predictions.shape.dims[-1] == 1:
            predictions = array_ops.squeeze(predictions, [-1])
        elif rank_l == rank_p + 1 and labels.shape.dims[-1] == 1:
            labels = array_ops.squeeze(labels, [-1])
    if weights is not None:
        weights = constant_ops.convert_to_tensor(weights)
        rank_w = weights.shape.ndims
        if rank_w is not None and rank_p is not None and rank_w == \
                predictions.shape.ndims + 1 and weights.shape.dims[-1] == 1:
            weights = array_ops.squeeze(weights, [-1])
    return labels, predictions, weights


def _safe_div(numerator, denominator, name):
    """numerator / denominator, 0 where the denominator is 0 (TF's div_no_nan)."""
    positive = math_ops.greater(denominator, 0.0)
    safe = math_ops.where(positive, denominator, constant_ops.ones_like(denominator))
    return math_ops.where(positive, math_ops.divide(numerator, safe),
                          constant_ops.zeros_like(numerator), name=name)


def _collected(value, update_op, metrics_collections, updates_collections):
    graph = value.graph
    for key in metrics_collections or ():
        graph.add_to_collection(key, value)
    for key in updates_collections or ():
        graph.add_to_collection(key, update_op)
    return value, update_op

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.metrics")
