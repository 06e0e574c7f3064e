"""``tf.contrib.layers``' initializers, with contrib's own arithmetic (not
core's ``variance_scaling_initializer``): the normal case draws from a
truncated normal of stddev ``sqrt(1.3 * factor / n)``, the uniform one from
``[-sqrt(3 * factor / n), sqrt(3 * factor / n))``, ``n`` the fan the mode picks::

    w = tf.get_variable('w', [784, 10], initializer=tf.contrib.layers.xavier_initializer())
"""

import math

from ... import dtypes
from ...ops import random_ops
from ...ops.init_ops import Initializer

_MODES = ("FAN_IN", "FAN_OUT", "FAN_AVG")


class _ContribVarianceScaling(Initializer):

    def __init__(self, factor, mode, uniform, seed, dtype):
        super().__init__(dtype)
        self.factor, self.mode, self.uniform, self.seed = factor, mode, uniform, seed

    def __call__(self, shape, dtype=None, partition_info=None):
        dtype = self._dtype(dtype)
        _check_floating(dtype)
        n = _fan(list(shape), self.mode)
        if self.uniform:
            limit = math.sqrt(3.0 * self.factor / n)
            return random_ops.random_uniform(shape, -limit, limit, dtype, seed=self.seed)
        stddev = math.sqrt(1.3 * self.factor / n)
        return random_ops.truncated_normal(shape, 0.0, stddev, dtype, seed=self.seed)


def _fan(shape, mode):
    """contrib's estimate: the last two axes are (in, out), the others multiply both."""
    if shape:
        fan_in = float(shape[-2]) if len(shape) > 1 else float(shape[-1])
        fan_out = float(shape[-1])
    else:
        fan_in = fan_out = 1.0
    for dim in shape[:-2]:
        fan_in *= float(dim)
        fan_out *= float(dim)
    return {"FAN_IN": fan_in, "FAN_OUT": fan_out, "FAN_AVG": (fan_in + fan_out) / 2.0}[mode]


def _check_floating(dtype):
    if not dtypes.as_dtype(dtype).is_floating:
        raise TypeError("Cannot create initializer for non-floating point type.")


def variance_scaling_initializer(factor=2.0, mode="FAN_IN", uniform=False, seed=None,
                                 dtype=dtypes.float32):
    """He et al.'s initializer by default (``factor=2.0``, ``mode='FAN_IN'``,
    truncated normal): ``tf.contrib.layers.variance_scaling_initializer()``."""
    _check_floating(dtype)
    if mode not in _MODES:
        raise TypeError(f"Unknown mode {mode} [FAN_IN, FAN_OUT, FAN_AVG]")
    return _ContribVarianceScaling(factor, mode, uniform, seed, dtype)


def xavier_initializer(uniform=True, seed=None, dtype=dtypes.float32):
    """Glorot and Bengio's initializer: ``variance_scaling_initializer(1.0,
    'FAN_AVG', uniform)`` (uniform by default)."""
    return variance_scaling_initializer(1.0, "FAN_AVG", uniform, seed, dtype)


xavier_initializer_conv2d = xavier_initializer
