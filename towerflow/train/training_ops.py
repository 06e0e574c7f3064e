"""The training ops: in-place optimizer updates and learning-rate schedules.

Each ``Apply*`` op names the variable it updates (attr ``variable``, the
VariableV2 op) and its slots (attr ``slots``) rather than taking them as
inputs: its kernel writes into their buffers in the Session, so the op is
stateful, its output *is* the variable's buffer (``aliases_state``) and no
gradient flows through it. It is built colocated with the variable::

    op = apply_gradient_descent(w, learning_rate, grad_w)   # w -= lr * grad_w
"""

import contextlib

from ..graph.registry import register_not_differentiable, register_op
from ..graph.shapes import TensorShape
from .. import dtypes

# Which input of each apply op is the gradient; the others are scalar
# hyperparameters (learning rate, momentum, ...) of the variable's dtype.
_GRAD_INPUT = {"ApplyGradientDescent": 1, "ApplyMomentum": 1, "ApplyAdam": 6,
               "ApplyRMSProp": 4, "ApplyCenteredRMSProp": 4, "ApplyAdagrad": 1,
               "ApplyAdadelta": 3, "ApplyFtrl": 0}


def _apply_shape(op_type):
    grad_index = _GRAD_INPUT[op_type]

    def shape_fn(inputs, attrs):
        var = attrs["variable"].outputs[0]
        grad = inputs[grad_index]
        _check_like_variable(var, grad, "gradient")
        for slot_op in attrs["slots"]:
            _check_like_variable(var, slot_op.outputs[0], "slot")
        hypers = inputs[:-1] if attrs.get("gated") else inputs
        for index, hyper in enumerate(hypers):
            if index != grad_index:
                _check_hyperparameter(var, hyper)
        if attrs.get("gated"):
            _check_gate(inputs[-1])
        return [(var.shape, var.dtype)]
    return shape_fn


def _check_like_variable(var, tensor, what):
    if tensor.dtype is not var.dtype:
        raise TypeError(f"{what} {tensor.name} is {tensor.dtype.name}, but variable "
                        f"{var.op.name} is {var.dtype.name}: they must match")
    if not var.shape.is_compatible_with(tensor.shape):
        raise ValueError(f"{what} {tensor.name} has shape {tensor.shape}, but variable "
                         f"{var.op.name} has shape {var.shape}: they must match")


def _check_hyperparameter(var, tensor):
    if tensor.dtype is not var.dtype or tensor.shape.ndims not in (0, None):
        raise TypeError(f"hyperparameter {tensor.name} must be a scalar of the variable's "
                        f"dtype {var.dtype.name}; got {tensor.dtype.name} {tensor.shape}")


for _op_type in _GRAD_INPUT:
    register_op(_op_type, _apply_shape(_op_type), stateful=True, aliases_state=True)
register_not_differentiable(*_GRAD_INPUT)


def _check_gate(gate):
    if not gate.dtype.is_bool or gate.shape.ndims not in (0, None):
        raise TypeError(f"the gate {gate.name} of an update must be a bool scalar; got "
                        f"{gate.dtype.name} {gate.shape}")


@contextlib.contextmanager
def colocated_with(var):
    """Build ops on ``var``'s device, whatever the enclosing device scope (as
    TensorFlow's ``colocate_with`` does): placement and ``op.device`` agree."""
    graph = var.graph
    with graph.device(None), graph.device(var.op.device_spec), graph.colocate_with(var.op):
        yield


def _apply(op_type, var, inputs, slots=(), name=None, gate=None, **attrs):
    """The update op; given ``gate`` (a bool scalar tensor, its last input) it
    changes nothing (variable and slots) on a step where the gate is false."""
    attrs.update(variable=var.op, slots=tuple(slot.op for slot in slots),
                 gated=gate is not None)
    if gate is not None:
        inputs = list(inputs) + [gate]
    with colocated_with(var):
        return var.graph.create_op(op_type, list(inputs), attrs, name=name or op_type)


def apply_gradient_descent(var, learning_rate, grad, weight_decay=0.0, name=None, gate=None):
    """``var -= learning_rate * grad`` in place (after ``var *= 1 - lr * wd``)."""
    return _apply("ApplyGradientDescent", var, [learning_rate, grad], name=name, gate=gate,
                  weight_decay=float(weight_decay))


def apply_momentum(var, accum, learning_rate, grad, momentum, use_nesterov=False,
                   weight_decay=0.0, name=None, gate=None):
    """``accum = momentum * accum + grad; var -= lr * accum`` (Nesterov:
    ``var -= lr * (grad + momentum * accum)``), in place."""
    return _apply("ApplyMomentum", var, [learning_rate, grad, momentum], [accum], name, gate,
                  use_nesterov=bool(use_nesterov), weight_decay=float(weight_decay))


def apply_adam(var, m, v, beta1_power, beta2_power, learning_rate, beta1, beta2, epsilon,
               grad, weight_decay=0.0, name=None, gate=None):
    """TensorFlow's ApplyAdam, in place: ``lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)``,
    ``m += (g - m)(1 - beta1)``, ``v += (g^2 - v)(1 - beta2)``,
    ``var -= lr_t * m / (sqrt(v) + epsilon)``."""
    inputs = [beta1_power, beta2_power, learning_rate, beta1, beta2, epsilon, grad]
    return _apply("ApplyAdam", var, inputs, [m, v], name, gate,
                  weight_decay=float(weight_decay))


def apply_rms_prop(var, ms, mom, learning_rate, rho, momentum, epsilon, grad, name=None,
                   gate=None):
    """TensorFlow's ApplyRMSProp, in place: ``ms += (grad^2 - ms)(1 - rho)``,
    ``mom = momentum * mom + lr * grad / sqrt(ms + epsilon)``, ``var -= mom``."""
    return _apply("ApplyRMSProp", var, [learning_rate, rho, momentum, epsilon, grad],
                  [ms, mom], name, gate)


def apply_centered_rms_prop(var, mg, ms, mom, learning_rate, rho, momentum, epsilon, grad,
                            name=None, gate=None):
    """TensorFlow's ApplyCenteredRMSProp: RMSProp with ``mg += (grad - mg)(1 - rho)``
    and ``sqrt(ms - mg^2 + epsilon)`` in the denominator."""
    return _apply("ApplyCenteredRMSProp", var, [learning_rate, rho, momentum, epsilon, grad],
                  [mg, ms, mom], name, gate)


def apply_adagrad(var, accum, learning_rate, grad, name=None, gate=None):
    """TensorFlow's ApplyAdagrad, in place: ``accum += grad^2``,
    ``var -= lr * grad / sqrt(accum)``."""
    return _apply("ApplyAdagrad", var, [learning_rate, grad], [accum], name, gate)


def apply_adadelta(var, accum, accum_update, learning_rate, rho, epsilon, grad, name=None,
                   gate=None):
    """TensorFlow's ApplyAdadelta, in place: ``accum = rho * accum + (1 - rho) grad^2``,
    ``update = sqrt(accum_update + eps) / sqrt(accum + eps) * grad``,
    ``accum_update = rho * accum_update + (1 - rho) update^2``, ``var -= lr * update``."""
    return _apply("ApplyAdadelta", var, [learning_rate, rho, epsilon, grad],
                  [accum, accum_update], name, gate)


def apply_ftrl(var, accum, linear, grad, learning_rate, l1, l2, l2_shrinkage,
               learning_rate_power, name=None, gate=None):
    """TensorFlow's ApplyFtrl (ApplyFtrlV2 given ``l2_shrinkage``), in place:
    ``g_s = grad + 2 l2_shrinkage var``, ``new_accum = accum + grad^2``,
    ``linear += g_s - (new_accum^-p - accum^-p) / lr * var``,
    ``var = (sign(linear) l1 - linear) / (new_accum^-p / lr + 2 l2)`` where
    ``|linear| > l1``, else 0; ``accum = new_accum`` (p: learning_rate_power)."""
    return _apply("ApplyFtrl", var, [grad, learning_rate, l1, l2, l2_shrinkage,
                                     learning_rate_power], [accum, linear], name, gate)


# -- learning-rate schedules -----------------------------------------------------


def _schedule_shape(inputs, attrs):
    step = inputs[0]
    if not (step.dtype.is_integer or step.dtype.is_floating) or \
            step.shape.ndims not in (0, None):
        raise TypeError(f"a learning-rate schedule needs a scalar integer or float step; "
                        f"got {step.dtype.name} {step.shape}")
    return [(TensorShape([]), dtypes.float32)]


# One op per schedule: its kernel calls the pure Python function in attr
# `schedule` on the step's value.
register_op("LearningRateSchedule", _schedule_shape)
register_not_differentiable("LearningRateSchedule")
