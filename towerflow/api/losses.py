"""``tf.losses``: TF 1.15's losses_impl.py and losses/util.py. Each loss is
reduced by ``compute_weighted_loss`` (``weights`` a scalar or of the losses'
rank, each dimension 1 or the losses'; by default the weighted sum over the
number of nonzero weights) and added to ``tf.GraphKeys.LOSSES``::

    loss = tf.losses.huber_loss(labels, predictions, weights=mask, delta=0.5)
    total = tf.losses.get_total_loss()       # the LOSSES plus the regularization losses

NOTE: towerflow keeps a float64 input's precision (TF 1.15 reduces in float32,
and its regression losses return float32).
"""

from .. import dtypes
from ..graph import core
from ..graph.core import GraphKeys
from ..ops import array_ops, constant_ops, logistic_ops, math_ops, nn_ops
from ..ops.constant_ops import convert_to_tensor


class Reduction:
    """How ``compute_weighted_loss`` reduces the weighted losses:
    ``tf.losses.Reduction.SUM``."""

    NONE = "none"                                    # the weighted losses, unreduced
    SUM = "weighted_sum"
    MEAN = "weighted_mean"                           # SUM over the sum of the weights
    SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"   # TF's default

    @classmethod
    def all(cls):
        return (cls.NONE, cls.SUM, cls.MEAN, cls.SUM_BY_NONZERO_WEIGHTS)

    @classmethod
    def validate(cls, key):
        if key not in cls.all():
            raise ValueError(f"Invalid ReductionKey {key}.")


def _scope(scope, default):
    return core.get_default_graph().name_scope(scope or default)


# -- the reduction -------------------------------------------------------------------


def compute_weighted_loss(losses, weights=1.0, scope=None,
                          loss_collection=GraphKeys.LOSSES,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """``losses * weights`` reduced as ``reduction`` says, added to
    ``loss_collection``; the sum by nonzero weights is 0 when every weight is 0::

        loss = tf.losses.compute_weighted_loss(per_example, weights=mask)
    """
    Reduction.validate(reduction)
    with _scope(scope, "weighted_loss"):
        losses = convert_to_tensor(losses)
        input_dtype = losses.dtype
        if not losses.dtype.is_floating:
            losses = math_ops.cast(losses, dtypes.float32)      # TF's to_float
        weights = _weights_for(weights, losses)
        loss = _reduced(losses, weights, reduction)
        if loss.dtype is not input_dtype:
            loss = math_ops.cast(loss, input_dtype)
        add_loss(loss, loss_collection)
        return loss


def _weights_for(weights, losses):
    if weights is None:
        raise ValueError("None values not supported.")
    if isinstance(weights, (int, float)) and not isinstance(weights, bool):
        return float(weights)
    weights = math_ops.cast(convert_to_tensor(weights), losses.dtype)
    _assert_broadcastable(weights, losses)
    return weights


def _assert_broadcastable(weights, values):
    """TF's weights_broadcast_ops.assert_broadcastable, where the graph knows
    the shapes: a scalar, or the values' rank with each dimension 1 or theirs."""
    weights_rank, values_rank = weights.shape.ndims, values.shape.ndims
    if weights_rank is None or values_rank is None or weights_rank == 0:
        return
    prefix = "weights can not be broadcast to values."
    if weights_rank != values_rank:
        raise ValueError(f"{prefix} values.rank={values_rank}. weights.rank={weights_rank}. "
                         f"values.shape={values.shape}. weights.shape={weights.shape}.")
    for axis, (have, want) in enumerate(zip(weights.shape.dims, values.shape.dims)):
        if None not in (have, want) and have not in (1, want):
            raise ValueError(f"{prefix} Mismatch at dim {axis}. values.shape="
                             f"{values.shape.as_list()} weights.shape="
                             f"{weights.shape.as_list()}.")


def _reduced(losses, weights, reduction):
    if isinstance(weights, float) and weights == 1.0 and reduction in (
            Reduction.MEAN, Reduction.SUM_BY_NONZERO_WEIGHTS):
        return _mean_or_zero(losses)
    weighted = losses * weights
    if reduction == Reduction.NONE:
        return array_ops.identity(weighted, name="value")
    total = math_ops.reduce_sum(weighted)
    if reduction == Reduction.SUM:
        return array_ops.identity(total, name="value")
    if reduction == Reduction.MEAN:
        return _safe_div(total, math_ops.reduce_sum(constant_ops.ones_like(losses) * weights))
    return _safe_div(total, _num_present(losses, weights))


def _num_present(losses, weights):
    """The count of nonzero weights, broadcast to the losses' shape."""
    if isinstance(weights, float):
        weights = convert_to_tensor(weights, dtype=losses.dtype)
    present = math_ops.cast(math_ops.not_equal(weights, 0.0), losses.dtype)
    return math_ops.reduce_sum(present * constant_ops.ones_like(losses))


def _safe_div(numerator, denominator):
    """numerator / denominator, 0 where the denominator is not positive (and
    no NaN in the gradient there), as TF's _safe_div."""
    positive = math_ops.greater(denominator, 0.0)
    safe = math_ops.where(math_ops.equal(denominator, 0.0),
                          constant_ops.ones_like(denominator), denominator)
    return math_ops.where(positive, math_ops.divide(numerator, safe),
                          constant_ops.zeros_like(numerator), name="value")


def _mean_or_zero(values):
    """The mean of ``values``; 0 when there are none (an empty batch), where
    TensorFlow divides with its safe division and reduce_mean would give NaN.
    The mean itself, bits and gradient, is reduce_mean's."""
    mean = math_ops.reduce_mean(values)
    count = math_ops.reduce_prod(array_ops.shape(values))
    return math_ops.where(math_ops.greater(count, 0), mean, constant_ops.zeros_like(mean),
                          name="value")


# -- the losses --------------------------------------------------------------------


def _not_none(**arguments):
    for name, value in arguments.items():
        if value is None:
            raise ValueError(f"{name} must not be None.")


def _pair(labels, predictions):
    """(labels, predictions) as one float dtype, their static shapes compatible."""
    predictions = convert_to_tensor(predictions)
    if not predictions.dtype.is_floating:
        predictions = math_ops.cast(predictions, dtypes.float32)
    labels = math_ops.cast(convert_to_tensor(labels), predictions.dtype)
    predictions.shape.assert_is_compatible_with(labels.shape)
    return labels, predictions


def softmax_cross_entropy(onehot_labels, logits, weights=1.0, label_smoothing=0, scope=None,
                          loss_collection=GraphKeys.LOSSES,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Cross-entropy of softmax(logits) against one-hot labels, with optional
    label smoothing: ``tf.losses.softmax_cross_entropy(y, logits, label_smoothing=0.1)``."""
    _not_none(onehot_labels=onehot_labels, logits=logits)
    with _scope(scope, "softmax_cross_entropy_loss"):
        per_example = nn_ops.softmax_cross_entropy_with_logits(
            labels=onehot_labels, logits=logits, label_smoothing=label_smoothing)
        return compute_weighted_loss(per_example, weights, None, loss_collection, reduction)


def sparse_softmax_cross_entropy(labels, logits, weights=1.0, scope=None,
                                 loss_collection=GraphKeys.LOSSES,
                                 reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Cross-entropy against integer class labels:
    ``tf.losses.sparse_softmax_cross_entropy(classes, logits)``."""
    _not_none(labels=labels, logits=logits)
    with _scope(scope, "sparse_softmax_cross_entropy_loss"):
        per_example = nn_ops.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                      logits=logits)
        return compute_weighted_loss(per_example, weights, None, loss_collection, reduction)


def sigmoid_cross_entropy(multi_class_labels, logits, weights=1.0, label_smoothing=0,
                          scope=None, loss_collection=GraphKeys.LOSSES,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """tf.nn.sigmoid_cross_entropy_with_logits over every element (weighted as
    the other losses); ``label_smoothing`` pulls the labels toward 1/2:
    ``z * (1 - s) + s / 2``::

        loss = tf.losses.sigmoid_cross_entropy(multi_hot_labels, logits)
    """
    _not_none(multi_class_labels=multi_class_labels, logits=logits)
    with _scope(scope, "sigmoid_cross_entropy_loss"):
        logits = convert_to_tensor(logits)
        labels = math_ops.cast(convert_to_tensor(multi_class_labels), logits.dtype)
        logits.shape.assert_is_compatible_with(labels.shape)
        if label_smoothing > 0:
            labels = labels * (1.0 - label_smoothing) + 0.5 * label_smoothing
        per_element = logistic_ops.sigmoid_cross_entropy_with_logits(labels=labels,
                                                                     logits=logits)
        return compute_weighted_loss(per_element, weights, None, loss_collection, reduction)


def mean_squared_error(labels, predictions, weights=1.0, scope=None,
                       loss_collection=GraphKeys.LOSSES,
                       reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """(predictions - labels)^2: ``tf.losses.mean_squared_error(y, y_hat)``."""
    _not_none(labels=labels, predictions=predictions)
    with _scope(scope, "mean_squared_error"):
        labels, predictions = _pair(labels, predictions)
        return compute_weighted_loss(math_ops.squared_difference(predictions, labels),
                                     weights, None, loss_collection, reduction)


def absolute_difference(labels, predictions, weights=1.0, scope=None,
                        loss_collection=GraphKeys.LOSSES,
                        reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """|predictions - labels|: ``tf.losses.absolute_difference(y, y_hat)``."""
    _not_none(labels=labels, predictions=predictions)
    with _scope(scope, "absolute_difference"):
        labels, predictions = _pair(labels, predictions)
        return compute_weighted_loss(math_ops.abs(predictions - labels), weights, None,
                                     loss_collection, reduction)


def huber_loss(labels, predictions, weights=1.0, delta=1.0, scope=None,
               loss_collection=GraphKeys.LOSSES,
               reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """0.5 x^2 for |x| <= delta, else 0.5 delta^2 + delta (|x| - delta), x the
    error: ``tf.losses.huber_loss(y, y_hat, delta=1.0)``."""
    _not_none(labels=labels, predictions=predictions)
    with _scope(scope, "huber_loss"):
        labels, predictions = _pair(labels, predictions)
        error = math_ops.abs(predictions - labels)
        quadratic = math_ops.minimum(error, delta)
        # NOTE: error - quadratic, not max(error - delta, 0): at |x| = delta the
        # gradient of the linear part is 0 (TF's choice), not 1 on top of the quadratic's
        losses = 0.5 * math_ops.square(quadratic) + delta * (error - quadratic)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def hinge_loss(labels, logits, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
               reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """max(0, 1 - y logits) for labels 0 / 1 read as y = -1 / 1:
    ``tf.losses.hinge_loss(labels, logits)``."""
    _not_none(labels=labels, logits=logits)
    with _scope(scope, "hinge_loss"):
        labels, logits = _pair(labels, logits)
        signs = 2.0 * labels - 1.0
        losses = nn_ops.relu(1.0 - signs * logits)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def log_loss(labels, predictions, weights=1.0, epsilon=1e-7, scope=None,
             loss_collection=GraphKeys.LOSSES, reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """-y log(p + eps) - (1 - y) log(1 - p + eps), for probabilities p:
    ``tf.losses.log_loss(labels, probabilities)``."""
    _not_none(labels=labels, predictions=predictions)
    with _scope(scope, "log_loss"):
        labels, predictions = _pair(labels, predictions)
        losses = -labels * math_ops.log(predictions + epsilon) - \
            (1.0 - labels) * math_ops.log(1.0 - predictions + epsilon)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


def cosine_distance(labels, predictions, axis=None, weights=1.0, scope=None,
                    loss_collection=GraphKeys.LOSSES,
                    reduction=Reduction.SUM_BY_NONZERO_WEIGHTS, dim=None):
    """1 - sum(labels * predictions) along ``axis`` (kept, of size 1), for
    unit-normalized inputs: ``tf.losses.cosine_distance(y, y_hat, axis=1)``."""
    if dim is not None:
        if axis is not None:
            raise ValueError("Cannot specify both 'axis' and 'dim'")
        axis = dim
    if axis is None:
        raise ValueError("You must specify 'axis'.")
    _not_none(labels=labels, predictions=predictions)
    with _scope(scope, "cosine_distance_loss"):
        labels, predictions = _pair(labels, predictions)
        losses = 1.0 - math_ops.reduce_sum(predictions * labels, axis=(axis,), keepdims=True)
        return compute_weighted_loss(losses, weights, None, loss_collection, reduction)


# -- the collections (TF's losses/util.py) -------------------------------------------


def add_loss(loss, loss_collection=GraphKeys.LOSSES):
    """Add ``loss`` to ``loss_collection`` (none when it is None or ''):
    ``tf.losses.add_loss(my_loss)``, then ``tf.losses.get_total_loss()`` counts it."""
    if loss_collection:
        core.get_default_graph().add_to_collection(loss_collection, loss)


def get_losses(scope=None, loss_collection=GraphKeys.LOSSES):
    """The losses collected so far (those whose name matches ``scope``, a
    regular expression, when given): ``tf.losses.get_losses()``."""
    return core.get_default_graph().get_collection(loss_collection, scope)


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


def get_total_loss(add_regularization_losses=True, name="total_loss", scope=None):
    """The sum of the collected losses and (by default) the regularization
    losses; a ValueError when there are none, as TF's add_n::

        train_op = optimizer.minimize(tf.losses.get_total_loss())
    """
    losses = get_losses(scope=scope)
    if add_regularization_losses:
        losses += get_regularization_losses(scope=scope)
    if not losses:
        raise ValueError("inputs must be a list of at least one Tensor/IndexedSlices with "
                         "the same dtype and shape")
    return math_ops.add_n(losses, name=name)

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.losses")
