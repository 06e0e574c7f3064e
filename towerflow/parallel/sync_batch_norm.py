"""Wiring the towers' cross-tower sums (synchronized batch norm).

Each tower of a :class:`~towerflow.parallel.DataParallel` step builds its own
``CrossTowerSum`` placeholders (towerflow/ops/sync_norm_ops.py), one per
synchronized batch-norm layer in its forward pass and one per layer in its
backward pass. Towers are built one after the other, so a placeholder cannot
name its peers when it is made; once every tower exists, the k-th
placeholder of every tower is summed by the step's communicator (one
all-reduce of the packed [sums, squared sums, count] vector per layer, over
towers and MPI ranks) and each placeholder forwards its tower's copy of that
sum. Every tower then holds bit-identical global statistics.
"""

from ..ops.sync_norm_ops import CROSS_TOWER_SUM


def new_sums(graph, first_op_id, gradients=False):
    """The cross-tower sums (of the forward pass, or with ``gradients`` those of
    the backward pass) made since the graph held ``first_op_id`` ops, in
    creation order."""
    return [op for op in graph.get_operations()[first_op_id:] if op.type == CROSS_TOWER_SUM
            and (op.attrs.get("gradient_of") is not None) == gradients]


def wire(graph, tower_sums, communicator, devices, forward_sums=None):
    """Make the k-th sum of each tower (``tower_sums[tower][k]``) forward the sum
    of every tower's k-th input. Gradient sums (``forward_sums`` given: the
    towers' forward sums) are matched by the layer whose gradient they are."""
    if forward_sums is not None:
        tower_sums = [_in_layer_order(sums, forward) for sums, forward
                      in zip(tower_sums, forward_sums)]
    _check_same_layers(tower_sums)
    scope = "sync_batch_norm" if forward_sums is None else "sync_batch_norm_gradients"
    with graph.name_scope(scope):
        for layer in range(len(tower_sums[0])):
            members = [sums[layer] for sums in tower_sums]
            _check_alike(members)
            with graph.name_scope(f"layer_{layer}"):
                totals = communicator.all_reduce([[op.inputs[1]] for op in members],
                                                 devices, graph)
            for op, (total,) in zip(members, totals):
                op._update_input(0, total)      # forwards it (see CrossTowerSum)
    # the sums were made after the ops that now read them: restore the graph's
    # creation order as a topological order (each tower up to its statistics,
    # the all-reduce, then the rest of each tower)
    graph._sort_topologically()


def _in_layer_order(gradient_sums, forward_sums):
    """The gradient sums ordered by their forward sum's position (a layer whose
    output the loss never reads has none)."""
    layer_of = {op.name: layer for layer, op in enumerate(forward_sums)}
    return sorted(gradient_sums, key=lambda op: layer_of[op.attrs["gradient_of"]])


def _check_same_layers(tower_sums):
    counts = [len(sums) for sums in tower_sums]
    if len(set(counts)) > 1:
        raise ValueError(f"the towers built {counts} synchronized batch-norm statistics: "
                         "tower_fn must build the same layers on every call")


def _check_alike(members):
    first = members[0].inputs[1]
    for op in members[1:]:
        local = op.inputs[1]
        if local.shape.as_list() != first.shape.as_list() or local.dtype != first.dtype:
            raise ValueError(f"synchronized batch norms {members[0].name} and {op.name} sum "
                             f"{first.shape} {first.dtype.name} and {local.shape} "
                             f"{local.dtype.name}: tower_fn must build the same layers")
