"""Graphs as TensorFlow's ``GraphDef`` protocol buffers (the ``tensorboard``
package's copies of TF's protos): ``Graph.as_graph_def()`` and
``tf.import_graph_def``.

A towerflow op's attributes become ``AttrValue``s: ints, floats, bools,
strings, dtypes, shapes, arrays (a ``Const``'s ``value`` as a
``TensorProto``) and lists of those. Values those fields would change are
kept exactly in a ``func`` (``NameAttrList``) form: a float that float32
rounds (``epsilon=0.001``), a tuple holding None (a random op's ``seed``) or
mixed items, and a reference to another op (a variable's ``Assign`` names
its variable, an optimizer's ``ApplyAdam`` its variable and slots). An
attribute that has no such form (a Python function, a loop body) is named in
the node's ``_towerflow_lost_attrs``; importing that node raises a ValueError
naming it. The ops an op updates in place (attrs ``variable`` and ``slots``)
are also its first inputs, as TF shows its ref inputs (``Assign`` takes ``w``),
and colocation is TF's ``_class: loc:@op``.

NOTE: attributes keep towerflow's names and forms (Conv2D's ``strides`` is
``(1, 1)``, there is no ``T``): a GraphDef written by towerflow imports into
towerflow, not into TensorFlow, and TensorFlow's GraphDefs do not import
here, except for ops whose attributes happen to agree.

Example::

    graph_def = sess.graph.as_graph_def()
    logits, = tf.import_graph_def(graph_def, input_map={'x:0': images},
                                  return_elements=['logits:0'])
"""

import contextlib

import numpy as np
from tensorboard.compat.proto import (
    attr_value_pb2,
    graph_pb2,
    node_def_pb2,
    tensor_shape_pb2,
    types_pb2,
)
from tensorboard.util import tensor_util

from .. import dtypes, errors
from ..graph import core, registry
from ..graph.shapes import TensorShape

LOST_ATTRS = "_towerflow_lost_attrs"
_GRAPH_DEF_ONLY = ("_output_shapes", "_class", LOST_ATTRS)
# The attributes naming the ops an op updates in place: TF's ref inputs.
_REF_ATTRS = ("variable", "slots")


def as_graph_def(graph, add_shapes=False):
    """``graph`` as a GraphDef: one NodeDef per op, in the order they were
    made (name, type, inputs as 'op', 'op:1' or '^op', device, attributes;
    ``add_shapes``: each output's static shape in ``_output_shapes``)."""
    nodes = [_node_def(op, add_shapes) for op in graph.get_operations()]
    return graph_pb2.GraphDef(node=nodes)


def _node_def(op, add_shapes):
    attrs, lost = {}, []
    for key, value in op.attrs.items():
        if key == "_colocate_with":
            attrs["_class"] = _string_list([f"loc:@{value.name}"])
            continue
        attr = _attr_value(value)
        if attr is None:
            lost.append(key)
        else:
            attrs[key] = attr
    if lost:
        attrs[LOST_ATTRS] = _string_list(lost)
    if add_shapes:
        attrs["_output_shapes"] = attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.
                                                           ListValue(shape=[
                                                               _shape_proto(t.shape)
                                                               for t in op.outputs]))
    return node_def_pb2.NodeDef(name=op.name, op=op.type, device=op.device,
                                input=_ref_inputs(op.attrs) + _input_names(op), attr=attrs)


def _ref_inputs(attrs):
    """The names of the ops ``attrs`` updates in place: TF's ref inputs,
    ``Assign(w, value)``, ``ApplyAdam(w, m, v, ...)``."""
    refs = [attrs.get("variable")] + list(attrs.get("slots") or ())
    return [ref.name for ref in refs if isinstance(ref, core.Operation)]


def _input_names(op):
    names = [tensor.op.name if tensor.value_index == 0 else tensor.name
             for tensor in op.inputs]
    return names + [f"^{control.name}" for control in op.control_inputs]


def _string_list(strings):
    return attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(
        s=[text.encode() for text in strings]))


# -- attribute values -----------------------------------------------------------------


def _attr_value(value):
    """``value`` as an AttrValue, or None when it has no such form."""
    if _needs_exact_form(value):
        return _exact_attr(value)
    if value is None:
        return attr_value_pb2.AttrValue()
    if isinstance(value, (list, tuple)):
        return _list_attr(value)
    field = _scalar_field(value)
    if field is None:
        return None
    name, encoded = field
    try:
        return attr_value_pb2.AttrValue(**{name: encoded})
    except (TypeError, ValueError):     # an int past int64
        return None


def _scalar_field(value):
    """(AttrValue field, encoded value) of a scalar attribute, or None."""
    if isinstance(value, (bool, np.bool_)):
        return "b", bool(value)
    if isinstance(value, (int, np.integer)):
        return "i", int(value)
    if isinstance(value, (float, np.floating)):
        return "f", float(value)
    if isinstance(value, str):
        return "s", value.encode()
    if isinstance(value, dtypes.DType):
        return "type", _data_type(value)
    if isinstance(value, TensorShape):
        return "shape", _shape_proto(value)
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufO":
        try:
            return "tensor", tensor_util.make_tensor_proto(value)
        except (TypeError, ValueError):
            return None
    return None


# -- the exact form: NameAttrList('float' | 'tuple' | 'list' | 'op', attr) -----------------


def _needs_exact_form(value):
    """Whether TF's plain fields would change ``value``: an op, a float that
    float32 rounds, a list holding None, an op or lists, or mixed items."""
    if isinstance(value, core.Operation):
        return True
    if isinstance(value, (float, np.floating)) and not isinstance(value, np.float32):
        return bool(np.isfinite(value)) and float(np.float32(value)) != float(value)
    if isinstance(value, (list, tuple)):
        if any(_needs_exact_form(item) or item is None or isinstance(item, (list, tuple))
               for item in value):
            return True
        return len({_scalar_kind(item) for item in value}) > 1
    return False


def _scalar_kind(value):
    field = _scalar_field(value)
    return None if field is None else field[0]


def _exact_attr(value):
    """``value`` as a NameAttrList kept exactly, or None when it has no form."""
    if isinstance(value, core.Operation):
        return _func("op", {"name": attr_value_pb2.AttrValue(s=value.name.encode())})
    if isinstance(value, (float, np.floating)):
        return _func("float", {"repr": attr_value_pb2.AttrValue(s=repr(float(value))
                                                                 .encode())})
    if isinstance(value, (list, tuple)):
        items = [_attr_value(item) for item in value]
        if any(item is None for item in items):
            return None
        return _func(type(value).__name__ if isinstance(value, list) else "tuple",
                     {str(index): item for index, item in enumerate(items)})
    return _attr_value(value)


def _func(kind, attrs):
    return attr_value_pb2.AttrValue(func=attr_value_pb2.NameAttrList(name=kind, attr=attrs))


def _decode_exact(func, resolve_op):
    """A NameAttrList of ``_exact_attr`` back as the value; ``resolve_op`` maps
    an op's name to the op (None: leave the name)."""
    if func.name == "op":
        name = func.attr["name"].s.decode()
        return name if resolve_op is None else resolve_op(name)
    if func.name == "float":
        return float(func.attr["repr"].s.decode())
    items = [_decode(func.attr[str(index)], resolve_op) for index in range(len(func.attr))]
    return items if func.name == "list" else tuple(items)


_LIST_FIELDS = {"b": "b", "i": "i", "f": "f", "s": "s", "type": "type", "shape": "shape",
                "tensor": "tensor"}


def _list_attr(values):
    """A list attribute when every item has one and the same scalar field."""
    fields = [_scalar_field(item) for item in values]
    if any(field is None for field in fields) or len({name for name, _ in fields}) > 1:
        return None
    if not fields:
        return attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue())
    name = _LIST_FIELDS[fields[0][0]]
    encoded = [item for _, item in fields]
    try:
        return attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(
            **{name: encoded}))
    except (TypeError, ValueError):     # an int past int64
        return None


# TF's DataType names where they are not DT_ and the dtype's name in capitals.
_TF_TYPE_NAMES = {"float32": "DT_FLOAT", "float64": "DT_DOUBLE", "float16": "DT_HALF"}
_DTYPE_NAMES = {tf_name: name for name, tf_name in _TF_TYPE_NAMES.items()}


def _data_type(dtype):
    return types_pb2.DataType.Value(_TF_TYPE_NAMES.get(dtype.name, "DT_" + dtype.name.upper()))


def _dtype_of(data_type):
    tf_name = types_pb2.DataType.Name(data_type)
    return dtypes.as_dtype(_DTYPE_NAMES.get(tf_name, tf_name[3:].lower()))


def _shape_proto(shape):
    if shape.dims is None:
        return tensor_shape_pb2.TensorShapeProto(unknown_rank=True)
    return tensor_shape_pb2.TensorShapeProto(dim=[
        tensor_shape_pb2.TensorShapeProto.Dim(size=-1 if size is None else size)
        for size in shape.dims])


def _shape_of(proto):
    if proto.unknown_rank:
        return TensorShape(None)
    return TensorShape([None if dim.size < 0 else dim.size for dim in proto.dim])


def _decode(attr, resolve_op=None):
    """An AttrValue back as the Python value towerflow's ops keep; an op
    reference through ``resolve_op(name)`` (None: the op's name)."""
    kind = attr.WhichOneof("value")
    if kind is None:
        return None
    if kind == "func":
        return _decode_exact(attr.func, resolve_op)
    if kind == "list":
        return tuple(_decode_scalar(name, item) for name in _LIST_FIELDS
                     for item in getattr(attr.list, name))
    return _decode_scalar(kind, getattr(attr, kind))


def _decode_scalar(kind, value):
    if kind == "s":
        return value.decode()
    if kind == "type":
        return _dtype_of(value)
    if kind == "shape":
        return _shape_of(value)
    if kind == "tensor":
        return tensor_util.make_ndarray(value)
    return value


# -- import_graph_def -------------------------------------------------------------------


def import_graph_def(graph_def, input_map=None, return_elements=None, name=None,
                     op_dict=None, producer_op_list=None):
    """Add the ops of ``graph_def`` to the default graph, under the name scope
    ``name`` (default 'import'); ``input_map`` replaces the tensors it names
    ('x:0' or 'x') with tensors of this graph; returns the ops ('op') and
    tensors ('op:0') named in ``return_elements``, else None.

    Example: ``y, = tf.import_graph_def(frozen, {'x:0': batch}, ['y:0'], name='')``.
    """
    if not isinstance(graph_def, graph_pb2.GraphDef):
        raise TypeError("graph_def must be a GraphDef proto.")
    input_map = _checked_input_map(input_map)
    if return_elements is not None and (isinstance(return_elements, str) or not all(
            isinstance(item, str) for item in return_elements)):
        raise TypeError("return_elements must be a list of strings.")
    graph = core.get_default_graph()
    _check_importable(graph_def.node)
    with graph.name_scope("import" if name is None else name):
        imported, used = _import_nodes(graph, graph_def.node, input_map)
    unused = [key for key in input_map if key not in used]
    if unused:
        raise ValueError("Attempted to map inputs that were not found in graph_def: "
                         f"[{', '.join(unused)}]")
    if return_elements is None:
        return None
    return [_return_element(imported, item) for item in return_elements]


def _checked_input_map(input_map):
    if input_map is None:
        return {}
    if not isinstance(input_map, dict) or not all(isinstance(key, str) for key in input_map):
        raise TypeError("input_map must be a dictionary mapping strings to Tensor objects.")
    return {_canonical_tensor_name(key): value for key, value in input_map.items()}


def _canonical_tensor_name(name):
    return name if ":" in name or name.startswith("^") else f"{name}:0"


def _check_importable(nodes):
    for node in nodes:
        try:
            registry.get_op_def(node.op)
        except KeyError:
            raise errors.NotFoundError(
                None, None, f"Op type not registered '{node.op}' in binary running on this "
                "host: towerflow has no op of that type") from None
        if LOST_ATTRS in node.attr:
            lost = ", ".join(repr(key) for key in _decode(node.attr[LOST_ATTRS]))
            raise ValueError(f"Cannot import node '{node.name}' (op: {node.op}): its "
                             f"attribute(s) {lost} do not round-trip through a GraphDef "
                             "(a Python function, or the body of a loop or cond); only ops "
                             "whose attributes are numbers, strings, dtypes, shapes, arrays "
                             "and other ops import")


def _import_nodes(graph, nodes, input_map):
    """Create the nodes' ops in an order where inputs come first."""
    by_name = {node.name: node for node in nodes}
    imported, used = {}, set()

    def tensor_for(reference):
        mapped = input_map.get(_canonical_tensor_name(reference))
        if mapped is not None:
            used.add(_canonical_tensor_name(reference))
            return core.get_default_graph().as_graph_element(mapped, allow_operation=False)
        op_name, _, index = reference.partition(":")
        return create(op_name).outputs[int(index or 0)]

    def create(node_name):
        if node_name not in imported:
            if node_name not in by_name:
                raise ValueError(f"Node '{node_name}' is an input of the GraphDef but not "
                                 "one of its nodes")
            imported[node_name] = None      # a cycle is reached again as None
            imported[node_name] = _create_op(graph, by_name[node_name], tensor_for, create)
        if imported[node_name] is None:
            raise ValueError(f"The GraphDef has a cycle through node '{node_name}'")
        return imported[node_name]

    for node in nodes:
        create(node.name)
    return imported, used


def _create_op(graph, node, tensor_for, create):
    attrs = {key: _decode(value, create) for key, value in node.attr.items()
             if key not in _GRAPH_DEF_ONLY}
    data_inputs = [ref for ref in node.input if not ref.startswith("^")]
    inputs = [tensor_for(ref) for ref in data_inputs[len(_ref_inputs(attrs)):]]
    controls = [create(ref[1:]) for ref in node.input if ref.startswith("^")]
    colocated = _colocated_op(node, create)
    device = graph.device(node.device) if node.device else contextlib.nullcontext()
    colocation = graph.colocate_with(colocated) if colocated is not None else \
        contextlib.nullcontext()
    with graph.control_dependencies(controls), device, colocation:
        return graph.create_op(node.op, inputs, attrs, name=node.name)


def _colocated_op(node, create):
    """The op of TF's ``_class: loc:@op`` (None when there is none, or it is
    not in the GraphDef: no constraint to keep)."""
    locations = [item.decode() for item in node.attr["_class"].list.s] \
        if "_class" in node.attr else []
    names = [item[len("loc:@"):] for item in locations if item.startswith("loc:@")]
    if not names:
        return None
    try:
        return create(names[0])
    except ValueError:
        return None


def _return_element(imported, name):
    op_name, colon, index = name.partition(":")
    op = imported.get(op_name)
    if not colon:
        if op is None:
            raise ValueError(f"Requested return node '{name}' not found in graph def")
        return op
    if op is None or not index.isdigit() or int(index) >= len(op.outputs):
        raise ValueError(f"Requested return tensor '{name}' not found in graph def")
    return op.outputs[int(index)]
