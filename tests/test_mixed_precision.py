"""Mixed precision (towerflow/mixed_precision.py): float16 compute on float32
master weights, float32 batch-norm statistics, dynamic loss scaling that
skips steps with inf/NaN gradients; and the ops it is built from (is_finite,
where, gated updates)."""

import numpy as np
import pytest

import towerflow as tf


@pytest.fixture
def mixed_float16():
    tf.mixed_precision.set_global_policy("mixed_float16")
    yield
    tf.mixed_precision.set_global_policy(None)


def small_net(batch_norm=False):
    tf.set_random_seed(5)
    x = tf.placeholder(tf.float32, [None, 6, 6, 3])
    labels = tf.placeholder(tf.int64, [None])
    # Seeded initializers: the same weights under every policy (a policy adds
    # cast ops, which would shift graph-level seeds).
    hidden = tf.layers.conv2d(x, 4, 3, padding="same", activation=tf.nn.relu,
                              kernel_initializer=tf.glorot_uniform_initializer(seed=1))
    if batch_norm:
        hidden = tf.layers.batch_normalization(hidden, training=True)
    logits = tf.layers.dense(tf.layers.flatten(hidden), 5,
                             kernel_initializer=tf.glorot_uniform_initializer(seed=2))
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=tf.cast(logits, tf.float32)))
    return x, labels, hidden, logits, loss


def batch(seed=0, size=8):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((size, 6, 6, 3)).astype(np.float32), rng.integers(0, 5, size)


def test_policy_names_and_errors():
    policy = tf.mixed_precision.Policy("mixed_float16")
    assert (policy.compute_dtype, policy.variable_dtype) == ("float16", "float32")
    assert policy.loss_scale == "dynamic"
    assert tf.mixed_precision.Policy("float32").loss_scale is None
    assert tf.mixed_precision.global_policy().name == "float32"
    with pytest.raises(ValueError, match=r"unknown mixed-precision policy 'fp16'.*expected"):
        tf.mixed_precision.Policy("fp16")


def test_layers_compute_in_float16_on_float32_master_weights(mixed_float16):
    with tf.Graph().as_default():
        x, labels, hidden, logits, loss = small_net(batch_norm=True)
        assert hidden.dtype is tf.float16 and logits.dtype is tf.float16
        variables = tf.global_variables()
        assert variables and all(v.dtype is tf.float32 for v in variables)
        grads = tf.gradients(loss, tf.trainable_variables())
        assert all(g.dtype is tf.float32 for g in grads)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            images, classes = batch()
            values = sess.run([loss] + grads, {x: images, labels: classes})
        assert all(np.isfinite(value).all() for value in values)


def test_mixed_float16_training_follows_float32_training():
    losses = {}
    for policy in ("float32", "mixed_float16"):
        tf.mixed_precision.set_global_policy(policy)
        try:
            with tf.Graph().as_default():
                x, labels, _, _, loss = small_net()
                opt = tf.train.MomentumOptimizer(0.05, 0.9)
                if policy != "float32":
                    opt = tf.mixed_precision.LossScaleOptimizer(opt, initial_scale=1024)
                train_op = opt.minimize(loss)
                images, classes = batch(size=32)
                with tf.Session() as sess:
                    sess.run(tf.global_variables_initializer())
                    losses[policy] = [sess.run([loss, train_op],
                                               {x: images, labels: classes})[0]
                                      for _ in range(30)]
        finally:
            tf.mixed_precision.set_global_policy(None)
    assert losses["mixed_float16"][-1] < 0.5 * losses["mixed_float16"][0]
    np.testing.assert_allclose(losses["mixed_float16"], losses["float32"], rtol=0.05,
                               atol=0.02)


def scaled_step(optimizer, global_step=None, **kwargs):
    """A one-variable model whose gradient is ``g`` (a fed scalar), trained by
    ``LossScaleOptimizer(optimizer)``."""
    w = tf.Variable(1.0, name="w")
    g = tf.placeholder(tf.float32, [])
    opt = tf.mixed_precision.LossScaleOptimizer(optimizer, **kwargs)
    train_op = opt.minimize(w * g, global_step=global_step)
    return w, g, opt, train_op


@pytest.mark.parametrize("make_optimizer", [
    lambda: tf.train.GradientDescentOptimizer(0.1),
    lambda: tf.train.MomentumOptimizer(0.1, 0.9),
    lambda: tf.train.AdamOptimizer(0.1),
], ids=["sgd", "momentum", "adam"])
def test_a_step_with_an_infinite_or_nan_gradient_changes_nothing(make_optimizer):
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        w, g, opt, train_op = scaled_step(make_optimizer(), global_step=step)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train_op, {g: 1.0})
            state = sess.run(opt.variables() + [w, step])
            for bad in (np.inf, np.nan):
                skipped = sess.run([opt.step_skipped, train_op], {g: bad})[0]
                assert skipped
                after = sess.run(opt.variables() + [w, step])
                for name, old, new in zip([v.name for v in opt.variables()] + ["w", "step"],
                                          state, after):
                    if "loss_scale" not in name:
                        np.testing.assert_array_equal(new, old, err_msg=name)
            assert sess.run(step) == 1
            assert not sess.run([opt.step_skipped, train_op], {g: 1.0})[0]
            assert sess.run(step) == 2


def test_the_loss_scale_halves_on_a_skipped_step_and_doubles_after_growth_steps():
    with tf.Graph().as_default():
        w, g, opt, train_op = scaled_step(tf.train.GradientDescentOptimizer(0.5),
                                          initial_scale=8.0, growth_steps=3)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            scales, used = [], []
            for grad in (np.nan, 1.0, 1.0, 1.0, 1.0, np.inf, np.inf, np.inf, np.inf):
                used.append(float(sess.run([opt.scale_used, train_op], {g: grad})[0]))
                scales.append(float(sess.run(opt.loss_scale)))
            assert scales == [4.0, 4.0, 4.0, 8.0, 8.0, 4.0, 2.0, 1.0, 1.0]
            assert used == [8.0] + scales[:-1]
            # the update uses the unscaled gradient: w = 1 - 0.5 * 1.0 * 4 steps
            assert sess.run(w) == pytest.approx(-1.0)


def test_a_fixed_scale_still_skips_but_never_changes():
    with tf.Graph().as_default():
        w, g, opt, train_op = scaled_step(tf.train.GradientDescentOptimizer(1.0),
                                          dynamic=False, initial_scale=16.0)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            assert sess.run([opt.step_skipped, train_op], {g: np.inf})[0]
            assert sess.run([w, opt.loss_scale]) == [1.0, 16.0]
            sess.run(train_op, {g: 0.25})
            assert sess.run([w, opt.loss_scale]) == [0.75, 16.0]


def test_small_float16_gradients_survive_only_with_loss_scaling(mixed_float16):
    # A gradient of 1e-8 flushes to zero in float16 (its smallest step is 6e-8);
    # scaled by 2**15 it does not, and unscaled in float32 it is 1e-8 again.
    grads = {}
    for scaled in (False, True):
        with tf.Graph().as_default():
            x = tf.placeholder(tf.float32, [1, 1])
            y = tf.layers.dense(x, 1, use_bias=False,
                                kernel_initializer=tf.constant_initializer(1e-4))
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * 1e-8)
            opt = tf.train.GradientDescentOptimizer(1.0)
            if scaled:
                opt = tf.mixed_precision.LossScaleOptimizer(opt)
            (grad, _), = opt.compute_gradients(loss)
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                grads[scaled] = sess.run(grad, {x: [[1.0]]})
    assert grads[False] == 0
    assert grads[True] == pytest.approx(1e-8, rel=1e-2)


def test_loss_scale_optimizer_rejects_bad_arguments():
    with pytest.raises(TypeError, match="wraps a tf.train optimizer"):
        tf.mixed_precision.LossScaleOptimizer("sgd")
    with pytest.raises(ValueError, match="initial_scale must be a finite number > 0, got 0"):
        tf.mixed_precision.LossScaleOptimizer(tf.train.GradientDescentOptimizer(1.0),
                                              initial_scale=0)


def test_is_finite_is_nan_is_inf_and_where():
    values = np.array([1.0, np.inf, -np.inf, np.nan], np.float32)
    with tf.Graph().as_default():
        x = tf.constant(values)
        condition = tf.constant([True, False, True, False])
        a, b = tf.constant([1.0, 2.0, 3.0, 4.0]), tf.constant([10.0, 20.0, 30.0, 40.0])
        picked = tf.where(condition, a, b)
        grad_a, grad_b = tf.gradients(tf.reduce_sum(picked * picked), [a, b])
        with tf.Session() as sess:
            out = sess.run([tf.is_finite(x), tf.is_nan(x), tf.is_inf(x), picked, grad_a,
                            grad_b])
    np.testing.assert_array_equal(out[0], np.isfinite(values))
    np.testing.assert_array_equal(out[1], np.isnan(values))
    np.testing.assert_array_equal(out[2], np.isinf(values))
    np.testing.assert_array_equal(out[3], [1.0, 20.0, 3.0, 40.0])
    np.testing.assert_array_equal(out[4], [2.0, 0.0, 6.0, 0.0])
    np.testing.assert_array_equal(out[5], [0.0, 40.0, 0.0, 80.0])
    with pytest.raises(TypeError, match="DataType int32 not in list of allowed values"):
        tf.is_finite(tf.constant([1, 2]))
    with pytest.raises(TypeError, match="where's condition must be bool"):
        tf.where(tf.constant([1.0]), tf.constant([1.0]), tf.constant([2.0]))


def test_towers_scale_each_loss_skip_together_and_report_it(logical_cpus):
    # Two towers: each scales its loss and unscales its gradients before the
    # all-reduce; an inf in one tower's shard skips the step on every replica.
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, 4])
    labels = tf.placeholder(tf.int64, [None])

    def tower_fn(inputs):
        images, classes = inputs
        logits = tf.layers.dense(images, 3,
                                 kernel_initializer=tf.glorot_uniform_initializer(seed=1))
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=classes, logits=logits))

    strategy = tf.parallel.DataParallel(logical_cpus[:2], all_reduce="cpu")
    opt = tf.mixed_precision.LossScaleOptimizer(tf.train.MomentumOptimizer(0.1, 0.9),
                                                initial_scale=64.0)
    step = strategy.minimize(tower_fn, (x, labels), opt)
    fetches = [step.train_op, step.metrics["loss_scale"], step.metrics["step_skipped"]]
    rng = np.random.default_rng(0)
    images = rng.standard_normal((8, 4)).astype(np.float32)
    classes = rng.integers(0, 3, 8)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        _, scale, skipped = sess.run(fetches, {x: images, labels: classes})
        assert (scale, skipped) == (64.0, False)
        before = sess.run(step.replicas)
        poisoned = images.copy()
        poisoned[6, 0] = np.inf                      # in the second tower's shard
        _, scale, skipped = sess.run(fetches, {x: poisoned, labels: classes})
        assert (scale, skipped) == (64.0, True)      # the scale this step used
        after = sess.run(step.replicas)
        for old_replica, new_replica in zip(before, after):
            for old, new in zip(old_replica, new_replica):
                np.testing.assert_array_equal(new, old)
        assert np.array_equal(after[0][0], after[1][0])
        _, scale, skipped = sess.run(fetches, {x: images, labels: classes})
        assert (scale, skipped) == (32.0, False)
