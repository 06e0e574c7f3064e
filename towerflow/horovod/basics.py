"""hvd.init() and who this process is: rank, size, local and cross ranks.

Under ``towerflow launch -n N`` (or plain ``mpiexec``) the ranks are the MPI
ranks, and init() learns each rank's host through one all-gather (with
towerflow's collective deadline, so a rank that never calls init() is named
instead of waited for). A process that runs alone is rank 0 of 1, as in
Horovod, and never starts MPI.
"""

import socket

from ..parallel import mpi

NOT_INITIALIZED = "Horovod has not been initialized; use hvd.init()."


class _Topology:
    """Where this rank sits: in the world, on its host, and across hosts."""

    def __init__(self, world, hosts):
        self.world = world
        self.rank, self.size = world.rank, world.size
        here = hosts[self.rank]
        on_this_host = [rank for rank, host in enumerate(hosts) if host == here]
        self.local_rank = on_this_host.index(self.rank)
        self.local_size = len(on_this_host)
        # Horovod's cross communicator: the ranks with this rank's local rank,
        # one per host, in rank order
        same_slot = [rank for rank in range(self.size)
                     if _local_rank_of(rank, hosts) == self.local_rank]
        self.cross_rank = same_slot.index(self.rank)
        self.cross_size = len(same_slot)
        self.homogeneous = len({hosts.count(host) for host in hosts}) == 1


def _local_rank_of(rank, hosts):
    return hosts[:rank].count(hosts[rank])


_topology = None


def init(comm=None):
    """Start Horovod on this process (again: no effect). Under ``towerflow
    launch -n N`` every rank must call it; alone, this process is rank 0 of 1.

    Example::

        >>> hvd.init()
        >>> hvd.rank(), hvd.size()
        (0, 1)
    """
    global _topology
    if comm is not None:
        raise NotImplementedError(
            f"hvd.init(comm={comm!r}): towerflow's Horovod runs on every rank of the launch; "
            "call hvd.init() without arguments")
    if _topology is not None:
        return
    if mpi.multi_process_launch():
        world = mpi.world()
        hosts = world.all_gather(socket.gethostname(), "hvd.init()", mpi.resolve_timeout())
    else:
        world, hosts = mpi.LoneWorld(), [socket.gethostname()]
    _topology = _Topology(world, hosts)


def shutdown():
    """Forget init(): rank(), size() and the collectives need init() again."""
    global _topology
    _topology = None


def is_initialized():
    """Whether init() has run (and shutdown() has not since)."""
    return _topology is not None


def _initialized():
    if _topology is None:
        raise ValueError(NOT_INITIALIZED)
    return _topology


def rank():
    """This process's rank, 0 .. size() - 1; ValueError before init()."""
    return _initialized().rank


def size():
    """The number of processes; ValueError before init()."""
    return _initialized().size


def local_rank():
    """This process's rank among the processes on its host: the GPU it takes
    in ``config.gpu_options.visible_device_list = str(hvd.local_rank())``."""
    return _initialized().local_rank


def local_size():
    """The number of processes on this process's host."""
    return _initialized().local_size


def cross_rank():
    """This process's rank among the processes of its local rank (one per host)."""
    return _initialized().cross_rank


def cross_size():
    """The number of processes with this process's local rank (the hosts, when
    every host runs as many processes)."""
    return _initialized().cross_size


def is_homogeneous():
    """Whether every host runs the same number of processes."""
    return _initialized().homogeneous


def mpi_enabled():
    """Whether the ranks exchange through MPI (launched with several ranks)."""
    return isinstance(_initialized().world, mpi.MpiWorld)


def mpi_built():
    """Whether MPI can be used here: mpi4py is installed (towerflow[mpi])."""
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


def mpi_threads_supported():
    """Whether MPI was started with MPI_THREAD_MULTIPLE (False when alone)."""
    if not mpi_enabled():
        return False
    from mpi4py import MPI
    return MPI.Query_thread() == MPI.THREAD_MULTIPLE


def gloo_enabled():
    """False: towerflow's ranks exchange through MPI, never Gloo."""
    _initialized()
    return False


def gloo_built():
    return False


def nccl_built():
    """False: hvd's collectives exchange host arrays through MPI (towerflow's
    own towers use NCCL; see DataParallel)."""
    return False


def collective_world():
    """The world hvd's collective ops exchange through, when a plan is made:
    FailedPreconditionError (Horovod's) before init()."""
    if _topology is None:
        from .. import errors
        raise errors.FailedPreconditionError(None, None, NOT_INITIALIZED)
    return _topology.world


mpi.register_world("horovod", collective_world)
