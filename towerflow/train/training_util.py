"""The global step: an int64 scalar Variable named 'global_step', not
trainable, kept in the graph collection 'global_step'::

    step = tf.train.get_or_create_global_step()
    train_op = opt.minimize(loss, global_step=step)   # +1 per run of train_op
"""

from .. import dtypes
from ..graph import core
from ..graph.core import GraphKeys
from ..ops import state_ops

GLOBAL_STEP = GraphKeys.GLOBAL_STEP   # the collection holding the step variable


def get_global_step(graph=None):
    """The global step Variable of ``graph`` (default graph), or None.

    Found in the 'global_step' collection, else as a variable named
    'global_step' (the TF 1.x habit of ``tf.Variable(0, name='global_step')``).
    Example: ``step = tf.train.get_global_step()``.
    """
    graph = graph or core.get_default_graph()
    found = graph.get_collection(GLOBAL_STEP)
    if len(found) > 1:
        raise TypeError(f"Multiple variables in the '{GLOBAL_STEP}' collection: "
                        f"{[var.op.name for var in found]}")
    if not found:
        found = [var for var in graph.get_collection(GraphKeys.GLOBAL_VARIABLES)
                 if var.op.name == GLOBAL_STEP]
    if not found:
        return None
    return _checked(found[0])


def _checked(step):
    if not step.dtype.is_integer or step.shape.ndims != 0:
        raise TypeError(f"The global step {step.op.name} must be an integer scalar; it is "
                        f"{step.dtype.name} of shape {step.shape}")
    return step


def create_global_step(graph=None):
    """Create the global step of ``graph`` (default graph); ValueError if it
    exists. Built in the current device scope, outside any name scope.
    Example: ``step = tf.train.create_global_step()``."""
    graph = graph or core.get_default_graph()
    if get_global_step(graph) is not None:
        raise ValueError('"global_step" already exists.')
    with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None):
        return state_ops.Variable(
            0, dtype=dtypes.int64, trainable=False, name=GLOBAL_STEP,
            collections=[GraphKeys.GLOBAL_VARIABLES, GLOBAL_STEP])


def get_or_create_global_step(graph=None):
    """The global step of ``graph`` (default graph), created if missing.

    Example: ``step = tf.train.get_or_create_global_step()``.
    """
    graph = graph or core.get_default_graph()
    step = get_global_step(graph)
    return step if step is not None else create_global_step(graph)


def global_step(sess, global_step_tensor):
    """The value of the global step in ``sess``, as a Python int.
    Example: ``tf.train.global_step(sess, step)  # 1200``."""
    return int(sess.run(global_step_tensor))
