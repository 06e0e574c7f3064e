"""The simulated GPU (towerflow.simgpu) enforces CUDA's rules: each test
breaks one rule the way a GPU backend could, and expects the error a real
GPU would give (or the error standing in for its undefined behaviour)."""

import contextlib
import types

import numpy as np
import pytest

from towerflow import simgpu
from towerflow.simgpu import cuda_emulation


@pytest.fixture
def cp():
    with simgpu.installed(gpus=2, memory_bytes=2**30) as module:
        yield module


def test_arrays_compute_like_numpy_and_stay_on_their_device(cp):
    x = cp.arange(6.0).reshape(2, 3)
    y = (x * 2 + 1).sum(axis=0)
    assert isinstance(y, cp.ndarray) and y.device.id == 0
    np.testing.assert_array_equal(y.get(), [8.0, 12.0, 16.0])
    with cp.cuda.Device(1):
        assert cp.ones(2).device.id == 1


def test_implicit_conversion_to_numpy_is_refused_as_in_cupy(cp):
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array"):
        np.asarray(cp.ones(3))
    with pytest.raises(TypeError, match="Unsupported type"):
        cp.ones(3) + np.ones(3)


def test_a_kernel_on_another_devices_array_is_refused(cp):
    with cp.cuda.Device(1):
        on_gpu1 = cp.ones(3)
    with pytest.raises(ValueError, match="array device = 1 while current = 0"):
        on_gpu1 * 2


def test_a_peer_copy_needs_the_source_stream_to_be_waited_on(cp):
    with cp.cuda.Device(0):
        stream0 = cp.cuda.Stream(non_blocking=True)
        with stream0:
            value = cp.arange(4.0) * 3
    with cp.cuda.Device(1):
        stream1 = cp.cuda.Stream(non_blocking=True)
        with stream1, pytest.raises(simgpu.RaceError, match="not ordered after"):
            cp.array(value)
        with cp.cuda.Device(0):
            done = stream0.record()
        stream1.wait_event(done)
        with stream1:
            copied = cp.array(value)
        assert copied.device.id == 1
        np.testing.assert_array_equal(copied.get(stream=stream1), [0.0, 3.0, 6.0, 9.0])


def test_an_event_recorded_on_another_devices_stream_is_refused(cp):
    with cp.cuda.Device(1):
        stream1 = cp.cuda.Stream(non_blocking=True)
    with pytest.raises(simgpu.CUDARuntimeError, match="InvalidResourceHandle"):
        stream1.record()     # the event is made on GPU 0, the current device


def test_work_on_two_streams_is_unordered_until_an_event_orders_it(cp):
    first, second = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with first:
        x = cp.ones(4) * 2
    with second, pytest.raises(simgpu.RaceError, match="written on"):
        x + 1
    second.wait_event(first.record())
    with second:
        np.testing.assert_array_equal((x + 1).get(stream=second), [3.0] * 4)


def test_a_write_must_follow_the_reads_of_other_streams(cp):
    first, second = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    x = cp.ones(4)
    cp.cuda.get_current_stream().synchronize()
    with first:
        total = x.sum()
    with second, pytest.raises(simgpu.RaceError, match="read on"):
        x.fill(0)            # first may still be reading x
    first.synchronize()
    with second:
        x.fill(0)
    del total


def test_the_host_sees_device_work_only_through_a_synchronising_read(cp):
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        x = cp.full((3,), 7.0)
        assert float(x.sum()) == 21.0            # a blocking read on this stream
    np.testing.assert_array_equal(cp.asnumpy(x, stream=stream), [7.0] * 3)


def test_the_host_may_not_write_a_pinned_buffer_a_copy_may_still_read(cp):
    import cupyx
    stream = cp.cuda.Stream(non_blocking=True)
    pinned = cupyx.empty_pinned((4,), np.float32)
    pinned[...] = 1.0
    target = cp.empty(4, np.float32)
    target.set(pinned, stream=stream)
    with pytest.raises(simgpu.RaceError, match="pinned buffer"):
        pinned[...] = 2.0
    stream.synchronize()
    pinned[...] = 2.0


def test_freed_memory_reused_on_a_stream_keeps_its_readers(cp):
    first, second = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with first:
        x = cp.ones(256, np.float32)
    second.wait_event(first.record())
    with second:
        y = x * 2                        # second reads x's block
    del x                                # freed while second may still read it
    with first, pytest.raises(simgpu.RaceError, match="read on"):
        cp.zeros(256, np.float32)        # the pool hands first the same block
    del y


def test_a_pool_refuses_past_its_limit_with_cupys_error(cp):
    pool = cp.cuda.MemoryPool()
    pool.set_limit(size=4096)
    with cp.cuda.using_allocator(pool.malloc):
        kept = cp.empty(512, np.float64)
        with pytest.raises(cp.cuda.memory.OutOfMemoryError, match="limit set to: 4,096"):
            cp.empty(8, np.float64)
    assert pool.used_bytes() == 4096
    del kept


@contextlib.contextmanager
def capturing(cp):
    """A non-blocking stream, after the work queued so far, capturing from a
    memory pool of its own."""
    stream = cp.cuda.Stream(non_blocking=True)
    cp.cuda.get_current_stream().synchronize()
    with stream, cp.cuda.using_allocator(cp.cuda.MemoryPool().malloc):
        stream.begin_capture()
        yield stream


def test_capture_records_work_that_each_launch_replays(cp):
    x = cp.zeros(3)
    with capturing(cp) as stream:
        y = x + 1
        x[...] = y
        graph = stream.end_capture()
        with pytest.raises(simgpu.UninitializedReadError):
            y.get()                         # recorded, not run: y was never written
        np.testing.assert_array_equal(x.get(), [0.0] * 3)
        for _ in range(3):
            graph.launch(stream)
        np.testing.assert_array_equal(x.get(), [3.0] * 3)


@pytest.mark.parametrize("forbidden", ["synchronize", "host read", "pageable copy",
                                       "shared pool"])
def test_capture_refuses_what_cuda_refuses(cp, forbidden):
    stream = cp.cuda.Stream(non_blocking=True)
    x = cp.ones(3)
    shared = cp.cuda.MemoryPool()
    with cp.cuda.using_allocator(shared.malloc):
        cp.empty(1)
    cp.cuda.get_current_stream().synchronize()
    with stream:
        stream.begin_capture()
        with pytest.raises(simgpu.CUDARuntimeError, match="capturing"):
            if forbidden == "synchronize":
                stream.synchronize()
            elif forbidden == "host read":
                bool(x.sum() > 0)
            elif forbidden == "pageable copy":
                cp.asarray(np.ones(3))
            else:
                with cp.cuda.using_allocator(shared.malloc):
                    x * 2


def doubling_graph(cp, size):
    """x * 2 captured from a pool of its own: its stream, graph, input x,
    output and pool."""
    stream, pool = cp.cuda.Stream(non_blocking=True), cp.cuda.MemoryPool()
    x = cp.arange(float(size))
    cp.cuda.get_current_stream().synchronize()
    with stream, cp.cuda.using_allocator(pool.malloc):
        stream.begin_capture()
        doubled = x * 2
        graph = stream.end_capture()
    return types.SimpleNamespace(stream=stream, graph=graph, x=x, doubled=doubled, pool=pool)


def test_a_graph_pool_serves_allocations_during_capture(cp):
    captured = doubling_graph(cp, 3)
    captured.graph.launch(captured.stream)
    np.testing.assert_array_equal(captured.doubled.get(stream=captured.stream),
                                  [0.0, 2.0, 4.0])


def test_a_random_generator_draws_anew_in_every_replay(cp):
    stream = cp.cuda.Stream(non_blocking=True)
    rng = cp.random.default_rng(1)
    with stream:
        stream.begin_capture()
        draw = rng.random((8,), dtype=np.float32)
        graph = stream.end_capture()
        graph.launch(stream)
        first = draw.get()
        graph.launch(stream)
        assert not np.array_equal(first, draw.get())


def test_elementwise_kernels_run_their_c_code(cp):
    kernel = cp.ElementwiseKernel(
        "T grad, L lr, bool nesterov", "T var, T accum",
        """accum = accum * (T)0.5 + grad;
           T step = nesterov ? (accum + grad) * (T)lr : accum * (T)lr;
           var = var - step;""", "update")
    var, accum = cp.ones(3, np.float32), cp.zeros(3, np.float32)
    # NOTE: L takes its type from an array only (see the binding tests below).
    kernel(cp.full((3,), 2.0, np.float32), cp.asarray(0.25), True, var, accum)
    np.testing.assert_allclose(accum.get(), [2.0] * 3)
    np.testing.assert_allclose(var.get(), [1 - 4.0 * 0.25] * 3)
    assert var.dtype == np.float32


def test_elementwise_scalars_bind_no_type_placeholder(cp):
    """As CuPy 14's _decide_params_type_core: only arrays bind a placeholder;
    a Python or NumPy scalar whose letter no array binds is a KeyError."""
    kernel = cp.ElementwiseKernel("T x, L lr", "T y", "y = x * (T)lr;", "scaled")
    x = cp.ones(3, np.float32)
    for scalar in (0.25, 2, True, np.float32(0.25)):
        with pytest.raises(KeyError, match="'L'"):
            kernel(x, scalar)
    assert kernel(x, cp.asarray(0.5, np.float16)).dtype == np.float32


def test_elementwise_scalar_takes_the_type_an_array_binds(cp):
    """A scalar is cast to its parameter's bound type (as NumPy assigns it:
    a NaN into an integer type is refused)."""
    kernel = cp.ElementwiseKernel("T x, T s", "T y", "y = x + s;", "shifted")
    result = kernel(cp.arange(3, dtype=np.int8), 2.9)
    assert result.dtype == np.int8
    np.testing.assert_array_equal(result.get(), [2, 3, 4])
    with pytest.raises(ValueError, match="NaN"):
        kernel(cp.arange(3, dtype=np.int32), float("nan"))


def test_elementwise_outputs_bind_before_inputs(cp):
    kernel = cp.ElementwiseKernel("T x, T y", "T z", "z = x + y;", "add")
    x, y = cp.ones(2, np.float32), cp.ones(2, np.float64)
    with pytest.raises(TypeError, match="^Type is mismatched. x float32 float64 T$"):
        kernel(x, y, cp.zeros(2, np.float64))
    with pytest.raises(TypeError, match="^Type is mismatched. y float64 float32 T$"):
        kernel(x, y)


def test_elementwise_named_types_are_numpy_dtypes_and_checked(cp):
    """A named parameter type is numpy.dtype(name): 'float' is float64."""
    kernel = cp.ElementwiseKernel("float x, int32 n", "float32 y", "y = x * n;", "named")
    with pytest.raises(TypeError, match="^Type is mismatched. x float32 float64$"):
        kernel(cp.ones(2, np.float32), 3)
    with pytest.raises(TypeError, match="^Type is mismatched. y float64 float32$"):
        kernel(cp.ones(2), 3, cp.zeros(2, np.float64))
    np.testing.assert_array_equal(kernel(cp.full(2, 1.5), 3).get(), [4.5, 4.5])


def test_elementwise_arguments_as_cupy_takes_them(cp):
    """Outputs all or none; a NumPy array is no argument; some array sets the size."""
    kernel = cp.ElementwiseKernel("T x, T s", "T y, T z", "y = x; z = s;", "pair")
    x = cp.ones(2, np.float32)
    with pytest.raises(TypeError, match="^Wrong number of arguments for 'pair'. It must be "
                                        r"either 2 or 4 \(with outputs\), but given 3.$"):
        kernel(x, 1.0, cp.zeros(2, np.float32))
    with pytest.raises(TypeError, match="Unsupported type <class 'numpy.ndarray'>"):
        kernel(x, np.ones(2, np.float32))
    with pytest.raises(ValueError, match="^Loop size is undecided.$"):
        cp.ElementwiseKernel("float32 a", "float32 b", "b = a;", "copy")(1.0)


def test_elementwise_c_beyond_the_translator_runs_compiled_or_is_refused(cp, monkeypatch):
    """With a compiler the operation is compiled as C (a loop included);
    without one, C the translator cannot read is refused, never run wrong."""
    operation = "T total = 0;\nfor (int k = 0; k < 3; ++k) total += x;\ny = total;"
    if cuda_emulation.available():
        kernel = cp.ElementwiseKernel("T x", "T y", operation, "thrice")
        np.testing.assert_array_equal(kernel(cp.arange(4.0)).get(), [0.0, 3.0, 6.0, 9.0])
    monkeypatch.setenv(cuda_emulation.SWITCH, "0")
    with pytest.raises(NotImplementedError, match="cannot"):
        cp.ElementwiseKernel("T x", "T y", operation, "thrice")


def test_nccl_all_reduce_in_one_group(cp):
    from cupy.cuda import nccl
    communicators = nccl.NcclCommunicator.initAll([0, 1])
    values, streams = [], []
    for device in (0, 1):
        with cp.cuda.Device(device):
            values.append(cp.full((4,), float(device + 1), np.float32))
            streams.append(cp.cuda.get_current_stream())
    nccl.groupStart()
    for rank, value in enumerate(values):
        with cp.cuda.Device(rank):
            communicators[rank].allReduce(value.data.ptr, value.data.ptr, 4,
                                          nccl.NCCL_FLOAT32, nccl.NCCL_SUM, streams[rank].ptr)
    nccl.groupEnd()
    for rank, value in enumerate(values):
        with cp.cuda.Device(rank):
            np.testing.assert_array_equal(value.get(), [3.0] * 4)


def test_a_collective_that_some_ranks_never_join_raises_instead_of_hanging(cp):
    from cupy.cuda import nccl
    communicators = nccl.NcclCommunicator.initAll([0, 1])
    value = cp.ones(4, np.float32)
    stream = cp.cuda.get_current_stream()
    with pytest.raises(nccl.NcclError, match="would hang"):
        communicators[0].allReduce(value.data.ptr, value.data.ptr, 4, nccl.NCCL_FLOAT32,
                                   nccl.NCCL_SUM, stream.ptr)


def test_cuda_visible_devices_hides_simulated_gpus(cp, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert cp.cuda.runtime.getDeviceCount() == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cp.cuda.runtime.getDeviceCount() == 0


def test_uninstall_gives_back_the_modules_it_replaced():
    import sys
    before = sys.modules.get("cupy")
    with simgpu.installed(gpus=1) as module:
        assert sys.modules["cupy"] is module
    assert sys.modules.get("cupy") is before
    assert not simgpu.is_installed()


def test_a_stream_is_used_only_inside_its_devices_context(cp):
    with cp.cuda.Device(1):
        on_gpu1 = cp.cuda.Stream(non_blocking=True)
    with pytest.raises(RuntimeError, match="not the current device"), on_gpu1:
        pass
    with cp.cuda.Device(1), on_gpu1:
        assert cp.ones(2).device.id == 1


def test_memory_a_graph_replays_may_not_be_handed_out_again(cp):
    captured = doubling_graph(cp, 4)
    captured.graph.launch(captured.stream)
    del captured.doubled                 # its block goes back to the graph's pool
    with captured.stream, cp.cuda.using_allocator(captured.pool.malloc):
        other = cp.zeros(4)              # ... and is handed out again
    with pytest.raises(simgpu.RaceError, match="handed out again"):
        captured.graph.launch(captured.stream)
    del other


def test_memory_a_graph_replays_may_not_be_freed(cp):
    captured = doubling_graph(cp, 4)
    del captured.x                       # the graph's input, from outside its pool
    with pytest.raises(simgpu.RaceError, match="freed since the capture"):
        captured.graph.launch(captured.stream)


def test_capture_refuses_sizes_read_on_the_host(cp):
    x = cp.arange(4.0)
    with capturing(cp):
        with pytest.raises(simgpu.CUDARuntimeError, match="read on the host"):
            x[x > 1]


def test_a_capture_may_not_wait_on_an_event_from_before_it(cp):
    stream, other = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    before = other.record()
    stream.begin_capture()
    with pytest.raises(simgpu.CUDARuntimeError, match="CaptureIsolation"):
        stream.wait_event(before)


def test_one_element_indexes_give_a_view_as_in_cupy(cp):
    x = cp.zeros((2, 2))
    element = x[1, 0]
    element[...] = 5.0
    assert x.get()[1, 0] == 5.0
    out = cp.empty((2, 2))
    assert cp.add(x, 1, out=out) is out


def test_nccl_refuses_counts_past_the_buffer_and_unequal_calls(cp):
    from cupy.cuda import nccl
    communicators = nccl.NcclCommunicator.initAll([0, 1])
    values, streams = [], []
    for device in (0, 1):
        with cp.cuda.Device(device):
            values.append(cp.ones(4, np.float32))
            streams.append(cp.cuda.get_current_stream().ptr)

    def reduce(counts):
        nccl.groupStart()
        try:
            for rank, value in enumerate(values):
                with cp.cuda.Device(rank):
                    communicators[rank].allReduce(value.data.ptr, value.data.ptr,
                                                  counts[rank], nccl.NCCL_FLOAT32,
                                                  nccl.NCCL_SUM, streams[rank])
        finally:
            nccl.groupEnd()
    with pytest.raises(nccl.NcclError, match="run past the end"):
        reduce([1000, 1000])
    with pytest.raises(nccl.NcclError, match="different"):
        reduce([4, 2])
