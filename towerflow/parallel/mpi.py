"""Processes: the MPI world behind ``all_reduce='mpi'``.

Each process (rank) drives its own towers; ranks exchange tensors through
mpi4py. Every collective runs with a deadline instead of blocking forever:

1. an *arrival* round: each rank tells every other rank it reached collective
   number k, so a rank that died or stopped answering is found and *named*;
2. the collective itself, non-blocking, polled until the same deadline.

A missing peer raises :class:`~towerflow.errors.UnavailableError` naming the
rank and the collective. On the first collective of a plan, ranks also
compare what they are about to reduce (bucket count, shapes, dtypes), and a
disagreement raises :class:`~towerflow.errors.InvalidArgumentError` naming
the first mismatch.

After a peer is found missing, this process can no longer finalize MPI (that
waits for every rank, the dead one too): when it exits, it skips finalizing
and exits with status 1, even if the script caught the error (see
:func:`_exit_without_finalize`).

``towerflow launch -n N -- python train.py`` starts the ranks (see
towerflow/launch.py); plain ``mpiexec -n N python train.py`` works too. The
graph ops that run collectives through this world are in mpi_ops.py.
"""

import atexit
import concurrent.futures
import math
import os
import sys
import time

import numpy as np

from .. import errors

# Seconds a collective waits for its peers (TOWERFLOW_COLLECTIVE_TIMEOUT overrides;
# read when a communicator is made, so a bad value never breaks `import towerflow`).
DEFAULT_TIMEOUT = 60.0
TIMEOUT_VARIABLE = "TOWERFLOW_COLLECTIVE_TIMEOUT"
# Milliseconds every all-reduce sleeps inside the collective (a slow network
# simulated, for benchmarks/scaling.py's overlap measurement); unset: none.
LATENCY_VARIABLE = "TOWERFLOW_INJECT_ALLREDUCE_LATENCY_MS"
_ARRIVAL_TAG = 7301
_POLL_SECONDS = 0.0005


def checked_timeout(seconds, described=None):
    """``seconds`` as a float if it is a positive finite number of seconds, else
    ValueError starting with ``described`` (default: ``timeout <value>``).

    Example::

        >>> checked_timeout("30")
        30.0
    """
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        what = described or f"timeout {seconds!r}"
        raise ValueError(f"{what}: expected a positive finite number of seconds, e.g. 60")
    return value


def resolve_timeout(timeout=None):
    """``timeout`` checked; None means TOWERFLOW_COLLECTIVE_TIMEOUT, else 60 s.

    Example::

        >>> resolve_timeout(None)    # TOWERFLOW_COLLECTIVE_TIMEOUT unset
        60.0
    """
    if timeout is not None:
        return checked_timeout(timeout)
    if TIMEOUT_VARIABLE in os.environ:
        raw = os.environ[TIMEOUT_VARIABLE]
        return checked_timeout(raw, f"{TIMEOUT_VARIABLE}={raw!r}")
    return DEFAULT_TIMEOUT


def injected_latency():
    """Seconds each all-reduce sleeps (TOWERFLOW_INJECT_ALLREDUCE_LATENCY_MS), 0 if unset."""
    raw = os.environ.get(LATENCY_VARIABLE)
    if raw is None:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{LATENCY_VARIABLE}={raw!r}: expected a number of milliseconds "
                         ">= 0, e.g. 5")
    return value / 1000.0


def launched_under_mpi():
    """True in a process started by mpiexec (Open MPI or any PMIx launcher)."""
    return any(name in os.environ for name in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK",
                                               "PMI_RANK"))


def multi_process_launch():
    """True in one of several processes started by mpiexec (towerflow launch)."""
    return launched_under_mpi() and world_size_from_environment() > 1


def world_size_from_environment():
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        if name in os.environ:
            return int(os.environ[name])
    return 1


def rank_from_environment():
    for name in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"):
        if name in os.environ:
            return int(os.environ[name])
    return 0


class MpiWorld:
    """COMM_WORLD with deadlines; one per process (see :func:`world`)."""

    def __init__(self, comm=None):
        if comm is None:
            from .mpi_startup import import_mpi
            try:
                MPI = import_mpi(resolve_timeout(), rank_from_environment(),
                                 world_size_from_environment())
            except ImportError as err:
                raise errors.UnavailableError(
                    None, None, "all_reduce='mpi' needs mpi4py: pip install "
                    f"'towerflow[mpi]' ({err})") from None
            comm = MPI.COMM_WORLD
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._calls = 0
        self._latency = injected_latency()
        self._progress = None     # the progress thread, once an all-reduce overlaps

    def all_reduce(self, array, what, timeout):
        """The element-wise sum of ``array`` over all ranks."""
        return self._in_order(self._all_reduce_now, array, what, timeout)

    def all_reduce_start(self, array, what, timeout):
        """A future of the element-wise sum of ``array`` over all ranks, which
        the progress thread computes while the caller goes on (the backward
        pass): ``.result()`` waits for it (and raises what the collective
        raised). ``array`` is copied, so the caller may reuse its buffer."""
        array = np.array(array, order="C", copy=True)     # keeps 0-d shapes
        return self._progress_thread().submit(self._all_reduce_now, array, what, timeout)

    def broadcast(self, array, what, timeout, root=0):
        """Rank ``root``'s ``array`` on every rank."""
        return self._in_order(self._broadcast_now, array, what, timeout, root)

    def all_gather(self, value, what, timeout):
        """Every rank's ``value`` (any picklable object), in rank order."""
        return self._in_order(self._all_gather_now, value, what, timeout)

    # -- the collectives themselves, in one thread at a time -----------------------

    def _all_reduce_now(self, array, what, timeout):
        array = np.require(array, requirements="C")   # keeps 0-d shapes
        self._arrive(what, timeout, _Arrival.of("all-reduce", array))
        result = np.empty_like(array)
        self._wait(self.comm.Iallreduce(array, result), (array, result), what, timeout)
        if self._latency:
            time.sleep(self._latency)
        return result

    def _broadcast_now(self, array, what, timeout, root):
        buffer = np.require(array, requirements="C").copy()   # keeps 0-d shapes
        self._arrive(what, timeout, _Arrival.of("broadcast", buffer))
        self._wait(self.comm.Ibcast(buffer, root=root), (buffer,), what, timeout)
        return buffer

    def _all_gather_now(self, value, what, timeout):
        self._arrive(what, timeout, _Arrival.of("all-gather"))
        return self.comm.allgather(value)

    def _in_order(self, collective, *args):
        """Run ``collective`` now, or, once overlapping all-reduces started a
        progress thread, queue it there and wait: every rank must issue its
        collectives in the same order (and the arrival tokens count them), so
        all of them go through that one thread in the order they were asked
        for."""
        if self._progress is None:
            return collective(*args)
        return self._progress.submit(collective, *args).result()

    def _progress_thread(self):
        if self._progress is None:
            self._progress = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="towerflow-mpi-progress")
        return self._progress

    def all_gather_rows(self, array, what, timeout):
        """Every rank's ``array`` concatenated along dimension 0, in rank order:
        the first dimensions may differ, the others and the dtype may not."""
        pieces = self.all_gather(np.asarray(array), what, timeout)
        return concatenate_rows(pieces, what)

    def check_signature(self, signature, what, timeout):
        """InvalidArgumentError naming the first difference between this rank's
        ``signature`` (a list of (shape, dtype) pairs) and rank 0's."""
        everyone = self.all_gather(signature, what, timeout)
        first_mismatch = _first_mismatch(everyone)
        if first_mismatch:
            raise errors.InvalidArgumentError(None, None, f"{what}: {first_mismatch}")

    def check_same(self, settings, what, timeout):
        """InvalidArgumentError naming the first setting (in ``settings``' order)
        where a rank differs from rank 0: ranks that disagree on the batch size
        or the run's length would run different collectives and fail inside MPI.

        Example::

            >>> world().check_same({"--batch-size": 64, "--seed": 0}, "start-up", 60)
        """
        everyone = self.all_gather(list(settings.items()), what, timeout)
        for rank, theirs in enumerate(everyone[1:], start=1):
            for (name, ours), (_, value) in zip(everyone[0], theirs):
                if ours != value:
                    raise self._disagreement(name, rank, ours, value, what)

    def _disagreement(self, name, rank, ours, theirs, what):
        error = errors.InvalidArgumentError(
            None, None, f"the ranks disagree on {name}: rank 0 has {ours!r} but rank {rank} "
            f"has {theirs!r} ({what}; every rank needs the same)")
        # every rank raises it; the command line prints rank 0's alone
        error.printed_by_rank_0 = self.rank != 0
        return error

    # -- deadlines ---------------------------------------------------------------

    def _arrive(self, what, timeout, arrival):
        """Exchange arrival tokens with every peer: name the ranks that never came,
        and refuse to start a collective that a peer runs differently."""
        self._calls += 1
        token = np.array([self._calls, *arrival], dtype=np.int64)
        peers = [peer for peer in range(self.size) if peer != self.rank]
        inbox = {peer: np.zeros(len(token), np.int64) for peer in peers}
        sends = [self.comm.Isend(token, dest=peer, tag=_ARRIVAL_TAG) for peer in peers]
        receives = {peer: self.comm.Irecv(inbox[peer], source=peer, tag=_ARRIVAL_TAG)
                    for peer in peers}
        buffers = (token, inbox)
        deadline = time.monotonic() + timeout
        pending = dict(receives)
        while pending:
            pending = {peer: req for peer, req in pending.items() if not req.Test()}
            if pending and time.monotonic() > deadline:
                _keep_until_exit(sends + list(receives.values()), buffers)
                raise self._unavailable(sorted(pending), what, timeout)
            if pending:
                time.sleep(_POLL_SECONDS)
        self._wait_all(sends, buffers, what, timeout, deadline)
        for peer in peers:
            if not np.array_equal(inbox[peer], token):
                raise self._out_of_step(peer, inbox[peer], token, what)

    def _out_of_step(self, peer, theirs, ours, what):
        return errors.InvalidArgumentError(
            None, None, f"{what}: rank {peer} is at collective number {theirs[0]}, "
            f"{_Arrival.describe(theirs[1:])}, but rank {self.rank} is at number {ours[0]}, "
            f"{_Arrival.describe(ours[1:])}: the ranks run different collectives (different "
            "batch sizes, step counts or models?)")

    def _wait(self, request, buffers, what, timeout):
        deadline = time.monotonic() + timeout
        self._wait_all([request], buffers, what, timeout, deadline)

    def _wait_all(self, requests, buffers, what, timeout, deadline):
        try:
            for request in requests:
                while not request.Test():
                    if time.monotonic() > deadline:
                        raise self._unavailable(None, what, timeout)
                    time.sleep(_POLL_SECONDS)
        except BaseException:   # a timeout, an MPI error, Ctrl-C: MPI may still hold them
            _keep_until_exit(requests, buffers)
            raise

    def _unavailable(self, missing, what, timeout):
        _exit_without_finalize()
        who = (f"rank {missing[0]}" if len(missing) == 1 else f"ranks {missing}") \
            if missing else "a peer rank"
        return errors.UnavailableError(
            None, None, f"{who} did not join {what} within {timeout:g} s (seen from rank "
            f"{self.rank} of {self.size}): it died or stopped answering")


class LoneWorld:
    """The world of a process that runs alone (not launched, or launched with
    one rank): every collective is the identity, and MPI is never started."""

    rank, size = 0, 1

    def all_reduce(self, array, what, timeout):
        return np.array(array, copy=True)

    def broadcast(self, array, what, timeout, root=0):
        return np.array(array, copy=True)

    def all_gather(self, value, what, timeout):
        return [value]

    def all_gather_rows(self, array, what, timeout):
        return np.array(array, copy=True)


def concatenate_rows(pieces, what):
    """``pieces`` (one array per rank) joined along dimension 0, else
    InvalidArgumentError naming the first rank whose other dimensions or
    dtype differ from rank 0's."""
    first = pieces[0]
    for rank, piece in enumerate(pieces[1:], start=1):
        if piece.ndim == 0 or piece.shape[1:] != first.shape[1:] or piece.dtype != first.dtype:
            raise errors.InvalidArgumentError(
                None, None, f"{what}: rank 0 has shape {list(first.shape)} {first.dtype} but "
                f"rank {rank} has shape {list(piece.shape)} {piece.dtype}; an all-gather needs "
                "the same dtype and the same dimensions after the first on every rank")
    return np.concatenate(pieces, axis=0)


class _Arrival:
    """What a collective will exchange, as int64s in the arrival token: a kind
    code, the element count and a dtype code (-1: any, for pickled objects)."""

    KINDS = ("all-reduce", "broadcast", "all-gather")

    @classmethod
    def of(cls, kind, array=None):
        if array is None:
            return (cls.KINDS.index(kind), -1, -1)
        return (cls.KINDS.index(kind), array.size, array.dtype.num)

    @classmethod
    def describe(cls, code):
        kind, size, dtype = (int(value) for value in code)
        if not 0 <= kind < len(cls.KINDS):
            return f"an unknown collective (code {kind})"
        article = "an" if cls.KINDS[kind][0] in "aeiou" else "a"
        if size < 0:
            return f"{article} {cls.KINDS[kind]}"
        return f"{article} {cls.KINDS[kind]} of {size} {_dtype_name(dtype)}"


def _dtype_name(number):
    for dtype in np.sctypeDict.values():
        if np.dtype(dtype).num == number:
            return np.dtype(dtype).name
    return f"dtype#{number}"


# NOTE: a request that timed out may still be read or written by MPI: its
# buffers must outlive it, or MPI writes into freed memory (heap corruption).
# The process exits without finalizing after a lost peer, so they never leave.
_abandoned = []


def _keep_until_exit(requests, buffers):
    _abandoned.append((list(requests), buffers))


_exit_armed = []


def _exit_without_finalize():
    """Make this process skip MPI_Finalize at exit (once a peer is missing it
    can hang for ever) and exit with status 1: an unhandled error prints its
    traceback first. Exit hooks registered before this call (mpi4py's
    finalize among them) do not run; the run failed either way."""
    if _exit_armed:
        return
    _exit_armed.append(True)
    original_hook = sys.excepthook

    def report_and_exit(*exc_info):
        original_hook(*exc_info)
        _flush_and_exit(1)
    sys.excepthook = report_and_exit
    atexit.register(_flush_and_exit, 1)


def _flush_and_exit(status):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def _first_mismatch(signatures):
    reference = signatures[0]
    for rank, signature in enumerate(signatures[1:], start=1):
        if len(signature) != len(reference):
            return (f"rank 0 reduces {len(reference)} tensors but rank {rank} reduces "
                    f"{len(signature)}")
        for index, (ours, theirs) in enumerate(zip(reference, signature)):
            if ours != theirs:
                return (f"tensor {index}: rank 0 has shape {list(ours[0])} {ours[1]} but "
                        f"rank {rank} has shape {list(theirs[0])} {theirs[1]}")
    return None


_world = None


def world():
    """This process's MPI world (created on first use)."""
    global _world
    if _world is None:
        _world = MpiWorld()
    return _world


# Which world a collective op exchanges through, by its ``world`` attr:
# towerflow's towers use MPI's; towerflow.horovod registers its own (which
# checks hvd.init() and runs alone without MPI in a single process).
_WORLD_PROVIDERS = {"mpi": world}


def register_world(name, provider):
    """Make collective ops whose ``world`` attr is ``name`` use ``provider()``."""
    _WORLD_PROVIDERS[name] = provider


def world_named(name):
    """The world a collective op with ``world`` attr ``name`` runs in."""
    return _WORLD_PROVIDERS[name or "mpi"]()

