"""User kernels on the simulated GPUs, and cupy.random's Generator (its state
kept on its device).

Where a C++ compiler is present (cuda_emulation.available()), both kinds of
user kernel run their CUDA C as written: a RawKernel its whole source, over
its grid and block, with real barriers, shared arrays and checked accesses;
an ElementwiseKernel its operation, with its parameters bound to C types.
Without one, a RawKernel runs a registered NumPy reference, and an
ElementwiseKernel's operation is translated to NumPy.

The C the translation accepts is a small subset (what towerflow's kernels
use): ``T name = expr;`` declarations, ``name = expr;`` assignments,
arithmetic, comparisons, ``&& || !``, ``a ? b : c``, ``(T)`` casts and the
math functions in ``_FUNCTIONS``. Anything else raises NotImplementedError
naming the token, so a kernel the simulator cannot run is never run wrong.
"""

import re

import numpy as np

from . import arrays, cuda_elementwise, cuda_emulation, state, work

_C_TYPES = {"bool": np.bool_, "float": np.float32, "double": np.float64,
            "int": np.int32, "long": np.int64, "float16": np.float16,
            "float32": np.float32, "float64": np.float64, "int32": np.int32,
            "int64": np.int64, "half": np.float16}
_FUNCTIONS = {"sqrt": "np.sqrt", "exp": "np.exp", "log": "np.log", "fabs": "np.abs",
              "abs": "np.abs", "max": "np.maximum", "min": "np.minimum",
              "fmax": "np.fmax", "fmin": "np.fmin", "tanh": "np.tanh", "pow": "np.power",
              "rsqrt": "_rsqrt", "log1p": "np.log1p", "expm1": "np.expm1"}
_TOKEN = re.compile(r"\s*(?:(\d+\.\d*(?:[eE][-+]?\d+)?f?|\.\d+(?:[eE][-+]?\d+)?f?|\d+[eE][-+]?\d+f?"
                    r"|\d+[uUlL]*)|([A-Za-z_]\w*)|(\|\||&&|==|!=|<=|>=|[-+*/%<>!?:(),=]))")


def parse_params(text):
    """'T x, float y' -> [(type, name)]."""
    params = []
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        words = part.replace("raw ", "").split()
        params.append((words[-2], words[-1]))
    return params


class _Parser:
    """C expression -> Python expression string (precedence climbing)."""

    def __init__(self, text, types):
        self.tokens = self._lex(text)
        self.position, self.types = 0, types

    @staticmethod
    def _lex(text):
        tokens, position = [], 0
        while position < len(text):
            match = _TOKEN.match(text, position)
            if match is None or match.end() == position:
                if text[position:].strip() == "":
                    break
                raise NotImplementedError(f"the simulated GPU cannot translate C code at "
                                          f"{text[position:position + 20]!r}")
            tokens.append(match.group(0).strip())
            position = match.end()
        return tokens

    def peek(self):
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self, expected=None):
        token = self.peek()
        if expected is not None and token != expected:
            raise NotImplementedError(f"expected {expected!r} in C code, found {token!r}")
        self.position += 1
        return token

    def expression(self):
        condition = self.binary(0)
        if self.peek() == "?":
            self.take()
            yes = self.expression()
            self.take(":")
            no = self.expression()
            return f"np.where({condition}, {yes}, {no})"
        return condition

    _LEVELS = (("||",), ("&&",), ("==", "!="), ("<", ">", "<=", ">="), ("+", "-"),
               ("*", "/", "%"))
    _PYTHON = (("||", "np.logical_or"), ("&&", "np.logical_and"))

    def binary(self, level):
        if level == len(self._LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in self._LEVELS[level]:
            operator = self.take()
            right = self.binary(level + 1)
            if operator in dict(self._PYTHON):
                left = f"{dict(self._PYTHON)[operator]}({left}, {right})"
            elif operator == "%":
                left = f"np.fmod({left}, {right})"
            else:
                left = f"({left} {operator} {right})"
        return left

    def unary(self):
        token = self.peek()
        if token in ("-", "+"):
            self.take()
            return f"({token}{self.unary()})"
        if token == "!":
            self.take()
            return f"np.logical_not({self.unary()})"
        if token == "(" and self._is_cast():
            self.take()
            type_name = self.take()
            self.take(")")
            return f"_cast({self.unary()}, {type_name!r})"
        return self.primary()

    def _is_cast(self):
        following = self.tokens[self.position + 1:self.position + 3]
        return len(following) == 2 and following[1] == ")" and \
            (following[0] in self.types or following[0] in _C_TYPES)

    def primary(self):
        token = self.take()
        if token == "(":
            inner = self.expression()
            self.take(")")
            return f"({inner})"
        if token is None:
            raise NotImplementedError("C expression ends early")
        if token[0].isdigit() or token[0] == ".":
            return token.rstrip("fFuUlL")
        if token in ("true", "false"):
            return "True" if token == "true" else "False"
        if self.peek() == "(":
            if token not in _FUNCTIONS:
                raise NotImplementedError(f"the simulated GPU has no C function {token!r}")
            self.take("(")
            args = [self.expression()]
            while self.peek() == ",":
                self.take()
                args.append(self.expression())
            self.take(")")
            return f"{_FUNCTIONS[token]}({', '.join(args)})"
        if not re.fullmatch(r"[A-Za-z_]\w*", token):
            raise NotImplementedError(f"unexpected token {token!r} in C code")
        return f"v[{token!r}]"


def translate(operation, type_names):
    """The C ``operation`` as a list of (kind, name, type, python expression)."""
    statements = []
    for statement in filter(None, (part.strip() for part in operation.split(";"))):
        match = re.fullmatch(r"(?:(\w+)\s+)?(\w+)\s*([-+*/]?=)\s*(.+)", statement, re.DOTALL)
        if match is None:
            raise NotImplementedError(f"the simulated GPU cannot run the C statement "
                                      f"{statement!r}")
        declared, name, operator, expression = match.groups()
        if operator != "=":
            expression = f"{name} {operator[0]} ({expression})"
        python = _Parser(expression, type_names).expression()
        statements.append((declared, name, compile(python, "<elementwise>", "eval")))
    return statements


class ElementwiseKernel:
    """cupy.ElementwiseKernel, run by translating ``operation`` to NumPy."""

    def __init__(self, in_params, out_params, operation, name="kernel", reduce_dims=True,
                 preamble="", no_return=False, return_tuple=False, loop_prep="",
                 after_loop="", options=()):
        self.in_params, self.out_params = parse_params(in_params), parse_params(out_params)
        self.name, self.no_return, self.return_tuple = name, no_return, return_tuple
        if preamble or loop_prep or after_loop:
            raise NotImplementedError("the simulated GPU runs no preamble/loop_prep code")
        self.operation, self._sources = operation, {}
        types = {kind for kind, _ in self.in_params + self.out_params}
        for kind in types:
            cuda_elementwise.param_dtype(kind)    # an unknown type name fails here, as in CuPy
        try:
            self.statements = translate(operation, types)
        except NotImplementedError:
            if not cuda_emulation.available():
                raise
            self.statements = None      # C beyond the translator's subset: compiled only

    def __call__(self, *args, size=None, block_size=None):
        inputs, outputs = cuda_elementwise.check_call(self.name, self.in_params, self.out_params,
                                                    args, arrays.ndarray, size)
        in_types, out_types, placeholders = cuda_elementwise.bind_types(
            self.in_params, self.out_params, [_array_dtype(value) for value in inputs],
            [out.dtype for out in outputs])
        shape = np.broadcast_shapes(*[np.shape(a._view) for a in inputs
                                      if isinstance(a, arrays.ndarray)]) \
            if any(isinstance(a, arrays.ndarray) for a in inputs) else ()
        if not outputs:
            outputs = [arrays.ndarray(shape, dtype) for dtype in out_types]
        self._launch(inputs, outputs, in_types + out_types, placeholders)
        if self.no_return:
            return None
        return outputs[0] if len(outputs) == 1 and not self.return_tuple else tuple(outputs)

    def _launch(self, inputs, outputs, dtypes, placeholders):
        # NOTE: C's names in the operation (casts, declarations) keep C's
        # meaning ('float' is float32); the parameters have their bound dtypes.
        c_types = {**{k: np.dtype(v) for k, v in _C_TYPES.items()}, **placeholders}
        params = self.in_params + self.out_params
        param_types = {name: dtype for (_, name), dtype in zip(params, dtypes)}

        def cast(value, type_name):
            return np.asarray(value).astype(c_types[type_name], copy=False)

        # NOTE: the work holds NumPy views, never the arrays (see work.replayable).
        bound = [(name, _host_value(value, dtype)) for (_, name), value, dtype in
                 zip(params, list(inputs) + outputs, dtypes)]
        output_views = [output._view for output in outputs]

        def translated():
            values = dict(bound)
            scope = {"np": np, "_cast": cast, "_rsqrt": lambda x: 1 / np.sqrt(x),
                     "v": values}
            with np.errstate(all="ignore"):
                for declared, name, code in self.statements:
                    value = eval(code, scope)
                    dtype = c_types[declared] if declared else self._type_of(name, param_types)
                    values[name] = np.asarray(value).astype(dtype, copy=False)
            for (_, name), view in zip(self.out_params, output_views):
                view[...] = values[name]
        run = self._compiled(bound, output_views, dtypes, placeholders) or translated
        device_arrays = [a for a in list(inputs) + outputs if isinstance(a, arrays.ndarray)]
        world = state.world()
        arrays._check_devices(device_arrays, world.current_device, self.name, False)
        work.submit(work.Work(self.name, run, reads=arrays._blocks(device_arrays),
                                  writes=arrays._blocks(outputs)))

    def _compiled(self, bound, output_views, dtypes, placeholders):
        """The launch as compiled CUDA C (see cuda_emulation), or None where
        the emulation is off or has no C type for a bound dtype."""
        if not cuda_emulation.available() or \
                not cuda_elementwise.elementwise_types_supported(dtypes):
            return None
        key = tuple(sorted((kind, dtype.str) for kind, dtype in placeholders.items()))
        if key not in self._sources:
            self._sources[key] = cuda_elementwise.elementwise_source(
                self.in_params, self.out_params, self.operation, placeholders)
        source = self._sources[key]
        shape = np.broadcast_shapes(*(np.shape(value) for _, value in bound))
        in_types, out_types = dtypes[:len(self.in_params)], dtypes[len(self.in_params):]

        def run():
            # NOTE: inputs are read again at run time (a replay reads new values).
            values = [np.asarray(value, dtype=dtype)
                      for dtype, (_, value) in zip(in_types, bound)]
            outputs = [np.empty(shape, dtype) if view.dtype != dtype else view
                       for dtype, view in zip(out_types, output_views)]
            cuda_elementwise.run_elementwise(source, shape, values + outputs)
            for view, written in zip(output_views, outputs):
                if written is not view:
                    view[...] = written
        return run

    def _type_of(self, name, param_types):
        if name in param_types:
            return param_types[name]
        raise NotImplementedError(f"{name!r} is assigned in {self.name!r} without a type")


def _array_dtype(value):
    """An array's dtype, None for a scalar: CuPy binds placeholders from arrays only."""
    return value.dtype if isinstance(value, arrays.ndarray) else None


def _host_value(value, dtype):
    if isinstance(value, arrays.ndarray):
        return value._view
    return cuda_elementwise.scalar_value(value, dtype)


# -- RawKernel: by reference ------------------------------------------------------------

REFERENCES = {}


def register_reference(name, function, writes):
    """Run RawKernel ``name`` on the simulated GPU as ``function(*args)`` on NumPy
    views; ``writes`` are the indices of the arguments it writes."""
    REFERENCES[name] = (function, tuple(writes))


class RawKernel:
    """cupy.RawKernel: runs the NumPy reference registered for its name, or
    the reference of towerflow's kernel spec of that name
    (towerflow.backends.kernel_specs), which writes its non-const pointers."""

    def __init__(self, code, name, options=(), backend="nvrtc", translate_cucomplex=False,
                 *, enable_cooperative_groups=False, jitify=False):
        self.code, self.name, self.options = code, name, options

    def __call__(self, grid, block, args, *, shared_mem=0):
        if cuda_emulation.available():
            function, writes = self._emulated(grid, block, shared_mem)
        else:
            function, writes = _reference_of(self.name)
        written = tuple(args[index] for index in writes)
        arrays.launch(function, tuple(args), {}, self.name, written=written)

    def _emulated(self, grid, block, shared_mem):
        """The kernel's CUDA C run by cuda_emulation, and the arguments it writes
        (its pointers that are not const)."""
        params = cuda_emulation.kernel_params(self.code, self.name)
        writes = [index for index, (kind, _) in enumerate(params)
                  if kind.endswith("*") and not kind.startswith("const")]

        def run(*values):
            cuda_emulation.launch_raw(self.code, self.name, grid, block, values, shared_mem)
        return run, writes


def _reference_of(name):
    if name in REFERENCES:
        return REFERENCES[name]
    from towerflow.backends import kernel_specs
    try:
        spec = kernel_specs.spec_named(name)
    except KeyError:
        raise NotImplementedError(f"the simulated GPU has no NumPy reference for the "
                                  f"RawKernel {name!r} (register_reference)") from None
    params = kernel_specs.parse_params(spec.params)
    names = [param for _, param in params]
    writes = [index for index, (kind, _) in enumerate(params)
              if kind.endswith("*") and not kind.startswith("const")]

    def run(*values):
        spec.reference(**dict(zip(names, values)))
    return run, writes


# -- cupy.random ---------------------------------------------------------------------------


class BitGenerator:
    """The state of a simulated cupy.random bit generator, on the current GPU."""

    def __init__(self, seed=None):
        self.numpy = np.random.default_rng(seed)
        self.device = state.world().current_device


class Generator:
    """cupy.random.Generator: its state lives on the device it was made on, and
    every draw (a replayed one too) advances it."""

    def __init__(self, bit_generator):
        self._numpy, self._device = bit_generator.numpy, bit_generator.device

    def _draw(self, name, shape, dtype, method, *args):
        world = state.world()
        if world.current_device != self._device:
            raise ValueError(f"a generator made on GPU {self._device} drew on GPU "
                             f"{world.current_device}: its state is in GPU {self._device}'s "
                             "memory")
        shape = () if shape is None else shape
        out = arrays.ndarray(shape, dtype)
        view = out._view

        def run():
            view[...] = getattr(self._numpy, method)(*args, size=shape) \
                .astype(dtype, copy=False)
        work.submit(work.Work(name, run, writes=[out.data.block]))
        return out

    def random(self, size=None, dtype=np.float64, out=None):
        return self._draw("random", size, np.dtype(dtype), "random")

    def standard_normal(self, size=None, dtype=np.float64, out=None):
        return self._draw("standard_normal", size, np.dtype(dtype), "standard_normal")

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False):
        return self._draw("integers", size, np.dtype(dtype), "integers", low, high)

    def uniform(self, low=0.0, high=1.0, size=None, dtype=np.float64):
        return self._draw("uniform", size, np.dtype(dtype), "uniform", low, high)


def default_rng(seed=None):
    return Generator(BitGenerator(seed))
