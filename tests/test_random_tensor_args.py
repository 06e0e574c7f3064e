"""Random ops take tensors wherever TF 1.15 does: ``mean``/``stddev`` and
``minval``/``maxval`` (scalars or broadcastable tensors) and a tensor
``shape`` (a constant, or ``tf.shape(x)`` known only at run time)."""

import numpy as np
import pytest

import towerflow as tf


def draw(op_device, build, feed_dict=None):
    with tf.device(op_device):
        out = build()
    with tf.Session(config=tf.ConfigProto(allow_soft_placement=True)) as sess:
        return sess.run(out, feed_dict=feed_dict), out


@pytest.mark.parametrize("op", [tf.random_normal, tf.truncated_normal])
def test_tensor_mean_and_stddev_scale_the_same_draw(op_device, op):
    with tf.Graph().as_default():
        numbers, _ = draw(op_device, lambda: op([50, 3], mean=2.0, stddev=0.5, seed=5))
    with tf.Graph().as_default():
        tensors, out = draw(op_device, lambda: op(
            [50, 3], mean=tf.constant(2.0), stddev=tf.constant(0.5), seed=5))
    assert out.shape.as_list() == [50, 3] and tensors.dtype == np.float32
    np.testing.assert_allclose(tensors, numbers, rtol=1e-6, atol=1e-6)


def test_per_column_mean_and_stddev_broadcast(op_device):
    mean, stddev = [0.0, 100.0, -50.0], [1.0, 2.0, 3.0]
    samples, _ = draw(op_device, lambda: tf.random_normal(
        [4000, 3], mean=tf.constant(mean), stddev=tf.constant(stddev), seed=1))
    # 4000 draws: the sample mean is within 5 standard errors of the mean
    np.testing.assert_allclose(samples.mean(axis=0), mean, atol=5 * 3 / np.sqrt(4000))
    np.testing.assert_allclose(samples.std(axis=0), stddev, rtol=0.1)


def test_a_fed_stddev_of_zero_gives_the_mean(op_device):
    stddev = tf.placeholder(tf.float32, [])
    samples, _ = draw(op_device, lambda: tf.random_normal([100], mean=3.0, stddev=stddev),
                      {stddev: 0.0})
    np.testing.assert_array_equal(samples, np.full(100, 3.0, np.float32))


def test_uniform_with_tensor_bounds_stays_within_them(op_device):
    low, high = np.array([0.0, 10.0], np.float32), np.array([1.0, 10.5], np.float32)
    samples, _ = draw(op_device, lambda: tf.random_uniform(
        [1000, 2], minval=tf.constant(low), maxval=tf.constant(high), seed=3))
    assert (samples >= low).all() and (samples < high).all()
    assert (samples.max(axis=0) - samples.min(axis=0) > 0.9 * (high - low)).all()


def test_tensor_shapes_constant_and_run_time(op_device):
    fixed, out = draw(op_device, lambda: tf.random_normal(tf.constant([2, 3])))
    assert fixed.shape == (2, 3) and out.shape.as_list() == [2, 3]
    x = tf.placeholder(tf.float32, [None, 4])
    noise, out = draw(op_device, lambda: tf.random_uniform(tf.shape(x)) + x,
                      {x: np.zeros((5, 4))})
    assert out.shape.as_list() == [None, 4] and noise.shape == (5, 4)
    assert (noise >= 0).all() and (noise < 1).all()


def test_computed_shapes_are_read_when_the_graph_runs(op_device):
    x = tf.placeholder(tf.int32, [2])
    samples, out = draw(op_device, lambda: tf.random_normal(x + 1, seed=2), {x: [2, 4]})
    assert samples.shape == (3, 5) and out.shape.as_list() == [None, None]
    batch = tf.placeholder(tf.float32, [None, 3])
    samples, out = draw(op_device, lambda: tf.random_uniform(
        [tf.shape(batch)[0], 8], maxval=4, dtype=tf.int32), {batch: np.zeros((6, 3))})
    assert samples.shape == (6, 8) and out.shape.as_list() == [None, 8]
    assert samples.min() >= 0 and samples.max() < 4


def test_unsupported_tensor_arguments_are_named():
    with pytest.raises(TypeError, match="int32 needs Python int bounds"):
        tf.random_uniform([3], maxval=tf.constant(5), dtype=tf.int32)
