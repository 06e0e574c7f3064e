"""Physical-device discovery: the host CPU and the GPUs CuPy can see.

The GPU probe asks the CUDA runtime (through CuPy, imported lazily) for the
device count and properties only.  It never allocates and never makes a GPU
current, so probing leaves no CUDA context on any GPU: hiding a GPU later
(``set_visible_devices``) still leaves it untouched::

    >>> gpus, reason = probe_gpus()
    >>> gpus or reason
    'CuPy is not installed; ...'
"""

import collections
import dataclasses
import logging
import os
import re
import threading

_log = logging.getLogger("towerflow")

# cudaError_t values the reasons tell apart.
_CUDA_ERROR_INSUFFICIENT_DRIVER = 35
_CUDA_ERROR_NO_DEVICE = 100
_CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803

_INSTALL_HINT = "install it with `pip install towerflow[cuda12]`"

PhysicalDevice = collections.namedtuple("PhysicalDevice", ["name", "device_type"])
PhysicalDevice.__doc__ = """A physical device, named like TensorFlow's.

    Example::

        >>> PhysicalDevice('/physical_device:GPU:0', 'GPU')
        PhysicalDevice(name='/physical_device:GPU:0', device_type='GPU')
    """


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    """One GPU the CUDA runtime can see.

    ``index`` counts among the GPUs visible to CUDA (after
    ``CUDA_VISIBLE_DEVICES``), which is the ordinal CuPy uses.

    Example::

        >>> GpuInfo(0, 'NVIDIA H100 80GB HBM3', 80 * 2**30, (9, 0), '0000:00:1e.0')
        GpuInfo(index=0, name='NVIDIA H100 80GB HBM3', ...)
    """

    index: int
    name: str
    total_memory: int
    compute_capability: tuple
    pci_bus_id: str


_lock = threading.Lock()
_cache = None
_probe_override = None
# CUDA reads CUDA_VISIBLE_DEVICES once, when it initialises; remember the value.
_env_at_cuda_init = None


def set_gpu_probe(probe):
    """Replace the GPU probe (tests inject fake GPUs); None restores CuPy's.

    ``probe`` is a function of no arguments returning ``(list[GpuInfo], reason)``.
    The cached result is dropped.

    Example::

        >>> h100 = GpuInfo(0, 'NVIDIA H100 80GB HBM3', 80 * 10**9, (9, 0), '0000:00:1e.0')
        >>> set_gpu_probe(lambda: ([h100], None))
    """
    global _probe_override
    if probe is not None and not callable(probe):
        raise TypeError(
            f"set_gpu_probe takes a function returning (list[GpuInfo], reason) or "
            f"None; got {type(probe).__name__} {probe!r}")
    with _lock:
        _probe_override = probe
    clear_probe_cache()


def gpus_come_from_cupy():
    """True unless a test replaced the probe: real GPUs, served by CuPy."""
    return _probe_override is None


def clear_probe_cache():
    """Forget the cached probe result; the next probe_gpus() asks again.

    Example::

        >>> clear_probe_cache()
    """
    global _cache
    with _lock:
        _cache = None


def probe_gpus():
    """The visible GPUs and, when there are none, a one-line reason why.

    Returns ``(gpus, reason)``: ``gpus`` is a list of :class:`GpuInfo` and
    ``reason`` is None when it is non-empty, else a sentence saying what is
    missing and how to fix it.  The result is cached.

    Example::

        >>> gpus, reason = probe_gpus()
        >>> [gpu.name for gpu in gpus]
        ['NVIDIA H100 80GB HBM3']
    """
    global _cache
    with _lock:
        if _cache is None:
            probe = _probe_override or _probe_with_cupy
            gpus, reason = probe()
            _cache = (list(gpus), None if gpus else reason or "no GPU was found")
        gpus, reason = _cache
    return list(gpus), reason


def host_memory_bytes():
    """The physical memory of this host in bytes (0 where the OS does not say).

    Example::

        >>> host_memory_bytes() > 0
        True
    """
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0


def describe_gpu(gpu):
    """TensorFlow's one-line description of a physical GPU.

    Example::

        >>> describe_gpu(probe_gpus()[0][0])
        'device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:00:1e.0, compute
        capability: 9.0'
    """
    major, minor = gpu.compute_capability
    return (f"device: {gpu.index}, name: {gpu.name}, pci bus id: {gpu.pci_bus_id}, "
            f"compute capability: {major}.{minor}")


def physical_name(gpu):
    """The PhysicalDevice name of a GPU.

    Example::

        >>> physical_name(GpuInfo(1, 'NVIDIA A100', 40 * 2**30, (8, 0), '0000:00:1f.0'))
        '/physical_device:GPU:1'
    """
    return f"/physical_device:GPU:{gpu.index}"


def _hidden_by_env():
    """A reason when CUDA_VISIBLE_DEVICES hides every GPU, else None."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None or _first_visible_id(value) is not None:
        return None
    return (f"every GPU is hidden by CUDA_VISIBLE_DEVICES={value!r}; unset it or list "
            f"GPU ids (e.g. CUDA_VISIBLE_DEVICES=0,1) before starting Python")


def _first_visible_id(value):
    """The first id CUDA would honour in CUDA_VISIBLE_DEVICES, or None.

    CUDA stops reading the list at the first invalid entry, so '-1' or
    '-1,0' hide every GPU.
    """
    first = value.split(",")[0].strip()
    if re.fullmatch(r"[0-9]+|(GPU|MIG)-[-0-9A-Za-z/]+", first):
        return first
    return None


def _probe_with_cupy():
    """Ask CuPy's CUDA runtime bindings; every failure becomes a reason."""
    reason = _hidden_by_env()
    if reason:
        return [], reason
    try:
        import cupy
    except ImportError as err:
        if err.name == "cupy":
            return [], f"CuPy is not installed; {_INSTALL_HINT}"
        return [], _import_failed(err)
    except Exception as err:  # a broken install raises all sorts
        return [], _import_failed(err)
    try:
        return _query_runtime(cupy.cuda.runtime)
    except Exception as err:
        return [], _reason_from_error(cupy, err)


def _import_failed(err):
    return f"CuPy failed to import ({_one_line(err)}); reinstall it: {_INSTALL_HINT}"


def _query_runtime(runtime):
    if runtime.driverGetVersion() == 0:
        return [], ("no CUDA driver was found (libcuda could not be loaded); install "
                    "the NVIDIA driver, or run on a machine with a GPU")
    _note_env_at_init()
    count = runtime.getDeviceCount()
    if count == 0:
        return [], _no_device_reason()
    return [_gpu_info(runtime, index) for index in range(count)], None


def _gpu_info(runtime, index):
    props = runtime.getDeviceProperties(index)
    name = props["name"]
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    # TensorFlow prints bus ids in lower case; CUDA gives upper-case hex.
    bus_id = runtime.deviceGetPCIBusId(index).lower()
    return GpuInfo(index=index, name=name.rstrip("\x00"),
                   total_memory=int(props["totalGlobalMem"]),
                   compute_capability=(int(props["major"]), int(props["minor"])),
                   pci_bus_id=bus_id)


def _note_env_at_init():
    """Warn when CUDA_VISIBLE_DEVICES changed after CUDA read it."""
    global _env_at_cuda_init
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if _env_at_cuda_init is None:
        _env_at_cuda_init = (value,)
    elif _env_at_cuda_init != (value,):
        _log.warning(
            "CUDA_VISIBLE_DEVICES changed to %r after CUDA was initialised with %r; CUDA "
            "keeps the first value. Set it before the first use of a GPU.",
            value, _env_at_cuda_init[0])


def _no_device_reason():
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is not None:
        return (f"the CUDA driver sees no GPU with CUDA_VISIBLE_DEVICES={value!r}; check "
                f"the ids against nvidia-smi, or unset CUDA_VISIBLE_DEVICES")
    return "the CUDA driver found no GPU; check nvidia-smi lists one"


def _reason_from_error(cupy, err):
    status = getattr(err, "status", None)
    if status == _CUDA_ERROR_NO_DEVICE:
        return _no_device_reason()
    if status == _CUDA_ERROR_INSUFFICIENT_DRIVER:
        return _old_driver_reason(cupy)
    if status == _CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
        return (f"the NVIDIA kernel module and user-space driver differ ({_one_line(err)}); "
                f"reboot or reinstall the driver")
    return f"CUDA could not list the GPUs ({_one_line(err)}); check nvidia-smi works"


def _old_driver_reason(cupy):
    driver = _version_text(cupy, "driverGetVersion")
    cuda = _version_text(cupy, "runtimeGetVersion")
    versions = ""
    if driver and cuda:
        versions = f" (driver supports CUDA {driver}, CuPy uses CUDA {cuda})"
    return (f"the NVIDIA driver is too old for CuPy's CUDA runtime{versions}; upgrade the "
            f"driver, or install a CuPy built for an older CUDA")


def _version_text(cupy, getter):
    """'12.4' from CUDA's 12040, or '' when it cannot be read."""
    try:
        version = int(getattr(cupy.cuda.runtime, getter)())
    except Exception:
        return ""
    return f"{version // 1000}.{version % 1000 // 10}" if version > 0 else ""


def _one_line(err):
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
