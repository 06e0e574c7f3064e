"""Kernel fusion (towerflow/fusion.py): a plan runs Conv2D → BiasAdd → Relu and
MaxPoolGrad → ReluGrad as single kernels, with results bit-identical to the
separate kernels, and leaves a chain alone wherever fusing could be seen."""

import numpy as np
import pytest

import towerflow as tf
from towerflow import fusion


def fused_units(sess):
    """The fused units of every plan ``sess`` compiled."""
    return [unit for plan, _ in sess._plans.values() for unit in plan.units
            if isinstance(unit, fusion.FusedOp)]


def fused_kernels(sess):
    """The kernel names of the fused units in every plan ``sess`` compiled."""
    return sorted(unit.type for unit in fused_units(sess))


def conv_chain_lengths(sess):
    return sorted(len(unit.members) for unit in fused_units(sess)
                  if unit.type == "_FusedConv2D")


def conv_net(dtype, strides, padding, kernel_size, batch=None):
    """A conv → relu → max pool → dense net; (x, labels, loss, gradients, relu out)."""
    tf.set_random_seed(3)
    x = tf.placeholder(dtype, [batch, 9, 9, 3])
    labels = tf.placeholder(tf.int64, [batch])
    hidden = tf.layers.conv2d(x, 8, kernel_size, strides=strides, padding=padding,
                              activation=tf.nn.relu)
    pooled = tf.layers.max_pooling2d(hidden, 2, 2, padding="same")
    logits = tf.layers.dense(tf.layers.flatten(pooled), 5)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))
    grads = tf.gradients(loss, tf.trainable_variables() + [x])
    return x, labels, loss, grads, hidden


def feed(x, labels, dtype, seed=0):
    rng = np.random.default_rng(seed)
    values = {x: rng.standard_normal((6, 9, 9, 3)).astype(dtype)}
    if labels is not None:
        values[labels] = rng.integers(0, 5, 6)
    return values


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("strides, padding, kernel_size",
                         [(1, "same", 3), (2, "valid", 3), (1, "same", 1), (2, "same", 2)])
@pytest.mark.parametrize("batch", [None, 6], ids=["batch-unknown", "batch-known"])
def test_fused_training_step_is_bit_identical(monkeypatch, dtype, strides, padding,
                                              kernel_size, batch):
    values, kernels = {}, {}
    for flag in ("1", "0"):
        monkeypatch.setenv("TOWERFLOW_FUSION", flag)
        with tf.Graph().as_default():
            x, labels, loss, grads, _ = conv_net(dtype, strides, padding, kernel_size, batch)
            sess = tf.Session()
            sess.run(tf.global_variables_initializer())
            values[flag] = sess.run([loss] + grads, feed(x, labels, dtype))
            kernels[flag] = fused_kernels(sess)
            if flag == "1":     # conv, bias, relu and the max pool: one kernel
                assert conv_chain_lengths(sess) == [4]
    assert kernels["1"] == ["_FusedConv2D", "_MaxPoolGradRelu"]
    assert kernels["0"] == []
    for fused, separate in zip(values["1"], values["0"]):
        assert fused.dtype == separate.dtype == dtype
        np.testing.assert_array_equal(fused, separate)


def tutorial_conv_net(dtype, bias_first, bias_shape):
    """TF1 tutorials' layer, conv2d(x, w) + b (or b + conv2d(x, w)) → relu → max
    pool → dense; (x, labels, loss, gradients)."""
    tf.set_random_seed(3)
    rng = np.random.default_rng(4)
    x = tf.placeholder(dtype, [None, 9, 9, 3])
    labels = tf.placeholder(tf.int64, [None])
    w = tf.Variable(rng.standard_normal((3, 3, 3, 8)) * 0.3, dtype=dtype)
    b = tf.Variable(rng.standard_normal(bias_shape) * 0.3, dtype=dtype)
    conv = tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME")
    hidden = tf.nn.relu(b + conv if bias_first else conv + b)
    pooled = tf.nn.max_pool(hidden, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
    logits = tf.layers.dense(tf.reshape(pooled, [-1, 5 * 5 * 8]), 5)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))
    return x, labels, loss, tf.gradients(loss, tf.trainable_variables() + [x])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias_first", [False, True], ids=["conv+b", "b+conv"])
def test_a_bias_added_with_plus_fuses_as_bias_add_does(monkeypatch, dtype, bias_first):
    values = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("TOWERFLOW_FUSION", flag)
        with tf.Graph().as_default():
            x, labels, loss, grads = tutorial_conv_net(dtype, bias_first, [8])
            sess = tf.Session()
            sess.run(tf.global_variables_initializer())
            values[flag] = sess.run([loss] + grads, feed(x, labels, dtype))
            assert conv_chain_lengths(sess) == ([4] if flag == "1" else [])
    for fused, separate in zip(values["1"], values["0"]):
        np.testing.assert_array_equal(fused, separate)


@pytest.mark.parametrize("bias_shape", [[1, 1, 1, 8], [], [1]])
def test_other_broadcast_adds_stay_apart(bias_shape):
    # only a [channels] vector is a bias: a 4-D, scalar or 1-wide one is left to Add
    x, labels, loss, grads = tutorial_conv_net(np.float32, False, bias_shape)
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    sess.run([loss] + grads, feed(x, labels, np.float32))
    assert conv_chain_lengths(sess) == []


def test_inference_fuses_the_conv_chain_only():
    x, labels, _, _, hidden = conv_net(np.float32, 1, "same", 3)
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    out = sess.run(hidden, feed(x, labels, np.float32))
    assert fused_kernels(sess) == ["_FusedConv2D"]
    assert out.shape == (6, 9, 9, 8) and out.min() == 0.0


def test_fetching_an_inner_tensor_keeps_the_chain_apart():
    x, labels, _loss, _grads, hidden = conv_net(np.float32, 1, "same", 3)
    conv_out = hidden.op.inputs[0].op.inputs[0]        # the Conv2D output, before bias
    assert conv_out.op.type == "Conv2D"
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    values = feed(x, labels, np.float32)
    before_bias, after_relu = sess.run([conv_out, hidden], values)
    assert "_FusedConv2D" not in fused_kernels(sess)
    bias = sess.run(tf.trainable_variables()[1])
    np.testing.assert_array_equal(after_relu, np.maximum(before_bias + bias, 0))


def test_a_fed_inner_tensor_is_used_as_fed():
    x, labels, _, _, hidden = conv_net(np.float32, 1, "same", 3)
    biased = hidden.op.inputs[0]                       # BiasAdd output, fed below
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    fed = np.full((6, 9, 9, 8), -1.0, np.float32)
    fed[0, 0, 0, 0] = 2.5
    out = sess.run(hidden, {**feed(x, labels, np.float32), biased: fed})
    assert out.sum() == 2.5 and out[0, 0, 0, 0] == 2.5
    assert fused_kernels(sess) == []


def test_a_control_edge_on_an_inner_op_keeps_the_chain_apart():
    x, labels, _, _, hidden = conv_net(np.float32, 1, "same", 3)
    conv_op = hidden.op.inputs[0].op.inputs[0].op
    with tf.control_dependencies([conv_op]):
        after = tf.identity(hidden)
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    sess.run(after, feed(x, labels, np.float32))
    assert fused_kernels(sess) == []


def test_readers_of_an_inner_tensors_shape_get_a_stand_in():
    x, labels, _, _, hidden = conv_net(np.float32, 1, "same", 3)
    conv_out = hidden.op.inputs[0].op.inputs[0]
    zeros = tf.zeros_like(conv_out)                    # reads conv_out's shape only
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    zero_values, _ = sess.run([zeros, hidden], feed(x, labels, np.float32))
    assert fused_kernels(sess) == ["_FusedConv2D"]
    assert zero_values.shape == (6, 9, 9, 8) and not zero_values.any()


def test_a_state_change_between_the_chain_ops_keeps_them_apart():
    tf.set_random_seed(1)
    x = tf.placeholder(tf.float32, [2, 4, 4, 1])
    w = tf.Variable(tf.ones([1, 1, 1, 2]))
    b = tf.Variable(tf.zeros([2]))
    conv = tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME")
    bump = tf.assign_add(w, tf.ones([1, 1, 1, 2]))     # created between Conv2D and BiasAdd
    out = tf.nn.relu(tf.nn.bias_add(conv, b))
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    values = sess.run([out, bump], {x: np.ones((2, 4, 4, 1), np.float32)})
    assert fused_kernels(sess) == []
    np.testing.assert_array_equal(values[0], np.ones((2, 4, 4, 2), np.float32))


def test_fusion_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("TOWERFLOW_FUSION", "0")
    assert not fusion.enabled()
    monkeypatch.setenv("TOWERFLOW_FUSION", "1")
    assert fusion.enabled()


def test_each_tower_fuses_its_own_chains(logical_cpus):
    tf.set_random_seed(2)
    strategy = tf.parallel.DataParallel(logical_cpus[:2], all_reduce="cpu")

    def tower(inputs):
        images, classes = inputs
        hidden = tf.layers.conv2d(images, 4, 3, padding="same", activation=tf.nn.relu)
        pooled = tf.layers.max_pooling2d(hidden, 2, 2)
        logits = tf.layers.dense(tf.layers.flatten(pooled), 3)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=classes, logits=logits))
    x = tf.placeholder(tf.float32, [None, 8, 8, 2])
    labels = tf.placeholder(tf.int64, [None])
    step = strategy.minimize(tower, (x, labels), tf.train.GradientDescentOptimizer(0.1))
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    rng = np.random.default_rng(0)
    sess.run(step.train_op, {x: rng.standard_normal((4, 8, 8, 2)).astype(np.float32),
                             labels: rng.integers(0, 3, 4)})
    assert fused_kernels(sess) == ["_FusedConv2D"] * 2 + ["_MaxPoolGradRelu"] * 2
    devices = {unit.device.name for plan, _ in sess._plans.values() for unit in plan.units
               if isinstance(unit, fusion.FusedOp)}
    assert len(devices) == 2


def test_inference_keeps_no_patches_or_winners_and_matches_training(monkeypatch):
    # With no gradient in the plan, convolutions keep no im2col patches (they
    # run a few images at a time) and max pooling records no winners.
    from towerflow.backends import nn_kernels, pool_kernels
    monkeypatch.setattr(nn_kernels, "_PATCH_BLOCK_BYTES", 1)      # one image per block
    calls = {"whole patches": 0, "winners": 0}
    for module, name, what in [(nn_kernels, "_im2col_matmul", "whole patches"),
                               (pool_kernels, "_max_pool_with_winner", "winners")]:
        def counted(*args, _original=getattr(module, name), _what=what):
            calls[_what] += 1
            return _original(*args)
        monkeypatch.setattr(module, name, counted)
    x, labels, loss, grads, hidden = conv_net(np.float32, 1, "same", 3)
    pooled = next(op for op in tf.get_default_graph().get_operations()
                  if op.type == "MaxPool").outputs[0]
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    values = feed(x, labels, np.float32)
    inference = sess.run([hidden, pooled, loss], values)
    assert calls == {"whole patches": 0, "winners": 0}
    training = sess.run([hidden, pooled, loss] + grads, values)[:3]
    assert calls == {"whole patches": 1, "winners": 1}
    # GEMMs over other row blocks may round the last bit differently.
    for alone, with_gradients in zip(inference, training):
        np.testing.assert_allclose(alone, with_gradients, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fetch", ["winners", "pool gradient"])
def test_the_pool_stays_out_where_its_winners_are_seen_unmasked(fetch):
    x, labels, loss, grads, _hidden = conv_net(np.float32, 1, "same", 3)
    pool = next(op for op in tf.get_default_graph().get_operations() if op.type == "MaxPool")
    pool_grad = next(op for op in tf.get_default_graph().get_operations()
                     if op.type == "MaxPoolGrad")
    extra = pool.outputs[1] if fetch == "winners" else pool_grad.outputs[0]
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    values = sess.run([loss, extra] + grads, feed(x, labels, np.float32))
    assert conv_chain_lengths(sess) == [3]
    with tf.Graph().as_default():       # the same graph, fused
        x2, labels2, loss2, grads2, _ = conv_net(np.float32, 1, "same", 3)
        sess2 = tf.Session()
        sess2.run(tf.global_variables_initializer())
        fused = sess2.run([loss2] + grads2, feed(x2, labels2, np.float32))
        assert conv_chain_lengths(sess2) == [4]
    for separate, together in zip([values[0]] + values[2:], fused):
        np.testing.assert_array_equal(separate, together)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_infinite_gradients_through_the_fused_pool_and_relu_match_the_separate_kernels(
        monkeypatch):
    # ReluGrad multiplies by (x > 0), as TensorFlow's does: an infinite gradient
    # where the ReLU was off gives NaN; the fused kernel must give the same.
    results = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("TOWERFLOW_FUSION", flag)
        with tf.Graph().as_default():
            x, _, _, _, _ = conv_net(np.float32, 1, "same", 3)
            hidden = tf.get_default_graph().get_tensor_by_name("conv2d/Relu:0")
            pooled = tf.nn.max_pool(hidden, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
            scale = tf.placeholder(tf.float32, [None, 5, 5, 8])
            weights = [v for v in tf.trainable_variables() if "conv2d" in v.name]
            grads = tf.gradients(tf.reduce_sum(pooled * scale), weights)
            sess = tf.Session()
            sess.run(tf.global_variables_initializer())
            images = feed(x, None, np.float32)[x]
            pooled_values = sess.run(pooled, {x: images})
            assert (pooled_values == 0).any()
            scales = np.where(pooled_values > 0, 1.0, np.inf).astype(np.float32)
            results[flag] = sess.run(grads, {x: images, scale: scales})
            if flag == "1":
                assert "_MaxPoolGradRelu" in fused_kernels(sess)
    for fused, separate in zip(results["1"], results["0"]):
        assert np.isnan(separate).any()
        np.testing.assert_array_equal(fused, separate)
