"""Every CuPy name towerflow's code uses, found statically (``ast``), for
test_cupy_conformance.py.

:func:`checked_cupy_names` parses modules and follows CuPy values through
them: imports (``import cupy as cp``, ``from cupy.cuda import nccl``),
parameters named by convention (``xp``, ``cupy``, ``cupyx``, ``nccl``: the
array module and NCCL bindings handed to kernels written once against
``xp``), parameters a module's own calls pass CuPy values to
(``_query_runtime(cupy.cuda.runtime)``), local variables, attributes
(``self.stream = cupy.cuda.Stream(...)`` makes every ``<x>.stream`` in
that module a Stream), the return values of CuPy calls (:data:`RETURNS`)
and of the module's own functions, and a few variables named in ``hints``.
Example::

    uses = checked_cupy_names(["towerflow/plan_capture.py"], root=".")
    # [CupyUse('cupy.cuda.Stream.begin_capture', CallShape(0, (), bound=True),
    #          'towerflow/backends/cupy_backend.py:219', 'cupy'), ...]
"""

import ast
from pathlib import Path
from typing import NamedTuple

CUPY_PACKAGES = ("cupy", "cupyx", "cupy_backends")
# NumPy calls that convert their argument implicitly (``__array__``), which
# CuPy refuses for its arrays (TypeError: use ``.get()`` or ``cupy.asnumpy``).
NUMPY_CONVERSIONS = {"numpy.array", "numpy.asarray", "numpy.asanyarray",
                     "numpy.ascontiguousarray", "numpy.copy"}
# Parameters holding a CuPy module wherever they appear (kernels take the
# array module as ``xp``; the NCCL kernels take ``nccl`` and ``xp``).
CONVENTIONS = {"xp": "cupy", "cupy": "cupy", "cupyx": "cupyx", "nccl": "cupy.cuda.nccl"}


class CallShape(NamedTuple):
    """How one call passes its arguments (``bound``: called on an instance)."""
    positional: int
    keywords: tuple = ()
    star_args: bool = False
    star_kwargs: bool = False
    bound: bool = False


class CupyUse(NamedTuple):
    """One use: ``name`` looked up (``call`` None) or called, at ``where``,
    reached by attribute lookups from the module ``imported`` imports."""
    name: str
    call: CallShape | None
    where: str
    imported: str


class Ref(NamedTuple):          # a CuPy object by dotted name
    path: str
    imported: str
    bound: bool = False         # an attribute of an instance (a method)


class Instance(NamedTuple):     # an object of the CuPy class ``cls``
    cls: str
    imported: str


class Many(NamedTuple):         # a list of Instances
    cls: str
    imported: str


class Several(NamedTuple):      # a tuple of values, unpacked by assignment
    items: tuple


class Factory(NamedTuple):      # a lambda, and what it returns
    made: object


_NDARRAY = "cupy.ndarray"
_ARRAY_MAKERS = ("empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like",
                 "full", "full_like", "array", "asarray", "ascontiguousarray", "arange")
# What CuPy's documented calls return, where towerflow uses the result
# (docstrings of cupy/cuda/stream.pyx, cupy/cuda/nccl, cupy.random, cupy.cuda.memory).
RETURNS = {
    "cupy.cuda.get_current_stream": ("cupy.cuda.Stream", Instance),
    "cupy.cuda.Stream.record": ("cupy.cuda.Event", Instance),
    "cupy.cuda.Stream.end_capture": ("cupy.cuda.Graph", Instance),
    "cupy.cuda.MemoryPool.malloc": ("cupy.cuda.MemoryPointer", Instance),
    "cupy.cuda.nccl.NcclCommunicator.initAll": ("cupy.cuda.nccl.NcclCommunicator", Many),
    "cupy.random.default_rng": ("cupy.random.Generator", Instance),
    **{f"cupy.random.Generator.{draw}": (_NDARRAY, Instance)
       for draw in ("random", "standard_normal", "integers")},
    **{f"cupy.{maker}": (_NDARRAY, Instance) for maker in _ARRAY_MAKERS},
    **{f"cupy.ndarray.{method}": (_NDARRAY, Instance)
       for method in ("astype", "reshape", "copy", "ravel", "transpose")},
}
# Attributes of CuPy objects that are CuPy objects themselves.
ATTRIBUTE_TYPES = {"cupy.ndarray.data": "cupy.cuda.MemoryPointer", "cupy.ndarray.T": _NDARRAY}


def checked_cupy_names(module_files, root=".", hints=None):
    """The CuPy names used by ``module_files`` (paths; ``where`` is relative to
    ``root``), as a list of :class:`CupyUse`. ``hints`` maps (relative path,
    variable name) to the CuPy class a variable of that name holds where the
    walk cannot tell (a tuple unpacked from a dict, a kernel's argument)."""
    return walk_modules(module_files, root, hints).uses


class Walk(NamedTuple):
    uses: list              # CupyUse
    used_hints: set         # the keys of ``hints`` that named a variable
    conversions: list       # where NumPy converts a known CuPy array implicitly


def walk_modules(module_files, root=".", hints=None):
    """:func:`checked_cupy_names`, with the hints used and the implicit
    conversions found, as a :class:`Walk`::

        walk_modules(["towerflow/parallel/nccl.py"], ".", HINTS).conversions    # []
    """
    walk = Walk([], set(), [])
    for path in module_files:
        relative = Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
        module_hints = {name: cls for (file, name), cls in (hints or {}).items()
                        if file == relative}
        walker = _walk_module(Path(path), relative, module_hints)
        walk.uses.extend(walker.uses)
        walk.used_hints.update((relative, name) for name in walker.hinted)
        walk.conversions.extend(walker.conversions)
    return walk


def _walk_module(path, relative, hints):
    """Walk until what the module teaches about its names stops changing
    (attributes assigned late, parameters bound by later calls); the last
    walker holds the uses."""
    tree = ast.parse(path.read_text(), filename=str(path))
    facts, hinted = _Facts(), set()
    for _ in range(8):
        before = facts.snapshot()
        walker = _Walker(relative, facts, hints)
        walker.block(tree.body)
        hinted |= walker.hinted
        if facts.snapshot() == before:
            break
    # NOTE: a hint may only seed the facts (a hinted variable assigned to an
    # attribute): later walks know the variable from them, yet it is in use.
    walker.hinted = hinted
    return walker


class _Facts:
    """What a walk learned about a module, by name: attributes, function
    parameters (by function name and position or name), function returns."""

    def __init__(self):
        self.attributes, self.parameters, self.returns = {}, {}, {}

    def learn(self, table, key, value):
        if isinstance(value, (Ref, Instance, Many, Several)):
            table.setdefault(key, set()).add(value)

    @staticmethod
    def one(table, key):
        values = table.get(key, ())
        return next(iter(values)) if len(values) == 1 else None

    def snapshot(self):
        return tuple({key: frozenset(values) for key, values in table.items()}
                     for table in (self.attributes, self.parameters, self.returns))


def _instance_of(path, imported):
    made = RETURNS.get(path)
    if made is not None:
        cls, kind = made
        return kind(cls, imported)
    return None


class _Walker:
    """One walk over a module: statements in order, a scope per function."""

    def __init__(self, relative, facts, hints):
        self.relative, self.facts, self.hints = relative, facts, hints
        self.scopes, self.returns, self.classes = [{}], [], []
        self.uses, self.hinted, self.conversions = [], set(), []

    # -- names --------------------------------------------------------------------

    def lookup(self, name):
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def bind(self, name, value):
        if value is None and name in self.hints:
            self.hinted.add(name)
            value = Instance(self.hints[name], "cupy")
        self.scopes[-1][name] = value

    def record(self, ref, node, call=None):
        if ref.path.split(".")[0] not in CUPY_PACKAGES:
            return          # NumPy's names are followed only to find conversions
        if call is not None:
            call = call._replace(bound=ref.bound)
        self.uses.append(CupyUse(ref.path, call, f"{self.relative}:{node.lineno}",
                                 ref.imported))

    # -- statements ---------------------------------------------------------------

    def block(self, statements):
        for statement in statements:
            self.statement(statement)

    def statement(self, node):
        handler = getattr(self, f"_{type(node).__name__}", None)
        if handler is not None:
            handler(node)
        else:
            self.children(node)

    def children(self, node):
        """Visit what a node holds: statements, expressions, handlers."""
        for _, field in ast.iter_fields(node):
            for child in field if isinstance(field, list) else [field]:
                if isinstance(child, ast.stmt):
                    self.statement(child)
                elif isinstance(child, ast.expr):
                    self.value(child)
                elif isinstance(child, ast.excepthandler):
                    self._ExceptHandler(child)
                elif isinstance(child, ast.comprehension):
                    self.value(child.iter)
                    self.assign(child.target, None)
                    for condition in child.ifs:
                        self.value(condition)
                elif isinstance(child, ast.AST):
                    self.children(child)

    def _Import(self, node):
        for alias in node.names:
            top = alias.name.split(".")[0]
            if top not in CUPY_PACKAGES + ("numpy",):
                self.bind(alias.asname or top, None)
                continue
            self.record(Ref(alias.name, alias.name), node)
            if alias.asname:
                self.bind(alias.asname, Ref(alias.name, alias.name))
            else:
                self.bind(top, Ref(top, alias.name))

    def _ImportFrom(self, node):
        cupy_module = node.level == 0 and \
            node.module.split(".")[0] in CUPY_PACKAGES + ("numpy",)
        for alias in node.names:
            ref = Ref(f"{node.module}.{alias.name}", f"{node.module}.{alias.name}") \
                if cupy_module else None
            if ref is not None:
                self.record(ref, node)
            self.bind(alias.asname or alias.name, ref)

    def _FunctionDef(self, node):
        for decorator in node.decorator_list:
            self.value(decorator)
        self.bind(node.name, None)
        # A class's __init__ learns its parameters from calls of the class.
        key, first = (self.classes[-1], 1) if node.name == "__init__" and self.classes \
            else (node.name, 0)
        self.classes.append(None)
        self.scopes.append(self.parameters(key, node.args, first))
        self.returns.append([])
        self.block(node.body)
        for value in self.returns.pop():
            self.facts.learn(self.facts.returns, node.name, value)
        self.scopes.pop()
        self.classes.pop()

    _AsyncFunctionDef = _FunctionDef

    def parameters(self, function, arguments, first=0):
        """A function's scope: its parameters, CuPy values where known (the
        call sites' argument ``i`` binds parameter ``first + i``)."""
        self.scopes.append({})
        for default in arguments.defaults + [d for d in arguments.kw_defaults if d]:
            self.value(default)
        positional = arguments.posonlyargs + arguments.args
        for index, argument in enumerate(positional):
            name = argument.arg
            known = CONVENTIONS.get(name)
            value = Ref(known, known) if known else (
                self.facts.one(self.facts.parameters, (function, index - first)) or
                self.facts.one(self.facts.parameters, (function, name)))
            self.bind(name, value)
        for argument in arguments.kwonlyargs + [arguments.vararg, arguments.kwarg]:
            if argument is not None:
                self.bind(argument.arg, None)
        return self.scopes.pop()

    def _ClassDef(self, node):
        for expression in node.bases + node.decorator_list:
            self.value(expression)
        self.bind(node.name, None)
        self.scopes.append({})
        self.classes.append(node.name)
        self.block(node.body)
        self.classes.pop()
        self.scopes.pop()

    def _Return(self, node):
        value = self.value(node.value) if node.value is not None else None
        if self.returns:
            self.returns[-1].append(value)

    def _Assign(self, node):
        value = self.value(node.value)
        for target in node.targets:
            self.assign(target, value)

    def _AnnAssign(self, node):
        value = self.value(node.value) if node.value is not None else None
        self.assign(node.target, value)

    def _AugAssign(self, node):
        self.value(node.value)
        self.value(node.target)

    def _For(self, node):
        iterated = self.value(node.iter)
        each = Instance(iterated.cls, iterated.imported) if isinstance(iterated, Many) else None
        self.assign(node.target, each)
        self.block(node.body)
        self.block(node.orelse)

    def _With(self, node):
        for item in node.items:
            context = self.value(item.context_expr)
            if isinstance(context, Instance):     # a CuPy object used as a context
                for method, arguments in (("__enter__", 0), ("__exit__", 3)):
                    ref = Ref(f"{context.cls}.{method}", context.imported, bound=True)
                    self.record(ref, item.context_expr, CallShape(arguments))
            if item.optional_vars is not None:
                self.assign(item.optional_vars, None)
        self.block(node.body)

    _AsyncWith = _With

    def _ExceptHandler(self, node):
        if node.type is not None:
            self.value(node.type)
        if node.name:
            self.bind(node.name, None)
        self.block(node.body)

    def assign(self, target, value):
        if isinstance(target, ast.Name):
            self.bind(target.id, value)
        elif isinstance(target, ast.Attribute):
            self.value(target.value)
            self.facts.learn(self.facts.attributes, target.attr, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = value.items if isinstance(value, Several) and \
                len(value.items) == len(target.elts) else [None] * len(target.elts)
            for element, item in zip(target.elts, items):
                self.assign(element, item)
        elif isinstance(target, ast.Starred):
            self.assign(target.value, None)
        else:
            self.value(target)

    # -- expressions --------------------------------------------------------------

    def value(self, node):
        """What ``node`` evaluates to, if CuPy (recording the uses on the way)."""
        handler = getattr(self, f"_value_{type(node).__name__}", None)
        if handler is not None:
            return handler(node)
        self.children(node)
        return None

    def _value_Name(self, node):
        return self.lookup(node.id)

    def _value_Attribute(self, node, called=None):
        base = self.value(node.value)
        if isinstance(base, Ref) and base.bound:
            return None     # an instance's attribute (a shape, a dtype): not CuPy's to check
        if isinstance(base, (Ref, Instance)):
            owner = base.path if isinstance(base, Ref) else base.cls
            ref = Ref(f"{owner}.{node.attr}", base.imported,
                      bound=isinstance(base, Instance) or base.bound)
            if called is None:
                self.record(ref, node)
            kind = ATTRIBUTE_TYPES.get(ref.path)
            return Instance(kind, ref.imported) if kind else ref
        return self.facts.one(self.facts.attributes, node.attr)

    def _value_Call(self, node):
        func = node.func
        shape = CallShape(
            positional=sum(not isinstance(a, ast.Starred) for a in node.args),
            keywords=tuple(k.arg for k in node.keywords if k.arg is not None),
            star_args=any(isinstance(a, ast.Starred) for a in node.args),
            star_kwargs=any(k.arg is None for k in node.keywords))
        callee = self._value_Attribute(func, called=shape) \
            if isinstance(func, ast.Attribute) else self.value(func)
        arguments = [self.value(a) for a in node.args]
        keywords = {k.arg: self.value(k.value) for k in node.keywords}
        if isinstance(callee, Ref):
            if callee.path in NUMPY_CONVERSIONS and arguments and \
                    isinstance(arguments[0], Instance) and arguments[0].cls == _NDARRAY:
                self.conversions.append(f"{self.relative}:{node.lineno}")
            self.record(callee, func, shape)
            made = _instance_of(callee.path, callee.imported)
            if made is None and callee.path.rsplit(".", 1)[-1][:1].isupper():
                made = Instance(callee.path, callee.imported)     # a class: an instance
            return made
        if isinstance(callee, Instance):
            self.record(Ref(f"{callee.cls}.__call__", callee.imported, bound=True),
                        func, shape)
            return None
        return self.towerflow_call(func, arguments, keywords)

    def towerflow_call(self, func, arguments, keywords):
        """A call of towerflow's own code: learn which parameters get CuPy
        values; what it returns (learned by name), or what a
        ``ctx.resource(key, factory)`` (KernelContext) returns: factory()."""
        if isinstance(func, ast.Attribute) and func.attr == "resource" and \
                len(arguments) == 2 and isinstance(arguments[1], Factory):
            return arguments[1].made
        name = func.id if isinstance(func, ast.Name) else \
            func.attr if isinstance(func, ast.Attribute) else None
        if name is None:
            return None
        if isinstance(func, ast.Name):
            for index, argument in enumerate(arguments):
                if isinstance(argument, (Ref, Instance, Many)):
                    self.facts.learn(self.facts.parameters, (name, index), argument)
            for keyword, argument in keywords.items():
                if isinstance(argument, (Ref, Instance, Many)):
                    self.facts.learn(self.facts.parameters, (name, keyword), argument)
        return self.facts.one(self.facts.returns, name)

    def _value_Subscript(self, node):
        base = self.value(node.value)
        self.value(node.slice)
        if isinstance(base, Many):
            return Instance(base.cls, base.imported)
        return base if isinstance(base, Instance) and base.cls == _NDARRAY else None

    def _value_Tuple(self, node):
        return Several(tuple(self.value(element) for element in node.elts))

    def _value_Lambda(self, node):
        self.scopes.append(self.parameters("<lambda>", node.args))
        made = self.value(node.body)
        self.scopes.pop()
        return Factory(made)

    def _value_BinOp(self, node):
        return self._arithmetic([node.left, node.right])

    def _value_Compare(self, node):
        return self._arithmetic([node.left, *node.comparators])

    def _value_UnaryOp(self, node):
        return self._arithmetic([node.operand])

    def _arithmetic(self, operands):
        """Arithmetic on a CuPy array gives a CuPy array."""
        values = [self.value(operand) for operand in operands]
        arrays = [v for v in values if isinstance(v, Instance) and v.cls == _NDARRAY]
        return arrays[0] if arrays else None

    def _value_IfExp(self, node):
        self.value(node.test)
        chosen = {self.value(node.body), self.value(node.orelse)}
        return chosen.pop() if len(chosen) == 1 else None
