"""``tf.train.write_graph``: a GraphDef to a file, as text or binary."""

import os

from google.protobuf import text_format

from ..graph.core import Graph
from . import gfile


def write_graph(graph_or_graph_def, logdir, name, as_text=True):
    """Write a Graph's (or a GraphDef's) GraphDef to ``logdir/name`` (made
    if missing), as a text proto or, ``as_text=False``, binary; returns the
    path. Example: ``tf.train.write_graph(sess.graph, 'out', 'model.pbtxt')``."""
    graph_def = graph_or_graph_def.as_graph_def() \
        if isinstance(graph_or_graph_def, Graph) else graph_or_graph_def
    if not gfile.exists(logdir):
        gfile.makedirs(logdir)
    path = os.path.join(logdir, name)
    data = text_format.MessageToString(graph_def) if as_text else \
        graph_def.SerializeToString(deterministic=True)
    write_atomically(path, data)
    return path


def write_atomically(path, data):
    """Write ``data`` (str or bytes) to ``path`` through a temporary file and a
    rename, as TF's atomic_write_string_to_file: never a partial file."""
    temporary = f"{path}.tmp{os.getpid()}"
    with open(temporary, "w" if isinstance(data, str) else "wb") as out:
        out.write(data)
    os.replace(temporary, path)
