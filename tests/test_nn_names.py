"""TF 1.15's tf.nn activations, conv1d, atrous_conv2d, bidirectional_dynamic_rnn,
weighted_moments, xw_plus_b, the TF1 resize ops, tf.layers' 1-D layers,
einsum, tensordot, linspace, meshgrid, reverse_sequence and the tf.math /
tf.linalg namespaces (issue 34): values against NumPy in float64, gradients
against float64 central differences (tests/gradient_check.py)."""

import math

import numpy as np
import pytest
from gradient_check import away_from_zero, check_gradients, floats, grad_case, positive

import towerflow as tf

SELU_SCALE, SELU_ALPHA = 1.0507009873554805, 1.6732632423543772


def run(fetches, feed=None):
    with tf.Session() as session:
        return session.run(fetches, feed)


# -- activations ----------------------------------------------------------------------

ACTIVATIONS = {
    "leaky_relu": (tf.nn.leaky_relu, lambda x: np.where(x > 0, x, 0.2 * x)),
    "relu6": (tf.nn.relu6, lambda x: np.clip(x, 0, 6)),
    "selu": (tf.nn.selu, lambda x: np.where(x > 0, SELU_SCALE * x,
                                            SELU_SCALE * SELU_ALPHA * np.expm1(x))),
    "softplus": (tf.nn.softplus, lambda x: np.logaddexp(0.0, x)),
    "softsign": (tf.nn.softsign, lambda x: x / (1 + np.abs(x))),
    "swish": (tf.nn.swish, lambda x: x / (1 + np.exp(-x))),
    "elu": (tf.nn.elu, lambda x: np.where(x > 0, x, np.expm1(x))),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activations_match_numpy(name, dtype):
    build, reference = ACTIVATIONS[name]
    x = np.concatenate([np.linspace(-8, 8, 41), [-40.0, 40.0, 7.0, 5.99, 0.0]]).astype(dtype)
    y = run(build(tf.constant(x)))
    assert y.dtype == dtype
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(y, reference(x.astype(np.float64)), rtol=4 * eps, atol=4 * eps)


def test_softplus_takes_tf_s_three_ranges_without_overflow():
    x = np.array([-200.0, -30.0, 0.0, 30.0, 200.0, 1000.0], np.float32)
    y = run(tf.nn.softplus(x))
    assert np.isfinite(y).all()
    expected = np.logaddexp(0.0, x.astype(np.float64)).astype(np.float32)   # exp(-200) is 0
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_leaky_relu_defaults_to_alpha_0_2_and_casts_integers_to_float32():
    y = tf.nn.leaky_relu(tf.constant([-5, 0, 5]))
    assert y.dtype is tf.float32 and y.op.type == "LeakyRelu"
    np.testing.assert_array_equal(run(y), [-1.0, 0.0, 5.0])
    np.testing.assert_allclose(run(tf.nn.leaky_relu([-2.0, 3.0], alpha=0.01)), [-0.02, 3.0])


def test_relu6_keeps_integers_and_the_float_only_ones_refuse_them():
    y = tf.nn.relu6(tf.constant([-3, 2, 9], tf.int32))
    assert y.dtype is tf.int32
    np.testing.assert_array_equal(run(y), [0, 2, 6])
    for build in (tf.nn.selu, tf.nn.softplus, tf.nn.softsign):
        with pytest.raises(TypeError, match="'features' has DataType int32 not in list"):
            build(tf.constant([1, 2]))


def test_tf_math_softplus_is_tf_nn_softplus():
    assert tf.math.softplus is tf.nn.softplus and tf.math.softsign is tf.nn.softsign


# -- gradients (float64 central differences) ------------------------------------------

GRAD_CASES = [
    grad_case("leaky_relu", lambda x: tf.nn.leaky_relu(x, 0.3), away_from_zero(3, 4)),
    grad_case("relu6", tf.nn.relu6, lambda rng: rng.choice([-1.0, 1.0, 4.0, 8.0], (3, 4)) +
              rng.uniform(-0.5, 0.5, (3, 4))),
    grad_case("selu", tf.nn.selu, away_from_zero(3, 4)),
    grad_case("softplus", tf.nn.softplus, floats(3, 4)),
    grad_case("softsign", tf.nn.softsign, floats(3, 4)),
    grad_case("swish", tf.nn.swish, floats(3, 4)),
    grad_case("conv1d", lambda x, w: tf.nn.conv1d(x, w, 2, "SAME"), floats(2, 7, 3),
              floats(3, 3, 2), unknown=(0,)),
    grad_case("conv1d_dilated", lambda x, w: tf.nn.conv1d(x, w, 1, "VALID", dilations=2),
              floats(2, 7, 2), floats(2, 2, 2), unknown=(0,)),
    grad_case("atrous_conv2d", lambda x, w: tf.nn.atrous_conv2d(x, w, 2, "SAME"),
              floats(1, 5, 6, 2), floats(2, 3, 2, 2), unknown=(0,)),
    grad_case("weighted_moments", lambda x, w: list(tf.nn.weighted_moments(x, [0], w)),
              floats(4, 3), positive(4, 1)),
    grad_case("xw_plus_b", tf.nn.xw_plus_b, floats(3, 4), floats(4, 2), floats(2)),
    grad_case("resize_nearest_align_corners", lambda x: tf.image.resize_nearest_neighbor(
        x, [5, 7], align_corners=True), floats(2, 3, 4, 1)),
    grad_case("reverse_sequence", lambda x: tf.reverse_sequence(x, [3, 0, 5], seq_axis=1),
              floats(3, 5, 2)),
    grad_case("einsum_matmul", lambda a, b: tf.einsum("ij,jk->ik", a, b), floats(2, 3),
              floats(3, 4)),
    grad_case("einsum_summed_alone", lambda a, b: tf.einsum("bij,jk->bk", a, b),
              floats(2, 3, 4), floats(4, 2)),
    grad_case("einsum_three", lambda a, b, c: tf.einsum("ab,bc,cd->ad", a, b, c),
              floats(2, 3), floats(3, 2), floats(2, 2)),
    grad_case("einsum_trace", lambda a: tf.einsum("ii", a), floats(3, 3)),
    grad_case("tensordot", lambda a, b: tf.tensordot(a, b, [[1, 2], [0, 1]]),
              floats(2, 3, 4), floats(3, 4, 2)),
    grad_case("matrix_inverse", tf.linalg.inv, lambda rng: rng.standard_normal((2, 3, 3)) +
              4 * np.eye(3), unknown=()),
    grad_case("cholesky", lambda a: tf.linalg.cholesky(
        tf.matmul(a, a, transpose_b=True) + 3 * tf.eye(3, dtype=tf.float64)), floats(3, 3)),
    grad_case("matrix_determinant", tf.linalg.det, lambda rng: rng.standard_normal((2, 3, 3))
              + 2 * np.eye(3), unknown=()),
    grad_case("matrix_solve", tf.linalg.solve, lambda rng: rng.standard_normal((3, 3)) +
              4 * np.eye(3), floats(3, 2)),
    grad_case("matrix_solve_adjoint", lambda a, b: tf.linalg.solve(a, b, adjoint=True),
              lambda rng: rng.standard_normal((3, 3)) + 4 * np.eye(3), floats(3, 2)),
    grad_case("band_part", lambda a: tf.linalg.band_part(a, 1, 0), floats(2, 4, 3)),
    grad_case("diag", tf.linalg.diag, floats(2, 3)),
    grad_case("diag_part", tf.linalg.diag_part, floats(2, 3, 4)),
    grad_case("trace", tf.linalg.trace, floats(3, 3)),
    grad_case("norm", lambda a: tf.norm(a, axis=1), away_from_zero(3, 4)),
    grad_case("meshgrid", lambda a, b: tf.meshgrid(a, b), floats(3), floats(2)),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda case: case.name)
def test_gradients_match_central_differences(case):
    check_gradients(case, np.random.default_rng(34))
