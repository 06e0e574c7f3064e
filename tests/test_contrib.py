"""tf.contrib's thin aliases of core (towerflow/api/contrib): TF1 programs
written with tf.contrib.layers / tf.contrib.rnn train on scikit-learn's
digits, and match the same networks written with core tf.layers."""

import numpy as np
import pytest

import towerflow as tf
from towerflow.data import digits

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def data():
    train, test, _ = digits.load(test_fraction=0.2, seed=0)
    return train, test


def _batches(split, batch_size, steps, seed=0):
    order = np.random.RandomState(seed)
    for _ in range(steps):
        index = order.randint(0, len(split.labels), batch_size)
        yield split.images[index], split.labels[index]


def _train_and_score(build, data, steps=300, batch_size=64):
    """Build with ``build(images, labels, is_training) -> (train_op, logits)``,
    train, and return (test accuracy, test logits, trainable values)."""
    train, test = data
    tf.reset_default_graph()
    images = tf.placeholder(tf.float32, [None, 8, 8, 1])
    labels = tf.placeholder(tf.int64, [None])
    is_training = tf.placeholder_with_default(False, [])
    train_op, logits = build(images, labels, is_training)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for batch_images, batch_labels in _batches(train, batch_size, steps):
            sess.run(train_op, {images: batch_images, labels: batch_labels,
                                is_training: True})
        test_logits = sess.run(logits, {images: test.images})
        values = sess.run(tf.trainable_variables())
    accuracy = np.mean(np.argmax(test_logits, 1) == test.labels)
    return accuracy, test_logits, values


def _seeded(shape, seed):
    return np.random.RandomState(seed).uniform(-0.2, 0.2, shape).astype(np.float32)


# -- an MLP: fully_connected + l2_regularizer + optimize_loss ---------------------------


def _mlp_contrib(images, labels, is_training):
    layers = tf.contrib.layers
    flat = layers.flatten(images)
    hidden = layers.fully_connected(flat, 32, weights_regularizer=layers.l2_regularizer(1e-3),
                                    weights_initializer=tf.constant_initializer(
                                        _seeded([64, 32], 1)))
    logits = layers.fully_connected(hidden, 10, activation_fn=None,
                                    weights_initializer=tf.constant_initializer(
                                        _seeded([32, 10], 2)))
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    loss += tf.losses.get_regularization_loss()
    step = tf.contrib.framework.get_or_create_global_step()
    return layers.optimize_loss(loss, step, learning_rate=0.5, optimizer="SGD"), logits


def _mlp_core(images, labels, is_training):
    flat = tf.layers.flatten(images)
    hidden = tf.layers.dense(flat, 32, activation=tf.nn.relu,
                             kernel_initializer=tf.constant_initializer(_seeded([64, 32], 1)),
                             kernel_regularizer=lambda w: 1e-3 * tf.nn.l2_loss(w))
    logits = tf.layers.dense(hidden, 10,
                             kernel_initializer=tf.constant_initializer(_seeded([32, 10], 2)))
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    loss += tf.losses.get_regularization_loss()
    return tf.train.GradientDescentOptimizer(0.5).minimize(loss), logits


def test_contrib_mlp_trains_as_the_core_one(data):
    accuracy, logits, values = _train_and_score(_mlp_contrib, data)
    core_accuracy, core_logits, core_values = _train_and_score(_mlp_core, data)
    assert accuracy > 0.9
    assert accuracy == core_accuracy
    np.testing.assert_allclose(logits, core_logits, rtol=1e-4, atol=1e-4)
    for value, core_value in zip(values, core_values):
        np.testing.assert_allclose(value, core_value, rtol=1e-4, atol=1e-5)


# -- a CNN: conv2d + batch_norm + flatten -----------------------------------------------


def _cnn_contrib(images, labels, is_training):
    layers = tf.contrib.layers
    with tf.contrib.framework.arg_scope([layers.conv2d], normalizer_fn=layers.batch_norm,
                                        normalizer_params={"is_training": is_training}):
        net = layers.conv2d(images, 8, 3,
                            weights_initializer=tf.constant_initializer(_seeded([3, 3, 1, 8], 3)))
    net = layers.max_pool2d(net, 2)
    logits = layers.fully_connected(layers.flatten(net), 10, activation_fn=None,
                                    weights_initializer=tf.constant_initializer(
                                        _seeded([128, 10], 4)))
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    step = tf.train.get_or_create_global_step()
    return layers.optimize_loss(loss, step, 0.01, tf.train.AdamOptimizer), logits


def _cnn_core(images, labels, is_training):
    net = tf.layers.conv2d(images, 8, 3, padding="same", use_bias=False,
                           kernel_initializer=tf.constant_initializer(_seeded([3, 3, 1, 8], 3)))
    net = tf.layers.batch_normalization(net, momentum=0.999, scale=False, training=is_training)
    net = tf.layers.max_pooling2d(tf.nn.relu(net), 2, 2)
    logits = tf.layers.dense(tf.layers.flatten(net), 10,
                             kernel_initializer=tf.constant_initializer(_seeded([128, 10], 4)))
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
        return tf.train.AdamOptimizer(0.01).minimize(loss), logits


def test_contrib_cnn_with_batch_norm_trains_as_the_core_one(data):
    accuracy, logits, _ = _train_and_score(_cnn_contrib, data, steps=150)
    core_accuracy, core_logits, _ = _train_and_score(_cnn_core, data, steps=150)
    assert accuracy > 0.85
    assert abs(accuracy - core_accuracy) <= 2 / len(data[1].labels)
    np.testing.assert_allclose(logits, core_logits, rtol=1e-3, atol=1e-3)


# -- an LSTM over the image rows: tf.contrib.rnn ------------------------------------------


def _lstm(rnn, images, labels, is_training):
    rows = tf.reshape(images, [-1, 8, 8])
    tf.set_random_seed(5)
    cell = rnn.MultiRNNCell([rnn.DropoutWrapper(rnn.LSTMCell(32), output_keep_prob=1.0)])
    outputs, _ = tf.nn.dynamic_rnn(cell, rows, dtype=tf.float32)
    logits = tf.layers.dense(outputs[:, -1], 10,
                             kernel_initializer=tf.constant_initializer(_seeded([32, 10], 6)))
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    return tf.train.AdamOptimizer(0.02).minimize(loss), logits


def test_contrib_rnn_lstm_trains_as_the_core_one(data):
    accuracy, logits, _ = _train_and_score(
        lambda *args: _lstm(tf.contrib.rnn, *args), data, steps=150)
    core_accuracy, core_logits, _ = _train_and_score(
        lambda *args: _lstm(tf.nn.rnn_cell, *args), data, steps=150)
    assert accuracy > 0.85 and accuracy == core_accuracy
    np.testing.assert_array_equal(logits, core_logits)


def test_contrib_rnn_static_rnn_matches_dynamic_rnn():
    inputs = np.random.RandomState(0).randn(3, 4, 5).astype(np.float32)
    tf.reset_default_graph()
    x = tf.constant(inputs)
    with tf.variable_scope("rnn", reuse=tf.AUTO_REUSE):
        cell = tf.contrib.rnn.GRUCell(6)
        dynamic, _ = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)
        static, _ = tf.contrib.rnn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        dynamic_value, static_value = sess.run([dynamic, tf.stack(static, axis=1)])
    np.testing.assert_allclose(static_value, dynamic_value, rtol=1e-5, atol=1e-6)


# -- the layer functions' defaults and names -----------------------------------------------


def _run(*fetches, init=True):
    with tf.Session() as sess:
        if init:
            sess.run(tf.global_variables_initializer())
        return sess.run(list(fetches))


def test_fully_connected_defaults_relu_xavier_and_contrib_names():
    tf.reset_default_graph()
    x_value = np.random.RandomState(0).randn(4, 3).astype(np.float32)
    y = tf.contrib.layers.fully_connected(tf.constant(x_value), 5)
    y2 = tf.contrib.layers.fully_connected(tf.constant(x_value), 5)
    names = [v.op.name for v in tf.global_variables()]
    assert names == ["fully_connected/weights", "fully_connected/biases",
                     "fully_connected_1/weights", "fully_connected_1/biases"]
    y_value, weights, _ = _run(y, tf.global_variables()[0], y2)
    np.testing.assert_allclose(y_value, np.maximum(x_value @ weights, 0), rtol=1e-5, atol=1e-6)
    limit = np.sqrt(6.0 / (3 + 5))            # xavier: uniform, fan average
    assert np.all(np.abs(weights) <= limit)


def test_fully_connected_reuses_a_named_scope_and_checks_num_outputs():
    tf.reset_default_graph()
    x = tf.ones([2, 3])
    tf.contrib.layers.fully_connected(x, 4, scope="fc")
    tf.contrib.layers.fully_connected(x, 4, scope="fc", reuse=True)
    assert len(tf.global_variables()) == 2
    with pytest.raises(ValueError, match="num_outputs should be int or long, got 4.0"):
        tf.contrib.layers.fully_connected(x, 4.0)


def test_conv2d_defaults_same_padding_relu_and_normalizer_replaces_biases():
    tf.reset_default_graph()
    images = np.random.RandomState(1).randn(2, 5, 5, 3).astype(np.float32)
    y = tf.contrib.layers.conv2d(tf.constant(images), 4, 3, stride=2)
    assert y.shape.as_list() == [2, 3, 3, 4]
    tf.contrib.layers.conv2d(tf.constant(images), 4, [3, 3],
                             normalizer_fn=tf.contrib.layers.batch_norm)
    names = [v.op.name for v in tf.global_variables()]
    assert names == ["Conv/weights", "Conv/biases", "Conv_1/weights", "Conv_1/BatchNorm/beta",
                     "Conv_1/BatchNorm/moving_mean", "Conv_1/BatchNorm/moving_variance"]
    y_value, weights = _run(y, tf.global_variables()[0])
    padded = np.pad(images, [(0, 0), (1, 1), (1, 1), (0, 0)])
    expected = np.zeros([2, 3, 3, 4], np.float32)
    for i in range(3):
        for j in range(3):
            window = padded[:, 2 * i:2 * i + 3, 2 * j:2 * j + 3, :]
            expected[:, i, j] = np.einsum("nhwc,hwco->no", window, weights)
    np.testing.assert_allclose(y_value, np.maximum(expected, 0), rtol=1e-4, atol=1e-5)


def test_batch_norm_updates_in_place_without_updates_collections():
    tf.reset_default_graph()
    x_value = np.random.RandomState(2).randn(16, 3).astype(np.float32) * 2 + 1
    y = tf.contrib.layers.batch_norm(tf.constant(x_value), updates_collections=None,
                                     center=False, scale=True, decay=0.9, epsilon=1e-3)
    assert tf.get_collection(tf.GraphKeys.UPDATE_OPS) == []
    assert [v.op.name for v in tf.global_variables()] == [
        "BatchNorm/gamma", "BatchNorm/moving_mean", "BatchNorm/moving_variance"]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        y_value = sess.run(y)
        moving_mean, moving_variance = sess.run(tf.global_variables()[1:])
    mean, variance = x_value.mean(0), x_value.var(0)
    np.testing.assert_allclose(y_value, (x_value - mean) / np.sqrt(variance + 1e-3),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(moving_mean, 0.1 * mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(moving_variance, 0.9 + 0.1 * x_value.var(0, ddof=1),
                               rtol=1e-5)


def test_batch_norm_in_inference_uses_the_moving_statistics():
    tf.reset_default_graph()
    x_value = np.random.RandomState(3).randn(4, 2, 2, 3).astype(np.float32)
    y = tf.contrib.layers.batch_norm(tf.constant(x_value), is_training=False)
    (y_value,) = _run(y)
    np.testing.assert_allclose(y_value, x_value / np.sqrt(1 + 0.001), rtol=1e-5, atol=1e-6)


def test_flatten_max_pool_and_dropout():
    tf.reset_default_graph()
    x_value = np.arange(2 * 4 * 4 * 3, dtype=np.float32).reshape(2, 4, 4, 3)
    flat = tf.contrib.layers.flatten(tf.constant(x_value))
    pooled = tf.contrib.layers.max_pool2d(tf.constant(x_value), [2, 2])
    kept = tf.contrib.layers.dropout(tf.constant(x_value), keep_prob=0.5, is_training=False)
    flat_value, pooled_value, kept_value = _run(flat, pooled, kept, init=False)
    np.testing.assert_array_equal(flat_value, x_value.reshape(2, -1))
    np.testing.assert_array_equal(pooled_value, x_value.reshape(2, 2, 2, 2, 2, 3).max((2, 4)))
    np.testing.assert_array_equal(kept_value, x_value)
    with pytest.raises(ValueError, match="Inputs must have a least 2 dimensions."):
        tf.contrib.layers.flatten(tf.constant([1.0, 2.0]))


# -- initializers and regularizers -------------------------------------------------------


def test_initializers_follow_contribs_formulas():
    tf.reset_default_graph()
    xavier = tf.contrib.layers.xavier_initializer(seed=1)([400, 600])
    xavier_normal = tf.contrib.layers.xavier_initializer(uniform=False, seed=2)([400, 600])
    he = tf.contrib.layers.variance_scaling_initializer(seed=3)([3, 3, 64, 300])
    uniform, normal, he_value = _run(xavier, xavier_normal, he, init=False)
    limit = np.sqrt(6.0 / 1000)
    assert np.abs(uniform).max() <= limit and np.abs(uniform).max() > 0.99 * limit
    np.testing.assert_allclose(uniform.std(), limit / np.sqrt(3), rtol=0.02)
    # a normal cut at two standard deviations keeps 0.8796 of its stddev
    np.testing.assert_allclose(normal.std(), np.sqrt(1.3 / 500) * 0.8796, rtol=0.02)
    np.testing.assert_allclose(he_value.std(), np.sqrt(1.3 * 2 / (9 * 64)) * 0.8796, rtol=0.02)
    assert tf.contrib.layers.xavier_initializer_conv2d is tf.contrib.layers.xavier_initializer
    with pytest.raises(TypeError, match="Unknown mode FAN_SUM"):
        tf.contrib.layers.variance_scaling_initializer(mode="FAN_SUM")
    with pytest.raises(TypeError, match="non-floating point type"):
        tf.contrib.layers.xavier_initializer(dtype=tf.int32)


def test_regularizers_and_apply_regularization():
    tf.reset_default_graph()
    w_value = np.array([[1.0, -2.0], [3.0, -4.0]], np.float32)
    w = tf.constant(w_value)
    l1 = tf.contrib.layers.l1_regularizer(0.5)(w)
    l2 = tf.contrib.layers.l2_regularizer(0.25)(w)
    total = tf.contrib.layers.apply_regularization(tf.contrib.layers.l2_regularizer(0.25),
                                                   [w, w])
    assert tf.get_collection(tf.GraphKeys.REGULARIZATION_LOSSES) == [total]
    l1_value, l2_value, total_value = _run(l1, l2, total, init=False)
    np.testing.assert_allclose(l1_value, 0.5 * np.abs(w_value).sum())
    np.testing.assert_allclose(l2_value, 0.25 * (w_value ** 2).sum() / 2)
    np.testing.assert_allclose(total_value, 2 * l2_value)
    assert tf.contrib.layers.l2_regularizer(0.0)(w) is None
    with pytest.raises(ValueError, match="scale cannot be an integer: 1"):
        tf.contrib.layers.l2_regularizer(1)
    with pytest.raises(ValueError, match="Setting a scale less than 0 on a regularizer: -0.1"):
        tf.contrib.layers.l1_regularizer(-0.1)
    with pytest.raises(ValueError, match="No weights to regularize."):
        tf.contrib.layers.apply_regularization(tf.contrib.layers.l2_regularizer(0.1))


# -- optimize_loss ---------------------------------------------------------------------------


def test_optimize_loss_clips_by_global_norm_and_returns_the_loss():
    tf.reset_default_graph()
    w = tf.Variable([3.0, 4.0])
    loss = tf.reduce_sum(w * w)                      # gradient 2w = [6, 8], norm 10
    step = tf.train.get_or_create_global_step()
    train_op = tf.contrib.layers.optimize_loss(loss, step, 0.1, "SGD", clip_gradients=5.0)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        loss_value = sess.run(train_op)
        w_value, step_value = sess.run([w, step])
    assert loss_value == pytest.approx(25.0)
    np.testing.assert_allclose(w_value, [3.0 - 0.1 * 3.0, 4.0 - 0.1 * 4.0], rtol=1e-6)
    assert step_value == 1
    lr = [v for v in tf.global_variables() if v.op.name == "OptimizeLoss/learning_rate"]
    assert len(lr) == 1 and lr[0] not in tf.trainable_variables()


def test_optimize_loss_takes_classes_instances_and_functions_and_refuses_others():
    tf.reset_default_graph()
    w = tf.Variable(1.0)
    loss = tf.square(w)
    step = tf.train.get_or_create_global_step()
    for optimizer in (tf.train.AdagradOptimizer, tf.train.MomentumOptimizer(0.1, 0.9),
                      lambda lr: tf.train.RMSPropOptimizer(lr), "Momentum", "Adam"):
        tf.contrib.layers.optimize_loss(loss, step, 0.1, optimizer)  # OptimizeLoss_1, ...
    with pytest.raises(ValueError, match=r"Optimizer name should be one of \[Adagrad, Adam, "
                                         r"Ftrl, Momentum, RMSProp, SGD\], you provided Foo."):
        tf.contrib.layers.optimize_loss(loss, step, 0.1, "Foo")
    with pytest.raises(ValueError, match="Learning rate should be 0d Tensor or float"):
        tf.contrib.layers.optimize_loss(loss, step, 1, "SGD")
    with pytest.raises(ValueError, match="Unknown type <class 'str'> for clip_gradients"):
        tf.contrib.layers.optimize_loss(loss, step, 0.1, "SGD", clip_gradients="5")


# -- arg_scope -----------------------------------------------------------------------------


def test_arg_scope_sets_defaults_the_call_and_inner_scopes_override():
    layers = tf.contrib.layers
    arg_scope = tf.contrib.framework.arg_scope
    tf.reset_default_graph()
    x = tf.ones([1, 6, 6, 1])
    with arg_scope([layers.conv2d, layers.fully_connected], activation_fn=None):
        with arg_scope([layers.conv2d], padding="VALID") as scope:
            valid = layers.conv2d(x, 2, 3)
            same = layers.conv2d(x, 2, 3, padding="SAME")
            assert scope[layers.conv2d._key_op] == {"activation_fn": None, "padding": "VALID"}
        with arg_scope(scope):
            reopened = layers.conv2d(x, 2, 3)
        outside = layers.conv2d(x, 2, 3)
    assert valid.shape.as_list() == [1, 4, 4, 2] and same.shape.as_list() == [1, 6, 6, 2]
    assert reopened.shape.as_list() == [1, 4, 4, 2] and outside.shape.as_list() == [1, 6, 6, 2]
    with pytest.raises(ValueError, match="is not decorated with @add_arg_scope"), \
            arg_scope([tf.layers.dense], units=3):
        pass
    with pytest.raises(TypeError, match="list_ops_or_scope must either be a list/tuple"), \
            arg_scope(layers.conv2d, padding="VALID"):
        pass


def test_global_step_helpers_are_tf_trains():
    assert tf.contrib.framework.get_or_create_global_step is tf.train.get_or_create_global_step
    assert tf.contrib.framework.get_global_step is tf.train.get_global_step


def test_the_rest_of_contrib_says_it_is_missing():
    for name in ("slim", "learn", "seq2seq", "estimator", "keras", "tpu"):
        assert not hasattr(tf.contrib, name)
        with pytest.raises(AttributeError) as error:
            getattr(tf.contrib, name)
        assert str(error.value) == (
            f"towerflow has no tf.contrib.{name} (tf.contrib is supported only for its thin "
            "aliases of core: tf.contrib.layers, tf.contrib.rnn, tf.contrib.framework; see "
            "the TF1 compatibility page)")
    with pytest.raises(ModuleNotFoundError, match=r"towerflow has no tf.contrib.slim \(tf"):
        import towerflow.contrib.slim  # noqa: F401
    with pytest.raises(AttributeError, match=r"towerflow has no tf.contrib.layers.layer_norm "
                                             r"\(not implemented;"):
        tf.contrib.layers.layer_norm  # noqa: B018


def test_contrib_imports_as_tensorflow_contrib_did():
    from towerflow.contrib import layers, rnn
    from towerflow.contrib.layers import fully_connected
    assert layers is tf.contrib.layers and fully_connected is layers.fully_connected
    assert rnn.LSTMCell is tf.nn.rnn_cell.LSTMCell and rnn.LSTMStateTuple is not None
