"""The :class:`Optimizer` base class (TensorFlow 1.x's ``tf.train.Optimizer``).

A subclass says which slots each variable needs (``_create_slots``), which
hyperparameters it takes (``_hyper_values``) and how one variable is updated
(``_apply_dense``, one in-place kernel op; ``_apply_sparse`` for an
IndexedSlices gradient, the gradient of tf.gather, which updates only its
rows as TensorFlow 1.15 does); the base class does the rest::

    opt = tf.train.MomentumOptimizer(0.1, momentum=0.9)
    grads_and_vars = opt.compute_gradients(loss)        # [(grad, var), ...]
    train_op = opt.apply_gradients(grads_and_vars, global_step=step)
    opt.get_slot(w, "momentum")                          # the Variable 'w/Momentum'
"""

from .. import autodiff
from ..graph import core
from ..graph.core import GraphKeys
from ..ops import array_ops, constant_ops, math_ops, state_ops
from ..ops.indexed_slices import IndexedSlices, densify
from .training_ops import colocated_with


class Optimizer:
    """Base class of the optimizers; see the module docstring."""

    GATE_NONE, GATE_OP, GATE_GRAPH = 0, 1, 2

    def __init__(self, use_locking, name):
        if not name:
            raise ValueError("An optimizer needs a name (e.g. 'GradientDescent')")
        self._use_locking = use_locking
        self._name = name
        self._slots = {}        # slot name -> {variable: slot variable}
        self._non_slots = {}    # (name, graph) -> variable (Adam's beta powers)
        self._hyper_tensors = {}
        self._gate = None       # a bool scalar while a gated apply builds its ops

    def get_name(self):
        return self._name

    # -- the public API ---------------------------------------------------------------

    def compute_gradients(self, loss, var_list=None, gate_gradients=GATE_OP,
                          aggregation_method=None, colocate_gradients_with_ops=False,
                          grad_loss=None):
        """``[(gradient, variable), ...]`` of ``loss`` for ``var_list`` (default:
        the graph's trainable variables); a gradient is None where the variable
        does not influence the loss. ``gate_gradients``, ``aggregation_method`` and
        ``colocate_gradients_with_ops`` are accepted for compatibility (gradient ops
        are always colocated with their forward op). Example:
        ``opt.compute_gradients(loss, [w])``."""
        loss = constant_ops.convert_to_tensor(loss)
        if not loss.dtype.is_floating:
            raise TypeError(f"The loss {loss.name} is {loss.dtype.name}; optimizers need a "
                            "floating-point loss")
        if var_list is None:
            var_list = loss.graph.get_collection(GraphKeys.TRAINABLE_VARIABLES)
        var_list = [_check_variable(var) for var in var_list]
        if not var_list:
            raise ValueError("No variables to optimize.")
        with loss.graph.as_default():
            grads = autodiff.gradients(loss, var_list, grad_ys=grad_loss)
        return list(zip(grads, var_list))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """One op that updates every variable that has a gradient, in place, then
        increments ``global_step`` (if given). ValueError if no variable has one.
        Example: ``train_op = opt.apply_gradients(opt.compute_gradients(loss))``."""
        return self._apply_gradients(grads_and_vars, global_step, name, gate=None)

    def _apply_gradients(self, grads_and_vars, global_step, name, gate):
        """apply_gradients; given ``gate`` (a bool scalar tensor) the step changes
        nothing (variables, slots, global_step) when the gate is false."""
        grads_and_vars = list(grads_and_vars)
        pairs = [(grad, _check_variable(var)) for grad, var in grads_and_vars]
        if not pairs:
            raise ValueError("No variables provided.")
        pairs = [(_as_gradient(grad, var), var) for grad, var in pairs if grad is not None]
        if not pairs:
            names = [var.op.name for _, var in grads_and_vars]
            raise ValueError(f"No gradients provided for any variable: {names}.")
        graph = pairs[0][1].graph
        with graph.as_default():
            with graph.control_dependencies(None), graph.name_scope(None):
                self._create_slots([var for _, var in pairs])  # TF's init_scope
            with graph.name_scope(name or self._name) as scope:
                self._prepare(graph, [var.dtype for _, var in pairs])
                self._gate = gate
                try:
                    update_ops = [self._update(graph, grad, var) for grad, var in pairs]
                    finished = self._finish(update_ops, scope if global_step is None
                                            else "update")
                finally:
                    self._gate = None
                if global_step is None:
                    return finished
                with graph.control_dependencies([finished]):
                    increment = 1 if gate is None else math_ops.cast(gate, global_step.dtype)
                    return global_step.assign_add(increment, name=scope).op

    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=GATE_OP,
                 aggregation_method=None, colocate_gradients_with_ops=False, name=None,
                 grad_loss=None):
        """``compute_gradients`` then ``apply_gradients``: one training-step op.
        Example: ``tf.train.GradientDescentOptimizer(0.01).minimize(loss)``."""
        grads_and_vars = self.compute_gradients(loss, var_list, grad_loss=grad_loss)
        if all(grad is None for grad, _ in grads_and_vars):
            names = [var.op.name for _, var in grads_and_vars]
            raise ValueError(f"No gradients provided for any variable, check your graph for "
                             f"ops that do not support gradients, between variables "
                             f"{names} and loss {loss!r}.")
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def get_slot_names(self):
        """The names of the slots this optimizer made, sorted: ``['m', 'v']`` for Adam."""
        return sorted(self._slots)

    def get_slot(self, var, name):
        """The slot Variable ``name`` of ``var``, or None:
        ``opt.get_slot(w, 'momentum')`` is the Variable 'w/Momentum'."""
        return self._slots.get(name, {}).get(var)

    def variables(self):
        """The variables this optimizer made in the default graph, by name:
        ``['beta1_power', 'beta2_power', 'w/Adam', 'w/Adam_1']`` for Adam on w."""
        graph = core.get_default_graph()
        made = [var for (_, var_graph), var in self._non_slots.items() if var_graph is graph]
        made += [slot for slots in self._slots.values() for slot in slots.values()
                 if slot.graph is graph]
        return sorted(made, key=lambda var: var.name)

    # -- for subclasses ---------------------------------------------------------------

    def _hyper_values(self):
        """``{name: float or scalar tensor}`` of the hyperparameters the update op
        takes as inputs (e.g. learning_rate); ``_hyper(name, dtype)`` gives each
        as a scalar tensor of a variable's dtype."""
        return {}

    def _create_slots(self, var_list):
        """Make the slot variables of ``var_list`` (none by default)."""

    def _apply_dense(self, grad, var):
        """The op that updates ``var`` in place with ``grad``; it passes
        ``gate=self._gate`` to its training op (see ``_apply_gradients``)."""
        raise NotImplementedError

    def _apply_sparse(self, grad, var):
        """The op that updates the rows of ``var`` that the IndexedSlices ``grad``
        names (TF sums a repeated index's rows first; the sparse kernels do).
        None: this optimizer has no sparse update, and the gradient is made dense."""

    def _apply_sparse_duplicate_indices(self, grad, var):
        """TF's hook for an IndexedSlices that may repeat an index: by default
        ``_apply_sparse``, whose kernel sums the repeated rows."""
        return self._apply_sparse(grad, var)

    def _finish(self, update_ops, name_scope):
        """The op that completes a step once every update has run (a state change
        here must keep the old value where ``self._gate`` is false)."""
        return array_ops.group(*update_ops, name=name_scope)

    def _hyper(self, name, dtype):
        """Hyperparameter ``name`` as a scalar tensor of ``dtype``."""
        return self._hyper_tensors[(name, dtype)]

    def _zeros_slot(self, var, slot_name, op_name):
        """``var``'s slot ``slot_name``: a zero Variable named 'var/op_name' with
        its shape and dtype, on its device, made once."""
        return self._filled_slot(var, slot_name, op_name, 0)

    def _filled_slot(self, var, slot_name, op_name, value):
        """``var``'s slot ``slot_name``: a Variable named 'var/op_name' (made
        unique as TF does: a second slot of the same op_name is 'var/op_name_1')
        filled with ``value``, with its shape and dtype, on its device, made once."""
        slots = self._slots.setdefault(slot_name, {})
        if var not in slots:
            slots[var] = create_filled_slot(var, f"{var.op.name}/{op_name}", value)
        return slots[var]

    def _non_slot_variable(self, initial_value, name, colocate_with):
        """A variable shared by every update of this graph (e.g. 'beta1_power')."""
        graph = colocate_with.graph
        var = self._non_slots.get((name, graph))
        if var is None:
            with graph.as_default(), graph.control_dependencies(None), \
                    graph.name_scope(None), colocated_with(colocate_with):
                var = state_ops.Variable(initial_value, trainable=False, name=name)
            self._non_slots[(name, graph)] = var
        return var

    # -- internals --------------------------------------------------------------------

    def _prepare(self, graph, var_dtypes):
        """Make the hyperparameter tensors, once per dtype, for this apply."""
        self._hyper_tensors = {}
        for dtype in dict.fromkeys(list(var_dtypes) + self._extra_hyper_dtypes()):
            for name, value in self._hyper_values().items():
                self._hyper_tensors[(name, dtype)] = as_scalar(value, dtype, name)

    def _extra_hyper_dtypes(self):
        return []

    def _update(self, graph, grad, var):
        with graph.name_scope("update_" + var.op.name):
            if isinstance(grad, IndexedSlices):
                # NOTE: a gated step (loss scaling) and decoupled weight decay
                # (every row shrinks) take the dense path.
                if self._gate is None and not getattr(self, "_weight_decay", 0):
                    update = self._apply_sparse_duplicate_indices(grad, var)
                    if update is not None:
                        return update
                with graph.colocate_with(var.op):
                    grad = densify(grad)
            return self._apply_dense(grad, var)


def _check_variable(var):
    if not isinstance(var, state_ops.Variable):
        raise TypeError(f"Optimizers update tf.Variable objects; got {var!r}")
    return var


def _as_gradient(grad, var):
    if isinstance(grad, IndexedSlices):
        if grad.dtype is not var.dtype:
            raise TypeError(f"The gradient {grad.name} of variable {var.op.name} is "
                            f"{grad.dtype.name}; it must be {var.dtype.name}, as the variable")
        return grad
    grad = constant_ops.convert_to_tensor(grad)
    if grad.dtype is not var.dtype:
        raise TypeError(f"The gradient {grad.name} of variable {var.op.name} is "
                        f"{grad.dtype.name}; it must be {var.dtype.name}, as the variable")
    return grad


def as_scalar(value, dtype, name):
    """A float or a scalar tensor, as a tensor of ``dtype``."""
    if isinstance(value, (core.Tensor, state_ops.Variable)):
        tensor = constant_ops.convert_to_tensor(value)
        if tensor.shape.ndims not in (0, None):
            raise ValueError(f"{name} must be a scalar; got {tensor.name} of shape "
                             f"{tensor.shape}")
        return tensor if tensor.dtype is dtype else math_ops.cast(tensor, dtype, name=name)
    return constant_ops.constant(float(value), dtype=dtype, name=name)


def create_filled_slot(var, name, value):
    """A non-trainable Variable ``name`` shaped like ``var`` and filled with
    ``value``, on ``var``'s device, outside any control dependency or name scope
    (TF's init_scope). Example: ``create_filled_slot(w, 'w/RMSProp', 1.0)``."""
    graph = var.graph
    with graph.as_default(), graph.control_dependencies(None), graph.name_scope(None), \
            colocated_with(var):
        if var.shape.is_fully_defined():
            def filled():
                return constant_ops.fill(var.shape, constant_ops.constant(value, var.dtype))
            return state_ops.Variable(filled, trainable=False, name=name)

        def filled_like_initial_value():
            zeros = constant_ops.zeros_like(var.initial_value)
            return zeros if value == 0 else zeros + constant_ops.constant(value, var.dtype)
        return state_ops.Variable(filled_like_initial_value, trainable=False, name=name,
                                  validate_shape=False)
