"""Ranks agree before they train: every rank of ``towerflow launch`` must run
the same collectives in the same order, or MPI fails obscurely (a truncated
message, memory written past a buffer) far from the cause. At start-up the
ranks compare a fingerprint of their settings and of their graph's
collective schedule, and all stop with one error naming the first difference.
"""

import hashlib

from . import mpi


def collective_schedule(graph):
    """A short, comparable summary of ``graph``'s cross-rank collectives: their
    count and a digest of their types, shapes and dtypes in creation order.

    Example::

        >>> collective_schedule(graph)
        '12 collectives, digest 3f2a9c01'
    """
    entries = [f"{op.type}{tuple(out.shape.dims)}{out.dtype.name}"
               for op in graph.get_operations() if _crosses_ranks(op)
               for out in op.outputs]
    digest = hashlib.sha256("|".join(entries).encode()).hexdigest()[:8]
    return f"{len(entries)} collectives, digest {digest}"


def _crosses_ranks(op):
    if op.type in ("MpiAllReduce", "MpiAllReduceStart", "MpiBroadcast", "MpiAllGather"):
        return True
    return op.type == "NcclAllReduce" and bool(op.attrs.get("world_size"))


def check_ranks_agree(strategy, graph, settings):
    """On a multi-rank strategy, InvalidArgumentError on every rank naming the
    first of ``settings`` (option name -> value, compared in order) or of the
    collective schedule where a rank differs from rank 0; nothing on one rank.

    Example::

        >>> check_ranks_agree(strategy, graph, {"--batch-size": 64, "--seed": 0})
    """
    if strategy.num_ranks < 2:
        return
    fingerprint = dict(settings, **{"towers per rank": strategy.num_towers,
                                    "the collective schedule": collective_schedule(graph)})
    mpi.world().check_same(fingerprint, "checked at start-up", strategy.timeout)
