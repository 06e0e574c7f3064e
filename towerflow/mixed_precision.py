"""Mixed precision: layers compute in float16 or bfloat16 on float32 master
weights; under float16 the loss is scaled so small gradients do not flush
to zero.

A *policy* names the dtype layers compute in and the dtype their variables
are stored in. ``mixed_float16`` computes in float16, keeps float32 master
weights (each layer reads them through a cast, whose gradient casts back),
and keeps batch-norm statistics in float32::

    tf.mixed_precision.set_global_policy("mixed_float16")
    logits = tf.cast(build_model(images), tf.float32)   # the loss in float32
    opt = tf.mixed_precision.LossScaleOptimizer(tf.train.MomentumOptimizer(0.1, 0.9))
    train_op = opt.minimize(loss, global_step=step)
    sess.run([train_op, opt.scale_used, opt.step_skipped])   # this step's metrics

``mixed_bfloat16`` is the same with bfloat16 compute, and no loss scaling
(as in TensorFlow, whose policy has no loss scale for it): bfloat16 has
float32's exponent range, so gradients do not underflow where float32's
would not; the optimizer is used as it is (``Policy.loss_scale`` is None).

:class:`LossScaleOptimizer` multiplies the loss by a dynamic scale before the
gradients and divides them by it after. A step whose gradients hold an inf
or a NaN changes nothing (variables, optimizer slots, ``global_step``) and
halves the scale; ``step_skipped`` says so for the step that computed it.
After ``growth_steps`` finite steps in a row the scale doubles.
"""

import threading

from . import dtypes
from .graph import core
from .ops import array_ops, constant_ops, indexed_slices, math_ops, state_ops
from .train.optimizer import Optimizer

POLICY_NAMES = ("float32", "float64", "mixed_float16", "mixed_bfloat16")


class Policy:
    """A layer dtype policy: ``compute_dtype``, ``variable_dtype`` and the
    ``loss_scale`` training should use ('dynamic' or None).

    ``Policy("mixed_float16")``: compute float16, variables float32, dynamic
    loss scaling; ``Policy("mixed_bfloat16")``: compute bfloat16, variables
    float32, no loss scaling; ``Policy("float32")``: both float32 (the
    default: layers then use their input's dtype, as without a policy).
    Example: ``tf.mixed_precision.Policy("mixed_bfloat16").compute_dtype`` is
    ``'bfloat16'``.
    """

    def __init__(self, name):
        if name not in POLICY_NAMES:
            raise ValueError(f"unknown mixed-precision policy {name!r}; expected one of "
                             f"{POLICY_NAMES}")
        self.name = name
        mixed = name.startswith("mixed_")
        self.compute_dtype = name[len("mixed_"):] if mixed else name
        self.variable_dtype = "float32" if mixed else name
        self.mixed = mixed
        # TensorFlow's default: only float16 needs its gradients scaled
        self.loss_scale = "dynamic" if name == "mixed_float16" else None

    def __repr__(self):
        return f'<Policy "{self.name}">'


_DEFAULT = Policy("float32")
_state = threading.local()


def set_global_policy(policy):
    """Set the policy of the layers built from now on (in this thread):
    ``set_global_policy("mixed_float16")``; ``None`` restores ``float32``."""
    _state.policy = _DEFAULT if policy is None else \
        policy if isinstance(policy, Policy) else Policy(policy)


def global_policy():
    """The policy layers use now: ``global_policy().name`` is ``'float32'`` by default."""
    return getattr(_state, "policy", _DEFAULT)


def layer_dtypes(x):
    """(variable dtype, compute dtype) of a layer built on input ``x`` now."""
    policy = global_policy()
    if not policy.mixed or not x.dtype.is_floating:
        return x.dtype, x.dtype
    return dtypes.as_dtype(policy.variable_dtype), dtypes.as_dtype(policy.compute_dtype)


class LossScaleOptimizer(Optimizer):
    """Wraps ``optimizer`` with dynamic loss scaling (see the module docstring).

    ``initial_scale`` (default 2**15), ``growth_steps`` (default 2000) and
    ``dynamic=False`` for a fixed scale (steps with inf/NaN gradients are still
    skipped). ``loss_scale`` (a float32 Variable) and ``step_skipped`` (a bool
    tensor of the last ``minimize``/``apply_gradients``) and ``scale_used``
    (the scale that step's gradients were computed with) are the step's
    metrics. Example:
    ``LossScaleOptimizer(tf.train.AdamOptimizer(1e-3)).minimize(loss)``.
    """

    def __init__(self, optimizer, dynamic=True, initial_scale=2.0 ** 15, growth_steps=2000,
                 name="LossScaleOptimizer"):
        if not isinstance(optimizer, Optimizer) or isinstance(optimizer, LossScaleOptimizer):
            raise TypeError(f"LossScaleOptimizer wraps a tf.train optimizer; got {optimizer!r}")
        if not initial_scale > 0 or initial_scale == float("inf"):
            raise ValueError(f"initial_scale must be a finite number > 0, got {initial_scale}")
        if int(growth_steps) < 1:
            raise ValueError(f"growth_steps must be >= 1, got {growth_steps}")
        super().__init__(False, name)
        self.inner_optimizer = optimizer
        self.dynamic = bool(dynamic)
        self._initial_scale, self._growth_steps = float(initial_scale), int(growth_steps)
        self._scales = {}          # graph -> (loss_scale, good_steps) variables
        self._reads = {}           # graph -> the scale read by the step being built
        self.step_skipped = None
        self.scale_used = None

    @property
    def loss_scale(self):
        """The current scale: a float32 Variable of the default graph."""
        return self._scale_variables(core.get_default_graph())[0]

    def get_scaled_loss(self, loss):
        """``loss * loss_scale`` (in the loss's dtype)."""
        loss = constant_ops.convert_to_tensor(loss)
        with loss.graph.as_default():
            return loss * math_ops.cast_if_needed(self._scale_read(loss.graph), loss.dtype)

    def get_unscaled_gradients(self, grads):
        """Each gradient divided by ``loss_scale`` (None stays None)."""
        graph = next((grad.graph for grad in grads if grad is not None), None)
        if graph is None:
            return list(grads)
        with graph.as_default():
            inverse = 1.0 / self._scale_read(graph)
            # an IndexedSlices (tf.gather's gradient) is scaled through its values
            return [None if grad is None else indexed_slices.map_values(
                lambda values: values * math_ops.cast_if_needed(inverse, values.dtype), grad)
                for grad in grads]

    def _scale_read(self, graph):
        """One read of the scale for every tower of the step being built: the
        gradients depend on it, so it happens before the step updates the scale."""
        read = self._reads.get(graph)
        if read is None:
            with graph.control_dependencies(None):
                # NOTE: a copy (x * 1): a variable read is the variable's buffer,
                # which the scale update later in the same run writes in place.
                read = self._reads[graph] = math_ops.multiply(
                    self._scale_variables(graph)[0].value(), 1.0, name="loss_scale_used")
        return read

    def compute_gradients(self, loss, var_list=None, **kwargs):
        """The unscaled gradients of the scaled loss: ``[(grad, var), ...]``."""
        loss = constant_ops.convert_to_tensor(loss)
        with loss.graph.as_default():
            pairs = self.inner_optimizer.compute_gradients(
                self.get_scaled_loss(loss), var_list, **kwargs)
            grads = self.get_unscaled_gradients([grad for grad, _ in pairs])
        return list(zip(grads, [var for _, var in pairs]))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """The inner optimizer's update, skipped where a gradient is not finite,
        then the loss-scale update; sets ``step_skipped``."""
        grads_and_vars = list(grads_and_vars)
        grads = [grad for grad, _ in grads_and_vars if grad is not None]
        if not grads:
            return self.inner_optimizer.apply_gradients(grads_and_vars, global_step, name)
        graph = grads[0].graph
        self.scale_used = self._reads.pop(graph, None)
        with graph.as_default(), graph.name_scope(name or self._name):
            finite = _all_finite(grads)
            self.step_skipped = math_ops.logical_not(finite, name="step_skipped")
            update = self.inner_optimizer._apply_gradients(
                grads_and_vars, global_step, None, gate=finite)
            with graph.control_dependencies([update]):
                scale_update = self._update_scale(graph, finite)
            return array_ops.group(update, scale_update, name="train")

    def _update_scale(self, graph, finite):
        scale, good_steps = self._scale_variables(graph)
        if not self.dynamic:
            return array_ops.no_op()
        grown = math_ops.greater_equal(good_steps.value() + 1, self._growth_steps)
        doubled = math_ops.where(grown, scale.value() * 2.0, scale.value())
        halved = math_ops.maximum(scale.value() * 0.5, 1.0)
        streak = math_ops.where(grown, constant_ops.zeros_like(good_steps.value()),
                                good_steps.value() + 1)
        return array_ops.group(
            scale.assign(math_ops.where(finite, doubled, halved)),
            good_steps.assign(math_ops.where(finite, streak,
                                             constant_ops.zeros_like(good_steps.value()))))

    def _scale_variables(self, graph):
        made = self._scales.get(graph)
        if made is None:
            with graph.as_default(), graph.control_dependencies(None), \
                    graph.name_scope(None):
                made = self._scales[graph] = (
                    state_ops.Variable(self._initial_scale, dtype=dtypes.float32,
                                       trainable=False, name="loss_scale"),
                    state_ops.Variable(0, dtype=dtypes.int64, trainable=False,
                                       name="loss_scale_good_steps"))
        return made

    def get_slot_names(self):
        return self.inner_optimizer.get_slot_names()

    def get_slot(self, var, name):
        return self.inner_optimizer.get_slot(var, name)

    def variables(self):
        graph = core.get_default_graph()
        return self.inner_optimizer.variables() + (
            list(self._scales[graph]) if graph in self._scales else [])


def _all_finite(grads):
    """One bool scalar: every element of every gradient is finite."""
    return math_ops.reduce_all(array_ops.stack(
        [math_ops.reduce_all(math_ops.is_finite(indexed_slices.values_of(grad)))
         for grad in grads]))

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from .api import missing as _missing

__getattr__ = _missing.module_getattr("tf.mixed_precision")
