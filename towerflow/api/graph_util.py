"""``tf.graph_util``: freeze a trained graph into constants, and cut a
GraphDef down to what some nodes need (TF 1.15's graph_util_impl)::

    frozen = tf.graph_util.convert_variables_to_constants(
        sess, sess.graph.as_graph_def(), ['probabilities'])
    tf.train.write_graph(frozen, 'export', 'frozen.pb', as_text=False)

A frozen GraphDef made by towerflow imports back with ``tf.import_graph_def``
(see towerflow/api/graph_def.py for which ops round-trip).
"""

import copy

from tensorboard.compat.proto import graph_pb2, node_def_pb2

from .graph_def import _attr_value
from .tf_logging import info

_VARIABLE_OPS = ("Variable", "VariableV2")

__all__ = ["convert_variables_to_constants", "extract_sub_graph"]


def extract_sub_graph(graph_def, dest_nodes):
    """The nodes of ``graph_def`` that ``dest_nodes`` (a list of node names)
    need, through data and control inputs, in their original order."""
    if not isinstance(graph_def, graph_pb2.GraphDef):
        raise TypeError("graph_def must be a graph_pb2.GraphDef proto.")
    if isinstance(dest_nodes, str):
        raise TypeError("dest_nodes must be a list.")
    by_name = {node.name: node for node in graph_def.node}
    for name in dest_nodes:
        assert name in by_name, f"{name} is not in graph"
    needed, stack = set(), list(dest_nodes)
    while stack:
        name = stack.pop()
        if name not in needed:
            needed.add(name)
            stack.extend(_node_name(ref) for ref in by_name[name].input)
    out = graph_pb2.GraphDef()
    out.node.extend(copy.deepcopy(node) for node in graph_def.node if node.name in needed)
    out.library.CopyFrom(graph_def.library)
    out.versions.CopyFrom(graph_def.versions)
    return out


def _node_name(reference):
    return reference.lstrip("^").split(":")[0]


def convert_variables_to_constants(sess, input_graph_def, output_node_names,
                                   variable_names_whitelist=None,
                                   variable_names_blacklist=None):
    """``input_graph_def`` cut down to what ``output_node_names`` need, with
    each variable replaced by a ``Const`` of its value in ``sess`` (only
    those in ``variable_names_whitelist``, none in the blacklist)."""
    inference_graph = extract_sub_graph(input_graph_def, output_node_names)
    names = [node.name for node in inference_graph.node if node.op in _VARIABLE_OPS and
             _wanted(node.name, variable_names_whitelist, variable_names_blacklist)]
    values = dict(zip(names, sess.run([name + ":0" for name in names]))) if names else {}
    info("Froze %d variables.", len(values))
    output = graph_pb2.GraphDef()
    for node in inference_graph.node:
        output.node.append(_constant_node(node, values[node.name]) if node.name in values
                           else copy.deepcopy(node))
    output.library.CopyFrom(inference_graph.library)
    info("Converted %d variables to const ops.", len(values))
    return output


def _wanted(name, whitelist, blacklist):
    return (whitelist is None or name in whitelist) and \
        (blacklist is None or name not in blacklist)


def _constant_node(variable_node, value):
    node = node_def_pb2.NodeDef(name=variable_node.name, op="Const",
                                device=variable_node.device)
    node.attr["value"].CopyFrom(_attr_value(value))
    return node

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.graph_util")
