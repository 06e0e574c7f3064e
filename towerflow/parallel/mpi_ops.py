"""The MPI collectives as graph ops: MpiAllReduce, MpiBroadcast, MpiAllGather
and the overlapping MpiAllReduceStart / MpiAllReduceWait, with their shape
functions and the builders that add them to a graph::

    total = mpi_ops.all_reduce_op(gradient, timeout=60.0)

Apart from towerflow/parallel/mpi.py, which holds the MPI world these ops
exchange through at run time (communication, deadlines, the progress thread):
building a graph needs only this module. The kernels that call the world are
in towerflow/backends/collective_kernels.py.
"""

from .. import dtypes
from ..graph import TensorShape
from ..graph.registry import register_not_differentiable, register_op


def _same_shape(inputs, attrs):
    return [(inputs[0].shape, inputs[0].dtype)]


# (x) -> the sum of x over all ranks; attrs: timeout, signature (checked once).
register_op("MpiAllReduce", _same_shape, stateful=True)
def _gathered_shape(inputs, attrs):
    x = inputs[0]
    if x.shape.rank == 0:
        raise ValueError(f"an all-gather joins tensors along dimension 0, but {x.name} is "
                         "a scalar; reshape it to [1] first")
    dims = x.shape.dims
    rows = None if dims is None else [None] + list(dims[1:])
    return [(TensorShape(rows), x.dtype)]


# (x) -> root_rank's x on every rank; attrs: timeout, signature (checked once),
# root_rank (default 0).
register_op("MpiBroadcast", _same_shape, stateful=True)
# (x) -> every rank's x joined along dimension 0 (first dimensions may differ).
register_op("MpiAllGather", _gathered_shape, stateful=True)
register_not_differentiable("MpiAllReduce", "MpiBroadcast", "MpiAllGather")
# An all-reduce in two halves, so that it overlaps the ops between them:
# (x) -> a handle (variant); the sum runs in the world's progress thread. attrs:
# timeout, signature, world and ``schedule='early'`` (the plan runs it as soon
# as x exists, see plan_order.overlapping_order).
register_op("MpiAllReduceStart",
            lambda inputs, attrs: [(TensorShape([]), dtypes.variant)], stateful=True)
# (handle) -> the sum, shaped like the started x (attrs shape, dtype);
# ``schedule='late'``: run when nothing else is ready.
register_op("MpiAllReduceWait",
            lambda inputs, attrs: [(TensorShape(attrs["shape"]), attrs["dtype"])],
            stateful=True)
register_not_differentiable("MpiAllReduceStart", "MpiAllReduceWait")
# Every op above also takes attr ``world``: None (MPI's) or a registered name.


def all_reduce_op(tensor, timeout, signature=None, name="mpi_all_reduce", world=None):
    attrs = {"timeout": float(timeout), "signature": signature, "world": world}
    return tensor.graph.create_op("MpiAllReduce", [tensor], attrs, name=name).outputs[0]


def all_reduce_started(tensor, timeout, signature=None, name="mpi_all_reduce"):
    """The sum of ``tensor`` over all ranks as a start op, scheduled as soon as
    ``tensor`` exists, and a wait op, scheduled as late as its users allow:
    the collective runs in a progress thread between them (MpiWorld.all_reduce_start)."""
    graph = tensor.graph
    attrs = {"timeout": float(timeout), "signature": signature, "world": None,
             "schedule": "early"}
    handle = graph.create_op("MpiAllReduceStart", [tensor], attrs,
                             name=f"{name}_start").outputs[0]
    attrs = {"shape": tuple(tensor.shape.dims), "dtype": tensor.dtype, "schedule": "late"}
    return graph.create_op("MpiAllReduceWait", [handle], attrs, name=name).outputs[0]


def broadcast_op(tensor, timeout, signature=None, name="mpi_broadcast", root_rank=0,
                 world=None):
    attrs = {"timeout": float(timeout), "signature": signature, "root_rank": int(root_rank),
             "world": world}
    return tensor.graph.create_op("MpiBroadcast", [tensor], attrs, name=name).outputs[0]


def all_gather_op(tensor, timeout, name="mpi_all_gather", world=None):
    attrs = {"timeout": float(timeout), "signature": None, "world": world}
    return tensor.graph.create_op("MpiAllGather", [tensor], attrs, name=name).outputs[0]
