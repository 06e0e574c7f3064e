"""Open GPU defects of issue 30 (copies between GPUs, NCCL communicators and
memory pools across Sessions), each pinned by a test on the strict simulated
GPU (towerflow.simgpu; a real GPU where present) that failed before its fix."""

import gc

import numpy as np
import pytest
from test_gpu_faults import nccl_group_of, split_gpu

import towerflow as tf
from towerflow import simgpu

NON_CONTIGUOUS = "CuPy cannot copy non-contiguous array between devices"


@pytest.fixture
def cp():
    with simgpu.installed(gpus=2, memory_bytes=2**30) as module:
        yield module


def strided_on_gpu0(cp):
    """A [3, 2, 4] view of GPU 0 memory that is neither C- nor F-contiguous."""
    value = cp.arange(24.0).reshape(2, 3, 4).transpose(1, 0, 2)
    cp.cuda.Device(0).synchronize()     # GPU 1's work is issued after it is written
    assert not value.flags.c_contiguous and not value.flags.f_contiguous
    return value


# -- a copy of a non-contiguous array between two GPUs -----------------------------------


def test_the_simulator_refuses_a_non_contiguous_copy_between_gpus_as_cupy(cp):
    value = strided_on_gpu0(cp)
    with cp.cuda.Device(1):
        # CuPy 14 (core.pyx, ndarray.copy): order 'K' keeps the strides, and
        # a peer copy of them is refused.
        for copy in (lambda: cp.array(value), lambda: cp.asarray(value),
                     lambda: value.copy(order="K")):
            with pytest.raises(NotImplementedError, match=NON_CONTIGUOUS):
                copy()


def test_the_simulator_copies_between_gpus_what_cupy_copies(cp):
    contiguous = cp.arange(6.0).reshape(2, 3)
    transposed = contiguous.T           # F-contiguous
    cp.cuda.Device(0).synchronize()
    with cp.cuda.Device(1):
        # one peer memcpy each, of the memory as it is laid out
        copies = [contiguous.copy(), cp.array(transposed), cp.asarray(contiguous)]
        copied_into = cp.empty((2, 3))
        cp.copyto(copied_into, contiguous)
        values = [copied.get() for copied in (*copies, copied_into)]
    assert {copied.device.id for copied in (*copies, copied_into)} == {1}
    expected = np.arange(6.0).reshape(2, 3)
    for value, wanted in zip(values, [expected, expected.T, expected, expected]):
        np.testing.assert_array_equal(value, wanted)


def test_a_strided_copy_between_gpus_in_c_order_races_as_in_cupy(cp):
    value = strided_on_gpu0(cp)
    with cp.cuda.Device(1):
        # NOTE: CuPy lays the view out on GPU 0's current stream, then copies
        # on GPU 1's: nothing orders the two (towerflow lays it out itself).
        with pytest.raises(simgpu.RaceError, match="'peer copy' on .*gpu1"):
            value.copy()
        with pytest.raises(simgpu.RaceError, match="'peer copy' on .*gpu1"):
            cp.copyto(cp.empty((3, 2, 4)), value)


@pytest.mark.simulated_gpus(2)
@pytest.mark.parametrize("make_view", [
    lambda x: tf.transpose(x, [1, 0, 2]),
    lambda x: x[:, :, ::2],
], ids=["transpose", "strided_slice"])
def test_a_strided_view_on_gpu0_is_used_on_gpu1(gpu_backend, make_view):
    value = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    with tf.device("/gpu:0"):
        viewed = make_view(tf.constant(value) * 2.0)
    with tf.device("/gpu:1"):
        used = viewed + 1.0
    with tf.Session() as sess:
        expected = sess.run(viewed) + 1.0
        np.testing.assert_array_equal(sess.run(used), expected)


# -- NCCL communicators made once per set of GPUs ----------------------------------------


def nccl_members(size=8):
    towers = []
    for index in range(2):
        with tf.device(f"/gpu:{index}"):
            towers.append(tf.fill([size], float(index + 1)))
    return tf.parallel.nccl.all_reduce_members(towers, [0, 1], tf.get_default_graph())


@pytest.mark.simulated_gpus(2)
def test_sessions_over_the_same_gpus_share_one_nccl_clique(gpu_backend):
    members = nccl_members()
    for _ in range(3):
        with tf.Session() as sess:
            assert [value.tolist() for value in sess.run(members)] == [[3.0] * 8] * 2
    assert simgpu.nccl.init_all_count() == 1


@pytest.mark.simulated_gpus(2)
def test_a_failed_nccl_clique_is_not_handed_to_the_next_session(gpu_backend):
    members = nccl_members()
    broken = tf.Session()
    broken.run(members)
    group = nccl_group_of(broken)
    group.communicators[1].destroy()        # its next allReduce raises
    with pytest.raises(tf.errors.OpError, match="destroyed"):
        broken.run(members)
    broken.close()
    with tf.Session() as sess:
        assert [value.tolist() for value in sess.run(members)] == [[3.0] * 8] * 2
    assert simgpu.nccl.init_all_count() == 2


@pytest.mark.simulated_gpus(2)
def test_an_nccl_all_reduce_of_a_transposed_value_sums_it_element_by_element(gpu_backend):
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    towers = []
    for index in range(2):
        with tf.device(f"/gpu:{index}"):
            towers.append(tf.transpose(tf.constant(base) * float(index + 1)))
    members = tf.parallel.nccl.all_reduce_members(towers, [0, 1], tf.get_default_graph())
    with tf.Session() as sess:
        for total in sess.run(members):     # NCCL reads count elements from data.ptr
            np.testing.assert_array_equal(total, (base * 3).T)


# -- memory pools given back when a Session closes ----------------------------------------


def gpu1_product(rows=256):
    with tf.device("/gpu:1"):
        x = tf.placeholder(tf.float32, [rows, rows])
        return x, tf.matmul(x, x) + 1.0


@pytest.mark.simulated_gpus(2)
def test_a_closed_session_gives_its_gpu_memory_back(gpu_backend):
    x, product = gpu1_product()
    ones = np.ones([256, 256], np.float32)
    gc.collect()
    before = simgpu.memory.device_bytes(1)
    closed = []                 # a program may keep closed Sessions (or cycles may)
    for _ in range(3):
        with tf.Session() as sess:
            for _ in range(3):                  # the second run captures a CUDA graph
                sess.run(product, {x: ones})
            assert simgpu.memory.device_bytes(1) > before
        closed.append(sess)
        assert simgpu.memory.device_bytes(1) == before


# -- events without timing, one host callback a step ------------------------------------


def gpu_counts():
    """What the simulated GPUs were charged for since the simulator was installed."""
    return dict(simgpu.state.world().counts)


@pytest.mark.simulated_gpus(2)
def run_across_two_gpus(steps):
    """A value computed on /gpu:0 and used on /gpu:1, run ``steps`` times."""
    fed = tf.placeholder(tf.float32, [4])
    with tf.device("/gpu:0"):
        doubled = fed * 2.0
    with tf.device("/gpu:1"):
        used = doubled + 1.0
    with tf.Session() as sess:
        for step in range(steps):
            assert sess.run(used, {fed: np.full(4, step, np.float32)}).tolist() == \
                [2.0 * step + 1.0] * 4


@pytest.mark.simulated_gpus(2)
def test_copies_between_gpus_order_their_streams_with_untimed_events(gpu_backend):
    run_across_two_gpus(3)
    assert gpu_counts().get("timed events", 0) == 0


def test_replays_over_logical_gpus_order_their_streams_with_untimed_events(gpu_backend):
    split_gpu(2)
    run_across_two_gpus(4)          # captured at the second run, replayed after
    assert gpu_counts().get("timed events", 0) == 0


def test_fed_values_keep_their_pinned_buffers_with_one_host_callback_a_step(gpu_backend):
    fed = [tf.placeholder(tf.float32, [4]) for _ in range(3)]
    with tf.device("/gpu:0"):
        total = fed[0] + fed[1] * fed[2]
    config = tf.ConfigProto(cuda_graphs=False)          # every step runs op by op
    with tf.Session(config=config) as sess:
        for step in range(4):
            values = {tensor: np.full(4, step + index, np.float32)
                      for index, tensor in enumerate(fed)}
            expected = step + (step + 1.0) * (step + 2.0)
            assert sess.run(total, values).tolist() == [expected] * 4
    assert gpu_counts().get("host callbacks", 0) == 4


# -- one memory pool per logical GPU -----------------------------------------------------


def test_sessions_open_at_once_share_their_logical_gpus_memory_limit(gpu_backend):
    """As TensorFlow's allocator, one per device and process: two Sessions
    open at once on a logical GPU of 8 MiB cannot each hold a 3 MiB variable
    and its 3 MiB initial value."""
    split_gpu(1, memory_limit=8)
    with tf.device("/gpu:0"):
        weights = tf.Variable(tf.zeros([3 * 2**20 // 4]))      # 3 MiB of float32
    first, second = tf.Session(), tf.Session()
    try:
        first.run(weights.initializer)
        with pytest.raises(tf.errors.ResourceExhaustedError, match="GPU:0"):
            second.run(weights.initializer)
        first.close()           # its memory comes back for the other Session
        second.run(weights.initializer)
    finally:
        first.close()
        second.close()
