"""``tf.contrib.layers``' regularizers: functions ``weights -> scalar
penalty``, for ``weights_regularizer=`` (contrib layers), ``kernel_regularizer=``
(``tf.layers``), ``tf.get_variable(regularizer=...)`` or ``apply_regularization``::

    penalty = tf.contrib.layers.apply_regularization(
        tf.contrib.layers.l2_regularizer(1e-4), [w1, w2])   # also in REGULARIZATION_LOSSES
"""

import numbers

from ...graph import core
from ...graph.core import GraphKeys
from ...ops import constant_ops, math_ops, nn_ops

WEIGHTS = "weights"   # TF's GraphKeys.WEIGHTS: apply_regularization's default list


def _checked_scale(scale):
    """TF 1.15's checks; None for a scale of 0 (the regularizer is disabled)."""
    if isinstance(scale, numbers.Integral):
        raise ValueError(f"scale cannot be an integer: {scale}")  # noqa: TRY004
    if isinstance(scale, numbers.Real):
        if scale < 0.0:
            raise ValueError(f"Setting a scale less than 0 on a regularizer: {scale:g}.")
        if scale == 0.0:
            return None
    return scale


def _regularizer(scale, scope, default_name, penalty):
    if _checked_scale(scale) is None:
        return lambda _: None

    def regularize(weights):
        with core.get_default_graph().name_scope(scope or default_name):
            weights = constant_ops.convert_to_tensor(weights)
            factor = constant_ops.convert_to_tensor(scale, dtype=weights.dtype.base_dtype,
                                                    name="scale")
            return math_ops.multiply(factor, penalty(weights), name="value")
    return regularize


def l1_regularizer(scale, scope=None):
    """``scale * sum(|w|)``: ``tf.contrib.layers.l1_regularizer(1e-3)``."""
    return _regularizer(scale, scope, "l1_regularizer",
                        lambda weights: math_ops.reduce_sum(math_ops.abs(weights)))


def l2_regularizer(scale, scope=None):
    """``scale * sum(w**2) / 2`` (``tf.nn.l2_loss``): ``tf.contrib.layers.l2_regularizer(1e-4)``."""
    return _regularizer(scale, scope, "l2_regularizer", nn_ops.l2_loss)


def apply_regularization(regularizer, weights_list=None):
    """The sum of ``regularizer`` over ``weights_list`` (default: the 'weights'
    collection), added to REGULARIZATION_LOSSES and returned."""
    graph = core.get_default_graph()
    weights_list = weights_list or graph.get_collection(WEIGHTS)
    if not weights_list:
        raise ValueError("No weights to regularize.")
    with graph.name_scope("get_regularization_penalty"):
        penalties = [regularizer(weights) for weights in weights_list]
        penalties = [constant_ops.constant(0.0) if penalty is None else penalty
                     for penalty in penalties]
        for penalty in penalties:
            if penalty.shape.ndims != 0:
                raise ValueError("regularizer must return a scalar Tensor instead of a "
                                 f"Tensor with rank {penalty.shape.ndims}.")
        total = math_ops.add_n(penalties)
    graph.add_to_collection(GraphKeys.REGULARIZATION_LOSSES, total)
    return total
