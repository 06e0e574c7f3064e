"""The CuPy backend: the kernel tables of :mod:`.kernels`, built over CuPy, on
(logical) GPUs. Imported when a plan first uses a GPU device; it needs a CuPy
wheel (``pip install 'towerflow[cuda12]'``) and a working GPU.

Each logical GPU gets its own runtime (:class:`CupyDevice`):

- bound to its physical GPU: every kernel, allocation and copy runs inside
  ``cupy.cuda.Device(index)``, so nothing lands on GPU 0 unasked;
- its own non-blocking stream, which every kernel and copy is queued on;
- its memory pool, capped at the logical device's ``memory_limit`` and one
  per logical GPU and process (Sessions share it, as TensorFlow's allocator):
  an allocation past it raises ResourceExhaustedError naming the device and
  its limit; the blocks it caches are freed when a Session closes;
- host to device copies staged through pinned memory, asynchronous on the
  device's stream (one host callback a step keeps the fed values' pinned
  buffers alive); device to host copies wait for that stream; copies
  between GPUs (of contiguous memory: CuPy refuses strided views) order the
  two streams with untimed events, never waiting on the host;
- ``capture_steps``: a plan's steps recorded into one CUDA graph (see
  towerflow/plan_capture.py).

Reductions and sums run through CUB (CuPy's accelerators, on by default and
asked for here); NcclAllReduce members run on ``cupy.cuda.nccl``.

NOTE: written and unit-tested on a machine without a GPU; the GPU tests
(tests/test_gpu_backend.py, benchmarks/gpu_check.sh) skip there and are the
checklist for a GPU run.
"""

import contextlib
import threading
import time
import weakref

import cupy
import cupyx
import numpy as np

from .. import errors
from ..graph import registry
from ..parallel import nccl as nccl_ops
from . import cupy_conv, cupy_tf32, register_backend
from .batch_norm_pool import batch_norm_relu_pool_kernels
from .cupy_bfloat16 import gpu_kernels_with_bfloat16
from .cupy_graphs import capture, untimed_event
from .kernels import build_kernels


def _nccl_member(ctx):
    from cupy.cuda import nccl  # the library of the nvidia-nccl-cu12 wheel
    return nccl_ops.make_member_kernel(ctx, nccl, cupy)


def _nccl_start(ctx):
    from cupy.cuda import nccl
    return nccl_ops.make_start_kernel(ctx, nccl, cupy)


def _use_cub():
    """Reductions and scans through CUB: CuPy's default since v11, but an
    environment's CUPY_ACCELERATORS may have turned it off."""
    from cupy._core import _accelerator
    cub = _accelerator.ACCELERATOR_CUB
    for get, set_ in ((_accelerator.get_reduction_accelerators,
                       _accelerator.set_reduction_accelerators),
                      (_accelerator.get_routine_accelerators,
                       _accelerator.set_routine_accelerators)):
        if cub not in get():
            set_([cub, *get()])


class ElementwiseSpec:
    """An elementwise CUDA kernel as CuPy's ElementwiseKernel takes it (kept
    as data so a test can compile its code with NVRTC on a machine without a
    GPU). Type letters other than T stand for the dtype of a 0-d argument."""

    def __init__(self, in_params, out_params, operation, name):
        self.in_params, self.out_params = in_params, out_params
        self.operation, self.name = operation, name

    def kernel(self):
        return cupy.ElementwiseKernel(self.in_params, self.out_params, self.operation,
                                      self.name)


# The optimizer updates, one launch each instead of the 4 (momentum) or 11
# (Adam) ufunc launches of training_kernels, with the same arithmetic in the
# same order (the compiler may still contract a * b + c into one rounding).
MOMENTUM_UPDATE = ElementwiseSpec(
    "T grad, L lr, M momentum, bool nesterov", "T var, T accum",
    """accum = accum * (T)momentum + grad;
       T step = nesterov ? (accum * (T)momentum + grad) * (T)lr : accum * (T)lr;
       var = var - step;""",
    "towerflow_momentum_update")
ADAM_UPDATE = ElementwiseSpec(
    "T grad, A alpha, B beta1, C beta2, E epsilon", "T var, T m, T v",
    """m = m + (grad - m) * (T)(1 - beta1);
       v = v + (grad * grad - v) * (T)(1 - beta2);
       var = var - m / (sqrt(v) + (T)epsilon) * (T)alpha;""",
    "towerflow_adam_update")


class FusedUpdates:
    """The fused optimizer updates (float32 and float64 variables; others keep
    the ufunc chain). Each updates its arrays in place."""

    def __init__(self):
        self._momentum, self._adam = MOMENTUM_UPDATE.kernel(), ADAM_UPDATE.kernel()

    def momentum(self, var, accum, grad, learning_rate, momentum, nesterov, decay=None):
        if var.dtype.itemsize < 4:
            return False
        _decay(var, decay)
        self._momentum(grad, learning_rate, momentum, bool(nesterov), var, accum)
        return True

    def adam(self, var, m, v, grad, alpha, beta1, beta2, epsilon, decay=None):
        if var.dtype.itemsize < 4:
            return False
        _decay(var, decay)
        self._adam(grad, alpha, beta1, beta2, epsilon, var, m, v)
        return True

    # NOTE: no fused GPU kernels for these (yet): their ufunc chains run.
    def gradient_descent(self, var, grad, learning_rate, decay=None):
        return False

    def rms_prop(self, var, ms, mom, grad, learning_rate, rho, momentum, epsilon):
        return False

    def adagrad(self, var, accum, grad, learning_rate):
        return False


def _decay(var, decay):
    """Weight decay (var *= decay) ahead of a fused update; None: none."""
    if decay is not None:
        cupy.multiply(var, decay, out=var)


def build_gpu_kernels():
    """A new GPU kernel table. Kernels keep device arrays between calls (ones
    vectors, zeros, window scales), so every logical GPU gets a table of its
    own: one shared table would hand one GPU's array to another's kernel, or
    to another stream of the same GPU with nothing ordering the two."""
    table = {**build_kernels(cupy, fused_updates=FusedUpdates()),
             "NcclAllReduce": _nccl_member, "NcclAllReduceStart": _nccl_start,
             "NcclAllReduceWait": lambda ctx: nccl_ops.make_wait_kernel(ctx, cupy)}
    table.update(cupy_conv.gpu_kernels(cupy, table))   # one-pass conv and batch-norm kernels
    table.update(batch_norm_relu_pool_kernels(table, compiled=False))   # its two kernels
    return gpu_kernels_with_bfloat16(cupy, table)      # bfloat16 computed in float32


_use_cub()
KERNELS = build_gpu_kernels()     # which kernels exist (the placer's registry)
registry.register_kernels("GPU", KERNELS)

_MB = 2**20


class CupyDevice:
    """One logical GPU: its physical device, stream and capped memory pool."""

    def __init__(self, logical_device):
        if logical_device.gpu is None:
            raise ValueError(f"{logical_device.name} is not a GPU")
        self.logical_device = logical_device
        self.name = logical_device.name
        self.memory_limit = logical_device.memory_limit
        self.capture_group = logical_device.gpu.index   # one CUDA graph per physical GPU
        self.device = cupy.cuda.Device(logical_device.gpu.index)
        with self.device:
            cupy_tf32.configure(self.device)        # float32 GEMMs: TF32 unless TOWERFLOW_TF32=0
            self.stream = cupy.cuda.Stream(non_blocking=True)
            self.pool = _logical_pool(logical_device)
        self.malloc = self.pool.malloc     # a graph's own pool while it is captured
        self._staged = []                   # pinned buffers of stage_to_device copies
        self.graphs = weakref.WeakSet()     # live graphs captured over this GPU
        self.kernels = _OnDevice(build_gpu_kernels(), self)

    @contextlib.contextmanager
    def scope(self):
        """Run on this logical GPU: its device, stream and memory pool, with
        CuPy's out-of-memory error turned into ResourceExhaustedError."""
        try:
            with self.device, self.stream, cupy.cuda.using_allocator(self.malloc):
                yield
        except cupy.cuda.memory.OutOfMemoryError as err:
            raise self._exhausted(err) from err

    def _exhausted(self, err):
        with self.device:           # NOTE: a pool counts the current GPU's bytes
            used = self.pool.used_bytes()
        return errors.ResourceExhaustedError(
            None, None, f"out of memory on {self.name} (memory limit "
            f"{self.memory_limit / _MB:.0f} MiB, {used / _MB:.0f} MiB in use): {err}")

    def to_device(self, host_value):
        """A host value on this GPU, copied through pinned memory on the stream."""
        value, pinned = self._through_pinned(host_value)
        if pinned is not None:
            self._keep_until_copied(pinned)
        return value

    def stage_to_device(self, host_value):
        """``to_device`` of a fed value: its pinned buffer is kept alive by the
        next ``end_staging()`` (the plan's, once a step's values are placed)."""
        value, pinned = self._through_pinned(host_value)
        if pinned is not None:
            self._staged.append(pinned)
        return value

    def end_staging(self):
        """Keep the pinned buffers staged since the last call alive until their
        copies ran: one host callback for all (each one stalls the stream)."""
        # NOTE: swapped, not cleared: the callback holds the list it is given.
        staged, self._staged = self._staged, []
        if staged:
            self._keep_until_copied(staged)

    def _through_pinned(self, host_value):
        """(the value on this GPU, the pinned buffer its copy reads or None)."""
        # NOTE: not np.ascontiguousarray, which turns a 0-d value into shape (1,).
        host = np.asarray(host_value, order="C")
        with self.scope():
            if host.nbytes == 0:
                return cupy.asarray(host), None
            pinned = cupyx.empty_pinned(host.shape, host.dtype)
            pinned[...] = host
            value = cupy.empty(host.shape, host.dtype)
            value.set(pinned, stream=self.stream)
            return value, pinned

    def _keep_until_copied(self, pinned):
        # NOTE: a pinned buffer must outlive the asynchronous copy reading it:
        # the callback holds it until the stream reaches it.
        with self.scope():
            self.stream.launch_host_func(_keep_alive, pinned)

    def to_host(self, value):
        """A NumPy copy of ``value`` once this device's queued work is done."""
        if isinstance(value, np.ndarray) or np.isscalar(value):
            return value
        with self.scope():
            host = cupy.asnumpy(value, stream=self.stream)
            self.stream.synchronize()
            return host

    def copy_from(self, value, source_runtime):
        """``value`` from another runtime, as a new array on this GPU."""
        if not isinstance(source_runtime, CupyDevice):
            return self.to_device(source_runtime.to_host(value))
        source_stream = source_runtime.stream
        if source_stream is self.stream:        # one stream (as while captured)
            with self.scope():
                return cupy.array(value, copy=True)
        # NOTE: the copy waits for the value on the device, not the host; and
        # the source's later work (which may reuse value's memory once it is
        # freed) waits for the copy. An event belongs to the device current
        # when it is made, and must be recorded on a stream of that device.
        value = _contiguous_on(source_runtime, value)
        with source_runtime.device:
            value_ready = untimed_event(source_stream)
        with self.scope():
            self.stream.wait_event(value_ready)
            copied = cupy.array(value, copy=True)
            copy_done = untimed_event(self.stream)
        source_stream.wait_event(copy_done)
        return copied

    def release_memory(self):
        """Free the blocks this runtime's pool caches (a closed Session's, or
        before a capture): the memory of arrays still alive stays theirs."""
        self.end_staging()          # copies still queued keep their pinned buffers
        # NOTE: a pool frees on the current device only (CuPy's MemoryPool).
        with self.device:
            self.pool.free_all_blocks()

    def trace_timer(self):
        """A timer of this GPU's stream for traced runs (towerflow/tracing.py)."""
        return _StreamTimer(self)

    def capture_steps(self, runtimes, run):
        """Record ``run()`` (a plan's steps on ``runtimes``, logical GPUs of this
        physical GPU) into a CUDA graph: a cupy_graphs.GraphReplayer. Raises if a step
        cannot be captured (it waited on the host, say); nothing has run then."""
        return capture(self, runtimes, run)

    def __repr__(self):
        return f"CupyDevice({self.name})"


class _StreamTimer:
    """Times a traced run's steps on a GPU by CUDA events on its stream: a
    kernel's time is when its stream ran it, read once the run is over."""

    def __init__(self, runtime):
        self._runtime = runtime
        self._base, self._base_ns = None, 0

    def begin(self):
        """The base event, recorded on the idle stream at a known host time."""
        runtime = self._runtime
        with runtime.device:
            runtime.stream.synchronize()
            self._base = runtime.stream.record()
            self._base_ns = time.perf_counter_ns()

    def mark(self):
        runtime = self._runtime
        with runtime.device:
            return runtime.stream.record()

    def finish(self):
        with self._runtime.device:
            self._runtime.stream.synchronize()

    def perf_ns(self, event):
        """The host clock's time (perf_counter ns) at which ``event`` ran."""
        with self._runtime.device:
            elapsed_ms = cupy.cuda.get_elapsed_time(self._base, event)
        return self._base_ns + int(elapsed_ms * 1e6)


# (physical GPU, logical device name, limit) -> its MemoryPool, for the process.
# NOTE: one pool per logical GPU, shared by every Session (as TensorFlow's
# allocator is): two Sessions open at once keep within its memory_limit.
_POOLS = {}
_POOLS_LOCK = threading.Lock()


def _logical_pool(logical_device):
    """The memory pool of ``logical_device`` (made on the current device, capped
    at its memory_limit), made once per process."""
    key = (logical_device.gpu.index, logical_device.name, logical_device.memory_limit)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = cupy.cuda.MemoryPool()
            pool.set_limit(size=logical_device.memory_limit)
        return pool


def _contiguous_on(runtime, value):
    """``value`` (an array of ``runtime``'s GPU) in one piece of memory, laid
    out on that GPU's own stream. NOTE: a peer copy takes only contiguous
    memory: CuPy refuses a strided view (a transpose, a strided slice) with
    NotImplementedError, and for order 'C' lays it out on the current stream
    of the source GPU, which nothing orders with the copy."""
    if value.flags.c_contiguous or value.flags.f_contiguous:
        return value
    with runtime.scope():
        return cupy.ascontiguousarray(value)


def _keep_alive(pinned):
    del pinned


class _OnDevice:
    """A kernel table whose kernels run inside their device's scope."""

    def __init__(self, table, runtime):
        self._table, self._runtime = table, runtime

    def __contains__(self, name):
        return name in self._table

    def get(self, name, default=None):
        make = self._table.get(name)
        if make is None:
            return default
        return lambda ctx: _scoped(make, ctx, self._runtime)

    def __getitem__(self, name):
        found = self.get(name)
        if found is None:
            raise KeyError(name)
        return found

    def keys(self):
        return self._table.keys()


def _scoped(make, ctx, runtime):
    with runtime.scope():
        kernel = make(ctx)

    def run(*args):
        with runtime.scope():
            return kernel(*args)
    return run


register_backend("GPU", CupyDevice)
