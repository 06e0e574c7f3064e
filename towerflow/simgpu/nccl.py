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
import typing

import numpy as np

from . import arrays, memory, state

NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN = 0, 1, 2, 3
NCCL_INT8, NCCL_UINT8, NCCL_INT32, NCCL_UINT32 = 0, 1, 2, 3
NCCL_INT64, NCCL_UINT64, NCCL_FLOAT16, NCCL_FLOAT32, NCCL_FLOAT64 = 4, 5, 6, 7, 8
NCCL_BFLOAT16 = 9
_DTYPES = {0: np.int8, 1: np.uint8, 2: np.int32, 3: np.uint32, 4: np.int64, 5: np.uint64,
           6: np.float16, 7: np.float32, 8: np.float64}
_REDUCE = {NCCL_SUM: np.add, NCCL_PROD: np.multiply, NCCL_MAX: np.maximum,
           NCCL_MIN: np.minimum}
_CLIQUES = itertools.count(1)


class NcclError(RuntimeError):
    """cupy.cuda.nccl.NcclError."""

    def __init__(self, status, message=""):
        self.status = status
        super().__init__(message or f"NCCL error {status}")


def get_version():
    return 22703


def get_unique_id():
    """128 ints, as CuPy returns; the first ones carry this process's clique."""
    token = int.from_bytes(os.urandom(6), "little")
    return tuple([token % 128, (token >> 7) % 128, (token >> 14) % 128] + [0] * 125)


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


class NcclCommunicator:
    """One rank of a clique."""

    def __init__(self, ndev, commId, rank):
        self._size, self._rank = int(ndev), int(rank)
        self._device = state.world().current_device
        self._clique = tuple(commId)
        # NOTE: a clique made from a unique id spans processes (one rank each);
        # initAll's ranks all live in this one.
        self._across_processes = self._size > 1 and not isinstance(commId[0], str)
        if self._across_processes and _mpi_size() != self._size:
            raise NcclError(5, f"the simulated NCCL moves a clique of {self._size} ranks "
                               f"over MPI, but MPI has {_mpi_size()} processes")
        self._destroyed = False

    @staticmethod
    def initAll(devices, *args):
        devices = list(range(devices)) if isinstance(devices, int) else list(devices)
        if len(set(devices)) != len(devices):
            raise NcclError(5, f"ncclInvalidUsage: duplicate GPUs {devices} in one clique")
        clique = ("initAll", next(_CLIQUES))
        communicators = []
        world = state.world()
        for rank, device in enumerate(devices):
            saved = world.current_device
            world.check_device(device)
            world.current_device = device
            try:
                communicator = NcclCommunicator(len(devices), clique, rank)
            finally:
                world.current_device = saved
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
    by_clique = {}
    for call in calls:
        by_clique.setdefault(call[0]._clique, []).append(call)
    for clique_calls in by_clique.values():
        _all_reduce(clique_calls)


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
    contributions = [_read_send(call) for call in calls]
    total = contributions[0].copy()
    for part in contributions[1:]:
        _REDUCE[calls[0][5]](total, part, out=total)
    if first._across_processes:
        total = _mpi_all_reduce(total, calls[0][5])
    for call in calls:
        _write_recv(call, total)


def _stream_of(call):
    world = state.world()
    communicator, stream_ptr = call[0], call[6]
    for stream in [world.null_stream(communicator._device)] + world.all_streams:
        if stream.ptr == stream_ptr and stream.device_id == communicator._device:
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
    view = block.buffer[offset:offset + count * dtype.itemsize].view(dtype)
    return block, view


def _read_send(call):
    block, view = _buffer(call[1], call)
    copied = {}
    _on_stream(call, arrays.Work("ncclAllReduce (send)",
                                 lambda: copied.setdefault("value", view.copy()),
                                 reads=(block,)))
    return copied.get("value", np.zeros_like(view))


def _write_recv(call, total):
    block, view = _buffer(call[2], call)

    def store():
        view[...] = total
    _on_stream(call, arrays.Work("ncclAllReduce (receive)", store, writes=(block,)))


def _on_stream(call, work):
    stream = _stream_of(call)
    graph = state.world().capture_of(stream)
    if graph is not None:
        raise NotImplementedError("the simulated NCCL does not record collectives into a "
                                  "CUDA graph")
    work.execute(stream)


def _mpi_size():
    try:
        from mpi4py import MPI
    except ImportError:
        return 1
    return MPI.COMM_WORLD.Get_size()


def _mpi_all_reduce(total, op):
    from mpi4py import MPI
    ops = {NCCL_SUM: MPI.SUM, NCCL_PROD: MPI.PROD, NCCL_MAX: MPI.MAX, NCCL_MIN: MPI.MIN}
    result = np.empty_like(total)
    MPI.COMM_WORLD.Allreduce(total, result, op=ops[op])
    return result
