"""Session.run returns IEEE results without NumPy's RuntimeWarnings, as TF
1.15's kernels do (log(0) = -inf, 0/0 = nan, an fp16 overflow that loss
scaling expects; towerflow/float_errors.py): every plan runs with NumPy's
floating-point error reports off, on whatever thread, and the CPU pool's
threads run their parts in the caller's context. Only CheckNumerics reports a
non-finite value, as an error; the user's own NumPy error state, the user's
Python called by a run (py_func, from_generator) and Python's other warnings
are left as they were."""

import threading
import warnings

import numpy as np
import pytest

import towerflow as tf
from towerflow.backends import cpu_threads, numpy_backend
from towerflow.data.prefetch import Prefetcher


def run_without_runtime_warnings(fetches, feed_dict=None):
    """``sess.run(fetches, feed_dict)``, asserting it warned nothing from NumPy."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with tf.Session() as sess:
            values = sess.run(fetches, feed_dict)
    runtime = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert runtime == []
    return values


def test_elementwise_ieee_results_warn_nothing():
    x = tf.placeholder(tf.float32, [None])
    fetches = [tf.log(x), x / x, 1.0 / x, tf.exp(x * 1000.0)]
    log, ratio, inverse, exp = run_without_runtime_warnings(fetches, {x: [0.0, 1.0]})
    np.testing.assert_array_equal(log, [-np.inf, 0.0])
    assert np.isnan(ratio[0]) and ratio[1] == 1.0
    np.testing.assert_array_equal(inverse, [np.inf, 1.0])
    np.testing.assert_array_equal(exp, [1.0, np.inf])      # exp(1000) overflows float32


def test_a_float16_matmul_that_overflows_is_inf_without_a_warning():
    a = tf.placeholder(tf.float16, [2, 2])
    product = tf.matmul(a, a)
    big = np.full((2, 2), 60000.0, np.float16)     # 2 * 60000**2 is past float16's 65504
    value = run_without_runtime_warnings(product, {a: big})
    assert value.dtype == np.float16 and np.isposinf(value).all()


def test_logsumexp_of_minus_inf_rows_and_softmax_of_an_inf_row():
    x = tf.placeholder(tf.float32, [2, 3])
    rows = np.array([[-np.inf] * 3, [np.inf, 0.0, 1.0]], np.float32)
    lse, soft = run_without_runtime_warnings(
        [tf.reduce_logsumexp(x, axis=1), tf.nn.softmax(x)], {x: rows})
    assert lse[0] == -np.inf and lse[1] == np.inf      # TF: -inf for a row of -inf
    assert np.isnan(soft).all()       # inf - inf in the max shift: NaN, as TF's kernel


def test_dropout_with_a_fed_keep_prob_of_zero_still_raises_on_the_cpu_without_a_warning():
    # TF checks a fed rate nowhere; towerflow's CPU kernel reads it (see
    # tests/test_host_reads.py): its error stays, and nothing is warned before it.
    x = tf.ones([3, 4])
    keep_prob = tf.placeholder(tf.float32, [])
    y = tf.nn.dropout(x, keep_prob, seed=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with tf.Session() as sess, \
                pytest.raises(tf.errors.InvalidArgumentError, match=r"\[0, 1\), got 1.0"):
            sess.run(y, {keep_prob: 0.0})
    assert [w for w in caught if issubclass(w.category, RuntimeWarning)] == []


@pytest.fixture
def parts_on_pool_threads(monkeypatch):
    """A list of the pool threads that ran a part: each split job's first part
    on the calling thread waits (30 s at most) until a pool thread took one,
    so the work really ran on both."""
    if numpy_backend.CPU_POOL.workers < 2:
        pytest.skip("the CPU pool has one thread (one CPU or TOWERFLOW_CPU_THREADS=1)")
    ran_on = []

    class ProbedJob(cpu_threads._Job):
        def __init__(self, work, count):
            caller, taken = threading.current_thread(), threading.Event()

            def probed(part):
                if threading.current_thread() is caller:
                    taken.wait(30)
                else:
                    ran_on.append(threading.current_thread().name)
                    taken.set()
                work(part)
            super().__init__(probed, count)
    monkeypatch.setattr(cpu_threads, "_Job", ProbedJob)
    return ran_on


def test_work_split_across_the_cpu_pool_warns_nothing(parts_on_pool_threads):
    # inf + -inf in a bias_add big enough for the pool (MIN_PARALLEL_ELEMENTS)
    rows, channels = 1024, 256
    assert rows * channels >= cpu_threads.MIN_PARALLEL_ELEMENTS
    x = tf.placeholder(tf.float32, [rows, channels])
    bias = tf.placeholder(tf.float32, [channels])
    out = tf.nn.bias_add(x, bias)
    values = np.full((rows, channels), np.inf, np.float32)
    value = run_without_runtime_warnings(
        out, {x: values, bias: np.full(channels, -np.inf, np.float32)})
    assert np.isnan(value).all()
    assert parts_on_pool_threads and \
        all(name.startswith("towerflow-cpu-") for name in parts_on_pool_threads)


def test_a_two_tower_mixed_float16_step_that_overflows_warns_nothing(logical_cpus):
    tf.mixed_precision.set_global_policy("mixed_float16")
    try:
        x = tf.placeholder(tf.float32, [None, 4])
        labels = tf.placeholder(tf.int64, [None])

        def tower_fn(inputs):       # float16 logits (the policy's dense layer)
            logits = tf.layers.dense(inputs[0], 3, use_bias=False,
                                     kernel_initializer=tf.ones_initializer())
            return tf.losses.sparse_softmax_cross_entropy(inputs[1],
                                                          tf.cast(logits, tf.float32))

        strategy = tf.parallel.DataParallel(logical_cpus[:2], all_reduce="cpu")
        opt = tf.mixed_precision.LossScaleOptimizer(tf.train.MomentumOptimizer(0.1, 0.9),
                                                    initial_scale=2.0 ** 15)
        step = strategy.minimize(tower_fn, (x, labels), opt)
    finally:
        tf.mixed_precision.set_global_policy(None)
    fetches = [step.train_op, step.metrics["loss_scale"], step.metrics["step_skipped"]]
    images = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    images[6] = 1e5       # past float16's 65504: the cast, logits and gradients overflow
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            _, scale, skipped = sess.run(fetches, {x: images, labels: np.zeros(8, np.int64)})
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []
    assert (scale, skipped) == (2.0 ** 15, True)


def test_control_flow_bodies_warn_nothing():
    x = tf.placeholder(tf.float32, [2])
    _, logs = tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, tf.log(y * 0.0) + y / y),
                            [tf.constant(0), x])
    branch = tf.cond(tf.reduce_all(x > -1.0), lambda: tf.log(x), lambda: x)
    looped, taken = run_without_runtime_warnings([logs, branch], {x: [0.0, 1.0]})
    assert np.isneginf(looped).all() or np.isnan(looped).all()
    np.testing.assert_array_equal(taken, [-np.inf, 0.0])


def test_tf_data_map_threads_and_prefetch_warn_nothing():
    dataset = tf.data.Dataset.from_tensor_slices(np.array([0.0, 1.0, 0.0], np.float32))
    dataset = dataset.map(lambda v: tf.log(v) + v / v, num_parallel_calls=2).prefetch(2)
    element = dataset.make_one_shot_iterator().get_next()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with tf.Session() as sess:
            values = [sess.run(element) for _ in range(3)]
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []
    assert np.isnan(values[0]) and values[1] == 1.0 and np.isnan(values[2])


def test_the_users_python_in_a_run_warns_as_numpy_does_by_default():
    # TF 1.15 ran a py_func or a generator on its own threads, where NumPy had its
    # default reports: the user's own NumPy warnings there are theirs to see.
    x = tf.placeholder(tf.float32, [1])
    y = tf.py_func(np.log, [x], tf.float32)
    with tf.Session() as sess, pytest.warns(RuntimeWarning, match="divide by zero"):
        assert sess.run(y, {x: [0.0]})[0] == -np.inf
    dataset = tf.data.Dataset.from_generator(
        lambda: iter([np.log(np.zeros(1, np.float32))]), tf.float32, [1])
    element = dataset.make_one_shot_iterator().get_next()
    with tf.Session() as sess, pytest.warns(RuntimeWarning, match="divide by zero"):
        assert sess.run(element)[0] == -np.inf


def test_the_data_prefetch_thread_keeps_the_callers_numpy_error_state():
    # As ``map(make_batch, indices)`` would on the caller's thread.
    with np.errstate(divide="raise"), Prefetcher(
            lambda i: np.log(np.float32(i)), range(2), depth=1) as batches, \
            pytest.raises(FloatingPointError):
        list(batches)


def test_the_users_numpy_error_state_is_kept_around_a_run():
    x = tf.placeholder(tf.float32, [None])
    y = tf.log(x)
    old = np.seterr(all="raise")
    try:
        with tf.Session() as sess:
            value = sess.run(y, {x: [0.0]})         # no FloatingPointError inside
            assert np.geterr() == {"divide": "raise", "over": "raise", "under": "raise",
                                   "invalid": "raise"}
        with pytest.raises(FloatingPointError):
            np.log(np.float32(0.0))                   # the user's own NumPy still raises
    finally:
        np.seterr(**old)
    assert value[0] == -np.inf


def test_check_numerics_still_raises_on_a_nan():
    x = tf.placeholder(tf.float32, [None])
    checked = tf.debugging.check_numerics(x / x, "ratio")
    with tf.Session() as sess, \
            pytest.raises(tf.errors.InvalidArgumentError, match="ratio.*NaN"):
        sess.run(checked, {x: [0.0]})


def test_python_warnings_from_a_run_still_reach_the_user():
    # Only NumPy's floating-point reports are off: a UserWarning raised inside a
    # kernel (a py_func here) is the user's, as in TF.
    def noisy(value):
        warnings.warn("from inside the step", UserWarning)
        return value * 2

    x = tf.placeholder(tf.float32, [2])
    y = tf.py_func(noisy, [x], tf.float32)
    with tf.Session() as sess, pytest.warns(UserWarning, match="from inside the step"):
        np.testing.assert_array_equal(sess.run(y, {x: [1.0, 2.0]}), [2.0, 4.0])
