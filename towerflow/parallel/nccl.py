"""NCCL all-reduce for towers on distinct physical GPUs (``all_reduce='nccl'``).

One process drives several GPUs through ``cupy.cuda.nccl``: a
``NcclCommunicator.initAll(device_ids)`` group, one member op per tower placed
on the tower's GPU. The N member ops of a bucket are created back to back, so
the plan runs them consecutively: the first opens an NCCL group, each
enqueues its rank's ``allReduce`` on its device's stream, the last closes
the group (NCCL requires one thread to issue all ranks' calls inside one
group). Across processes, rank 0's ``get_unique_id()`` goes out over MPI and
each process joins with ``NcclCommunicator(nranks, uid, rank)``.

These kernels run on the GPU backend; they are unit-tested against a stand-in
of ``cupy.cuda.nccl`` on machines without a GPU.
"""

from ..graph.registry import register_not_differentiable, register_op

# ncclRedOp_t and ncclDataType_t values (nccl.h), by NumPy dtype name.
NCCL_SUM = 0
NCCL_DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5,
               "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}


def _same_shape(inputs, attrs):
    return [(inputs[0].shape, inputs[0].dtype)]


# (x on tower ``rank``'s GPU) -> the sum over the group's towers; attrs: rank,
# device_ids (the group, in rank order).
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
    rank, group_ids = ctx.attrs["rank"], ctx.attrs["device_ids"]
    group = ctx.resource(("nccl", group_ids), lambda: NcclGroup(nccl, group_ids))
    communicator = group.communicators[rank]
    dtype = NCCL_DTYPES[ctx.output_dtypes[0].name]
    last = len(group_ids) - 1

    def reduce(x):
        if rank == 0:
            nccl.groupStart()
        out = xp.empty_like(x)
        stream = xp.cuda.get_current_stream()
        communicator.allReduce(x.data.ptr, out.data.ptr, x.size, dtype, NCCL_SUM, stream.ptr)
        if rank == last:
            nccl.groupEnd()
        return out
    return reduce


def join_across_processes(nccl, world, device_id):
    """A communicator for this process's GPU in a world of MPI ranks: rank 0's
    NCCL unique id is broadcast over MPI, then every rank joins."""
    unique_id = nccl.get_unique_id() if world.rank == 0 else None
    unique_id = world.comm.bcast(unique_id, root=0)
    return nccl.NcclCommunicator(world.size, unique_id, world.rank), device_id
