"""Finite-difference gradient checking, shared by the test_gradients*.py files.

A :class:`GradCase` builds outputs from float64 placeholders. The check sums
the outputs against fixed random weights R (``loss = sum(reduce_sum(y * R))``,
so every output element weighs differently), asks ``tf.gradients`` for the
gradient of that loss, and compares it with float64 central differences of
the loss, each evaluated by running the forward graph.
"""

from typing import Callable, NamedTuple, Optional

import numpy as np

import towerflow as tf

EPS, RTOL, ATOL = 1e-6, 1e-5, 1e-7


class GradCase(NamedTuple):
    name: str
    build: Callable          # placeholders -> tensor, or list of tensors
    inputs: tuple            # one maker ``rng -> array`` per placeholder
    wrt: Optional[tuple] = None   # indices to differentiate (default: every float input)
    unknown: Optional[tuple] = None   # inputs whose dims may be unknown (default: all;
    #                                   () where the builder needs them known)


def grad_case(name, build, *inputs, wrt=None, unknown=None):
    return GradCase(name, build, inputs, wrt, unknown)


def case_id(case):
    return case.name


# -- input makers: ``rng -> float64 array`` --------------------------------------------


def floats(*shape):
    return lambda rng: rng.standard_normal(shape)


def positive(*shape, low=0.5, high=2.0):
    return lambda rng: rng.uniform(low, high, shape)


def away_from_zero(*shape, low=0.2, high=2.0):
    """Both signs, |x| >= low: clear of kinks at 0 (abs, relu, elu, sign)."""
    return lambda rng: rng.choice([-1.0, 1.0], shape) * rng.uniform(low, high, shape)


def distinct(*shape, offset=0.0):
    """A shuffled grid 0.1 apart: no ties for max/min or pooling (give two
    compared inputs different offsets)."""
    return lambda rng: rng.permutation(
        np.arange(np.prod(shape)) * 0.1 - 1.0 + offset).reshape(shape)


def probabilities(*shape):
    """Rows that are distributions (cross-entropy labels)."""
    def make(rng):
        raw = rng.uniform(0.1, 1.0, shape)
        return raw / raw.sum(axis=-1, keepdims=True)
    return make


def labels(count, classes):
    return lambda rng: rng.integers(0, classes, count).astype(np.int32)


def fixed(values):
    return lambda rng: np.array(values, dtype=np.float64)


# -- the check -------------------------------------------------------------------------


class GradientCheck:
    """One case built on one device: its loss, analytic and numeric gradients.
    With ``unknown_dims`` the placeholders know only their rank, so shapes
    (broadcasting, reduction counts) are found when the graph runs."""

    def __init__(self, case, rng, device=None, unknown_dims=False):
        self.arrays = [make(rng) for make in case.inputs]
        with tf.device(device):
            unknown = range(len(self.arrays)) if case.unknown is None else case.unknown
            self.feeds = [tf.placeholder(tf.as_dtype(a.dtype), [None] * a.ndim
                                         if unknown_dims and i in unknown else a.shape)
                          for i, a in enumerate(self.arrays)]
            outputs = case.build(*self.feeds)
            self.outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
            # loss = sum_i reduce_sum(y_i * R_i): every output element weighs differently
            self.weights = [tf.placeholder(y.dtype, y.shape) for y in self.outputs]
            self.loss = tf.add_n([tf.reduce_sum(y * r)
                                  for y, r in zip(self.outputs, self.weights)])
            self.wrt = case.wrt if case.wrt is not None else tuple(
                i for i, a in enumerate(self.arrays) if a.dtype.kind == "f")
            # An IndexedSlices (tf.gather's gradient) is compared dense, as TF's checker does.
            self.grads = [g if not isinstance(g, tf.IndexedSlices) else tf.convert_to_tensor(g)
                          for g in tf.gradients(self.loss, [self.feeds[i] for i in self.wrt])]
        self.session = tf.Session()
        values = self.session.run(self.outputs, dict(zip(self.feeds, self.arrays)))
        self.weight_values = [rng.standard_normal(np.shape(v)).astype(v.dtype) for v in values]

    def feed(self, arrays):
        return dict(zip(self.feeds + self.weights, list(arrays) + self.weight_values))

    def analytic(self):
        fetches = [g for g in self.grads if g is not None]
        values = iter(self.session.run(fetches, self.feed(self.arrays)))
        return [None if g is None else next(values) for g in self.grads]

    def numeric(self, index, eps=EPS):
        """Central differences of the loss along every element of input ``index``."""
        arrays = [a.copy() for a in self.arrays]
        point = arrays[index]
        result = np.zeros_like(point)
        for flat in range(point.size):
            original = point.flat[flat]
            point.flat[flat] = original + eps
            above = self.session.run(self.loss, self.feed(arrays))
            point.flat[flat] = original - eps
            below = self.session.run(self.loss, self.feed(arrays))
            point.flat[flat] = original
            result.flat[flat] = (above - below) / (2 * eps)
        return result


def check_gradients(case, rng, device=None, unknown_dims=False, rtol=RTOL, atol=ATOL):
    """Assert that ``tf.gradients`` matches central differences for ``case``."""
    check = GradientCheck(case, rng, device, unknown_dims)
    for index, grad, value in zip(check.wrt, check.grads, check.analytic()):
        assert grad is not None, f"{case.name}: no gradient for input {index}"
        assert value.shape == check.arrays[index].shape, (case.name, index, value.shape)
        assert grad.shape.is_compatible_with(value.shape), (case.name, index, grad.shape)
        assert value.dtype == check.arrays[index].dtype, (case.name, index, value.dtype)
        np.testing.assert_allclose(value, check.numeric(index), rtol=rtol, atol=atol,
                                   err_msg=f"{case.name}: gradient of input {index}")
    return check


def built_op_types(cases):
    """The op types the cases' forward graphs contain (before any gradient)."""
    types = set()
    for case in cases:
        with tf.Graph().as_default() as graph:
            rng = np.random.default_rng(0)
            arrays = [make(rng) for make in case.inputs]
            case.build(*[tf.placeholder(tf.as_dtype(a.dtype), a.shape) for a in arrays])
        types |= {op.type for op in graph.get_operations()}
    return types


def in_float32(make):
    def make_float32(rng):
        array = make(rng)
        return array.astype(np.float32) if array.dtype == np.float64 else array
    return make_float32


def check_float32_matches_float64(case, seed=0, rtol=1e-3, atol=1e-4):
    """The case in float32: every gradient is float32 when it runs (no kernel
    promotes to float64) and agrees with the float64 gradient."""
    float32_case = case._replace(inputs=tuple(in_float32(make) for make in case.inputs))
    wide, narrow = (GradientCheck(each, np.random.default_rng(seed))
                    for each in (case, float32_case))
    for grad, wide_value, narrow_value in zip(narrow.grads, wide.analytic(), narrow.analytic()):
        assert grad.dtype is tf.float32 and narrow_value.dtype == np.float32, grad
        np.testing.assert_allclose(narrow_value, wide_value, rtol=rtol, atol=atol,
                                   err_msg=f"{case.name}: float32 gradient {grad.name}")
