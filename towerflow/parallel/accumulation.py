"""Gradient accumulation: K micro-batches per update, one all-reduce per update
(``DataParallel(..., accumulation_steps=K)``; PyTorch DDP's ``no_sync``,
Horovod's ``backward_passes_per_step``).

Each tower keeps, in local variables on its own device, one accumulator per
gradient bucket and a count of the examples seen. A micro-batch adds each
tower's *sum* over its shard of the per-example gradients (the shard's mean
gradient times its example count n_i) to the tower's accumulators and the
global micro-batch's example count to the tower's count; no collective runs
for the gradients (synchronized batch norms still all-reduce their statistics
in every micro-batch, as PyTorch's SyncBatchNorm under ``no_sync``).
The update's micro-batch adds its own, then the accumulated sums are
all-reduced, once, divided by the examples counted (the mean over every
example of the update), applied, and the accumulators zeroed.

So the update equals one step on the concatenation of the micro-batches,
up to rounding, whatever their sizes: a ragged micro-batch (an epoch's
last) weighs each of its examples once, as in the big batch, not 1/K.
"""

import operator

from .. import dtypes
from ..graph.core import GraphKeys
from ..ops import array_ops, constant_ops, math_ops, state_ops


class Accumulators:
    """Per tower, one zeroed accumulator per bucket of ``tower_buckets[0]`` and
    an example count, on ``devices[tower]``; see the module docstring."""

    def __init__(self, graph, devices, tower_buckets):
        self.devices = list(devices)
        self.sums, self.examples = [], []
        for index, (device, buckets) in enumerate(zip(self.devices, tower_buckets)):
            with graph.device(device), graph.name_scope(f"tower_{index}_accumulators"):
                self.sums.append([_local_zeros(bucket.shape.as_list(), bucket.dtype, f"bucket_{number}")
                                  for number, bucket in enumerate(buckets)])
                self.examples.append(_local_zeros([], dtypes.float64, "examples"))

    @property
    def variables(self):
        """Every accumulator and count (all local variables)."""
        return [var for sums, count in zip(self.sums, self.examples) for var in sums + [count]]

    def add(self, graph, tower_buckets, batch_examples):
        """Add a micro-batch: ``tower_buckets[t]``, tower t's per-example gradient
        sums; ``batch_examples``, the examples of the global micro-batch. Returns,
        per tower, the accumulated sums and the example count after the add (their
        ops are the micro-batch's whole work)."""
        totals, counts = [], []
        for index, (buckets, sums, count) in enumerate(
                zip(tower_buckets, self.sums, self.examples)):
            with graph.device(self.devices[index]), \
                    graph.name_scope(f"tower_{index}_accumulate"):
                totals.append([var.assign_add(bucket) for var, bucket in zip(sums, buckets)])
                counts.append(count.assign_add(math_ops.cast(batch_examples, dtypes.float64)))
        return totals, counts

    def means(self, graph, tower_sums, counts):
        """Per tower, all-reduced bucket sums divided by the examples counted (one
        rounding; 0 when none were: the sums are then exactly 0)."""
        means = []
        for index, (sums, count) in enumerate(zip(tower_sums, counts)):
            with graph.device(self.devices[index]), graph.name_scope(f"tower_{index}_mean"):
                examples = math_ops.maximum(count, 1.0)
                means.append([math_ops.divide(total, math_ops.cast(examples, total.dtype))
                              for total in sums])
        return means

    def zero_after(self, graph, op):
        """An op that runs ``op``, then zeroes every accumulator and count."""
        with graph.control_dependencies([op]), graph.name_scope("zero_accumulators"):
            resets = []
            for device, var in zip(self._device_of_each(), self.variables):
                with graph.device(device):
                    resets.append(var.assign(_zeros_like(var)).op)
        return array_ops.group(*resets, name="apply_accumulated")

    def _device_of_each(self):
        return [device for device, sums in zip(self.devices, self.sums)
                for _ in range(len(sums) + 1)]


def _local_zeros(shape, dtype, name):
    """A zero-initialised local variable: per Session, never saved (a checkpoint
    is taken between updates, when it is zero), so a run with another tower
    count or bucket plan restores the same checkpoint."""
    return state_ops.Variable(constant_ops.zeros(shape, dtype), trainable=False, name=name,
                              collections=[GraphKeys.LOCAL_VARIABLES])


def _zeros_like(var):
    return constant_ops.zeros(var.shape.as_list(), var.dtype.base_dtype)


def check_accumulation_steps(value):
    """``value`` as an int >= 1, else ValueError naming it.

    >>> check_accumulation_steps(4)
    4
    """
    try:
        steps = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        steps = None
    if steps is None or steps < 1:
        raise ValueError(f"accumulation_steps must be a whole number >= 1 (micro-batches "
                         f"per update), got {value!r}")
    return steps
