"""The CuPy backend: the kernel tables of :mod:`.kernels`, built over CuPy, on
(logical) GPUs. Imported when a plan first uses a GPU device; it needs a CuPy
wheel (``pip install 'towerflow[cuda12]'``) and a working GPU.

Each logical GPU gets its own runtime (:class:`CupyDevice`):

- bound to its physical GPU: every kernel, allocation and copy runs inside
  ``cupy.cuda.Device(index)``, so nothing lands on GPU 0 unasked;
- its own non-blocking stream, which every kernel and copy is queued on;
- its own memory pool, capped at the logical device's ``memory_limit``: an
  allocation past it raises ResourceExhaustedError naming the device and
  its limit;
- host to device copies staged through pinned memory, asynchronous on the
  device's stream; device to host copies wait for that stream.

NOTE: written and unit-tested on a machine without a GPU; the GPU tests
(tests/test_gpu_backend.py) skip there and are the checklist for a GPU run.
"""

import contextlib

import cupy
import cupyx
import numpy as np

from .. import errors
from ..graph import registry
from . import register_backend
from .kernels import build_kernels

KERNELS = build_kernels(cupy)      # the CPU kernels' code, over CuPy, unsplit
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
        self.device = cupy.cuda.Device(logical_device.gpu.index)
        with self.device:
            self.stream = cupy.cuda.Stream(non_blocking=True)
            self.pool = cupy.cuda.MemoryPool()
            self.pool.set_limit(size=self.memory_limit)
        self.kernels = _OnDevice(KERNELS, self)

    @contextlib.contextmanager
    def scope(self):
        """Run on this logical GPU: its device, stream and memory pool, with
        CuPy's out-of-memory error turned into ResourceExhaustedError."""
        try:
            with self.device, self.stream, cupy.cuda.using_allocator(self.pool.malloc):
                yield
        except cupy.cuda.memory.OutOfMemoryError as err:
            raise self._exhausted(err) from err

    def _exhausted(self, err):
        return errors.ResourceExhaustedError(
            None, None, f"out of memory on {self.name} (memory limit "
            f"{self.memory_limit / _MB:.0f} MiB, {self.pool.used_bytes() / _MB:.0f} MiB "
            f"in use): {err}")

    def to_device(self, host_value):
        """A host value on this GPU, copied through pinned memory on the stream."""
        host = np.ascontiguousarray(host_value)
        with self.scope():
            if host.nbytes == 0:
                return cupy.asarray(host)
            pinned = cupyx.empty_pinned(host.shape, host.dtype)
            pinned[...] = host
            value = cupy.empty(host.shape, host.dtype)
            value.set(pinned, stream=self.stream)
            # NOTE: the pinned buffer must outlive the asynchronous copy.
            self.stream.launch_host_func(_keep_alive, pinned)
            return value

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
        source_runtime.stream.synchronize()     # the value is complete
        with self.scope():
            return cupy.array(value, copy=True)

    def __repr__(self):
        return f"CupyDevice({self.name})"


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
