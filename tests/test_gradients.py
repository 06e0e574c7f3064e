"""Gradients of the math and array ops against float64 central differences,
each case built on every logical CPU (see gradient_check.py); and the
behaviour of the autodiff engine itself.

Inputs are chosen clear of the points where an op is not differentiable
(abs and relu at 0, ties of maximum, log of non-positives, floormod's jumps),
since there central differences and any one-sided convention disagree.
Broadcasting shapes ([3, 1, 4] with [2, 4]) make the engine sum gradients
back to each input's shape.
"""

import numpy as np
import pytest

import towerflow as tf
from gradient_check import (away_from_zero, built_op_types, case_id,
                            check_float32_matches_float64, check_gradients, distinct, fixed,
                            floats, grad_case, positive)
from towerflow.graph import registry

# -- elementwise -----------------------------------------------------------------------

WHERE_MASK = np.array([[True, False, False, True], [False, True, True, False]])

UNARY = [
    grad_case("negative", tf.negative, floats(2, 3)),
    grad_case("abs", tf.abs, away_from_zero(2, 3)),
    grad_case("square", tf.square, floats(2, 3)),
    grad_case("sqrt", tf.sqrt, positive(2, 3)),
    grad_case("rsqrt", tf.rsqrt, positive(2, 3)),
    grad_case("exp", tf.exp, floats(2, 3)),
    grad_case("log", tf.log, positive(2, 3)),
    grad_case("log1p", tf.log1p, positive(2, 3, low=-0.5)),
    grad_case("reciprocal", tf.reciprocal, away_from_zero(2, 3, low=0.5)),
    grad_case("sin", tf.sin, floats(2, 3)),
    grad_case("cos", tf.cos, floats(2, 3)),
    grad_case("tanh", tf.tanh, floats(2, 3)),
    grad_case("sigmoid", tf.sigmoid, floats(2, 3)),
    grad_case("op_neg_abs_pow", lambda x: abs(-x) ** 3.0, away_from_zero(4)),
]


def clear_of_floor_jumps(*shape):
    """|x| in k + [0.1, 0.4]: x / y stays clear of integers for |y| in [1, 1.02]."""
    return lambda rng: rng.choice([-1.0, 1.0], shape) * (
        rng.integers(0, 3, shape) + rng.uniform(0.1, 0.4, shape))


def divisors_near_one(*shape):
    return lambda rng: rng.choice([-1.0, 1.0], shape) * rng.uniform(1.0, 1.02, shape)


BINARY = [  # [3, 1, 4] with [2, 4] -> [3, 2, 4]: sums x over axis 1, y over axis 0
    grad_case("add", tf.add, floats(3, 1, 4), floats(2, 4)),
    grad_case("add_scalar", tf.add, floats(), floats(2, 3)),
    grad_case("subtract", tf.subtract, floats(2, 1), floats(1, 3)),
    grad_case("multiply", tf.multiply, floats(3, 1, 4), floats(2, 4)),
    grad_case("multiply_same_shape", tf.multiply, floats(2, 3), floats(2, 3)),
    grad_case("divide", tf.divide, floats(3, 1, 4), away_from_zero(2, 4, low=0.5)),
    grad_case("floormod", tf.floormod, clear_of_floor_jumps(3, 1, 4), divisors_near_one(2, 4)),
    grad_case("pow", tf.pow, positive(3, 1, 4), floats(2, 4)),
    grad_case("pow_scalar_exponent", lambda x, y: tf.pow(x, y), positive(2, 3), floats()),
    grad_case("maximum", tf.maximum, distinct(3, 1, 4), distinct(2, 4, offset=0.05)),
    grad_case("where", lambda x, y: tf.where(WHERE_MASK, x, y), floats(2, 4), floats(4)),
    grad_case("minimum", tf.minimum, distinct(3, 1, 4), distinct(2, 4, offset=0.05)),
    grad_case("squared_difference", tf.squared_difference, floats(3, 1, 4), floats(2, 4)),
    grad_case("op_operators", lambda x, y: (x - y) * x / (y * y + 1.0) + 2.0 ** x,
              floats(2, 1), floats(1, 3)),
]

# -- matmul ----------------------------------------------------------------------------


def matmul(transpose_a=False, transpose_b=False):
    return lambda a, b: tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)


MATMUL = [
    grad_case("matmul", matmul(), floats(2, 3), floats(3, 4)),
    grad_case("matmul_transpose_a", matmul(True), floats(3, 2), floats(3, 4)),
    grad_case("matmul_transpose_b", matmul(False, True), floats(2, 3), floats(4, 3)),
    grad_case("matmul_transpose_both", matmul(True, True), floats(3, 2), floats(4, 3)),
    grad_case("matmul_batched", matmul(), floats(2, 2, 3), floats(2, 3, 4)),
    grad_case("matmul_batched_transpose_b", matmul(False, True), floats(2, 2, 3),
              floats(2, 4, 3)),
    grad_case("matmul_batch_broadcast", matmul(), floats(3, 2, 3), floats(3, 4)),
    grad_case("matmul_batch_broadcast_left", matmul(True), floats(3, 2), floats(2, 3, 4)),
]

# -- reductions ------------------------------------------------------------------------


def reducer(fn, **options):
    return lambda x: fn(x, **options)


REDUCTIONS = [
    grad_case(f"{fn.__name__}_{label}", reducer(fn, **options), make(2, 3, 4))
    for fn, make in [(tf.reduce_sum, floats), (tf.reduce_mean, floats),
                     (tf.reduce_max, distinct), (tf.reduce_min, distinct),
                     (tf.reduce_prod, lambda *s: away_from_zero(*s, low=0.5, high=1.5))]
    for label, options in [("all", {}), ("axis1", {"axis": 1}), ("axis_neg", {"axis": -1}),
                           ("axes02", {"axis": [0, 2]}),
                           ("keepdims", {"axis": [1], "keepdims": True}),
                           ("all_keepdims", {"keepdims": True})]
] + [
    grad_case("reduce_sum_no_axes", reducer(tf.reduce_sum, axis=[]), floats(2, 3)),
    grad_case("reduce_mean_aliases", reducer(tf.reduce_mean, reduction_indices=0,
                                             keep_dims=True), floats(3, 2)),
    # a two-way tie: central differences give 1/2 to each, as the split does
    grad_case("reduce_max_two_way_tie", reducer(tf.reduce_max, axis=1),
              fixed([[1.0, 3.0, 3.0], [2.0, -1.0, 0.5]])),
    grad_case("reduce_min_two_way_tie", reducer(tf.reduce_min),
              fixed([[1.0, -3.0, 2.0], [-3.0, -1.0, 0.5]])),
]

# -- array ops -------------------------------------------------------------------------

ARRAY = [
    grad_case("identity", tf.identity, floats(2, 3)),
    grad_case("add_n", lambda *xs: tf.add_n(list(xs)), floats(2, 3), floats(2, 3),
              floats(2, 3)),
    grad_case("add_n_same_tensor_twice", lambda x, y: tf.add_n([x, y, x]), floats(3),
              floats(3)),
    grad_case("reshape", lambda x: tf.reshape(x, [-1, 4]), floats(2, 3, 4)),
    grad_case("reshape_to_a_run_time_shape",
              lambda x: tf.reshape(x, [tf.shape(x)[0], -1, 2]), floats(2, 3, 4)),
    grad_case("reshape_to_a_fed_shape", tf.reshape, floats(2, 3, 4),
              lambda rng: np.array([4, 6], np.int32), wrt=(0,)),
    grad_case("transpose_default", tf.transpose, floats(2, 3, 4)),
    grad_case("transpose_perm", lambda x: tf.transpose(x, [1, 2, 0]), floats(2, 3, 4)),
    grad_case("concat", lambda a, b, c: tf.concat([a, b, c], 1), floats(2, 1, 3),
              floats(2, 2, 3), floats(2, 3, 3)),
    grad_case("concat_negative_axis", lambda a, b: tf.concat([a, b], -1),
              floats(2, 2), floats(2, 3)),
    grad_case("split_equal", lambda x: tf.split(x, 3, axis=1), floats(2, 6), unknown=()),
    grad_case("split_sizes", lambda x: tf.split(x, [1, -1, 2], axis=0), floats(5, 2)),
    grad_case("split_unused_outputs", lambda x: tf.split(x, 3, axis=0)[1], floats(6, 2),
              unknown=()),
    grad_case("stack", lambda a, b: tf.stack([a, b], axis=1), floats(2, 3), floats(2, 3)),
    grad_case("unstack", lambda x: tf.unstack(x, axis=1), floats(2, 3, 2), unknown=()),
    grad_case("unstack_unused_outputs", lambda x: tf.unstack(x, 4)[2] * 3.0, floats(4, 2)),
    grad_case("identity_n", lambda a, b: [t * 2.0 for t in tf.identity_n([a, b])],
              floats(2, 3), floats(4)),
    grad_case("expand_dims", lambda x: tf.expand_dims(x, 1), floats(2, 3)),
    grad_case("squeeze", lambda x: tf.squeeze(x), floats(2, 1, 3, 1), unknown=()),
    grad_case("squeeze_axis", lambda x: tf.squeeze(x, [1]), floats(2, 1, 3, 1)),
    grad_case("fill", lambda v: tf.fill([2, 3], v), floats()),
    grad_case("fill_of_run_time_dims",          # DynamicFill: dims read when it runs
              lambda v: tf.fill(tf.placeholder_with_default([2, 3], [2]), v), floats()),
    grad_case("placeholder_with_default",
              lambda x: tf.placeholder_with_default(x * 2.0, [2, 3]), floats(2, 3)),
    grad_case("clip_by_value", lambda x: tf.clip_by_value(x, -0.55, 0.45), distinct(3, 4)),
    grad_case("clip_by_value_tensor_bounds", tf.clip_by_value, distinct(3, 4),
              fixed(-0.55), fixed(0.45)),
    grad_case("clip_by_global_norm_clipped",
              lambda a, b: tf.clip_by_global_norm([a, None, b], 1.0)[0][::2],
              floats(2, 3), floats(4)),
    grad_case("clip_by_global_norm_unclipped",
              lambda a, b: tf.clip_by_global_norm([a, b], 100.0)[0], floats(2, 3), floats(4)),
    grad_case("global_norm", lambda a, b: tf.global_norm([a, b]), floats(2, 3), floats(4)),
    grad_case("clip_by_norm_clipped", lambda x: tf.clip_by_norm(x * 3.0, 1.0), floats(2, 3)),
    grad_case("clip_by_norm_per_row", lambda x: tf.clip_by_norm(x, 1.2, axes=[1]),
              floats(3, 4)),
    grad_case("clip_by_norm_of_zeros", lambda x: tf.clip_by_norm(x, 1.0),
              fixed([[0.0, 0.0], [0.0, 0.0]])),
]

CASES = UNARY + BINARY + MATMUL + REDUCTIONS + ARRAY


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_gradient_matches_finite_differences(case, op_device, rng):
    check_gradients(case, rng, op_device)


@pytest.mark.parametrize("case", [c for c in CASES if c.unknown != ()], ids=case_id)
def test_gradient_with_unknown_dims(case, rng):
    """Placeholders of known rank only: un-broadcasting, reduction counts and
    reshapes are resolved when the graph runs."""
    check_gradients(case, rng, unknown_dims=True)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_float32_gradient_stays_float32(case):
    check_float32_matches_float64(case)


# -- conventions that central differences cannot see -----------------------------------


def gradient_values(build, *arrays, grad_ys=None):
    feeds = [tf.placeholder(tf.as_dtype(a.dtype), a.shape) for a in arrays]
    y = build(*feeds)
    grads = tf.gradients(y, feeds, grad_ys=grad_ys)
    with tf.Session() as session:
        return session.run(grads, dict(zip(feeds, arrays)))


@pytest.mark.parametrize("reduce, x, expected", [
    (tf.reduce_max, [[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], [[0, 1 / 2, 1 / 2], [1 / 3] * 3]),
    (tf.reduce_min, [[1.0, 1.0, 3.0], [2.0, 2.0, 2.0]], [[1 / 2, 1 / 2, 0], [1 / 3] * 3]),
], ids=["max", "min"])
def test_reduce_extremum_ties_share_the_gradient_equally(reduce, x, expected):
    grad_y = np.array([2.0, -6.0])
    (grad,) = gradient_values(lambda t: reduce(t, axis=1), np.array(x), grad_ys=grad_y)
    np.testing.assert_allclose(grad, np.array(expected) * grad_y[:, None], rtol=1e-12)


@pytest.mark.parametrize("build", [tf.maximum, tf.minimum], ids=["maximum", "minimum"])
def test_elementwise_extremum_ties_go_to_the_first_input(build):
    """TensorFlow's convention: where x == y, the whole gradient goes to x."""
    x = np.array([1.0, 2.0, 3.0])
    grad_x, grad_y = gradient_values(build, x, x.copy())
    np.testing.assert_array_equal(grad_x, [1.0] * 3)
    np.testing.assert_array_equal(grad_y, [0.0] * 3)


def test_pow_at_non_positive_bases_gives_no_exponent_gradient():
    """d(x^y)/dy = x^y log(x) is taken as 0 where x <= 0 (TensorFlow's convention)."""
    grad_x, grad_y = gradient_values(tf.pow, np.array([-1.5, 0.0, 2.0]), np.full(3, 2.0))
    np.testing.assert_allclose(grad_x, [-3.0, 0.0, 4.0])
    np.testing.assert_allclose(grad_y, [0.0, 0.0, 4.0 * np.log(2.0)])


@pytest.mark.parametrize("source, target", [(tf.float32, tf.float64), (tf.float64, tf.float32)])
def test_cast_between_floats_passes_the_gradient_in_the_input_dtype(source, target, rng):
    x = rng.standard_normal((2, 3)).astype(source.as_numpy_dtype)
    weights = rng.standard_normal((2, 3)).astype(target.as_numpy_dtype)
    feed = tf.placeholder(source, [2, 3])
    (grad,) = tf.gradients(tf.reduce_sum(tf.cast(feed, target) * weights), feed)
    assert grad.dtype is source
    with tf.Session() as session:
        value = session.run(grad, {feed: x})
    assert value.dtype == source.as_numpy_dtype
    np.testing.assert_array_equal(value, weights.astype(source.as_numpy_dtype))


def test_cast_to_an_integer_stops_the_gradient():
    x = tf.placeholder(tf.float64, [3])
    y = tf.cast(tf.cast(x, tf.int32), tf.float64) + x
    (grad,) = tf.gradients(tf.reduce_sum(y), x)
    with tf.Session() as session:
        np.testing.assert_array_equal(session.run(grad, {x: [0.5, 1.5, 2.5]}), [1.0] * 3)


@pytest.mark.parametrize("build", [tf.sign, tf.floor, tf.ceil, tf.round,
                                   lambda x: tf.floordiv(x, 2.0)],
                         ids=["sign", "floor", "ceil", "round", "floordiv"])
def test_piecewise_constant_ops_pass_no_gradient(build):
    x = tf.placeholder(tf.float64, [3])
    assert tf.gradients(tf.reduce_sum(build(x)), x) == [None]
    (grad,) = tf.gradients(tf.reduce_sum(build(x) + x), x)
    with tf.Session() as session:
        np.testing.assert_array_equal(session.run(grad, {x: [0.3, 1.5, -2.7]}), [1.0] * 3)


# -- the engine ------------------------------------------------------------------------


def run(fetches, feed=None):
    with tf.Session() as session:
        return session.run(fetches, feed)


def test_unconnected_and_integer_xs_get_none():
    x, other = tf.placeholder(tf.float64, [2]), tf.placeholder(tf.float64, [2])
    count = tf.placeholder(tf.int32, [2])
    y = tf.reduce_sum(x * tf.cast(count, tf.float64))
    grads = tf.gradients(y, [other, count, x])
    assert grads[:2] == [None, None] and grads[2] is not None
    assert tf.gradients(tf.constant(1.0), x) == [None]


def test_gradient_of_a_tensor_with_respect_to_itself_is_grad_ys():
    x = tf.placeholder(tf.float64, [2])
    (grad,) = tf.gradients(x, x)
    np.testing.assert_array_equal(run(grad, {x: [3.0, 4.0]}), [1.0, 1.0])
    (grad,) = tf.gradients(x, x, grad_ys=tf.constant([5.0, 6.0], tf.float64))
    np.testing.assert_array_equal(run(grad, {x: [3.0, 4.0]}), [5.0, 6.0])


def test_stop_gradient_makes_a_constant():
    x = tf.placeholder(tf.float64, [3])
    y = tf.reduce_sum(x * tf.stop_gradient(x))      # d/dx = x, not 2x
    (grad,) = tf.gradients(y, x)
    value = np.array([1.0, -2.0, 0.5])
    np.testing.assert_array_equal(run(grad, {x: value}), value)
    np.testing.assert_array_equal(run(tf.stop_gradient(x), {x: value}), value)
    assert tf.gradients(tf.reduce_sum(tf.stop_gradient(x)), x) == [None]


def test_stop_gradients_argument_treats_tensors_as_constants():
    a = tf.constant(0.0)
    b = 2.0 * a
    # TensorFlow's documented example: the total derivatives would be [3, 1].
    np.testing.assert_array_equal(run(tf.gradients(a + b, [a, b], stop_gradients=[a, b])),
                                  [1.0, 1.0])
    np.testing.assert_array_equal(run(tf.gradients(a + b, a, stop_gradients=b)), [1.0])
    np.testing.assert_array_equal(run(tf.gradients(a + b, a)), [3.0])
    assert tf.gradients(b, a, stop_gradients=[b]) == [None]


def test_gradients_from_several_consumers_are_summed():
    x = tf.placeholder(tf.float64, [3])
    h = x * x + x                                    # x feeds Mul twice and Add once
    y = tf.reduce_sum(h * h)                         # h feeds Mul twice
    grad_x, grad_h = tf.gradients(y, [x, h])
    value = np.array([1.0, -2.0, 0.5])
    h_value = value * value + value
    got_x, got_h = run([grad_x, grad_h], {x: value})
    np.testing.assert_allclose(got_h, 2 * h_value, rtol=1e-12)
    np.testing.assert_allclose(got_x, 2 * h_value * (2 * value + 1), rtol=1e-12)


def test_grad_ys_weight_each_y():
    x = tf.placeholder(tf.float64, [2])
    y1, y2 = x * 3.0, tf.reduce_sum(x * x)
    (grad,) = tf.gradients([y1, y2], x, grad_ys=[np.array([1.0, -1.0]), np.float64(2.0)])
    np.testing.assert_allclose(run(grad, {x: [1.0, 2.0]}), [3.0 + 4.0, -3.0 + 8.0])
    (summed,) = tf.gradients([y1, y2], x)            # default: ones for every y
    np.testing.assert_allclose(run(summed, {x: [1.0, 2.0]}), [5.0, 7.0])
    with pytest.raises(ValueError, match="1 grad_ys for 2 ys"):
        tf.gradients([y1, y2], x, grad_ys=[None])


def test_gradients_with_respect_to_variables():
    weight = tf.Variable([[1.0, 2.0], [3.0, 4.0]], dtype=tf.float64, name="weight")
    bias = tf.Variable([0.5, -0.5], dtype=tf.float64, name="bias")
    x = tf.placeholder(tf.float64, [3, 2])
    loss = tf.reduce_sum(tf.matmul(x, weight) + bias)
    grad_weight, grad_bias = tf.gradients(loss, [weight, bias])
    assert grad_weight.shape.as_list() == [2, 2] and grad_bias.shape.as_list() == [2]
    value = np.arange(6.0).reshape(3, 2)
    with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        got_weight, got_bias = session.run([grad_weight, grad_bias], {x: value})
    np.testing.assert_allclose(got_weight, value.T @ np.ones((3, 2)))
    np.testing.assert_allclose(got_bias, [3.0, 3.0])


def placement_log(capsys, fetches, feed, init=False):
    """{op name: device} from the placement log of one run."""
    capsys.readouterr()
    with tf.Session(config=tf.ConfigProto(log_device_placement=True)) as session:
        if init:
            session.run(tf.global_variables_initializer())
        session.run(fetches, feed)
    return dict(line.split(": ", 1) for line in capsys.readouterr().err.splitlines()
                if ": /job:" in line)


def test_gradient_ops_are_colocated_with_their_forward_op(logical_cpus, capsys, rng):
    with tf.device("/cpu:2"):
        images = tf.placeholder(tf.float32, [2, 6, 6, 1])
        targets = tf.placeholder(tf.int32, [2])
        hidden = tf.layers.conv2d(images, 3, 3, padding="same", activation=tf.nn.relu)
        hidden = tf.layers.max_pooling2d(hidden, 2, 2)
        logits = tf.layers.dense(tf.layers.flatten(hidden), 4)
        loss = tf.losses.sparse_softmax_cross_entropy(targets, logits)
    grads = tf.gradients(loss, tf.trainable_variables())    # built outside the device scope
    feed = {images: rng.standard_normal((2, 6, 6, 1)), targets: [1, 3]}
    placed = placement_log(capsys, grads, feed, init=True)
    gradient_ops = {name: device for name, device in placed.items()
                    if name.startswith("gradients/")}
    assert len(gradient_ops) >= 10, gradient_ops
    assert set(gradient_ops.values()) == {"/job:localhost/replica:0/task:0/device:CPU:2"}


def test_each_towers_gradient_ops_run_on_the_towers_device(logical_cpus, capsys):
    x = tf.placeholder(tf.float64, [4])
    tower_outputs = []
    for index in (1, 3):
        with tf.device(f"/cpu:{index}"), tf.name_scope(f"tower_{index}"):
            tower_outputs.append(tf.reduce_sum(tf.exp(x) * float(index)))
    (grad,) = tf.gradients(tf.add_n(tower_outputs), x)
    placed = placement_log(capsys, grad, {x: np.zeros(4)})
    for name, device in placed.items():
        for index in (1, 3):
            if name.startswith(f"gradients/tower_{index}/"):
                assert device.endswith(f"CPU:{index}"), (name, device)
    assert any(name.startswith("gradients/tower_3/") for name in placed), placed


@pytest.fixture
def op_without_gradient():
    """A throwaway op type with a kernel-less forward and no gradient."""
    op_type = "TestOpWithoutGradient"
    registry.register_op(op_type, lambda inputs, attrs: [(inputs[0].shape, inputs[0].dtype)])
    yield op_type
    registry._OP_DEFS.pop(op_type)


def test_an_op_without_a_gradient_raises_lookup_error(op_without_gradient):
    x = tf.placeholder(tf.float64, [2])
    y = tf.get_default_graph().create_op(op_without_gradient, [x], name="mystery").outputs[0]
    with pytest.raises(LookupError, match=r"'mystery' \(op type: TestOpWithoutGradient\)"):
        tf.gradients(tf.reduce_sum(y * 2.0), x)
    assert tf.gradients(tf.reduce_sum(tf.stop_gradient(y) + x), x)[0] is not None


# -- every differentiable op type is checked -------------------------------------------

# Op types with a gradient that no finite-difference case builds, and why.
EXEMPT = {
    "Cast": "float casts are checked exactly (float32 cannot take finite differences)",
    "Dropout": "random: checked against its mask in test_gradients_nn.py",
    "ResizeBilinear": "float32 output (as TF): checked as the resize's transpose in "
                      "test_image_ops.py",
    "WhileGrad": "its gradient raises TF's second-order error (test_control_flow.py)",
    "CrossTowerSum": "a sum across towers: its gradient is checked as synchronized batch "
                     "norm's, float64 gradients equal to one device's (test_sync_batch_norm.py)",
}


def test_every_differentiable_op_type_has_a_gradient_check():
    import test_array_ops_gradients
    import test_control_flow
    import test_conv_transpose_depthwise
    import test_debugging_ops
    import test_gradients_nn
    import test_image_ops
    import test_index_ops
    import test_nn_names
    import test_second_order
    import test_sparse_updates
    covered = built_op_types(CASES + test_gradients_nn.CASES + test_index_ops.GRAD_CASES +
                             test_second_order.CASES + test_second_order.WGAN_GP +
                             test_nn_names.GRAD_CASES +
                             test_image_ops.GRAD_CASES + test_array_ops_gradients.GRAD_CASES +
                             test_debugging_ops.GRAD_CASES +
                             test_conv_transpose_depthwise.GRAD_CASES +
                             test_control_flow.GRAD_CASES + test_control_flow.COND_GRAD_CASES +
                             test_sparse_updates.GRAD_CASES)
    differentiable = {op_type for op_type in registry.registered_op_types()
                      if registry.get_op_def(op_type).gradient
                      not in (None, registry.not_differentiable)}
    assert set(EXEMPT) <= differentiable, "stale entries in EXEMPT"
    assert differentiable - covered - set(EXEMPT) == set(), "gradients no case checks"


def test_second_derivatives_through_lrn_raise_lookup_error():
    # TF 1.15 has no gradient for LRNGrad either (the others: test_second_order.py)
    x = tf.placeholder(tf.float64, [1, 2, 2, 3])
    (grad,) = tf.gradients(tf.reduce_sum(tf.nn.lrn(x, 1) * 2.0), x)
    with pytest.raises(LookupError, match="op type: LRNGrad"):
        tf.gradients(tf.reduce_sum(grad * x), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(100, 28, 28, 32), (3, 5, 32)], ids=["big", "small"])
def test_a_bias_added_with_plus_gets_the_sum_of_its_gradient(op_device, dtype, shape):
    # d(sum((x + b) * w))/db = the sum of w over the leading axes (a BLAS GEMV on
    # big gradients, NumPy's sum on small ones). w holds small integers, so
    # every partial sum is exact (below 2^24) in any order: the sums must be equal
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.integers(-2, 3, shape).astype(dtype)
    with tf.Graph().as_default(), tf.device(op_device):
        b = tf.Variable(np.zeros(shape[-1], dtype))
        grad, = tf.gradients(tf.reduce_sum((tf.constant(x) + b) * tf.constant(w)), [b])
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            got = sess.run(grad)
    assert got.dtype == dtype and got.shape == (shape[-1],)
    np.testing.assert_array_equal(got, w.reshape(-1, shape[-1]).astype(np.int64).sum(axis=0))
