"""Faults of the GPU backend found by reading, each pinned by a test on the
strict simulated GPU (towerflow.simgpu; a real GPU where present). Each test
is named after its fault and failed before the fix."""

import numpy as np
import pytest
from test_parallel import relative_difference, train

import towerflow as tf
from towerflow.device import physical, runtime


def nccl_group_of(sess):
    """The NCCL group (communicators) a Session's plans run on."""
    return next(value for key, value in sess._state.items()
                if isinstance(key, tuple) and key[0] == "nccl")


def split_gpu(count, memory_limit=1024):
    gpu = tf.config.list_physical_devices("GPU")[0]
    tf.config.set_logical_device_configuration(
        gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=memory_limit)] * count)


# -- fault 1: a GPU value copied to the CPU with np.array (CuPy refuses it) ----------------


def test_a_gpu_value_used_on_the_cpu_comes_through_the_gpu_runtime(gpu_backend):
    with tf.device("/gpu:0"):
        doubled = tf.constant(np.arange(4, dtype=np.float32)) * 2.0
    with tf.device("/cpu:0"):
        total = tf.reduce_sum(doubled) + 1.0        # as DataParallel sums a loss on /cpu:0
    assert tf.Session().run(total) == 13.0


# -- fault 3 (a per-step host read of the labels) and 7 (host reads per op): see
# test_gpu_backend.py's captured CNN, cifar10 recipe and loss-scaled steps; fault 8
# (NCCL across processes): test_mpi_nccl.py.


# -- fault 2: events of a copy between GPUs made on the wrong device ---------------------


@pytest.mark.simulated_gpus(2)
def test_a_value_computed_on_gpu0_is_used_on_gpu1(gpu_backend):
    with tf.device("/gpu:0"):
        x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3)) * 2.0
    with tf.device("/gpu:1"):
        y = x + 1.0
    np.testing.assert_array_equal(tf.Session().run(y),
                                  np.arange(6, dtype=np.float32).reshape(2, 3) * 2 + 1)


@pytest.mark.simulated_gpus(2)
@pytest.mark.parametrize("all_reduce", ["local", "cpu"])
def test_towers_on_two_physical_gpus_match_one_gpu(gpu_backend, all_reduce):
    reference_losses, reference = train(0, 12, device_kind="gpu")
    losses, params = train(2, 12, all_reduce=all_reduce, device_kind="gpu")
    assert relative_difference(params, reference) <= 1e-5
    np.testing.assert_allclose(losses, reference_losses, rtol=1e-5)


# -- fault 4: one kernel cache ("ones" vectors) shared by every GPU and Session ----------


def bias_gradient(device, rows, seed):
    """d(sum(x + bias) * weights)/d(bias) on ``device``: BiasAddGrad over
    ``rows`` x 64 values, past the size where it sums with a ones vector."""
    values = np.random.default_rng(seed).standard_normal((rows, 64)).astype(np.float32)
    with tf.device(device):
        x = tf.constant(values)
        bias = tf.constant(np.zeros(64, np.float32))
        total = tf.reduce_sum(tf.nn.bias_add(x, bias) * x)
        grad = tf.gradients(total, bias)[0]
    return grad, values


def assert_column_sums(value, rows):
    """``value`` is the column sums of ``rows`` up to float32 summation: each
    of the n additions rounds by at most 2**-24 of a partial sum, itself at
    most the sum of |rows| (float64 makes the reference exact enough)."""
    expected = rows.astype(np.float64).sum(axis=0)
    bound = rows.shape[0] * 2.0**-24 * np.abs(rows).astype(np.float64).sum(axis=0)
    assert np.all(np.abs(value - expected) <= bound)


@pytest.mark.simulated_gpus(2)
def test_the_ones_vector_cache_is_per_device(gpu_backend):
    grads = [bias_gradient(device, 128, seed) for seed, device in enumerate(["/gpu:0",
                                                                               "/gpu:1"])]
    sess = tf.Session()
    for grad, _ in grads:     # each GPU's plan on its own: the first one makes the cache
        sess.run(grad)
    values = sess.run([grad for grad, _ in grads])
    for value, (_, expected) in zip(values, grads):
        assert_column_sums(value, expected)


def test_the_ones_vector_cache_is_per_logical_gpu(gpu_backend):
    split_gpu(2)
    grads = [bias_gradient(device, 128, seed) for seed, device in enumerate(["/gpu:0",
                                                                               "/gpu:1"])]
    # One run: /gpu:1's stream reads no vector that /gpu:0's stream may still be filling.
    values = tf.Session(config=tf.ConfigProto(cuda_graphs=False)).run(
        [grad for grad, _ in grads])
    for value, (_, expected) in zip(values, grads):
        assert_column_sums(value, expected)


# -- fault 6: a replay on several logical GPUs did not wait for their streams -------------


def captured_count(sess):
    from towerflow import plan_capture
    return sum(plan.captured for plan, _ in sess._plans.values()
               if isinstance(plan, plan_capture.CapturingPlan))


def test_a_replay_waits_for_work_queued_on_the_other_logical_gpus(gpu_backend):
    split_gpu(2)
    with tf.device("/gpu:1"):       # the plan's first step: the graph replays on its stream
        scale = tf.Variable(np.ones((4, 4), np.float32))
    with tf.device("/gpu:0"):
        var = tf.Variable(np.ones((4, 4), np.float32))
        bump = tf.assign_add(var, np.ones((4, 4), np.float32))
        product = tf.matmul(var, var)
    with tf.device("/gpu:1"):
        product = product * scale
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    for _ in range(2):                      # run op by op, then captured and replayed
        sess.run(product)
    assert captured_count(sess) == 1
    sess.run(bump.op)                       # queued on /gpu:0's stream, not waited for
    np.testing.assert_array_equal(sess.run(product), np.full((4, 4), 16, np.float32))


# -- fault 10: fixtures that fake a GPU left the GPU backend unregistered -----------------


def test_a_gpu_case_passes_after_the_fixtures_that_fake_a_gpu(gpu_backend, monkeypatch):
    from conftest import faked_gpus
    from test_gpu_backend import fake_gpus_do_not_load_the_cupy_backend
    from test_plan_capture import faked_capturing_gpu
    # What the fixtures run, in a row: each must leave the GPU backend (which
    # registers itself once, when first imported) registered as it found it.
    with faked_gpus() as install:
        install(2)
    with faked_capturing_gpu(monkeypatch):
        pass
    fake_gpus_do_not_load_the_cupy_backend()
    physical.set_gpu_probe(None)
    runtime.reset()
    with tf.device("/gpu:0"):
        product = tf.matmul(tf.constant([[1.0, 2.0]]), tf.constant([[3.0], [4.0]]))
    assert tf.Session().run(product).tolist() == [[11.0]]


# -- fault 9: an NCCL group left open by an error, or by a plan with some members ----------


def nccl_members(size=8):
    towers = []
    for index in range(2):
        with tf.device(f"/gpu:{index}"):
            towers.append(tf.fill([size], float(index + 1)))
    return tf.parallel.nccl.all_reduce_members(towers, [0, 1], tf.get_default_graph())


def open_nccl_groups():
    """How deep the simulated NCCL's open group is (a real NCCL cannot say:
    its next collective would hang)."""
    from towerflow import simgpu
    return simgpu.nccl.open_group_depth() if simgpu.is_installed() else 0


@pytest.mark.simulated_gpus(2)
def test_a_plan_with_only_some_nccl_members_is_refused(gpu_backend):
    members = nccl_members()
    sess = tf.Session()
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"nccl_all_reduce_0.*without.*nccl_all_reduce_1"):
        sess.run(members[0])
    assert open_nccl_groups() == 0
    assert [value.tolist() for value in sess.run(members)] == [[3.0] * 8] * 2


@pytest.mark.simulated_gpus(2)
def test_an_error_inside_an_nccl_group_closes_the_group(gpu_backend):
    members = nccl_members()
    sess = tf.Session()
    sess.run(members)
    group = nccl_group_of(sess)
    group.communicators[1].destroy()        # its next allReduce raises, inside the group
    with pytest.raises(tf.errors.OpError, match="nccl_all_reduce_1.*destroyed"):
        sess.run(members)
    assert open_nccl_groups() == 0


# -- fault 5: kernel caches made during a capture, or freed under a live graph ------------


def fed_bias_gradient():
    """BiasAddGrad of a fed [rows, 64] batch on /gpu:0 (a ones vector as long
    as the batch: the kernel caches it, growing it for a longer batch)."""
    with tf.device("/gpu:0"):
        x = tf.placeholder(tf.float32, [None, 64])
        bias = tf.Variable(np.zeros(64, np.float32))
        total = tf.reduce_sum(tf.nn.bias_add(x, bias) * x)
        grad = tf.gradients(total, bias)[0]
    return x, grad


def batch(rows, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, 64)).astype(np.float32)


def test_a_new_fed_shape_runs_op_by_op_before_it_is_captured(gpu_backend):
    x, grad = fed_bias_gradient()
    with tf.device("/gpu:0"):
        rate = tf.placeholder(tf.float32, [])
        # Dropout reads its fed rate on the host: the capture fails there, after
        # BiasAddGrad ran; the step then runs op by op.
        kept = tf.nn.dropout(grad, rate=rate, seed=1)
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    sess.run(kept, {x: batch(128), rate: 0.0})
    value = sess.run(kept, {x: batch(256), rate: 0.0})     # a new shape: a longer vector
    assert_column_sums(value, batch(256))


def test_a_cache_grown_later_keeps_the_memory_a_graph_replays(gpu_backend):
    x, grad = fed_bias_gradient()
    doubled = grad * 2.0
    value = captured_then_grown(x, grad, doubled)
    assert_column_sums(value, batch(128, seed=2))


def captured_then_grown(fed, replayed, grower):
    """``replayed`` captured on 128 fed rows (a 128-long cached vector), the
    cache grown by another plan (``grower`` on 256 rows), then the first graph
    replayed on other rows: its value."""
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    for _ in range(2):                      # op by op, then captured
        sess.run(replayed, {fed: batch(128)})
    assert captured_count(sess) == 1
    sess.run(grower, {fed: batch(256)})     # another plan: the cached vector grows
    sess.run(grower, {fed: batch(256, seed=1)})
    return sess.run(replayed, {fed: batch(128, seed=2)})


def test_batch_norms_ones_vector_grown_later_keeps_the_memory_a_graph_replays(gpu_backend):
    # float16: the generic batch norm (its column sums use a cached ones vector;
    # float32 takes cupy_conv's kernels)
    with tf.device("/gpu:0"):
        x16 = tf.placeholder(tf.float16, [None, 64])
        normalized = tf.cast(tf.layers.batch_normalization(x16, training=True), tf.float32)
        mean = tf.reduce_mean(normalized, axis=0)
        doubled = mean * 2.0
    value = captured_then_grown(x16, mean, doubled)
    # The normalized columns have mean 0; float16 rounds each output (|y| < 4
    # here) by at most 2**-11 of it, so their means are within 2e-3 of 0.
    assert np.all(np.abs(value) <= 2.0**-11 * 4)


def test_a_vector_first_needed_during_a_capture_is_not_kept(gpu_backend):
    import cupy

    from towerflow.backends.filled_vectors import FilledVectors
    ones = FilledVectors(cupy, 1)
    with cupy.cuda.Device(0):
        stream = cupy.cuda.Stream(non_blocking=True)
        pool = cupy.cuda.MemoryPool()
        with stream, cupy.cuda.using_allocator(pool.malloc):
            stream.begin_capture()
            ones.get(4, np.float32)             # recorded, filled only by a replay
            stream.end_capture()
        with stream:
            assert ones.get(4, np.float32).get().tolist() == [1.0] * 4


def test_a_new_fed_shape_whose_kernels_make_state_is_still_captured(gpu_backend, capsys):
    with tf.device("/gpu:0"):
        images = tf.placeholder(tf.float32, [None, None, None, 2])
        # SAME average pooling copies its per-window scales to the GPU on the
        # first call with each image size: a capture cannot copy from the host.
        pooled = tf.nn.avg_pool(images, [1, 3, 3, 1], [1, 2, 2, 1], "SAME")
    sess = tf.Session()
    for size in (8, 8, 6, 6, 6):
        value = np.ones((2, size, size, 2), np.float32)
        np.testing.assert_allclose(sess.run(pooled, {images: value}), 1.0, rtol=1e-6)
    assert "not capturing" not in capsys.readouterr().err
    assert captured_count(sess) == 2


def test_replays_that_fetch_nothing_wait_before_refilling_a_fed_value(gpu_backend):
    with tf.device("/gpu:0"):
        x = tf.placeholder(tf.float32, [4])
        total = tf.Variable(np.zeros(4, np.float32))
        accumulate = tf.assign_add(total, x).op
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    for step in range(4):       # op by op, captured, then two replays: no host read between
        sess.run(accumulate, {x: np.full(4, step, np.float32)})
    assert captured_count(sess) == 1
    assert sess.run(total).tolist() == [6.0] * 4
