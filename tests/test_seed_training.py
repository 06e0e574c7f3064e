"""SEED_PROGRAMS.md P5, P6 and P8 as users run them (P5's full run is in
test_train.py): training results that must hold, on logical CPUs too."""

import time
from pathlib import Path

import numpy as np
import pytest

import towerflow as tf
from conftest import split_cpu
from towerflow.examples.tutorials.mnist import input_data

MNIST_SMALL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mnist-small"
needs_mnist = pytest.mark.skipif(not MNIST_SMALL.is_dir(),
                                 reason=f"MNIST data not found at {MNIST_SMALL}")


def p6_softmax_regression(mnist, device=None, epochs=10, batch_size=100, learning_rate=0.1):
    """P6 as written (the model, loss and accuracy optionally under a device)."""
    x = tf.placeholder(tf.float32, [None, 784])
    y_ = tf.placeholder(tf.float32, [None, 10])
    with tf.device(device):
        W = tf.Variable(tf.zeros([784, 10]))
        b = tf.Variable(tf.zeros([10]))
        y = tf.nn.softmax(tf.matmul(x, W) + b)
        cross_entropy = tf.reduce_mean(-tf.reduce_sum(y_ * tf.log(y), reduction_indices=[1]))
        train_step = tf.train.GradientDescentOptimizer(learning_rate).minimize(cross_entropy)
        correct_prediction = tf.equal(tf.argmax(y, 1), tf.argmax(y_, 1))
        accuracy = tf.reduce_mean(tf.cast(correct_prediction, tf.float32))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(epochs):
            for _ in range(mnist.train.num_examples // batch_size):
                batch_xs, batch_ys = mnist.train.next_batch(batch_size)
                sess.run(train_step, feed_dict={x: batch_xs, y_: batch_ys})
        return sess.run(accuracy, feed_dict={x: mnist.test.images, y_: mnist.test.labels})


@needs_mnist
def test_p6_mnist_softmax_reaches_090_on_the_cpu():
    mnist = input_data.read_data_sets(str(MNIST_SMALL), one_hot=True, seed=0)
    start = time.perf_counter()
    accuracy = p6_softmax_regression(mnist)
    print(f"P6 on CPU: accuracy {accuracy:.4f} in {time.perf_counter() - start:.2f} s")
    assert accuracy >= 0.90


@needs_mnist
def test_p6_on_a_pinned_logical_cpu_matches_the_default_device():
    split_cpu(4)
    results = []
    for device in (None, "/cpu:3"):
        tf.reset_default_graph()
        mnist = input_data.read_data_sets(str(MNIST_SMALL), one_hot=True, seed=0)
        results.append(p6_softmax_regression(mnist, device=device, epochs=2))
    assert results[0] == results[1] and results[0] >= 0.85


def test_p8_lower_temperature_sharpens_and_sampling_follows():
    logits = tf.constant([[2.0, 1.0, 0.5, 0.1]])
    temperatures = (1.0, 0.6, 0.2)
    probabilities = [tf.nn.softmax(logits / t, axis=-1) for t in temperatures]
    samples = [tf.random.categorical(logits / t, 20000, seed=7) for t in temperatures]
    with tf.Session() as sess:
        probs, draws = sess.run([probabilities, samples])
    entropies = [-(p * np.log(p)).sum() for p in probs]
    assert entropies[0] > entropies[1] > entropies[2]
    assert probs[2][0, 0] > probs[1][0, 0] > probs[0][0, 0]
    for p, drawn in zip(probs, draws):
        frequencies = np.bincount(drawn[0], minlength=4) / drawn.shape[1]
        np.testing.assert_allclose(frequencies, p[0], atol=0.015)


@needs_mnist
def test_p6_on_the_gpu_reaches_090_like_the_cpu(gpu_backend):
    mnist = input_data.read_data_sets(str(MNIST_SMALL), one_hot=True, seed=0)
    start = time.perf_counter()
    accuracy = p6_softmax_regression(mnist, device="/gpu:0")
    print(f"P6 on GPU: accuracy {accuracy:.4f} in {time.perf_counter() - start:.2f} s")
    assert accuracy >= 0.90
