"""Library faults found by fault injection (issue 14): loading a value into a
tower replica, pooling windows larger than the input (TensorFlow 1.15's
rules), and the compiled kernels' buffer-size checks."""

import subprocess
import sys

import numpy as np
import pytest

import towerflow as tf
from towerflow.backends import native


@pytest.fixture
def two_towers(no_gpu):
    from conftest import split_cpu
    split_cpu(2)


def test_load_on_a_tower_replica_sets_that_replica_only(two_towers):
    def tower_fn(inputs):
        x, y = inputs
        w = tf.Variable(tf.random_normal([3, 2], seed=1), name="w")
        return tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    x, y = tf.placeholder(tf.float32, [None, 3]), tf.placeholder(tf.float32, [None, 2])
    strategy = tf.parallel.DataParallel(["/cpu:0", "/cpu:1"])
    step = strategy.minimize(tower_fn, (x, y), tf.train.GradientDescentOptimizer(0.1))
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    tower_0 = sess.run(step.replicas[0][0])
    sevens = np.full((3, 2), 7, np.float32)
    step.replicas[1][0].load(sevens, sess)
    assert np.array_equal(sess.run(step.replicas[1][0]), sevens)
    assert np.array_equal(sess.run(step.replicas[0][0]), tower_0)   # not re-randomised
    step.replicas[0][0].load(sevens * 2, sess)                       # tower 0 as before
    assert np.array_equal(sess.run(step.replicas[0][0]), sevens * 2)


def pool_with_unknown_size(pool, ksize, strides, images):
    """``pool`` VALID over ``images`` fed to a placeholder of unknown height and
    width (the kernel decides the size, as in TensorFlow), and its gradient."""
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, None, None, images.shape[3]])
        y = pool(x, ksize, strides, "VALID")
        grad = tf.gradients(tf.reduce_sum(y), x)[0]
        return tf.Session().run([y, grad], {x: images})


# TensorFlow's kernels: out = (in - window + stride) / stride, C division.
@pytest.mark.parametrize("native_on", ["1", "0"], ids=["compiled", "numpy"])
@pytest.mark.parametrize("pool", [tf.nn.max_pool, tf.nn.avg_pool], ids=["max", "avg"])
@pytest.mark.parametrize("window, stride, out_shape", [
    (3, 1, (2, 0, 0, 3)), (3, 2, (2, 0, 0, 3)), (3, 3, (2, 0, 0, 3)), (4, 3, (2, 0, 0, 3)),
])
def test_a_valid_window_larger_than_the_input_gives_an_empty_result(
        monkeypatch, no_gpu, native_on, pool, window, stride, out_shape):
    monkeypatch.setenv("TOWERFLOW_NATIVE", native_on)
    images = np.ones((2, 2, 2, 3), np.float32)
    pooled, grad = pool_with_unknown_size(pool, [1, window, window, 1],
                                          [1, stride, stride, 1], images)
    assert pooled.shape == out_shape
    assert grad.shape == images.shape and not grad.any()


@pytest.mark.parametrize("pool", [tf.nn.max_pool, tf.nn.avg_pool], ids=["max", "avg"])
def test_one_axis_too_small_empties_only_that_axis(no_gpu, pool):
    pooled, _ = pool_with_unknown_size(pool, [1, 2, 5, 1], [1, 1, 1, 1],
                                       np.ones((2, 3, 4, 3), np.float32))
    assert pooled.shape == (2, 2, 0, 3)


@pytest.mark.parametrize("pool", [tf.nn.max_pool, tf.nn.avg_pool], ids=["max", "avg"])
def test_a_window_past_the_input_by_a_stride_or_more_is_refused_as_tf_does(no_gpu, pool):
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Computed output size would be negative: -1 \[input_size: 2, "
                             r"effective_filter_size: 4, stride: 1\]"):
        pool_with_unknown_size(pool, [1, 4, 4, 1], [1, 1, 1, 1],
                               np.ones((1, 2, 2, 1), np.float32))


def test_a_known_input_smaller_than_the_window_fails_at_graph_construction(no_gpu):
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [1, 2, 2, 3])
        with pytest.raises(ValueError, match="Negative dimension size caused by subtracting "
                                             "3 from 2"):
            tf.nn.max_pool(x, [1, 3, 3, 1], [1, 1, 1, 1], "VALID")


# n * h * w * c wraps to 4 in 64 bits: a size check in Py_ssize_t would accept
# a 4-float buffer and read 2**62 + 1 images past it.
WRAPPING_IM2COL = """
import numpy as np
from towerflow.backends import _native
x, patches = np.zeros((1, 2, 2, 1), np.float32), np.zeros((1, 4), np.float32)
try:
    _native.im2col((2**62 + 1, 2, 2, 1, 2, 2, 1, 1, 0, 0, 1, 1), x, patches)
except ValueError as err:
    print("refused:", err)
"""


@pytest.mark.skipif(native._compiled is None, reason="the compiled kernels are not built")
def test_compiled_kernels_refuse_sizes_whose_product_overflows():
    done = subprocess.run([sys.executable, "-c", WRAPPING_IM2COL], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "refused: x: the geometry's sizes (a negative one, or a product past "
        f"{2**63 - 1}) do not describe a buffer")


@pytest.mark.skipif(native._compiled is None, reason="the compiled kernels are not built")
def test_compiled_pooling_refuses_a_window_whose_taps_overflow():
    x, out = np.zeros((1, 2, 2, 1), np.float32), np.zeros((1, 0, 0, 1), np.float32)
    with pytest.raises(ValueError, match="windows must tile the input with at most 8 taps"):
        native._compiled.max_pool((1, 2, 2, 1, 2**32, 2**32, 0, 0), x, None, out, None,
                                  False)
