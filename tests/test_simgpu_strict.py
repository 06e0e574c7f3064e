"""The simulated GPU as strict as CUDA where towerflow can trip (issue 30,
item 3): the pinned pool reused as CuPy's, capture and pools on GPU 1 of 2,
NCCL inside a capture, reads of never-written memory, pool blocks split as
CuPy splits them. Each simulator rule is tested on the simulator alone, then
on towerflow's GPU backend (where a planted bug in the backend shows it)."""

import logging

import numpy as np
import pytest

import towerflow as tf
from towerflow import simgpu
from towerflow.backends import device_runtime
from towerflow.device import runtime

KIB = 1024
LIMIT_MIB = 40


@pytest.fixture
def cp():
    with simgpu.installed(gpus=2, memory_bytes=2**30) as module:
        yield module


@pytest.fixture
def cupyx(cp):
    import sys
    return sys.modules["cupyx"]


def gpu_runtime(index):
    device = [d for d in runtime.logical_devices() if d.device_type == "GPU"][index]
    return device_runtime(device)


def captured_count(sess):
    from towerflow import plan_capture
    return sum(plan.captured for plan, _ in sess._plans.values()
               if isinstance(plan, plan_capture.CapturingPlan))


# -- 1. the pinned pool hands a freed buffer out again at once ---------------------------


def test_a_freed_pinned_buffer_is_handed_out_again_for_its_rounded_size(cupyx):
    first = cupyx.empty_pinned((256,), np.float32)          # 1024 bytes
    address = first.ctypes.data
    del first
    again = cupyx.empty_pinned((200,), np.float32)          # 800 bytes: rounded to 1024
    assert again.ctypes.data == address


def test_a_pinned_buffer_freed_before_its_copy_ran_is_caught(cp, cupyx):
    stream = cp.cuda.Stream(non_blocking=True)
    staged = cupyx.empty_pinned((4,), np.float32)
    staged[...] = 1.0
    cp.empty(4, np.float32).set(staged, stream=stream)      # reads `staged` later
    del staged                                             # back in the pool at once
    reused = cupyx.empty_pinned((4,), np.float32)
    with pytest.raises(simgpu.RaceError, match="handed out again by the pinned memory pool"):
        reused[...] = 2.0


def test_a_host_callback_keeps_a_pinned_buffer_until_its_copy_ran(cp, cupyx):
    stream = cp.cuda.Stream(non_blocking=True)
    staged = cupyx.empty_pinned((4,), np.float32)
    staged[...] = 1.0
    cp.empty(4, np.float32).set(staged, stream=stream)
    address = staged.ctypes.data
    stream.launch_host_func(lambda arg: None, staged)
    del staged
    other = cupyx.empty_pinned((4,), np.float32)
    assert other.ctypes.data != address                     # still held by the stream
    other[...] = 2.0
    stream.synchronize()                                   # the callback ran: let go
    del other
    again = cupyx.empty_pinned((4,), np.float32)
    assert cupyx.empty_pinned((4,), np.float32).ctypes.data == address or \
        again.ctypes.data == address
    again[...] = 3.0                                       # the copy is known done


def test_to_device_keeps_each_pinned_buffer_until_its_copy_ran(gpu_backend):
    device = gpu_runtime(0)
    first = device.to_device(np.full(8, 1.0, np.float32))
    second = device.to_device(np.full(8, 2.0, np.float32))     # same size: pool reuse
    assert device.to_host(first).tolist() == [1.0] * 8
    assert device.to_host(second).tolist() == [2.0] * 8


def test_fed_values_of_one_size_keep_their_pinned_buffers(gpu_backend):
    a, b = tf.placeholder(tf.float32, [8]), tf.placeholder(tf.float32, [8])
    with tf.device("/gpu:0"):
        total = a + b
    with tf.Session(config=tf.ConfigProto(cuda_graphs=False)) as sess:
        for step in range(3):
            value = sess.run(total, {a: np.full(8, step, np.float32),
                                     b: np.ones(8, np.float32)})
            assert value.tolist() == [step + 1.0] * 8


# -- 2. capture, replay, pools and limits on GPU 1 of 2 ----------------------------------


def captured_on(cp, device, stream=None):
    with cp.cuda.Device(device):
        stream = stream or cp.cuda.Stream(non_blocking=True)
        x = cp.zeros(4)
        cp.cuda.Device(device).synchronize()
        with stream:
            stream.begin_capture()
            x += 1
            graph = stream.end_capture()
    return graph, stream, x


def test_a_graph_replayed_while_another_device_is_current_is_refused(cp):
    graph, stream, x = captured_on(cp, 1)
    with pytest.raises(simgpu.CUDARuntimeError, match="GPU 0 is current"):
        graph.launch(stream)
    with cp.cuda.Device(1):
        graph.launch(stream)
        assert x.get(stream=stream).tolist() == [1.0] * 4


def test_a_stream_of_gpu1_is_refused_while_gpu0_is_current(cp):
    with cp.cuda.Device(1):
        stream = cp.cuda.Stream(non_blocking=True)
    with pytest.raises(RuntimeError, match="not the current device"), stream:
        pass


def test_a_pool_limit_applies_to_the_current_device_only(cp):
    pool = cp.cuda.MemoryPool()
    with cp.cuda.Device(1):
        pool.set_limit(size=4 * KIB)
        assert pool.get_limit() == 4 * KIB
    assert pool.get_limit() == 0
    with cp.cuda.using_allocator(pool.malloc):
        cp.empty(8 * KIB, np.uint8)                         # GPU 0: no limit
        with cp.cuda.Device(1), pytest.raises(cp.cuda.memory.OutOfMemoryError,
                                              match="limit set to: 4,096"):
            cp.empty(8 * KIB, np.uint8)


def test_a_replay_is_refused_once_the_graphs_pool_is_gone(cp):
    with cp.cuda.Device(1):
        stream = cp.cuda.Stream(non_blocking=True)
        x = cp.ones(256)
        cp.cuda.Device(1).synchronize()
        pool = cp.cuda.MemoryPool()
        with stream, cp.cuda.using_allocator(pool.malloc):
            stream.begin_capture()
            x[...] = (x + 1) * 2            # the temporary goes back to the graph's pool
            graph = stream.end_capture()
        del pool
        with pytest.raises(simgpu.RaceError, match="given back to the GPU"):
            graph.launch(stream)


def two_gpus_with_limits(limit_mib):
    gpus = tf.config.list_physical_devices("GPU")
    tf.config.set_logical_device_configuration(
        gpus[1], [tf.config.LogicalDeviceConfiguration(memory_limit=limit_mib)])


@pytest.mark.simulated_gpus(2)
def test_a_plan_on_gpu1_of_2_is_captured_and_replayed(gpu_backend):
    with tf.device("/gpu:1"):
        fed = tf.placeholder(tf.float32, [64])
        scale = tf.Variable(np.full(64, 2.0, np.float32))
        out = tf.reduce_sum(tf.nn.relu(fed * scale + 1.0) * scale)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for step in range(4):                   # op by op, captured, replayed twice
            value = np.full(64, step, np.float32)
            assert sess.run(out, {fed: value}) == pytest.approx(64 * 2 * (2 * step + 1))
        assert captured_count(sess) == 1


@pytest.mark.simulated_gpus(2)
def test_a_logical_gpu_on_gpu1_enforces_its_memory_limit(gpu_backend):
    two_gpus_with_limits(64)
    with tf.device("/gpu:1"):
        big = tf.zeros([64, 1024, 1024])        # 256 MiB > 64 MiB
    with pytest.raises(tf.errors.ResourceExhaustedError, match=r"GPU:1.*64 MiB"):
        tf.Session().run(big)


@pytest.mark.simulated_gpus(2)
def test_a_capture_on_gpu1_stays_within_its_memory_limit(gpu_backend):
    """The graph's own pool is capped at what the logical GPU has left: a
    capture needing more fails (and the plan runs op by op), never taking
    GPU 1 past the limit."""
    two_gpus_with_limits(LIMIT_MIB)
    with tf.device("/gpu:1"):
        fed = tf.placeholder(tf.float32, [2**20])                # 4 MiB a value
        out = tf.reduce_sum(((fed * 2.0 + 1.0) * 3.0 - 1.0) * 0.5)
    limit = LIMIT_MIB * 2**20
    with tf.Session() as sess:
        for step in range(4):
            value = np.full(2**20, step, np.float32)
            expected = 2**20 * (((step * 2.0 + 1.0) * 3.0 - 1.0) * 0.5)
            assert sess.run(out, {fed: value}) == pytest.approx(expected)
            assert simgpu.memory.device_bytes(1) <= limit


# -- 3. NCCL inside a capture ---------------------------------------------------------


def test_a_one_rank_all_reduce_is_captured_and_replayed(cp):
    from cupy.cuda import nccl
    (communicator,) = nccl.NcclCommunicator.initAll([1])
    with cp.cuda.Device(1):
        stream = cp.cuda.Stream(non_blocking=True)
        x, out = cp.ones(4, np.float32), cp.zeros(4, np.float32)
        cp.cuda.Device(1).synchronize()
        with stream:
            stream.begin_capture()
            x += 1
            communicator.allReduce(x.data.ptr, out.data.ptr, 4, nccl.NCCL_FLOAT32,
                                   nccl.NCCL_SUM, stream.ptr)
            graph = stream.end_capture()
        for _ in range(2):
            graph.launch(stream)
        assert out.get(stream=stream).tolist() == [3.0] * 4


def test_a_captured_collective_over_several_local_ranks_is_refused(cp):
    from cupy.cuda import nccl
    communicators = nccl.NcclCommunicator.initAll([0, 1])
    streams, buffers = [], []
    for device in (0, 1):
        with cp.cuda.Device(device):
            streams.append(cp.cuda.Stream(non_blocking=True))
            buffers.append(cp.ones(4, np.float32))
            cp.cuda.Device(device).synchronize()
    streams[0].begin_capture()
    nccl.groupStart()
    for communicator, stream, buffer in zip(communicators, streams, buffers):
        communicator.allReduce(buffer.data.ptr, buffer.data.ptr, 4, nccl.NCCL_FLOAT32,
                               nccl.NCCL_SUM, stream.ptr)
    with pytest.raises(NotImplementedError, match="one rank of its clique"):
        nccl.groupEnd()


def test_a_one_rank_nccl_training_step_is_captured(gpu_backend, caplog):
    from test_parallel import relative_difference, train
    reference_losses, reference = train(0, 12, device_kind="gpu")
    with caplog.at_level(logging.INFO):
        losses, params = train(1, 12, all_reduce="nccl", device_kind="gpu")
    assert "CUDA graphs: not capturing" not in caplog.text
    assert relative_difference(params, reference) <= 1e-6
    np.testing.assert_allclose(losses, reference_losses, rtol=1e-6)


# -- 4. reads of never-written device memory ----------------------------------------------


def test_a_read_of_never_written_memory_is_refused(cp):
    fresh = cp.empty(4)
    for read in (lambda: fresh + 1, fresh.get, lambda: cp.array(fresh)):
        with pytest.raises(simgpu.UninitializedReadError, match="no kernel or copy wrote"):
            read()


def test_writes_of_every_kind_count_and_outputs_are_not_reads(cp):
    made = [cp.zeros(4), cp.ones(4), cp.full(4, 2.0), cp.arange(4.0), cp.asarray([1.0] * 4)]
    assert [value.sum().get().item() for value in made] == [0.0, 4.0, 8.0, 6.0, 4.0]
    out = cp.empty(4)
    cp.add(made[1], 1, out=out)                          # written, not read
    filled, assigned = cp.empty(4), cp.empty(4)
    filled.fill(3.0)
    assigned[...] = 5.0
    assert (out + filled + assigned).get().tolist() == [10.0] * 4


def test_pool_memory_handed_out_again_counts_as_never_written(cp):
    used = cp.ones(64)
    del used                                             # cached; its bytes still hold ones
    again = cp.empty(64)
    with pytest.raises(simgpu.UninitializedReadError):
        again.sum()


# -- 5. pool blocks split and merged as CuPy's ------------------------------------------


def test_a_larger_free_block_is_split_for_a_smaller_request(cp):
    pool = cp.cuda.MemoryPool()
    with cp.cuda.using_allocator(pool.malloc):
        large = cp.zeros(4 * KIB, np.uint8)
        base = large.data.ptr
        del large
        small = cp.zeros(800, np.uint8)                   # rounded to 1024: split off
        rest = cp.zeros(3 * KIB, np.uint8)                # the rest of the same block
        assert (small.data.ptr, rest.data.ptr) == (base, base + KIB)
        assert (pool.total_bytes(), pool.used_bytes()) == (4 * KIB, 4 * KIB)
        del small, rest                                   # merged back into one block
        assert cp.zeros(4 * KIB, np.uint8).data.ptr == base
        assert pool.total_bytes() == 4 * KIB


def test_a_split_block_keeps_the_reads_of_the_memory_it_came_from(cp):
    first, second = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with first:
        large = cp.ones(512)                              # 4 KiB, written on `first`
    second.wait_event(first.record())
    with second:
        large.sum()                                       # read on `second`
    del large                                             # cached in `first`'s arena
    with first:
        small = cp.empty(64)                              # split from it
        with pytest.raises(simgpu.RaceError, match="read on"):
            small.fill(0.0)


def test_free_all_blocks_keeps_a_split_block(cp):
    pool = cp.cuda.MemoryPool()
    with cp.cuda.using_allocator(pool.malloc):
        large = cp.zeros(4 * KIB, np.uint8)
        del large
        small = cp.zeros(KIB, np.uint8)
        pool.free_all_blocks()                            # the rest is part of a split
        assert pool.total_bytes() == 4 * KIB
        del small
        pool.free_all_blocks()
        assert pool.total_bytes() == 0
