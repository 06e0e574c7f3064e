"""NCCL all-reduce for towers on distinct physical GPUs (``all_reduce='nccl'``).

One process drives several GPUs through ``cupy.cuda.nccl``: a
``NcclCommunicator.initAll(device_ids)`` group, one member op per tower placed
on the tower's GPU. The N member ops of a bucket are created back to back, so
the plan runs them consecutively: each allocates its rank's output on its
GPU and enqueues nothing; the last then issues every rank's ``allReduce``
inside one NCCL group (NCCL requires one thread to issue all ranks' calls in
one group), which it always closes. A plan holding only some members of a
bucket is refused when it is compiled (its collective would wait forever).
Across processes (one GPU tower per MPI rank), one member op per
process: rank 0's ``get_unique_id()`` goes out over MPI (with the collective
deadline), each process joins with ``NcclCommunicator(world_size, uid, rank)``
once per Session, and the member sums the bucket over every process's GPU.

Overlapping the backward pass (:func:`all_reduce_members_started`), a
bucket's all-reduce is a start op and a wait op per tower. Each GPU has a
communication stream of its own (one per group and GPU): a tower's start
records an event on its compute stream once the bucket exists and makes the
communication stream wait on it; the last start issues the group call on
the communication streams and records a 'done' event on each; a tower's
wait makes its compute stream wait on that event. The host never waits:
the backward kernels queued between start and wait run beside the
all-reduce. The start holds the bucket and the sum until the wait, so the
memory pool cannot hand either out while the communication stream uses them.
Across processes (:func:`world_member_started`) the same start and wait run
on one communication stream per Session; such a plan (one GPU) is captured
as a CUDA graph, the communication stream joining the capture at each start's
fork and joined back by each wait.

These kernels run on the GPU backend; without a GPU they are tested against a
stand-in of ``cupy.cuda.nccl`` (tests/test_nccl.py) and, across processes, on
the simulated GPUs (towerflow.simgpu; tests/test_mpi_nccl.py).
"""

import threading
import weakref

import numpy as np

from .. import dtypes, errors
from ..graph import TensorShape
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
    bucket = tuple(output.op.name for output in outputs)
    for output in outputs:      # the plan runs all of them or refuses
        output.op.attrs["run_together"] = bucket
    return outputs


# The all-reduce in two halves, on a communication stream (see the module
# docstring): (x) -> a handle (variant), attrs as NcclAllReduce's plus
# ``schedule='early'``; (handle) -> the sum, attrs shape, dtype, ``schedule='late'``.
register_op("NcclAllReduceStart",
            lambda inputs, attrs: [(TensorShape([]), dtypes.variant)], stateful=True)
register_op("NcclAllReduceWait",
            lambda inputs, attrs: [(TensorShape(attrs["shape"]), attrs["dtype"])],
            stateful=True)
register_not_differentiable("NcclAllReduceStart", "NcclAllReduceWait")


def all_reduce_members_started(tensors, device_ids, graph, name="nccl_all_reduce"):
    """As :func:`all_reduce_members`, overlapping: one start op per tower,
    run as soon as its bucket exists, and one wait op per tower, run as late
    as its users allow; the sums are the waits' outputs."""
    group = tuple(int(device) for device in device_ids)
    starts = []
    for rank, tensor in enumerate(tensors):
        attrs = {"rank": rank, "device_ids": group, "schedule": "early"}
        with graph.colocate_with(tensor.op):
            starts.append(graph.create_op("NcclAllReduceStart", [tensor], attrs,
                                          name=f"{name}_{rank}_start").outputs[0])
    bucket = tuple(start.op.name for start in starts)
    for start in starts:        # the plan runs all of them or refuses
        start.op.attrs["run_together"] = bucket
    return [_wait_op(tensor, start, f"{name}_{rank}")
            for rank, (tensor, start) in enumerate(zip(tensors, starts))]


def _wait_op(tensor, start, name):
    """The wait of ``start`` (the sum of ``tensor``), run as late as its users allow."""
    attrs = {"shape": tuple(tensor.shape.dims), "dtype": tensor.dtype, "schedule": "late"}
    with tensor.graph.colocate_with(tensor.op):
        return tensor.graph.create_op("NcclAllReduceWait", [start], attrs,
                                      name=name).outputs[0]


def world_member(tensor, world, timeout, name="nccl_all_reduce"):
    """This process's member (``tensor`` on its one GPU) of an all-reduce over
    the ``world.size`` processes of an MPI world."""
    attrs = {"rank": world.rank, "device_ids": (), "world_size": world.size,
             "timeout": float(timeout)}
    with tensor.graph.colocate_with(tensor.op):
        return tensor.graph.create_op("NcclAllReduce", [tensor], attrs,
                                      name=f"{name}_rank_{world.rank}").outputs[0]


def world_member_started(tensor, world, timeout, name="nccl_all_reduce"):
    """As :func:`world_member`, overlapping: a start op, run as soon as
    ``tensor`` exists, and a wait op (whose output is the sum)."""
    attrs = {"rank": world.rank, "device_ids": (), "world_size": world.size,
             "timeout": float(timeout), "schedule": "early"}
    op_name = f"{name}_rank_{world.rank}"
    with tensor.graph.colocate_with(tensor.op):
        start = tensor.graph.create_op("NcclAllReduceStart", [tensor], attrs,
                                       name=f"{op_name}_start").outputs[0]
    return _wait_op(tensor, start, op_name)


class NcclGroup:
    """The communicators of one group of GPUs (see :func:`shared_group`)."""

    def __init__(self, nccl, device_ids):
        if len(set(device_ids)) != len(device_ids):
            raise ValueError(f"NCCL needs distinct physical GPUs, got {list(device_ids)}: "
                             "towers on logical GPUs of one card use all_reduce='local'")
        self.nccl = nccl
        self.communicators = nccl.NcclCommunicator.initAll(list(device_ids))
        self.failed = False     # a collective failed: NCCL may have left it unusable
        self.lock = threading.Lock()    # one group call at a time (Sessions share it)
        self.streams = {}       # rank -> its GPU's communication stream (overlap)

    def communication_stream(self, rank, xp):
        """Rank ``rank``'s communication stream, made on first use while its
        GPU is current (a stream belongs to the device current at its making)."""
        stream = self.streams.get(rank)
        if stream is None:
            stream = self.streams[rank] = xp.cuda.Stream(non_blocking=True)
        return stream


# nccl library -> {device ids: NcclGroup}. NOTE: keyed by the library object:
# another one (a re-installed simulator, a test's stand-in) has communicators
# of its own, and a dropped one takes its groups with it.
_GROUPS = weakref.WeakKeyDictionary()
_GROUPS_LOCK = threading.Lock()


def shared_group(nccl, device_ids):
    """The communicators of ``device_ids`` (in rank order), made once per
    process and shared by every Session: ``initAll`` is a rendezvous of all
    the GPUs and takes buffers on each, too costly to repeat per Session.
    A group whose collective failed is replaced.

    Example::

        >>> shared_group(cupy.cuda.nccl, (0, 1)) is shared_group(cupy.cuda.nccl, (0, 1))
        True
    """
    key = tuple(int(device) for device in device_ids)
    with _GROUPS_LOCK:
        groups = _GROUPS.setdefault(nccl, {})
        group = groups.get(key)
        if group is None or group.failed:
            group = groups[key] = NcclGroup(nccl, key)
        return group


class _Bucket:
    """The ranks' calls of one bucket's all-reduce, gathered as its members
    run and issued by the last one in one NCCL group."""

    def __init__(self, group):
        self.size, self.group = len(group.communicators), group
        self.calls = {}         # rank -> (communicator, x, out, count, dtype, stream ptr)

    def issue(self, nccl, op_name):
        calls, self.calls = self.calls, {}
        missing = sorted(set(range(self.size)) - set(calls))
        if missing:     # a member failed before it was ready: issue nothing
            raise RuntimeError(f"NCCL all-reduce '{op_name}': ranks {missing} of its "
                               "bucket did not run before it")
        # NOTE: Sessions share the group's communicators (shared_group), and NCCL
        # needs each communicator's collectives issued in one order: one at a time.
        with self.group.lock:
            self._issue_group(nccl, op_name, calls)

    def _issue_group(self, nccl, op_name, calls):
        nccl.groupStart()
        try:
            for rank in range(self.size):
                communicator, x, out, count, dtype, stream = calls[rank][:6]
                stream = getattr(stream, "ptr", stream)     # a Stream, or its pointer
                communicator.allReduce(x.data.ptr, out.data.ptr, count, dtype, NCCL_SUM,
                                       stream)
        except Exception as err:
            self.group.failed = True
            _end_group_after(nccl, err)
            raise RuntimeError(f"NCCL all-reduce '{op_name}' failed on rank {rank} inside "
                               f"its group (the group was closed): {err}") from err
        try:
            nccl.groupEnd()
        except Exception:
            self.group.failed = True        # the next Session makes its own
            raise


class _Launch:
    """One rank's share of an overlapping all-reduce, from its start to its
    wait: the bucket and the sum (kept alive until the wait orders the compute
    stream after the communication stream) and the 'done' event."""

    __slots__ = ("done", "out", "x")

    def __init__(self, x, out, done):
        self.x, self.out, self.done = x, out, done


class _StartedBucket(_Bucket):
    """A :class:`_Bucket` whose group call runs on the communication streams;
    ``calls`` carry (communicator, x, out, count, dtype, stream ptr, device,
    done event)."""

    def issue_and_record(self, nccl, op_name, xp):
        calls = dict(self.calls)
        self.issue(nccl, op_name)
        for *_, stream, device, done in calls.values():
            with xp.cuda.Device(device):        # an event is recorded in its GPU's context
                done.record(stream)


def _bucket_member(ctx, nccl, members, bucket_type):
    """(rank, group, bucket, is_last) of one member kernel of a bucket of GPUs
    of this process: the group's communicators are shared by every Session,
    the bucket (a ``bucket_type``) by the bucket's members of this Session;
    the last rank issues the group call."""
    rank, group_ids = ctx.attrs["rank"], ctx.attrs["device_ids"]
    group = ctx.resource(("nccl", group_ids), lambda: shared_group(nccl, group_ids))
    bucket = ctx.resource((bucket_type.__name__, members), lambda: bucket_type(group))
    return rank, group, bucket, rank == len(group_ids) - 1


def make_start_kernel(ctx, nccl, xp):
    """The kernel of one NcclAllReduceStart (GPU backend; see the module docstring)."""
    _require_nccl(nccl)
    if ctx.attrs.get("world_size", 1) > 1:
        return _world_start_kernel(ctx, nccl, xp)
    members = ctx.attrs["run_together"]
    rank, group, bucket, is_last = _bucket_member(ctx, nccl, members, _StartedBucket)
    communicator = group.communicators[rank]

    def start(x):
        stream = group.communication_stream(rank, xp)
        x, out = _fork_for_all_reduce(x, stream, xp)
        done = xp.cuda.Event(disable_timing=True)
        bucket.calls[rank] = (communicator, x, out, x.size, NCCL_DTYPES[x.dtype.name], stream,
                              xp.cuda.Device().id, done)
        if is_last:
            bucket.issue_and_record(nccl, members[rank], xp)
        return np.array(_Launch(x, out, done), dtype=object)    # a variant scalar
    return start


def _fork_for_all_reduce(x, stream, xp):
    """A start's first half: ``x`` made contiguous and its output allocated on
    the compute stream, then the communication ``stream`` forked from it by an
    event. Returns (x, out). NOTE: the fork comes last, so that the all-reduce
    on ``stream`` follows the contiguous copy and the allocation."""
    x = xp.ascontiguousarray(x)         # NOTE: NCCL reads x.size elements from x.data.ptr
    out = xp.empty_like(x)
    compute = xp.cuda.get_current_stream()
    stream.wait_event(compute.record(xp.cuda.Event(disable_timing=True)))   # the fork
    return x, out


def make_wait_kernel(ctx, xp):
    """The kernel of one NcclAllReduceWait: the compute stream waits for the
    communication stream's 'done' event (the host does not)."""
    def wait(handle):
        launch = handle.item()
        xp.cuda.get_current_stream().wait_event(launch.done)
        return launch.out
    return wait


def _end_group_after(nccl, err):
    """Close the group a failed call leaves open; NCCL may refuse, naming the
    ranks missing from the group: ``err`` is the error worth raising."""
    try:
        nccl.groupEnd()
    except Exception:  # noqa: BLE001, S110  (the caller raises err)
        pass


def make_member_kernel(ctx, nccl, xp):
    """The kernel of one NcclAllReduce member (GPU backend)."""
    _require_nccl(nccl)
    if ctx.attrs.get("world_size", 1) > 1:
        return _world_member_kernel(ctx, nccl, xp)
    members = ctx.attrs.get("run_together") or (getattr(ctx.op, "name", None),)
    rank, group, bucket, is_last = _bucket_member(ctx, nccl, members, _Bucket)
    communicator = group.communicators[rank]
    dtype = NCCL_DTYPES[ctx.output_dtypes[0].name]
    op_name = members[rank] if rank < len(members) else "NcclAllReduce"

    def reduce(x):
        x = xp.ascontiguousarray(x)     # NOTE: NCCL reads x.size elements from x.data.ptr
        out = xp.empty_like(x)
        stream = xp.cuda.get_current_stream()
        bucket.calls[rank] = (communicator, x, out, x.size, dtype, stream.ptr)
        if is_last:
            bucket.issue(nccl, op_name)
        return out
    return reduce


def _world_communicator(ctx, nccl):
    """This process's communicator in the NCCL world: it joins (a collective)
    when the plan is compiled, on the member's GPU, which is current while
    kernels are made."""
    from . import mpi
    size, timeout = ctx.attrs["world_size"], ctx.attrs["timeout"]
    return ctx.resource(
        ("nccl world", size), lambda: join_across_processes(nccl, mpi.world(), timeout))


def _world_member_kernel(ctx, nccl, xp):
    """One process's member across processes, on the compute stream."""
    communicator = _world_communicator(ctx, nccl)
    dtype = NCCL_DTYPES[ctx.output_dtypes[0].name]
    return lambda x: _all_reduce_into(communicator, x, dtype, xp)


def _world_start_kernel(ctx, nccl, xp):
    """One process's start across processes: the all-reduce runs on the
    world's communication stream (one per Session, made on the member's GPU
    as its communicator), forked from the compute stream by an event; the
    wait joins it back. Capturable: under capture the communication stream
    joins the compute stream's capture at the fork, and the wait's join is
    what CUDA requires before the capture ends (cudaErrorStreamCaptureUnjoined
    otherwise).

    NOTE: tested on the simulated GPU only; tests/test_simgpu_fork_join.py
    drives this start and the wait inside a capture in a world of one GPU,
    on the real GPU in the device check (not yet run there). A real GPU run
    must confirm that NCCL's allReduce on a stream that joined a capture is
    captured (NCCL 2.9+ captures collectives; CuPy's nccl passes the stream
    pointer as is), that the replay runs it beside the backward kernels
    (nsys), and that both ranks' replays match collective for collective
    (same plan, same order)."""
    communicator = _world_communicator(ctx, nccl)
    stream = ctx.resource(("nccl world stream", ctx.attrs["world_size"]),
                          lambda: xp.cuda.Stream(non_blocking=True))

    def start(x):
        x, out = _fork_for_all_reduce(x, stream, xp)
        # NOTE: one stream, in the plan's order (the same on every rank): NCCL
        # needs a communicator's collectives issued in one order everywhere.
        communicator.allReduce(x.data.ptr, out.data.ptr, x.size, NCCL_DTYPES[x.dtype.name],
                               NCCL_SUM, stream.ptr)
        done = stream.record(xp.cuda.Event(disable_timing=True))
        return np.array(_Launch(x, out, done), dtype=object)    # a variant scalar
    return start


def _all_reduce_into(communicator, x, dtype, xp):
    x = xp.ascontiguousarray(x)         # NOTE: a strided view would be read as if dense
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
