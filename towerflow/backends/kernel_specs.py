"""CUDA kernels kept as data: their source, how CuPy builds them, and a NumPy
reference of exactly what each computes (same arguments, same layout).

Nothing here imports CuPy until a kernel is built, so the specs can be read,
compiled with NVRTC (tests/test_gpu_conv.py) and run by their references
(tests, and a simulated GPU) on a machine without a GPU::

    spec = RawKernelSpec("towerflow_scale", "const T* x, T* y, T factor, int count",
                         "int i = blockIdx.x * blockDim.x + threadIdx.x;\\n"
                         "if (i < count) y[i] = x[i] * factor;",
                         reference=lambda x, y, factor, count: np.multiply(
                             x[:count], factor, out=y[:count]))
    spec.source(np.float32)         # 'typedef float T; extern "C" __global__ ...'
    spec.run_reference(x=x, y=y, factor=2.0, count=x.size)

Every spec registers itself by kernel name (:func:`spec_named`), which is
how a simulated GPU finds the reference of a kernel it is asked to launch.
"""

import numpy as np

# The C type of T for each array dtype a kernel may be built for.
FLOAT_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
# Kernels that only move elements (im2col) work on their bits: any dtype of
# 2, 4 or 8 bytes.
BITS_TYPES = {np.dtype(np.float16): "unsigned short", np.dtype(np.float32): "unsigned int",
              np.dtype(np.float64): "unsigned long long"}
_BITS_BY_SIZE = {dtype.itemsize: ctype for dtype, ctype in BITS_TYPES.items()}

# NumPy scalar type for each C scalar parameter type (T: the arrays' dtype).
_SCALAR_TYPES = {"int": np.int32, "long long": np.int64, "double": np.float64,
                 "float": np.float32}

_REGISTRY = {}


def spec_named(name):
    """The spec of the kernel called ``name`` (KeyError if there is none):
    ``spec_named("towerflow_im2col")`` is gpu_conv_specs.IM2COL."""
    return _REGISTRY[name]


def _register(spec):
    if spec.name in _REGISTRY:
        raise ValueError(f"two kernel specs are named {spec.name!r}")
    _REGISTRY[spec.name] = spec


def parse_params(params):
    """'const T* x, int n' -> [('const T*', 'x'), ('int', 'n')]."""
    parsed = []
    for param in params.split(","):
        kind, _, name = param.strip().rpartition(" ")
        if not kind or not name.isidentifier():
            raise ValueError(f"cannot read the kernel parameter {param.strip()!r} "
                             "(expected 'type name')")
        parsed.append((kind.strip(), name))
    return parsed


class RawKernelSpec:
    """A ``cupy.RawKernel``: ``extern "C" __global__ void name(params) {body}``
    with ``T`` typedef'd per element type; ``reference(**args)`` does in NumPy
    what the kernel does, writing its output arrays in place."""

    def __init__(self, name, params, body, reference, types=None, register=True):
        self.name, self.params, self.body = name, params, body
        self.reference = reference
        self.types = FLOAT_TYPES if types is None else types
        self._parsed = parse_params(params)
        if register:        # (a test's throwaway kernel is not)
            _register(self)

    def ctype(self, dtype):
        """The C type T stands for with arrays of ``dtype``."""
        dtype = np.dtype(dtype)
        ctype = self.types.get(dtype)
        if ctype is None and self.types is BITS_TYPES:
            ctype = _BITS_BY_SIZE.get(dtype.itemsize)
        if ctype is None:
            offered = ", ".join(key.name for key in self.types)
            raise TypeError(f"kernel {self.name} has no version for {dtype.name} arrays "
                            f"(it is built for {offered})")
        return ctype

    def source(self, dtype):
        """The CUDA source for arrays of ``dtype``."""
        return (f"typedef {self.ctype(dtype)} T;\n"
                f'extern "C" __global__ void {self.name}({self.params}) {{\n'
                f"{self.body}\n}}\n")

    def ordered_args(self, args, dtype):
        """``args`` (by parameter name) in parameter order, scalars as the
        NumPy scalar types the kernel's C parameters take."""
        missing = [name for _, name in self._parsed if name not in args]
        extra = sorted(set(args) - {name for _, name in self._parsed})
        if missing or extra:
            raise TypeError(f"kernel {self.name}: missing arguments {missing}, "
                            f"unexpected {extra}")
        return [_as_param(kind, args[name], dtype) for kind, name in self._parsed]

    def run_reference(self, **args):
        """Run the NumPy reference on NumPy ``args`` (by parameter name)."""
        dtype = self.array_dtype(args)
        named = dict(zip((name for _, name in self._parsed), self.ordered_args(args, dtype)))
        self.reference(**named)

    def array_dtype(self, args):
        """The dtype of the first T array among ``args``."""
        for kind, name in self._parsed:
            if kind.rstrip("*").split()[-1] == "T" and kind.endswith("*"):
                return np.dtype(args[name].dtype)
        raise TypeError(f"kernel {self.name} has no T* parameter")

    def kernel(self, dtype):
        import cupy
        return cupy.RawKernel(self.source(dtype), self.name)


def _as_param(kind, value, dtype):
    if kind.endswith("*"):
        return value
    scalar = dtype.type if kind == "T" else _SCALAR_TYPES.get(kind)
    if scalar is None:
        raise TypeError(f"no NumPy type for the kernel parameter type {kind!r}")
    return scalar(value)


class ElementwiseKernelSpec:
    """A ``cupy.ElementwiseKernel`` (inputs broadcast against each other, one
    thread per output element); ``reference(*inputs)`` returns the outputs
    (a tuple when there are several) as NumPy computes them.

    The operation stays within a small C subset a simulator can translate:
    arithmetic, comparisons, ``(T)`` casts, ``a ? b : c``, ``sqrt``,
    ``exp``, ``log``, ``max``, ``min``, ``fabs``, ``T name = expr;``
    declarations and assignments."""

    def __init__(self, in_params, out_params, operation, name, reference):
        self.in_params, self.out_params = in_params, out_params
        self.operation, self.name, self.reference = operation, name, reference
        self.types = FLOAT_TYPES
        _register(self)

    @property
    def input_names(self):
        return [name for _, name in parse_params(self.in_params)]

    @property
    def output_names(self):
        return [name for _, name in parse_params(self.out_params)]

    def run_reference(self, *arrays):
        """Inputs then outputs, as the kernel is called: the outputs are written."""
        count = len(self.input_names)
        results = self.reference(*arrays[:count])
        results = results if isinstance(results, tuple) else (results,)
        for out, result in zip(arrays[count:], results):
            out[...] = result

    def standalone_source(self, ctype):
        """The operation in a kernel of its own (each parameter a local of
        ``ctype``), for compiling with NVRTC where CuPy cannot build it."""
        params = parse_params(self.in_params) + parse_params(self.out_params)
        locals_ = "\n".join(f"{ctype} {name} = ({ctype})(1 + {index});"
                            for index, (_, name) in enumerate(params))
        outputs = " + ".join(self.output_names)
        return (f"typedef {ctype} T;\n"
                f'extern "C" __global__ void {self.name}({ctype}* sink) {{\n'
                f"{locals_}\n{self.operation}\nsink[0] = {outputs};\n}}\n")

    def kernel(self):
        import cupy
        return cupy.ElementwiseKernel(self.in_params, self.out_params, self.operation,
                                      self.name)
