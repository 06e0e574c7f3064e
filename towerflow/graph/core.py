"""The dataflow graph: :class:`Graph`, :class:`Operation`, :class:`Tensor`.

Building a graph runs no kernel: each op records its type, inputs, attributes,
static output shapes and dtypes, the device requested by the enclosing
``with tf.device()`` scopes, and its name scope::

    g = tf.Graph()
    with g.as_default(), tf.name_scope("layer"):
        c = tf.matmul(a, b)          # c.name == 'layer/MatMul:0'
"""

import contextlib
import re
import threading

from ..device.spec import DeviceSpec, merge_device_scopes
from . import ordering, registry
from .shapes import as_shape


class GraphKeys:
    """Standard collection names (TensorFlow's)."""

    GLOBAL_VARIABLES = "variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    LOCAL_VARIABLES = "local_variables"
    UPDATE_OPS = "update_ops"
    GLOBAL_STEP = "global_step"
    LOSSES = "losses"
    REGULARIZATION_LOSSES = "regularization_losses"
    MOVING_AVERAGE_VARIABLES = "moving_average_variables"
    METRIC_VARIABLES = "metric_variables"
    QUEUE_RUNNERS = "queue_runners"
    SUMMARIES = "summaries"
    SUMMARY_OP = "summary_op"
    SAVERS = "savers"
    TABLE_INITIALIZERS = "table_initializer"


class Tensor:
    """One output of an :class:`Operation`: a symbolic value with a static
    shape and dtype. Evaluate it with ``sess.run(t)`` or ``t.eval()``."""

    __slots__ = ("__weakref__", "_shape", "dtype", "op", "value_index")
    # NOTE: makes `numpy_array * tensor` call Tensor.__rmul__ instead of
    # letting NumPy broadcast over the tensor object.
    __array_priority__ = 100

    def __init__(self, op, value_index, shape, dtype):
        self.op = op
        self.value_index = value_index
        self.dtype = dtype
        self._shape = shape

    @property
    def name(self):
        return f"{self.op.name}:{self.value_index}"

    @property
    def graph(self):
        return self.op.graph

    @property
    def device(self):
        return self.op.device

    @property
    def shape(self):
        return self._shape

    def get_shape(self):
        return self._shape

    def set_shape(self, shape):
        """Refine the static shape; ValueError if ``shape`` contradicts it."""
        self._shape = self._shape.merge_with(as_shape(shape))

    def consumers(self):
        return [op for op in self.graph.get_operations() if self in op.inputs]

    def eval(self, feed_dict=None, session=None):
        """The value of this tensor in ``session`` (default: the default session)."""
        return _session_for(self.graph, session).run(self, feed_dict=feed_dict)

    def __repr__(self):
        return f"<tf.Tensor '{self.name}' shape={self._shape} dtype={self.dtype.name}>"

    def __bool__(self):
        raise TypeError(
            "Using a tf.Tensor as a Python bool is not allowed: the value exists only "
            "when a Session runs the graph. Use tf.cond / sess.run(...) instead.")

    def __iter__(self):
        raise TypeError(f"Tensor {self.name} is not iterable: it is a symbolic value; "
                        "use tf.split or tf.unstack to take it apart.")

    __hash__ = object.__hash__


class Operation:
    """A node of the graph. ``op.device`` is the device *requested* for it
    (e.g. '/device:GPU:2'); where it actually runs is decided by placement."""

    def __init__(self, graph, op_def, name, inputs, attrs, control_inputs):
        self.graph = graph
        self.op_def = op_def
        self.type = op_def.op_type
        self.name = name
        self.inputs = tuple(inputs)
        self.attrs = attrs
        self.control_inputs = list(control_inputs)
        self.outputs = []
        self.device_spec = DeviceSpec()
        self._id = None
        self._body = None   # the FunctionBody the op belongs to (None: the graph itself)

    @property
    def device(self):
        return self.device_spec.to_string()

    @property
    def colocation_root(self):
        """The op this one must share a device with (itself if unconstrained)."""
        return self.attrs.get("_colocate_with", self)

    def get_attr(self, name):
        try:
            return self.attrs[name]
        except KeyError:
            raise ValueError(f"Operation '{self.name}' has no attr named {name!r}") from None

    def values(self):
        return tuple(self.outputs)

    def _update_input(self, index, tensor):
        """Make input ``index`` ``tensor`` (TF's private method of that name). A
        tensor made after this op breaks the graph's creation order, which plans
        and gradients take as a topological order: call
        ``graph._sort_topologically()`` after such updates, before using the graph."""
        self.graph._check_own_tensor(tensor, self.type)
        old = self.inputs[index]
        if (tensor.shape.as_list() if tensor.shape.ndims is not None else None) != \
                (old.shape.as_list() if old.shape.ndims is not None else None) or \
                tensor.dtype != old.dtype:
            raise ValueError(f"{self.name} input {index} is {old.shape} {old.dtype.name}; "
                             f"cannot replace it by {tensor.name} {tensor.shape} "
                             f"{tensor.dtype.name}")
        inputs = list(self.inputs)
        inputs[index] = tensor
        self.inputs = tuple(inputs)

    def run(self, feed_dict=None, session=None):
        """Run this op in ``session`` (default: the default session)."""
        _session_for(self.graph, session).run(self, feed_dict=feed_dict)

    def __repr__(self):
        return f"<tf.Operation '{self.name}' type={self.type}>"


class Graph:
    """A TensorFlow-1-style graph: ops in creation order, with name, device,
    control-dependency and colocation scopes."""

    def __init__(self):
        self._ops = []
        self._ops_by_name = {}
        self._names_in_use = {}
        self._name_stack = ""
        self._control_stack = []
        self._device_stack = []
        self._colocation_stack = []
        self._collections = {}
        self._body_stack = []     # FunctionBody being traced (see function_body.py)
        self._gradient_overrides = {}     # op type -> gradient name (gradient_override_map)
        self.seed = None
        self.tower_index = 0  # set while a data-parallel tower is built (random streams)
        self._lock = threading.Lock()

    # -- scopes ---------------------------------------------------------------

    @contextlib.contextmanager
    def as_default(self):
        """Make this the default graph inside the ``with`` block."""
        _default_graph_stack.append(self)
        try:
            yield self
        finally:
            _default_graph_stack.pop()

    @contextlib.contextmanager
    def name_scope(self, name):
        """Prefix op names with ``name/``; a name ending in '/' is reused as is,
        None or '' returns to the root scope."""
        previous = self._name_stack
        if not name:
            new_stack = ""
        elif name.endswith("/"):
            new_stack = name[:-1]
        else:
            new_stack = self.unique_name(name)
        self._name_stack = new_stack
        try:
            yield new_stack + "/" if new_stack else ""
        finally:
            self._name_stack = previous

    @contextlib.contextmanager
    def control_dependencies(self, control_inputs):
        """Ops created inside run only after ``control_inputs``; None clears."""
        if control_inputs is None:
            saved, self._control_stack = self._control_stack, []
            try:
                yield
            finally:
                self._control_stack = saved
            return
        ops = [self.as_graph_element(item, allow_tensor=True) for item in control_inputs]
        self._control_stack.append([op.op if isinstance(op, Tensor) else op for op in ops])
        try:
            yield
        finally:
            self._control_stack.pop()

    @contextlib.contextmanager
    def device(self, device_name_or_function):
        """Request a device for ops created inside (merged field by field with
        enclosing scopes, the inner one winning; None clears the scope).
        A function receives each new op and returns its device string."""
        # NOTE: parsed on entry, as TensorFlow does, so a bad device string fails
        # at the `with` line even when no op is built inside.
        if isinstance(device_name_or_function, str):
            device_name_or_function = DeviceSpec.from_string(device_name_or_function)
        elif not (device_name_or_function is None or callable(device_name_or_function)
                  or isinstance(device_name_or_function, DeviceSpec)):
            raise TypeError(f"tf.device takes a device string, a DeviceSpec, a function "
                            f"or None; got {device_name_or_function!r}")
        self._device_stack.append(device_name_or_function)
        try:
            yield
        finally:
            self._device_stack.pop()

    @contextlib.contextmanager
    def colocate_with(self, op):
        """Place ops created inside on the same device as ``op``."""
        if isinstance(op, Tensor):
            op = op.op
        op = getattr(op, "op", op)  # a Variable colocates with its storage op
        self._colocation_stack.append(op.colocation_root if op is not None else None)
        try:
            yield
        finally:
            self._colocation_stack.pop()

    @contextlib.contextmanager
    def gradient_override_map(self, op_type_map):
        """Ops of a type in ``op_type_map`` made inside take their gradient from
        the function registered (tf.RegisterGradient) under the mapped name::

            with g.gradient_override_map({"Sign": "Identity"}):
                y = tf.sign(x)          # a straight-through estimator
        """
        if not isinstance(op_type_map, dict) or not all(
                isinstance(key, str) and isinstance(value, str)
                for key, value in op_type_map.items()):
            raise TypeError("op_type_map must be a dictionary mapping strings to strings")
        saved = self._gradient_overrides
        self._gradient_overrides = {**saved, **op_type_map}
        try:
            yield
        finally:
            self._gradient_overrides = saved

    @contextlib.contextmanager
    def function_body(self, body):
        """Make ops created inside members of ``body`` (a FunctionBody): outer
        inputs become captures, outer control dependencies do not apply."""
        saved_control = self._control_stack
        self._body_stack.append(body)
        self._control_stack = []
        try:
            yield body
        finally:
            self._control_stack = saved_control
            self._body_stack.pop()

    @contextlib.contextmanager
    def outside_function_bodies(self):
        """Build in the graph itself even inside a body (TF's init_scope): a
        variable made in a loop body lives outside it and is read by capture."""
        saved, self._body_stack = self._body_stack, []
        try:
            yield
        finally:
            self._body_stack = saved

    def current_function_body(self):
        """The FunctionBody being traced, or None."""
        return self._body_stack[-1] if self._body_stack else None

    def get_name_scope(self):
        return self._name_stack

    def unique_name(self, name, mark_as_used=True):
        """``name`` inside the current scope, suffixed _1, _2, ... if taken."""
        if self._name_stack:
            name = f"{self._name_stack}/{name}"
        key = name.lower()
        count = self._names_in_use.get(key, 0)
        if mark_as_used:
            self._names_in_use[key] = count + 1
        if count > 0:
            base_key = key
            while key in self._names_in_use:
                key = f"{base_key}_{count}"
                count += 1
            if mark_as_used:
                self._names_in_use[key] = 1
            name = f"{name}_{count - 1}"
        return name

    # -- building ---------------------------------------------------------------

    def create_op(self, op_type, inputs, attrs=None, name=None):
        """Add an op of a registered type; returns the :class:`Operation`."""
        op_def = registry.get_op_def(op_type)
        for tensor in inputs:
            self._check_own_tensor(tensor, op_type)
        body = self.current_function_body()
        if body is not None:
            inputs = [body.localize(tensor) for tensor in inputs]
        attrs = dict(attrs or {})
        if op_type in self._gradient_overrides:
            attrs["_gradient_op_type"] = self._gradient_overrides[op_type]
        # NOTE: a name ending in '/' is a scope name used verbatim (TensorFlow's
        # rule): a Variable named 'w' opens scope 'w/' and its storage op is 'w'.
        op_name = name[:-1] if name and name.endswith("/") else \
            self.unique_name(name or op_type)
        op_def.check_input_types(inputs)
        output_specs = registry.infer_outputs(op_def, inputs, attrs, op_name)
        if self._colocation_stack and self._colocation_stack[-1] is not None:
            attrs["_colocate_with"] = self._colocation_stack[-1]
        op = Operation(self, op_def, op_name, inputs, attrs,
                       self._control_inputs_in(body))
        op.outputs = [Tensor(op, i, as_shape(shape), dtype)
                      for i, (shape, dtype) in enumerate(output_specs)]
        op.device_spec = self._requested_device(op)
        op._body = body
        if body is not None:
            body.ops.append(op)
        self._add_op(op)
        return op

    def _control_inputs_in(self, body):
        """The control inputs of a new op; inside a body, those made outside it
        go to the op that runs the body (which waits for them instead)."""
        control_inputs = self._current_control_inputs()
        if body is None:
            return control_inputs
        outer = [op for op in control_inputs if not body.owns(op)]
        body.outer_control_inputs.extend(op for op in outer
                                         if op not in body.outer_control_inputs)
        return [op for op in control_inputs if body.owns(op)]

    def _check_own_tensor(self, tensor, op_type):
        if not isinstance(tensor, Tensor):
            raise TypeError(f"Input to {op_type} must be a Tensor, got {tensor!r}")
        if tensor.graph is not self:
            raise ValueError(
                f"Tensor {tensor.name} belongs to another graph than the {op_type} op "
                "being built; build both inside one `with graph.as_default()`.")

    def _current_control_inputs(self):
        seen = []
        for level in self._control_stack:
            seen.extend(op for op in level if op not in seen)
        return seen

    def _requested_device(self, op):
        spec = DeviceSpec()
        for entry in self._device_stack:
            if callable(entry) and not isinstance(entry, (str, DeviceSpec)):
                entry = entry(op)
            spec = merge_device_scopes(spec, entry)
        return spec

    def _add_op(self, op):
        with self._lock:
            op._id = len(self._ops)
            self._ops.append(op)
            self._ops_by_name[op.name] = op

    def _sort_topologically(self):
        """Reorder the ops so each comes after its inputs and control inputs
        (see ordering.topological_order): repairs the order after
        ``Operation._update_input`` gave an op an input made after it."""
        with self._lock:
            self._ops = ordering.topological_order(self._ops)

    # -- lookup ----------------------------------------------------------------

    def get_operations(self):
        return list(self._ops)

    def get_operation_by_name(self, name):
        return self.as_graph_element(name, allow_tensor=False)

    def get_tensor_by_name(self, name):
        return self.as_graph_element(name, allow_operation=False)

    def as_graph_element(self, obj, allow_tensor=True, allow_operation=True):
        """Resolve a Tensor, Operation, Variable or name ('op' / 'op:0') in this graph."""
        if isinstance(obj, str):
            return self._element_by_name(obj, allow_tensor, allow_operation)
        if hasattr(obj, "_as_graph_element"):
            obj = obj._as_graph_element()
        if isinstance(obj, (Tensor, Operation)):
            if obj.graph is not self:
                raise ValueError(f"{obj!r} is not an element of this graph.")
            if isinstance(obj, Tensor) and not allow_tensor or \
                    isinstance(obj, Operation) and not allow_operation:
                raise TypeError(f"Cannot use {obj!r} here: wrong kind of graph element")
            return obj
        raise TypeError(f"Cannot convert {obj!r} (type {type(obj).__name__}) to a "
                        "Tensor or Operation: expected a Tensor, Operation, Variable or "
                        "a name such as 'MatMul:0'.")

    def _element_by_name(self, name, allow_tensor, allow_operation):
        op_name, _, index = name.partition(":")
        op = self._ops_by_name.get(op_name)
        if op is None:
            raise KeyError(f"The name '{name}' refers to an operation not in the graph.")
        if not index:
            if not allow_operation:
                raise ValueError(f"The name '{name}' looks like an Operation name; "
                                 f"a Tensor name such as '{name}:0' was expected.")
            return op
        if not allow_tensor:
            raise ValueError(f"The name '{name}' names a Tensor; an Operation was expected")
        if not index.isdigit() or int(index) >= len(op.outputs):
            raise KeyError(f"The name '{name}' refers to a Tensor which does not exist: "
                           f"operation '{op_name}' has {len(op.outputs)} output(s).")
        return op.outputs[int(index)]

    def as_graph_def(self, from_version=None, add_shapes=False):
        """This graph as TensorFlow's GraphDef protocol buffer (see
        towerflow/api/graph_def.py): ``[n.name for n in g.as_graph_def().node]``."""
        from ..api.graph_def import as_graph_def  # the proto layer builds on the graph
        return as_graph_def(self, add_shapes=add_shapes)

    # -- collections -----------------------------------------------------------

    def add_to_collection(self, name, value):
        self._collections.setdefault(name, []).append(value)

    def get_collection(self, name, scope=None):
        """The items of collection ``name``; given ``scope``, those whose name
        the regular expression ``scope`` matches at its start (TF's filter:
        items without a name are left out)."""
        items = list(self._collections.get(name, []))
        if scope is None:
            return items
        pattern = re.compile(scope)
        return [item for item in items
                if isinstance(getattr(item, "name", None), str) and pattern.match(item.name)]

    def get_collection_ref(self, name):
        return self._collections.setdefault(name, [])


# -- the default graph ---------------------------------------------------------

_global_default_graph = Graph()
_default_graph_stack = []


def get_default_graph():
    """The graph new ops go into: the innermost ``as_default()`` graph, else the
    global default graph."""
    return _default_graph_stack[-1] if _default_graph_stack else _global_default_graph


def reset_default_graph():
    """Replace the global default graph with a new, empty one."""
    global _global_default_graph
    if _default_graph_stack:
        raise AssertionError("Do not use reset_default_graph() inside a "
                             "`with graph.as_default()` block.")
    _global_default_graph = Graph()


# The session stage registers how to find the default session, so that
# Tensor.eval() works without the graph stage importing the session stage.
_default_session_lookup = None


def set_default_session_lookup(lookup):
    global _default_session_lookup
    _default_session_lookup = lookup


def _session_for(graph, session):
    if session is None and _default_session_lookup is not None:
        session = _default_session_lookup()
    if session is None:
        raise ValueError("Cannot evaluate without a session: pass session=sess or use "
                         "`with tf.Session() as sess:` (or sess.as_default()).")
    if session.graph is not graph:
        raise ValueError("Cannot use the given session to evaluate this tensor: the "
                         "tensor's graph is different from the session's graph.")
    return session
