"""The fast paths and their switches, in one registry.

Every fast path computes what the plain path computes, up to rounding, and
has an environment variable that turns it off (to compare, or to rule it
out). tests/test_differential.py reads :data:`FAST_PATHS`: it trains whole
networks in float64 with each switch on and off, and with all of them off
(the plain path), and compares the parameters; it also checks, through each
entry's ``probe``, that the fast path really ran when on and not when off::

    with fast_paths.switched(fast_paths.FAST_PATHS, on=False):
        ...                               # the plain path: NumPy kernels only

Adding a fast path is one entry in FAST_PATHS: its name, the environment
variable, the values that turn it on and off, one line saying what it does,
and a probe (``"module:attribute"``, a function only the fast path calls);
``more_probes`` names further ones where a switch turns on several kernels
that a network may reach apart (each must run when the switch is on).
A switch read once at import (not per kernel call or per plan) also needs
``live``: a function ``live(on)`` that sets the running process's state and
returns a function that restores it.
"""

import contextlib
import dataclasses
import importlib
import os
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class FastPath:
    """One fast path's switch (see the module docstring)."""

    name: str
    variable: str
    on: str | None             # None: the variable unset (the default)
    off: str
    description: str
    probe: str                 # "module:attr.attr": called only on the fast path
    devices: tuple = ("CPU",)  # the device types it runs on (none: the input pipeline)
    live: Callable[[bool], Callable[[], None]] | None = None
    more_probes: tuple = ()    # further "module:attr"s, each called only on the fast path


def _cpu_pool_workers(on):
    """TOWERFLOW_CPU_THREADS is read when the NumPy backend's pool is made (at
    import): off holds that pool to one worker for this thread's work (as a
    Session's intra_op_parallelism_threads=1 does); on keeps its own count.
    NOTE: a cap, not ``pool.workers = 1``: a pool first started while lowered
    made no threads, and waited for ever for them once raised again."""
    from .backends import numpy_backend
    if on:
        return lambda: None
    capped = numpy_backend.CPU_POOL.capped(1)
    capped.__enter__()
    return lambda: capped.__exit__(None, None, None)


FAST_PATHS = (
    FastPath("native", "TOWERFLOW_NATIVE", "1", "0",
             "compiled kernels (_native): im2col, col2im, max pool, Winograd; the "
             "optimizers' updates (gradient descent, momentum, Nesterov, Adam, RMSProp, "
             "Adagrad) in one threaded pass; 2-D MatMuls (dense layers and their "
             "gradients) of 32 float32 (16 float64) columns or more on the blocked GEMM",
             "towerflow.backends.native:_compiled.im2col",
             more_probes=("towerflow.backends.native:apply_update",
                          "towerflow.backends.parallel_gemm:_split_gemm")),
    FastPath("winograd", "TOWERFLOW_WINOGRAD", "1", "0",
             "Winograd F(4x4, 3x3) for stride-1 3x3 convolutions of >= 16 input "
             "channels, F(2x2, 5x5) for stride-1 5x5 ones of >= 20",
             "towerflow.backends.winograd:WinogradConv.__init__"),
    FastPath("fusion", "TOWERFLOW_FUSION", "1", "0",
             "fused kernel chains: conv + bias (+ ReLU (+ max pool)), pool grad + ReLU "
             "grad (+ batch-norm grad on the CPU); on GPUs batch norm + ReLU and its "
             "gradient",
             "towerflow.fusion:FusedOp.__init__", devices=("CPU", "GPU")),
    FastPath("cpu_threads", "TOWERFLOW_CPU_THREADS", None, "1",
             "the CPU thread pool: convolutions, GEMMs and big elementwise ops in parts",
             "towerflow.backends.cpu_threads:WorkerPool._run", live=_cpu_pool_workers),
    FastPath("c_threads", "TOWERFLOW_C_THREADS", "1", "0",
             "the pool's parts of compiled kernels (convolutions, GEMMs, Winograd's filter "
             "transforms, batch norm, max pool gradients) recorded, then run on C threads "
             "without the GIL",
             "towerflow.backends.native:run_parts"),
    FastPath("cache_blocks", "TOWERFLOW_CACHE_BLOCK_BYTES", None, "0",
             "convolutions in blocks of images whose patches fit in a core's cache",
             "towerflow.backends.conv_blocks:_several_blocks"),
    FastPath("cuda_graphs", "TOWERFLOW_CUDA_GRAPHS", "1", "0",
             "a GPU plan's steps captured once as CUDA graphs, then replayed",
             "towerflow.plan_capture:_CapturedStep.replay", devices=("GPU",)),
    # NOTE: off by default (im2col + cuBLAS) until a GPU has timed it against im2col.
    FastPath("implicit_gemm", "TOWERFLOW_GPU_CONV", "implicit", "im2col",
             "GPU convolutions and their gradients as implicit GEMMs: no patch or column "
             "matrix is written", "towerflow.backends.cupy_conv:implicit_conv",
             devices=("GPU",), more_probes=("towerflow.backends.cupy_conv:implicit_input_grad",
                                            "towerflow.backends.cupy_conv:implicit_filter_grad")),
    FastPath("aligned_arrays", "TOWERFLOW_ALIGNED_ARRAYS", "1", "0",
             "NumPy arrays of 4 KiB or more that a plan's steps allocate start on 64-byte "
             "boundaries (cache lines)",
             "towerflow.backends.aligned_memory:_Aligned.__enter__"),
    # NOTE: not a kernel: no device runs it, so the networks trained per device
    # never reach it; tests/test_differential.py trains a recipe through fit
    # with it on and off instead.
    FastPath("data_ring", "TOWERFLOW_DATA_RING", "1", "0",
             "input pipelines make each batch in place into a ring of reused buffers",
             "towerflow.data.batch_ring:BatchRing.make", devices=()),
    # NOTE: not a kernel either: it runs between towers, so no single device
    # reaches it; tests/test_overlap_differential.py trains the cifar10 network
    # on 2 MPI ranks (probe: the MPI start, counted inside the rank program),
    # on 2 and 3 GPUs of one process (the first more_probe) and on one GPU per
    # rank (the second) with it on and off. Each probe is reached by its
    # communicator alone, so a run checks the probe of the communicator it used.
    FastPath("overlap", "TOWERFLOW_OVERLAP_ALLREDUCE", "1", "0",
             "each gradient bucket's all-reduce (MPI, NCCL) started as soon as its "
             "gradients exist, beside the rest of the backward pass, and waited for "
             "before the update", "towerflow.parallel.mpi:MpiWorld.all_reduce_start",
             devices=(), more_probes=("towerflow.parallel.nccl:_StartedBucket.issue_and_record",
                                      "towerflow.parallel.nccl:_world_start_kernel")),
)


def on_device(device_type):
    """The fast paths that run on devices of ``device_type`` ('CPU' or 'GPU').

    Example::

        >>> [path.name for path in on_device("GPU")]
        ['fusion', 'cuda_graphs']
    """
    return tuple(path for path in FAST_PATHS if device_type in path.devices)


def by_name(name):
    """The FastPath called ``name``.

    Example::

        >>> by_name("winograd").variable
        'TOWERFLOW_WINOGRAD'
    """
    for path in FAST_PATHS:
        if path.name == name:
            return path
    raise ValueError(f"no fast path named {name!r}; the fast paths are "
                     f"{[path.name for path in FAST_PATHS]}")


@contextlib.contextmanager
def switched(paths, on):
    """Within the block, each of ``paths`` (FastPaths) on or off: its variable
    set (or unset), and its ``live`` state too; both restored after.

    Example::

        >>> with switched([by_name("winograd")], on=False):
        ...     os.environ["TOWERFLOW_WINOGRAD"]
        '0'
    """
    saved = {path.variable: os.environ.get(path.variable) for path in paths}
    restores = []
    try:
        for path in paths:
            _set_variable(path.variable, path.on if on else path.off)
            if path.live is not None:
                restores.append(path.live(on))
        yield
    finally:
        for restore in reversed(restores):
            restore()
        for variable, value in saved.items():
            _set_variable(variable, value)


def probes_of(path):
    """Every probe of ``path``: its ``probe``, then its ``more_probes``.

    Example::

        >>> probes_of(by_name("native"))[1]
        'towerflow.backends.native:apply_update'
    """
    return (path.probe,) + tuple(path.more_probes)


def probe_target(probe):
    """(object, attribute name) of ``probe`` (``"module:attr.attr"``, one of
    :func:`probes_of`), to wrap and count calls.

    Example::

        >>> owner, name = probe_target(by_name("winograd").probe)
        >>> owner.__name__, name
        ('WinogradConv', '__init__')
    """
    module_name, attributes = probe.split(":")
    owner = importlib.import_module(module_name)
    *parents, attribute = attributes.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    return owner, attribute


def _set_variable(variable, value):
    if value is None:
        os.environ.pop(variable, None)
    else:
        os.environ[variable] = value
