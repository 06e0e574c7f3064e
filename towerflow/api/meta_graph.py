"""MetaGraphDefs, as TF 1.15's meta_graph.py: ``tf.train.export_meta_graph``,
``tf.train.import_meta_graph``, and the ``<prefix>.meta`` file ``Saver.save``
writes, so that a fresh process rebuilds the model and its training step::

    saver = tf.train.import_meta_graph('ckpt/model-100.meta')
    saver.restore(sess, 'ckpt/model-100')
    logits = tf.get_collection('logits')[0]
    sess.run(tf.get_collection('train_op')[0], {'x:0': batch})   # trains on

A MetaGraphDef holds the GraphDef (see graph_def.py for which ops round-trip),
the Saver's ``SaverDef`` and the collections: the variable collections as TF's
``VariableDef`` protos (rebuilt as Variables), other collections of tensors,
ops and variables by name (``node_list``), of strings, ints and floats as
their values; any other collection is left out with TF's warning.
"""

import os
import re

from google.protobuf import text_format
from tensorboard.compat.proto import (
    graph_pb2,
    meta_graph_pb2,
    op_def_pb2,
    saver_pb2,
    variable_pb2,
)

from ..graph import core
from ..graph.core import GraphKeys
from ..ops import state_ops
from . import graph_def as graph_def_lib
from . import graph_io, tf_logging

# TF's collections of VariableDef protos (variables.py's register_proto_function).
VARIABLE_COLLECTIONS = (GraphKeys.GLOBAL_VARIABLES, GraphKeys.TRAINABLE_VARIABLES,
                        GraphKeys.MOVING_AVERAGE_VARIABLES, GraphKeys.LOCAL_VARIABLES,
                        "model_variables", GraphKeys.GLOBAL_STEP,
                        GraphKeys.METRIC_VARIABLES)
_UNBOUND_INPUT_PREFIX = "$unbound_inputs_"
# The TF API version these graphs follow (TF reads it: graphs of TF < 1.9 lack
# VariableDef.trainable).
_TF_API_VERSION = "1.15.0"


# -- names under a scope (TF's ops.strip_name_scope / prepend_name_scope) -----------


def strip_name_scope(name, export_scope):
    if not export_scope:
        return name
    scope = export_scope.rstrip("/")
    return re.sub(r"([\^]|loc:@|^)" + re.escape(scope) + r"[\/]+(.*)", r"\1\2", name,
                  count=1)


def prepend_name_scope(name, import_scope):
    if not import_scope:
        return name
    return re.sub(r"([\^]|loc:@|^)(.*)", r"\g<1>" + import_scope.rstrip("/") + r"/\2",
                  name, count=1)


# -- variables as VariableDef ----------------------------------------------------------


def variable_to_proto(var, export_scope=None):
    """``var`` as TF's VariableDef; None when it lies outside ``export_scope``."""
    if export_scope and not var.name.startswith(export_scope):
        return None
    return variable_pb2.VariableDef(
        variable_name=strip_name_scope(var.name, export_scope),
        initial_value_name=strip_name_scope(var.initial_value.name, export_scope),
        initializer_name=strip_name_scope(var.initializer.name, export_scope),
        snapshot_name=strip_name_scope(var.value().name, export_scope),
        trainable=bool(var.trainable))


def variable_from_proto(variable_def, import_scope=None):
    """The Variable over the default graph's ops that ``variable_def`` names."""
    graph = core.get_default_graph()

    def element(name):
        return graph.as_graph_element(prepend_name_scope(name, import_scope))
    initial_value = element(variable_def.initial_value_name) \
        if variable_def.initial_value_name else None
    return state_ops.Variable._from_ops(
        element(variable_def.variable_name).op, element(variable_def.initializer_name),
        element(variable_def.snapshot_name), initial_value, variable_def.trainable)


# -- export ------------------------------------------------------------------------------


def export_meta_graph(filename=None, meta_info_def=None, graph_def=None, saver_def=None,
                      collection_list=None, as_text=False, graph=None, export_scope=None,
                      clear_devices=False, clear_extraneous_savers=False,
                      strip_default_attrs=False, save_debug_info=False, **kwargs):
    """The MetaGraphDef of ``graph`` (default graph): its GraphDef, ``saver_def``
    and the collections named in ``collection_list`` (default: all), written to
    ``filename`` when given (binary, or a text proto with ``as_text``).
    Example: ``tf.train.export_meta_graph('model.meta')``."""
    meta_graph_def, _ = export_scoped_meta_graph(
        filename, meta_info_def, graph_def, saver_def, collection_list, as_text, graph,
        export_scope, clear_devices, strip_default_attrs=strip_default_attrs, **kwargs)
    return meta_graph_def


def export_scoped_meta_graph(filename=None, meta_info_def=None, graph_def=None,
                             saver_def=None, collection_list=None, as_text=False, graph=None,
                             export_scope=None, clear_devices=False,
                             unbound_inputs_col_name="unbound_inputs",
                             strip_default_attrs=False):
    """TF's export_scoped_meta_graph: ``(MetaGraphDef, {name: Variable})``;
    ``export_scope`` keeps the ops under that scope, named relative to it, an
    input from outside renamed ``$unbound_inputs_<name>`` (and listed in the
    collection ``unbound_inputs_col_name``)."""
    _check_types(graph, meta_info_def, graph_def, saver_def)
    graph = graph or core.get_default_graph()
    if graph_def is None:
        graph_def = graph.as_graph_def(add_shapes=True)
    if export_scope or clear_devices:
        graph_def, unbound = _scoped_graph_def(graph_def, export_scope, clear_devices)
        if unbound_inputs_col_name:
            graph.get_collection_ref(unbound_inputs_col_name)[:] = unbound
    meta_graph_def = create_meta_graph_def(meta_info_def, graph_def, saver_def,
                                           collection_list, graph, export_scope,
                                           strip_default_attrs)
    if filename:
        graph_io.write_graph(meta_graph_def, os.path.dirname(filename) or ".",
                             os.path.basename(filename), as_text=as_text)
    variables = graph.get_collection(GraphKeys.GLOBAL_VARIABLES, scope=export_scope)
    return meta_graph_def, {strip_name_scope(var.name, export_scope): var
                            for var in variables}


def _check_types(graph, meta_info_def, graph_def, saver_def):
    """TF's TypeErrors for arguments of the wrong proto type."""
    for value, expected, name in (
            (graph, core.Graph, "graph"),
            (meta_info_def, meta_graph_pb2.MetaGraphDef.MetaInfoDef, "meta_info_def"),
            (graph_def, graph_pb2.GraphDef, "graph_def"),
            (saver_def, saver_pb2.SaverDef, "saver_def")):
        if value is not None and not isinstance(value, expected):
            raise TypeError(f"{name} must be of type {expected.__name__}, not "
                            f"{type(value).__name__}")


def create_meta_graph_def(meta_info_def=None, graph_def=None, saver_def=None,
                          collection_list=None, graph=None, export_scope=None,
                          strip_default_attrs=False):
    """TF's create_meta_graph_def: a MetaGraphDef of these parts."""
    graph = graph or core.get_default_graph()
    meta_graph_def = meta_graph_pb2.MetaGraphDef()
    if meta_info_def is not None:
        meta_graph_def.meta_info_def.MergeFrom(meta_info_def)
    info = meta_graph_def.meta_info_def
    info.tensorflow_version = _TF_API_VERSION
    info.tensorflow_git_version = f"towerflow-{_towerflow_version()}"
    meta_graph_def.graph_def.MergeFrom(graph_def if graph_def is not None
                                       else graph.as_graph_def(add_shapes=True))
    if not info.stripped_op_list.op:
        info.stripped_op_list.op.extend(op_def_pb2.OpDef(name=op_type) for op_type in
                                        sorted({node.op for node in
                                                meta_graph_def.graph_def.node}))
    info.stripped_default_attrs = bool(strip_default_attrs)
    if saver_def is not None:
        meta_graph_def.saver_def.MergeFrom(saver_def)
    keys = graph._collections.keys() if collection_list is None else collection_list
    for key in list(keys):
        add_collection_def(meta_graph_def, key, graph, export_scope)
    return meta_graph_def


def _towerflow_version():
    from .. import __version__  # the package imports this module first
    return __version__


def _scoped_graph_def(graph_def, export_scope, clear_devices):
    """``graph_def`` cut to ``export_scope`` (TF's _node_def per node), and
    the names of the inputs from outside it."""
    scoped, unbound = graph_pb2.GraphDef(), []
    scoped.versions.CopyFrom(graph_def.versions)
    scoped.library.CopyFrom(graph_def.library)
    for node in graph_def.node:
        if export_scope and not node.name.startswith(export_scope):
            continue
        new_node = scoped.node.add()
        new_node.CopyFrom(node)
        new_node.name = strip_name_scope(node.name, export_scope)
        del new_node.input[:]
        for name in node.input:
            if export_scope and not name.lstrip("^").startswith(export_scope):
                name = re.sub(r"([\^]|^)(.*)", r"\1" + _UNBOUND_INPUT_PREFIX + r"\2", name)
                unbound.append(name)
            new_node.input.append(strip_name_scope(name, export_scope))
        _strip_attr_scopes(new_node, export_scope)
        if clear_devices:
            new_node.device = ""
    return scoped, unbound


def _strip_attr_scopes(node, export_scope):
    """Op names in ``_class`` and in references to ops, relative to the scope."""
    if not export_scope:
        return
    if "_class" in node.attr:
        kept = [item for item in node.attr["_class"].list.s
                if item.decode().split("@")[-1].startswith(export_scope)]
        del node.attr["_class"].list.s[:]
        node.attr["_class"].list.s.extend(strip_name_scope(item.decode(), export_scope)
                                          .encode() for item in kept)
    for value in node.attr.values():
        _strip_op_references(value, export_scope)


def _strip_op_references(attr, export_scope):
    if attr.WhichOneof("value") != "func":
        return
    if attr.func.name == "op":
        name = attr.func.attr["name"]
        name.s = strip_name_scope(name.s.decode(), export_scope).encode()
    for item in attr.func.attr.values():
        _strip_op_references(item, export_scope)


# -- collections ------------------------------------------------------------------------


def add_collection_def(meta_graph_def, key, graph=None, export_scope=None):
    """Add collection ``key`` of ``graph`` to ``meta_graph_def`` as TF does:
    variables as VariableDefs, tensors, ops and variables by name (node_list),
    strings, ints and floats as values; a collection that cannot be written is
    left out with a warning."""
    if not isinstance(key, (str, bytes)):
        tf_logging.warning("Only collections with string type keys will be serialized. "
                           "This key has %s", type(key))
        return
    graph = graph or core.get_default_graph()
    items = [item for item in graph.get_collection(key)
             if _in_scope(item, export_scope)]
    if not items:
        return
    try:
        _fill_collection_def(meta_graph_def.collection_def[key], key, items, export_scope)
    except (TypeError, ValueError, AttributeError) as err:
        tf_logging.warning("Issue encountered when serializing: %s.\n%s", key, str(err))
        del meta_graph_def.collection_def[key]


def _in_scope(item, export_scope):
    name = item if isinstance(item, str) else getattr(item, "name", None)
    if not isinstance(name, str) or not export_scope:
        return True
    return name.startswith((_UNBOUND_INPUT_PREFIX, export_scope))


def _fill_collection_def(collection_def, key, items, export_scope):
    if key == GraphKeys.SAVERS:     # TF's SaverDef protos
        from ..train.saver import Saver  # the Saver writes meta graphs: import late
        for saver in items:
            if not isinstance(saver, Saver):
                raise TypeError(f"{saver!r} is not a Saver")
            collection_def.bytes_list.value.append(saver.saver_def.SerializeToString())
        return
    if key in VARIABLE_COLLECTIONS:
        for var in items:
            if not isinstance(var, state_ops.Variable):
                raise TypeError(f"{var!r} is not a Variable")
            proto = var.to_proto(export_scope)
            if proto is not None:
                collection_def.bytes_list.value.append(proto.SerializeToString())
        return
    kind = _kind_name(items[0])
    if kind == "node_list":
        for item in items:
            if not isinstance(item, (core.Tensor, core.Operation, state_ops.Variable)):
                raise TypeError(f"{item!r} is not a Tensor, Operation or Variable")
            collection_def.node_list.value.append(strip_name_scope(item.name, export_scope))
    elif kind == "bytes_list":
        collection_def.bytes_list.value.extend(
            item.encode() if isinstance(item, str) else bytes(item) for item in items)
    else:
        getattr(collection_def, kind).value.extend(items)


def _kind_name(item):
    if isinstance(item, (str, bytes)):
        return "bytes_list"
    if isinstance(item, bool) or not isinstance(item, (int, float)):
        return "node_list"
    return "int64_list" if isinstance(item, int) else "float_list"


# -- import ------------------------------------------------------------------------------


def read_meta_graph_file(filename):
    """The MetaGraphDef in ``filename``, binary or text (TF's IOErrors, which
    are OSErrors)."""
    meta_graph_def = meta_graph_pb2.MetaGraphDef()
    if not os.path.exists(filename):
        raise OSError(f"File {filename} does not exist.")
    with open(filename, "rb") as file:
        content = file.read()
    if _parses_as_binary(meta_graph_def, content):
        return meta_graph_def
    try:
        text_format.Merge(content.decode("utf-8"), meta_graph_def)
    except (text_format.ParseError, UnicodeDecodeError) as err:
        raise OSError(f"Cannot parse file {filename}: {err}.") from None
    return meta_graph_def


def _parses_as_binary(meta_graph_def, content):
    try:
        meta_graph_def.ParseFromString(content)
    except Exception:  # noqa: BLE001 - as TF: not binary, so the text form is tried
        meta_graph_def.Clear()
        return False
    return True


def import_scoped_meta_graph(meta_graph_or_file, clear_devices=False, graph=None,
                             import_scope=None, input_map=None,
                             unbound_inputs_col_name="unbound_inputs",
                             restore_collections_predicate=(lambda key: True)):
    """TF's import_scoped_meta_graph: build the MetaGraphDef's graph and
    collections into ``graph`` (default graph) under ``import_scope``; returns
    ``{name: Variable}`` of its global variables."""
    meta_graph_def = _as_meta_graph_def(meta_graph_or_file)
    graph = graph or core.get_default_graph()
    _check_unbound_inputs(meta_graph_def, unbound_inputs_col_name, input_map)
    graph_def = graph_pb2.GraphDef()
    graph_def.CopyFrom(meta_graph_def.graph_def)
    if clear_devices:
        for node in graph_def.node:
            node.device = ""
    with graph.as_default():
        scope = import_scope or graph.unique_name("", mark_as_used=False)
        graph_def_lib.import_graph_def(graph_def, input_map=input_map, name=scope)
        _restore_collections(graph, meta_graph_def, scope, unbound_inputs_col_name,
                             restore_collections_predicate)
    variables = graph.get_collection(GraphKeys.GLOBAL_VARIABLES, scope=scope or None)
    return {strip_name_scope(var.name, scope): var for var in variables}


def _as_meta_graph_def(meta_graph_or_file):
    if isinstance(meta_graph_or_file, meta_graph_pb2.MetaGraphDef):
        return meta_graph_or_file
    return read_meta_graph_file(meta_graph_or_file)


def _check_unbound_inputs(meta_graph_def, collection_name, input_map):
    collection = meta_graph_def.collection_def.get(collection_name) \
        if collection_name else None
    values = [value.decode() if isinstance(value, bytes) else value
              for value in _collection_values(collection)] if collection else []
    if values and (not input_map or sorted(values) != sorted(input_map)):
        missing = [value for value in values if not input_map or value not in input_map]
        raise ValueError(f"Graph contains unbound inputs: {','.join(missing)}. Must "
                         "provide these inputs through input_map.")


def _collection_values(collection_def):
    kind = collection_def.WhichOneof("kind")
    return list(getattr(collection_def, kind).value) if kind else []


def _restore_collections(graph, meta_graph_def, scope, unbound_name, wanted):
    variables = {}      # one Variable per variable, whatever collections hold it
    for key, collection_def in sorted(meta_graph_def.collection_def.items()):
        if key == unbound_name or not wanted(key):
            continue
        kind = collection_def.WhichOneof("kind")
        if kind is None:
            tf_logging.error("Cannot identify data type for collection %s. Skipping.", key)
            continue
        for value in _collection_values(collection_def):
            graph.add_to_collection(key, _collection_item(graph, key, kind, value, scope,
                                                          variables))


def _collection_item(graph, key, kind, value, scope, variables):
    if key in VARIABLE_COLLECTIONS and kind == "bytes_list":
        variable_def = variable_pb2.VariableDef.FromString(value)
        if variable_def.variable_name not in variables:
            variables[variable_def.variable_name] = variable_from_proto(variable_def, scope)
        return variables[variable_def.variable_name]
    if key == GraphKeys.SAVERS and kind == "bytes_list":
        from ..train.saver import Saver  # the Saver writes meta graphs: import late
        return Saver(saver_def=saver_pb2.SaverDef.FromString(value), name=scope or None)
    if kind == "node_list":
        return graph.as_graph_element(prepend_name_scope(value, scope))
    if kind == "int64_list":
        return int(value)
    if kind == "bytes_list":
        return prepend_name_scope(value.decode(), scope)
    return value


def import_meta_graph(meta_graph_or_file, clear_devices=False, import_scope=None,
                      **kwargs):
    """Build the graph of a MetaGraphDef (or of the file that holds one) into
    the default graph, with its collections and Variables, and return its
    Saver (None when it has no SaverDef and the graph no variables).
    Example: ``saver = tf.train.import_meta_graph('model.ckpt-100.meta')``."""
    from ..train.saver import Saver  # the Saver writes meta graphs: import late
    meta_graph_def = _as_meta_graph_def(meta_graph_or_file)
    imported = import_scoped_meta_graph(meta_graph_def, clear_devices,
                                        import_scope=import_scope, **kwargs)
    if meta_graph_def.HasField("saver_def"):
        return Saver(saver_def=meta_graph_def.saver_def, name=import_scope)
    if core.get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES,
                                               scope=import_scope) or imported:
        return Saver()
    tf_logging.info("Saver not created because there are no variables in the graph to "
                    "restore")
    return None
