"""Stage 3: automatic differentiation.

``gradients(ys, xs)`` adds gradient ops to the graph by walking it in
reverse from ``ys``. Each op type registers its gradient next to its
definition (``registry.register_gradient``); this engine only

- restricts the walk to ops that lie between ``xs`` and ``ys``,
- sums the gradients that reach one tensor from several consumers (AddN, in
  a fixed order; IndexedSlices, the gradients of tf.gather, are concatenated
  as TensorFlow does, see towerflow.ops.indexed_slices),
- gives a gradient function zeros, never None, for the float outputs of its
  op that no gradient reached, and
- sums a gradient back to its input's shape where the op broadcast it, in
  one place (``UnbroadcastGrad``), so gradient functions never need to.

Gradient ops are colocated with their forward op, so each tower's backward
pass runs on the tower's device. The ops gradients are built from (ReluGrad,
Conv2DBackpropFilter, ...) have gradients of their own
(ops/second_order_grad.py), so a gradient of a gradient is one more call;
``hessians`` builds on it::

    loss = tf.reduce_mean(tf.square(w * x + b - y))
    grad_w, grad_b = tf.gradients(loss, [w, b])
"""

from .graph import core, registry, shapes
from .graph.registry import register_op
from .ops import constant_ops, indexed_slices, math_ops

# The ops whose gradient functions take an IndexedSlices as it is (TF's
# _IdGrad); any other op's gradient function gets it as a dense tensor.
_SPARSE_GRADIENT_OPS = frozenset({"Identity"})


def _unbroadcast_shape(inputs, attrs):
    return [(inputs[1].shape, inputs[0].dtype)]


# The engine's one shape-fixing op: (grad, input) -> grad summed to input's shape.
register_op("UnbroadcastGrad", _unbroadcast_shape, aliases_input=True,
            shape_only_inputs=(1,))


def gradients(ys, xs, grad_ys=None, name="gradients", stop_gradients=None):
    """Symbolic gradients of ``sum(ys)`` with respect to each of ``xs``.

    ``grad_ys`` weights each y (default: ones); a tensor in ``stop_gradients``
    is treated as a constant. Returns one tensor per x, or None where x does
    not influence ys; the gradient of a table read only through ``tf.gather``
    / ``tf.nn.embedding_lookup`` is a ``tf.IndexedSlices``, as in TensorFlow.
    Example: ``dw, db = tf.gradients(loss, [w, b])``.
    """
    ys = [constant_ops.convert_to_tensor(y) for y in _as_list(ys)]
    xs = [_as_tensor(x) for x in _as_list(xs)]
    grad_ys = _as_list(grad_ys) if grad_ys is not None else [None] * len(ys)
    if len(grad_ys) != len(ys):
        raise ValueError(f"gradients got {len(grad_ys)} grad_ys for {len(ys)} ys")
    graph = ys[0].graph
    stopped = {_as_tensor(t) for t in
               (_as_list(stop_gradients) if stop_gradients is not None else [])}
    with graph.name_scope(name):
        between = _ops_between(graph, xs, ys, stopped)
        pending = _initial_grads(ys, grad_ys)
        wanted = set(xs)
        for op in sorted(between, key=lambda op: op._id, reverse=True):
            _backprop_op(graph, op, pending, between, wanted, stopped)
        return [_total_grad(graph, x, pending) for x in xs]


def hessians(ys, xs, name="hessians", colocate_gradients_with_ops=False,
              gate_gradients=False, aggregation_method=None):
    """The Hessian of ``sum(ys)`` with respect to each x in ``xs``, of shape
    ``x.shape + x.shape``, as TF 1.15's ``tf.hessians``: one gradient of the
    gradient per element of x (whose size must be known when the graph is
    built), so it suits small xs; for large ones take Hessian-vector products,
    ``tf.gradients(tf.gradients(loss, w), w, grad_ys=v)``. Example::

        hess_w, = tf.hessians(tf.reduce_sum(w ** 3), w)    # diag(6 w)

    Colocation is always on and the other two options change nothing here.
    """
    xs = [_as_tensor(x) for x in _as_list(xs)]
    first = gradients(ys, xs, name=name)
    return [_hessian_of(grad, x, name) for grad, x in zip(first, xs)]


def _hessian_of(grad, x, name):
    from .ops.array_ops import reshape, stack
    if grad is None:     # TF 1.15 reshapes the None gradient, with this message
        raise ValueError("None values not supported.")
    count = x.shape.num_elements()
    if count is None:
        raise ValueError(f"hessians needs the shape of {x.name} known when the graph is "
                         f"built, got {x.shape}")
    flat = reshape(grad, [-1])
    rows = []
    for index in range(count):
        (row,) = gradients(flat[index], x, name=name)
        # NOTE: a gradient that no longer depends on x (ys linear in x) gives a zero
        # row, where TF 1.15's TensorArray refuses the None.
        rows.append(constant_ops.zeros_like(x) if row is None else row)
    dims = x.shape.as_list()
    return reshape(stack(rows), dims + dims)


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _as_tensor(value):
    """Variables differentiate through their read tensor."""
    if hasattr(value, "_as_graph_element") and not isinstance(value, core.Tensor):
        return value._as_graph_element()
    return constant_ops.convert_to_tensor(value)


def _ops_between(graph, xs, ys, stopped):
    """Ops reachable forward from ``xs`` and backward from ``ys``."""
    consumers = {}
    for op in graph.get_operations():
        for tensor in op.inputs:
            consumers.setdefault(tensor, []).append(op)
    forward, stack = set(), [op for x in xs for op in consumers.get(x, [])]
    while stack:
        op = stack.pop()
        if op not in forward:
            forward.add(op)
            stack.extend(c for t in op.outputs if t not in stopped
                         for c in consumers.get(t, []))
    between, stack = set(), [y.op for y in ys]
    while stack:
        op = stack.pop()
        if op in forward and op not in between:
            between.add(op)
            stack.extend(t.op for t in op.inputs if t not in stopped)
    return between


def _initial_grads(ys, grad_ys):
    pending = {}
    for y, grad_y in zip(ys, grad_ys):
        if grad_y is None:
            with y.graph.colocate_with(y.op):
                # A known shape (a scalar loss) gets a constant, folded by the plan.
                grad_y = constant_ops.ones(y.shape.as_list(), y.dtype, name="grad_ys") \
                    if y.shape.is_fully_defined() else constant_ops.ones_like(y, name="grad_ys")
        pending.setdefault(y, []).append(constant_ops.convert_to_tensor(grad_y))
    return pending


def _backprop_op(graph, op, pending, between, xs, stopped):
    # NOTE: an output in stop_gradients passes nothing back, but keeps its own
    # gradient: it may be one of xs (TensorFlow's stop_gradients example).
    output_grads = [None if t in stopped else _total_grad(graph, t, pending)
                    for t in op.outputs]
    if all(grad is None for grad in output_grads):
        return
    if op.type not in _SPARSE_GRADIENT_OPS and \
            any(isinstance(grad, indexed_slices.IndexedSlices) for grad in output_grads):
        with graph.colocate_with(op):
            output_grads = [indexed_slices.densify(grad) for grad in output_grads]
    try:
        gradient_fn = registry.gradient_of(op)
    except LookupError:
        raise LookupError(f"No gradient defined for operation '{op.name}' (op type: "
                          f"{op.type}); wrap its input in tf.stop_gradient if none is "
                          "needed") from None
    # Only the op type's own gradient is known to return exact shapes.
    exact = op.op_def.exact_gradients and gradient_fn is op.op_def.gradient
    with graph.name_scope(op.name + "_grad"), graph.colocate_with(op):
        input_grads = _grads_as_list(gradient_fn(op, *_zeros_for_missing(op, output_grads)))
        if len(input_grads) != len(op.inputs):
            raise ValueError(f"Num gradients {len(input_grads)} generated for op {op.name} "
                             f"(op type: {op.type}) do not match num inputs "
                             f"{len(op.inputs)}")
        for tensor, grad in zip(op.inputs, input_grads):
            if grad is None or not tensor.dtype.is_floating:
                continue
            if tensor in xs or (tensor.op in between and tensor not in stopped):
                # an IndexedSlices has its variable's shape by construction
                as_is = exact or isinstance(grad, indexed_slices.IndexedSlices)
                pending.setdefault(tensor, []).append(
                    grad if as_is else _unbroadcast(grad, tensor))


def _grads_as_list(grads):
    """A gradient function's result as a list: TF takes one tensor (or None)
    from the gradient of a one-input op."""
    if grads is None or isinstance(grads, (core.Tensor, indexed_slices.IndexedSlices)):
        return [grads]
    return list(grads)


def _zeros_for_missing(op, output_grads):
    """Zeros for the float outputs no gradient reached, as in TensorFlow: a
    gradient function never sees None (fused batch norm used only through its
    batch statistics); an unused zeros op is pruned when the graph runs."""
    return [constant_ops.zeros_like(tensor) if grad is None and tensor.dtype.is_floating
            else grad for tensor, grad in zip(op.outputs, output_grads)]


def _unbroadcast(grad, tensor):
    """``grad`` summed over the axes its op broadcast ``tensor`` along."""
    grad = constant_ops.convert_to_tensor(grad)
    if grad.shape.is_fully_defined() and grad.shape == tensor.shape:
        return grad
    try:
        shapes.broadcast(tensor.shape, grad.shape)
    except ValueError:
        raise ValueError(f"Gradient of shape {grad.shape} cannot be summed to the shape "
                         f"{tensor.shape} of {tensor.name}") from None
    return grad.graph.create_op("UnbroadcastGrad", [grad, tensor]).outputs[0]


def _total_grad(graph, tensor, pending):
    """The gradient reaching ``tensor``, summed once and kept: an x that is an
    intermediate tensor is asked for again after its op has been walked."""
    grads = pending.get(tensor)
    if grads and len(grads) > 1:
        grads[:] = [_aggregate(graph, tensor, grads)]
    return grads[0] if grads else None


def _aggregate(graph, tensor, grads):
    """The sum of the gradients reaching ``tensor`` (None if none did)."""
    if not grads:
        return None
    if len(grads) == 1:
        return grads[0]
    with graph.colocate_with(tensor.op):
        if any(isinstance(grad, indexed_slices.IndexedSlices) for grad in grads):
            return indexed_slices.aggregate(grads)
        return math_ops.add_n(grads, name=f"{tensor.op.name.split('/')[-1]}_grad_sum")


# -- stop_gradient ----------------------------------------------------------------

register_op("StopGradient", lambda inputs, attrs: [(inputs[0].shape, inputs[0].dtype)],
            forwards_input=True)
registry.register_not_differentiable("StopGradient")


def stop_gradient(input, name=None):
    """The value of ``input``, seen as a constant by ``tf.gradients``."""
    x = constant_ops.convert_to_tensor(input)
    return x.graph.create_op("StopGradient", [x], name=name or "StopGradient").outputs[0]

