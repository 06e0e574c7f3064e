"""The graph's op order: a topological order that keeps creation order
wherever it already holds, for ``Graph._sort_topologically``::

    graph._ops = ordering.topological_order(graph._ops)

Plans and gradients take a graph's creation order as its topological order;
only an input edited in after the fact (``Operation._update_input``, as
synchronized batch norm does) can break it, and this repairs it. Apart from
towerflow/graph/core.py because building a graph never needs it: it is a
pass over a finished list of ops, not part of how ops are made.
"""

import heapq


def topological_order(ops):
    """``ops`` reordered so each comes after its inputs and control inputs,
    keeping creation order wherever it already holds (the first op whose
    inputs are all placed goes first) and ops made to run together (attr
    ``run_together``: an NCCL all-reduce's members) back to back. Renumbers
    the ops' ``_id`` to their new positions; ValueError naming an op on a cycle."""
    units = _run_together_units(ops)
    unit_of = {op: unit for unit in units for op in unit}
    waiting_on, users = {}, {unit: [] for unit in units}
    for unit in units:
        sources = {unit_of[source] for op in unit for source in _sources(op)} - {unit}
        waiting_on[unit] = len(sources)
        for source in sources:
            users[source].append(unit)
    ready = [(unit[0]._id, unit) for unit in units if not waiting_on[unit]]
    heapq.heapify(ready)
    ordered = []
    while ready:
        _, unit = heapq.heappop(ready)
        ordered.extend(unit)
        for user in users[unit]:
            waiting_on[user] -= 1
            if not waiting_on[user]:
                heapq.heappush(ready, (user[0]._id, user))
    if len(ordered) != len(ops):
        stuck = next(unit[0] for unit in units if waiting_on[unit])
        raise ValueError(f"the graph has a cycle through {stuck.name}")
    for index, op in enumerate(ordered):
        op._id = index
    return ordered


def _run_together_units(ops):
    """The ops as units to place: each alone, or the members of one
    ``run_together`` group, in creation order."""
    units, groups = [], {}
    for op in ops:
        names = op.attrs.get("run_together")
        if not names:
            units.append((op,))
        elif names not in groups:
            groups[names] = (op,)
            units.append(names)
        else:
            groups[names] += (op,)
    return [groups.get(unit, unit) for unit in units]


def _sources(op):
    """The ops ``op`` waits for: its inputs' and its control inputs."""
    return {tensor.op for tensor in op.inputs} | set(op.control_inputs)
