"""Stage 5, the order a plan runs its ops in (towerflow/plan.py compiles
the plan; this decides only where ops that overlap others go).

A collective split into a start op and a wait op (an all-reduce overlapping
the backward pass: parallel/mpi_ops.py, parallel/nccl.py) only overlaps if
its start runs as soon as its bucket exists and its wait as late as its
users allow; creation order would run both back to back. Apart from plan.py
because it is a pass over the pruned op list, not part of binding kernels.

Example::

    ops = plan_order.overlapping_order(ops_in_creation_order)
    plan_order.check_run_together(ops)
"""

import heapq

from . import errors


def overlapping_order(ops):
    """``ops`` (in creation order) reordered for ops that overlap others: one
    with attr ``schedule='early'`` (a collective's start) runs as soon as the
    ops it depends on have run, those pulled ahead of everything else, the
    first-made start's first; one with ``schedule='late'`` (its wait) runs
    only when no other op is ready. Still a topological order; ``ops`` as they
    are when there is neither."""
    early = [op for op in ops if op.attrs.get("schedule") == "early"]
    if not early:
        return ops
    in_plan = set(ops)

    def producers(op):
        return [o for o in [t.op for t in op.inputs] + list(op.control_inputs) if o in in_plan]
    # rank of each op: that of the first start it leads to, else after them all
    rank = {}
    for index, start in enumerate(early):
        stack = [start]
        while stack:
            op = stack.pop()
            if op not in rank:   # claimed ones had their producers claimed too
                rank[op] = index
                stack.extend(producers(op))
    last = len(early)
    waiting, users, ready = {}, {op: [] for op in ops}, []
    for op in ops:
        before = set(producers(op))
        waiting[op] = len(before)
        for producer in before:
            users[producer].append(op)
        if not before:
            heapq.heappush(ready, (_schedule_key(op, rank, last), op._id, op))
    ordered = []
    while ready:
        op = heapq.heappop(ready)[2]
        ordered.append(op)
        for user in users[op]:
            waiting[user] -= 1
            if not waiting[user]:
                heapq.heappush(ready, (_schedule_key(user, rank, last), user._id, user))
    return ordered


def _schedule_key(op, rank, last):
    if op.attrs.get("schedule") == "late":
        return last + 1
    return rank.get(op, last)


def check_run_together(ops):
    """Ops made to run together (attr ``run_together``: their names; the
    members of one NCCL all-reduce) are all in the plan, or none of them."""
    names = {op.name for op in ops}
    for op in ops:
        missing = [name for name in op.attrs.get("run_together", ()) if name not in names]
        if missing:
            raise errors.InvalidArgumentError(
                None, op, f"Op '{op.name}' ({op.type}) cannot run without the other ops of "
                f"its group {missing}: fetch them in the same Session.run (the members "
                "of a collective that never run would leave it waiting forever)")
