"""NCCL all-reduce for towers on distinct physical GPUs (``all_reduce='nccl'``).

One process drives several GPUs through ``cupy.cuda.nccl``: a
``NcclCommunicator.initAll(device_ids)`` group, one member op per tower placed
on the tower's GPU. The N member ops of a bucket are created back to back, so
the plan runs them consecutively: each allocates its rank's output on its
GPU and enqueues nothing; the last then issues every rank's ``allReduce``
inside one NCCL group (NCCL requires one thread to issue all ranks' calls in
one group), which it always closes. A plan holding only some members of a
bucket is refused when it is compiled (its collective would wait forever).
Across processes, rank 0's ``get_unique_id()`` goes out over MPI and each
process joins with ``NcclCommunicator(nranks, uid, rank)``.

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
    bucket = tuple(output.op.name for output in outputs)
    for output in outputs:      # the plan runs all of them or refuses
        output.op.attrs["run_together"] = bucket
    return outputs


class NcclGroup:
    """The communicators of one group of GPUs, created once per Session."""

    def __init__(self, nccl, device_ids):
        if len(set(device_ids)) != len(device_ids):
            raise ValueError(f"NCCL needs distinct physical GPUs, got {list(device_ids)}: "
                             "towers on logical GPUs of one card use all_reduce='local'")
        self.nccl = nccl
        self.communicators = nccl.NcclCommunicator.initAll(list(device_ids))


class _Bucket:
    """The ranks' calls of one bucket's all-reduce, gathered as its members
    run and issued by the last one in one NCCL group."""

    def __init__(self, size):
        self.size = size
        self.calls = {}         # rank -> (communicator, x, out, count, dtype, stream ptr)

    def issue(self, nccl, op_name):
        calls, self.calls = self.calls, {}
        missing = sorted(set(range(self.size)) - set(calls))
        if missing:     # a member failed before it was ready: issue nothing
            raise RuntimeError(f"NCCL all-reduce '{op_name}': ranks {missing} of its "
                               "bucket did not run before it")
        nccl.groupStart()
        try:
            for rank in range(self.size):
                communicator, x, out, count, dtype, stream = calls[rank]
                communicator.allReduce(x.data.ptr, out.data.ptr, count, dtype, NCCL_SUM,
                                       stream)
        except Exception as err:
            _end_group_after(nccl, err)
            raise RuntimeError(f"NCCL all-reduce '{op_name}' failed on rank {rank} inside "
                               f"its group (the group was closed): {err}") from err
        nccl.groupEnd()


def _end_group_after(nccl, err):
    """Close the group a failed call leaves open; NCCL may refuse, naming the
    ranks missing from the group: ``err`` is the error worth raising."""
    try:
        nccl.groupEnd()
    except Exception:  # noqa: BLE001, S110  (the caller raises err)
        pass


def make_member_kernel(ctx, nccl, xp):
    """The kernel of one NcclAllReduce member (GPU backend)."""
    rank, group_ids = ctx.attrs["rank"], ctx.attrs["device_ids"]
    group = ctx.resource(("nccl", group_ids), lambda: NcclGroup(nccl, group_ids))
    members = ctx.attrs.get("run_together") or (getattr(ctx.op, "name", None),)
    bucket = ctx.resource(("nccl bucket", members), lambda: _Bucket(len(group_ids)))
    communicator = group.communicators[rank]
    dtype = NCCL_DTYPES[ctx.output_dtypes[0].name]
    is_last = rank == len(group_ids) - 1
    op_name = members[rank] if rank < len(members) else "NcclAllReduce"

    def reduce(x):
        out = xp.empty_like(x)
        stream = xp.cuda.get_current_stream()
        bucket.calls[rank] = (communicator, x, out, x.size, dtype, stream.ptr)
        if is_last:
            bucket.issue(nccl, op_name)
        return out
    return reduce


def join_across_processes(nccl, world, device_id):
    """A communicator for this process's GPU in a world of MPI ranks: rank 0's
    NCCL unique id is broadcast over MPI, then every rank joins."""
    unique_id = nccl.get_unique_id() if world.rank == 0 else None
    unique_id = world.comm.bcast(unique_id, root=0)
    return nccl.NcclCommunicator(world.size, unique_id, world.rank), device_id
