"""Learning-rate schedules as graph ops of the global step, against the
Python formulas they replace (towerflow's schedules until they became graph
ops, copied below) and TensorFlow 1.15's documented formulas for the ones
added with them, over hundreds of steps."""

import math

import numpy as np
import pytest

import towerflow as tf
from towerflow.recipes import cifar10

EPS32 = float(np.finfo(np.float32).eps)


# -- the reference formulas, in float64 ----------------------------------------------------
# The first five are towerflow's former Python schedules, as they were.

def piecewise_constant_value(boundaries, values, step):
    import bisect
    return values[bisect.bisect_left(boundaries, step)]


def exponential_decay_factor(decay_steps, decay_rate, staircase, step):
    exponent = step / decay_steps
    return decay_rate ** (math.floor(exponent) if staircase else exponent)


def cosine_decay_factor(decay_steps, alpha, step):
    progress = min(step, decay_steps) / decay_steps
    return (1 - alpha) * 0.5 * (1 + math.cos(math.pi * progress)) + alpha


def linear_warmup_factor(warmup_steps, step):
    return min(1.0, (step + 1) / warmup_steps)


def one_cycle_value(max_learning_rate, total_steps, pct_start, div_factor,
                    final_div_factor, step):
    initial = max_learning_rate / div_factor
    final = initial / final_div_factor
    peak_step = pct_start * total_steps - 1
    if step <= peak_step:
        progress = step / peak_step if peak_step > 0 else 1.0
        return cosine_anneal(initial, max_learning_rate, progress)
    progress = (step - peak_step) / (total_steps - 1 - peak_step)
    return cosine_anneal(max_learning_rate, final, min(1.0, progress))


def cosine_anneal(start, end, progress):
    return end + (start - end) * 0.5 * (1 + math.cos(math.pi * progress))


# TensorFlow 1.15's formulas (tf.train.*_decay docstrings).

def polynomial_decay_value(rate, decay_steps, end_rate, power, cycle, step):
    if cycle:
        decay_steps = decay_steps * (math.ceil(step / decay_steps) if step else 1)
    else:
        step = min(step, decay_steps)
    return (rate - end_rate) * (1 - step / decay_steps) ** power + end_rate


def natural_exp_decay_value(rate, decay_steps, decay_rate, staircase, step):
    progress = math.floor(step / decay_steps) if staircase else step / decay_steps
    return rate * math.exp(-decay_rate * progress)


def inverse_time_decay_value(rate, decay_steps, decay_rate, staircase, step):
    progress = math.floor(step / decay_steps) if staircase else step / decay_steps
    return rate / (1 + decay_rate * progress)


def old_cifar10_rate(total, step):
    """The cifar10 recipe's former schedule: a linear decay to 0 (a Python
    function), ramped up over the first fifth."""
    warmup = max(1, total // 5)
    return 0.2 * max(0.0, 1.0 - step / max(total, 1)) * linear_warmup_factor(warmup, step)


# -- the cases -----------------------------------------------------------------------------

# name: (build(step), reference(step), scale of the values, float32 ops in the formula)
CASES = {
    "piecewise": (lambda s: tf.train.piecewise_constant(s, [10, 20, 100], [1.0, 0.5, 0.1, 0.01]),
                  lambda s: piecewise_constant_value([10, 20, 100], [1.0, 0.5, 0.1, 0.01], s),
                  1.0, 1),
    "exponential": (lambda s: tf.train.exponential_decay(0.1, s, 30, 0.5),
                    lambda s: 0.1 * exponential_decay_factor(30, 0.5, False, s), 0.1, 6),
    "staircase": (lambda s: tf.train.exponential_decay(0.1, s, 30, 0.5, staircase=True),
                  lambda s: 0.1 * exponential_decay_factor(30, 0.5, True, s), 0.1, 6),
    "cosine": (lambda s: tf.train.cosine_decay(0.1, s, 250, alpha=0.1),
               lambda s: 0.1 * cosine_decay_factor(250, 0.1, s), 0.1, 10),
    "warmup": (lambda s: tf.train.linear_warmup(0.1, s, 40),
               lambda s: 0.1 * linear_warmup_factor(40, s), 0.1, 6),
    "warmup_exponential": (
        lambda s: tf.train.linear_warmup(tf.train.exponential_decay(0.1, s, 20, 0.9), s, 25),
        lambda s: 0.1 * exponential_decay_factor(20, 0.9, False, s) *
        linear_warmup_factor(25, s), 0.1, 11),
    "one_cycle": (lambda s: tf.train.one_cycle(1.0, s, total_steps=200),
                  lambda s: one_cycle_value(1.0, 200, 0.3, 25.0, 1e4, s), 1.0, 10),
    "one_cycle_no_rise": (lambda s: tf.train.one_cycle(0.5, s, 200, pct_start=0.0),
                          lambda s: one_cycle_value(0.5, 200, 0.0, 25.0, 1e4, s), 0.5, 10),
    "polynomial": (lambda s: tf.train.polynomial_decay(0.1, s, 200, 0.01, power=0.5),
                   lambda s: polynomial_decay_value(0.1, 200, 0.01, 0.5, False, s), 0.1, 9),
    "polynomial_cycle": (
        lambda s: tf.train.polynomial_decay(0.1, s, 70, 0.001, power=2.0, cycle=True),
        lambda s: polynomial_decay_value(0.1, 70, 0.001, 2.0, True, s), 0.1, 11),
    "natural_exp": (lambda s: tf.train.natural_exp_decay(0.1, s, 25, 0.3),
                    lambda s: natural_exp_decay_value(0.1, 25, 0.3, False, s), 0.1, 7),
    "natural_exp_staircase": (
        lambda s: tf.train.natural_exp_decay(0.1, s, 25, 0.3, staircase=True),
        lambda s: natural_exp_decay_value(0.1, 25, 0.3, True, s), 0.1, 8),
    "inverse_time": (lambda s: tf.train.inverse_time_decay(0.1, s, 10, 0.5),
                     lambda s: inverse_time_decay_value(0.1, 10, 0.5, False, s), 0.1, 6),
    "inverse_time_staircase": (
        lambda s: tf.train.inverse_time_decay(0.1, s, 10, 0.5, staircase=True),
        lambda s: inverse_time_decay_value(0.1, 10, 0.5, True, s), 0.1, 7),
}
STEPS = range(320)


def schedule_values(build, steps=STEPS, step_dtype=tf.int64):
    step = tf.placeholder(step_dtype, [])
    learning_rate = build(step)
    assert learning_rate.dtype == tf.float32 and learning_rate.shape.ndims == 0
    with tf.Session() as sess:
        return np.array([sess.run(learning_rate, {step: value}) for value in steps])


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_schedule_matches_its_python_formula_step_by_step(name):
    build, reference, scale, float32_ops = CASES[name]
    got = schedule_values(build)
    want = np.array([reference(step) for step in STEPS])
    # Each float32 op rounds by up to half an ulp (of the values' scale, at most).
    np.testing.assert_allclose(got, want, rtol=0, atol=float32_ops * EPS32 / 2 * scale)


def test_piecewise_constant_is_exact_at_and_around_each_boundary():
    boundaries, values = [10, 20], [1.0, 0.5, 0.1]
    steps = [0, 9, 10, 11, 19, 20, 21, 2**40]
    got = schedule_values(lambda s: tf.train.piecewise_constant(s, boundaries, values), steps)
    assert got.tolist() == [np.float32(piecewise_constant_value(boundaries, values, step))
                            for step in steps]
    float_boundaries = [2.5, 7.0]
    got = schedule_values(lambda s: tf.train.piecewise_constant(s, float_boundaries, values),
                          [2, 3, 7, 8])
    np.testing.assert_array_equal(got, np.float32([1.0, 0.5, 0.5, 0.1]))
    got = schedule_values(lambda s: tf.train.piecewise_constant(s, boundaries, values),
                          [10.0, 10.5], step_dtype=tf.float32)
    np.testing.assert_array_equal(got, np.float32([1.0, 0.5]))
    past_int32 = [2**31, 2**32]             # compared exactly, not wrapped into int32
    got = schedule_values(lambda s: tf.train.piecewise_constant(s, past_int32, values),
                          [0, 2**31 - 1], step_dtype=tf.int32)
    np.testing.assert_array_equal(got, np.float32([1.0, 1.0]))


def test_the_cifar10_recipes_schedule_is_the_former_one():
    steps_per_epoch, epochs = 20, 3
    total = steps_per_epoch * epochs
    step = tf.train.get_or_create_global_step()
    optimizer = cifar10.RECIPE.optimizer(step, total)
    with tf.Session() as sess:
        got = []
        for value in range(total + 10):
            step.load(value, sess)
            got.append(sess.run(optimizer._learning_rate))
    got = np.array(got)
    want = np.array([old_cifar10_rate(total, value) for value in range(total + 10)])
    float32_ops = 12                            # polynomial_decay 8, linear_warmup 4
    np.testing.assert_allclose(got, want, rtol=0, atol=float32_ops * EPS32 / 2 * 0.2)
    assert got[total:].tolist() == [0.0] * 10        # flat at 0 after the last step


def test_schedules_are_graph_ops_named_after_the_schedule():
    step = tf.train.get_or_create_global_step()
    rate = tf.train.linear_warmup(tf.train.cosine_decay(0.1, step, 100), step, 10)
    assert rate.op.name == "LinearWarmup"
    assert tf.train.exponential_decay(0.1, step, 10, 0.5, name="lr").op.name == "lr"
    assert tf.train.piecewise_constant(step, [5], [1.0, 0.5]).op.name == "PiecewiseConstant"
    assert tf.train.piecewise_constant(step, [], [1.0]).op.name == "PiecewiseConstant_1"


@pytest.mark.parametrize("build", [
    lambda: tf.train.exponential_decay(0.1, None, 10, 0.5),
    lambda: tf.train.polynomial_decay(0.1, None, 10),
    lambda: tf.train.natural_exp_decay(0.1, None, 10, 0.5),
    lambda: tf.train.inverse_time_decay(0.1, None, 10, 0.5),
    lambda: tf.train.cosine_decay(0.1, None, 10),
], ids=["exponential", "polynomial", "natural_exp", "inverse_time", "cosine"])
def test_a_missing_global_step_is_tensorflows_error(build):
    with pytest.raises(ValueError, match=r"^global_step is required for \w+_decay\.$"):
        build()


def test_new_schedules_reject_bad_arguments():
    step = tf.train.get_or_create_global_step()
    for build in (lambda: tf.train.polynomial_decay(0.1, step, 0),
                  lambda: tf.train.natural_exp_decay(0.1, step, -1, 0.5),
                  lambda: tf.train.inverse_time_decay(0.1, step, 0, 0.5)):
        with pytest.raises(ValueError, match="decay_steps must be > 0, got"):
            build()
