"""``tf.layers``, ``tf.losses``, dropout, categorical sampling and the
variable initializers: shapes, names, values, statistics and seeding."""

import numpy as np
import pytest

import towerflow as tf

# -- layers ----------------------------------------------------------------------------


def initialized_session():
    session = tf.Session()
    session.run(tf.global_variables_initializer())
    return session


def names(variables):
    return [variable.name for variable in variables]


def test_dense_names_shapes_and_values(op_device, rng):
    with tf.device(op_device):
        x = tf.placeholder(tf.float32, [None, 5])
        hidden = tf.layers.dense(x, 4, activation=tf.nn.relu)
        logits = tf.layers.dense(hidden, 3, name="logits")
        frozen = tf.layers.dense(x, 2, use_bias=False, trainable=False)
    assert names(tf.global_variables()) == ["dense/kernel:0", "dense/bias:0", "logits/kernel:0",
                                            "logits/bias:0", "dense_1/kernel:0"]
    assert names(tf.trainable_variables()) == names(tf.global_variables())[:4]
    assert hidden.shape.as_list() == [None, 4] and logits.shape.as_list() == [None, 3]
    value = rng.standard_normal((6, 5)).astype(np.float32)
    variables = tf.global_variables()          # kernel, bias, kernel, bias, kernel
    with initialized_session() as session:
        got, kernels, biases = session.run([[hidden, logits, frozen], variables[0::2],
                                            variables[1:4:2]], {x: value})
    first = np.maximum(value @ kernels[0] + biases[0], 0)
    np.testing.assert_allclose(got[0], first, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], first @ kernels[1] + biases[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[2], value @ kernels[2], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(biases[0], 0)            # default bias: zeros
    limit = np.sqrt(6 / (5 + 4))                           # default kernel: Glorot uniform
    assert np.abs(kernels[0]).max() <= limit and kernels[0].std() > limit / 4


def test_dense_on_rank_3_input_applies_to_the_last_axis(rng):
    x = tf.placeholder(tf.float64, [None, 3, 5])
    y = tf.layers.dense(x, 2)
    assert y.shape.as_list() == [None, 3, 2]
    value = rng.standard_normal((4, 3, 5))
    with initialized_session() as session:
        got, kernel = session.run([y, tf.global_variables()[0]], {x: value})
    np.testing.assert_allclose(got, value @ kernel, rtol=1e-12)


@pytest.mark.parametrize("padding, strides, out_size", [("same", 1, 5), ("valid", 1, 3),
                                                        ("same", 2, 3), ("valid", 2, 2)])
def test_conv2d_max_pooling_and_flatten_layers(padding, strides, out_size, rng):
    images = tf.placeholder(tf.float64, [None, 5, 5, 2])
    conv = tf.layers.conv2d(images, 4, 3, strides=strides, padding=padding,
                            bias_initializer=tf.constant_initializer(0.5))
    pooled = tf.layers.max_pooling2d(conv, 2, 2, padding="same")
    flat = tf.layers.flatten(pooled)
    pooled_size = -(-out_size // 2)
    assert conv.shape.as_list() == [None, out_size, out_size, 4]
    assert flat.shape.as_list() == [None, pooled_size * pooled_size * 4]
    assert names(tf.trainable_variables()) == ["conv2d/kernel:0", "conv2d/bias:0"]
    assert tf.trainable_variables()[0].shape.as_list() == [3, 3, 2, 4]
    value = rng.standard_normal((2, 5, 5, 2))
    with initialized_session() as session:
        got_conv, got_flat, kernel = session.run([conv, flat, tf.trainable_variables()[0]],
                                                 {images: value})
    expected = tf_conv_reference(value, kernel, strides, padding.upper()) + 0.5
    np.testing.assert_allclose(got_conv, expected, rtol=1e-12, atol=1e-12)
    padded = np.pad(expected, [(0, 0), (0, out_size % 2), (0, out_size % 2), (0, 0)],
                    constant_values=-np.inf)
    pooled_ref = padded.reshape(2, pooled_size, 2, pooled_size, 2, 4).max(axis=(2, 4))
    np.testing.assert_allclose(got_flat, pooled_ref.reshape(2, -1), rtol=1e-12, atol=1e-12)


def tf_conv_reference(x, w, strides, padding):
    from test_nn_ops import conv2d
    return conv2d(x, w, (strides, strides), padding)


def batch_norm_model(training, momentum=0.9, device=None):
    with tf.device(device):
        x = tf.placeholder(tf.float64, [None, 2, 3])
        y = tf.layers.batch_normalization(x, momentum=momentum, training=training)
    return x, y


def test_batch_normalization_variables_and_trainability():
    batch_norm_model(True)
    assert names(tf.global_variables()) == [
        "batch_normalization/gamma:0", "batch_normalization/beta:0",
        "batch_normalization/moving_mean:0", "batch_normalization/moving_variance:0"]
    assert names(tf.trainable_variables()) == names(tf.global_variables())[:2]
    assert len(tf.get_collection(tf.GraphKeys.UPDATE_OPS)) == 2
    tf.layers.batch_normalization(tf.placeholder(tf.float32, [4, 3]), training=False)
    assert len(tf.get_collection(tf.GraphKeys.UPDATE_OPS)) == 2   # inference adds none


def test_batch_normalization_moving_statistics_follow_update_ops(op_device, rng):
    x, y = batch_norm_model(True, momentum=0.9, device=op_device)
    updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    moving_mean, moving_var = tf.global_variables()[2:]
    expected_mean, expected_var = np.zeros(3), np.ones(3)
    with initialized_session() as session:
        for step in range(4):
            batch = rng.standard_normal((5, 2, 3)) * (step + 1) + step
            rows = batch.reshape(-1, 3)
            got, *_ = session.run([y] + updates, {x: batch})
            normalized = (rows - rows.mean(0)) / np.sqrt(rows.var(0) + 1e-3)
            np.testing.assert_allclose(got.reshape(-1, 3), normalized, rtol=1e-10, atol=1e-10)
            expected_mean = 0.9 * expected_mean + 0.1 * rows.mean(0)
            expected_var = 0.9 * expected_var + 0.1 * rows.var(0, ddof=1)
        got_mean, got_var = session.run([moving_mean, moving_var])
    np.testing.assert_allclose(got_mean, expected_mean, rtol=1e-12)
    np.testing.assert_allclose(got_var, expected_var, rtol=1e-12)


def test_batch_normalization_training_flag_switches_modes_at_run_time(rng):
    training = tf.placeholder(tf.bool, [])
    x, y = batch_norm_model(training, momentum=0.5)
    updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    moving_mean, moving_var = tf.global_variables()[2:]
    batch = rng.standard_normal((4, 2, 3)) * 3 + 2
    rows = batch.reshape(-1, 3)
    with initialized_session() as session:
        inference, *_ = session.run([y] + updates, {x: batch, training: False})
        np.testing.assert_allclose(inference, batch / np.sqrt(1 + 1e-3), rtol=1e-12)
        np.testing.assert_array_equal(session.run(moving_mean), 0)   # no update when False
        trained, *_ = session.run([y] + updates, {x: batch, training: True})
        normalized = (rows - rows.mean(0)) / np.sqrt(rows.var(0) + 1e-3)
        np.testing.assert_allclose(trained.reshape(-1, 3), normalized, rtol=1e-10, atol=1e-10)
        got_mean, got_var = session.run([moving_mean, moving_var])
    np.testing.assert_allclose(got_mean, 0.5 * rows.mean(0), rtol=1e-12)
    np.testing.assert_allclose(got_var, 0.5 + 0.5 * rows.var(0, ddof=1), rtol=1e-12)


def test_dropout_layer_is_identity_unless_training(rng):
    x = tf.placeholder(tf.float32, [50, 40])
    training = tf.placeholder(tf.bool, [])
    value = rng.uniform(1, 2, (50, 40)).astype(np.float32)
    assert tf.layers.dropout(x, 0.5) is x
    switched = tf.layers.dropout(x, 0.5, training=training, seed=3)
    always = tf.layers.dropout(x, 0.5, training=True, seed=3)
    with tf.Session() as session:
        np.testing.assert_array_equal(session.run(switched, {x: value, training: False}), value)
        for output in (switched, always):
            got = session.run(output, {x: value, training: True})
            assert 0.4 < (got == 0).mean() < 0.6
            np.testing.assert_allclose(got[got != 0], 2 * value[got != 0], rtol=1e-6)


# -- dropout ---------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.8])
def test_dropout_rate_and_scaling(rate, op_device):
    with tf.device(op_device):
        y = tf.nn.dropout(tf.ones([200, 500]), rate=rate, seed=1)
    value = tf.Session().run(y)
    kept = value != 0
    sigma = np.sqrt(rate * (1 - rate) / value.size)
    assert abs((1 - kept.mean()) - rate) < 5 * sigma
    np.testing.assert_allclose(value[kept], 1 / (1 - rate), rtol=1e-6)


def test_dropout_keep_prob_is_one_minus_rate():
    value = tf.Session().run(tf.nn.dropout(tf.ones([100, 100]), keep_prob=0.75, seed=2))
    assert abs((value == 0).mean() - 0.25) < 0.02
    np.testing.assert_allclose(value[value != 0], 1 / 0.75, rtol=1e-6)
    x = tf.ones([3])
    assert tf.nn.dropout(x, rate=0.0) is x


def test_dropout_keep_prob_fed_at_run_time(rng):
    """TensorFlow 1.x's MNIST idiom: one graph, keep_prob 0.5 to train, 1.0 to evaluate."""
    x = tf.placeholder(tf.float32, [100, 100])
    keep_prob = tf.placeholder(tf.float32, [])
    y = tf.nn.dropout(x, keep_prob, seed=3)
    (grad,) = tf.gradients(tf.reduce_sum(y), x)
    value = rng.uniform(1, 2, (100, 100)).astype(np.float32)
    with tf.Session() as session:
        np.testing.assert_array_equal(session.run(y, {x: value, keep_prob: 1.0}), value)
        for kept in (0.5, 0.8):
            got, got_grad = session.run([y, grad], {x: value, keep_prob: kept})
            assert abs((got != 0).mean() - kept) < 0.03
            np.testing.assert_allclose(got[got != 0], value[got != 0] / kept, rtol=1e-6)
            np.testing.assert_allclose(got_grad, (got != 0) / kept, rtol=1e-6)
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[0, 1\), got 1.0"):
            session.run(y, {x: value, keep_prob: 0.0})
    rate = tf.placeholder(tf.float32, [])
    layer = tf.layers.dropout(x, rate=rate, training=True, seed=4)
    with tf.Session() as session:
        assert abs((session.run(layer, {x: value, rate: 0.25}) == 0).mean() - 0.25) < 0.03


def dropout_masks(graph_seed, op_seed, runs=3):
    with tf.Graph().as_default():
        tf.set_random_seed(graph_seed)
        y = tf.nn.dropout(tf.ones([20, 20]), rate=0.5, seed=op_seed)
        with tf.Session() as session:
            return [session.run(y) for _ in range(runs)]


def test_dropout_is_reproducible_with_seeds_and_new_every_run():
    first = dropout_masks(5, 7)
    np.testing.assert_array_equal(np.array(first), np.array(dropout_masks(5, 7)))
    assert not np.array_equal(first[0], first[1]) and not np.array_equal(first[1], first[2])
    assert not np.array_equal(first[0], dropout_masks(5, 8)[0])


@pytest.mark.parametrize("noise_shape, shared_axis", [([50, 1], 1), ([1, 60], 0),
                                                     ([None, 1], 1)])
def test_dropout_noise_shape_shares_one_draw(noise_shape, shared_axis, rng):
    x = rng.uniform(1, 2, (50, 60)).astype(np.float32)
    value = tf.Session().run(tf.nn.dropout(x, rate=0.5, noise_shape=noise_shape, seed=4))
    mask = value / x
    assert np.all(mask.min(axis=shared_axis) == mask.max(axis=shared_axis))
    assert 0.3 < (mask == 0).mean() < 0.7


# -- categorical sampling --------------------------------------------------------------


def softmax(logits):
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def frequencies(samples, classes):
    return np.stack([np.bincount(row, minlength=classes) / row.size for row in samples])


def test_categorical_frequencies_match_softmax():
    logits = np.array([[0.0, 1.0, 2.0], [-1.0, 0.0, 3.0], [0.0, -np.inf, 0.0]], np.float32)
    samples = tf.Session().run(tf.random.categorical(logits, 20000, seed=1))
    assert samples.shape == (3, 20000) and samples.dtype == np.int64
    np.testing.assert_allclose(frequencies(samples, 3), softmax(logits), atol=0.015)
    assert not np.any(samples[2] == 1)            # a -inf logit is never drawn


def categorical_draws(seed, dtype=tf.int64):
    with tf.Graph().as_default():
        draws = tf.random.categorical([[0.0, 0.5, 1.0]], 50, seed=seed, dtype=dtype)
        with tf.Session() as session:
            return session.run(draws), session.run(draws)


def test_categorical_is_reproducible_with_a_seed():
    first, second = categorical_draws(3)
    np.testing.assert_array_equal(first, categorical_draws(3)[0])
    assert not np.array_equal(first, second)
    assert categorical_draws(3, tf.int32)[0].dtype == np.int32


def entropy(probabilities):
    return -(probabilities * np.log(probabilities)).sum(-1)


def test_p8_lower_temperature_sharpens_the_distribution(rng):
    logits = rng.standard_normal((1, 8)).astype(np.float32) * 1.5
    temperatures = [1.0, 0.6, 0.2]
    inputs = tf.placeholder(tf.float32, [1, 8])
    probabilities = [tf.nn.softmax(inputs / t, axis=-1) for t in temperatures]
    draws = [tf.random.categorical(inputs / t, 20000, seed=9) for t in temperatures]
    with tf.Session() as session:
        probs, samples = session.run([probabilities, draws], {inputs: logits})
    entropies = [entropy(p)[0] for p in probs]
    assert entropies[0] > entropies[1] > entropies[2], entropies
    sampled = [frequencies(s, 8) for s in samples]
    for p, freq in zip(probs, sampled):
        np.testing.assert_allclose(freq, p, atol=0.015)
    top = logits.argmax()
    assert sampled[0][0, top] < sampled[1][0, top] < sampled[2][0, top]
    sampled_entropies = [entropy(np.maximum(f, 1e-12))[0] for f in sampled]
    assert sampled_entropies[0] > sampled_entropies[1] > sampled_entropies[2]


# -- initializers ----------------------------------------------------------------------


def initial_values(initializer, shape, dtype=tf.float32):
    return tf.Session().run(initializer(shape, dtype))


FAN_SHAPE = [3, 3, 40, 60]          # conv: fan_in 360, fan_out 540


@pytest.mark.parametrize("initializer, kind, variance", [
    (tf.glorot_uniform_initializer(seed=1), "uniform", 2 / (360 + 540)),
    (tf.glorot_normal_initializer(seed=1), "truncated", 2 / (360 + 540)),
    (tf.initializers.he_normal(seed=1), "truncated", 2 / 360),
    (tf.initializers.he_uniform(seed=1), "uniform", 2 / 360),
    (tf.variance_scaling_initializer(3.0, "fan_out", "untruncated_normal", seed=1),
     "normal", 3 / 540),
    (tf.variance_scaling_initializer(1.0, "fan_in", "normal", seed=1), "truncated", 1 / 360),
], ids=["glorot_uniform", "glorot_normal", "he_normal", "he_uniform", "scaling_fan_out",
        "scaling_fan_in"])
def test_variance_scaling_statistics(initializer, kind, variance):
    values = initial_values(initializer, FAN_SHAPE)
    assert values.shape == tuple(FAN_SHAPE) and values.dtype == np.float32
    assert abs(values.mean()) < 0.02 * np.sqrt(variance) * 10
    np.testing.assert_allclose(values.var(), variance, rtol=0.03)
    bound = {"uniform": np.sqrt(3 * variance),
             "truncated": 2 * np.sqrt(variance) / 0.87962566103423978,
             "normal": np.inf}[kind]
    assert np.abs(values).max() <= bound * (1 + 1e-6)
    if kind == "normal":
        assert np.abs(values).max() > 3 * np.sqrt(variance)   # tails are kept


def test_seeded_initializers_repeat():
    first = initial_values(tf.glorot_uniform_initializer(seed=4), [5, 5])
    np.testing.assert_array_equal(first, initial_values(tf.glorot_uniform_initializer(seed=4),
                                                        [5, 5]))


@pytest.mark.parametrize("initializer, expected", [
    (tf.zeros_initializer(), np.zeros((2, 3))), (tf.ones_initializer(), np.ones((2, 3))),
    (tf.constant_initializer(0.25), np.full((2, 3), 0.25)),
    (tf.constant_initializer([1, 2, 3, 4, 5, 6]), np.arange(1.0, 7.0).reshape(2, 3)),
], ids=["zeros", "ones", "constant_scalar", "constant_list"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_constant_initializers(initializer, expected, dtype):
    values = initial_values(initializer, [2, 3], dtype)
    assert values.dtype == dtype.as_numpy_dtype
    np.testing.assert_array_equal(values, expected)


# -- tf.losses -------------------------------------------------------------------------


def log_softmax(x):
    return np.log(softmax(x))


def loss_value(loss, feed=None):
    return tf.Session().run(loss, feed)


def test_losses_match_numpy(rng):
    logits = rng.standard_normal((6, 4))
    onehot = np.eye(4)[rng.integers(0, 4, 6)]
    classes = onehot.argmax(1)
    per_example = -(onehot * log_softmax(logits)).sum(1)
    smoothed = -((onehot * 0.8 + 0.2 / 4) * log_softmax(logits)).sum(1)
    cases = [
        (tf.losses.softmax_cross_entropy(onehot, logits), per_example.mean()),
        (tf.losses.softmax_cross_entropy(onehot, logits, label_smoothing=0.2), smoothed.mean()),
        (tf.losses.softmax_cross_entropy(onehot, logits, weights=0.5), 0.5 * per_example.mean()),
        (tf.losses.sparse_softmax_cross_entropy(classes, logits), per_example.mean()),
        (tf.losses.mean_squared_error(onehot, logits), ((onehot - logits) ** 2).mean()),
    ]
    for loss, expected in cases:
        assert loss.shape.as_list() == []
        np.testing.assert_allclose(loss_value(loss), expected, rtol=1e-12)


def test_losses_with_zero_weights_average_over_the_weighted_examples(rng):
    """TensorFlow 1.x's default reduction (SUM_BY_NONZERO_WEIGHTS): padded
    examples with weight 0 do not dilute the mean."""
    logits = rng.standard_normal((4, 3))
    classes = np.array([0, 2, 1, 1])
    weights = np.array([1.0, 0.0, 2.0, 1.0])
    per_example = -log_softmax(logits)[np.arange(4), classes]
    loss = tf.losses.sparse_softmax_cross_entropy(classes, logits, weights=weights)
    np.testing.assert_allclose(loss_value(loss), (weights * per_example).sum() / 3, rtol=1e-12)
    squared = tf.losses.mean_squared_error(np.ones((4, 2)), logits[:, :2],
                                           weights=weights[:, None])
    expected = (weights[:, None] * (logits[:, :2] - 1) ** 2).sum() / 6
    np.testing.assert_allclose(loss_value(squared), expected, rtol=1e-12)
    nothing = tf.losses.mean_squared_error(np.ones(3), np.zeros(3), weights=np.zeros(3))
    assert loss_value(nothing) == 0.0


def test_losses_match_torch(rng):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    logits = rng.standard_normal((6, 4))
    classes = rng.integers(0, 4, 6)
    loss = tf.losses.softmax_cross_entropy(np.eye(4)[classes], logits, label_smoothing=0.1)
    expected = F.cross_entropy(torch.tensor(logits), torch.tensor(classes), label_smoothing=0.1)
    np.testing.assert_allclose(loss_value(loss), expected.item(), rtol=1e-12)
