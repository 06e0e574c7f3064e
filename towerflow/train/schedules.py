"""Learning-rate schedules: scalar float32 tensors that follow the global step.

Each schedule is a pure Python function ``step -> learning rate`` held by one
``LearningRateSchedule`` op, whose kernel calls it on the step's value: one
op per training step, whatever the formula, and every formula is plain
Python that can be read and tested on its own::

    step = tf.train.get_or_create_global_step()
    lr = tf.train.linear_warmup(tf.train.cosine_decay(0.1, step, 10000), step, 500)
    train_op = tf.train.MomentumOptimizer(lr, 0.9).minimize(loss, global_step=step)

Schedules that scale a learning rate (``exponential_decay``, ``cosine_decay``,
``linear_warmup``) accept a float, another schedule of the same step (the two
functions are composed into one op) or any scalar tensor (multiplied).
"""

import bisect
import functools
import math

from .. import dtypes
from ..graph import core
from ..ops import constant_ops, math_ops


def learning_rate_schedule(schedule, global_step, name=None):
    """A float32 scalar tensor worth ``schedule(step)`` each time it runs, where
    ``step`` is the value of ``global_step`` (a scalar integer or float tensor).

    Example: ``lr = tf.train.learning_rate_schedule(lambda s: 0.1 / (1 + s), step)``.
    """
    step = constant_ops.convert_to_tensor(global_step)
    graph = step.graph
    # Next to the step it reads: the kernel needs its value on the host.
    with graph.as_default(), graph.colocate_with(step.op):
        return graph.create_op("LearningRateSchedule", [step], {"schedule": schedule},
                               name=name or "LearningRateSchedule").outputs[0]


def _scaled(learning_rate, global_step, factor, name):
    """``learning_rate * factor(step)`` as one schedule op where possible."""
    step = constant_ops.convert_to_tensor(global_step)
    if not isinstance(learning_rate, core.Tensor) and \
            not hasattr(learning_rate, "_as_graph_element"):
        base = functools.partial(_constant, float(learning_rate))
        return learning_rate_schedule(functools.partial(_product, base, factor), step, name)
    learning_rate = constant_ops.convert_to_tensor(learning_rate)
    if learning_rate.dtype is not dtypes.float32:
        learning_rate = math_ops.cast(learning_rate, dtypes.float32)
    base_op = learning_rate.op
    if base_op.type == "LearningRateSchedule" and base_op.inputs[0] is step:
        composed = functools.partial(_product, base_op.attrs["schedule"], factor)
        return learning_rate_schedule(composed, step, name)
    return math_ops.multiply(learning_rate, learning_rate_schedule(factor, step), name=name)


def _constant(value, step):
    return value


def _product(base, factor, step):
    return base(step) * factor(step)


def _positive(value, what):
    if not value > 0:
        raise ValueError(f"{what} must be > 0, got {value!r}")
    return value


# -- the schedules, and their pure step -> value functions --------------------------


def piecewise_constant(x, boundaries, values, name=None):
    """``values[0]`` while ``x <= boundaries[0]``, ``values[i]`` while
    ``boundaries[i-1] < x <= boundaries[i]``, ``values[-1]`` after the last one.

    Example: ``piecewise_constant(step, [1000, 2000], [0.1, 0.01, 0.001])``.
    """
    boundaries, values = list(boundaries), [float(value) for value in values]
    if len(values) != len(boundaries) + 1:
        raise ValueError(f"piecewise_constant needs one more value than boundaries; got "
                         f"{len(boundaries)} boundaries and {len(values)} values")
    if boundaries != sorted(boundaries):
        raise ValueError(f"piecewise_constant boundaries must increase, got {boundaries}")
    fn = functools.partial(piecewise_constant_value, boundaries, values)
    return learning_rate_schedule(fn, x, name or "PiecewiseConstant")


def piecewise_constant_value(boundaries, values, step):
    return values[bisect.bisect_left(boundaries, step)]


def exponential_decay(learning_rate, global_step, decay_steps, decay_rate,
                      staircase=False, name=None):
    """``learning_rate * decay_rate ** (step / decay_steps)``; with ``staircase``
    the exponent is floored, so the rate drops every ``decay_steps`` steps.

    Example: ``exponential_decay(0.1, step, decay_steps=1000, decay_rate=0.96)``.
    """
    factor = functools.partial(exponential_decay_factor, _positive(decay_steps, "decay_steps"),
                               float(decay_rate), bool(staircase))
    return _scaled(learning_rate, global_step, factor, name or "ExponentialDecay")


def exponential_decay_factor(decay_steps, decay_rate, staircase, step):
    exponent = step / decay_steps
    return decay_rate ** (math.floor(exponent) if staircase else exponent)


def cosine_decay(learning_rate, global_step, decay_steps, alpha=0.0, name=None):
    """``learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * s / decay_steps)) + alpha)``
    with ``s = min(step, decay_steps)``: from ``learning_rate`` down to
    ``alpha * learning_rate``, then flat.

    Example: ``cosine_decay(0.1, step, decay_steps=10000, alpha=0.01)``.
    """
    factor = functools.partial(cosine_decay_factor, _positive(decay_steps, "decay_steps"),
                               float(alpha))
    return _scaled(learning_rate, global_step, factor, name or "CosineDecay")


def cosine_decay_factor(decay_steps, alpha, step):
    progress = min(step, decay_steps) / decay_steps
    return (1 - alpha) * 0.5 * (1 + math.cos(math.pi * progress)) + alpha


def linear_warmup(learning_rate, global_step, warmup_steps, name=None):
    """``learning_rate * min(1, (step + 1) / warmup_steps)``: a linear ramp over
    the first ``warmup_steps`` steps (``learning_rate`` may itself be a schedule).

    Example: ``linear_warmup(cosine_decay(0.1, step, 10000), step, warmup_steps=500)``.
    """
    factor = functools.partial(linear_warmup_factor, _positive(warmup_steps, "warmup_steps"))
    return _scaled(learning_rate, global_step, factor, name or "LinearWarmup")


def linear_warmup_factor(warmup_steps, step):
    return min(1.0, (step + 1) / warmup_steps)


def one_cycle(max_learning_rate, global_step, total_steps, pct_start=0.3, div_factor=25.0,
              final_div_factor=1e4, name=None):
    """The one-cycle policy in PyTorch's ``OneCycleLR`` form (cosine annealing
    in both phases, as fast.ai's ``fit_one_cycle``): from
    ``initial = max_learning_rate / div_factor`` up to ``max_learning_rate`` at
    step ``pct_start * total_steps - 1``, then down to
    ``initial / final_div_factor`` at step ``total_steps - 1``, flat after.

    Example: ``one_cycle(0.1, step, total_steps=5000)``.
    """
    if not 0 <= pct_start < 1:
        raise ValueError(f"pct_start must be in [0, 1), got {pct_start!r}")
    fn = functools.partial(one_cycle_value, float(max_learning_rate),
                           _positive(total_steps, "total_steps"), float(pct_start),
                           float(div_factor), float(final_div_factor))
    return learning_rate_schedule(fn, global_step, name or "OneCycle")


def one_cycle_value(max_learning_rate, total_steps, pct_start, div_factor,
                    final_div_factor, step):
    initial = max_learning_rate / div_factor
    final = initial / final_div_factor
    peak_step = pct_start * total_steps - 1
    if step <= peak_step:
        progress = step / peak_step if peak_step > 0 else 1.0
        return _cosine_anneal(initial, max_learning_rate, progress)
    progress = (step - peak_step) / (total_steps - 1 - peak_step)
    return _cosine_anneal(max_learning_rate, final, min(1.0, progress))


def _cosine_anneal(start, end, progress):
    """From ``start`` (progress 0) to ``end`` (progress 1) along half a cosine."""
    return end + (start - end) * 0.5 * (1 + math.cos(math.pi * progress))
