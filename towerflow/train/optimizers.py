"""Gradient descent, momentum and Adam, with TensorFlow 1.x's formulas, and
decoupled weight decay (SGDW / AdamW) on all three.

``learning_rate`` (and ``momentum``, ``beta1``, ``beta2``, ``epsilon``) may be
a float or a scalar tensor, e.g. a schedule::

    lr = tf.train.cosine_decay(0.1, global_step, decay_steps=1000)
    train_op = tf.train.MomentumOptimizer(lr, 0.9).minimize(loss, global_step)

``weight_decay=wd`` shrinks every variable by ``1 - lr * wd`` before its
gradient step (Loshchilov & Hutter's decoupled decay, PyTorch's AdamW).
# NOTE: TensorFlow's contrib AdamWOptimizer subtracts ``wd * var`` without the
# learning rate; here the decay is scaled by the (scheduled) learning rate.
"""

from .. import dtypes
from ..ops import array_ops, math_ops
from . import training_ops
from ..graph import core
from .optimizer import Optimizer, as_scalar


def _weight_decay(value):
    value = float(value)
    if value < 0:
        raise ValueError(f"weight_decay must be >= 0, got {value}")
    return value


class GradientDescentOptimizer(Optimizer):
    """``var -= learning_rate * grad``.

    Example: ``tf.train.GradientDescentOptimizer(0.01).minimize(loss)``.
    """

    def __init__(self, learning_rate, use_locking=False, name="GradientDescent",
                 weight_decay=0.0):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._weight_decay = _weight_decay(weight_decay)

    def _hyper_values(self):
        return {"learning_rate": self._learning_rate}

    def _apply_dense(self, grad, var):
        return training_ops.apply_gradient_descent(
            var, self._hyper("learning_rate", var.dtype), grad, self._weight_decay,
            gate=self._gate)


class MomentumOptimizer(Optimizer):
    """``accum = momentum * accum + grad; var -= learning_rate * accum``; with
    ``use_nesterov``, ``var -= learning_rate * (grad + momentum * accum)``.
    Slot 'momentum' (variable 'w/Momentum').

    Example: ``tf.train.MomentumOptimizer(0.1, momentum=0.9).minimize(loss)``.
    """

    def __init__(self, learning_rate, momentum, use_locking=False, name="Momentum",
                 use_nesterov=False, weight_decay=0.0):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._momentum = momentum
        self._use_nesterov = bool(use_nesterov)
        self._weight_decay = _weight_decay(weight_decay)

    def _hyper_values(self):
        return {"learning_rate": self._learning_rate, "momentum": self._momentum}

    def _create_slots(self, var_list):
        for var in var_list:
            self._zeros_slot(var, "momentum", self._name)

    def _apply_dense(self, grad, var):
        return training_ops.apply_momentum(
            var, self.get_slot(var, "momentum"), self._hyper("learning_rate", var.dtype),
            grad, self._hyper("momentum", var.dtype), self._use_nesterov,
            self._weight_decay, gate=self._gate)


class AdamOptimizer(Optimizer):
    """Adam as in TensorFlow 1.x: slots 'm' and 'v' ('w/Adam', 'w/Adam_1') and
    two variables 'beta1_power', 'beta2_power' (beta^t, multiplied by beta
    after every step; float32, or float64 for float64 variables);
    ``lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)``,
    ``var -= lr_t * m / (sqrt(v) + epsilon)``.

    Example: ``tf.train.AdamOptimizer(1e-3).minimize(loss)``.
    """

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 use_locking=False, name="Adam", weight_decay=0.0):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._beta1, self._beta2, self._epsilon = beta1, beta2, epsilon
        self._weight_decay = _weight_decay(weight_decay)

    def _hyper_values(self):
        return {"learning_rate": self._learning_rate, "beta1": self._beta1,
                "beta2": self._beta2, "epsilon": self._epsilon}

    def _extra_hyper_dtypes(self):
        return [power.dtype for power in self._beta_powers(core.get_default_graph())]

    def _beta_powers(self, graph):
        return (self._non_slots.get(("beta1_power", graph)),
                self._non_slots.get(("beta2_power", graph)))

    def _create_slots(self, var_list):
        # NOTE: TF 1.x makes the powers float32 always; float64 here when a variable
        # is float64, so that float64 training keeps float64 accuracy.
        dtype = dtypes.float64 if dtypes.float64 in [v.dtype for v in var_list] \
            else dtypes.float32
        first_var = min(var_list, key=lambda var: var.name)
        for name, beta in (("beta1_power", self._beta1), ("beta2_power", self._beta2)):
            self._non_slot_variable(lambda beta=beta: as_scalar(beta, dtype, "beta"),
                                    name, first_var)
        for var in var_list:
            self._zeros_slot(var, "m", self._name)
            self._zeros_slot(var, "v", self._name + "_1")

    def _apply_dense(self, grad, var):
        powers = [math_ops.cast_if_needed(power.value(), var.dtype)
                  for power in self._beta_powers(var.graph)]
        hypers = [self._hyper(name, var.dtype)
                  for name in ("learning_rate", "beta1", "beta2", "epsilon")]
        return training_ops.apply_adam(
            var, self.get_slot(var, "m"), self.get_slot(var, "v"), *powers, *hypers, grad,
            weight_decay=self._weight_decay, gate=self._gate)

    def _gated(self, new_value, variable):
        """``new_value``, or the variable's value on a step the gate skips."""
        if self._gate is None:
            return new_value
        return math_ops.where(self._gate, new_value, variable.value())

    def _finish(self, update_ops, name_scope):
        graph = update_ops[0].graph
        beta1_power, beta2_power = self._beta_powers(graph)
        with graph.control_dependencies(update_ops), \
                training_ops.colocated_with(beta1_power):
            update_beta1 = beta1_power.assign(
                self._gated(beta1_power * self._hyper("beta1", beta1_power.dtype),
                            beta1_power), name="update_beta1")
            update_beta2 = beta2_power.assign(
                self._gated(beta2_power * self._hyper("beta2", beta2_power.dtype),
                            beta2_power), name="update_beta2")
        return array_ops.group(*update_ops, update_beta1, update_beta2, name=name_scope)


class AdamWOptimizer(AdamOptimizer):
    """Adam with decoupled weight decay (``weight_decay`` required):
    ``var *= 1 - learning_rate * weight_decay`` before each Adam step.

    Example: ``tf.train.AdamWOptimizer(weight_decay=1e-2, learning_rate=1e-3)``.
    """

    def __init__(self, weight_decay, learning_rate=0.001, beta1=0.9, beta2=0.999,
                 epsilon=1e-8, use_locking=False, name="AdamW"):
        super().__init__(learning_rate, beta1, beta2, epsilon, use_locking, name,
                         weight_decay=weight_decay)
