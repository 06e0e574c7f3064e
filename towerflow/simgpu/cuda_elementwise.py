"""cupy.ElementwiseKernel run as emulated C on the CPU (see
:mod:`.cuda_emulation`): an operation's source written out as a loop over
the broadcast shape (:func:`elementwise_source`), its types bound as CuPy
binds them (:func:`bind_types`), compiled and run through the same cached
compiler and header as the RawKernels.
"""

import ctypes

import numpy as np

from .cuda_emulation import HEADER, library, poison

_DTYPE_C_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
                  np.dtype(np.int8): "signed char", np.dtype(np.int16): "short",
                  np.dtype(np.int32): "int", np.dtype(np.int64): "long long",
                  np.dtype(np.uint8): "unsigned char", np.dtype(np.uint16): "unsigned short",
                  np.dtype(np.uint32): "unsigned int",
                  np.dtype(np.uint64): "unsigned long long", np.dtype(np.bool_): "bool"}


def elementwise_types_supported(dtypes):
    """Whether every bound type has a C type here (float16 has none: the
    simulator then runs the operation by translation)."""
    return all(np.dtype(dtype) in _DTYPE_C_TYPES for dtype in dtypes)


def elementwise_source(in_params, out_params, operation, placeholders):
    """The translation unit of an ElementwiseKernel: a loop over the
    elements that binds each input as ``const TYPE name`` and each output as
    ``TYPE& name``, as CuPy's generated kernel does, then runs ``operation``.
    ``placeholders`` maps each type letter to its bound dtype."""
    typedefs = "".join(f"typedef {_DTYPE_C_TYPES[np.dtype(dtype)]} {letter};\n"
                       for letter, dtype in sorted(placeholders.items()))
    binds = []
    for index, (kind, name) in enumerate(in_params):
        kind = _param_c_type(kind)
        binds.append(f"const {kind} {name} = (({kind}*)data[{index}])[offsets[{index}]];")
    for index, (kind, name) in enumerate(out_params, start=len(in_params)):
        kind = _param_c_type(kind)
        binds.append(f"{kind}& {name} = (({kind}*)data[{index}])[offsets[{index}]];")
    count = len(in_params) + len(out_params)
    return (f'#include "{HEADER}"\n{typedefs}'
            'extern "C" void tfemu_elementwise(long long n, int ndim, const long long* shape,'
            " void** data, const long long* strides) {\n"
            "    for (long long i = 0; i < n; ++i) {\n"
            f"        long long offsets[{count}] = {{0}};\n"
            "        long long rest = i;\n"
            "        for (int d = ndim - 1; d >= 0; --d) {\n"
            "            long long k = rest % shape[d];\n"
            "            rest /= shape[d];\n"
            f"            for (int a = 0; a < {count}; ++a) offsets[a] += k * strides[a * ndim + d];\n"
            "        }\n"
            "        " + "\n        ".join(binds) + "\n"
            f"        {{\n{operation}\n;\n        }}\n"
            "    }\n}\n")


def _param_c_type(kind):
    """A letter stays (its typedef names it); a named type is CuPy's C name
    for numpy.dtype(name) ('float' is double there, as in CuPy)."""
    dtype = param_dtype(kind)
    return kind if dtype is None else _DTYPE_C_TYPES[dtype]


# -- Binding the parameter types as CuPy 14 does (cupy/_core/_kernel.pyx) ----------------


def param_dtype(kind):
    """None for a type placeholder, else the dtype a parameter type names: as
    CuPy's ParameterInfo, one letter is a placeholder and any other name is
    numpy.dtype(name), so 'float' is float64 and 'int' int64 (not C's)."""
    return None if len(kind) == 1 else np.dtype(kind)


def check_call(name, in_params, out_params, args, array_type, size=None):
    """(inputs, outputs) of an ElementwiseKernel call, refused as CuPy's
    ElementwiseKernel.__call__, _preprocess_args and _broadcast refuse it."""
    count, total = len(in_params), len(in_params) + len(out_params)
    if len(args) not in (count, total):
        raise TypeError(f"Wrong number of arguments for {name!r}. It must be either {count} "
                        f"or {total} (with outputs), but given {len(args)}.")
    for value in args:
        if not isinstance(value, array_type):
            scalar_descr(value)
    if size is None and not any(isinstance(value, array_type) for value in args):
        raise ValueError("Loop size is undecided.")
    if not all(isinstance(value, array_type) for value in args[count:]):
        raise TypeError("Output arguments type must be cupy.ndarray")
    return list(args[:count]), list(args[count:])


def scalar_descr(value):
    """The dtype CuPy's CScalar gives a scalar argument (a NumPy array is none)."""
    if type(value) in (bool, int, float, complex):
        return np.asarray(value).dtype
    if isinstance(value, np.generic):
        return value.dtype
    raise TypeError(f"Unsupported type {type(value)}")


def scalar_value(value, dtype):
    """A scalar as CScalar.apply_dtype stores it: by NumPy's assignment, so a
    NaN into an integer type raises where a cast would not."""
    packed = np.empty((), dtype)
    packed[()] = value
    return packed


def bind_types(in_params, out_params, in_dtypes, out_dtypes):
    """(input dtypes, output dtypes, {letter: dtype}) as CuPy 14's
    _decide_params_type_core: the outputs (none when omitted) bind first, then
    the input arrays; a scalar (dtype None) binds nothing and takes its
    parameter's type. A letter no array binds is CuPy's KeyError(letter)."""
    bound = {}
    for params, dtypes in ((out_params, out_dtypes), (in_params, in_dtypes)):
        for (kind, name), dtype in zip(params, dtypes):
            if dtype is not None:
                _bind_one(bound, kind, name, np.dtype(dtype))

    def resolved(kind):
        named = param_dtype(kind)
        return bound[kind] if named is None else named
    return ([resolved(kind) for kind, _ in in_params],
            [resolved(kind) for kind, _ in out_params], bound)


def _bind_one(bound, kind, name, dtype):
    named = param_dtype(kind)
    if named is not None:
        if dtype != named:
            raise TypeError(f"Type is mismatched. {name} {dtype} {named}")
    elif kind in bound:
        if dtype != bound[kind]:
            raise TypeError(f"Type is mismatched. {name} {dtype} {bound[kind]} {kind}")
    else:
        bound[kind] = dtype


def run_elementwise(source, shape, values):
    """Run a compiled elementwise ``source`` over ``shape``: ``values`` are
    NumPy arrays (inputs broadcast to ``shape``, outputs of ``shape``), each
    already of its parameter's dtype; the outputs are written in place."""
    lib = library(source)
    shape = tuple(int(s) for s in shape)
    ndim = max(len(shape), 1)
    full = shape or (1,)
    strides = []
    for value in values:
        view = np.broadcast_to(value, shape).reshape(full) if shape else value.reshape(1)
        strides.extend(s // view.itemsize for s in view.strides)
    data = (ctypes.c_void_p * len(values))(*(value.ctypes.data for value in values))
    lib.tfemu_elementwise(ctypes.c_longlong(int(np.prod(full))), ndim,
                          (ctypes.c_longlong * ndim)(*full), data,
                          (ctypes.c_longlong * len(strides))(*strides))


class ElementwiseKernel:
    """cupy.ElementwiseKernel over NumPy arrays, run as emulated C, its types
    bound as CuPy binds them (bind_types); omitted outputs are made, with
    NaN bits, and returned."""

    def __init__(self, in_params, out_params, operation, name):
        from towerflow.backends.kernel_specs import parse_params
        self.in_params, self.out_params = parse_params(in_params), parse_params(out_params)
        self.operation, self.name = operation, name
        for kind, _ in self.in_params + self.out_params:
            param_dtype(kind)       # an unknown type name fails here, as in CuPy

    def __call__(self, *args):
        inputs, outputs = check_call(self.name, self.in_params, self.out_params, args,
                                     np.ndarray)
        in_types, out_types, placeholders = bind_types(
            self.in_params, self.out_params,
            [value.dtype if isinstance(value, np.ndarray) else None for value in inputs],
            [out.dtype for out in outputs])
        values = [value if isinstance(value, np.ndarray) else scalar_value(value, dtype)
                  for value, dtype in zip(inputs, in_types)]
        shape = np.broadcast_shapes(*(np.shape(value) for value in values + outputs))
        if not outputs:
            outputs = [np.empty(shape, dtype) for dtype in out_types]
            for out in outputs:
                poison(out)
        source = elementwise_source(self.in_params, self.out_params, self.operation,
                                    placeholders)
        run_elementwise(source, shape, values + outputs)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)
