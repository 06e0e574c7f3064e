"""Second-order gradients: the gradient of each op a first-order gradient is
built from (ReluGrad, MaxPoolGrad, Conv2DBackpropFilter, ...) against
float64 central differences of that first-order gradient; a WGAN-GP gradient
penalty differentiated with respect to the critic's weights; ``tf.hessians``
against analytic Hessians; Hessian-vector products against H @ v.

A case's builder returns the first-order gradients of ``sum(sin(f(...)))``
(sin, so the gradient that enters each gradient op depends on the inputs
and its own gradient path is taken); gradient_check then differentiates
those gradients again and compares with differences of them.
"""

import numpy as np
import pytest
from gradient_check import (
    away_from_zero,
    case_id,
    check_float32_matches_float64,
    check_gradients,
    distinct,
    floats,
    grad_case,
    labels,
    positive,
    probabilities,
)

import towerflow as tf


def first_order(fn, wrt=None):
    """A builder: the gradients of sum(sin(fn(*inputs))) w.r.t. the inputs
    ``wrt`` (default: every float input)."""
    def build(*inputs):
        chosen = wrt if wrt is not None else [
            i for i, t in enumerate(inputs) if t.dtype.is_floating]
        outputs = fn(*inputs)
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        loss = tf.add_n([tf.reduce_sum(tf.sin(y)) for y in outputs])
        grads = tf.gradients(loss, [inputs[i] for i in chosen])
        assert None not in grads
        return grads
    return build


def second(name, fn, *inputs, wrt=None, unknown=None, first_wrt=None):
    return grad_case(name, first_order(fn, first_wrt), *inputs, wrt=wrt, unknown=unknown)


def away_from_relu6_kinks(*shape):
    """Values below 0, between 0 and 6 and above 6, each 0.2 clear of a kink."""
    return lambda rng: rng.choice([-1.0, 3.0, 7.0], shape) + rng.uniform(-0.8, 0.8, shape)


ACTIVATIONS = [
    second("relu_grad", tf.nn.relu, away_from_zero(3, 4)),
    second("relu_grad_through_matmul", lambda x, w: tf.nn.relu(tf.matmul(x, w)),
           away_from_zero(3, 4), floats(4, 2)),
    second("tanh_grad", tf.tanh, floats(3, 4)),
    second("sigmoid_grad", tf.sigmoid, floats(3, 4)),
    second("elu_grad", tf.nn.elu, away_from_zero(3, 4)),
    second("gelu_grad", tf.nn.gelu, floats(3, 4)),
    second("gelu_tanh_grad", lambda x: tf.nn.gelu(x, approximate=True), floats(3, 4)),
    second("bias_add_grad", tf.nn.bias_add, floats(2, 3, 4), floats(4)),
    second("leaky_relu_grad", lambda x: tf.nn.leaky_relu(x, 0.3), away_from_zero(3, 4)),
    second("relu6_grad", tf.nn.relu6, away_from_relu6_kinks(3, 4)),
    second("selu_grad", tf.nn.selu, away_from_zero(3, 4)),
    second("softplus_grad", tf.nn.softplus, floats(3, 4)),
]


def _strided(x):
    return x[1:, ::2] * 1.5


def _mirror(mode):
    return lambda x: tf.pad(x, [[1, 1], [2, 1]], mode)


ARRAYS = [
    second("unbroadcast_grad", lambda x, b: x * b + b, floats(3, 4), floats(4)),
    second("unbroadcast_grad_column", lambda x, b: x / b, floats(3, 4), positive(3, 1)),
    second("reduction_grad_sum", lambda x: tf.reduce_sum(x * x, axis=1), floats(3, 4)),
    second("reduction_grad_mean_keepdims",
           lambda x: tf.reduce_mean(x * x, axis=[0, 2], keepdims=True), floats(2, 3, 2)),
    second("reduction_grad_full_mean", lambda x: tf.reduce_mean(tf.square(x)) * x,
           floats(3, 2)),
    second("reduce_extremum_grad", lambda x: tf.reduce_max(x * x, axis=1), distinct(3, 4)),
    second("reduce_min_grad", lambda x: tf.reduce_min(x * x, axis=0), distinct(3, 4)),
    second("reshape_like", lambda x: tf.reshape(x * x, [2, 6]), floats(3, 4)),
    second("squeeze_expand", lambda x: tf.expand_dims(tf.squeeze(x * x), 0), floats(1, 3)),
    second("tile_grad", lambda x: tf.tile(x * x, [2, 3]), floats(2, 2)),
    second("dynamic_tile_grad", lambda x: tf.tile(
        x * x, tf.placeholder_with_default([2, 1, 3], [3])), floats(2, 3, 2)),
    second("concat_grad", lambda x, y: tf.concat([x * y[:, :2], y * y], 1), floats(2, 2),
           floats(2, 3)),
    second("pad_grad_constant", lambda x: tf.pad(x * x, [[1, 0], [0, 2]]), floats(2, 3)),
    second("pad_grad_reflect", lambda x: _mirror("REFLECT")(x * x), floats(3, 4)),
    second("pad_grad_symmetric", lambda x: _mirror("SYMMETRIC")(x * x), floats(3, 4)),
    second("strided_slice_grad", lambda x: _strided(x * x), floats(3, 5)),
    second("gather_grad", lambda x: tf.gather(x * x, [2, 0, 2], axis=1), floats(2, 3)),
    second("gather_nd_grad", lambda x: tf.gather_nd(x * x, [[1, 0], [0, 2]]), floats(2, 3)),
    second("boolean_mask_grad",
           lambda x: tf.boolean_mask(x * x, tf.constant([True, False, True])), floats(3, 2)),
    second("transpose_unstack", lambda x: tf.stack(tf.unstack(tf.transpose(x * x))),
           floats(2, 3), unknown=()),
]


def pool(fn, window, strides, padding):
    return lambda x: fn(x * x, [1, window, window, 1], [1, strides, strides, 1], padding)


POOLING = [
    # third order: the gradient of MaxPoolGradGrad (MaxPoolGrad again)
    second("max_pool_grad_grad", first_order(pool(tf.nn.max_pool, 3, 2, "SAME")),
           distinct(1, 5, 5, 2, offset=2.0)),
    # windows of more than 64 taps: the winners are indices, not bit masks
    second("max_pool_grad_81_taps", pool(tf.nn.max_pool, 9, 4, "SAME"),
           distinct(1, 9, 9, 1, offset=9.0)),
    second("max_pool_grad_grad_81_taps", first_order(pool(tf.nn.max_pool, 9, 4, "SAME")),
           distinct(1, 9, 9, 1, offset=9.0)),
] + [
    second(f"{fn.__name__}_grad_{window}_{strides}_{padding}",
           pool(fn, window, strides, padding), distinct(2, 5, 5, 2, offset=2.0))
    for fn in (tf.nn.max_pool, tf.nn.avg_pool)
    for window, strides, padding in [(2, 2, "VALID"), (3, 2, "SAME"), (2, 1, "VALID")]
]


def conv(strides, padding):
    return lambda x, w: tf.nn.conv2d(x, w, [1, strides, strides, 1], padding)


def depthwise(x, w):
    return tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME")


def conv_transpose(value, w):
    return tf.nn.conv2d_transpose(value, w, [2, 6, 6, 2], [1, 2, 2, 1], "SAME")


def fused(is_training):
    def build(x, scale, offset, mean, variance):
        return tf.nn.fused_batch_norm(x, scale, offset, mean, variance, 0.001,
                                      is_training=is_training)[0]
    return build


CONVOLUTIONS = [
    second("conv2d_backprop_filter_and_input_same", conv(1, "SAME"), floats(2, 4, 4, 2),
           floats(3, 3, 2, 3), unknown=()),
    second("conv2d_backprop_filter_and_input_valid_stride2", conv(2, "VALID"),
           floats(1, 5, 5, 2), floats(2, 2, 2, 2), unknown=()),
    second("conv2d_backprop_filter_only", conv(1, "SAME"), floats(1, 3, 3, 1),
           floats(2, 2, 1, 2), first_wrt=[1], unknown=()),
    grad_case("conv2d_backprop_filter_public", lambda x, dy: tf.nn.conv2d_backprop_filter(
        x, [2, 2, 2, 3], dy, [1, 1, 1, 1], "SAME"), floats(1, 3, 3, 2), floats(1, 3, 3, 3),
        unknown=()),
    second("conv2d_transpose", conv_transpose, floats(2, 3, 3, 1), floats(3, 3, 2, 1),
           unknown=()),
    second("depthwise_backprop_input_and_filter", depthwise, floats(1, 4, 4, 2),
           floats(3, 3, 2, 2), unknown=()),
    second("fused_batch_norm_grad_training", fused(True), floats(2, 3, 2, 3), positive(3),
           floats(3), floats(3), positive(3), wrt=(0, 1, 2), first_wrt=[0, 1, 2], unknown=()),
    second("fused_batch_norm_grad_inference", fused(False), floats(2, 2, 3), positive(3),
           floats(3), floats(3), positive(3), wrt=(0, 1, 2), first_wrt=[0, 1, 2],
           unknown=()),
]


def xent(logits, targets):
    return tf.nn.softmax_cross_entropy_with_logits_v2(labels=targets, logits=logits)


def sparse_xent(logits, targets):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)


def lstm_two_steps(x, kernel, bias):
    """Two steps of BasicLSTMCell's arithmetic (forget bias 1), unrolled."""
    units = kernel.shape.as_list()[1] // 4
    h = c = tf.zeros([x.shape.as_list()[0], units], tf.float64)
    for _ in range(2):
        gates = tf.nn.bias_add(tf.matmul(tf.concat([x, h], 1), kernel), bias)
        i, j, f, o = tf.split(gates, 4, axis=1)
        c = c * tf.sigmoid(f + 1.0) + tf.sigmoid(i) * tf.tanh(j)
        h = tf.tanh(c) * tf.sigmoid(o)
    return h


LOSSES_AND_LSTM = [
    second("softmax_xent_grad", xent, floats(3, 4), probabilities(3, 4)),
    second("sparse_softmax_xent_grad", sparse_xent, floats(3, 4), labels(3, 4)),
    second("mean_sparse_xent_of_mlp", lambda x, w: tf.reduce_mean(sparse_xent(
        tf.matmul(tf.nn.relu(x), w), tf.constant([1, 0, 2]))), away_from_zero(3, 2),
        floats(2, 3)),
    second("lstm_two_steps", lstm_two_steps, floats(2, 3), floats(5, 8), floats(8),
           unknown=()),
]



def symmetric_positive_definite(a):
    return tf.matmul(a, a, transpose_b=True) + 3.0 * tf.eye(3, dtype=tf.float64)


LINEAR_ALGEBRA = [
    second("einsum_grad_matmul", lambda a, b: tf.einsum("ij,jk->ik", a, b), floats(2, 3),
           floats(3, 4)),
    second("einsum_grad_summed_alone", lambda a, b: tf.einsum("bij,jk->bk", a * a, b),
           floats(2, 3, 4), floats(4, 2)),
    second("einsum_grad_three", lambda a, b, c: tf.einsum("ab,bc,cd->ad", a, b, c),
           floats(2, 3), floats(3, 2), floats(2, 2)),
    second("einsum_grad_trace", lambda a: tf.einsum("ii", a * a), floats(3, 3)),
    second("matrix_diag_part_grad", lambda a: tf.linalg.diag_part(a * a), floats(2, 3, 4)),
    second("cholesky_grad", lambda a: tf.linalg.cholesky(symmetric_positive_definite(a)),
           floats(3, 3), unknown=()),
    second("cholesky_grad_batched", lambda a: tf.linalg.cholesky(
        tf.matmul(a, a, transpose_b=True) + 3.0 * tf.eye(3, batch_shape=[2],
                                                          dtype=tf.float64)),
           floats(2, 3, 3), unknown=()),
]

CASES = ACTIVATIONS + ARRAYS + POOLING + CONVOLUTIONS + LOSSES_AND_LSTM + LINEAR_ALGEBRA


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_gradient_of_gradient_matches_finite_differences(case, rng):
    check_gradients(case, rng)


@pytest.mark.parametrize("case", ARRAYS + ACTIVATIONS + LINEAR_ALGEBRA[:5], ids=case_id)
def test_gradient_of_gradient_with_unknown_dims(case, rng):
    check_gradients(case, rng, unknown_dims=True)


def test_every_gradient_op_has_a_gradient():
    """Every op type a gradient function builds has a gradient of its own, but
    those TF 1.15 has none for either."""
    from towerflow.graph import registry
    without = {op_type for op_type in registry.registered_op_types()
               if registry.get_op_def(op_type).gradient is None}
    # NOTE: TF 1.15's nn_grad.py registers no gradient for SoftsignGrad either
    assert without == {"LRNGrad", "ResizeBilinearGrad", "ResizeNearestNeighborGrad",
                       "SoftsignGrad", "SortGrad"}


# -- WGAN-GP: the gradient penalty's gradient w.r.t. the critic's weights ------------


def gradient_penalty(critic):
    """build(real, fake, mix, *weights) -> mean((|d critic / d x_hat| - 1)^2),
    x_hat = mix * real + (1 - mix) * fake, per example."""
    def build(real, fake, mix, *weights):
        x_hat = mix * real + (1.0 - mix) * fake
        (slopes,) = tf.gradients(critic(x_hat, *weights), x_hat)
        axes = list(range(1, x_hat.shape.ndims))
        norms = tf.sqrt(tf.reduce_sum(tf.square(slopes), axes) + 1e-12)
        return tf.reduce_mean(tf.square(norms - 1.0))
    return build


def mlp_critic(x, w1, b1, w2, b2, w3):
    hidden = tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w1), b1))
    hidden = tf.tanh(tf.matmul(hidden, w2) + b2)
    return tf.matmul(hidden, w3)


def cnn_critic(x, kernel, bias, dense):
    features = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, kernel, [1, 1, 1, 1], "SAME"), bias))
    pooled = tf.nn.max_pool(features, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
    return tf.matmul(tf.reshape(pooled, [-1, 2 * 2 * 3]), dense)


WGAN_GP = [
    grad_case("wgan_gp_mlp", gradient_penalty(mlp_critic), floats(4, 3), floats(4, 3),
              positive(4, 1, low=0.1, high=0.9), floats(3, 5), floats(5), floats(5, 4),
              floats(4), floats(4, 1), wrt=(3, 4, 5, 6, 7), unknown=()),
    grad_case("wgan_gp_cnn", gradient_penalty(cnn_critic), floats(2, 4, 4, 2),
              floats(2, 4, 4, 2), positive(2, 1, 1, 1, low=0.1, high=0.9),
              floats(3, 3, 2, 3), floats(3), floats(12, 1), wrt=(3, 4, 5), unknown=()),
]


@pytest.mark.parametrize("case", WGAN_GP, ids=case_id)
def test_wgan_gradient_penalty_gradient_matches_finite_differences(case, rng):
    check = check_gradients(case, rng)
    # the first and last weights reach the penalty through more than ReLU masks
    assert check.analytic()[0].any() and check.analytic()[-1].any()


@pytest.mark.parametrize("case", WGAN_GP + CONVOLUTIONS[:3], ids=case_id)
def test_float32_second_order_gradient_matches_float64(case):
    """In float32 the second-order gradients stay float32 and agree with the
    float64 ones to float32's precision."""
    check_float32_matches_float64(case)


def test_wgan_gradient_penalty_trains_a_critic():
    """Adam on the MLP critic's penalty with variables: the penalty falls (from
    a start where no example's ReLUs are all dead: such an example's slope
    is 0 whatever the step, a penalty of 1 no gradient removes)."""
    rng = np.random.default_rng(0)
    real, fake = (tf.constant(rng.standard_normal((8, 3))) for _ in range(2))
    weights = [tf.Variable(rng.standard_normal(shape) * 0.5) for shape in
               [(3, 5), (5,), (5, 4), (4,), (4, 1)]]
    penalty = gradient_penalty(mlp_critic)(real, fake, tf.constant(np.full((8, 1), 0.3)),
                                           *weights)
    train = tf.train.AdamOptimizer(0.05).minimize(penalty)
    with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        before = session.run(penalty)
        for _ in range(200):
            session.run(train)
        assert session.run(penalty) < 0.05 * before


# -- tf.hessians and Hessian-vector products ----------------------------------------


def test_hessians_match_the_analytic_hessian(rng):
    """f(x) = 0.5 x'Ax + sum(sin x) + x0^2 x1: H = sym(A) - diag(sin x) + the
    cross term's 2x1 on (0, 0) and 2x0 on (0, 1), (1, 0)."""
    matrix, point = rng.standard_normal((4, 4)), rng.standard_normal(4)
    x = tf.placeholder(tf.float64, [4])
    f = 0.5 * tf.reduce_sum(x * tf.reshape(tf.matmul(matrix, tf.reshape(x, [4, 1])), [4]))
    f = f + tf.reduce_sum(tf.sin(x)) + tf.square(x[0]) * x[1]
    (hessian,) = tf.hessians(f, x)
    expected = 0.5 * (matrix + matrix.T) - np.diag(np.sin(point))
    expected[0, 0] += 2 * point[1]
    expected[0, 1] += 2 * point[0]
    expected[1, 0] += 2 * point[0]
    assert hessian.shape.as_list() == [4, 4]
    with tf.Session() as session:
        np.testing.assert_allclose(session.run(hessian, {x: point}), expected, rtol=1e-12,
                                   atol=1e-12)


def test_hessians_of_a_matrix_and_of_several_xs(rng):
    """x of shape [2, 2]: a Hessian of shape [2, 2, 2, 2]; sum(ys) over two ys."""
    point, vector = rng.standard_normal((2, 2)), rng.standard_normal(3)
    x, v = tf.placeholder(tf.float64, [2, 2]), tf.placeholder(tf.float64, [3])
    ys = [tf.reduce_sum(tf.exp(x)), tf.reduce_sum(x) * tf.reduce_sum(v * v)]
    hess_x, hess_v = tf.hessians(ys, [x, v])
    assert hess_x.shape.as_list() == [2, 2, 2, 2] and hess_v.shape.as_list() == [3, 3]
    expected_x = np.diag(np.exp(point).reshape(-1)).reshape(2, 2, 2, 2)
    with tf.Session() as session:
        got_x, got_v = session.run([hess_x, hess_v], {x: point, v: vector})
    np.testing.assert_allclose(got_x, expected_x, rtol=1e-12)
    np.testing.assert_allclose(got_v, 2 * point.sum() * np.eye(3), rtol=1e-12)


def test_hessians_of_a_linear_function_are_zeros():
    x = tf.placeholder(tf.float64, [3])
    (hessian,) = tf.hessians(tf.reduce_sum(2.0 * x), x)
    with tf.Session() as session:
        np.testing.assert_array_equal(session.run(hessian, {x: [1.0, 2.0, 3.0]}),
                                      np.zeros((3, 3)))


def test_hessians_refuse_an_unconnected_x_as_tf_does():
    x, unused = tf.placeholder(tf.float64, [3]), tf.placeholder(tf.float64, [2])
    with pytest.raises(ValueError, match="None values not supported."):
        tf.hessians(tf.reduce_sum(x * x), [x, unused])


def test_hessians_need_a_known_size():
    x = tf.placeholder(tf.float64, [None])
    with pytest.raises(ValueError, match="hessians needs the shape of .* known"):
        tf.hessians(tf.reduce_sum(x * x), x)


def mlp_loss(w, x, targets):
    hidden = tf.tanh(tf.matmul(x, tf.reshape(w[:6], [3, 2])))
    logits = tf.matmul(hidden, tf.reshape(w[6:], [2, 2]))
    return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(labels=targets,
                                                                      logits=logits))


def test_hessian_vector_product_equals_hessian_times_v(rng):
    """grad(grad(loss, w) . v, w) with grad_ys=v, against tf.hessians @ v and
    against central differences of the gradient along v."""
    w = tf.placeholder(tf.float64, [10])
    v = tf.placeholder(tf.float64, [10])
    x = tf.constant(rng.standard_normal((5, 3)))
    targets = tf.constant(probabilities(5, 2)(rng))
    loss = mlp_loss(w, x, targets)
    (grad,) = tf.gradients(loss, w)
    (product,) = tf.gradients(grad, w, grad_ys=v)
    (hessian,) = tf.hessians(loss, w)
    point, direction = rng.standard_normal(10), rng.standard_normal(10)
    with tf.Session() as session:
        got, matrix = session.run([product, hessian], {w: point, v: direction})
        step = 1e-5
        above, below = (session.run(grad, {w: point + sign * step * direction})
                        for sign in (1.0, -1.0))
    np.testing.assert_allclose(matrix, matrix.T, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(got, matrix @ direction, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(got, (above - below) / (2 * step), rtol=1e-6, atol=1e-9)
