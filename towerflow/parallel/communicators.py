"""All-reduce behind one interface.

A :class:`Communicator` sums, element by element, the same list of tensors
(gradient buckets) across towers and hands each tower the sum on its own
device. Implementations here build graph ops, so the plan runs the
reduction with the rest of the step:

- ``cpu``: every tower's bucket is copied to /cpu:0 and summed there in tower
  order (SEED_PROGRAMS.md P4's ``add_n`` on the CPU), then copied back;
- ``local``: the sum runs on the first tower's device, for towers on logical
  devices that share one physical device (NCCL refuses two ranks on one GPU);
- ``mpi``: between processes (see mpi.py): each rank sums its own towers,
  then the ranks all-reduce those sums;
- ``nccl``: towers on distinct physical GPUs of one process, or one GPU tower
  per process of a multi-process launch (see nccl.py).

``choose(devices, all_reduce)`` resolves ``'auto'`` and logs its choice once.
"""

import os
import socket

from ..device import DeviceSpec, runtime
from ..log import logger
from ..ops import array_ops, math_ops
from . import mpi, mpi_ops, nccl

ALL_REDUCE_CHOICES = ("auto", "cpu", "local", "nccl", "mpi")
OVERLAP_VARIABLE = "TOWERFLOW_OVERLAP_ALLREDUCE"


def overlap_enabled(overlap=None):
    """``overlap`` as a bool; None: TOWERFLOW_OVERLAP_ALLREDUCE (0 turns it off), default on."""
    if overlap is not None:
        return bool(overlap)
    raw = os.environ.get(OVERLAP_VARIABLE, "1").strip().lower()
    if raw not in ("0", "1", "true", "false"):
        raise ValueError(f"{OVERLAP_VARIABLE}={raw!r}: expected 1 (overlap the all-reduce "
                         "with the backward pass) or 0 (all-reduce after it)")
    return raw in ("1", "true")


class Communicator:
    """Sums tensors across towers; see the module docstring."""

    name = None
    spans_processes = False     # sums across MPI ranks (each rank feeds the global batch)
    # Whether a bucket's all-reduce may overlap the backward pass: used by the
    # MPI communicator (non-blocking, in a progress thread) and NCCL's, within
    # a process (on a communication stream per GPU) and between processes (on
    # a communication stream, inside the step's CUDA graph); the others block.
    overlap = False

    def all_reduce(self, tower_values, devices, graph):
        """``tower_values[i]``: tower i's tensors (same order and shapes on every
        tower). Returns, per tower, the sums placed on that tower's device."""
        raise NotImplementedError

    @staticmethod
    def _hand_back(total, devices, graph, index):
        """One read of ``total`` per tower, pinned to the tower's device (the plan
        copies across devices for real)."""
        results = []
        for rank, device in enumerate(devices):
            with graph.device(device):
                results.append(array_ops.identity(total, name=f"reduced_{index}_tower_{rank}"))
        return results

    def _sum_on(self, reduce_device, tower_values, devices, graph):
        per_tower = [[] for _ in devices]
        with graph.name_scope(f"all_reduce_{self.name}"):
            for index in range(len(tower_values[0])):
                with graph.device(reduce_device):
                    total = math_ops.add_n([values[index] for values in tower_values],
                                           name=f"sum_{index}")
                for rank, reduced in enumerate(self._hand_back(total, devices, graph, index)):
                    per_tower[rank].append(reduced)
        return per_tower


class CpuCommunicator(Communicator):
    """Sum on /cpu:0 in a fixed tower order."""

    name = "cpu"

    def all_reduce(self, tower_values, devices, graph):
        return self._sum_on("/cpu:0", tower_values, devices, graph)


class LocalCommunicator(Communicator):
    """Sum on the first tower's device (towers sharing one physical device)."""

    name = "local"

    def all_reduce(self, tower_values, devices, graph):
        return self._sum_on(devices[0], tower_values, devices, graph)


class MpiCommunicator(Communicator):
    """Between processes: this rank's towers are summed on /cpu:0, the sums are
    all-reduced across ranks with MPI (with a deadline), then handed back."""

    name = "mpi"
    spans_processes = True

    def __init__(self, timeout=None):
        self.timeout = mpi.resolve_timeout(timeout)

    def all_reduce(self, tower_values, devices, graph):
        signature = [(tuple(t.shape.dims), t.dtype.name) for t in tower_values[0]]
        per_tower = [[] for _ in devices]
        with graph.name_scope("all_reduce_mpi"):
            for index in range(len(tower_values[0])):
                with graph.device("/cpu:0"):
                    local = math_ops.add_n([values[index] for values in tower_values],
                                           name=f"local_sum_{index}")
                    reduce = mpi_ops.all_reduce_started if self.overlap else mpi_ops.all_reduce_op
                    total = reduce(local, self.timeout, signature if index == 0 else None,
                                   name=f"sum_{index}")
                for rank, reduced in enumerate(self._hand_back(total, devices, graph, index)):
                    per_tower[rank].append(reduced)
        return per_tower


class NcclCommunicator(Communicator):
    """Towers on distinct physical GPUs of this process: NCCL sums every
    bucket in place on the GPUs (see nccl.py). In a multi-process launch,
    this process's one GPU tower joins an NCCL world of all ranks instead."""

    name = "nccl"

    def __init__(self, timeout=None):
        self.timeout = mpi.resolve_timeout(timeout)
        self.spans_processes = mpi.multi_process_launch()

    def all_reduce(self, tower_values, devices, graph):
        if self.spans_processes:
            return self._across_processes(tower_values, graph)
        gpu_ids = [_physical_of(device)[1] for device in devices]
        per_tower = [[] for _ in devices]
        with graph.name_scope("all_reduce_nccl"):
            # NOTE: one GPU's "all-reduce" is a copy with nothing to overlap: it
            # stays on the compute stream.
            overlap = self.overlap and len(gpu_ids) > 1
            reduce = nccl.all_reduce_members_started if overlap else nccl.all_reduce_members
            for index in range(len(tower_values[0])):
                members = reduce([values[index] for values in tower_values], gpu_ids, graph,
                                 name=f"sum_{index}")
                for rank, reduced in enumerate(members):
                    per_tower[rank].append(reduced)
        return per_tower

    def _across_processes(self, tower_values, graph):
        """One tower here (checked by :func:`choose`): its buckets, summed over
        every rank's tower by the NCCL world."""
        world = mpi.world()
        member = nccl.world_member_started if self.overlap else nccl.world_member
        with graph.name_scope("all_reduce_nccl"):
            return [[member(bucket, world, self.timeout, name=f"sum_{index}")
                     for index, bucket in enumerate(tower_values[0])]]


_COMMUNICATORS = {"cpu": CpuCommunicator, "local": LocalCommunicator,
                  "mpi": MpiCommunicator, "nccl": NcclCommunicator}
_logged_choices = set()


def choose(devices, all_reduce="auto", timeout=None):
    """The communicator for towers on ``devices`` (device strings)."""
    timeout = mpi.resolve_timeout(timeout)
    if all_reduce not in ALL_REDUCE_CHOICES:
        raise ValueError(f"all_reduce={all_reduce!r}: expected one of "
                         f"{', '.join(map(repr, ALL_REDUCE_CHOICES))}")
    name = _auto(devices) if all_reduce == "auto" else all_reduce
    if name == "nccl":
        _check_nccl_devices(devices)
        if mpi.multi_process_launch():
            _check_one_gpu_per_rank(devices, timeout)
    if all_reduce == "auto" and tuple(devices) not in _logged_choices:
        _logged_choices.add(tuple(devices))
        logger.info("all_reduce='auto' chose %r for %d towers on %s", name, len(devices),
                    ", ".join(devices))
    if name in ("mpi", "nccl"):
        return _COMMUNICATORS[name](timeout)
    return _COMMUNICATORS[name]()


def _check_nccl_devices(devices):
    physical = [_physical_of(device) for device in devices]
    if any(kind != "GPU" for kind, _ in physical):
        raise ValueError(f"all_reduce='nccl' needs every tower on a GPU, got {list(devices)}; "
                         "use 'cpu' or 'local' for CPU towers")
    if len(set(physical)) != len(physical):
        raise ValueError(f"all_reduce='nccl' needs distinct physical GPUs, but {list(devices)} "
                         "share one (NCCL refuses two ranks on one GPU): use 'local'")


def _check_one_gpu_per_rank(devices, timeout):
    """Across processes NCCL takes one GPU per rank, never one GPU twice on a
    host (NCCL refuses it): checked with every rank, so all raise alike."""
    if len(devices) != 1:
        raise ValueError(f"all_reduce='nccl' across processes takes one GPU tower per rank, "
                         f"got {len(devices)} towers {list(devices)}: launch one rank per GPU "
                         "(each rank gets its own GPU) or use all_reduce='mpi'")
    gpu = _gpu_info_of(devices[0])
    mine = (socket.gethostname(), gpu.pci_bus_id if gpu else devices[0])
    everyone = mpi.world().all_gather(mine, "the check of the ranks' GPUs", timeout)
    first_rank_on = {}
    for rank, place in enumerate(everyone):
        if place in first_rank_on:
            raise ValueError(
                f"all_reduce='nccl' needs one GPU per rank, but ranks {first_rank_on[place]} "
                f"and {rank} on host {place[0]} both use the GPU at PCI bus {place[1]} (NCCL "
                "refuses two ranks on one GPU; a host has fewer GPUs than ranks): launch at "
                "most one rank per GPU, or use all_reduce='mpi'")
        first_rank_on[place] = rank


def _gpu_info_of(device):
    spec = DeviceSpec.from_string(device)
    for logical in runtime.peek_logical_devices():
        if logical.device_type == "GPU" and logical.index == (spec.device_index or 0):
            return logical.gpu
    return None


def _auto(devices):
    """'mpi' in a multi-process launch; else 'local' when every tower is a
    logical device of one physical device (logical CPUs of the host, or
    logical GPUs of one card); 'nccl' for towers on distinct physical GPUs;
    'cpu' otherwise."""
    if mpi.multi_process_launch():
        return "mpi"
    physical = [_physical_of(device) for device in devices]
    if len(set(physical)) == 1:
        return "local"
    if all(kind == "GPU" for kind, _ in physical) and len(set(physical)) == len(physical):
        return "nccl"
    return "cpu"


def _physical_of(device):
    """('CPU', None) for any CPU; ('GPU', physical index) for a GPU."""
    spec = DeviceSpec.from_string(device)
    if spec.device_type != "GPU":
        return ("CPU", None)
    gpu = _gpu_info_of(device)
    return ("GPU", gpu.index if gpu is not None else spec.device_index)
