"""Variable initializers: callables ``init(shape, dtype)`` returning a tensor
(TensorFlow 1.x's ``tf.glorot_uniform_initializer()`` and friends)::

    w = tf.Variable(tf.glorot_uniform_initializer(seed=1)([784, 10]))
"""

import math

import numpy as np

from .. import dtypes
from . import constant_ops, random_ops


class Initializer:
    """Base class: ``__call__(shape, dtype=None)`` returns an initial-value tensor."""

    def __init__(self, dtype=dtypes.float32):
        self.dtype = dtypes.as_dtype(dtype)

    def _dtype(self, dtype):
        return dtypes.as_dtype(dtype) if dtype is not None else self.dtype


class Zeros(Initializer):
    def __call__(self, shape, dtype=None):
        return constant_ops.zeros(shape, self._dtype(dtype))


class Ones(Initializer):
    def __call__(self, shape, dtype=None):
        return constant_ops.ones(shape, self._dtype(dtype))


class Constant(Initializer):
    def __init__(self, value=0, dtype=dtypes.float32):
        super().__init__(dtype)
        self.value = value

    def __call__(self, shape, dtype=None):
        return constant_ops.constant(self.value, dtype=self._dtype(dtype), shape=shape)


class RandomNormal(Initializer):
    def __init__(self, mean=0.0, stddev=1.0, seed=None, dtype=dtypes.float32):
        super().__init__(dtype)
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def __call__(self, shape, dtype=None):
        return random_ops.random_normal(shape, self.mean, self.stddev, self._dtype(dtype),
                                        self.seed)


class TruncatedNormal(RandomNormal):
    def __call__(self, shape, dtype=None):
        return random_ops.truncated_normal(shape, self.mean, self.stddev,
                                           self._dtype(dtype), self.seed)


class RandomUniform(Initializer):
    def __init__(self, minval=0.0, maxval=None, seed=None, dtype=dtypes.float32):
        super().__init__(dtype)
        self.minval, self.maxval, self.seed = minval, maxval, seed

    def __call__(self, shape, dtype=None):
        return random_ops.random_uniform(shape, self.minval, self.maxval,
                                         self._dtype(dtype), self.seed)


class VarianceScaling(Initializer):
    """Variance ``scale / n`` where n is fan_in, fan_out or their mean; normal
    (truncated) or uniform. Glorot and He initializers are instances."""

    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal",
                 seed=None, dtype=dtypes.float32):
        super().__init__(dtype)
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError(f"mode must be 'fan_in', 'fan_out' or 'fan_avg', got {mode!r}")
        if distribution == "normal":
            distribution = "truncated_normal"
        if distribution not in ("truncated_normal", "untruncated_normal", "uniform"):
            raise ValueError("distribution must be 'truncated_normal', 'untruncated_normal' "
                             f"or 'uniform', got {distribution!r}")
        self.scale, self.mode, self.distribution, self.seed = scale, mode, distribution, seed

    def __call__(self, shape, dtype=None):
        fan_in, fan_out = _fans([int(dim) for dim in shape])  # ints, as TF's fans are
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[self.mode]
        variance = self.scale / max(1.0, n)
        dtype = self._dtype(dtype)
        if self.distribution == "uniform":
            limit = math.sqrt(3.0 * variance)
            return random_ops.random_uniform(shape, -limit, limit, dtype, self.seed)
        if self.distribution == "untruncated_normal":
            return random_ops.random_normal(shape, 0.0, math.sqrt(variance), dtype, self.seed)
        # 0.8796... is the stddev of a unit normal truncated at 2 sigma.
        stddev = math.sqrt(variance) / 0.87962566103423978
        return random_ops.truncated_normal(shape, 0.0, stddev, dtype, self.seed)


def _fans(shape):
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    return shape[-2] * receptive, shape[-1] * receptive


def glorot_uniform_initializer(seed=None, dtype=dtypes.float32):
    return VarianceScaling(1.0, "fan_avg", "uniform", seed, dtype)


def glorot_normal_initializer(seed=None, dtype=dtypes.float32):
    return VarianceScaling(1.0, "fan_avg", "truncated_normal", seed, dtype)


def he_normal(seed=None):
    return VarianceScaling(2.0, "fan_in", "truncated_normal", seed)


def he_uniform(seed=None):
    return VarianceScaling(2.0, "fan_in", "uniform", seed)


zeros_initializer = Zeros
ones_initializer = Ones
constant_initializer = Constant
random_normal_initializer = RandomNormal
truncated_normal_initializer = TruncatedNormal
random_uniform_initializer = RandomUniform
variance_scaling_initializer = VarianceScaling
