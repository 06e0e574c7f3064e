"""Open capture defects of issue 30, each pinned by a test on the strict
simulated GPU (towerflow.simgpu; a real GPU where present) that failed
before its fix: the runtime pools flushed before a capture, running out of
memory during a capture, and a run-time ``tf.shape`` on a GPU.

The simulated pools run out of memory as CuPy 14.2's do (memory.pyx,
``SingleDeviceMemoryPool._try_malloc``): past its limit, or when the GPU is
full, a pool frees its own cached blocks (not split) and tries again."""

import logging

import numpy as np
import pytest

import towerflow as tf
from towerflow import plan_capture, simgpu

MIB = 2**20
ROWS = MIB // 4                 # a float32 vector of 1 MiB
NOT_CAPTURING = "CUDA graphs: not capturing"


@pytest.fixture
def cp():
    with simgpu.installed(gpus=2, memory_bytes=2**30) as module:
        yield module


def limit_gpu1(limit_mib):
    gpu = tf.config.list_physical_devices("GPU")[1]
    tf.config.set_logical_device_configuration(
        gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit_mib)])


def capturing_plans(sess):
    return [plan for plan, _ in sess._plans.values()
            if isinstance(plan, plan_capture.CapturingPlan)]


def captured_count(sess):
    return sum(plan.captured for plan in capturing_plans(sess))


def run_steps(fetch, fed, values, config=None):
    """(each step's value, graphs captured, device bytes of GPU 1 at most)."""
    results, peak = [], 0
    with tf.Session(config=config) as sess:
        for value in values:
            results.append(sess.run(fetch, {fed: value}))
            peak = max(peak, simgpu.memory.device_bytes(1))
        return results, captured_count(sess), peak


def ones_on_gpu1(rows, scale):
    return np.full(rows, scale, np.float32)


# -- the simulated pools, out of memory as CuPy's -----------------------------------------


def test_a_pool_at_its_limit_frees_its_own_cached_blocks_and_tries_again(cp):
    pool, other = cp.cuda.MemoryPool(), cp.cuda.MemoryPool()
    pool.set_limit(size=3 * MIB)
    with cp.cuda.using_allocator(other.malloc):
        kept = cp.zeros(ROWS, np.float32)               # another pool's cache
    del kept
    with cp.cuda.using_allocator(pool.malloc):
        first = cp.zeros(ROWS * 2, np.float32)          # 2 MiB
        del first                                       # cached: 2 of 3 MiB
        second = cp.zeros(ROWS * 3, np.float32)         # 3 MiB: frees the cache
    assert pool.total_bytes() == 3 * MIB and second.size == ROWS * 3
    assert other.total_bytes() == MIB                   # a pool frees only its own
    with cp.cuda.using_allocator(pool.malloc), pytest.raises(
            cp.cuda.memory.OutOfMemoryError, match="limit set to: 3,145,728"):
        cp.zeros(ROWS, np.float32)


def test_a_pool_given_an_allocator_takes_its_memory_from_it(cp):
    backing = cp.cuda.MemoryPool()
    backing.set_limit(size=2 * MIB)
    pool = cp.cuda.MemoryPool(backing.malloc)
    with cp.cuda.using_allocator(pool.malloc):
        first = cp.zeros(ROWS, np.float32)
        assert (pool.total_bytes(), backing.used_bytes()) == (MIB, MIB)
        del first                           # cached by the pool, still the backing's
        again = cp.ones(ROWS, np.float32)
        with pytest.raises(cp.cuda.memory.OutOfMemoryError, match="limit set to"):
            cp.zeros(ROWS * 2, np.float32)
    assert backing.used_bytes() == MIB and float(again.sum()) == ROWS


# -- 1. the runtime pools flushed before a capture -----------------------------------------


@pytest.mark.simulated_gpus(2)
def test_a_plan_whose_first_run_left_cached_blocks_is_captured_within_the_limit(
        gpu_backend, caplog):
    """The first run (op by op) leaves its temporaries cached in GPU 1's pool;
    the capture's own pool cannot use them, so they are freed first."""
    limit_gpu1(40)
    with tf.device("/gpu:1"):
        fed = tf.placeholder(tf.float32, [4 * ROWS])            # 4 MiB
        doubled = fed * 2.0
        out = tf.reduce_sum(tf.concat([doubled, doubled + 1.0], 0) * 3.0)
    steps = [ones_on_gpu1(4 * ROWS, step) for step in range(4)]
    with caplog.at_level(logging.INFO):
        results, captured, peak = run_steps(out, fed, steps)
    assert NOT_CAPTURING not in caplog.text
    assert captured == 1 and peak <= 40 * MIB
    expected = [4 * ROWS * 3 * (4 * step + 1.0) for step in range(4)]
    np.testing.assert_allclose(results, expected, rtol=1e-6)


# -- 2. out of memory during a capture -------------------------------------------------------


def tight_step():
    """A step whose capture frees a temporary (softmax's ``x - max``), then
    needs more than GPU 1 has left (the concat): with the freed block given
    back to the GPU it would fit, and the graph would replay into it."""
    with tf.device("/gpu:1"):
        fed = tf.placeholder(tf.float32, [None])
        joined = tf.concat([tf.nn.softmax(fed), fed], 0)
        return fed, tf.reduce_sum(joined)


def tight_expected(rows, step):
    return 1.0 + rows * step


@pytest.mark.simulated_gpus(2)
def test_running_out_of_memory_while_capturing_runs_the_step_op_by_op(gpu_backend, caplog):
    limit_gpu1(20)
    fed, out = tight_step()
    steps = [ones_on_gpu1(4 * ROWS, step) for step in range(4)]
    with caplog.at_level(logging.INFO):
        results, captured, peak = run_steps(out, fed, steps)
    assert captured == 0 and peak <= 20 * MIB
    assert "capture failed: out of memory on" in caplog.text
    expected = [tight_expected(4 * ROWS, step) for step in range(4)]
    np.testing.assert_allclose(results, expected, rtol=1e-6)


@pytest.mark.simulated_gpus(2)
def test_a_graph_of_another_batch_size_outlives_a_capture_out_of_memory(gpu_backend, caplog):
    """Batch 1 MiB is captured; batch 4 MiB, with that graph's memory counted,
    runs out of memory capturing and runs op by op; batch 1 MiB replays on."""
    limit_gpu1(22)
    fed, out = tight_step()
    sizes = [ROWS] * 3 + [4 * ROWS] * 3 + [ROWS] * 2
    steps = [ones_on_gpu1(rows, step) for step, rows in enumerate(sizes)]
    with caplog.at_level(logging.INFO):
        results, captured, _ = run_steps(out, fed, steps)
    assert "capture failed: out of memory on" in caplog.text
    assert "(fed shapes [[1048576]] run op by op)" in caplog.text
    assert captured == 1
    expected = [tight_expected(rows, step) for step, rows in enumerate(sizes)]
    np.testing.assert_allclose(results, expected, rtol=1e-6)


# -- 3. a run-time tf.shape on a GPU ----------------------------------------------------------


def shape_step():
    with tf.device("/gpu:0"):
        fed = tf.placeholder(tf.float32, [None, 3])
        shape = tf.shape(fed)
        mean = tf.reduce_sum(fed * 2.0) / tf.cast(shape[0], tf.float32)
    return fed, [shape, mean]


def test_a_step_using_tf_shape_on_the_gpu_is_captured_whole(gpu_backend, caplog):
    fed, fetches = shape_step()
    rows = [4, 4, 4, 6, 6, 6, 4, 6]        # a new batch size is captured again
    steps = [np.full((count, 3), step, np.float32) for step, count in enumerate(rows)]
    with caplog.at_level(logging.INFO):
        replayed, captured, _ = run_steps(fetches, fed, steps)
    assert NOT_CAPTURING not in caplog.text
    assert captured == 2
    plain, _, _ = run_steps(fetches, fed, steps, tf.ConfigProto(cuda_graphs=False))
    for step, count in enumerate(rows):
        (shape, mean), (plain_shape, plain_mean) = replayed[step], plain[step]
        assert shape.tolist() == plain_shape.tolist() == [count, 3]
        assert shape.dtype == np.int32
        assert mean == plain_mean == pytest.approx(6.0 * step)
