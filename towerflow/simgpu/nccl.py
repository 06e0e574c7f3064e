"""cupy.cuda.nccl on the simulated GPUs: communicators in one process
(``initAll``, one thread issuing every rank's call inside a group) and across
MPI ranks (a unique id, each process one rank; data moves over MPI).

A collective runs once every rank of its clique has called it. Where a real
NCCL would wait forever (a rank's call outside a group while the others have
not called, a group closed with ranks missing), the simulator raises
:class:`NcclError` saying it would hang.
"""

import itertools
import os
import socket
import typing

import ml_dtypes
import numpy as np

from . import memory, state, work
from .devices import pci_bus_id

NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN = 0, 1, 2, 3
NCCL_INT8, NCCL_UINT8, NCCL_INT32, NCCL_UINT32 = 0, 1, 2, 3
NCCL_INT64, NCCL_UINT64, NCCL_FLOAT16, NCCL_FLOAT32, NCCL_FLOAT64 = 4, 5, 6, 7, 8
NCCL_BFLOAT16 = 9
NCCL_AVG = 4
_DTYPES = {0: np.int8, 1: np.uint8, 2: np.int32, 3: np.uint32, 4: np.int64, 5: np.uint64,
           6: np.float16, 7: np.float32, 8: np.float64, 9: ml_dtypes.bfloat16}
_REDUCE = {NCCL_SUM: np.add, NCCL_PROD: np.multiply, NCCL_MAX: np.maximum,
           NCCL_MIN: np.minimum, NCCL_AVG: np.add}
_CLIQUES = itertools.count(1)
UNIQUE_ID_BYTES = 128
# ncclResult_t values the simulator raises.
_INVALID_ARGUMENT, _INVALID_USAGE = 4, 5
available = True    # cupy.cuda.nccl.available: CuPy found the NCCL library


class NcclError(RuntimeError):
    """cupy.cuda.nccl.NcclError."""

    def __init__(self, status, message=""):
        self.status = status
        super().__init__(message or f"NCCL error {status}")


def get_version():
    return 22703


def get_unique_id():
    """NCCL_UNIQUE_ID_BYTES (128) bytes, as CuPy 14 returns (a tuple of ints
    before 14.0); random, so each id names one clique."""
    return os.urandom(UNIQUE_ID_BYTES)


class _Group:
    """The open NCCL group of this process (one thread issues every call)."""

    depth = 0
    pending: typing.ClassVar[list] = []   # (communicator, send, recv, count, ...)


def groupStart():
    _Group.depth += 1


def groupEnd():
    if _Group.depth == 0:
        raise NcclError(5, "ncclInvalidUsage: groupEnd without groupStart")
    _Group.depth -= 1
    if _Group.depth == 0:
        calls, _Group.pending = _Group.pending, []
        _run_collectives(calls)


def open_group_depth():
    """How deep the current NCCL group is (0: none open). For tests."""
    return _Group.depth


def reset():
    _Group.depth, _Group.pending = 0, []
    _INIT_ALL_CALLS[0] = 0


def init_all_count():
    """How many cliques ``initAll`` made since the simulator was installed (each
    costs a real NCCL a rendezvous and buffers on every GPU). For tests."""
    return _INIT_ALL_CALLS[0]


_INIT_ALL_CALLS = [0]


class NcclCommunicator:
    """One rank of a clique: ``NcclCommunicator(ndev, commId, rank)`` joins the
    clique of the unique id ``commId`` (bytes from :func:`get_unique_id`) as
    ``rank`` on the current GPU; each process is one rank and the data moves
    over MPI. Like ncclCommInitRank, joining is collective: it returns once
    every rank has joined, and refuses two ranks on one GPU of a host."""

    def __init__(self, ndev, commId, rank, config=None):
        if not isinstance(commId, bytes):
            raise TypeError(f"Argument 'commId' has incorrect type (expected bytes, got "
                            f"{type(commId).__name__})")
        self._setup(ndev, ("unique id", commId), rank, state.world().current_device)
        if not 0 <= self._rank < self._size:
            raise NcclError(_INVALID_ARGUMENT, f"ncclInvalidArgument: rank {rank} is not "
                                               f"in [0, {self._size})")
        self._across_processes = self._size > 1
        if self._across_processes:
            _join_over_mpi(self, commId)

    def _setup(self, size, clique, rank, device):
        self._size, self._rank, self._clique = int(size), int(rank), clique
        self._device, self._destroyed = device, False
        self._across_processes = False

    @staticmethod
    def initAll(devices, *args):
        devices = list(range(devices)) if isinstance(devices, int) else list(devices)
        if len(set(devices)) != len(devices):
            raise NcclError(5, f"ncclInvalidUsage: duplicate GPUs {devices} in one clique")
        clique = ("initAll", next(_CLIQUES))
        _INIT_ALL_CALLS[0] += 1
        world = state.world()
        communicators = []
        for rank, device in enumerate(devices):
            world.check_device(device)
            communicator = NcclCommunicator.__new__(NcclCommunicator)
            communicator._setup(len(devices), clique, rank, device)
            communicators.append(communicator)
        return communicators

    def rank_id(self):
        return self._rank

    def size(self):
        return self._size

    def device_id(self):
        return self._device

    def destroy(self):
        self._destroyed = True

    def abort(self):
        self._destroyed = True

    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream):
        if self._destroyed:
            raise NcclError(5, "ncclInvalidUsage: the communicator was destroyed")
        call = (self, sendbuf, recvbuf, int(count), datatype, op, stream)
        _Group.pending.append(call)
        if _Group.depth == 0:
            calls, _Group.pending = _Group.pending, []
            _run_collectives(calls)


def _run_collectives(calls):
    """Each rank's k-th call of a group with the other ranks' k-th calls."""
    by_collective, calls_so_far = {}, {}
    for call in calls:
        communicator = call[0]
        ordinal = calls_so_far.get(id(communicator), 0)
        calls_so_far[id(communicator)] = ordinal + 1
        by_collective.setdefault((communicator._clique, ordinal), []).append(call)
    for collective in by_collective.values():
        _all_reduce(collective)


def _all_reduce(calls):
    first = calls[0][0]
    local_ranks = sorted(call[0]._rank for call in calls)
    expected = [first._rank] if first._across_processes else list(range(first._size))
    if local_ranks != expected:
        missing = sorted(set(expected) - set(local_ranks))
        raise NcclError(5, f"the simulated NCCL would hang: ranks {missing} of a clique of "
                           f"{first._size} never called allReduce while ranks {local_ranks} "
                           "did (one thread must issue every rank's call inside "
                           "groupStart/groupEnd)")
    _check_same_call(calls)
    graphs = [state.world().capture_of(_stream_of(call)) for call in calls]
    if any(graph is not None for graph in graphs):
        _capture(calls, graphs)
        return
    contributions = [_read_send(call) for call in calls]
    total = _reduce(contributions, calls[0][5], first)
    for call in calls:
        _write_recv(call, total)


def _reduce(contributions, op, first):
    """The collective's result from each local rank's send buffer (over MPI
    too, for a clique across processes)."""
    total = contributions[0].copy()
    for part in contributions[1:]:
        _REDUCE[op](total, part, out=total)
    if first._across_processes:
        total = _mpi_all_reduce(total, op)
    if op == NCCL_AVG:
        total = (total / first._size).astype(total.dtype)
    return total


def _capture(calls, graphs):
    """A collective issued on a capturing stream becomes nodes of its graph,
    as NCCL 2.9+ allows, when the process holds one rank of the clique (one
    GPU per process, or a clique of one): each replay runs the collective, and
    every rank must replay it as often. Several local ranks would need their
    graphs replayed together, which the simulator does not model."""
    if len(calls) > 1:
        raise NotImplementedError(
            "the simulated NCCL captures a collective only where the process holds one "
            f"rank of its clique ({len(calls)} local ranks here, "
            f"{sum(graph is not None for graph in graphs)} of them capturing)")
    call, graph = calls[0], graphs[0]
    (send, send_view), (recv, recv_view) = _buffer(call[1], call), _buffer(call[2], call)
    stream, sent = _stream_of(call), {}

    def send_part():
        sent["value"] = send_view.copy()

    def receive_part():
        recv_view[...] = _reduce([sent.pop("value")], call[5], call[0])
    # NOTE: two nodes, as the uncaptured collective's send and receive, so a
    # replay's log shows where the collective ran (on its stream's lane).
    graph._add(work.replayable(work.Work("ncclAllReduce (send)", send_part, reads=(send,)),
                               graph), stream)
    graph._add(work.replayable(work.Work("ncclAllReduce (receive)", receive_part,
                                         writes=(recv,)), graph), stream)


def _check_same_call(calls):
    """Every rank must pass the same count, type and operation (NCCL would
    read or write past a smaller buffer, or hang)."""
    shapes = {(call[3], call[4], call[5]) for call in calls}
    if len(shapes) > 1:
        raise NcclError(_INVALID_USAGE, f"ncclInvalidUsage: the ranks of one allReduce "
                                        f"passed different (count, type, op): {sorted(shapes)}")


def _stream_of(call):
    world = state.world()
    communicator, stream_ptr = call[0], call[6]
    world.null_stream(communicator._device)         # (made if nothing used it yet)
    stream = world.streams.get((communicator._device, stream_ptr))
    if stream is not None:
        return stream
    raise NcclError(5, f"ncclInvalidArgument: stream {stream_ptr:#x} is not a stream of "
                       f"rank {communicator._rank}'s GPU {communicator._device}")


def _buffer(ptr, call):
    communicator, count, datatype = call[0], call[3], call[4]
    block, offset = memory.find_pointer(ptr)
    if block.device_id != communicator._device:
        raise NcclError(5, f"ncclInvalidArgument: a buffer on GPU {block.device_id} given "
                           f"to rank {communicator._rank} on GPU {communicator._device}")
    dtype = np.dtype(_DTYPES[datatype])
    if offset + count * dtype.itemsize > block.nbytes:
        raise NcclError(_INVALID_ARGUMENT, f"ncclInvalidArgument: {count} elements of "
                                           f"{dtype.name} from {ptr:#x} run past the end of "
                                           f"its {block.nbytes}-byte allocation")
    view = block.buffer[offset:offset + count * dtype.itemsize].view(dtype)
    return block, view


def _read_send(call):
    block, view = _buffer(call[1], call)
    copied = {}
    _on_stream(call, work.Work("ncclAllReduce (send)",
                                 lambda: copied.setdefault("value", view.copy()),
                                 reads=(block,)))
    return copied.get("value", np.zeros_like(view))


def _write_recv(call, total):
    block, view = _buffer(call[2], call)

    def store():
        view[...] = total
    _on_stream(call, work.Work("ncclAllReduce (receive)", store, writes=(block,)))


def _on_stream(call, queued):
    queued.execute(_stream_of(call))


def _join_over_mpi(communicator, unique_id):
    """ncclCommInitRank's rendezvous, over MPI COMM_WORLD (one rank per process)."""
    try:
        from mpi4py import MPI
    except ImportError:
        raise NcclError(_INVALID_USAGE, "the simulated NCCL moves a clique of "
                                        f"{communicator._size} ranks over MPI, but mpi4py "
                                        "is not installed") from None
    comm = MPI.COMM_WORLD
    if comm.Get_size() != communicator._size:
        raise NcclError(_INVALID_USAGE, f"the simulated NCCL moves a clique of "
                                        f"{communicator._size} ranks over MPI, but MPI has "
                                        f"{comm.Get_size()} processes")
    mine = (unique_id, communicator._rank, socket.gethostname(),
            pci_bus_id(communicator._device))
    _check_rendezvous(comm.allgather(mine), communicator._rank)


def _check_rendezvous(everyone, my_rank):
    """What a real NCCL would hang on or refuse, seen from every process alike."""
    if len({uid for uid, *_ in everyone}) > 1:
        raise NcclError(_INVALID_USAGE, "the simulated NCCL would hang: the processes "
                                        "joined with different unique ids")
    ranks = sorted(rank for _, rank, *_ in everyone)
    if ranks != list(range(len(everyone))):
        raise NcclError(_INVALID_USAGE, f"the simulated NCCL would hang: the processes "
                                        f"joined as ranks {ranks}")
    seen = {}
    for _, rank, host, bus_id in sorted(everyone, key=lambda joined: joined[1]):
        if (host, bus_id) in seen:
            # NCCL's own words (init.cc), with the bus id as it prints it.
            raise NcclError(_INVALID_USAGE, f"ncclInvalidUsage: Duplicate GPU detected : "
                                            f"rank {rank} and rank {seen[host, bus_id]} both "
                                            f"on CUDA device {_bus_id_number(bus_id):x}")
        seen[host, bus_id] = rank


def _bus_id_number(bus_id):
    """NCCL's busIdToInt64: the hex digits of '0000:1E:00.0' read as one number."""
    return int(bus_id.replace(":", "").replace(".", ""), 16)


def _mpi_all_reduce(total, op):
    from mpi4py import MPI
    ops = {NCCL_SUM: MPI.SUM, NCCL_PROD: MPI.PROD, NCCL_MAX: MPI.MAX, NCCL_MIN: MPI.MIN}
    result = np.empty_like(total)
    MPI.COMM_WORLD.Allreduce(total, result, op=ops[op])
    return result
