"""The sparse training ops: an optimizer's update of only the rows of a
variable that an IndexedSlices gradient names (the gradient of tf.gather /
tf.nn.embedding_lookup), as TensorFlow 1.15's ``SparseApply*`` kernels do.

Each op takes its scalar hyperparameters, then the gradient rows
(``values``) and their row numbers (``indices``); like the dense ``Apply*``
ops it names its variable and slots in attrs and updates them in place. The
kernel first sums the rows of a repeated index (TF's optimizer does this,
``_deduplicate_indexed_slices``, before calling its sparse kernel), so::

    op = sparse_apply_adagrad(w, accum, lr, grad.values, grad.indices)
"""

from .. import dtypes
from ..graph.registry import register_not_differentiable, register_op
from .training_ops import _check_hyperparameter, _check_like_variable, colocated_with

SPARSE_APPLY_OPS = ("SparseApplyMomentum", "SparseApplyAdagrad", "SparseApplyRMSProp",
                    "SparseApplyCenteredRMSProp", "SparseApplyAdadelta", "SparseApplyFtrl",
                    "SparseApplyAdam")


def _sparse_apply_shape(inputs, attrs):
    *hypers, values, indices = inputs
    var = attrs["variable"].outputs[0]
    if values.dtype is not var.dtype:
        raise TypeError(f"gradient {values.name} is {values.dtype.name}, but variable "
                        f"{var.op.name} is {var.dtype.name}: they must match")
    if indices.dtype not in (dtypes.int32, dtypes.int64) or indices.shape.ndims not in (1, None):
        raise TypeError(f"indices {indices.name} must be a vector of int32 or int64; got "
                        f"{indices.dtype.name} {indices.shape}")
    if values.shape.ndims is not None and var.shape.ndims is not None and \
            not var.shape[1:].is_compatible_with(values.shape[1:]):
        raise ValueError(f"gradient {values.name} has shape {values.shape}: its rows must "
                         f"match those of variable {var.op.name}, of shape {var.shape}")
    for slot_op in attrs["slots"]:
        _check_like_variable(var, slot_op.outputs[0], "slot")
    for hyper in hypers:
        _check_hyperparameter(var, hyper)
    return [(var.shape, var.dtype)]


for _op_type in SPARSE_APPLY_OPS:
    register_op(_op_type, _sparse_apply_shape, stateful=True, aliases_state=True)
register_not_differentiable(*SPARSE_APPLY_OPS)


def _sparse_apply(op_type, var, hypers, grad, slots, name=None, **attrs):
    attrs.update(variable=var.op, slots=tuple(slot.op for slot in slots))
    with colocated_with(var):
        return var.graph.create_op(op_type, list(hypers) + [grad.values, grad.indices],
                                   attrs, name=name or op_type)


def sparse_apply_momentum(var, accum, learning_rate, grad, momentum, use_nesterov=False):
    """Rows i of ``grad``: ``accum[i] = momentum * accum[i] + g;
    var[i] -= lr * accum[i]`` (Nesterov: ``var[i] -= lr * g + lr * momentum * accum[i]``)."""
    return _sparse_apply("SparseApplyMomentum", var, [learning_rate, momentum], grad,
                         [accum], use_nesterov=bool(use_nesterov))


def sparse_apply_adagrad(var, accum, learning_rate, grad):
    """Rows i: ``accum[i] += g^2; var[i] -= lr * g / sqrt(accum[i])``."""
    return _sparse_apply("SparseApplyAdagrad", var, [learning_rate], grad, [accum])


def sparse_apply_rms_prop(var, ms, mom, learning_rate, rho, momentum, epsilon, grad):
    """Rows i: ``ms[i] = rho ms[i] + (1 - rho) g^2;
    mom[i] = momentum mom[i] + lr g / sqrt(ms[i] + eps); var[i] -= mom[i]``."""
    return _sparse_apply("SparseApplyRMSProp", var, [learning_rate, rho, momentum, epsilon],
                         grad, [ms, mom])


def sparse_apply_centered_rms_prop(var, mg, ms, mom, learning_rate, rho, momentum, epsilon,
                                   grad):
    """RMSProp's rows with ``mg[i] = rho mg[i] + (1 - rho) g`` and
    ``sqrt(ms[i] + eps - mg[i]^2)`` as the denominator."""
    return _sparse_apply("SparseApplyCenteredRMSProp", var,
                         [learning_rate, rho, momentum, epsilon], grad, [mg, ms, mom])


def sparse_apply_adadelta(var, accum, accum_update, learning_rate, rho, epsilon, grad):
    """Adadelta on the rows of ``grad`` (TF's SparseApplyAdadelta)."""
    return _sparse_apply("SparseApplyAdadelta", var, [learning_rate, rho, epsilon], grad,
                         [accum, accum_update])


def sparse_apply_ftrl(var, accum, linear, grad, learning_rate, l1, l2, l2_shrinkage,
                      learning_rate_power):
    """FTRL-proximal on the rows of ``grad`` (TF's SparseApplyFtrl, V2 with
    ``l2_shrinkage``); see apply_ftrl for the formula."""
    return _sparse_apply("SparseApplyFtrl", var,
                         [learning_rate, l1, l2, l2_shrinkage, learning_rate_power], grad,
                         [accum, linear])


def sparse_apply_adam(var, m, v, beta1_power, beta2_power, learning_rate, beta1, beta2,
                      epsilon, grad):
    """TF 1.15's AdamOptimizer._apply_sparse in one kernel: EVERY row of m and v
    decays (``m *= beta1``, ``v *= beta2``), the gradient rows are added
    (``m[i] += (1 - beta1) g``, ``v[i] += (1 - beta2) g^2``), and EVERY row of
    var moves: ``var -= lr_t * m / (sqrt(v) + epsilon)``."""
    hypers = [beta1_power, beta2_power, learning_rate, beta1, beta2, epsilon]
    return _sparse_apply("SparseApplyAdam", var, hypers, grad, [m, v])
