"""The NumPy backend: kernels for every op on (logical) CPUs."""

import ctypes

import numpy as np

from .. import switches
from ..graph import registry
from . import register_backend
from .batch_norm_pool import (
    batch_norm_relu_pool_kernels,
    pool_grad_batch_norm_grad_kernels,
)
from .bfloat16_kernels import with_bfloat16
from .collective_kernels import build_collective_kernels
from .cpu_threads import cpu_pool
from .dataset_kernels import build_dataset_kernels
from .host_kernels import build_host_kernels
from .kernels import build_kernels
from .lookup_kernels import build_lookup_kernels
from .native_batch_norm import cpu_batch_norm_kernels
from .native_updates import CompiledUpdates
from .queue_kernels import build_queue_kernels
from .summary_kernels import build_summary_kernels


def retain_freed_memory():
    """Ask glibc to keep freed blocks in the process (no mmap of its own, no
    trimming below 1 GiB). True if it agreed.

    NOTE: by default glibc unmaps the multi-MiB arrays a training step frees
    and page-faults them back in on the next step; for a small CNN that was
    ~1900 faults and most of a convolution's time. Its mmap threshold cannot
    go past 32 MiB, so arrays of 32 MiB and more (the cifar10 network's
    activations at batch 256) were still mapped afresh every step, 1,100 to
    1,600 faults a step: M_MMAP_MAX = 0 keeps them on the heap too (154 a
    step left). glibc still maps what its heap cannot hold. Set
    TOWERFLOW_RETAIN_FREED_MEMORY=0 to keep glibc's defaults.
    """
    if not switches.on("TOWERFLOW_RETAIN_FREED_MEMORY"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold, m_mmap_max = -1, -3, -4
        return bool(libc.mallopt(m_mmap_threshold, 32 << 20) and
                    libc.mallopt(m_mmap_max, 0) and
                    libc.mallopt(m_trim_threshold, 1 << 30))
    except (OSError, AttributeError):  # not glibc: nothing to tune
        return False


retain_freed_memory()
CPU_POOL = cpu_pool()   # the threads every CPU kernel splits its big work across
# bfloat16 ops compute in float32 (see bfloat16_kernels); MPI moves host arrays;
# host kernels (tf.print) write to Python streams; summaries are built on the host
# only, as in TensorFlow. Queue, reader and decode kernels only move values:
# bfloat16 ones too, as they are.
# optimizer updates compiled and threaded, NumPy where not taken
_COMPUTE_KERNELS = build_kernels(np, CPU_POOL, fused_updates=CompiledUpdates(CPU_POOL))
# training-mode batch norm (+ ReLU) compiled and threaded, NumPy where not taken
_COMPUTE_KERNELS.update(cpu_batch_norm_kernels(_COMPUTE_KERNELS, CPU_POOL))
_COMPUTE_KERNELS.update(batch_norm_relu_pool_kernels(_COMPUTE_KERNELS, CPU_POOL))
_COMPUTE_KERNELS.update(pool_grad_batch_norm_grad_kernels(_COMPUTE_KERNELS, CPU_POOL))
KERNELS = {**with_bfloat16({**_COMPUTE_KERNELS, **build_collective_kernels(),
                            **build_host_kernels(), **build_summary_kernels()}),
           **build_queue_kernels(), **build_dataset_kernels(), **build_lookup_kernels()}
registry.register_kernels("CPU", KERNELS)


class NumpyDevice:
    """One logical CPU. Arrays are host NumPy arrays; a copy between two
    logical CPUs is a real copy, so towers never share buffers."""

    kernels = KERNELS

    def __init__(self, logical_device):
        self.logical_device = logical_device
        self.name = logical_device.name

    @staticmethod
    def to_device(host_value):
        return np.asarray(host_value)

    @staticmethod
    def to_host(value):
        return value

    @staticmethod
    def copy_from(value, source_device):
        """``value`` from ``source_device``, as a new host array. A GPU's array
        comes through its runtime's ``to_host`` (which waits for its stream):
        CuPy refuses ``np.array`` of a device array."""
        if not isinstance(value, np.ndarray) and hasattr(source_device, "to_host"):
            return np.array(source_device.to_host(value), copy=True)
        return np.array(value, copy=True)

    def __repr__(self):
        return f"NumpyDevice({self.name})"


register_backend("CPU", NumpyDevice)
