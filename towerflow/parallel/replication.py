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
MPI ranks, and between the GPUs of one process (NCCL, on a communication
stream of each GPU), each bucket's all-reduce overlaps the rest of the backward pass
(``overlap=False`` or TOWERFLOW_OVERLAP_ALLREDUCE=0: after it, blocking).

Synchronized batch norm (``sync_batch_norm=True``, or a layer's
``synchronized=True``): each such layer normalises with the statistics of
the global batch, summed across towers and ranks by the communicator (one
all-reduce per layer forward, one backward; see sync_batch_norm.py). Then
each tower differentiates its loss weighted by n_i / B (the weight enters
the backward pass, since a tower's gradient also carries the other towers'
losses through the shared statistics) instead of weighting its gradients.
With gradient accumulation (below) they work as PyTorch's SyncBatchNorm under
DDP's ``no_sync``: every micro-batch's forward and backward pass all-reduce
the statistics of its global micro-batch (the moving statistics move once
per micro-batch), each tower's loss is still weighted by n_i / B (a weight of
n_i would shrink a loss scale's float16 headroom by log2(n_i) bits), its
unscaled gradients are multiplied by B (the global micro-batch's examples)
into the per-example sums accumulation adds, and the gradients are still
all-reduced once per update.

Gradient accumulation (``accumulation_steps=K``, see accumulation.py): the
step's ``accumulate_op`` adds a micro-batch's gradients into per-tower
accumulators, with no collective (DDP's ``no_sync``); ``train_op`` adds the
update's last micro-batch, all-reduces the sums once and applies their mean
over every example of the update. Run ``step.op_for(i)`` for micro-batch i::

    step = strategy.minimize(tower_fn, (images, labels), optimizer, global_step=step)
    sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
    for i, (x, y) in enumerate(micro_batches):      # K of them per update
        sess.run(step.op_for(i), feed_dict={images: x, labels: y})
"""

import collections
import contextlib

from .. import dtypes
from ..graph import core
from ..graph.core import GraphKeys
from ..log import logger
from ..ops import array_ops, math_ops, sync_norm_ops, variable_scope
from . import (
    accumulation,
    buckets,
    communicators,
    mpi,
    mpi_ops,
    sharding,
    sync_batch_norm,
)


class TrainStep(collections.namedtuple(
        "TrainStep", ["train_op", "loss", "metrics", "tower_losses", "variables", "replicas",
                      "accumulate_op", "accumulation_steps"], defaults=(None, 1))):
    """What ``DataParallel.minimize`` builds. With accumulation (K > 1),
    ``accumulate_op`` adds a micro-batch without a collective and ``train_op``
    adds the last micro-batch of an update and applies it; else
    ``accumulate_op`` is None and ``train_op`` is one whole step."""

    __slots__ = ()

    def op_for(self, micro_batch):
        """The op to run for micro-batch ``micro_batch`` (counted from 0 at an
        update boundary): ``train_op`` for every K-th, else ``accumulate_op``.
        Run ``train_op`` earlier to end a shorter update (an epoch's end): it
        applies the mean over the examples accumulated so far.

        >>> [step.op_for(i).name for i in range(4)]      # accumulation_steps=2
        ['accumulate_micro_batch', 'apply_accumulated', 'accumulate_micro_batch', ...]
        """
        if (micro_batch + 1) % self.accumulation_steps == 0:
            return self.train_op
        return self.accumulate_op


class DataParallel:
    """Towers on ``devices`` (default: every GPU, else every logical CPU)."""

    def __init__(self, devices=None, all_reduce="auto", bucket_bytes=4 << 20,
                 timeout=None, sync_statistics=False, sync_batch_norm=False,
                 accumulation_steps=1, overlap=None):
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
        self.sync_batch_norm = bool(sync_batch_norm)
        # micro-batches per update (accumulation.py); 1: every step applies
        self.accumulation_steps = accumulation.check_accumulation_steps(accumulation_steps)
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
        if self.sync_batch_norm and not towers[0].statistic_sums:
            logger.warning("sync_batch_norm=True, but the model has no batch norm in "
                           "training mode: nothing to synchronize")
        self._wire_statistics(graph, [tower.statistic_sums for tower in towers])
        if self.num_ranks > 1:  # first, so the other towers copy the broadcast values
            self._broadcast_from_rank_0(graph, towers[0].variables + towers[0].statistics)
        replicas = _mirror(graph, [tower.variables for tower in towers])
        statistics = _mirror(graph, [tower.statistics for tower in towers])
        accumulate_op, accumulators = None, None
        if self.accumulation_steps > 1:
            reduced, accumulators, accumulate_op = self._accumulated_gradients(
                graph, towers, replicas, optimizer, flat_inputs[0])
        else:
            reduced = self._reduced_gradients(graph, towers, replicas, optimizer)
        grads_and_vars = [(grad, var) for tower_grads, tower_vars in zip(reduced, replicas)
                          for grad, var in zip(tower_grads, tower_vars)]
        # Each tower's own updates (batch-norm moving statistics) run with the step.
        with graph.control_dependencies([op for t in towers for op in t.update_ops]):
            train_op = optimizer.apply_gradients(grads_and_vars, global_step=global_step)
        if accumulators is not None:
            train_op = accumulators.zero_after(graph, train_op)
        if self.sync_statistics and statistics[0]:
            train_op = self._average_statistics(graph, statistics, train_op)
        loss, metrics = self._global_values(graph, towers)
        if getattr(optimizer, "step_skipped", None) is not None:   # loss scaling's metrics
            metrics.update(loss_scale=optimizer.scale_used,
                           step_skipped=optimizer.step_skipped)
        return TrainStep(train_op, loss, metrics, [tower.loss for tower in towers],
                         replicas[0], replicas, accumulate_op, self.accumulation_steps)

    # -- building ------------------------------------------------------------------

    def _build_tower(self, graph, tower_fn, inputs, flat_inputs, index):
        before = {key: set(map(id, graph.get_collection(key))) for key in _WATCHED}
        first_op = len(graph.get_operations())
        shard_index = self.rank * self.num_towers + index
        shards = [sharding.shard(tensor, self.num_shards, shard_index) for tensor in flat_inputs]
        fraction = _ShardFraction(flat_inputs[0], self.num_shards, shard_index)
        with graph.device(self.devices[index]), \
                graph.name_scope(f"tower_{index}") as tower_scope, \
                _tower_variable_scope(tower_scope), _tower_index(graph, index), \
                sync_norm_ops.synchronizing_every_batch_norm(self.sync_batch_norm):
            loss, metrics = _loss_and_metrics(tower_fn(_unflatten(inputs, shards)))
        created = {key: [item for item in graph.get_collection(key) if id(item) not in before[key]]
                   for key in _WATCHED}
        trainable = created[GraphKeys.TRAINABLE_VARIABLES]
        statistics = [var for var in created[GraphKeys.GLOBAL_VARIABLES]
                      if all(var is not other for other in trainable)]
        examples = _ShardFraction(flat_inputs[0], self.num_shards, shard_index, examples=True)
        tower = _Tower(index, loss, metrics, fraction, trainable, statistics,
                       created[GraphKeys.UPDATE_OPS], examples)
        tower.statistic_sums = sync_batch_norm.new_sums(graph, first_op)
        return tower

    def _wire_statistics(self, graph, tower_sums, forward_sums=None):
        """Synchronized batch norms: each tower's k-th cross-tower sum forwards
        the communicator's sum over every tower's (and rank's) k-th one."""
        if self.num_shards > 1 and tower_sums[0]:
            sync_batch_norm.wire(graph, tower_sums, self.communicator, self.devices,
                                 forward_sums)

    def _average_statistics(self, graph, statistics, after):
        """After the step, set every replica of each non-trainable variable (batch
        norm's moving statistics) to their mean over all towers of all ranks."""
        assigns = []
        with graph.control_dependencies([after]), graph.name_scope("sync_statistics"):
            for replicas in zip(*statistics):
                with graph.device("/cpu:0"):
                    total = math_ops.add_n([var.read_value() for var in replicas])
                    if self.num_ranks > 1:
                        total = mpi_ops.all_reduce_op(total, self.timeout)
                    mean = total * (1.0 / self.num_shards)
                assigns += [var.assign(mean).op for var in replicas]
        return array_ops.group(*assigns, name="train_step")

    def _reduced_gradients(self, graph, towers, replicas, optimizer):
        """Per tower, the gradients of the global-batch mean loss, summed across
        towers, in the order of ``replicas[tower]``."""
        weighted = self._tower_gradients(graph, towers, replicas, optimizer, "fraction")
        plan = buckets.plan_buckets(weighted[0], self.bucket_bytes, backward=True)
        packed = [self._pack(graph, grads, plan, rank) for rank, grads in enumerate(weighted)]
        summed = self.communicator.all_reduce(packed, self.devices, graph)
        return [self._unpack(graph, sums, grads, plan, rank)
                for rank, (sums, grads) in enumerate(zip(summed, weighted))]

    def _accumulated_gradients(self, graph, towers, replicas, optimizer, batch_input):
        """Like ``_reduced_gradients`` over the micro-batches of an update (see
        accumulation.py): each tower's per-example gradient sums go into its
        accumulators; the accumulated sums are all-reduced once and divided by
        the examples counted. Returns the per-tower gradients, the
        Accumulators and the op that only accumulates a micro-batch."""
        summed_per_tower = self._tower_gradients(graph, towers, replicas, optimizer, "examples")
        plan = buckets.plan_buckets(summed_per_tower[0], self.bucket_bytes,
                                  backward=True)
        packed = [self._pack(graph, grads, plan, rank)
                  for rank, grads in enumerate(summed_per_tower)]
        accumulators = accumulation.Accumulators(graph, self.devices, packed)
        with graph.name_scope(None), graph.control_dependencies(None):
            batch_examples = sharding.shard_fraction(batch_input, 1, 0, dtypes.float64,
                                                     examples=True)
        totals, counts = accumulators.add(graph, packed, batch_examples)
        accumulate_op = array_ops.group(
            *[t.op for tower in totals for t in tower], *[c.op for c in counts],
            *[op for tower in towers for op in tower.update_ops],
            name="accumulate_micro_batch")
        summed = self.communicator.all_reduce(totals, self.devices, graph)
        means = accumulators.means(graph, summed, counts)
        reduced = [self._unpack(graph, tower_means, grads, plan, rank)
                   for rank, (tower_means, grads) in enumerate(zip(means, summed_per_tower))]
        return reduced, accumulators, accumulate_op

    def _tower_gradients(self, graph, towers, replicas, optimizer, weight):
        """Per tower, its loss's gradients (order of ``replicas[tower]``) weighted
        by ``weight``: 'fraction' (n_i / B: they sum to the global batch's mean
        gradient) or 'examples' (n_i: the shard's per-example gradient sum). A
        loss-scaling optimizer (towerflow.mixed_precision) scales each tower's
        loss and unscales its gradients before the reduction. With synchronized
        batch norms n_i / B enters the backward pass (see above), for 'examples'
        the unscaled gradients are then multiplied by B (the global batch's
        examples), and the towers' gradients of the cross-tower sums are wired
        together: with accumulation they run in every micro-batch."""
        weighted, gradient_sums = [], []
        scaled = hasattr(optimizer, "get_scaled_loss")
        synchronized = bool(towers[0].statistic_sums)
        batch = _ShardFraction(towers[0].fraction.batch_input, 1, 0, examples=True)
        for tower, variables in zip(towers, replicas):
            weigher = tower.fraction if weight == "fraction" else tower.examples
            first_op = len(graph.get_operations())
            # NOTE: never n_i as the seed: under loss scaling the float16 backward
            # would run at loss_scale x n_i and overflow log2(n_i) bits early
            loss_weight = tower.fraction.of(tower.loss.dtype) if synchronized else None
            with graph.device(self.devices[tower.index]), \
                    graph.name_scope(f"tower_{tower.index}_gradients"):
                loss = optimizer.get_scaled_loss(tower.loss) if scaled else tower.loss
                grads = _gradients(loss, variables, loss_weight)
                if scaled:
                    grads = optimizer.get_unscaled_gradients(grads)
                if not synchronized:
                    grads = [weigher.weigh(grad) for grad in grads]
                elif weight == "examples":      # (n_i / B) x B, in the master dtype
                    grads = [batch.weigh(grad) for grad in grads]
                weighted.append(grads)
            if synchronized:
                gradient_sums.append(sync_batch_norm.new_sums(graph, first_op, gradients=True))
        if synchronized:
            self._wire_statistics(graph, gradient_sums, [t.statistic_sums for t in towers])
        return weighted

    def _broadcast_from_rank_0(self, graph, variables):
        """Every rank's tower 0 starts from rank 0's initial values."""
        signature = [(tuple(var.shape.dims), var.dtype.name) for var in variables]
        for index, var in enumerate(variables):
            with graph.device("/cpu:0"):
                value = mpi_ops.broadcast_op(var.initial_value, self.timeout,
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
                values = {name: mpi_ops.all_reduce_op(value, self.timeout, name=f"{name}_sum")
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
    def __init__(self, index, loss, metrics, fraction, variables, statistics, update_ops,
                 examples):
        self.index, self.loss, self.metrics = index, loss, metrics
        self.fraction, self.examples, self.variables = fraction, examples, variables
        self.statistics, self.update_ops = statistics, update_ops
        self.statistic_sums = []    # its synchronized batch norms' cross-tower sums


class _ShardFraction:
    """A tower's weight n_i / B (``examples=True``: n_i), made in each dtype it
    weighs (one op per dtype).

    NOTE: made in the weighed tensor's own dtype, never cast: a float32
    fraction such as 1/3 cast to float64 is 1e-8 (relative) off, and float64
    towers drifted that far from one device on the same batch."""

    def __init__(self, batch_input, num_shards, shard_index, examples=False):
        self.batch_input, self.num_shards, self.shard_index = \
            batch_input, num_shards, shard_index
        self.examples = examples
        self.by_dtype = {}

    def weigh(self, tensor):
        """``tensor * n_i / B``, exactly zero for an empty shard."""
        return sharding.scale_or_zero(tensor, self.of(tensor.dtype))

    def of(self, dtype):
        """n_i / B as a scalar of ``dtype`` (float32 for other than float64)."""
        dtype = dtype.base_dtype
        if dtype not in (dtypes.float32, dtypes.float64):
            dtype = dtypes.float32      # cast by scale_or_zero (bfloat16, say)
        if dtype not in self.by_dtype:
            # beside the batch input, named at the root: not part of any tower
            graph = self.batch_input.graph
            with graph.name_scope(None), graph.control_dependencies(None):
                self.by_dtype[dtype] = sharding.shard_fraction(
                    self.batch_input, self.num_shards, self.shard_index, dtype=dtype,
                    examples=self.examples)
        return self.by_dtype[dtype]


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


def _gradients(loss, variables, weight=None):
    """The gradients of ``loss`` (times ``weight``, a scalar, when given)."""
    from .. import autodiff
    from ..ops.indexed_slices import densify
    if weight is not None:
        weight = [math_ops.cast_if_needed(weight, loss.dtype)]
    grads = autodiff.gradients(loss, variables, grad_ys=weight)
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
