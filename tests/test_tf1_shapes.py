"""TF1's static shapes: tf.Dimension and tf.TensorShape as TensorFlow 1.15
has them (x.get_shape()[1].value), and unknown dimensions where TF allows
them (split over a fed batch, cross-entropy over [?, ?, V], shapes given as
tensors), each checked against TF 1.15's rules or a NumPy reference."""

import numpy as np
import pytest

import towerflow as tf

# -- tf.Dimension -----------------------------------------------------------------------


def test_a_dimension_holds_its_value_or_none():
    assert tf.Dimension(7).value == 7 and tf.Dimension(None).value is None
    assert int(tf.Dimension(7)) == 7
    assert list(range(tf.Dimension(3))) == [0, 1, 2]          # __index__
    assert ["a", "b", "c", "d"][:tf.Dimension(2)] == ["a", "b"]
    assert str(tf.Dimension(None)) == "?" and repr(tf.Dimension(4)) == "Dimension(4)"
    assert tf.Dimension(tf.Dimension(5)).value == 5


@pytest.mark.parametrize("operator, reference", [
    (lambda a, b: a + b, lambda a, b: a + b), (lambda a, b: a - b, lambda a, b: a - b),
    (lambda a, b: a * b, lambda a, b: a * b), (lambda a, b: a // b, lambda a, b: a // b),
    (lambda a, b: a % b, lambda a, b: a % b)])
def test_arithmetic_gives_a_dimension_and_unknown_stays_unknown(operator, reference):
    for left, right in [(12, 5), (5, 12)]:
        if reference(left, right) < 0:      # 5 - 12: no size, as in TF
            with pytest.raises(ValueError, match="Dimension -7 must be >= 0"):
                operator(tf.Dimension(left), right)
            continue
        for result in (operator(tf.Dimension(left), right), operator(left, tf.Dimension(right)),
                       operator(tf.Dimension(left), tf.Dimension(right))):
            assert isinstance(result, tf.Dimension)
            assert result.value == reference(left, right)
    assert operator(tf.Dimension(None), 3).value is None
    assert operator(3, tf.Dimension(None)).value is None


def test_true_division_is_refused_as_in_tf():
    with pytest.raises(TypeError, match="please use // instead"):
        tf.Dimension(6) / 2


def test_comparisons_are_none_when_a_side_is_unknown():
    assert (tf.Dimension(3) == 3) is True and (tf.Dimension(3) != 4) is True
    assert (tf.Dimension(3) == tf.Dimension(4)) is False
    assert (tf.Dimension(None) == 3) is None and (tf.Dimension(3) == None) is None
    assert (tf.Dimension(None) != 3) is None
    assert (tf.Dimension(2) < 3) is True and (tf.Dimension(3) >= 4) is False
    assert (tf.Dimension(None) < 3) is None and (tf.Dimension(2) > tf.Dimension(None)) is None
    assert {tf.Dimension(3): "three"}[tf.Dimension(3)] == "three"


def test_merge_and_compatibility_of_dimensions():
    assert tf.Dimension(None).merge_with(4).value == 4
    assert tf.Dimension(4).merge_with(tf.Dimension(None)).value == 4
    assert tf.Dimension(None).merge_with(None).value is None
    assert tf.Dimension(4).is_compatible_with(None) and not tf.Dimension(4).is_compatible_with(5)
    with pytest.raises(ValueError, match="^Dimensions 4 and 5 are not compatible$"):
        tf.Dimension(4).merge_with(5)


@pytest.mark.parametrize("value, error, message", [
    (-1, ValueError, "Dimension -1 must be >= 0"),
    (2.5, ValueError, "Ambiguous dimension: 2.5"),
    (tf.float32, TypeError, "Cannot convert tf.float32 to Dimension")])
def test_bad_dimensions_give_tfs_errors(value, error, message):
    with pytest.raises(error, match=message):
        tf.Dimension(value)


def test_dimension_value_and_dimension_at_index():
    shape = tf.TensorShape([None, 3])
    assert tf.dimension_value(shape[1]) == 3 and tf.dimension_value(shape[0]) is None
    assert tf.compat.dimension_value(7) == 7 and tf.compat.dimension_value(None) is None
    assert tf.compat.v1.dimension_value(shape[1]) == 3
    assert tf.dimension_at_index(shape, 1).value == 3
    assert tf.dimension_at_index(tf.TensorShape(None), 5).value is None


# -- tf.TensorShape -----------------------------------------------------------------------


def test_indexing_a_shape_gives_dimensions_and_slicing_gives_shapes():
    x = tf.placeholder(tf.float32, [None, 28, 28, 3])
    shape = x.get_shape()
    assert shape[1].value == 28 and shape[0].value is None and shape[-1].value == 3
    assert isinstance(shape[1:], tf.TensorShape) and shape[1:].as_list() == [28, 28, 3]
    assert [dim.value for dim in shape] == [None, 28, 28, 3]
    assert x.shape.dims == (None, 28, 28, 3) and shape.ndims == 4 and len(shape) == 4
    assert shape[1] * shape[2] * shape[3] == 28 * 28 * 3
    assert shape[1:].num_elements() == 2352 and shape.num_elements() is None


def test_a_shape_of_unknown_rank():
    shape = tf.placeholder(tf.float32).get_shape()
    assert shape.ndims is None and shape.dims is None and not shape
    assert shape[3].value is None
    assert shape[1:3] == tf.TensorShape([None, None]) and shape[1:].ndims is None
    with pytest.raises(ValueError, match=r"^as_list\(\) is not defined on an unknown "
                                         r"TensorShape\.$"):
        shape.as_list()
    with pytest.raises(ValueError, match="Cannot iterate over a shape with unknown rank"):
        list(shape)
    with pytest.raises(ValueError, match="Steps are not yet handled"):
        shape[::2]


def test_merge_compatibility_and_rank_checks():
    partial = tf.TensorShape([None, 784])
    assert partial.merge_with([32, None]).as_list() == [32, 784]
    assert partial.is_compatible_with([5, 784]) and not partial.is_compatible_with([5, 10])
    assert not partial.is_compatible_with([5, 784, 1]) and partial.is_compatible_with(None)
    with pytest.raises(ValueError, match=r"^Shapes \(\?, 784\) and \(5, 10\) are not "
                                         r"compatible$"):
        partial.merge_with([5, 10])
    with pytest.raises(ValueError, match=r"^Shapes \(\?, 784\) and \(5, 10\) are "
                                         r"incompatible$"):
        partial.assert_is_compatible_with([5, 10])
    assert tf.TensorShape(None).with_rank(2).as_list() == [None, None]
    with pytest.raises(ValueError, match=r"^Shape \(\?, 784\) must have rank 3$"):
        partial.with_rank(3)
    assert partial.with_rank_at_least(2) is partial
    with pytest.raises(ValueError, match=r"must have rank at most 1"):
        partial.with_rank_at_most(1)
    assert not partial.is_fully_defined() and tf.TensorShape([2, 3]).is_fully_defined()
    with pytest.raises(ValueError, match=r"Shape \(\?, 784\) is not fully defined"):
        partial.assert_is_fully_defined()


def test_concatenation_and_printing():
    joined = tf.TensorShape([None, 3]).concatenate([4])
    assert joined.as_list() == [None, 3, 4]
    assert (tf.TensorShape([2]) + tf.TensorShape([None])).as_list() == [2, None]
    assert tf.TensorShape([2]).concatenate(tf.TensorShape(None)).ndims is None
    assert str(tf.TensorShape([None, 3])) == "(?, 3)" and str(tf.TensorShape([5])) == "(5,)"
    assert repr(tf.TensorShape([None, 3])) == "TensorShape([Dimension(None), Dimension(3)])"
    assert bool(tf.TensorShape([])) is True          # a scalar's rank is known
    assert tf.TensorShape([2, 1]).most_specific_compatible_shape([2, 5]).as_list() == [2, None]
    with pytest.raises(TypeError, match="A string has ambiguous TensorShape"):
        tf.TensorShape("32")


def test_shapes_and_dimensions_convert_to_tensors():
    x = tf.placeholder(tf.float32, [None, 4, 5])
    as_tensor = tf.convert_to_tensor(x.get_shape()[1:])
    dim_tensor = tf.convert_to_tensor(x.get_shape()[2])
    with tf.Session() as sess:
        shape_value, dim_value = sess.run([as_tensor, dim_tensor])
    np.testing.assert_array_equal(shape_value, [4, 5])
    assert dim_value == 5 and as_tensor.dtype == tf.int32
    with pytest.raises(ValueError, match=r"Cannot convert an unknown Dimension to a Tensor: \?"):
        tf.convert_to_tensor(x.get_shape()[0])
    with pytest.raises(ValueError, match="Cannot convert a partially known TensorShape"):
        tf.convert_to_tensor(x.get_shape())
    with pytest.raises(ValueError, match="Cannot convert a partially known TensorShape"):
        tf.reshape(x, x.get_shape())
    with pytest.raises(ValueError, match=r"zeros needs a fully known shape, got \(\?, 3\)"):
        tf.zeros([x.get_shape()[0], 3])


# -- TF1 programs that read static shapes ----------------------------------------------


def _dense_layer(inputs, units, scope):
    """A hand-built layer sized from its input, the TF1 way."""
    with tf.variable_scope(scope):
        fan_in = inputs.get_shape()[1].value
        weights = tf.get_variable("w", [fan_in, units],
                                  initializer=tf.random_normal_initializer(seed=1))
        bias = tf.get_variable("b", [units], initializer=tf.constant_initializer(0.1))
        return tf.matmul(inputs, weights) + bias


def test_an_mlp_sized_by_get_shape_value(rng):
    x = tf.placeholder(tf.float32, [None, 6])
    hidden = tf.nn.relu(_dense_layer(x, 2 * x.get_shape()[1].value, "hidden"))
    logits = _dense_layer(hidden, int(hidden.get_shape()[-1]) // 3, "out")
    assert logits.get_shape().as_list() == [None, 4]
    batch = rng.standard_normal((5, 6)).astype(np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got, w1, b1, w2, b2 = sess.run([logits] + tf.trainable_variables(), {x: batch})
    hidden_ref = np.maximum(batch.astype(np.float64) @ w1 + b1, 0)
    np.testing.assert_allclose(got, hidden_ref @ w2 + b2, rtol=1e-5, atol=1e-5)


def test_variables_and_ops_sized_by_dimensions(rng):
    x = tf.placeholder(tf.float32, [None, 60])
    weights = tf.get_variable("w", [x.get_shape()[1], x.get_shape()[1] // 3],
                              initializer=tf.glorot_uniform_initializer(seed=2))
    top, _ = tf.nn.top_k(x, k=x.get_shape()[-1] // 20)
    batch = rng.standard_normal((2, 60)).astype(np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        weight_values, top_values = sess.run([weights, top], {x: batch})
    limit = np.sqrt(6.0 / (60 + 20))        # Glorot's bound from the fans 60 and 20
    assert weight_values.shape == (60, 20) and np.abs(weight_values).max() <= limit
    assert np.abs(weight_values).max() > 0.9 * limit
    np.testing.assert_array_equal(top_values, -np.sort(-batch, axis=1)[:, :3])


def _numpy_conv_same(images, kernel):
    """NHWC convolution with SAME padding of a 3x3 kernel, stride 1, float64."""
    padded = np.pad(images, [(0, 0), (1, 1), (1, 1), (0, 0)]).astype(np.float64)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2))
    return np.einsum("nhwcij,ijco->nhwo", windows, kernel)


def test_a_cnn_whose_flatten_size_comes_from_as_list(rng):
    images = tf.placeholder(tf.float32, [None, 6, 6, 2])
    kernel = tf.Variable(rng.standard_normal((3, 3, 2, 4)).astype(np.float32))
    conv = tf.nn.relu(tf.nn.conv2d(images, kernel, [1, 1, 1, 1], "SAME"))
    pooled = tf.nn.max_pool(conv, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
    _, height, width, channels = pooled.get_shape().as_list()
    flat = tf.reshape(pooled, [-1, height * width * channels])
    assert flat.get_shape().as_list() == [None, 36]
    weights = tf.Variable(rng.standard_normal((np.prod(pooled.get_shape()[1:]), 3))
                          .astype(np.float32))
    logits = tf.matmul(flat, weights)
    batch = rng.standard_normal((2, 6, 6, 2)).astype(np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got, kernel_value, weights_value = sess.run([logits, kernel, weights], {images: batch})
    conv_ref = np.maximum(_numpy_conv_same(batch, kernel_value), 0)
    pooled_ref = conv_ref.reshape(2, 3, 2, 3, 2, 4).max(axis=(2, 4))
    np.testing.assert_allclose(got, pooled_ref.reshape(2, -1) @ weights_value,
                               rtol=1e-4, atol=1e-4)


def test_split_over_a_fed_batch(op_device):
    with tf.device(op_device):
        x = tf.placeholder(tf.float32, [None, 3])
        first, second = tf.split(x, 2)
        loss = tf.reduce_sum(first * 2.0 + second * 3.0)
        grad, = tf.gradients(loss, x)
    assert first.get_shape().as_list() == [None, 3]
    batch = np.arange(12, dtype=np.float32).reshape(4, 3)
    with tf.Session() as sess:
        parts = sess.run([first, second], {x: batch})
        np.testing.assert_array_equal(parts[0], batch[:2])
        np.testing.assert_array_equal(parts[1], batch[2:])
        np.testing.assert_array_equal(sess.run(grad, {x: batch}), [[2] * 3] * 2 + [[3] * 3] * 2)
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"Number of ways to split should evenly divide the split "
                                 r"dimension, but got split_dim 0 \(size = 5\) and num_split 2"):
            sess.run(first, {x: np.zeros((5, 3))})


def _numpy_cross_entropy(logits, labels):
    shifted = logits.astype(np.float64) - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0], np.exp(log_probs)


def test_cross_entropy_over_logits_with_two_unknown_leading_dims(rng):
    logits = tf.placeholder(tf.float32, [None, None, 5])
    labels = tf.placeholder(tf.int32, [None, None])
    sparse = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    dense = tf.nn.softmax_cross_entropy_with_logits_v2(labels=tf.one_hot(labels, 5),
                                                       logits=logits)
    mean_loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    grad, = tf.gradients(tf.reduce_sum(sparse), logits)
    assert sparse.get_shape().as_list() == [None, None] == dense.get_shape().as_list()
    for batch, steps in [(2, 3), (4, 1)]:
        logit_values = rng.standard_normal((batch, steps, 5)).astype(np.float32)
        label_values = rng.integers(0, 5, (batch, steps)).astype(np.int32)
        with tf.Session() as sess:
            got = sess.run([sparse, dense, mean_loss, grad],
                           {logits: logit_values, labels: label_values})
        want, probs = _numpy_cross_entropy(logit_values, label_values)
        for value in got[:2]:
            np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[2], want.mean(), rtol=1e-5)
        np.testing.assert_allclose(got[3], probs - np.eye(5)[label_values], atol=1e-6)


# -- shapes given as tensors ---------------------------------------------------------------


def test_filled_tensors_over_run_time_shapes(op_device):
    with tf.device(op_device):
        x = tf.placeholder(tf.float32, [None, 3])
        zeros = tf.zeros(tf.shape(x))
        ones = tf.ones([tf.shape(x)[0], 4], tf.int32)
        filled = tf.fill(tf.stack([2, tf.shape(x)[0]]), 2.5)
        grad, = tf.gradients(tf.reduce_sum(tf.fill(tf.shape(x), tf.constant(3.0)) * x), x)
    assert zeros.get_shape().as_list() == [None, 3]      # tf.shape(x): x's static shape
    assert ones.get_shape().as_list() == [None, 4]       # a stacked list: its constants
    assert filled.get_shape().as_list() == [2, None]
    with tf.Session() as sess:
        got = sess.run([zeros, ones, filled, grad], {x: np.ones((5, 3))})
    np.testing.assert_array_equal(got[0], np.zeros((5, 3), np.float32))
    np.testing.assert_array_equal(got[1], np.ones((5, 4), np.int32))
    np.testing.assert_array_equal(got[2], np.full((2, 5), 2.5, np.float32))
    np.testing.assert_array_equal(got[3], np.full((5, 3), 3.0, np.float32))


def test_a_negative_run_time_dimension_gives_tfs_error():
    dims = tf.placeholder(tf.int32, [2])
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError,
                                             match="Dimension -1 must be >= 0"):
        sess.run(tf.zeros(dims), {dims: [2, -1]})


def test_random_draws_of_a_run_time_batch(op_device):
    with tf.device(op_device):
        codes = tf.placeholder(tf.float32, [None, 8])
        noise = tf.random_normal([tf.shape(codes)[0], 8], seed=3)
        same_noise = tf.random_normal([6, 8], seed=3)
    assert noise.get_shape().as_list() == [None, 8]
    with tf.Session() as sess:
        drawn = sess.run(noise, {codes: np.zeros((6, 8))})
    with tf.Session() as sess:
        np.testing.assert_array_equal(drawn, sess.run(same_noise))   # one stream, one seed


def test_tile_by_run_time_multiples_and_its_gradient(op_device):
    with tf.device(op_device):
        rows = tf.placeholder(tf.float32, [None, 3])
        keys = tf.placeholder(tf.float32, [None, 2])
        tiled = tf.tile(rows, [tf.shape(keys)[0], 2])
        grad, = tf.gradients(tf.reduce_sum(tiled * tiled), rows)
    assert tiled.get_shape().as_list() == [None, 6]
    row_values = np.arange(6, dtype=np.float32).reshape(2, 3)
    with tf.Session() as sess:
        got, got_grad = sess.run([tiled, grad], {rows: row_values, keys: np.zeros((3, 2))})
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"multiples\[0\] >= 0"):
            sess.run(tf.tile(rows, tf.placeholder_with_default([-1, 1], [2])),
                     {rows: row_values})
    np.testing.assert_array_equal(got, np.tile(row_values, [3, 2]))
    np.testing.assert_array_equal(got_grad, 2 * 6 * row_values)       # 3 x 2 tiles


@pytest.mark.parametrize("build, static", [
    (lambda x: tf.reshape(x, tf.stack([tf.shape(x)[0], 48])), [None, 48]),
    (lambda x: tf.reshape(x, tf.concat([tf.shape(x)[:1], [16, 3]], 0)), [None, 16, 3]),
    (lambda x: tf.reshape(x, tf.shape(x)), [None, 4, 4, 3]),
    # two unknowns in the target: TF 1.15 infers neither
    (lambda x: tf.reshape(x, [tf.shape(x)[0], -1]), [None, None]),
    (lambda x: tf.reshape(x, [-1, x.get_shape()[1] * x.get_shape()[2], 3]), [None, 16, 3]),
])
def test_reshape_targets_known_in_part(build, static, rng):
    x = tf.placeholder(tf.float32, [None, 4, 4, 3])
    reshaped = build(x)
    assert reshaped.get_shape().as_list() == static
    batch = rng.standard_normal((2, 4, 4, 3)).astype(np.float32)
    with tf.Session() as sess:
        got = sess.run(reshaped, {x: batch})
    want = [2 if dim is None and axis == 0 else dim for axis, dim in enumerate(static)]
    np.testing.assert_array_equal(got, batch.reshape([-1 if d is None else d for d in want]))


def test_images_of_any_size_through_conv_layers(rng):
    images = tf.placeholder(tf.float32, [None, None, None, 3])
    features = tf.layers.conv2d(images, 4, 3, padding="same", activation=tf.nn.relu)
    pooled = tf.reduce_mean(features, axis=tf.constant([1, 2]))
    logits = tf.layers.dense(pooled, 2)
    flat = tf.layers.flatten(features)
    assert features.get_shape().as_list() == [None, None, None, 4]
    assert pooled.get_shape().as_list() == [None, 4] and flat.get_shape().as_list() == [None, None]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        kernel, bias, dense_kernel, dense_bias = sess.run(tf.trainable_variables())
        for height, width in [(5, 7), (3, 3)]:
            batch = rng.standard_normal((2, height, width, 3)).astype(np.float32)
            got_logits, got_flat = sess.run([logits, flat], {images: batch})
            conv = np.maximum(_numpy_conv_same(batch, kernel) + bias, 0)
            want = conv.mean(axis=(1, 2)) @ dense_kernel + dense_bias
            np.testing.assert_allclose(got_logits, want, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(got_flat, conv.reshape(2, -1), rtol=1e-4, atol=1e-5)


def test_dropout_noise_shape_names_the_run_time_batch():
    x = tf.placeholder(tf.float32, [None, 4])
    dropped = tf.nn.dropout(x, keep_prob=0.5, noise_shape=[tf.shape(x)[0], 1], seed=4)
    with tf.Session() as sess:
        got = sess.run(dropped, {x: np.ones((64, 4))})
    kept = got[:, 0] != 0
    np.testing.assert_array_equal(got, np.where(kept[:, None], 2.0, 0.0) * np.ones((1, 4)))  # rows
    assert 10 < kept.sum() < 54
    with pytest.raises(ValueError, match=r"noise_shape\[1\] must be an int, None, a constant"):
        tf.nn.dropout(x, 0.5, noise_shape=[1, tf.shape(x)[0]])


# Static shapes TF 1.15's shape functions give (x: [?, 8, 8, 3], v: [?, 10]).
STATIC_SHAPES = [
    ("concat", lambda x, v: tf.concat([x, x], -1), [None, 8, 8, 6]),
    ("pad", lambda x, v: tf.pad(x, [[0, 0], [1, 1], [2, 2], [0, 0]]), [None, 10, 12, 3]),
    ("tile", lambda x, v: tf.tile(x, [1, 2, 1, 1]), [None, 16, 8, 3]),
    ("transpose", lambda x, v: tf.transpose(v), [10, None]),
    ("gather", lambda x, v: tf.gather(v, [0, 1, 1]), [3, 10]),
    ("strided_slice", lambda x, v: x[:, 1:5, ::2, 0], [None, 4, 4]),
    ("split", lambda x, v: tf.split(x, 3, axis=3)[0], [None, 8, 8, 1]),
    ("squeeze", lambda x, v: tf.squeeze(tf.expand_dims(v, 1), [1]), [None, 10]),
    ("conv_valid_stride_2", lambda x, v: tf.nn.conv2d(
        x, tf.zeros([3, 3, 3, 5]), [1, 2, 2, 1], "VALID"), [None, 3, 3, 5]),
    ("avg_pool_same", lambda x, v: tf.nn.avg_pool(
        x, [1, 3, 3, 1], [1, 2, 2, 1], "SAME"), [None, 4, 4, 3]),
    ("resize", lambda x, v: tf.image.resize_images(x, [16, 12]), [None, 16, 12, 3]),
    ("reduce_keepdims", lambda x, v: tf.reduce_mean(x, [1, 2], keepdims=True),
     [None, 1, 1, 3]),
    ("placeholder_with_default", lambda x, v: tf.placeholder_with_default(
        tf.zeros([2, 10]), [None, 10]), [None, 10]),
    ("cond", lambda x, v: tf.cond(tf.constant(True), lambda: v, lambda: 2 * v), [None, 10]),
    ("while_loop", lambda x, v: tf.while_loop(
        lambda i, acc: i < 3, lambda i, acc: (i + 1, acc * 2), [0, v])[1], [None, 10]),
    ("map_fn", lambda x, v: tf.map_fn(tf.reduce_sum, v), [None]),
    ("dynamic_rnn", lambda x, v: tf.nn.dynamic_rnn(
        tf.nn.rnn_cell.GRUCell(7), tf.reshape(v, [-1, 5, 2]), dtype=tf.float32)[0],
     [None, 5, 7]),
    ("fill_of_shape", lambda x, v: tf.fill(tf.shape(v), 1.0), [None, 10]),
    ("random_of_shape", lambda x, v: tf.random_uniform(tf.shape(x)), [None, 8, 8, 3]),
]


@pytest.mark.parametrize("build, static", [case[1:] for case in STATIC_SHAPES],
                         ids=[case[0] for case in STATIC_SHAPES])
def test_static_shapes_follow_tfs_shape_functions(build, static):
    x = tf.placeholder(tf.float32, [None, 8, 8, 3])
    v = tf.placeholder(tf.float32, [None, 10])
    assert build(x, v).get_shape().as_list() == static
