"""hvd's graph ops: allreduce, allgather, broadcast, and the broadcast of the
global variables that makes every rank start from root_rank's values.

Each is one host op (MpiAllReduce, MpiAllGather, MpiBroadcast) placed on
/cpu:0 and exchanged through hvd's world (basics.collective_world): MPI's
under ``towerflow launch``, the identity in a process alone. The sum behind an
average is MPI's; the division by size() happens after it, in the tensor's
dtype, as Horovod does.
"""

import re
import warnings

from ..graph import core
from ..ops import array_ops, math_ops, state_ops
from ..ops.constant_ops import convert_to_tensor
from ..ops.indexed_slices import IndexedSlices
from ..parallel import mpi, mpi_ops
from . import basics

# Horovod's reduction ops (its ReduceOps values).
Average, Sum, Adasum = 0, 1, 2
_REDUCE_OP_NAMES = {Average: "hvd.Average", Sum: "hvd.Sum", Adasum: "hvd.Adasum"}


class Compressor:
    """How a tensor travels in a collective: ``compress`` gives the tensor to
    send and what ``decompress`` needs to restore the result."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends the tensor as it is."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (half the bytes) and casts the
    result back to their dtype; other dtypes travel unchanged."""

    @staticmethod
    def compress(tensor):
        if not tensor.dtype.is_floating:
            return tensor, tensor.dtype
        return math_ops.cast(tensor, "float16"), tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is None or not ctx.is_floating or tensor.dtype == ctx:
            return tensor
        return math_ops.cast(tensor, ctx)


class Compression:
    """``compression=hvd.Compression.fp16`` halves what the all-reduce sends."""

    none = NoneCompressor
    fp16 = FP16Compressor


def reduce_op_of(op, average):
    """Horovod's rule: ``op`` supersedes the older ``average``; Average by default."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one "
                             "of them.")
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed "
                      "in v1.0", DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    return Average


def _check_reduce_op(op):
    if op == Adasum:
        raise NotImplementedError("hvd.Adasum is not supported by towerflow's Horovod; use "
                                  "op=hvd.Average or op=hvd.Sum")
    if op not in (Average, Sum):
        raise ValueError(f"op={op!r}: expected hvd.Average or hvd.Sum")


def _op_name(prefix, tensor, name):
    """Horovod's names: 'HorovodAllreduce_<the input's name, '/' and ':' as '_'>'."""
    return name or f"{prefix}_{re.sub('[^a-zA-Z0-9_]', '_', tensor.name)}"


def _timeout():
    return mpi.resolve_timeout()


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, name=None):
    """``tensor`` summed (op=hvd.Sum) or averaged (op=hvd.Average, the default)
    over all ranks; the same shape and dtype on every rank. An IndexedSlices is
    all-gathered instead (its rows from every rank), as Horovod does.

    Example::

        >>> total = hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum)   # on 2 ranks
        >>> sess.run(total)
        array([2., 4.], dtype=float32)
    """
    op = reduce_op_of(op, average)
    _check_reduce_op(op)
    world_size = basics.size()
    if isinstance(tensor, IndexedSlices):
        with core.get_default_graph().device(device_sparse):
            values = allgather(tensor.values)
            indices = allgather(tensor.indices)
            if op == Average:
                values = values / math_ops.cast(world_size, values.dtype)
        return IndexedSlices(values, indices, tensor.dense_shape)
    tensor = convert_to_tensor(tensor)
    graph = tensor.graph
    with graph.device(device_dense):
        compressed, ctx = compression.compress(tensor)
        with graph.device("/cpu:0"):
            summed = mpi_ops.all_reduce_op(compressed, _timeout(), world="horovod",
                                       name=_op_name("HorovodAllreduce", tensor, name))
        summed = compression.decompress(summed, ctx)
        if op == Sum:
            return summed
        return summed / math_ops.cast(world_size, summed.dtype) \
            if summed.dtype.is_floating else summed / world_size


def allgather(tensor, name=None):
    """Every rank's ``tensor`` joined along dimension 0, in rank order; the
    first dimension may differ between ranks, the others may not.

    Example::

        >>> rows = hvd.allgather(tf.fill([hvd.rank() + 1, 2], hvd.rank()))  # 2 ranks
        >>> sess.run(rows)          # [[0, 0], [1, 1], [1, 1]]
    """
    basics.size()       # ValueError before hvd.init()
    tensor = convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        raise ValueError(f"hvd.allgather({tensor.name}): a scalar cannot be joined along "
                         "dimension 0; pass a tensor of rank >= 1 (tf.reshape(x, [1]))")
    with tensor.graph.device("/cpu:0"):
        return mpi_ops.all_gather_op(tensor, _timeout(), world="horovod",
                                 name=_op_name("HorovodAllgather", tensor, name))


def broadcast(tensor, root_rank, name=None):
    """Rank ``root_rank``'s ``tensor`` on every rank (same shape and dtype).

    Example::

        >>> value = hvd.broadcast(tf.constant(float(hvd.rank())), root_rank=1)
        >>> sess.run(value)        # 1.0 on every rank
    """
    world_size = basics.size()
    if isinstance(root_rank, bool) or not isinstance(root_rank, int) \
            or not 0 <= root_rank < world_size:
        raise ValueError(f"hvd.broadcast(root_rank={root_rank!r}): expected a rank, an int "
                         f"in 0..{world_size - 1} (size() is {world_size})")
    tensor = convert_to_tensor(tensor)
    with tensor.graph.device("/cpu:0"):
        return mpi_ops.broadcast_op(tensor, _timeout(), root_rank=root_rank, world="horovod",
                                name=_op_name("HorovodBroadcast", tensor, name))


def broadcast_variables(variables, root_rank):
    """One op that sets each of ``variables`` to its value on ``root_rank``."""
    basics.size()       # ValueError before hvd.init(), even without variables
    assigns = [var.assign(broadcast(var, root_rank)).op for var in variables]
    return array_ops.group(*assigns)


def broadcast_global_variables(root_rank):
    """One op that sets every global variable to its value on ``root_rank``:
    run it once after the variables are initialised (or restored).

    Example::

        >>> sess.run(tf.global_variables_initializer())
        >>> sess.run(hvd.broadcast_global_variables(0))
    """
    return broadcast_variables(state_ops.global_variables(), root_rank)
