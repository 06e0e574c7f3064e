"""Learning-rate schedules: scalar float32 tensors that follow the global step.

Each schedule is a few ordinary graph ops over the step, cast to float32 as
TensorFlow 1.15 does (``Cast``, ``Mul``, ``Cos``, ``Minimum``, ``Select``...),
so it runs where the step lives: on a GPU, inside the step's CUDA graph, with
no value read back to the host::

    step = tf.train.get_or_create_global_step()
    lr = tf.train.linear_warmup(tf.train.cosine_decay(0.1, step, 10000), step, 500)
    train_op = tf.train.MomentumOptimizer(lr, 0.9).minimize(loss, global_step=step)

Schedules that scale a learning rate accept a float, another schedule of the
same step, or any scalar tensor (multiplied). ``learning_rate_schedule(fn,
step)`` still takes any Python function of the step; it is evaluated on the
host each step (so a GPU plan that uses it is not captured as a CUDA graph).
"""

import math

import numpy as np

from .. import dtypes
from ..graph import core
from ..ops import constant_ops, math_ops


def learning_rate_schedule(schedule, global_step, name=None):
    """A float32 scalar tensor worth ``schedule(step)`` each time it runs, where
    ``step`` is the value of ``global_step`` (a scalar integer or float tensor).
    NOTE: ``schedule`` runs in Python on the step's value, read back from its
    device every step; the built-in schedules below are graph ops instead.

    Example: ``lr = tf.train.learning_rate_schedule(lambda s: 0.1 / (1 + s), step)``.
    """
    step = constant_ops.convert_to_tensor(global_step)
    graph = step.graph
    # Next to the step it reads: the kernel needs its value on the host.
    with graph.as_default(), graph.colocate_with(step.op):
        return graph.create_op("LearningRateSchedule", [step], {"schedule": schedule},
                               name=name or "LearningRateSchedule").outputs[0]


# -- building blocks -----------------------------------------------------------------


def _step_tensor(global_step, schedule_name):
    """``global_step`` as a scalar tensor; TF 1.15's error when it is None."""
    if global_step is None:
        raise ValueError(f"global_step is required for {schedule_name}.")
    step = constant_ops.convert_to_tensor(global_step)
    if not (step.dtype.is_integer or step.dtype.is_floating) or \
            step.shape.ndims not in (0, None):
        raise TypeError(f"a learning-rate schedule needs a scalar integer or float step; "
                        f"got {step.dtype.name} {step.shape}")
    return step


def _as_float32(tensor):
    return math_ops.cast_if_needed(tensor, dtypes.float32)


def _float32_rate(learning_rate):
    """A float learning rate as a float32 constant; a tensor (a schedule, a
    placeholder) as float32."""
    if isinstance(learning_rate, core.Tensor) or hasattr(learning_rate, "_as_graph_element"):
        return _as_float32(constant_ops.convert_to_tensor(learning_rate))
    return constant_ops.constant(float(learning_rate), dtypes.float32,
                                 name="initial_learning_rate")


def _scaled(schedule, learning_rate, global_step, factor, name, combine=math_ops.multiply):
    """``combine(learning_rate, factor(step))`` (a product by default), where
    ``factor`` builds its ops on the float32 step; all of it in name scope
    ``name``, the result named ``name``. ``schedule``: the public function."""
    step = _step_tensor(global_step, schedule)
    with step.graph.as_default(), step.graph.name_scope(name) as scope:
        rate = _float32_rate(learning_rate)
        return combine(rate, factor(_as_float32(step)), name=scope)


def _positive(value, what):
    if not value > 0:
        raise ValueError(f"{what} must be > 0, got {value!r}")
    return value


def _cosine_anneal(start, end, progress):
    """From ``start`` (progress 0) to ``end`` (progress 1) along half a cosine."""
    return end + (start - end) * 0.5 * (1.0 + math_ops.cos(math.pi * progress))


# -- the schedules -------------------------------------------------------------------


def piecewise_constant(x, boundaries, values, name=None):
    """``values[0]`` while ``x <= boundaries[0]``, ``values[i]`` while
    ``boundaries[i-1] < x <= boundaries[i]``, ``values[-1]`` after the last one
    (a float32 tensor; one ``Select`` per boundary).

    Example: ``piecewise_constant(step, [1000, 2000], [0.1, 0.01, 0.001])``.
    """
    boundaries, values = list(boundaries), [float(value) for value in values]
    if len(values) != len(boundaries) + 1:
        raise ValueError(f"piecewise_constant needs one more value than boundaries; got "
                         f"{len(boundaries)} boundaries and {len(values)} values")
    if boundaries != sorted(boundaries):
        raise ValueError(f"piecewise_constant boundaries must increase, got {boundaries}")
    step = _step_tensor(x, "piecewise_constant")
    with step.graph.as_default(), step.graph.name_scope(name or "PiecewiseConstant") as scope:
        step, as_boundary = _comparable(step, boundaries)
        names = [None] * len(boundaries) + [scope]      # the last op is the schedule
        value = constant_ops.constant(values[0], dtypes.float32, name=names[0] or "Const")
        for index, (boundary, after) in enumerate(zip(boundaries, values[1:]), start=1):
            past = math_ops.greater(step, as_boundary(boundary))
            value = math_ops.where(past, constant_ops.constant(after, dtypes.float32), value,
                                   name=names[index])
        return value


def _comparable(step, boundaries):
    """(step, boundary -> constant) that compare exactly, as Python numbers do:
    in the step's own integer dtype when every boundary is a whole number,
    else both in float64."""
    if step.dtype.is_integer and all(_whole_number_in(b, step.dtype) for b in boundaries):
        return step, lambda boundary: constant_ops.constant(int(boundary), step.dtype)
    return (math_ops.cast_if_needed(step, dtypes.float64),
            lambda boundary: constant_ops.constant(float(boundary), dtypes.float64))


def _whole_number_in(value, dtype):
    limits = np.iinfo(dtype.as_numpy_dtype)
    return float(value).is_integer() and limits.min <= value <= limits.max


def exponential_decay(learning_rate, global_step, decay_steps, decay_rate,
                      staircase=False, name=None):
    """``learning_rate * decay_rate ** (step / decay_steps)``; with ``staircase``
    the exponent is floored, so the rate drops every ``decay_steps`` steps.

    Example: ``exponential_decay(0.1, step, decay_steps=1000, decay_rate=0.96)``.
    """
    decay_steps, decay_rate = _positive(decay_steps, "decay_steps"), float(decay_rate)

    def factor(step):
        return math_ops.pow(decay_rate, _progress(step, decay_steps, staircase))
    return _scaled("exponential_decay", learning_rate, global_step, factor,
                   name or "ExponentialDecay")


def natural_exp_decay(learning_rate, global_step, decay_steps, decay_rate,
                      staircase=False, name=None):
    """``learning_rate * exp(-decay_rate * step / decay_steps)`` (with ``staircase``,
    ``step / decay_steps`` floored), built as TF 1.15 builds it:
    ``exp(-decay_rate) ** (step / decay_steps)``.

    Example: ``natural_exp_decay(0.1, step, decay_steps=5, decay_rate=0.5)``.
    """
    decay_steps, decay_rate = _positive(decay_steps, "decay_steps"), float(decay_rate)

    def factor(step):
        natural_rate = math_ops.exp(constant_ops.constant(-decay_rate, dtypes.float32))
        return math_ops.pow(natural_rate, _progress(step, decay_steps, staircase))
    return _scaled("natural_exp_decay", learning_rate, global_step, factor,
                   name or "NaturalExpDecay")


def inverse_time_decay(learning_rate, global_step, decay_steps, decay_rate,
                       staircase=False, name=None):
    """``learning_rate / (1 + decay_rate * step / decay_steps)`` (with ``staircase``,
    ``step / decay_steps`` floored).

    Example: ``inverse_time_decay(0.1, step, decay_steps=1, decay_rate=0.5)``.
    """
    decay_steps, decay_rate = _positive(decay_steps, "decay_steps"), float(decay_rate)

    def denominator(step):
        return 1.0 + decay_rate * _progress(step, decay_steps, staircase)
    return _scaled("inverse_time_decay", learning_rate, global_step, denominator,
                   name or "InverseTimeDecay", combine=math_ops.divide)


def _progress(step, decay_steps, staircase):
    progress = step / float(decay_steps)
    return math_ops.floor(progress) if staircase else progress


def polynomial_decay(learning_rate, global_step, decay_steps, end_learning_rate=0.0001,
                     power=1.0, cycle=False, name=None):
    """``(learning_rate - end_learning_rate) * (1 - s / decay_steps) ** power
    + end_learning_rate`` with ``s = min(step, decay_steps)``; with ``cycle``,
    ``s = step`` and ``decay_steps`` becomes its first multiple at or above the
    step. ``power=1, end_learning_rate=0`` is a linear decay to zero.

    Example: ``polynomial_decay(0.1, step, 10000, end_learning_rate=0.01, power=0.5)``.
    """
    decay_steps = float(_positive(decay_steps, "decay_steps"))
    step = _step_tensor(global_step, "polynomial_decay")
    with step.graph.as_default(), step.graph.name_scope(name or "PolynomialDecay") as scope:
        rate = _float32_rate(learning_rate)
        end_rate = constant_ops.constant(float(end_learning_rate), dtypes.float32)
        step = _as_float32(step)
        if cycle:   # the first multiple of decay_steps >= step (1 at step 0)
            multiplier = math_ops.where(math_ops.equal(step, 0.0), 1.0,
                                        math_ops.ceil(step / decay_steps))
            span = multiplier * decay_steps
        else:
            step, span = math_ops.minimum(step, decay_steps), decay_steps
        remaining = math_ops.pow(1.0 - step / span, float(power))
        return math_ops.add((rate - end_rate) * remaining, end_rate, name=scope)


def cosine_decay(learning_rate, global_step, decay_steps, alpha=0.0, name=None):
    """``learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * s / decay_steps)) + alpha)``
    with ``s = min(step, decay_steps)``: from ``learning_rate`` down to
    ``alpha * learning_rate``, then flat.

    Example: ``cosine_decay(0.1, step, decay_steps=10000, alpha=0.01)``.
    """
    decay_steps, alpha = float(_positive(decay_steps, "decay_steps")), float(alpha)

    def factor(step):
        completed = math_ops.minimum(step, decay_steps) / decay_steps
        cosine = 0.5 * (1.0 + math_ops.cos(math.pi * completed))
        return (1.0 - alpha) * cosine + alpha
    return _scaled("cosine_decay", learning_rate, global_step, factor, name or "CosineDecay")


def linear_warmup(learning_rate, global_step, warmup_steps, name=None):
    """``learning_rate * min(1, (step + 1) / warmup_steps)``: a linear ramp over
    the first ``warmup_steps`` steps (``learning_rate`` may itself be a schedule).

    Example: ``linear_warmup(cosine_decay(0.1, step, 10000), step, warmup_steps=500)``.
    """
    warmup_steps = float(_positive(warmup_steps, "warmup_steps"))

    def factor(step):
        return math_ops.minimum(1.0, (step + 1.0) / warmup_steps)
    return _scaled("linear_warmup", learning_rate, global_step, factor,
                   name or "LinearWarmup")


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
    total_steps = _positive(total_steps, "total_steps")
    peak = float(max_learning_rate)
    initial = peak / float(div_factor)
    final = initial / float(final_div_factor)
    peak_step = float(pct_start) * total_steps - 1
    step = _step_tensor(global_step, "one_cycle")
    with step.graph.as_default(), step.graph.name_scope(name or "OneCycle") as scope:
        step = _as_float32(step)
        rising = _cosine_anneal(initial, peak, step / peak_step) if peak_step > 0 else \
            constant_ops.constant(peak, dtypes.float32)
        falling_progress = (step - peak_step) / (total_steps - 1 - peak_step)
        falling = _cosine_anneal(peak, final, math_ops.minimum(1.0, falling_progress))
        return math_ops.where(step <= peak_step, rising, falling, name=scope)
