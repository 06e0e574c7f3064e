"""A strict simulated GPU: a NumPy-backed stand-in for the part of CuPy that
towerflow uses, which enforces CUDA's rules instead of ignoring them.

What it checks (each violation raises, naming what and where):

- **device ownership**: arrays live on the GPU that was current when they
  were made; a kernel given an array of another GPU raises ValueError as
  CuPy does; an event recorded on another device's stream, or a copy queued
  on another device's stream, raises cudaErrorInvalidResourceHandle;
- **stream order**: work runs at once, but each block of device memory
  remembers which stream wrote it last and which read it since; an access
  not ordered after those (no synchronize, no event wait) raises RaceError.
  Freed blocks are reused per stream with their history, as CuPy's pools do;
- **the host**: ``np.asarray(x)`` of a device array raises TypeError as in
  CuPy; a host read (``x.get()``, ``bool(x)``) waits for the stream; the host
  may not write a pinned buffer that an asynchronous copy may still read;
- **capture**: a capturing stream records its work into a graph that
  ``launch`` replays (fresh outputs stay unwritten, NaN, until then);
  synchronising, reading on the host, copying from pageable memory and
  allocating from a pool that also serves work outside the graph raise;
- **memory**: pools split and merge chunks as CuPy's, count bytes per
  device and refuse past ``set_limit``, with CuPy's OutOfMemoryError; a
  read of memory nothing wrote since its allocation raises
  UninitializedReadError; the pinned pool hands a freed buffer out again
  at once, as CuPy's;
- **NCCL**: communicators in one process (``initAll``, groups) and across
  MPI ranks; a collective some ranks never join raises instead of hanging.

Use it in a test, or in a process through ``TOWERFLOW_SIMULATED_GPUS``::

    from towerflow import simgpu
    with simgpu.installed(gpus=2):
        import cupy                     # the simulated one
        x = cupy.arange(4.0)

    $ TOWERFLOW_SIMULATED_GPUS=2 towerflow launch -n 2 ...

It is no model of speed. User CUDA code runs as written where a C++
compiler is present (cuda_emulation.py): a RawKernel's source over its grid
and block, with real barriers and shared arrays, every access checked (out
of bounds, races, unwritten shared memory, arguments of the wrong C type);
an ElementwiseKernel's operation compiled as C. Without a compiler, a
RawKernel runs its registered NumPy reference (:func:`register_reference`)
and an ElementwiseKernel's operation is translated to NumPy (a C subset).
"""

import contextlib
import importlib.abc
import importlib.util
import os
import sys

from . import clock, modules, nccl, state
from .clock import CUDARuntimeError, RaceError, UninitializedReadError
from .kernels import register_reference

__all__ = [
    "ENV_VARIABLE",
    "CUDARuntimeError",
    "RaceError",
    "UninitializedReadError",
    "install",
    "installed",
    "is_installed",
    "register_reference",
    "uninstall",
]

ENV_VARIABLE = "TOWERFLOW_SIMULATED_GPUS"
DEFAULT_NAME = "Simulated NVIDIA H100 80GB HBM3"
DEFAULT_MEMORY = 80 * 2**30
_SAVED = {}


def install(gpus=1, memory_bytes=DEFAULT_MEMORY, name=DEFAULT_NAME):
    """Put ``gpus`` simulated GPUs in place of CuPy (in ``sys.modules``), and
    make towerflow load its GPU backend against them.

    Example::

        >>> install(gpus=4)
        >>> import cupy; cupy.cuda.runtime.getDeviceCount()
        4
    """
    if is_installed():
        uninstall()
    state.set_world(clock.World(int(gpus), int(memory_bytes), name))
    nccl.reset()
    built = modules.build()
    for module_name, module in built.items():
        _SAVED.setdefault(module_name, sys.modules.get(module_name))
        if module_name in modules.IMPORTED_ON_DEMAND:
            sys.modules.pop(module_name, None)
        else:
            sys.modules[module_name] = module
    _FINDER.modules = {name: built[name] for name in modules.IMPORTED_ON_DEMAND}
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    _reload_towerflow_gpu_backend()


def uninstall():
    """Give CuPy back (the real one, if it was imported) and unload the GPU
    backend that was built on the simulator."""
    for module_name, module in _SAVED.items():
        if module is None:
            sys.modules.pop(module_name, None)
        else:
            sys.modules[module_name] = module
    _SAVED.clear()
    _FINDER.modules = {}
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    state.set_world(None)
    _reload_towerflow_gpu_backend()


def is_installed():
    return state._STATE["world"] is not None


@contextlib.contextmanager
def installed(gpus=1, memory_bytes=DEFAULT_MEMORY, name=DEFAULT_NAME):
    """:func:`install` for the duration of a ``with`` block."""
    install(gpus, memory_bytes, name)
    try:
        yield sys.modules["cupy"]
    finally:
        uninstall()


class _OnDemandFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the simulated submodules that CuPy loads only when imported."""

    def __init__(self):
        self.modules = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.modules:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return self.modules[spec.name]

    def exec_module(self, module):
        pass


_FINDER = _OnDemandFinder()


# The GPU backend's modules that bind ``cupy`` when imported.
_BINDING_CUPY = ("cupy_backend", "cupy_graphs")


def _reload_towerflow_gpu_backend():
    """Drop the GPU backend's modules, so the next GPU device imports them
    again against whichever CuPy is in place."""
    from towerflow import backends
    for name in _BINDING_CUPY:
        sys.modules.pop(f"towerflow.backends.{name}", None)
        if hasattr(backends, name):     # else `from . import` finds the old one
            delattr(backends, name)
    from towerflow.graph import registry
    registry.unregister_kernels("GPU")
    backends.unregister_backend("GPU")


def install_from_environment():
    """Install the simulator if ``TOWERFLOW_SIMULATED_GPUS`` asks for it (read
    once when towerflow is imported: a launched process inherits it)."""
    value = os.environ.get(ENV_VARIABLE, "").strip()
    if not value:
        return
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{ENV_VARIABLE} must be a number of GPUs >= 1, got {value!r}")
    install(gpus=int(value))
