"""The simulated ``cupy`` package: module objects for ``cupy``, ``cupy.cuda``
(``runtime``, ``nccl``, ``memory``, ``graph``), ``cupy.random``,
``cupy._core._accelerator`` and ``cupyx``, as :func:`~towerflow.simgpu.install`
puts them in ``sys.modules``. Only names the real CuPy has are offered
(tests/test_cupy_conformance.py checks them against the installed CuPy)."""

import contextlib
import types

import numpy as np

from . import arrays, clock, devices, graphs, kernels, memory, nccl, pinned, state, work


def _names(text):
    return text.split()


# NumPy functions offered as device kernels under the same names.
FUNCTIONS = _names("""
abs absolute add all amax amin any arccos arcsin arctan arctan2 argmax argmin argsort
around broadcast_arrays broadcast_to ceil clip concatenate copysign cos cosh count_nonzero
cumprod cumsum diag divide dot einsum equal exp exp2 expand_dims expm1 fabs flip floor
floor_divide fmax fmin fmod greater greater_equal hstack isclose isfinite isinf isnan
left_shift less less_equal log log10 log1p log2 logaddexp logical_and logical_not
logical_or logical_xor matmul max maximum mean min minimum mod moveaxis multiply
nan_to_num negative nonzero not_equal outer pad positive power prod ravel reciprocal
remainder repeat reshape right_shift rint roll round sign signbit sin sinh sort split
sqrt square squeeze stack std subtract sum swapaxes take tan tanh tensordot tile
transpose tril triu true_divide trunc var vstack where bitwise_and bitwise_or bitwise_xor
invert
""")
# Functions of shapes and dtypes only: they touch no device memory.
METADATA = ["shape", "ndim", "size", "result_type", "can_cast", "promote_types",
            "dtype", "finfo", "iinfo", "isscalar", "issubdtype"]
DTYPES = ["bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
          "uint64", "float16", "float32", "float64", "complex64", "complex128",
          "intp", "float_", "inf", "nan", "pi", "e", "newaxis"]
_HOST_SYNCING = {"nonzero", "count_nonzero"}


def _device_function(name):
    function = getattr(np, name)
    host_sync = name in _HOST_SYNCING

    def call(*args, **kwargs):
        if host_sync or (name == "where" and len(args) == 1):   # a size read on the host
            state.world().refuse_during_capture(f"cupy.{name} (its size is read on the host)")
        return arrays.launch(function, args, kwargs, name)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"cupy.{name} on the simulated GPU (NumPy's {name})."
    if isinstance(function, np.ufunc):
        call.nin, call.nout, call.types = function.nin, function.nout, _loops(function)
    if name in _WITH_AT:
        call.at = _unbuffered_at(function, name)
    return call


# Ufuncs whose unbuffered ``at`` (scatter: a[indices] op= b) kernels use.
_WITH_AT = {"add"}


def _unbuffered_at(ufunc, name):
    def at(a, indices, b=None):
        args = (a, indices) if b is None else (a, indices, b)
        arrays.launch(ufunc.at, args, {}, f"{name}.at", written=(a,))
    at.__name__ = at.__qualname__ = "at"
    at.__doc__ = f"cupy.{name}.at on the simulated GPU (NumPy's {name}.at)."
    return at


def _loops(ufunc):
    """A ufunc's loops as CuPy 14 lists them: NumPy's, plus bfloat16 ('E', as
    ml_dtypes' char) for the arithmetic ufuncs CuPy 14 gives one."""
    loops = list(ufunc.types)
    if ufunc.nout == 1 and ufunc.__name__ not in _NO_BFLOAT16_LOOP:
        loops.append("E" * ufunc.nin + "->E")
    return loops


# CuPy 14.2's ufuncs without a bfloat16 loop (logic and bit twiddling).
_NO_BFLOAT16_LOOP = {"logical_not", "logical_and", "logical_or", "logical_xor",
                     "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift",
                     "right_shift", "isnan", "isinf", "isfinite", "signbit", "equal",
                     "not_equal", "less", "less_equal", "greater", "greater_equal"}


def _from_host(value, dtype=None):
    host = np.array(value, dtype=dtype)
    out = arrays.ndarray(host.shape, host.dtype)
    world = state.world()
    if world.capture_of(world.current_stream()) is not None:
        raise clock.capture_error("a copy from pageable host memory")
    work.submit(work.Work("host-to-device copy",
                              lambda: arrays._assign(out._view, host),
                              writes=(out.data.block,)))
    return out


def asarray(a, dtype=None, order=None, *, blocking=False):
    if isinstance(a, arrays.ndarray):
        if a.data.device_id != state.world().current_device:
            return array(a, dtype=dtype)
        return a if dtype is None or np.dtype(dtype) == a.dtype else a.astype(dtype)
    return _from_host(a, dtype)


def array(obj, dtype=None, copy=True, order="K", subok=False, ndmin=0, *, blocking=False):
    if not isinstance(obj, arrays.ndarray):
        return _from_host(obj, dtype)
    if obj.data.device_id != state.world().current_device:
        # CuPy 14 (_array_from_cupy_ndarray): src.copy(order=order), then astype
        obj = arrays.peer_copy(obj, "K" if order is None else order)
        return obj if dtype is None or np.dtype(dtype) == obj.dtype else obj.astype(dtype)
    return arrays.launch(np.array, (obj,), {"dtype": dtype, "copy": True}, "copy")


def ascontiguousarray(a, dtype=None):
    return arrays.launch(np.ascontiguousarray, (a,), {"dtype": dtype}, "ascontiguousarray")


def asnumpy(a, stream=None, order="C", out=None, *, blocking=True):
    if isinstance(a, arrays.ndarray):
        return a.get(stream=stream, order=order, out=out, blocking=blocking)
    return np.asarray(a, order=order)


def empty(shape, dtype=float, order="C"):
    return arrays.ndarray(shape, dtype, order=order)


def _filled(shape, dtype, value):
    out = arrays.ndarray(shape, dtype)
    view = out._view
    work.submit(work.Work("fill", lambda: view.fill(value), writes=(out.data.block,)))
    return out


def full(shape, fill_value, dtype=None, order="C"):
    if isinstance(fill_value, arrays.ndarray):      # CuPy: cupy.copyto, broadcasting
        out = arrays.ndarray(shape, fill_value.dtype if dtype is None else dtype)
        copyto(out, fill_value, casting="unsafe")
        return out
    dtype = np.asarray(fill_value).dtype if dtype is None else dtype
    return _filled(shape, dtype, fill_value)


def zeros(shape, dtype=float, order="C"):
    return _filled(shape, dtype, 0)


def ones(shape, dtype=float, order="C"):
    return _filled(shape, dtype, 1)


def empty_like(prototype, dtype=None, order="K", subok=None, shape=None):
    return empty(prototype.shape if shape is None else shape,
                 prototype.dtype if dtype is None else dtype)


def zeros_like(a, dtype=None, order="K", subok=None, shape=None):
    return zeros(a.shape if shape is None else shape, a.dtype if dtype is None else dtype)


def ones_like(a, dtype=None, order="K", subok=None, shape=None):
    return ones(a.shape if shape is None else shape, a.dtype if dtype is None else dtype)


def full_like(a, fill_value, dtype=None, order="K", subok=None, shape=None):
    return full(a.shape if shape is None else shape, fill_value,
                a.dtype if dtype is None else dtype)


def arange(start, stop=None, step=1, dtype=None):
    """Computed on the device, as CuPy's (no copy from the host)."""
    values = np.arange(start, stop, step, dtype=dtype)
    out = arrays.ndarray(values.shape, values.dtype)
    work.submit(work.Work("arange", lambda: arrays._assign(out._view, values),
                              writes=(out.data.block,)))
    return out


def copyto(dst, src, casting="same_kind", where=True):
    """As CuPy's: a plain copy may read ``src`` on another GPU: one peer copy
    when both have one layout, else through ``src.copy()`` (see peer_copy)."""
    plain = where is True and casting == "same_kind"
    if plain and _on_another_gpu(src) and not _can_memcpy(dst, src):
        src = arrays.peer_copy(src, "C")
    arrays.launch(np.copyto, (dst, src), {"casting": casting, "where": where}, "copyto",
                  written=(dst,), cross_device=plain)


def _on_another_gpu(value):
    return isinstance(value, arrays.ndarray) and \
        value.data.device_id != state.world().current_device


def _can_memcpy(dst, src):
    """CuPy's test (_manipulation/basic.py) for one memcpy between the two."""
    both_c = dst.flags.c_contiguous and src.flags.c_contiguous
    both_f = dst.flags.f_contiguous and src.flags.f_contiguous
    return (both_c or both_f) and dst.dtype == src.dtype and dst.size == src.size


def get_array_module(*args):
    return _CUPY if any(isinstance(a, arrays.ndarray) for a in args) else np


@contextlib.contextmanager
def using_allocator(allocator=None):
    state.push_allocator(allocator or state.default_pool().malloc)
    try:
        yield
    finally:
        state.pop_allocator()


def get_current_stream(device_id=-1):
    return state.world().current_stream(device_id)


def _module(name, **attributes):
    module = types.ModuleType(name)
    module.__path__ = []        # a package, so its submodules can be imported
    module.__dict__.update(attributes)
    return module


# NOTE: as in CuPy, `import cupy` does not bring cupy.cuda.nccl: it is set on
# cupy.cuda only once imported (install() serves it through an import finder).
IMPORTED_ON_DEMAND = ("cupy.cuda.nccl",)


def build():
    """{module name: module} of the simulated CuPy (of the installed world)."""
    runtime = devices.Runtime()
    runtime_module = _module("cupy.cuda.runtime", CUDARuntimeError=clock.CUDARuntimeError,
                             **{name: getattr(runtime, name) for name in dir(runtime)
                                if not name.startswith("_") and name != "CUDARuntimeError"})
    memory_module = _module("cupy.cuda.memory", OutOfMemoryError=memory.OutOfMemoryError,
                            MemoryPool=memory.MemoryPool, MemoryPointer=memory.MemoryPointer)
    graph_module = _module("cupy.cuda.graph", Graph=graphs.Graph)
    nccl_module = _module("cupy.cuda.nccl", **{name: getattr(nccl, name) for name in dir(nccl)
                                              if name == "available" or name.startswith(
                                                  ("NCCL_", "Nccl", "group", "get_"))})
    cuda = _module("cupy.cuda", Device=devices.Device, Stream=clock.Stream, Event=clock.Event,
                   get_elapsed_time=clock.get_elapsed_time,
                   MemoryPool=memory.MemoryPool, MemoryPointer=memory.MemoryPointer,
                   PinnedMemoryPool=pinned.PinnedMemoryPool, using_allocator=using_allocator,
                   get_current_stream=get_current_stream,
                   runtime=runtime_module, memory=memory_module, graph=graph_module,
                   is_available=lambda: True)
    accelerator = _module("cupy._core._accelerator", ACCELERATOR_CUB=1, ACCELERATOR_CUTENSOR=2,
                          **_accelerator_functions())
    linalg = _module("cupy._core._routines_linalg", **_linalg_functions())
    core = _module("cupy._core", _accelerator=accelerator, _routines_linalg=linalg)
    random = _module("cupy.random", default_rng=kernels.default_rng,
                     Generator=kernels.Generator)
    cupyx = _module("cupyx", empty_pinned=pinned.empty_pinned,
                    zeros_pinned=pinned.zeros_pinned)
    cupy = _module("cupy", __version__="14.2.0+simulated", ndarray=arrays.ndarray,
                   cuda=cuda, random=random, _core=core,
                   ElementwiseKernel=kernels.ElementwiseKernel, RawKernel=kernels.RawKernel,
                   get_default_memory_pool=state.default_pool,
                   get_default_pinned_memory_pool=pinned.pinned_pool, **_array_functions())
    global _CUPY
    _CUPY = cupy
    return {"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.runtime": runtime_module,
            "cupy.cuda.memory": memory_module, "cupy.cuda.graph": graph_module,
            "cupy.cuda.nccl": nccl_module, "cupy._core": core,
            "cupy._core._accelerator": accelerator, "cupy._core._routines_linalg": linalg,
            "cupy.random": random, "cupyx": cupyx}


_CUPY = None


def _array_functions():
    found = {name: _device_function(name) for name in FUNCTIONS}
    found.update({name: getattr(np, name) for name in METADATA + DTYPES if hasattr(np, name)})
    for function in (asarray, array, ascontiguousarray, asnumpy, empty, zeros, ones, full,
                     empty_like, zeros_like, ones_like, full_like, arange, copyto,
                     get_array_module):
        found[function.__name__] = function
    return found


def _accelerator_functions():
    chosen = {"reduction": [1], "routine": [1]}
    return {"get_reduction_accelerators": lambda: list(chosen["reduction"]),
            "set_reduction_accelerators":
                lambda accelerators: chosen.update(reduction=list(accelerators)),
            "get_routine_accelerators": lambda: list(chosen["routine"]),
            "set_routine_accelerators":
                lambda accelerators: chosen.update(routine=list(accelerators))}


def _linalg_functions():
    """The GEMM compute type (TF32 or not): kept, and reported; the simulator
    multiplies in NumPy's precision whatever it is set to."""
    names = {0: "COMPUTE_TYPE_TBD", 1: "COMPUTE_TYPE_DEFAULT", 2: "COMPUTE_TYPE_PEDANTIC",
             3: "COMPUTE_TYPE_FP16", 4: "COMPUTE_TYPE_FP32", 5: "COMPUTE_TYPE_FP64",
             6: "COMPUTE_TYPE_BF16", 7: "COMPUTE_TYPE_TF32"}
    chosen = {}

    def set_compute_type(dtype, compute_type):
        chosen[np.dtype(dtype)] = compute_type

    def get_compute_type(dtype):
        return chosen.get(np.dtype(dtype), 1)
    return {**{name: value for value, name in names.items()},
            "set_compute_type": set_compute_type, "get_compute_type": get_compute_type,
            "compute_type_to_str": lambda compute_type: names[compute_type]}
