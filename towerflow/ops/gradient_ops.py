"""Gradients a program defines itself, as TF 1.15 in graph mode:
``tf.RegisterGradient``, ``tf.no_gradient`` / ``tf.NotDifferentiable`` and
``tf.custom_gradient``; ``Graph.gradient_override_map`` (towerflow/graph/core.py)
picks a registered gradient for the ops made inside it::

    @tf.custom_gradient
    def clip_gradient(x):
        def grad(dy):
            return tf.clip_by_value(dy, -1.0, 1.0)
        return tf.identity(x), grad

As in TF, a custom gradient is an ``IdentityN`` over the function's results,
inputs and the variables it reads, whose gradient (registered under a name of
its own) calls ``grad_fn``: nothing flows back through the function's own ops.
"""

import inspect
import itertools

from ..graph import core, registry
from ..graph.registry import register_op
from ..log import logger
from . import nest
from .constant_ops import convert_to_tensor


def _identity_n_shape(inputs, attrs):
    return [(tensor.shape, tensor.dtype) for tensor in inputs]


# NOTE: its outputs are its inputs, which may be a variable's buffer: fetches copy.
register_op("IdentityN", _identity_n_shape, variadic_outputs=True, aliases_state=True)
registry.register_gradient("IdentityN", lambda op, *grads: list(grads))

_CUSTOM_GRADIENT_IDS = itertools.count(1)


def identity_n(input, name=None):
    """Each tensor of the list ``input``, passed through one op."""
    tensors = [convert_to_tensor(value) for value in input]
    return list(core.get_default_graph().create_op("IdentityN", tensors,
                                                   name=name or "IdentityN").outputs)


def _caller():
    frame = inspect.stack()[2]
    return f"{frame.function} {frame.filename}:{frame.lineno}"


class RegisterGradient:
    """Register the decorated ``fn(op, *grads)`` as the gradient of ops of
    type ``op_type`` (or of those a gradient_override_map points at it)::

        @tf.RegisterGradient("GuidedRelu")
        def _guided_relu_grad(op, grad):
            return tf.where(grad > 0., grad * tf.cast(op.outputs[0] > 0., grad.dtype),
                            tf.zeros_like(grad))
    """

    def __init__(self, op_type):
        if not isinstance(op_type, str):
            raise TypeError("op_type must be a string")
        self._op_type = op_type

    def __call__(self, fn):
        registry.register_named_gradient(self._op_type, fn, _caller())
        return fn


def no_gradient(op_type):
    """Ops of type ``op_type`` pass no gradient back (None for their inputs)."""
    if not isinstance(op_type, str):
        raise TypeError("op_type must be a string")
    registry.register_named_gradient(op_type, registry.not_differentiable, _caller())


NotDifferentiable = no_gradient


def custom_gradient(f):
    """Decorate ``f(*tensors) -> (result, grad_fn)``: the result is ``f``'s,
    its gradient ``grad_fn(*result_grads)`` (one per input); if ``f`` reads
    variables, ``grad_fn(*result_grads, variables=[...])`` returns
    ``(input_grads, variable_grads)``."""
    def decorated(*args, **kwargs):
        if kwargs:
            raise ValueError("The custom_gradient decorator currently supports keywords "
                             "arguments only when eager execution is enabled.")
        return _graph_mode_custom_gradient(f, [convert_to_tensor(arg) for arg in args])
    decorated.__name__ = getattr(f, "__name__", "custom_gradient")
    decorated.__doc__ = f.__doc__
    return decorated


def _graph_mode_custom_gradient(f, args):
    graph = core.get_default_graph()
    first_new_op = len(graph.get_operations())
    result, grad_fn = f(*args)
    variables = _variables_read(graph, graph.get_operations()[first_new_op:], args)
    _check_grad_fn_signature(grad_fn, variables)
    flat_result = [convert_to_tensor(value) for value in nest.flatten(result)]
    name = f"CustomGradient-{next(_CUSTOM_GRADIENT_IDS)}"
    registry.register_named_gradient(
        name, _tape_gradient(grad_fn, len(flat_result), variables), "tf.custom_gradient")
    with graph.gradient_override_map({"IdentityN": name}):
        passed = identity_n(flat_result + args + [var.value() for var in variables])
    return nest.pack_sequence_as(result, passed[:len(flat_result)])


def _variables_read(graph, new_ops, args):
    """The variables whose value the ops ``f`` made read, but not through
    one of ``args`` (TF's tape: watched variables less the inputs)."""
    read = {tensor for op in new_ops for tensor in op.inputs}
    return [var for var in graph.get_collection(core.GraphKeys.GLOBAL_VARIABLES)
            if var.value() in read and var.value() not in args]


def _check_grad_fn_signature(grad_fn, variables):
    parameters = inspect.signature(grad_fn).parameters
    takes_variables = "variables" in parameters or any(
        parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters.values())
    if variables and not takes_variables:
        raise TypeError("If using @custom_gradient with a function that uses variables, "
                        "then grad_fn must accept a keyword argument 'variables'.")
    if takes_variables and not variables:
        logger.warning("@custom_gradient grad_fn has 'variables' in signature, but no "
                       "variables were used on the forward pass.")


def _tape_gradient(grad_fn, result_count, variables):
    """The IdentityN's gradient: None for the results (nothing flows back
    through ``f``), then ``grad_fn``'s gradients of the inputs and variables."""
    def gradient(op, *result_grads):
        result_grads = result_grads[:result_count]
        if variables:
            input_grads, variable_grads = grad_fn(*result_grads, variables=variables)
            if len(variable_grads) != len(variables):
                raise ValueError("Must return gradient for each variable from "
                                 "@custom_gradient grad_fn.")
        else:
            input_grads, variable_grads = grad_fn(*result_grads), []
        return [None] * result_count + nest.flatten(input_grads) + list(variable_grads)
    return gradient
