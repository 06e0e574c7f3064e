"""Gradient descent, momentum, Adam, RMSProp, Adagrad, Adadelta and FTRL, with
TensorFlow 1.x's formulas and slots, and decoupled weight decay (SGDW / AdamW)
on the first three. An IndexedSlices gradient (tf.gather's) updates only its
rows, with TF 1.15's sparse kernels (Adam's sparse update still decays all
of m and v and moves every row, as TF 1.15's does).

``learning_rate`` (and every other hyperparameter but Adagrad's
``initial_accumulator_value``) may be a float or a scalar tensor, e.g. a
schedule::

    lr = tf.train.cosine_decay(0.1, global_step, decay_steps=1000)
    train_op = tf.train.MomentumOptimizer(lr, 0.9).minimize(loss, global_step)

``weight_decay=wd`` shrinks every variable by ``1 - lr * wd`` before its
gradient step (Loshchilov & Hutter's decoupled decay, PyTorch's AdamW).
# NOTE: TensorFlow's contrib AdamWOptimizer subtracts ``wd * var`` without the
# learning rate; here the decay is scaled by the (scheduled) learning rate.
"""

from .. import dtypes
from ..ops import array_ops, math_ops, state_scatter_ops
from . import sparse_training_ops, training_ops
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

    def _apply_sparse_duplicate_indices(self, grad, var):
        # TF 1.15: var.scatter_sub(lr * values), a repeated index subtracted each time
        with training_ops.colocated_with(var):
            delta = grad.values * self._hyper("learning_rate", var.dtype)
            return state_scatter_ops.scatter_sub(var, grad.indices, delta).op


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

    def _apply_sparse(self, grad, var):
        return sparse_training_ops.sparse_apply_momentum(
            var, self.get_slot(var, "momentum"), self._hyper("learning_rate", var.dtype),
            grad, self._hyper("momentum", var.dtype), self._use_nesterov)


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

    def _apply_sparse(self, grad, var):
        powers = [math_ops.cast_if_needed(power.value(), var.dtype)
                  for power in self._beta_powers(var.graph)]
        hypers = [self._hyper(name, var.dtype)
                  for name in ("learning_rate", "beta1", "beta2", "epsilon")]
        return sparse_training_ops.sparse_apply_adam(
            var, self.get_slot(var, "m"), self.get_slot(var, "v"), *powers, *hypers, grad)

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


class RMSPropOptimizer(Optimizer):
    """RMSProp as TensorFlow 1.x has it: ``ms += (grad^2 - ms) * (1 - decay)``,
    ``mom = momentum * mom + learning_rate * grad / sqrt(ms + epsilon)``,
    ``var -= mom``; ``centered`` also keeps ``mg``, the mean gradient, and divides
    by ``sqrt(ms - mg^2 + epsilon)``. Slots 'rms' (starting at ONES, as in TF
    1.x), 'mg' (centered only) and 'momentum': variables 'w/RMSProp',
    'w/RMSProp_1', ... in that order.

    Example: ``tf.train.RMSPropOptimizer(1e-3, decay=0.9, momentum=0.9).minimize(loss)``.
    """

    def __init__(self, learning_rate, decay=0.9, momentum=0.0, epsilon=1e-10,
                 use_locking=False, centered=False, name="RMSProp"):
        super().__init__(use_locking, name)
        self._learning_rate, self._decay = learning_rate, decay
        self._momentum, self._epsilon = momentum, epsilon
        self._centered = bool(centered)

    def _hyper_values(self):
        return {"learning_rate": self._learning_rate, "decay": self._decay,
                "momentum": self._momentum, "epsilon": self._epsilon}

    def _create_slots(self, var_list):
        for var in var_list:
            self._filled_slot(var, "rms", self._name, 1)
            if self._centered:
                self._zeros_slot(var, "mg", self._name)
            self._zeros_slot(var, "momentum", self._name)

    def _apply_dense(self, grad, var):
        hypers = [self._hyper(name, var.dtype)
                  for name in ("learning_rate", "decay", "momentum", "epsilon")]
        rms, mom = self.get_slot(var, "rms"), self.get_slot(var, "momentum")
        if self._centered:
            return training_ops.apply_centered_rms_prop(
                var, self.get_slot(var, "mg"), rms, mom, *hypers, grad, gate=self._gate)
        return training_ops.apply_rms_prop(var, rms, mom, *hypers, grad, gate=self._gate)

    def _apply_sparse(self, grad, var):
        hypers = [self._hyper(name, var.dtype)
                  for name in ("learning_rate", "decay", "momentum", "epsilon")]
        rms, mom = self.get_slot(var, "rms"), self.get_slot(var, "momentum")
        if self._centered:
            return sparse_training_ops.sparse_apply_centered_rms_prop(
                var, self.get_slot(var, "mg"), rms, mom, *hypers, grad)
        return sparse_training_ops.sparse_apply_rms_prop(var, rms, mom, *hypers, grad)


class AdagradOptimizer(Optimizer):
    """Adagrad as TensorFlow 1.x has it: ``accumulator += grad^2``,
    ``var -= learning_rate * grad / sqrt(accumulator)``. Slot 'accumulator'
    (variable 'w/Adagrad'), starting at ``initial_accumulator_value`` (> 0).

    Example: ``tf.train.AdagradOptimizer(0.1).minimize(loss)``.
    """

    def __init__(self, learning_rate, initial_accumulator_value=0.1, use_locking=False,
                 name="Adagrad"):
        if not initial_accumulator_value > 0.0:
            raise ValueError(f"initial_accumulator_value must be positive: "
                             f"{initial_accumulator_value}")
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._initial_accumulator_value = float(initial_accumulator_value)

    def _hyper_values(self):
        return {"learning_rate": self._learning_rate}

    def _create_slots(self, var_list):
        for var in var_list:
            self._filled_slot(var, "accumulator", self._name,
                              self._initial_accumulator_value)

    def _apply_dense(self, grad, var):
        return training_ops.apply_adagrad(
            var, self.get_slot(var, "accumulator"), self._hyper("learning_rate", var.dtype),
            grad, gate=self._gate)

    def _apply_sparse(self, grad, var):
        return sparse_training_ops.sparse_apply_adagrad(
            var, self.get_slot(var, "accumulator"), self._hyper("learning_rate", var.dtype),
            grad)


class AdadeltaOptimizer(Optimizer):
    """Adadelta as TensorFlow 1.x has it: ``accum = rho * accum + (1 - rho) * grad^2``,
    ``update = sqrt(accum_update + epsilon) / sqrt(accum + epsilon) * grad``,
    ``accum_update = rho * accum_update + (1 - rho) * update^2``,
    ``var -= learning_rate * update``. Slots 'accum' and 'accum_update'
    (variables 'w/Adadelta', 'w/Adadelta_1'), starting at zero.

    Example: ``tf.train.AdadeltaOptimizer(1.0, rho=0.95).minimize(loss)``.
    """

    def __init__(self, learning_rate=0.001, rho=0.95, epsilon=1e-8, use_locking=False,
                 name="Adadelta"):
        super().__init__(use_locking, name)
        self._learning_rate, self._rho, self._epsilon = learning_rate, rho, epsilon

    def _hyper_values(self):
        return {"learning_rate": self._learning_rate, "rho": self._rho,
                "epsilon": self._epsilon}

    def _create_slots(self, var_list):
        for var in var_list:
            self._zeros_slot(var, "accum", self._name)
            self._zeros_slot(var, "accum_update", self._name)

    def _apply_dense(self, grad, var):
        hypers = [self._hyper(name, var.dtype) for name in ("learning_rate", "rho", "epsilon")]
        return training_ops.apply_adadelta(
            var, self.get_slot(var, "accum"), self.get_slot(var, "accum_update"), *hypers,
            grad, gate=self._gate)

    def _apply_sparse(self, grad, var):
        hypers = [self._hyper(name, var.dtype) for name in ("learning_rate", "rho", "epsilon")]
        return sparse_training_ops.sparse_apply_adadelta(
            var, self.get_slot(var, "accum"), self.get_slot(var, "accum_update"), *hypers,
            grad)


class FtrlOptimizer(Optimizer):
    """FTRL-proximal as TensorFlow 1.15 has it (McMahan et al., "Ad Click
    Prediction"), with online L1/L2 and, given
    ``l2_shrinkage_regularization_strength``, shrinkage-type L2 (TF's
    ApplyFtrlV2): per element, with ``p = learning_rate_power``,
    ``linear += g + 2 l2_shrinkage var - ((accum + g^2)^-p - accum^-p) / lr * var``,
    ``accum += g^2``, ``var = (sign(linear) l1 - linear) / (accum^-p / lr + 2 l2)``
    where ``|linear| > l1``, else 0. Slots 'accum' (starting at
    ``initial_accumulator_value``) and 'linear' (zeros): variables 'w/Ftrl',
    'w/Ftrl_1' (or ``accum_name`` / ``linear_name``).

    Example: ``tf.train.FtrlOptimizer(0.1, l1_regularization_strength=0.01).minimize(loss)``.
    """

    def __init__(self, learning_rate, learning_rate_power=-0.5, initial_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0,
                 use_locking=False, name="Ftrl", accum_name=None, linear_name=None,
                 l2_shrinkage_regularization_strength=0.0):
        super().__init__(use_locking, name)
        _check_ftrl_arguments(initial_accumulator_value, learning_rate_power,
                              l1_regularization_strength, l2_regularization_strength,
                              l2_shrinkage_regularization_strength)
        self._learning_rate = learning_rate
        self._hypers = {"learning_rate_power": learning_rate_power,
                        "l1": l1_regularization_strength, "l2": l2_regularization_strength,
                        "l2_shrinkage": l2_shrinkage_regularization_strength}
        self._initial_accumulator_value = float(initial_accumulator_value)
        self._accum_name, self._linear_name = accum_name, linear_name

    def _hyper_values(self):
        return {"learning_rate": self._learning_rate, **self._hypers}

    def _create_slots(self, var_list):
        for var in var_list:
            self._filled_slot(var, "accum", self._accum_name or self._name,
                              self._initial_accumulator_value)
            self._zeros_slot(var, "linear", self._linear_name or self._name)

    def _ftrl_hypers(self, var):
        return [self._hyper(name, var.dtype) for name in
                ("learning_rate", "l1", "l2", "l2_shrinkage", "learning_rate_power")]

    def _apply_dense(self, grad, var):
        return training_ops.apply_ftrl(
            var, self.get_slot(var, "accum"), self.get_slot(var, "linear"), grad,
            *self._ftrl_hypers(var), gate=self._gate)

    def _apply_sparse(self, grad, var):
        return sparse_training_ops.sparse_apply_ftrl(
            var, self.get_slot(var, "accum"), self.get_slot(var, "linear"), grad,
            *self._ftrl_hypers(var))


def _check_ftrl_arguments(initial_accumulator_value, learning_rate_power, l1, l2,
                          l2_shrinkage):
    """TF 1.15's ftrl.py checks, in its words."""
    if initial_accumulator_value < 0.0:
        raise ValueError(f"initial_accumulator_value {initial_accumulator_value:f} needs to "
                         "be positive or zero")
    if learning_rate_power > 0.0:
        raise ValueError(f"learning_rate_power {learning_rate_power:f} needs to be negative "
                         "or zero")
    for what, value in (("l1_regularization_strength", l1),
                        ("l2_regularization_strength", l2),
                        ("l2_shrinkage_regularization_strength", l2_shrinkage)):
        if value < 0.0:
            raise ValueError(f"{what} {value:f} needs to be positive or zero")
