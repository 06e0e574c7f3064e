"""Variables (names, initialisation, assignment in place, per-Session state,
placement) and random ops (seeding, distributions, dtypes)."""

import numpy as np
import pytest

import towerflow as tf

CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"


def assert_equal(actual, expected):
    np.testing.assert_array_equal(actual, np.asarray(expected, np.float32))


def variable_buffer(sess, variable):
    """The array a Session keeps a variable's value in (to check in-place updates)."""
    return sess._state[("variable", variable.op)].value


# --- the Variable API ----------------------------------------------------------

def test_variable_names_and_ops():
    weight = tf.Variable([1.0, 2.0], name="weight")
    assert weight.name == "weight:0"
    assert weight.op.name == "weight"
    assert weight.op.type == "VariableV2"
    assert weight.value().op.name == "weight/read"
    assert weight.initializer.name == "weight/Assign"
    assert weight.initial_value.op.name == "weight/initial_value"
    names = {op.name for op in tf.get_default_graph().get_operations()}
    assert names == {"weight", "weight/read", "weight/Assign", "weight/initial_value"}
    assert weight.shape.as_list() == [2]
    assert weight.dtype is tf.float32


def test_second_variable_of_one_name_is_renamed():
    tf.Variable(0.0, name="weight")
    second = tf.Variable(0.0, name="weight")
    assert second.name == "weight_1:0"
    assert second.value().op.name == "weight_1/read"


def test_reading_an_uninitialized_variable_fails():
    weight = tf.Variable(1.0, name="weight")
    with tf.Session() as sess:
        with pytest.raises(tf.errors.FailedPreconditionError) as info:
            sess.run(weight)
    assert "uninitialized value weight" in str(info.value)
    assert info.value.op is weight.op
    with tf.Session() as sess:
        with pytest.raises(tf.errors.FailedPreconditionError, match="value weight"):
            sess.run(weight.assign_add(1.0))


def test_global_variables_initializer_initializes_all():
    weight = tf.Variable([1.0, 2.0], name="weight")
    bias = tf.Variable(0.5, name="bias")
    init = tf.global_variables_initializer()
    assert init.type == "NoOp"
    with tf.Session() as sess:
        assert sess.run(init) is None
        assert_equal(sess.run(weight), [1, 2])
        assert sess.run(bias) == 0.5


def test_variables_initializer_initializes_only_its_list():
    weight = tf.Variable(1.0, name="weight")
    bias = tf.Variable(2.0, name="bias")
    with tf.Session() as sess:
        sess.run(tf.variables_initializer([weight]))
        assert sess.run(weight) == 1.0
        with pytest.raises(tf.errors.FailedPreconditionError, match="bias"):
            sess.run(bias)
        sess.run(bias.initializer)
        assert sess.run(bias) == 2.0


def test_initial_value_may_be_a_tensor_or_callable():
    from_tensor = tf.Variable(tf.zeros([2, 3]), name="from_tensor")
    from_callable = tf.Variable(lambda: tf.ones([3]), name="from_callable")
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert_equal(sess.run(from_tensor), np.zeros([2, 3]))
        assert_equal(sess.run(from_callable), [1, 1, 1])


def test_assign_updates_the_buffer_in_place():
    weight = tf.Variable([1.0, 2.0], name="weight")
    assign = weight.assign([5.0, 6.0])
    add = weight.assign_add([1.0, 1.0])
    sub = tf.assign_sub(weight, [0.5, 0.5])
    with tf.Session() as sess:
        sess.run(weight.initializer)
        buffer = variable_buffer(sess, weight)
        assert_equal(sess.run(assign), [5, 6])
        assert_equal(sess.run(add), [6, 7])
        assert_equal(sess.run(add), [7, 8])
        assert_equal(sess.run(sub), [6.5, 7.5])
        assert_equal(sess.run(weight), [6.5, 7.5])
        assert variable_buffer(sess, weight) is buffer
        assert_equal(buffer, [6.5, 7.5])


def test_module_level_assign_functions():
    counter = tf.Variable(0, name="counter")
    with tf.Session() as sess:
        sess.run(counter.initializer)
        sess.run(tf.assign(counter, 10))
        sess.run(tf.assign_add(counter, 5))
        sess.run(tf.assign_sub(counter, 3))
        value = sess.run(counter)
    assert value == 12 and value.dtype == np.int32


def test_load_sets_the_value_without_new_ops():
    weight = tf.Variable([1.0, 2.0], name="weight")
    ops_before = len(tf.get_default_graph().get_operations())
    with tf.Session() as sess:
        weight.load([7.0, 8.0], sess)
        assert_equal(sess.run(weight), [7, 8])
        assert_equal(weight.eval(session=sess), [7, 8])
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"shape \(3,\)"):
            weight.load([1.0, 2.0, 3.0], sess)
        assert_equal(sess.run(weight), [7, 8])
    assert len(tf.get_default_graph().get_operations()) == ops_before


def test_eval_uses_the_given_or_default_session():
    weight = tf.Variable(3.0, name="weight")
    sess = tf.Session()
    sess.run(weight.initializer)
    assert weight.eval(session=sess) == 3.0
    with sess.as_default():
        assert weight.eval() == 3.0
    sess.close()


def test_operators_on_variables():
    weight = tf.Variable(2.0, name="weight")
    bias = tf.Variable(1.0, name="bias")
    x = tf.placeholder(tf.float32, [None])
    y = weight * x + bias
    assert y.shape.as_list() == [None]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert_equal(sess.run(y, feed_dict={x: [1, 2, 3]}), [3, 5, 7])
        assert_equal(sess.run(-weight + 10.0), 8)


def test_trainable_and_global_collections():
    weight = tf.Variable(1.0, name="weight")
    step = tf.Variable(0, name="global_step", trainable=False)
    assert tf.trainable_variables() == [weight]
    assert tf.global_variables() == [weight, step]
    assert step.trainable is False


def test_each_session_has_its_own_values():
    counter = tf.Variable(0.0, name="counter")
    add = counter.assign_add(1.0)
    first, second = tf.Session(), tf.Session()
    for sess in (first, second):
        sess.run(counter.initializer)
    for _ in range(3):
        first.run(add)
    assert first.run(counter) == 3.0
    assert second.run(counter) == 0.0
    with pytest.raises(tf.errors.FailedPreconditionError):
        tf.Session().run(counter)
    first.close()
    second.close()


def test_wrong_shape_assign_fails_when_built():
    weight = tf.Variable([1.0, 2.0], name="weight")
    with pytest.raises(ValueError, match=r"shape \(3,\) to variable 'weight' of shape \(2,\)"):
        weight.assign([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="variable 'weight'"):
        weight.assign_add(tf.zeros([2, 2]))


def test_wrong_dtype_assign_fails_when_built():
    weight = tf.Variable([1.0, 2.0], name="weight")
    counter = tf.Variable(0, name="counter")
    with pytest.raises(TypeError, match="int32"):
        weight.assign(tf.constant([1, 2]))
    with pytest.raises(TypeError, match="int32"):
        counter.assign(1.5)


def test_variable_ops_land_on_the_variable_device(no_gpu, logical_cpus, capsys):
    with tf.device("/cpu:1"):
        weight = tf.Variable(1.0, name="weight")
    add = weight.assign_add(2.0)  # built outside the scope, colocated anyway
    config = tf.ConfigProto(log_device_placement=True)
    with tf.Session(config=config) as sess:
        sess.run(weight.initializer)
        assert sess.run(add) == 3.0
        assert sess.run(weight) == 3.0
    log = capsys.readouterr().err.splitlines()
    for name in ("weight", "weight/read", "weight/Assign", "weight/initial_value",
                 "AssignAdd"):
        assert f"{name}: {CPU1}" in log


# --- random ops ----------------------------------------------------------------

def seeded_graph():
    tf.set_random_seed(42)
    return (tf.random_normal([5], seed=1), tf.random_normal([5], seed=2),
            tf.random_uniform([5]))


def test_seeded_ops_repeat_across_sessions_and_graphs():
    by_op_seed, other_op_seed, graph_seed_only = seeded_graph()
    with tf.Session() as sess:
        first = sess.run([by_op_seed, graph_seed_only])
    with tf.Session() as sess:
        second = sess.run([by_op_seed, graph_seed_only])
    tf.reset_default_graph()
    rebuilt, _, rebuilt_graph_seed_only = seeded_graph()
    with tf.Session() as sess:
        third = sess.run([rebuilt, rebuilt_graph_seed_only])
    for values in (second, third):
        np.testing.assert_array_equal(values[0], first[0])
        np.testing.assert_array_equal(values[1], first[1])


def test_successive_runs_draw_new_values():
    by_op_seed, _, _ = seeded_graph()
    with tf.Session() as sess:
        first, second = sess.run(by_op_seed), sess.run(by_op_seed)
    assert not np.array_equal(first, second)


def test_different_op_seeds_differ():
    by_op_seed, other_op_seed, _ = seeded_graph()
    with tf.Session() as sess:
        assert not np.array_equal(sess.run(by_op_seed), sess.run(other_op_seed))


def test_op_seed_alone_is_reproducible():
    sample = tf.random_uniform([5], seed=7)
    first = tf.Session().run(sample)
    np.testing.assert_array_equal(tf.Session().run(sample), first)


def test_unseeded_ops_differ_between_sessions():
    sample = tf.random_normal([5])
    assert not np.array_equal(tf.Session().run(sample), tf.Session().run(sample))


def test_random_normal_mean_and_stddev():
    sample = tf.random_normal([200_000], mean=3.0, stddev=2.0, seed=1)
    values = tf.Session().run(sample)
    assert values.dtype == np.float32 and values.shape == (200_000,)
    assert abs(values.mean() - 3.0) < 0.05
    assert abs(values.std() - 2.0) < 0.05


def test_random_uniform_range():
    sample = tf.random_uniform([100_000], minval=-2.0, maxval=5.0, seed=1)
    values = tf.Session().run(sample)
    assert values.min() >= -2.0 and values.max() < 5.0
    assert abs(values.mean() - 1.5) < 0.05
    assert values.min() < -1.9 and values.max() > 4.9  # the whole range is used


def test_random_uniform_defaults_to_zero_one():
    values = tf.Session().run(tf.random_uniform([10_000], seed=3))
    assert values.min() >= 0.0 and values.max() < 1.0


def test_truncated_normal_stays_within_two_stddev():
    sample = tf.truncated_normal([100_000], mean=1.0, stddev=0.5, seed=1)
    values = tf.Session().run(sample)
    assert values.min() >= 0.0 and values.max() <= 2.0
    assert abs(values.mean() - 1.0) < 0.01
    assert values.std() < 0.5  # the tails are cut, so narrower than the normal


def test_integer_random_uniform():
    sample = tf.random_uniform([10_000], minval=3, maxval=7, dtype=tf.int32, seed=1)
    values = tf.Session().run(sample)
    assert values.dtype == np.int32
    assert set(np.unique(values)) == {3, 4, 5, 6}


def test_integer_random_uniform_needs_maxval():
    with pytest.raises(ValueError, match="needs maxval"):
        tf.random_uniform([3], dtype=tf.int32)
    with pytest.raises(ValueError, match="minval < maxval"):
        tf.random_uniform([3], minval=5, maxval=5, dtype=tf.int64)


def test_random_normal_needs_a_float_dtype():
    with pytest.raises(ValueError, match="floating dtype, got int32"):
        tf.random_normal([3], dtype=tf.int32)


@pytest.mark.parametrize("make", [tf.random_normal, tf.truncated_normal, tf.random_uniform])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_random_float_dtypes(make, dtype):
    sample = make([4, 3], dtype=dtype, seed=1)
    assert sample.dtype is dtype and sample.shape.as_list() == [4, 3]
    values = tf.Session().run(sample)
    assert values.dtype == dtype.as_numpy_dtype and values.shape == (4, 3)


@pytest.mark.parametrize("make", [tf.random_normal, tf.truncated_normal, tf.random_uniform])
def test_random_float16(make):
    values = tf.Session().run(make([3], dtype=tf.float16, seed=1))
    assert values.dtype == np.float16


def test_random_int64_dtype():
    sample = tf.random_uniform([3], maxval=10, dtype=tf.int64, seed=1)
    assert tf.Session().run(sample).dtype == np.int64
