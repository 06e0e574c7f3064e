"""tf.train: optimizers (checked step by step against NumPy), slots and their
placement, in-place updates, the global step, learning-rate schedules, SEED
P5, and real training of a small MLP with every optimizer."""

import math
import time

import numpy as np
import pytest

import towerflow as tf
import towerflow.train  # noqa: F401  (tf.train until the package is wired in)

CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"
TARGET = np.array([[1.0, -2.0, 0.5], [3.0, 0.0, -1.0]])
CURVATURE = np.array([[1.0, 2.0, 0.5], [0.25, 1.5, 3.0]])
W0 = np.array([[0.5, 0.5, -0.5], [-1.0, 2.0, 1.0]])


def quadratic(dtype=tf.float32, name="weight"):
    """w of shape [2, 3] and loss = sum(c * (w - t)^2), so grad = 2c(w - t)."""
    numpy_dtype = dtype.as_numpy_dtype
    w = tf.Variable(W0.astype(numpy_dtype), name=name)
    loss = tf.reduce_sum(tf.constant(CURVATURE.astype(numpy_dtype)) *
                         tf.square(w - TARGET.astype(numpy_dtype)))
    return w, loss


def reference_run(kind, steps, lr, weight_decay=0.0, momentum=0.9, nesterov=False,
                  beta1=0.9, beta2=0.999, epsilon=1e-8):
    """The NumPy re-implementation: the weights after each step, in float64."""
    w, accum, m, v, history = W0.copy(), 0.0, 0.0, 0.0, []
    for t in range(1, steps + 1):
        grad = 2 * CURVATURE * (w - TARGET)
        w = w * (1 - lr * weight_decay)
        if kind == "gd":
            w = w - lr * grad
        elif kind == "momentum":
            accum = momentum * accum + grad
            w = w - lr * (grad + momentum * accum if nesterov else accum)
        else:
            m = beta1 * m + (1 - beta1) * grad
            v = beta2 * v + (1 - beta2) * grad * grad
            lr_t = lr * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
            w = w - lr_t * m / (np.sqrt(v) + epsilon)
        history.append(w)
    return history


OPTIMIZER_CASES = {
    "gd": (lambda: tf.train.GradientDescentOptimizer(0.1), "gd", {"lr": 0.1}),
    "gd_decay": (lambda: tf.train.GradientDescentOptimizer(0.1, weight_decay=0.2), "gd",
                 {"lr": 0.1, "weight_decay": 0.2}),
    "momentum": (lambda: tf.train.MomentumOptimizer(0.05, 0.9), "momentum", {"lr": 0.05}),
    "nesterov": (lambda: tf.train.MomentumOptimizer(0.05, 0.8, use_nesterov=True),
                 "momentum", {"lr": 0.05, "momentum": 0.8, "nesterov": True}),
    "momentum_decay": (lambda: tf.train.MomentumOptimizer(0.05, 0.9, weight_decay=0.5),
                       "momentum", {"lr": 0.05, "weight_decay": 0.5}),
    "adam": (lambda: tf.train.AdamOptimizer(0.1), "adam", {"lr": 0.1}),
    "adam_betas": (lambda: tf.train.AdamOptimizer(0.2, beta1=0.5, beta2=0.9, epsilon=1e-3),
                   "adam", {"lr": 0.2, "beta1": 0.5, "beta2": 0.9, "epsilon": 1e-3}),
    "adamw": (lambda: tf.train.AdamWOptimizer(0.3, learning_rate=0.1), "adam",
              {"lr": 0.1, "weight_decay": 0.3}),
}


@pytest.mark.parametrize("case", sorted(OPTIMIZER_CASES))
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_each_step_matches_numpy(case, dtype):
    make, kind, hyper = OPTIMIZER_CASES[case]
    w, loss = quadratic(dtype)
    train_op = make().minimize(loss)
    expected = reference_run(kind, 5, **hyper)
    tolerance = 1e-5 if dtype is tf.float32 else 1e-12
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for step in range(5):
            sess.run(train_op)
            value = sess.run(w)
            assert value.dtype == dtype.as_numpy_dtype
            np.testing.assert_allclose(value, expected[step], rtol=tolerance, atol=tolerance)


def placements(capsys):
    lines = [line.split(": ") for line in capsys.readouterr().err.splitlines()]
    return {parts[0]: parts[1] for parts in lines if len(parts) == 2}


@pytest.mark.parametrize("make, slot_names, suffixes", [
    (lambda: tf.train.MomentumOptimizer(0.1, 0.9), ["momentum"], ["Momentum"]),
    (lambda: tf.train.AdamOptimizer(0.1), ["m", "v"], ["Adam", "Adam_1"]),
])
def test_slots_are_zero_variables_on_the_variables_device(logical_cpus, capsys, make,
                                                          slot_names, suffixes):
    with tf.device("/cpu:1"):
        w, loss = quadratic()
        optimizer = make()
        train_op = optimizer.minimize(loss)
    op_name = optimizer.get_name()
    assert optimizer.get_slot_names() == slot_names
    slots = [optimizer.get_slot(w, name) for name in slot_names]
    assert [slot.op.name for slot in slots] == [f"weight/{suffix}" for suffix in suffixes]
    for slot in slots:
        assert slot.shape == w.shape and slot.dtype == w.dtype and not slot.trainable
        assert slot.device == "/device:CPU:1"
        assert slot in tf.global_variables() and slot not in tf.trainable_variables()
        assert slot in optimizer.variables()
    assert optimizer.get_slot(w, "nonexistent") is None
    sess = tf.Session(config=tf.ConfigProto(log_device_placement=True))
    sess.run(tf.global_variables_initializer())
    for slot in slots:
        np.testing.assert_array_equal(sess.run(slot), np.zeros([2, 3]))
    sess.run(train_op)
    logged = placements(capsys)
    apply_op = f"{op_name}/update_weight/Apply{op_name}"
    for name in [apply_op, "weight"] + [slot.op.name for slot in slots]:
        assert logged[name] == CPU.format(1), name


def test_adam_beta_powers_are_updated_after_each_step():
    w, loss = quadratic()
    optimizer = tf.train.AdamOptimizer(0.1, beta1=0.8, beta2=0.95)
    train_op = optimizer.minimize(loss)
    names = [var.op.name for var in optimizer.variables()]
    assert names == ["beta1_power", "beta2_power", "weight/Adam", "weight/Adam_1"]
    beta1_power, beta2_power = optimizer.variables()[:2]
    assert not beta1_power.trainable and beta1_power in tf.global_variables()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for step in range(1, 4):
            assert sess.run([beta1_power, beta2_power]) == pytest.approx(
                [0.8 ** step, 0.95 ** step], rel=1e-6)
            sess.run(train_op)


@pytest.mark.parametrize("make", [
    lambda: tf.train.GradientDescentOptimizer(0.1, weight_decay=0.1),
    lambda: tf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
    lambda: tf.train.AdamWOptimizer(0.1, learning_rate=0.1),
])
def test_update_writes_into_the_sessions_variable_buffer(make):
    w, loss = quadratic()
    optimizer = make()
    train_op = optimizer.minimize(loss)
    state = [w] + [optimizer.get_slot(w, name) for name in optimizer.get_slot_names()]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        buffers = [sess._state[("variable", var.op)].value for var in state]
        before = [buffer.copy() for buffer in buffers]
        for _ in range(3):
            sess.run(train_op)
        after = [sess._state[("variable", var.op)].value for var in state]
        assert all(new is old for new, old in zip(after, buffers))
        assert all(not np.array_equal(new, old) for new, old in zip(after, before))
        fetched = sess.run(w)
        assert fetched is not buffers[0]  # a fetch is a copy, not the live buffer
        np.testing.assert_array_equal(fetched, buffers[0])


def test_global_step_counts_applies():
    assert tf.train.get_global_step() is None
    step = tf.train.get_or_create_global_step()
    assert step.op.name == "global_step" and step.dtype == tf.int64 and not step.trainable
    assert tf.get_collection("global_step") == [step]
    assert tf.train.get_or_create_global_step() is step
    assert tf.train.get_global_step() is step
    with pytest.raises(ValueError, match="already exists"):
        tf.train.create_global_step()
    w, loss = quadratic()
    minimize_op = tf.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step)
    optimizer = tf.train.MomentumOptimizer(0.01, 0.9)
    apply_op = optimizer.apply_gradients(optimizer.compute_gradients(loss), step)
    no_step_op = tf.train.AdamOptimizer().minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert tf.train.global_step(sess, step) == 0
        for count in range(1, 4):
            sess.run(minimize_op)
            assert tf.train.global_step(sess, step) == count
        sess.run(apply_op)
        sess.run(no_step_op)
        assert sess.run(step) == 4


def test_global_step_found_by_name_as_in_tf1_scripts():
    step = tf.Variable(0, name="global_step", trainable=False, dtype=tf.int64)
    assert tf.train.get_global_step() is step
    tf.reset_default_graph()
    tf.Variable(0.0, name="global_step")
    with pytest.raises(TypeError, match="integer scalar"):
        tf.train.get_global_step()


def test_variables_without_gradients():
    w, loss = quadratic()
    unused = tf.Variable(1.0, name="unused")
    grads_and_vars = tf.train.GradientDescentOptimizer(0.1).compute_gradients(loss)
    assert [var for _, var in grads_and_vars] == [w, unused]
    assert grads_and_vars[1][0] is None
    optimizer = tf.train.GradientDescentOptimizer(0.1)
    with pytest.raises(ValueError, match=r"No gradients provided.*'weight', 'unused'"):
        optimizer.apply_gradients([(None, w), (None, unused)])
    with pytest.raises(ValueError, match=r"No gradients provided.*\['weight'\] and loss"):
        optimizer.minimize(unused.value() * 0.0 + tf.constant(1.0), var_list=[w])
    with pytest.raises(ValueError, match="No variables to optimize"):
        optimizer.minimize(loss, var_list=[])
    train_op = optimizer.apply_gradients(grads_and_vars)  # skips the None gradient
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train_op)
        assert sess.run(unused) == 1.0


def test_bad_gradients_and_uninitialised_variables_are_reported():
    w, loss = quadratic()
    optimizer = tf.train.MomentumOptimizer(0.1, 0.9)
    with pytest.raises(TypeError, match="float64.*must be float32"):
        optimizer.apply_gradients([(tf.zeros([2, 3], tf.float64), w)])
    with pytest.raises(ValueError, match=r"shape \(3,\).*weight"):
        optimizer.apply_gradients([(tf.zeros([3]), w)])
    fed_grad = tf.placeholder(tf.float32, [None, 3])
    train_op = optimizer.apply_gradients([(fed_grad, w)])
    with tf.Session() as sess:
        with pytest.raises(tf.errors.FailedPreconditionError, match="uninitialized value"):
            sess.run(train_op, {fed_grad: np.zeros([2, 3])})
        sess.run(tf.global_variables_initializer())
        with pytest.raises(tf.errors.InvalidArgumentError, match="same shape"):
            sess.run(train_op, {fed_grad: np.zeros([1, 3])})


def test_seed_program_p5_linear_regression_on_the_cpu():
    tf.reset_default_graph()
    with tf.device("/device:cpu:0"):
        w = tf.Variable(0.0, name='weight')
        b = tf.Variable(0.0, name='bias')
        x = tf.placeholder(dtype=tf.float32, shape=[None])
        out = tf.placeholder(dtype=tf.float32, shape=[None])
        y = w * x + b
    loss = tf.reduce_mean(tf.square(y - out))
    train_op = tf.train.GradientDescentOptimizer(learning_rate=0.01).minimize(loss)
    config = tf.ConfigProto()
    config.log_device_placement = True
    start = time.perf_counter()
    with tf.Session(config=config) as sess:
        tf.global_variables_initializer().run(session=sess)
        for i in range(100000):
            _, loss_val, w_val, b_val = sess.run([train_op, loss, w, b],
                feed_dict={x: [1, 23, 4, 5, 7, 5, 7], out: [3, 5, 7, 9, 11, 13, 15]})
    elapsed = time.perf_counter() - start
    print(f"\nP5: 100000 steps in {elapsed:.2f} s ({elapsed * 10:.1f} us/step)")
    assert w_val == pytest.approx(-0.09749, abs=2e-5)
    assert b_val == pytest.approx(9.72423, abs=2e-4)
    assert loss_val == pytest.approx(15.58217, rel=1e-5)


# -- learning-rate schedules --------------------------------------------------------

ONE_CYCLE_FINAL = 1.0 / 25 / 1e4
SCHEDULES = {
    "piecewise": (lambda s: tf.train.piecewise_constant(s, [10, 20], [1.0, 0.5, 0.1]),
                  {0: 1.0, 10: 1.0, 11: 0.5, 20: 0.5, 21: 0.1, 500: 0.1}),
    "exponential": (lambda s: tf.train.exponential_decay(0.1, s, 10, 0.5),
                    {0: 0.1, 5: 0.1 * 0.5 ** 0.5, 15: 0.1 * 0.5 ** 1.5, 40: 0.1 / 16}),
    "staircase": (lambda s: tf.train.exponential_decay(0.1, s, 10, 0.5, staircase=True),
                  {0: 0.1, 9: 0.1, 10: 0.05, 15: 0.05, 40: 0.1 / 16}),
    "cosine": (lambda s: tf.train.cosine_decay(0.1, s, 100, alpha=0.1),
               {0: 0.1, 50: 0.1 * 0.55, 100: 0.01, 300: 0.01,
                25: 0.1 * (0.9 * 0.5 * (1 + math.cos(math.pi / 4)) + 0.1)}),
    "warmup": (lambda s: tf.train.linear_warmup(0.1, s, 10),
               {0: 0.01, 4: 0.05, 9: 0.1, 50: 0.1}),
    "warmup_cosine": (lambda s: tf.train.linear_warmup(tf.train.cosine_decay(0.1, s, 100),
                                                       s, 10),
                      {0: 0.01 * 0.5 * (1 + math.cos(0)), 4: 0.05 * 0.5 * (
                          1 + math.cos(math.pi * 0.04)), 50: 0.05, 100: 0.0}),
    "one_cycle": (lambda s: tf.train.one_cycle(1.0, s, total_steps=100),
                  {0: 0.04, 29: 1.0, 99: ONE_CYCLE_FINAL, 150: ONE_CYCLE_FINAL,
                   64: ONE_CYCLE_FINAL + (1 - ONE_CYCLE_FINAL) * 0.5,
                   10: 1.0 + (0.04 - 1.0) * 0.5 * (1 + math.cos(math.pi * 10 / 29))}),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedule_values_follow_the_formula(name):
    build, expected = SCHEDULES[name]
    step = tf.placeholder(tf.int64, [])
    learning_rate = build(step)
    assert learning_rate.dtype == tf.float32 and learning_rate.shape.ndims == 0
    assert "LearningRateSchedule" not in ancestor_types(learning_rate)   # graph ops only
    with tf.Session() as sess:
        for at_step, value in expected.items():
            assert sess.run(learning_rate, {step: at_step}) == pytest.approx(
                value, rel=1e-6, abs=1e-9), at_step


def ancestor_types(tensor):
    """The op types ``tensor`` is computed from (itself included)."""
    seen, pending = set(), [tensor.op]
    while pending:
        op = pending.pop()
        if op not in seen:
            seen.add(op)
            pending.extend(input_tensor.op for input_tensor in op.inputs)
    return {op.type for op in seen}


def test_schedules_reject_bad_arguments():
    step = tf.train.get_or_create_global_step()
    with pytest.raises(ValueError, match="one more value"):
        tf.train.piecewise_constant(step, [10, 20], [1.0, 0.5])
    with pytest.raises(ValueError, match="decay_steps must be > 0"):
        tf.train.cosine_decay(0.1, step, 0)
    with pytest.raises(TypeError, match="scalar integer or float step"):
        tf.train.linear_warmup(0.1, tf.constant([1, 2]), 10)


def test_warmup_of_a_tensor_learning_rate_multiplies_it():
    base = tf.placeholder(tf.float32, [])
    step = tf.placeholder(tf.int64, [])
    learning_rate = tf.train.linear_warmup(base, step, 4)
    with tf.Session() as sess:
        assert sess.run(learning_rate, {base: 2.0, step: 1}) == pytest.approx(1.0)


@pytest.mark.parametrize("make", [
    lambda lr: tf.train.GradientDescentOptimizer(lr),
    lambda lr: tf.train.MomentumOptimizer(lr, 0.0),
])
def test_a_schedule_sets_each_steps_size(make):
    """loss = sum(w): every gradient is 1, so each step moves w by -lr(step)."""
    step = tf.train.get_or_create_global_step()
    learning_rate = tf.train.piecewise_constant(step, [1, 3], [0.5, 0.25, 0.125])
    w = tf.Variable([0.0, 0.0])
    train_op = make(learning_rate).minimize(tf.reduce_sum(w), global_step=step)
    moves = []
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(6):
            before = sess.run(w)
            sess.run(train_op)
            moves.append(float((before - sess.run(w))[0]))
    assert moves == [0.5, 0.5, 0.25, 0.25, 0.125, 0.125]


def test_weight_decay_follows_the_scheduled_learning_rate():
    step = tf.train.get_or_create_global_step()
    learning_rate = tf.train.exponential_decay(0.5, step, 1, 0.5)  # 0.5, 0.25, ...
    w = tf.Variable([2.0])
    zero_grad = tf.zeros([1])
    optimizer = tf.train.GradientDescentOptimizer(learning_rate, weight_decay=0.1)
    train_op = optimizer.apply_gradients([(zero_grad, w)], global_step=step)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train_op)
        sess.run(train_op)
        np.testing.assert_allclose(sess.run(w), [2.0 * (1 - 0.05) * (1 - 0.025)], rtol=1e-6)


# -- real training ---------------------------------------------------------------------


def xor_quadrants(rng, count=200):
    """Points in the four quadrants, labelled +1 where x1 * x2 > 0: not linearly
    separable, separable by a 2-layer MLP (with a margin around the axes)."""
    x = rng.uniform(-1, 1, size=(count, 2)).astype(np.float32)
    x += 0.15 * np.sign(x)
    return x, np.where(x[:, :1] * x[:, 1:] > 0, 1.0, -1.0).astype(np.float32)


@pytest.mark.parametrize("make", [
    lambda: tf.train.GradientDescentOptimizer(0.5),
    lambda: tf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
    lambda: tf.train.AdamOptimizer(0.05),
    lambda: tf.train.AdamWOptimizer(1e-3, learning_rate=0.05),
], ids=["gd", "nesterov", "adam", "adamw"])
def test_mlp_learns_xor_quadrants(make):
    rng = np.random.default_rng(0)
    features, labels = xor_quadrants(rng)
    x, y = tf.placeholder(tf.float32, [None, 2]), tf.placeholder(tf.float32, [None, 1])
    w1 = tf.Variable(rng.normal(0, 1, (2, 16)).astype(np.float32))
    w2 = tf.Variable(rng.normal(0, 0.5, (16, 1)).astype(np.float32))
    b1, b2 = tf.Variable(tf.zeros([16])), tf.Variable(tf.zeros([1]))
    logits = tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2) + b2
    loss = tf.reduce_mean(tf.log1p(tf.exp(-y * logits)))  # logistic loss, labels +-1
    accuracy = tf.reduce_mean(tf.cast(tf.greater(y * logits, 0.0), tf.float32))
    train_op = make().minimize(loss)
    feed = {x: features, y: labels}
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        initial_loss = sess.run(loss, feed)
        for _ in range(300):
            sess.run(train_op, feed)
        final_loss, final_accuracy = sess.run([loss, accuracy], feed)
    assert initial_loss > 0.5
    assert final_loss < 0.05
    assert final_accuracy == 1.0


def test_a_python_schedule_is_called_on_each_steps_value():
    step = tf.placeholder(tf.int64, [])
    learning_rate = tf.train.learning_rate_schedule(lambda s: 0.1 / (1 + s), step)
    assert learning_rate.op.type == "LearningRateSchedule" and learning_rate.dtype == tf.float32
    blowing_up = tf.train.learning_rate_schedule(lambda s: math.inf, step, name="bad")
    with tf.Session() as sess:
        assert sess.run(learning_rate, {step: 4}) == pytest.approx(0.02)
        with pytest.raises(tf.errors.InvalidArgumentError, match="schedule 'bad' gave inf"):
            sess.run(blowing_up, {step: 3})
