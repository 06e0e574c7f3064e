"""The op registry: one :class:`OpDef` per op type, and which device types
have a kernel for it.

An op is defined once, in the ops module that builds it::

    register_op("MatMul", shape_fn=_matmul_shape)

Backends fill ``register_kernels`` with the kernel names they implement;
placement asks ``has_kernel`` before putting an op on a GPU. ``infer_outputs``
runs an op type's shape rule for ``Graph.create_op``, naming the op in its errors.
"""

import dataclasses
from collections.abc import Callable

_OP_DEFS = {}
_KERNELS_BY_DEVICE_TYPE = {}


@dataclasses.dataclass(frozen=True)
class OpDef:
    """What the graph needs to know about one op type.

    - ``shape_fn(inputs, attrs)`` returns one ``(TensorShape, DType)`` per output
      and raises ValueError/TypeError for inputs the op cannot take;
    - ``kernel``: the name backends implement it under (default: the op type);
    - ``gradient``: filled in by the autodiff stage (None: not differentiable);
    - ``stateful``: reads or writes session state (variables, random streams);
    - ``aliases_input``: the kernel may return a view of its first input, so a
      fetched value must be copied if that input aliases state;
    - ``aliases_state``: the output *is* stored state (a variable's buffer, a
      folded constant), so a fetched value must be copied;
    - ``forwards_input``: the output is the first input itself (Identity), so
      the plan passes the value on without running anything;
    - ``variadic_outputs``: the number of outputs depends on attributes (Split),
      and the kernel always returns a sequence, even of one;
    - ``shape_only_inputs``: the positions of inputs whose values the kernel
      never reads, only their shape and dtype (UnbroadcastGrad's ``like``);
    - ``exact_gradients``: the op broadcasts none of its inputs, so its gradient
      function returns gradients of exactly its inputs' shapes and autodiff
      adds no UnbroadcastGrad after them (which would keep a plan from fusing
      the gradient ops, see towerflow.fusion);
    - ``type_list``: the dtypes its first input may have (TensorFlow's ``T:
      {...}``), named ``typed_input`` in the TypeError for any other (None: any).
    """

    op_type: str
    shape_fn: Callable
    kernel: str
    stateful: bool = False
    aliases_input: bool = False
    aliases_state: bool = False
    forwards_input: bool = False
    variadic_outputs: bool = False
    gradient: Callable | None = None
    shape_only_inputs: tuple = ()
    exact_gradients: bool = False
    type_list: tuple | None = None
    typed_input: str = "x"

    def check_input_types(self, inputs):
        """TypeError, in TensorFlow's words (op_def_library.py), if the first
        input's dtype is outside ``type_list``."""
        if self.type_list is None or not inputs or inputs[0].dtype in self.type_list:
            return
        allowed = ", ".join(dtype.name for dtype in self.type_list)
        raise TypeError(f"Value passed to parameter '{self.typed_input}' has DataType "
                        f"{inputs[0].dtype.name} not in list of allowed values: {allowed}")


def register_op(op_type, shape_fn, kernel=None, stateful=False, aliases_input=False,
                aliases_state=False, forwards_input=False, variadic_outputs=False,
                shape_only_inputs=(), exact_gradients=False, type_list=None,
                typed_input="x"):
    """Define ``op_type``; defining one twice is a programming error."""
    if op_type in _OP_DEFS:
        raise KeyError(f"op type {op_type!r} is already registered")
    op_def = OpDef(op_type, shape_fn, kernel or op_type, stateful,
                   aliases_input or forwards_input, aliases_state, forwards_input,
                   variadic_outputs, shape_only_inputs=tuple(shape_only_inputs),
                   exact_gradients=exact_gradients,
                   type_list=None if type_list is None else tuple(type_list),
                   typed_input=typed_input)
    _OP_DEFS[op_type] = op_def
    return op_def


def register_gradient(op_type, gradient_fn):
    """Attach the gradient of ``op_type``: ``gradient_fn(op, *output_grads)``
    returns one gradient (or None) per input. Used by the autodiff stage."""
    _OP_DEFS[op_type] = dataclasses.replace(get_op_def(op_type), gradient=gradient_fn)


def not_differentiable(op, *output_grads):
    """The gradient of ops no gradient flows through (comparisons, argmax,
    random draws, shapes): None for every input."""
    return [None] * len(op.inputs)


def register_not_differentiable(*op_types):
    for op_type in op_types:
        register_gradient(op_type, not_differentiable)


# Gradients registered by name (tf.RegisterGradient, tf.no_gradient, custom
# gradients): looked up by an op's type, or by the name a
# Graph.gradient_override_map gave it (its ``_gradient_op_type`` attr).
_NAMED_GRADIENTS = {}


def register_named_gradient(name, gradient_fn, where):
    """Register ``gradient_fn`` under ``name`` (``where``: the caller, for the
    error); TF's KeyError if ``name`` has one already."""
    previous = _NAMED_GRADIENTS.get(name)
    if previous is None and name in _OP_DEFS and _OP_DEFS[name].gradient is not None:
        previous = (None, f"towerflow's gradient of op type {name}")
    if previous is not None:
        raise KeyError(f"Registering two gradient with name '{name}'! (Previous "
                       f"registration was in {previous[1]})")
    _NAMED_GRADIENTS[name] = (gradient_fn, where)


def gradient_of(op):
    """The gradient function of ``op``: the one its ``_gradient_op_type`` names
    (an override), else its type's; LookupError if there is none."""
    name = op.attrs.get("_gradient_op_type", op.type)
    named = _NAMED_GRADIENTS.get(name)
    if named is not None:
        return named[0]
    op_def = _OP_DEFS.get(name)
    if op_def is None or op_def.gradient is None:
        raise LookupError(f"gradient registry has no entry for: {name}")
    return op_def.gradient


def get_op_def(op_type):
    try:
        return _OP_DEFS[op_type]
    except KeyError:
        raise KeyError(f"no op type {op_type!r} is registered") from None


def registered_op_types():
    return sorted(_OP_DEFS)


def register_kernels(device_type, kernel_names):
    """Record that ``device_type`` ('CPU', 'GPU') has kernels for ``kernel_names``."""
    _KERNELS_BY_DEVICE_TYPE.setdefault(device_type, set()).update(kernel_names)


def has_kernel(device_type, kernel_name):
    return kernel_name in _KERNELS_BY_DEVICE_TYPE.get(device_type, ())


def registered_kernels(device_type):
    """The kernel names registered for ``device_type`` (a copy), or None."""
    names = _KERNELS_BY_DEVICE_TYPE.get(device_type)
    return None if names is None else set(names)


def unregister_kernels(device_type):
    """Forget every kernel of ``device_type`` (tests that fake a GPU backend)."""
    _KERNELS_BY_DEVICE_TYPE.pop(device_type, None)


def infer_outputs(op_def, inputs, attrs, op_name):
    """The op's (shape, dtype) per output. As in TensorFlow, a shape rule
    refuses inputs with a TypeError (a dtype) or a ValueError (anything else,
    even an IndexError from a rule indexing dimensions that are not there)."""
    where = f"(while building op '{op_name}' of type {op_def.op_type})"
    try:
        return op_def.shape_fn(list(inputs), attrs)
    except TypeError as err:
        raise TypeError(f"{err} {where}") from None
    except ValueError as err:
        raise ValueError(f"{err} {where}") from None
    except (IndexError, KeyError, ArithmeticError) as err:
        raise ValueError(f"{type(err).__name__}: {err} {where}") from err
