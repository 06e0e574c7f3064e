"""CUDA C run on the CPU (towerflow/simgpu/cuda_emulation.py, and
cuda_elementwise.py for ElementwiseKernels): kernels run
their grid and block as written, barriers order shared memory, and what a
GPU would do wrong silently (an access outside an array, a race, a read of
shared memory no thread wrote, a divergent barrier, an argument of the wrong
C type) is an error naming the array, the index and the thread.

The kernels of towerflow's GPU backend run through here in
tests/test_gpu_conv.py (the ``cuda_c`` cases) and on the simulated GPU;
this file tests the emulation itself, and runs those cases again under
AddressSanitizer."""

import os
import subprocess
import sys

import numpy as np
import pytest

from towerflow.simgpu import cuda_elementwise
from towerflow.simgpu import cuda_emulation as emulation

pytestmark = pytest.mark.skipif(not emulation.available(),
                                reason="no C++ compiler for the CUDA emulation")
CudaEmulationError = emulation.CudaEmulationError


def launch(code, grid, block, *args, reverse=False):
    name = emulation._SIGNATURE.search(code).group(1)
    emulation.launch_raw(code, name, grid, block, args, reverse=reverse)


COORDINATES = r'''
extern "C" __global__ void coordinates(int* out, int count) {
    const int block = blockIdx.y * gridDim.x + blockIdx.x;
    const int thread = threadIdx.y * blockDim.x + threadIdx.x;
    const int i = block * blockDim.x * blockDim.y + thread;
    if (i < count) out[i] = block * 1000 + thread;
}'''


def test_every_thread_of_every_block_runs_once_with_its_coordinates():
    out = np.full(3 * 2 * 4 * 5, -1, np.int32)
    launch(COORDINATES, (3, 2), (4, 5), out, np.int32(out.size))
    expected = [block * 1000 + thread for block in range(6) for thread in range(20)]
    np.testing.assert_array_equal(out, expected)


BLOCK_SUM = r'''
typedef float T;
extern "C" __global__ void block_sum(const T* x, T* sums, int count) {
    __shared__ T partial[64];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    partial[threadIdx.x] = i < count ? x[i] : (T)0;
    __syncthreads();
    for (int width = blockDim.x / 2; width > 0; width /= 2) {
        if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
        __syncthreads();
    }
    if (threadIdx.x == 0) sums[blockIdx.x] = partial[0];
}'''


@pytest.mark.parametrize("reverse", [False, True])
def test_barriers_order_shared_memory_in_either_thread_order(reverse):
    x = np.arange(150, dtype=np.float32)
    sums = np.zeros(3, np.float32)
    launch(BLOCK_SUM, 3, 64, x, sums, np.int32(150), reverse=reverse)
    np.testing.assert_array_equal(sums, [x[:64].sum(), x[64:128].sum(), x[128:].sum()])


@pytest.mark.parametrize("reverse", [False, True])
def test_a_missing_barrier_is_a_race_in_either_thread_order(reverse):
    racy = BLOCK_SUM.replace("        __syncthreads();\n    }", "    }")
    with pytest.raises(CudaEmulationError, match=r"race: partial\[\d+\]"):
        launch(racy, 3, 64, np.ones(150, np.float32), np.zeros(3, np.float32),
               np.int32(150), reverse=reverse)


def test_a_block_wider_than_its_shared_array_is_refused():
    with pytest.raises(CudaEmulationError, match=r"partial\[64\] past its 64 elements.*"
                                                 r"thread \(64,0,0\)"):
        launch(BLOCK_SUM, 1, 128, np.ones(128, np.float32), np.zeros(1, np.float32),
               np.int32(128))


def test_shared_memory_read_before_any_thread_wrote_it_is_refused():
    unwritten = BLOCK_SUM.replace("partial[threadIdx.x] = i < count ? x[i] : (T)0;",
                                  "if (threadIdx.x == 0) partial[0] = x[i];")
    with pytest.raises(CudaEmulationError, match="read before any thread of the block"):
        launch(unwritten, 1, 64, np.ones(64, np.float32), np.zeros(1, np.float32),
               np.int32(64))


def test_an_access_outside_an_array_names_it_the_index_and_the_thread():
    off_by_one = COORDINATES.replace("if (i < count)", "if (i <= count)")
    out = np.zeros(10, np.int32)
    with pytest.raises(CudaEmulationError, match=r"write of out\[10\] is outside the 10 "
                                                 r"elements.*thread \(2,0,0\) of block "
                                                 r"\(1,0,0\)"):
        launch(off_by_one, 2, 8, out, np.int32(10))


def test_two_blocks_writing_one_element_is_a_race():
    overlapping = COORDINATES.replace("out[i] =", "out[i % 8] =")
    with pytest.raises(CudaEmulationError, match=r"race: out\[0\] written by two threads"):
        launch(overlapping, 2, 8, np.zeros(16, np.int32), np.int32(16))


def test_a_thread_returning_while_others_wait_at_a_barrier_is_refused():
    divergent = BLOCK_SUM.replace("    partial[threadIdx.x] = i < count",
                                  "    if (threadIdx.x == 5) return;\n"
                                  "    partial[threadIdx.x] = i < count")
    with pytest.raises(CudaEmulationError, match="1 threads returned while 63 wait"):
        launch(divergent, 1, 64, np.ones(64, np.float32), np.zeros(1, np.float32),
               np.int32(64))


def test_a_block_reading_what_a_later_block_writes_is_a_race():
    """Blocks are not ordered: in-place x[i] = x[i + 8] reads, in block b,
    what block b + 1 writes. The reversed order runs the blocks last first."""
    shift = COORDINATES.replace("if (i < count) out[i] = block * 1000 + thread;",
                                "if (i + 8 < count) out[i] = out[i + 8];")
    launch(shift, 2, 8, np.arange(24, dtype=np.int32), np.int32(24))   # in order: unseen
    with pytest.raises(CudaEmulationError, match=r"race: out\[1[0-5]\] read here was written "
                                                 r"by block 1"):
        launch(shift, 2, 8, np.arange(24, dtype=np.int32), np.int32(24), reverse=True)


def test_two_threads_may_launch_one_kernel_at_once():
    """A launch runs on its library's globals: they take turns (a Session's
    queue-runner thread and the main thread both launch kernels)."""
    import threading
    sums = [np.zeros(3, np.float32) for _ in range(4)]
    x = np.arange(150, dtype=np.float32)
    threads = [threading.Thread(target=launch, args=(BLOCK_SUM, 3, 64, x, out,
                                                     np.int32(150))) for out in sums]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for out in sums:
        np.testing.assert_array_equal(out, [x[:64].sum(), x[64:128].sum(), x[128:].sum()])


def test_views_of_other_element_sizes_keep_records_of_their_own():
    """A float32 array and its bytes passed together: no shared record sized
    for one and indexed by the other (under ASan this overflowed)."""
    both = r'''
extern "C" __global__ void both(const float* x, unsigned char* bytes, int count) {
    const int i = threadIdx.x;
    if (i < count) bytes[i] = (unsigned char)i;
}'''
    x = np.zeros(16, np.float32)
    launch(both, 1, 64, x, x.view(np.uint8), np.int32(64))
    np.testing.assert_array_equal(x.view(np.uint8), np.arange(64))


def test_source_the_emulation_would_run_wrong_is_refused_and_restrict_is_dropped():
    for construct in ("auto v = x[i];", "const int n = sizeof(float*);"):
        kernel = SCALE.replace("const int i =", construct + "\n    const int i =")
        with pytest.raises(NotImplementedError, match="runs no kernel with"):
            launch(kernel, 1, 32, np.zeros(5, np.float32), np.zeros(5, np.float32),
                   np.float32(2), np.int32(5))
    restricted = SCALE.replace("const T* x", "const T* __restrict__ x")
    x, y = np.arange(5, dtype=np.float32), np.zeros(5, np.float32)
    launch(restricted, 1, 32, x, y, np.float32(2), np.int32(5))
    np.testing.assert_array_equal(y, x * 2)


SCALE = r'''
typedef float T;
extern "C" __global__ void scale(const T* x, T* y, T factor, int count) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) y[i] = x[i] * factor;
}'''


def test_scalars_arrive_as_the_c_types_cupy_passes():
    x, y = np.arange(5, dtype=np.float32), np.zeros(5, np.float32)
    launch(SCALE, 1, 32, x, y, np.float32(2), np.int32(5))
    np.testing.assert_array_equal(y, x * 2)
    # A float64 (or a Python float, which CuPy passes as one) where the kernel
    # reads a float: on a GPU the kernel would read half of its bytes.
    for factor in (np.float64(2), 2.0):
        with pytest.raises(CudaEmulationError, match=r"factor is T \(4 bytes\) but the "
                                                     r"launch passes a float64 \(8 bytes\)"):
            launch(SCALE, 1, 32, x, y, factor, np.int32(5))
    with pytest.raises(CudaEmulationError, match="count is int .* passes a int64"):
        launch(SCALE, 1, 32, x, y, np.float32(2), 5)


def test_arrays_must_be_of_the_pointer_type_and_contiguous():
    with pytest.raises(CudaEmulationError, match="x is const T\\* but the launch passes a "
                                                 "float64 array"):
        launch(SCALE, 1, 32, np.zeros(5), np.zeros(5, np.float32), np.float32(2),
               np.int32(5))
    strided = np.zeros(10, np.float32)[::2]
    with pytest.raises(CudaEmulationError, match="non-contiguous array"):
        launch(SCALE, 1, 32, strided, np.zeros(5, np.float32), np.float32(2), np.int32(5))


def test_launch_limits_and_compile_errors_are_reported():
    with pytest.raises(CudaEmulationError, match="a block of 2048 threads"):
        launch(SCALE, 1, 2048, np.zeros(5, np.float32), np.zeros(5, np.float32),
               np.float32(2), np.int32(5))
    with pytest.raises(CudaEmulationError, match="(?s)does not compile.*undeclared_name"):
        launch(SCALE.replace("x[i] * factor", "x[i] * undeclared_name"), 1, 32,
               np.zeros(5, np.float32), np.zeros(5, np.float32), np.float32(2), np.int32(5))


def test_elementwise_operations_run_with_c_semantics():
    """Integer division truncates (NumPy's / would not), a bound scalar is
    broadcast, outputs are written through references. As in CuPy, a named
    parameter type is numpy.dtype(name): 'int' is int64, 'float' float64."""
    kernel = cuda_elementwise.ElementwiseKernel(
        "T x, int divisor", "T quotient, float half",
        "quotient = x / divisor; half = x * 0.5f;", "halves")
    x = np.array([-7, -1, 5, 9], np.int32)
    quotient, half = np.zeros(4, np.int32), np.zeros(4, np.float64)
    kernel(x, 2, quotient, half)
    np.testing.assert_array_equal(quotient, [-3, 0, 2, 4])
    np.testing.assert_array_equal(half, [-3.5, -0.5, 2.5, 4.5])


def test_elementwise_types_bind_as_cupy_binds_them():
    """CuPy 14's _decide_params_type_core: outputs bind first, then input
    arrays; scalars bind nothing (a letter only they carry is a KeyError)."""
    kernel = cuda_elementwise.ElementwiseKernel("T x, L lr", "T y", "y = x * (T)lr;", "scaled")
    x = np.ones(3, np.float32)
    for scalar in (0.5, np.float32(0.5)):
        with pytest.raises(KeyError, match="'L'"):
            kernel(x, scalar, np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="^Type is mismatched. x float32 float64 T$"):
        kernel(x, np.array(0.5), np.zeros(3, np.float64))
    named = cuda_elementwise.ElementwiseKernel("float32 x", "float32 y", "y = x;", "copy")
    with pytest.raises(TypeError, match="^Type is mismatched. x float64 float32$"):
        named(np.ones(2), np.zeros(2, np.float32))


def test_elementwise_outputs_may_be_omitted():
    kernel = cuda_elementwise.ElementwiseKernel("T x, T s", "T y", "y = x + s;", "shifted")
    y = kernel(np.arange(3, dtype=np.int16), 2)
    assert y.dtype == np.int16
    np.testing.assert_array_equal(y, [2, 3, 4])


def test_the_simulated_gpu_runs_a_raw_kernel_with_no_reference(monkeypatch):
    """A RawKernel no NumPy reference describes still runs (its C does);
    with the emulation off the simulator asks for a reference."""
    from towerflow import simgpu
    with simgpu.installed(gpus=1):
        import cupy
        kernel = cupy.RawKernel(SCALE, "scale")
        x, y = cupy.arange(5, dtype=np.float32), cupy.zeros(5, np.float32)
        kernel((1,), (32,), (x, y, np.float32(3), np.int32(5)))
        np.testing.assert_array_equal(y.get(), np.arange(5) * 3)
        with pytest.raises(CudaEmulationError, match="passes a float64"):
            kernel((1,), (32,), (x, y, 3.0, np.int32(5)))
        monkeypatch.setenv(emulation.SWITCH, "0")
        with pytest.raises(NotImplementedError, match="no NumPy reference"):
            kernel((1,), (32,), (x, y, np.float32(3), np.int32(5)))


# -- AddressSanitizer ------------------------------------------------------------------------

STACK_OVERFLOW = r'''
extern "C" __global__ void overflow(int* out, int index) {
    int local[4] = {1, 2, 3, 4};
    out[0] = local[index];
}'''


def _under_asan(*pytest_args, code=None):
    """Runs pytest (or ``code``) in a child with libasan preloaded and the
    kernels built with -fsanitize=address,undefined."""
    libasan = subprocess.run([emulation.compiler(), "-print-file-name=libasan.so"],
                             check=False,
                             capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(libasan):
        pytest.skip("the compiler has no AddressSanitizer runtime")
    env = {**os.environ, "LD_PRELOAD": libasan, "ASAN_OPTIONS": "detect_leaks=0",
           emulation.SANITIZE: "address"}
    command = [sys.executable, "-c", code] if code else \
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args]
    return subprocess.run(command, check=False, capture_output=True, text=True, env=env,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_backend_kernels_run_clean_under_address_sanitizer():
    """The CUDA C cases of test_gpu_conv.py (every kernel, ragged shapes,
    both dtypes, both thread orders), and the fused optimizer updates on the
    simulated GPU, with ASan and UBSan watching."""
    result = _under_asan("tests/test_gpu_conv.py", "tests/test_gpu_backend.py",
                         "tests/test_cuda_emulation.py", "-k",
                         "cuda_c or fused_updates or views_of_other or two_threads")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "AddressSanitizer" not in result.stderr


def test_address_sanitizer_is_watching():
    """An index past a local array (which the checked pointers cannot see)
    stops the child with ASan's report."""
    code = ("import numpy as np\n"
            "from towerflow.simgpu import cuda_emulation as e\n"
            f"e.launch_raw({STACK_OVERFLOW!r}, 'overflow', 1, 1,"
            " (np.zeros(1, np.int32), np.int32(6)))\n")
    result = _under_asan(code=code)
    assert result.returncode != 0
    assert "stack-buffer-overflow" in result.stderr, result.stderr[-3000:]
