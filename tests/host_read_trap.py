"""A host-read trap: arrays that refuse to be read on the host, and an array
module over NumPy that is not ``numpy`` (so kernels take their GPU paths).

On a GPU, ``bool(x)``, ``int(x)``, ``float(x)``, ``x.item()`` or
``x.tolist()`` of a device array waits for the device, and inside a CUDA
graph capture it fails. A kernel run on :class:`HostReadTrap` arrays raises
:class:`HostRead` at such a read instead of going on silently::

    kernel = build_kernels(TRAP_XP)["ScaleOrZero"](ctx)
    kernel(trapped(grad), trapped(np.float32(0.5)))     # raises if it reads

:data:`TRAP_XP` returns every array as a HostReadTrap, so values a kernel
makes (not only its inputs) are trapped too. :class:`TrapGpu` is a fake GPU
runtime over that table, for whole plans; it also refuses to copy a kernel's
host value (a NumPy scalar, say) between GPUs. This is a trap, not a simulated
GPU: streams, memory and capture rules are not modelled.
"""

import numpy as np

from towerflow.backends import numpy_backend
from towerflow.backends.kernels import build_kernels


class HostRead(AssertionError):
    """A kernel read a device value on the host."""


class HostValueCopied(AssertionError):
    """A step copied a host value (not a device array) from one GPU to another:
    a CUDA graph would replay that copy from a host buffer long gone."""


def _refuse(what):
    def read(self, *args, **kwargs):
        raise HostRead(f"{what} of a device array of shape {self.shape} (a host read)")
    return read


class HostReadTrap(np.ndarray):
    """An ndarray whose values cannot be read into Python."""

    __bool__ = _refuse("bool()")
    __int__ = _refuse("int()")
    __float__ = _refuse("float()")
    __complex__ = _refuse("complex()")
    __index__ = _refuse("operator.index()")
    __format__ = _refuse("format()")
    item = _refuse(".item()")
    tolist = _refuse(".tolist()")

    def __array_wrap__(self, array, context=None, return_scalar=False):
        # NOTE: a reduction to one value stays a 0-d trap, not a NumPy scalar
        # (which Python could read freely).
        return trapped(np.ndarray.__array_wrap__(self, array, context, False))


def trapped(value):
    """``value`` (an array or a NumPy scalar) as a HostReadTrap view."""
    if isinstance(value, HostReadTrap):
        return value
    return np.asarray(value).view(HostReadTrap)


def untrapped(value):
    """A plain ndarray view of ``value`` (to check results on the host)."""
    return value.view(np.ndarray) if isinstance(value, np.ndarray) else value


def _trapping(fn):
    def call(*args, **kwargs):
        result = fn(*args, **kwargs)
        if isinstance(result, tuple):
            return tuple(_trap_result(item) for item in result)
        return _trap_result(result)
    call.__name__ = getattr(fn, "__name__", "call")
    return call


def _trap_result(result):
    return trapped(result) if isinstance(result, (np.ndarray, np.generic)) else result


class _TrapUfunc:
    """A NumPy ufunc whose results (and its methods' results) are trapped."""

    def __init__(self, ufunc):
        self._ufunc = ufunc
        self._call = _trapping(ufunc)

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def __getattr__(self, name):
        value = getattr(self._ufunc, name)
        return _trapping(value) if callable(value) else value


class _TrapModule:
    """NumPy's names, but not the ``numpy`` module: functions return trapped
    arrays; types, dtypes, constants and submodules are NumPy's own."""

    def __getattr__(self, name):
        value = getattr(np, name)
        if isinstance(value, np.ufunc):
            return _TrapUfunc(value)
        if callable(value) and not isinstance(value, type):
            return _trapping(value)
        return value


TRAP_XP = _TrapModule()
TRAP_KERNELS = build_kernels(TRAP_XP)


class TrapGpu(numpy_backend.NumpyDevice):
    """A fake GPU runtime whose kernels are built over :data:`TRAP_XP` (the
    GPU's code paths) and whose arrays are HostReadTraps: a plan that reads
    a device value on the host fails with HostRead. It captures no CUDA
    graphs (``capture_group`` None): its plans run op by op."""

    kernels = TRAP_KERNELS
    capture_group = None

    @staticmethod
    def to_device(host_value):
        return trapped(np.array(host_value, copy=True))

    @staticmethod
    def to_host(value):
        return np.array(untrapped(value), copy=True)

    @staticmethod
    def copy_from(value, source_device):
        if source_device.logical_device.device_type == "GPU" and \
                not isinstance(value, HostReadTrap):
            raise HostValueCopied(f"a kernel on {source_device.name} returned a host value "
                                  f"({type(value).__name__}), copied to another GPU")
        return trapped(np.array(untrapped(value), copy=True))
