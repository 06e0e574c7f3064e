"""Variables: state that lives in a Session across ``run`` calls.

Each Variable is three ops, as in TensorFlow 1.x: the storage op (``w``), its
initializer (``w/Assign`` of ``w/initial_value``) and a read (``w/read``), all
on the storage op's device::

    w = tf.Variable(0.0, name='weight')
    sess.run(tf.global_variables_initializer())
    sess.run(w.assign_add(1.0))          # 1.0
"""

from ..graph import core
from ..graph.core import GraphKeys
from ..graph.registry import register_not_differentiable, register_op
from ..graph.shapes import as_shape
from . import array_ops, math_ops
from .constant_ops import convert_to_tensor, register_tensor_conversion_function


def _variable_shape(inputs, attrs):
    return [(attrs["shape"], attrs["dtype"])]


def _assign_shape(inputs, attrs):
    variable_op, value = attrs["variable"], inputs[0]
    var_tensor = variable_op.outputs[0]
    if value.dtype is not var_tensor.dtype:
        raise TypeError(f"Cannot assign a {value.dtype.name} value to variable "
                        f"'{variable_op.name}' of {var_tensor.dtype.name}")
    if attrs["validate_shape"] and not var_tensor.shape.is_compatible_with(value.shape):
        raise ValueError(f"Cannot assign a value of shape {value.shape} to variable "
                         f"'{variable_op.name}' of shape {var_tensor.shape}")
    shape = var_tensor.shape if attrs["validate_shape"] else value.shape
    return [(shape, var_tensor.dtype)]


# Their outputs are the variable's own buffer: fetches copy them.
register_op("VariableV2", _variable_shape, stateful=True, aliases_state=True)
register_op("Assign", _assign_shape, stateful=True, aliases_state=True)
register_op("AssignAdd", _assign_shape, stateful=True, aliases_state=True)
register_op("AssignSub", _assign_shape, stateful=True, aliases_state=True)
# A read of the variable at the point where the op runs (so it respects control
# dependencies, unlike the storage op, which runs where it was created).
register_op("ReadVariable", lambda inputs, attrs: _variable_shape(inputs, {
    "shape": attrs["variable"].outputs[0].shape, "dtype": attrs["variable"].outputs[0].dtype}),
    stateful=True, aliases_state=True)


class Variable:
    """A mutable tensor kept by each Session; see the module docstring."""

    def __init__(self, initial_value=None, trainable=True, name=None, dtype=None,
                 validate_shape=True, collections=None, caching_device=None):
        if initial_value is None:
            raise ValueError("Variable needs an initial_value (a value, tensor or callable)")
        graph = core.get_default_graph()
        # NOTE: a variable made in a loop body or branch (get_variable in an RNN
        # cell) lives in the graph itself, as TF's init_scope puts it; the body
        # reads it through a capture.
        with graph.outside_function_bodies(), graph.name_scope(name or "Variable") as scope:
            if callable(initial_value):
                initial_value = initial_value()
            self._initial_value = convert_to_tensor(initial_value, dtype=dtype,
                                                    name="initial_value")
            shape = self._initial_value.shape if validate_shape else as_shape(None)
            attrs = {"shape": shape, "dtype": self._initial_value.dtype}
            self._variable_op = graph.create_op("VariableV2", [], attrs, name=scope)
            with graph.colocate_with(self._variable_op):
                self._initializer = self._assign_op("Assign", self._initial_value,
                                                    validate_shape, "Assign").op
            self._snapshot = _read(graph, self._variable_op, caching_device)
        self.trainable = trainable
        self._register(graph, collections, trainable)

    @classmethod
    def _from_ops(cls, variable_op, initializer, snapshot, initial_value, trainable):
        """A Variable over ops that exist already (an imported graph's: see
        ``from_proto``); it is put in no collection."""
        var = cls.__new__(cls)
        var._variable_op, var._initializer = variable_op, initializer
        var._snapshot, var._initial_value = snapshot, initial_value
        var.trainable = trainable
        return var

    def to_proto(self, export_scope=None):
        """This variable as TF's ``VariableDef`` (its ops' names, made relative
        to ``export_scope``); None when it lies outside that scope."""
        # the proto layer builds on this one: imported here
        from ..api.meta_graph import variable_to_proto
        return variable_to_proto(self, export_scope)

    @staticmethod
    def from_proto(variable_def, import_scope=None):
        """The Variable of the default graph that ``variable_def`` (a
        ``VariableDef``) names, its names under ``import_scope``."""
        from ..api.meta_graph import variable_from_proto
        return variable_from_proto(variable_def, import_scope)

    def _register(self, graph, collections, trainable):
        if collections is None:
            collections = [GraphKeys.GLOBAL_VARIABLES]
        if trainable and GraphKeys.TRAINABLE_VARIABLES not in collections:
            collections = list(collections) + [GraphKeys.TRAINABLE_VARIABLES]
        for key in collections:
            graph.add_to_collection(key, self)

    def _assign_op(self, op_type, value, validate_shape=True, name=None):
        graph = self._variable_op.graph
        value = convert_to_tensor(value, dtype=self.dtype)
        attrs = {"variable": self._variable_op, "validate_shape": validate_shape}
        with graph.colocate_with(self._variable_op):
            return graph.create_op(op_type, [value], attrs, name=name or op_type).outputs[0]

    # -- TensorFlow's Variable API ---------------------------------------------

    name = property(lambda self: self._variable_op.outputs[0].name)
    op = property(lambda self: self._variable_op)
    graph = property(lambda self: self._variable_op.graph)
    device = property(lambda self: self._variable_op.device)
    dtype = property(lambda self: self._variable_op.outputs[0].dtype)
    shape = property(lambda self: self._variable_op.outputs[0].shape)
    initializer = property(lambda self: self._initializer)
    initial_value = property(lambda self: self._initial_value)

    def get_shape(self):
        return self.shape

    def value(self):
        """The tensor that reads this variable (``w/read``)."""
        return self._snapshot

    def read_value(self):
        """A new read of the variable, made where the op runs: inside
        ``tf.control_dependencies`` it sees the effect of those ops."""
        graph = self._variable_op.graph
        with graph.colocate_with(self._variable_op):
            return graph.create_op("ReadVariable", [], {"variable": self._variable_op},
                                   name="read_value").outputs[0]

    def _as_graph_element(self):
        return self._snapshot

    def assign(self, value, use_locking=None, name=None, read_value=True):
        """A tensor that sets the variable to ``value`` when run and yields it."""
        return self._assign_op("Assign", value, True, name)

    def assign_add(self, delta, use_locking=None, name=None, read_value=True):
        """A tensor that adds ``delta`` in place when run and yields the new value."""
        return self._assign_op("AssignAdd", delta, True, name)

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
        """A tensor that subtracts ``delta`` in place when run and yields the new value."""
        return self._assign_op("AssignSub", delta, True, name)

    def count_up_to(self, limit):
        """A tensor that increments the variable and yields its value before,
        until that value reaches ``limit``: then OutOfRangeError
        ("Reached limit of <limit>") and the variable is left as it is."""
        return count_up_to(self, limit)

    def eval(self, session=None):
        return self._snapshot.eval(session=session)

    def load(self, value, session=None):
        """Set the variable to ``value`` in ``session`` without adding ops.

        As in TensorFlow, the value fed is the *input of the initializer's
        assign*, so nothing upstream of it runs: a tower replica, whose
        initializer copies tower 0's freshly initialised variable, takes
        ``value`` and leaves tower 0 alone.

        Example::

            >>> step.replicas[1][0].load(np.zeros((3, 2), np.float32), sess)
        """
        core._session_for(self.graph, session).run(
            self._initializer, feed_dict={self._initializer.inputs[0]: value})

    def __repr__(self):
        return (f"<tf.Variable '{self.name}' shape={self.shape} "
                f"dtype={self.dtype.name}_ref>")

    __hash__ = object.__hash__


def _read(graph, variable_op, caching_device):
    """The variable's ``read``: beside it, or on ``caching_device`` when given
    (TF's cache: one copy there that the consumers on that device share)."""
    if caching_device is None:
        with graph.colocate_with(variable_op):
            return array_ops.identity(variable_op.outputs[0], "read")
    with graph.colocate_with(None), graph.device(caching_device):
        return array_ops.identity(variable_op.outputs[0], "read")


math_ops.overload_operators(Variable)
register_tensor_conversion_function(
    Variable, lambda var, dtype, name: convert_to_tensor(var.value(), dtype=dtype))


def _count_up_to_shape(inputs, attrs):
    variable_tensor = attrs["variable"].outputs[0]
    if not variable_tensor.dtype.is_integer or variable_tensor.shape.ndims != 0:
        raise TypeError(f"count_up_to needs a scalar int32/int64 variable, got "
                        f"'{attrs['variable'].name}' of {variable_tensor.dtype.name} "
                        f"{variable_tensor.shape}")
    return [(variable_tensor.shape, variable_tensor.dtype)]


register_op("CountUpTo", _count_up_to_shape, stateful=True)


def count_up_to(ref, limit, name=None):
    """``ref.count_up_to(limit)``: see :meth:`Variable.count_up_to`. Example:
    ``epochs.count_up_to(3)`` yields 0, 1, 2, then raises OutOfRangeError."""
    graph = ref.op.graph
    with graph.colocate_with(ref.op):
        return graph.create_op("CountUpTo", [], {"variable": ref.op, "limit": int(limit)},
                               name=name or "CountUpTo").outputs[0]


def global_variables():
    return core.get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES)


def trainable_variables():
    return core.get_default_graph().get_collection(GraphKeys.TRAINABLE_VARIABLES)


def moving_average_variables():
    """The variables that an ExponentialMovingAverage averages (its ``apply``
    adds them): ``tf.moving_average_variables()``."""
    return core.get_default_graph().get_collection(GraphKeys.MOVING_AVERAGE_VARIABLES)


def local_variables():
    """The variables of the LOCAL_VARIABLES collection (metrics' totals, epoch
    counters): per-Session state that is never saved."""
    return core.get_default_graph().get_collection(GraphKeys.LOCAL_VARIABLES)


def local_variables_initializer():
    """One op that initialises every local variable:
    ``sess.run(tf.local_variables_initializer())``."""
    return variables_initializer(local_variables())


def variables_initializer(var_list, name="init"):
    """One op that initialises every variable of ``var_list``."""
    return array_ops.group(*[var.initializer for var in var_list], name=name)


def global_variables_initializer():
    """One op that initialises every global variable of the default graph:
    ``sess.run(tf.global_variables_initializer())``."""
    return variables_initializer(global_variables())


initialize_all_variables = global_variables_initializer


def assign(ref, value, validate_shape=True, name=None):
    return ref._assign_op("Assign", value, validate_shape, name)


def assign_add(ref, value, name=None):
    return ref.assign_add(value, name=name)


def assign_sub(ref, value, name=None):
    return ref.assign_sub(value, name=name)



register_not_differentiable("VariableV2", "ReadVariable", "Assign", "AssignAdd", "AssignSub",
                            "CountUpTo")
