"""Data-parallel towers: one model function, one tower per device.

::

    strategy = tf.parallel.DataParallel(['/cpu:0', '/cpu:1'], all_reduce='cpu')
    step = strategy.minimize(tower_fn, (images, labels), optimizer, global_step=step)
    sess.run(tf.global_variables_initializer())     # replicas start equal
    _, loss = sess.run([step.train_op, step.loss], feed_dict=...)

``tower_fn(inputs)`` builds the model on its shard of the global batch and
returns the mean loss over that shard, or ``(loss, {name: mean metric})``.
It is called once per device, under ``tf.device(device)`` and
``tf.name_scope('tower_<i>')``. Variables are mirrored: tower 0 creates and
initialises them; each other tower's copies are initialised *from* tower 0
(a broadcast), so replicas start bit-identical. Each tower's gradients are
weighted by its share of the global batch (n_i / B), summed across towers by
the communicator in gradient buckets, and every replica applies the same
update, so replicas stay bit-identical and the result equals one device
training on the whole batch. Buckets are planned in backward order; between
MPI ranks each bucket's all-reduce overlaps the rest of the backward pass
(``overlap=False`` or TOWERFLOW_OVERLAP_ALLREDUCE=0: after it, blocking).
"""

import collections
import contextlib

from .. import dtypes
from ..graph import core
from ..graph.core import GraphKeys
from ..ops import array_ops, math_ops, variable_scope
from . import buckets, communicators, mpi, sharding

TrainStep = collections.namedtuple(
    "TrainStep", ["train_op", "loss", "metrics", "tower_losses", "variables", "replicas"])


class DataParallel:
    """Towers on ``devices`` (default: every GPU, else every logical CPU)."""

    def __init__(self, devices=None, all_reduce="auto", bucket_bytes=4 << 20,
                 timeout=None, sync_statistics=False, overlap=None):
        self.devices = list(devices) if devices is not None else default_devices()
        if not self.devices:
            raise ValueError("DataParallel needs at least one device")
        self.communicator = communicators.choose(self.devices, all_reduce, timeout)
        # Between MPI ranks, each bucket's all-reduce starts as soon as its
        # gradients exist and runs beside the rest of the backward pass.
        self.communicator.overlap = communicators.overlap_enabled(overlap)
        self.bucket_bytes = int(bucket_bytes)
        self.timeout = mpi.resolve_timeout(timeout)
        self.sync_statistics = bool(sync_statistics)
        world = mpi.world() if self.communicator.spans_processes else None
        self.rank, self.num_ranks = (world.rank, world.size) if world else (0, 1)

    @property
    def num_towers(self):
        """Towers in this process."""
        return len(self.devices)

    @property
    def num_shards(self):
        """Towers in all processes: the global batch is cut into this many shards
        (every rank feeds the same global batch and computes its own shards)."""
        return self.num_ranks * self.num_towers

    def minimize(self, tower_fn, inputs, optimizer, global_step=None):
        """Build the towers, the all-reduce and the update; returns a TrainStep
        with the train op, the global loss and metrics (means over the global
        batch), each tower's loss, tower 0's variables and all replicas."""
        graph = core.get_default_graph()
        flat_inputs = _flatten(inputs)
        towers = [self._build_tower(graph, tower_fn, inputs, flat_inputs, index)
                  for index in range(self.num_towers)]
        if self.num_ranks > 1:  # first, so the other towers copy the broadcast values
            self._broadcast_from_rank_0(graph, towers[0].variables + towers[0].statistics)
        replicas = _mirror(graph, [tower.variables for tower in towers])
        statistics = _mirror(graph, [tower.statistics for tower in towers])
        reduced = self._reduced_gradients(graph, towers, replicas, optimizer)
        grads_and_vars = [(grad, var) for tower_grads, tower_vars in zip(reduced, replicas)
                          for grad, var in zip(tower_grads, tower_vars)]
        # Each tower's own updates (batch-norm moving statistics) run with the step.
        with graph.control_dependencies([op for t in towers for op in t.update_ops]):
            train_op = optimizer.apply_gradients(grads_and_vars, global_step=global_step)
        if self.sync_statistics and statistics[0]:
            train_op = self._average_statistics(graph, statistics, train_op)
        loss, metrics = self._global_values(graph, towers)
        if getattr(optimizer, "step_skipped", None) is not None:   # loss scaling's metrics
            metrics.update(loss_scale=optimizer.scale_used,
                           step_skipped=optimizer.step_skipped)
        return TrainStep(train_op, loss, metrics, [tower.loss for tower in towers],
                         replicas[0], replicas)

    # -- building ------------------------------------------------------------------

    def _build_tower(self, graph, tower_fn, inputs, flat_inputs, index):
        before = {key: set(map(id, graph.get_collection(key))) for key in _WATCHED}
        shard_index = self.rank * self.num_towers + index
        shards = [sharding.shard(tensor, self.num_shards, shard_index) for tensor in flat_inputs]
        fraction = _ShardFraction(flat_inputs[0], self.num_shards, shard_index)
        with graph.device(self.devices[index]), \
                graph.name_scope(f"tower_{index}") as tower_scope, \
                _tower_variable_scope(tower_scope), _tower_index(graph, index):
            loss, metrics = _loss_and_metrics(tower_fn(_unflatten(inputs, shards)))
        created = {key: [item for item in graph.get_collection(key) if id(item) not in before[key]]
                   for key in _WATCHED}
        trainable = created[GraphKeys.TRAINABLE_VARIABLES]
        statistics = [var for var in created[GraphKeys.GLOBAL_VARIABLES]
                      if all(var is not other for other in trainable)]
        return _Tower(index, loss, metrics, fraction, trainable, statistics,
                      created[GraphKeys.UPDATE_OPS])

    def _average_statistics(self, graph, statistics, after):
        """After the step, set every replica of each non-trainable variable (batch
        norm's moving statistics) to their mean over all towers of all ranks."""
        assigns = []
        with graph.control_dependencies([after]), graph.name_scope("sync_statistics"):
            for replicas in zip(*statistics):
                with graph.device("/cpu:0"):
                    total = math_ops.add_n([var.read_value() for var in replicas])
                    if self.num_ranks > 1:
                        total = mpi.all_reduce_op(total, self.timeout)
                    mean = total * (1.0 / self.num_shards)
                assigns += [var.assign(mean).op for var in replicas]
        return array_ops.group(*assigns, name="train_step")

    def _reduced_gradients(self, graph, towers, replicas, optimizer):
        """Per tower, the gradients of the global-batch mean loss, summed across
        towers, in the order of ``replicas[tower]``. A loss-scaling optimizer
        (towerflow.mixed_precision) scales each tower's loss and unscales its
        gradients before the reduction."""
        weighted = []
        scaled = hasattr(optimizer, "get_scaled_loss")
        for tower, variables in zip(towers, replicas):
            with graph.device(self.devices[tower.index]), \
                    graph.name_scope(f"tower_{tower.index}_gradients"):
                if scaled:
                    grads = optimizer.get_unscaled_gradients(
                        _gradients(optimizer.get_scaled_loss(tower.loss), variables))
                else:
                    grads = _gradients(tower.loss, variables)
                weighted.append([tower.fraction.weigh(grad) for grad in grads])
        plan = buckets.plan_buckets(weighted[0], self.bucket_bytes, backward=True)
        packed = [self._pack(graph, grads, plan, rank) for rank, grads in enumerate(weighted)]
        summed = self.communicator.all_reduce(packed, self.devices, graph)
        return [self._unpack(graph, sums, grads, plan, rank)
                for rank, (sums, grads) in enumerate(zip(summed, weighted))]

    def _broadcast_from_rank_0(self, graph, variables):
        """Every rank's tower 0 starts from rank 0's initial values."""
        signature = [(tuple(var.shape.dims), var.dtype.name) for var in variables]
        for index, var in enumerate(variables):
            with graph.device("/cpu:0"):
                value = mpi.broadcast_op(var.initial_value, self.timeout,
                                         signature if index == 0 else None,
                                         name=f"broadcast_{var.op.name.replace('/', '_')}")
            var._initializer = var.assign(value, name="broadcast").op

    def _global_values(self, graph, towers):
        """The global loss and metrics: each tower's mean weighted by its share,
        summed over towers (and over ranks), on the first tower's device (so a
        GPU step fetching them stays on the GPUs, one CUDA graph); /cpu:0 for
        MPI, which sums host arrays."""
        device = "/cpu:0" if self.num_ranks > 1 else self.devices[0]
        with graph.device(device), graph.name_scope("global"):
            names = ["loss"] + sorted(towers[0].metrics)
            values = {name: math_ops.add_n(
                [t.fraction.weigh(t.loss if name == "loss" else t.metrics[name])
                 for t in towers], name=name)
                for name in names}
            if self.num_ranks > 1:
                values = {name: mpi.all_reduce_op(value, self.timeout, name=f"{name}_sum")
                          for name, value in values.items()}
        loss = values.pop("loss")
        return loss, values

    def _pack(self, graph, grads, plan, rank):
        with graph.device(self.devices[rank]), graph.name_scope(f"tower_{rank}_buckets"):
            return [buckets.pack([grads[i] for i in bucket]) for bucket in plan]

    def _unpack(self, graph, sums, grads, plan, rank):
        result = [None] * len(grads)
        with graph.device(self.devices[rank]), graph.name_scope(f"tower_{rank}_buckets"):
            for bucket, total in zip(plan, sums):
                for index, piece in zip(bucket, buckets.unpack(total, [grads[i] for i in bucket])):
                    result[index] = piece
        return result


def _tower_variable_scope(tower_scope):
    """Each tower gets its own variables, also those made by tf.get_variable
    and tf.layers (named by variable scope, not name scope): a variable scope
    named like the tower's name scope (``tower_1/dense/kernel``)."""
    return variable_scope.variable_scope(tower_scope.rstrip("/").split("/")[-1],
                                         auxiliary_name_scope=False)


@contextlib.contextmanager
def _tower_index(graph, index):
    """Random ops built inside draw tower ``index``'s own seeded stream."""
    graph.tower_index = index
    try:
        yield
    finally:
        graph.tower_index = 0


# What a tower creates: trainable variables (mirrored, trained), other variables
# (mirrored statistics) and update ops (run with the step).
_WATCHED = (GraphKeys.TRAINABLE_VARIABLES, GraphKeys.GLOBAL_VARIABLES, GraphKeys.UPDATE_OPS)


class _Tower:
    def __init__(self, index, loss, metrics, fraction, variables, statistics, update_ops):
        self.index, self.loss, self.metrics = index, loss, metrics
        self.fraction, self.variables = fraction, variables
        self.statistics, self.update_ops = statistics, update_ops


class _ShardFraction:
    """A tower's weight n_i / B, made in each dtype it weighs (one op per dtype).

    NOTE: made in the weighed tensor's own dtype, never cast: a float32
    fraction such as 1/3 cast to float64 is 1e-8 (relative) off, and float64
    towers drifted that far from one device on the same batch."""

    def __init__(self, batch_input, num_shards, shard_index):
        self.batch_input, self.num_shards, self.shard_index = \
            batch_input, num_shards, shard_index
        self.by_dtype = {}

    def weigh(self, tensor):
        """``tensor * n_i / B``, exactly zero for an empty shard."""
        dtype = tensor.dtype.base_dtype
        if dtype not in (dtypes.float32, dtypes.float64):
            dtype = dtypes.float32      # cast by scale_or_zero (bfloat16, say)
        if dtype not in self.by_dtype:
            # beside the batch input, named at the root: not part of any tower
            with tensor.graph.name_scope(None), tensor.graph.control_dependencies(None):
                self.by_dtype[dtype] = sharding.shard_fraction(
                    self.batch_input, self.num_shards, self.shard_index, dtype=dtype)
        return sharding.scale_or_zero(tensor, self.by_dtype[dtype])


def default_devices():
    """Every visible GPU, else every logical CPU, as device strings."""
    from ..device import runtime
    devices = runtime.logical_devices()
    gpus = [d for d in devices if d.device_type == "GPU"]
    chosen = gpus or [d for d in devices if d.device_type == "CPU"]
    return [f"/{d.device_type.lower()}:{d.index}" for d in chosen]


def _flatten(inputs):
    from ..ops.constant_ops import convert_to_tensor
    flat = [convert_to_tensor(t) for t in (inputs if isinstance(inputs, (list, tuple))
                                           else [inputs])]
    if not flat:
        raise ValueError("DataParallel needs at least one input tensor to shard")
    return flat


def _unflatten(inputs, shards):
    if isinstance(inputs, (list, tuple)):
        return type(inputs)(shards)
    return shards[0]


def _loss_and_metrics(result):
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict):
        return result
    return result, {}


def _gradients(loss, variables):
    from .. import autodiff
    from ..ops.indexed_slices import densify
    grads = autodiff.gradients(loss, variables)
    missing = [var.name for var, grad in zip(variables, grads) if grad is None]
    if missing:
        raise ValueError(f"The tower loss does not depend on the variables {missing}; "
                         "create only trainable variables the loss uses inside tower_fn")
    # NOTE: an IndexedSlices gradient (tf.gather's, an embedding's) is made dense
    # in its tower: the all-reduce sums dense buckets, and every replica then
    # applies the same dense update (TF's MirroredStrategy gathers the slices
    # to one device instead).
    return [densify(grad) for grad in grads]


def _mirror(graph, tower_variables):
    """Make every tower's variables replicas of tower 0's: same shapes, and
    initialised from tower 0's values. Returns the per-tower lists."""
    first = tower_variables[0]
    for index, variables in enumerate(tower_variables[1:], start=1):
        if [(v.shape, v.dtype) for v in variables] != [(v.shape, v.dtype) for v in first]:
            raise ValueError(f"tower {index} created variables {[v.name for v in variables]} "
                             f"but tower 0 created {[v.name for v in first]}: tower_fn must "
                             "create the same variables on every call")
        for replica, source in zip(variables, first):
            _initialise_from(graph, replica, source)
            _hide_from_trainables(graph, replica)
    return tower_variables


def _initialise_from(graph, replica, source):
    """Replace ``replica``'s initializer by a copy of ``source`` after ``source``
    is initialised: the broadcast from replica 0."""
    with graph.control_dependencies([source.initializer]):
        value = source.read_value()
    replica._initializer = replica.assign(value, name="broadcast").op


def _hide_from_trainables(graph, replica):
    """Replicas are updated by the strategy, not by optimizers over
    tf.trainable_variables(): one logical variable, N physical copies."""
    trainables = graph.get_collection_ref(GraphKeys.TRAINABLE_VARIABLES)
    trainables[:] = [var for var in trainables if var is not replica]
