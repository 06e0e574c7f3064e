"""The NumPy backend's CPU thread pool: kernels split across threads give what
the serial kernels give, the same bits on every run, and errors that name
the failing part; the pool never deadlocks on a nested or concurrent call."""

import threading
import types

import numpy as np
import pytest

from towerflow.backends import cpu_threads
from towerflow.backends.kernels import build_kernels

SERIAL_TABLE = build_kernels(np)


def kernel(table, name, attrs=None, dtypes=(np.float32, np.uint8)):
    ctx = types.SimpleNamespace(attrs=attrs or {}, op=None, resource=lambda key, make: make(),
                                output_dtypes=[np.dtype(d) for d in dtypes])
    return table[name](ctx)


def random(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def run_both(pool, name, attrs, *inputs):
    """(serial result, threaded result, threaded result again) as tuples."""
    threaded = kernel(build_kernels(np, pool), name, attrs)
    results = [kernel(SERIAL_TABLE, name, attrs)(*inputs), threaded(*inputs), threaded(*inputs)]
    return [r if isinstance(r, tuple) else (r,) for r in results]


def assert_same_bits(first, second):
    for a, b in zip(first, second):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


CONV_CASES = [  # (x shape, filter shape, strides, padding): both im2col layouts
    ((5, 8, 8, 3), (3, 3, 3, 4), (1, 1), "SAME"),
    ((5, 6, 6, 8), (3, 3, 8, 5), (1, 1), "SAME"),
    ((3, 7, 7, 4), (2, 2, 4, 3), (2, 2), "VALID"),
    ((4, 6, 6, 3), (1, 1, 3, 2), (1, 1), "VALID"),
]


@pytest.mark.parametrize("x_shape, w_shape, strides, padding", CONV_CASES)
def test_split_convolutions_match_the_serial_ones(pool, x_shape, w_shape, strides, padding):
    x, w = random(x_shape, 1), random(w_shape, 2)
    attrs = {"strides": strides, "padding": padding}
    serial, threaded, again = run_both(pool, "Conv2D", attrs, x, w)
    np.testing.assert_allclose(threaded[0], serial[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(threaded[1], serial[1])      # the same patch matrix
    assert_same_bits(threaded, again)
    grad = random(serial[0].shape, 3)
    attrs_filter = dict(attrs, filter_shape=w_shape)
    for name, inputs, attrs_of in (("Conv2DBackpropFilter", (serial[1], grad), attrs_filter),
                                   ("Conv2DBackpropInput", (x, w, grad), attrs)):
        serial_grad, threaded_grad, again = run_both(pool, name, attrs_of, *inputs)
        np.testing.assert_allclose(threaded_grad[0], serial_grad[0], rtol=1e-4, atol=1e-4)
        assert_same_bits(threaded_grad, again)


@pytest.mark.parametrize("x_shape, ksize, strides, padding", [
    ((6, 8, 8, 3), (2, 2), (2, 2), "VALID"),
    ((5, 7, 7, 2), (2, 2), (2, 2), "VALID"),
    ((5, 7, 7, 2), (3, 3), (2, 2), "SAME"),
    ((4, 6, 6, 3), (3, 3), (1, 1), "SAME"),
])
def test_split_max_pools_give_the_serial_bits(pool, x_shape, ksize, strides, padding):
    x = np.maximum(random(x_shape, 4), 0)          # ties, as after a ReLU
    attrs = {"ksize": ksize, "strides": strides, "padding": padding}
    serial, threaded, again = run_both(pool, "MaxPool", attrs, x)
    assert_same_bits(threaded, serial)
    grad = random(serial[0].shape, 5)
    for infinite in (False, True):
        grad[0, 0, 0, 0] = np.inf if infinite else 1.0
        serial_grad, threaded_grad, again = run_both(pool, "MaxPoolGrad", attrs, x, serial[1],
                                                     grad)
        assert_same_bits(threaded_grad, serial_grad)
        assert_same_bits(threaded_grad, again)


SHAPE = (6, 10, 10, 8)     # big enough for the split paths


@pytest.mark.parametrize("name, make_inputs", [
    ("Relu", lambda: (random(SHAPE, 6),)),
    ("ReluGrad", lambda: (random(SHAPE, 7), np.maximum(random(SHAPE, 8), 0))),
    ("BiasAdd", lambda: (random(SHAPE, 9), random((8,), 10))),
    ("BiasAdd", lambda: (random((1601, 3), 9), random((3,), 10))),
])
def test_split_elementwise_kernels_give_the_serial_bits(pool, name, make_inputs):
    serial, threaded, again = run_both(pool, name, {}, *make_inputs())
    assert_same_bits(threaded, serial)
    assert_same_bits(threaded, again)


def test_relu_keeps_nans_and_the_input_dtype(pool):
    x = random((60, 100), 11, np.float64)
    x[2, 3] = np.nan
    serial, threaded, _ = run_both(pool, "Relu", {}, x)
    assert threaded[0].dtype == np.float64
    assert_same_bits(threaded, serial)


def test_bias_add_grad_sums_every_row():
    grad = random((8, 10, 10, 7), 12, np.float64)     # big enough for the BLAS path
    total = kernel(SERIAL_TABLE, "BiasAddGrad")(grad)
    np.testing.assert_allclose(total, grad.reshape(-1, 7).sum(axis=0), rtol=1e-12)


@pytest.mark.parametrize("a_shape, b_shape, transpose_a, transpose_b", [
    ((40, 9), (9, 6), False, False),     # split by rows
    ((3, 9), (9, 40), False, False),     # split by columns
    ((9, 40), (6, 9), True, True),
])
def test_split_matmul_matches_the_serial_one(pool, a_shape, b_shape, transpose_a, transpose_b):
    attrs = {"transpose_a": transpose_a, "transpose_b": transpose_b}
    serial, threaded, again = run_both(pool, "MatMul", attrs, random(a_shape, 13),
                                       random(b_shape, 14))
    np.testing.assert_allclose(threaded[0], serial[0], rtol=1e-5, atol=1e-5)
    assert_same_bits(threaded, again)


def test_the_lowest_failing_part_is_raised_and_the_pool_still_works(pool):
    def work(part):
        if part in (2, 3):
            raise ValueError(f"part {part}")
    with pytest.raises(ValueError, match="part 2"):
        pool.run(work, 5)
    done = []
    pool.run(done.append, 4)
    assert sorted(done) == [0, 1, 2, 3]


def test_a_run_from_inside_a_run_goes_serial_instead_of_deadlocking(pool):
    inner = []

    def outer(part):
        pool.run(lambda index: inner.append((part, index)), 3)
    pool.run(outer, 2)
    assert sorted(inner) == [(p, i) for p in range(2) for i in range(3)]


def test_two_python_threads_can_share_the_pool(pool):
    results = {}

    def use(key):
        seen = []
        for _ in range(20):
            pool.run(seen.append, 4)
        results[key] = sorted(seen)
    threads = [threading.Thread(target=use, args=(key,)) for key in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {key: sorted(list(range(4)) * 20) for key in range(3)}


def test_one_thread_means_serial():
    pool = cpu_threads.WorkerPool(1)
    assert pool.parts(10, 1 << 30) == 1 and pool.gemm_parts(10, 1 << 40) == 1
    order = []
    pool.run(order.append, 3)
    assert order == [0, 1, 2]


def test_compiled_kernels_split_short_but_heavy_work_across_the_threads():
    # a 4x4 layer of 128 channels at batch 64: 1,024 rows, too few for
    # OpenBLAS's GEMMs to split, but the compiled kernels have no threads of
    # their own
    pool = cpu_threads.WorkerPool(2)
    flops = 64 * 16 * 1152 * 128
    assert pool.gemm_parts(64, flops, 64 * 16) == 1
    assert pool.compiled_parts(64, flops) >= 2
    assert pool.compiled_parts(64, cpu_threads.MIN_PARALLEL_FLOPS - 1) == 1
    assert pool.compiled_parts(1, flops) == 1
    assert cpu_threads.SERIAL.compiled_parts(64, flops) == 1


# -- ConfigProto(intra_op_parallelism_threads=N) ---------------------------------------------


def workers_seen_in_a_run(config, pool):
    """What ``pool`` lets an op of a Session run with ``config`` use: read by a
    py_func inside the run, and by a second run on another Python thread."""
    import towerflow as tf
    tf.reset_default_graph()
    seen = tf.py_func(lambda: np.int32(pool.active_workers), [], tf.int32)
    with tf.Session(config=config) as sess:
        inside = int(sess.run(seen))
        parts = pool.parts(1000, cpu_threads.MIN_PARALLEL_ELEMENTS * 10)
    return inside, parts


def test_intra_op_parallelism_threads_caps_the_pool_within_the_sessions_runs():
    """Issue 33, item 7: the setting was stored and never read. Inside a run
    of a Session configured for one thread, an op splits across one; the
    pool keeps its own count outside the run and in other Sessions."""
    import towerflow as tf
    pool = cpu_threads.WorkerPool(3)
    one = tf.ConfigProto(intra_op_parallelism_threads=1)
    two = tf.ConfigProto(intra_op_parallelism_threads=2)
    assert workers_seen_in_a_run(one, pool) == (1, 3)
    assert workers_seen_in_a_run(two, pool) == (2, 3)
    assert workers_seen_in_a_run(tf.ConfigProto(), pool) == (3, 3)
    assert workers_seen_in_a_run(tf.ConfigProto(intra_op_parallelism_threads=8), pool) == \
        (3, 3)          # only ever lowered: the pool has three threads


def test_intra_op_parallelism_threads_must_be_a_thread_count():
    import towerflow as tf
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(ValueError, match=r"^ConfigProto\(intra_op_parallelism_threads="
                           + f"{bad!r}".replace("(", r"\(").replace(".", r"\.")
                           + r"\): expected a number of threads, an int >= 0"):
            tf.ConfigProto(intra_op_parallelism_threads=bad)


def test_a_pool_started_while_capped_or_lowered_never_waits_for_threads_it_lacks():
    """The differential suite hung when run alone: fast_paths lowered the pool
    to one worker before it started, so it started no threads, then raised it
    again and waited for ever for a helper."""
    pool = cpu_threads.WorkerPool(2)
    pool.workers = 1
    pool.blas_threads(0)                    # starts the pool: no helper thread
    pool.workers = 2
    done = threading.Event()
    runner = threading.Thread(target=lambda: (pool.run(lambda part: None, 2), done.set()),
                              daemon=True)
    runner.start()
    assert done.wait(10), "the pool waited for a helper thread it never started"
