"""NCCL all-reduce for towers on distinct physical GPUs (``all_reduce='nccl'``).

One process drives several GPUs through ``cupy.cuda.nccl``: a
``NcclCommunicator.initAll(device_ids)`` group, one member op per tower placed
on the tower's GPU. The N member ops of a bucket are created back to back, so
the plan runs them consecutively: the first opens an NCCL group, each
enqueues its rank's ``allReduce`` on its device's stream, the last closes
the group (NCCL requires one thread to issue all ranks' calls inside one
group). Across processes (one GPU tower per MPI rank), one member op per
process: rank 0's ``get_unique_id()`` goes out over MPI (with the collective
deadline), each process joins with ``NcclCommunicator(world_size, uid, rank)``
once per Session, and the member sums the bucket over every process's GPU.

These kernels run on the GPU backend; without a GPU they are tested against a
stand-in of ``cupy.cuda.nccl`` (tests/test_nccl.py) and, across processes, on
the simulated GPUs (towerflow.simgpu; tests/test_mpi_nccl.py).
"""

import numpy as np

from .. import errors
from ..graph.registry import register_not_differentiable, register_op

# ncclRedOp_t and ncclDataType_t values (nccl.h), by NumPy dtype name.
NCCL_SUM = 0
NCCL_DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5,
               "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}


def _same_shape(inputs, attrs):
    return [(inputs[0].shape, inputs[0].dtype)]


# (x on tower ``rank``'s GPU) -> the sum over the group's towers; attrs: rank,
# device_ids (the group, in rank order); across processes also world_size (> 1)
# and timeout (for the unique id's broadcast), with rank the process's MPI rank.
register_op("NcclAllReduce", _same_shape, stateful=True)
register_not_differentiable("NcclAllReduce")


def all_reduce_members(tensors, device_ids, graph, name="nccl_all_reduce"):
    """One member op per tower (``tensors[rank]`` on ``device_ids[rank]``)."""
    group = tuple(int(device) for device in device_ids)
    outputs = []
    for rank, tensor in enumerate(tensors):
        attrs = {"rank": rank, "device_ids": group}
        with graph.colocate_with(tensor.op):
            outputs.append(graph.create_op("NcclAllReduce", [tensor], attrs,
                                           name=f"{name}_{rank}").outputs[0])
    return outputs


def world_member(tensor, world, timeout, name="nccl_all_reduce"):
    """This process's member (``tensor`` on its one GPU) of an all-reduce over
    the ``world.size`` processes of an MPI world."""
    attrs = {"rank": world.rank, "device_ids": (), "world_size": world.size,
             "timeout": float(timeout)}
    with tensor.graph.colocate_with(tensor.op):
        return tensor.graph.create_op("NcclAllReduce", [tensor], attrs,
                                      name=f"{name}_rank_{world.rank}").outputs[0]


class NcclGroup:
    """The communicators of one group of GPUs, created once per Session."""

    def __init__(self, nccl, device_ids):
        if len(set(device_ids)) != len(device_ids):
            raise ValueError(f"NCCL needs distinct physical GPUs, got {list(device_ids)}: "
                             "towers on logical GPUs of one card use all_reduce='local'")
        self.nccl = nccl
        self.communicators = nccl.NcclCommunicator.initAll(list(device_ids))


def make_member_kernel(ctx, nccl, xp):
    """The kernel of one NcclAllReduce member (GPU backend)."""
    _require_nccl(nccl)
    if ctx.attrs.get("world_size", 1) > 1:
        return _world_member_kernel(ctx, nccl, xp)
    rank, group_ids = ctx.attrs["rank"], ctx.attrs["device_ids"]
    group = ctx.resource(("nccl", group_ids), lambda: NcclGroup(nccl, group_ids))
    communicator = group.communicators[rank]
    dtype = NCCL_DTYPES[ctx.output_dtypes[0].name]
    last = len(group_ids) - 1

    def reduce(x):
        if rank == 0:
            nccl.groupStart()
        out = _all_reduce_into(communicator, x, dtype, xp)
        if rank == last:
            nccl.groupEnd()
        return out
    return reduce


def _world_member_kernel(ctx, nccl, xp):
    """One process's member across processes: its communicator joins the world
    (a collective) when the plan is compiled, on the member's GPU, which is
    current while kernels are made."""
    from . import mpi
    size, timeout = ctx.attrs["world_size"], ctx.attrs["timeout"]
    communicator = ctx.resource(
        ("nccl world", size), lambda: join_across_processes(nccl, mpi.world(), timeout))
    dtype = NCCL_DTYPES[ctx.output_dtypes[0].name]
    return lambda x: _all_reduce_into(communicator, x, dtype, xp)


def _all_reduce_into(communicator, x, dtype, xp):
    out = xp.empty_like(x)
    stream = xp.cuda.get_current_stream()
    communicator.allReduce(x.data.ptr, out.data.ptr, x.size, dtype, NCCL_SUM, stream.ptr)
    return out


def _require_nccl(nccl):
    if not getattr(nccl, "available", True):
        raise errors.UnavailableError(
            None, None, "all_reduce='nccl' needs the NCCL library, which CuPy did not find: "
            "pip install nvidia-nccl-cu12, or use all_reduce='mpi' (or 'cpu')")


def join_across_processes(nccl, world, timeout):
    """This process's communicator (on the current GPU) in one NCCL world of
    all MPI ranks: rank 0's unique id (bytes, as CuPy 14 makes it) is
    broadcast over MPI with ``timeout``, then every rank joins.

    Example::

        >>> communicator = join_across_processes(cupy.cuda.nccl, mpi.world(), 60.0)
        >>> communicator.rank_id() == mpi.world().rank
        True
    """
    unique_id = nccl.get_unique_id() if world.rank == 0 else bytes(_UNIQUE_ID_BYTES)
    sent = np.frombuffer(unique_id, dtype=np.uint8)
    received = world.broadcast(sent, "broadcast of the NCCL unique id", timeout)
    return nccl.NcclCommunicator(world.size, received.tobytes(), world.rank)


_UNIQUE_ID_BYTES = 128      # NCCL_UNIQUE_ID_BYTES (nccl.h)
