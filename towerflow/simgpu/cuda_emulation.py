"""CUDA C run on the CPU, as written: a RawKernel's source, or an
ElementwiseKernel's operation (written out as a loop by
:mod:`.cuda_elementwise`), compiled with the host's C++ compiler against a
small emulation of CUDA (cuda_emulation.h) and launched through ctypes.

The simulated GPU launches user kernels through here where a compiler is
present (:func:`available`), so the CUDA C itself is what the GPU tests run:
its grid and block, its bounds checks, its barriers, its shared arrays and
the C types its arguments arrive as. What the header checks (out-of-bounds
accesses, races, shared memory read before written, divergent barriers,
arguments of the wrong size or kind) raises :class:`CudaEmulationError`
naming the array, the index and the thread::

    from towerflow.backends.gpu_conv_specs import IM2COL
    launch_raw(IM2COL.source(np.float32), IM2COL.name, grid=(n * out_h,), block=(256,),
               args=IM2COL.ordered_args(args, np.dtype(np.float32)))

Compiled kernels are cached by their source and flags (in
``$TOWERFLOW_CACHE_DIR/cuda_emulation``, default ``~/.cache/towerflow``):
about a second each the first time. ``TOWERFLOW_CUDA_EMULATION=0`` turns the
emulation off (the simulator then runs each RawKernel's NumPy reference);
``TOWERFLOW_CUDA_EMULATION_SANITIZE=address`` builds the kernels under
AddressSanitizer and UBSan (the process needs libasan preloaded: see
tests/test_cuda_emulation.py).

How the source is changed before compiling (NOTE: a kernel that needs more
than this fails to compile, loudly, rather than running wrong):
``T*`` / ``const T*`` (and pointers to the C scalar types) become checked
``dev_ptr<T>``; ``__shared__ T name[N];`` becomes a checked ``Shared<T, N>``
of the block; ``extern "C"`` is dropped (the header's launch thunk calls the
kernel); ``__restrict__`` is dropped. Dynamic shared memory (``extern
__shared__``), ``auto``, ``decltype`` and ``sizeof`` of a pointer type are
refused.
"""

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading

import numpy as np

from towerflow import switches

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda_emulation.h")
SWITCH = "TOWERFLOW_CUDA_EMULATION"
SANITIZE = "TOWERFLOW_CUDA_EMULATION_SANITIZE"
_FLAGS = ["-std=c++17", "-O1", "-fPIC", "-shared", "-w"]
_SANITIZER_FLAGS = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g"]

_SCALAR_C_TYPES = ("unsigned long long", "long long", "unsigned int", "unsigned short",
                   "unsigned char", "signed char", "short", "int", "float", "double",
                   "bool", "char", "T")
_POINTER = re.compile(r"(\bconst\s+)?\b(" + "|".join(t.replace(" ", r"\s+")
                                                   for t in _SCALAR_C_TYPES) + r")\s*\*")
_SHARED = re.compile(r"__shared__\s+([A-Za-z_][\w\s]*?)\s+([A-Za-z_]\w*)\s*\[([^\]]+)\]\s*;")
_SIGNATURE = re.compile(r"__global__\s+void\s+([A-Za-z_]\w*)\s*\(([^)]*)\)")

_LOCK = threading.Lock()
_LIBRARIES = {}


class CudaEmulationError(RuntimeError):
    """A kernel did something CUDA leaves undefined, or that would read or
    write the wrong memory on a GPU."""


# -- is it there ---------------------------------------------------------------------------


def compiler():
    """The C++ compiler the emulation uses ($CXX, else g++ or c++), or None."""
    for candidate in (os.environ.get("CXX"), "g++", "c++"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


def available():
    """Whether kernels run as CUDA C here: a compiler, and the switch not off."""
    return switches.on(SWITCH) and compiler() is not None


# -- the source ------------------------------------------------------------------------------


_REFUSED = ((re.compile(r"extern\s+__shared__"), "dynamic shared memory (extern __shared__)"),
            # a lazy element reference would be read where used, not where declared
            (re.compile(r"\b(auto|decltype)\b"), "auto or decltype"),
            (re.compile(r"sizeof\s*\([^)]*\*\s*\)"), "sizeof of a pointer type"))


def rewrite_source(code):
    """The kernel source as the header compiles it (see the module docstring)."""
    for pattern, what in _REFUSED:
        if pattern.search(code):
            raise NotImplementedError(f"the CUDA emulation runs no kernel with {what}")
    code = code.replace('extern "C"', "").replace("__restrict__", "")
    code = _SHARED.sub(lambda m: f"static ::tfemu::Shared<{m.group(1)}, ({m.group(3)})> "
                                 f'{m.group(2)}("{m.group(2)}");', code)
    return _POINTER.sub(lambda m: f"::tfemu::dev_ptr<{m.group(1) or ''}{m.group(2)}> ", code)


def kernel_params(code, name):
    """[(C type, parameter name)] of kernel ``name`` in ``code``."""
    for match in _SIGNATURE.finditer(code):
        if match.group(1) == name:
            params = []
            for param in filter(None, (p.strip() for p in match.group(2).split(","))):
                kind, _, param_name = param.replace("__restrict__", "").rpartition(" ")
                if param_name.startswith("*"):
                    kind, param_name = kind + "*", param_name.lstrip("*")
                params.append((" ".join(kind.split()).replace(" *", "*"), param_name))
            return params
    raise ValueError(f"no __global__ function named {name!r} in the kernel source")


def _argument(kind, index, name):
    if kind.endswith("*"):
        pointee = kind[:-1].strip()
        return f'::tfemu::pointer_arg<{pointee}>(&tfemu_args[{index}], "{kind}", "{name}")'
    return f'::tfemu::scalar_arg<{kind}>(&tfemu_args[{index}], "{kind}", "{name}")'


def raw_source(code, name):
    """The whole translation unit for RawKernel ``name``: the header, the
    rewritten kernel, and a launch thunk that calls it with checked arguments."""
    params = kernel_params(code, name)
    arguments = ",\n        ".join(_argument(kind, index, param)
                                   for index, (kind, param) in enumerate(params))
    return (f'#include "{HEADER}"\n{rewrite_source(code)}\n'
            "static ::tfemu::Arg* tfemu_args;\n"
            f"static void tfemu_body() {{\n    {name}(\n        {arguments});\n}}\n"
            'extern "C" int tfemu_launch(::tfemu::LaunchConfig* config, '
            "::tfemu::Arg* args, int count) {\n"
            "    tfemu_args = args;\n"
            "    int status = ::tfemu::launch(config, tfemu_body);\n"
            "    ::tfemu::free_shadows(args, count);\n"
            "    return status;\n}\n")


# -- compiling --------------------------------------------------------------------------------


def _cache_dir():
    root = os.environ.get("TOWERFLOW_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "towerflow")
    path = os.path.join(root, "cuda_emulation")
    try:
        os.makedirs(path, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    # A read-only home: a folder of this user's own in the temporary folder
    # (NOTE: never one another user could have made: its kernels are loaded).
    path = os.path.join(tempfile.gettempdir(), f"towerflow_cuda_emulation_{os.getuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.stat(path).st_uid != os.getuid():
        raise CudaEmulationError(f"the kernel cache {path} belongs to another user: set "
                                 "TOWERFLOW_CACHE_DIR to a folder of your own")
    return path


def _flags():
    sanitize = os.environ.get(SANITIZE, "")
    if sanitize not in ("", "address"):
        raise ValueError(f"{SANITIZE}={sanitize!r}: expected 'address' or nothing")
    return _FLAGS + (_SANITIZER_FLAGS if sanitize else [])


def library(source):
    """The compiled ``source`` (cached on disk and in the process)."""
    flags = _flags()
    with open(HEADER, "rb") as header:
        key = hashlib.sha256(header.read() + source.encode() + " ".join(flags).encode() +
                             compiler().encode()).hexdigest()[:24]
    with _LOCK:
        loaded = _LIBRARIES.get(key)
        if loaded is None:
            loaded = _LIBRARIES[key] = ctypes.CDLL(_compiled(source, key, flags))
            # NOTE: a launch runs on the library's globals (its scheduler, its
            # shared arrays) and ctypes lets go of the GIL: one launch at a time.
            loaded.launch_lock = threading.Lock()
        return loaded


def _compiled(source, key, flags):
    path = os.path.join(_cache_dir(), f"{key}.so")
    if os.path.exists(path):
        return path
    with tempfile.TemporaryDirectory(dir=_cache_dir()) as work:
        source_path = os.path.join(work, "kernel.cpp")
        with open(source_path, "w") as out:
            out.write(source)
        built = os.path.join(work, "kernel.so")
        result = subprocess.run([compiler(), *flags, "-o", built, source_path],
                                check=False, capture_output=True, text=True)
        if result.returncode:
            raise CudaEmulationError(f"the kernel does not compile as emulated CUDA C:\n"
                                     f"{result.stderr[-4000:]}")
        os.replace(built, path)         # atomic: another process may race us here
    return path


# -- launching a RawKernel ------------------------------------------------------------------


class _Arg(ctypes.Structure):
    _fields_ = [("is_array", ctypes.c_int), ("kind", ctypes.c_char),
                ("itemsize", ctypes.c_longlong), ("data", ctypes.c_void_p),
                ("count", ctypes.c_longlong), ("dtype_name", ctypes.c_char_p),
                ("writer", ctypes.c_void_p), ("write_epoch", ctypes.c_void_p),
                ("alias_of", ctypes.c_void_p)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_bytes", ctypes.c_longlong), ("reverse", ctypes.c_int),
                ("uses_barriers", ctypes.c_int), ("error", ctypes.c_char * 1024)]


def as_launch_value(value):
    """A RawKernel argument as CuPy passes it: an array by its pointer, a
    NumPy scalar by its bytes, a Python int as int64, a float as float64
    (cupy/cuda/function.pyx, ``_pointer``)."""
    if isinstance(value, np.ndarray):
        if not value.flags.c_contiguous:
            raise CudaEmulationError(f"a non-contiguous array (shape {value.shape}, strides "
                                     f"{value.strides}) passed to a RawKernel: the kernel "
                                     "reads its memory as flat")
        return value
    if isinstance(value, np.generic):
        return value
    if isinstance(value, (bool, int)):
        return np.int64(value)
    if isinstance(value, float):
        return np.float64(value)
    raise TypeError(f"Unsupported type {type(value)}")


def _arg(value, keep):
    value = as_launch_value(value)
    name = value.dtype.name.encode()
    keep.append(name)
    if isinstance(value, np.ndarray):
        return _Arg(1, value.dtype.kind.encode(), value.itemsize, value.ctypes.data,
                    value.size, name)
    scalar = np.array(value)
    keep.append(scalar)
    return _Arg(0, scalar.dtype.kind.encode(), scalar.itemsize, scalar.ctypes.data, 1, name)


def _triple(size):
    size = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    return (tuple(int(s) for s in size) + (1, 1, 1))[:3]


def launch_raw(code, name, grid, block, args, shared_mem=0, reverse=False):
    """Run RawKernel ``name`` of ``code`` on NumPy ``args`` (in parameter
    order) over ``grid`` x ``block``, as a GPU would; ``reverse`` runs the
    blocks, and each block's threads, in the opposite order (a race shows
    under either)."""
    if shared_mem:
        raise NotImplementedError("the CUDA emulation has no dynamic shared memory")
    params = kernel_params(code, name)
    if len(args) != len(params):
        raise TypeError(f"kernel {name} takes {len(params)} arguments, the launch passes "
                        f"{len(args)}")
    lib = library(raw_source(code, name))
    keep = []
    packed = (_Arg * len(args))(*(_arg(value, keep) for value in args))
    _mark_aliases(packed)
    config = _LaunchConfig(_triple(grid), _triple(block), 0, int(reverse),
                           int("__syncthreads" in code), b"")
    with lib.launch_lock:
        failed = lib.tfemu_launch(ctypes.byref(config), packed, len(args))
    if failed:
        raise CudaEmulationError(f"kernel {name}: {config.error.decode()}")


def _mark_aliases(packed):
    """Arguments over the same memory, in elements of one size, share one
    record of who wrote what. NOTE: views that overlap in part, or of other
    element sizes, keep records of their own: a race between them is missed."""
    seen = {}
    for arg in packed:
        if not arg.is_array:
            continue
        key = (arg.data, arg.count, arg.itemsize)
        if key in seen:
            arg.alias_of = ctypes.addressof(seen[key])
        else:
            seen[key] = arg


# -- CuPy's kernel classes over NumPy arrays ----------------------------------------------------


def poison(array):
    """NaN bits in every byte, as the simulated GPU's fresh memory reads."""
    array.view(np.uint8).reshape(-1).fill(0xFF)


class RawKernel:
    """cupy.RawKernel over NumPy arrays, run as emulated CUDA C. The arrays
    its non-const pointers name are poisoned before each launch, so an
    element no thread writes reads NaN (a grid one block short shows)."""

    def __init__(self, code, name, reverse=False):
        self.code, self.name, self.reverse = code, name, reverse
        params = kernel_params(code, name)
        self._written = [index for index, (kind, _) in enumerate(params)
                         if kind.endswith("*") and not kind.startswith("const")]

    def __call__(self, grid, block, args, shared_mem=0):
        for index in self._written:
            if isinstance(args[index], np.ndarray):
                poison(args[index])
        launch_raw(self.code, self.name, grid, block, args, shared_mem, self.reverse)
