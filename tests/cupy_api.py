"""The installed CuPy's side of test_cupy_conformance.py: does a dotted name
exist, what is its signature, does a call (a :class:`cupy_uses.CallShape`)
bind to it, and is a simulated CuPy (towerflow/simgpu) compatible with it.

Signatures come from ``inspect.signature``; for Cython callables, from the
signature Cython embeds as the first line of ``__doc__``
(``MemoryPool.malloc(self, size_t size) -> MemoryPointer``); for CuPy's
ufuncs, from their ``nin``/``nout`` and the keywords ``ufunc.__call__``
accepts; else from :data:`SIGNATURES`. Example::

    problems = check_calls("cupy.cuda.Stream.record", [use])   # [] if it binds
"""

import ast
import importlib
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

P = inspect.Parameter

# Signatures neither inspect nor an embedded docstring gives, by dotted name,
# copied from CuPy's source (cite the file with each entry).
SIGNATURES = {}


def find(path, imported):
    """The object at dotted ``path`` once module ``imported`` is imported (as
    ``import imported`` or ``from <parent> import <last>`` would), reached
    by attribute lookups from the top package. Raises LookupError::

        find("cupy.cuda.nccl.get_version", "cupy.cuda.nccl")    # the function
        find("cupy.cuda.nccl.get_version", "cupy")   # LookupError, in a fresh Python
    """
    _import(imported)
    parts = path.split(".")
    found = sys.modules[parts[0]]
    for index, part in enumerate(parts[1:], start=1):
        try:
            found = getattr(found, part)
        except AttributeError:
            owner = ".".join(parts[:index])
            if index == len(parts) - 1 and _documented_attribute(found, part):
                return _InstanceAttribute(path)
            raise LookupError(f"{owner!r} has no attribute {part!r}") from None
    return found


def _import(imported):
    try:
        importlib.import_module(imported)
    except ModuleNotFoundError:
        if "." not in imported:
            raise LookupError(f"no module {imported!r}") from None
        # ``from cupy import ElementwiseKernel``: the parent is the module.
        importlib.import_module(imported.rsplit(".", 1)[0])


class _InstanceAttribute:
    """An attribute set on instances, listed under a class's docstring
    'Attributes:' (``~Stream.ptr (intptr_t): Raw stream handle.``)."""

    def __init__(self, path):
        self.path = path


def _documented_attribute(cls, name):
    if not isinstance(cls, type):
        return False
    pattern = re.compile(rf"(~\w+\.{name}|^\s+{name}) \(", re.MULTILINE)
    return any(pattern.search(klass.__doc__ or "") for klass in cls.__mro__)


def missing_names(pairs):
    """{dotted name and module: why it is missing} for the (name, imported)
    pairs that do not resolve; run it in a fresh interpreter (see
    :func:`missing_in_fresh_process`) so nothing else has imported more::

        missing_names([("cupy.cuda.Stream.begin_capturing", "cupy")])
        # {'cupy.cuda.Stream.begin_capturing | cupy': "'cupy.cuda.Stream' has no ..."}
    """
    missing = {}
    for name, imported in pairs:
        try:
            find(name, imported)
        except (LookupError, ImportError) as err:
            missing[f"{name} | {imported}"] = str(err)
    return missing


def missing_in_fresh_process(pairs):
    """:func:`missing_names` in a new Python: a name reached by attribute
    lookups must be there after importing only the module it is reached
    from (``import cupy`` does not import ``cupy.cuda.nccl``)::

        missing_in_fresh_process([("cupy.cuda.nccl", "cupy")])    # one entry
    """
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import cupy_api; "
            "print(json.dumps(cupy_api.missing_names(json.load(sys.stdin))))")
    done = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent)],
                          input=json.dumps(sorted(set(pairs))), capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- signatures -------------------------------------------------------------------------

def signature_of(obj, name):
    """(inspect.Signature or None, where it came from) of ``obj``, CuPy's
    ``name``::

        signature_of(cupy.add, "cupy.add")
        # (<Signature (x0, x1, out0=None, /, *, out=None, dtype=None, casting=None)>,
        #  'ufunc nin/nout')
    """
    if _is_ufunc(obj):
        return _ufunc_signature(obj), "ufunc nin/nout"
    try:
        return inspect.signature(obj), "inspect"
    except (TypeError, ValueError):
        pass
    embedded = doc_signature(obj)
    if embedded is not None:
        return embedded, "__doc__"
    if name in SIGNATURES:
        tree = ast.parse(f"def f{SIGNATURES[name]}: pass")
        return _signature_from_ast(tree.body[0].args), "cupy_api.SIGNATURES"
    return None, "none"


def _is_ufunc(obj):
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(obj, cupy.ufunc)


def _ufunc_signature(ufunc):
    """cupy/_core/_kernel.pyx, ``ufunc.__call__``: ``nin`` inputs, up to ``nout``
    outputs, and the keywords it pops ('out', 'dtype', 'casting'; '_where' is
    private); any other keyword raises TypeError('Wrong arguments ...')."""
    inputs = [P(f"x{i}", P.POSITIONAL_ONLY) for i in range(ufunc.nin)]
    outputs = [P(f"out{i}", P.POSITIONAL_ONLY, default=None) for i in range(ufunc.nout)]
    keywords = [P(name, P.KEYWORD_ONLY, default=None) for name in ("out", "dtype", "casting")]
    return inspect.Signature(inputs + outputs + keywords)


_EMBEDDED = re.compile(r"^\s*[\w.]+\((.*)\)\s*(->.*)?$")


def doc_signature(obj):
    """The signature Cython embeds as the first line of ``__doc__``, C types
    dropped, or None::

        doc_signature(cupy.cuda.MemoryPool.malloc)    # (self, size)
    """
    first = (getattr(obj, "__doc__", None) or "").lstrip().split("\n", 1)[0]
    match = _EMBEDDED.match(first.replace("\\*", "*"))
    if match is None:
        return None
    params = [_drop_c_type(param) for param in _split_params(match.group(1))]
    try:
        tree = ast.parse(f"def f({', '.join(params)}): pass")
    except SyntaxError:
        return None
    return _signature_from_ast(tree.body[0].args)


def _split_params(text):
    """Split at commas outside brackets and quotes."""
    params, depth, quote, current = [], 0, None, ""
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            params.append(current.strip())
            current = ""
            continue
        current += char
    return [param for param in params + [current.strip()] if param]


def _drop_c_type(param):
    name, equals, default = param.partition("=")
    words = name.split()
    if len(words) > 1 and not words[-1].startswith("*"):
        name = words[-1]
    return f"{name.strip()}{equals}{default.strip()}"


class _Default:
    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def _signature_from_ast(arguments):
    positional = arguments.posonlyargs + arguments.args
    defaults = [None] * (len(positional) - len(arguments.defaults)) + arguments.defaults
    params = []
    for index, (argument, default) in enumerate(zip(positional, defaults)):
        kind = P.POSITIONAL_ONLY if index < len(arguments.posonlyargs) else \
            P.POSITIONAL_OR_KEYWORD
        params.append(P(argument.arg, kind, default=_default(default)))
    if arguments.vararg:
        params.append(P(arguments.vararg.arg, P.VAR_POSITIONAL))
    for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults):
        params.append(P(argument.arg, P.KEYWORD_ONLY, default=_default(default)))
    if arguments.kwarg:
        params.append(P(arguments.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params)


def _default(node):
    return P.empty if node is None else _Default(ast.unparse(node))


def takes_self(owner, name):
    """Whether ``owner.name`` is a plain method (its signature starts with
    the instance) rather than a staticmethod or classmethod::

        takes_self(NcclCommunicator, "initAll")    # False: a staticmethod
    """
    for klass in getattr(owner, "__mro__", ()):
        if name in vars(klass):
            return not isinstance(vars(klass)[name], (staticmethod, classmethod))
    return True


# -- checks -----------------------------------------------------------------------------

def check_calls(name, uses):
    """Why the calls among ``uses`` (of one dotted ``name``) do not bind to the
    installed CuPy's signature of it: a list of messages, empty if all do::

        check_calls("cupy.cuda.Stream", checked_cupy_names(["gpu.py"]))
        # ['gpu.py:6: cupy.cuda.Stream called with 0 positional, non_blocking=,
        #   nonblocking=: got an unexpected keyword argument ...']
    """
    calls = [use for use in uses if use.call is not None]
    if not calls:
        return []
    obj = find(name, calls[0].imported)
    if isinstance(obj, _InstanceAttribute):
        return [f"{name} is an instance attribute, called at {calls[0].where}"]
    signature, source = signature_of(obj, name)
    if signature is None:
        return [(f"no signature known for {name} (called at {calls[0].where}): add it "
                 "to cupy_api.SIGNATURES, copied from CuPy's source")]
    owner = find(name.rsplit(".", 1)[0], calls[0].imported)
    problems = []
    for use in calls:
        error = _bind(signature, use.call, use.call.bound and
                      takes_self(owner, name.rsplit(".", 1)[-1]))
        if error:
            problems.append(f"{use.where}: {name} called with {_describe(use.call)}: "
                            f"{error}; CuPy's signature ({source}) is {name}{signature}")
    return problems


def _bind(signature, call, with_self):
    placeholders = [object()] * (call.positional + with_self)
    keywords = dict.fromkeys(call.keywords, object())
    try:
        if call.star_args or call.star_kwargs:     # unknown counts: only what is named
            signature.bind_partial(*placeholders, **keywords)
        else:
            signature.bind(*placeholders, **keywords)
    except TypeError as err:
        return str(err)
    return None


def _describe(call):
    parts = [f"{call.positional} positional"] + [f"{k}=" for k in call.keywords]
    parts += ["*args"] * call.star_args + ["**kwargs"] * call.star_kwargs
    return ", ".join(parts)


# -- a simulated CuPy -------------------------------------------------------------------

_DUNDERS = ("__call__", "__enter__", "__exit__")


class Offered(NamedTuple):
    """A name a simulated CuPy offers: CuPy's dotted ``name``, the simulated
    object, its class if a method (else None), the module offering it."""
    name: str
    simulated: object
    owner: type | None
    module: str


def simulated_names(modules, package="towerflow.simgpu"):
    """Every public name a simulated CuPy offers, as :class:`Offered`:
    ``modules`` maps CuPy module names to the simulated modules (what
    towerflow.simgpu puts in sys.modules); each class adds its public
    methods and properties, and ``__call__``/``__enter__``/``__exit__``,
    where it is a class of the simulator's ``package`` (NumPy's dtype
    classes, offered as CuPy offers them, are NumPy's own)::

        simulated_names(towerflow.simgpu.modules.build())
        # [Offered('cupy.ElementwiseKernel', <class ...>, None, 'cupy'), ...]
    """
    found = []
    for module_name, module in sorted(modules.items()):
        for attribute, value in sorted(vars(module).items()):
            if attribute.startswith("_"):
                continue
            dotted = f"{module_name}.{attribute}"
            found.append(Offered(dotted, value, None, module_name))
            if isinstance(value, type) and value.__module__.startswith(package):
                found += [Offered(f"{dotted}.{method}", member, value, module_name)
                          for method, member in _methods(value, package)]
    return found


def _methods(cls, package):
    names = {name for klass in cls.__mro__ if klass.__module__.startswith(package)
             for name in vars(klass)}
    for name in sorted(names):
        if not name.startswith("_") or name in _DUNDERS:
            yield name, getattr(cls, name)


def check_simulated(offered):
    """Why the simulation of ``offered.name`` does not call like the
    installed CuPy's (whose existence :func:`missing_in_fresh_process`
    checks): each parameter it takes must be one CuPy takes, at the same
    position if positional (a private one, ``_world=None``, is its own
    business); each parameter CuPy requires it must take. Exceptions are
    raised, not called: only their names count. A list of messages::

        check_simulated(Offered("cupy.cuda.Event", SimEvent, None, "cupy.cuda"))
        # ["cupy.cuda.Event: takes 'world', which CuPy does not; ..."]
    """
    name, simulated, owner, module = offered
    real = find(name, module)
    if not callable(simulated) or inspect.ismodule(simulated) or \
            isinstance(real, _InstanceAttribute) or \
            (isinstance(real, type) and issubclass(real, BaseException)):
        return []
    real_signature, source = signature_of(real, name)
    if real_signature is None:
        return [f"no signature known for {name}: add it to cupy_api.SIGNATURES"]
    method = name.rsplit(".", 1)[-1]
    real_owner = find(name.rsplit(".", 1)[0], module)
    real_params = _params(real_signature, owner is not None and takes_self(real_owner, method))
    sim_params = _params(inspect.signature(simulated),
                         owner is not None and takes_self(owner, method))
    return [f"{name}: {problem}; CuPy's signature ({source}) is {real_signature}"
            for problem in _incompatible(sim_params, real_params)]


def _params(signature, drop_self):
    params = list(signature.parameters.values())
    return params[1:] if drop_self and params else params


_VARIADIC = (P.VAR_POSITIONAL, P.VAR_KEYWORD)
_POSITIONAL = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)


def _incompatible(simulated, real):
    by_name = {param.name: param for param in real}
    real_positional = [param.name for param in real if param.kind in _POSITIONAL]
    open_ended = any(param.kind in _VARIADIC for param in real)
    problems = []
    for index, param in enumerate(simulated):
        private = param.name.startswith("_") and param.default is not P.empty
        if param.kind in _VARIADIC or private:
            continue
        if param.name not in by_name and not open_ended:
            problems.append(f"takes {param.name!r}, which CuPy does not")
        elif param.kind in _POSITIONAL and param.name in by_name and \
                real_positional[index:index + 1] != [param.name]:
            problems.append(f"takes {param.name!r} at position {index}, CuPy does not")
    taken = {param.name for param in simulated}
    absorbs = any(param.kind in _VARIADIC for param in simulated)
    for param in real:
        required = param.default is P.empty and param.kind not in _VARIADIC
        if required and param.name not in taken and not absorbs:
            problems.append(f"does not take {param.name!r}, which CuPy requires")
    return problems
