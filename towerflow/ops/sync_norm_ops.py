"""Synchronized batch normalisation: the statistics of the *global* batch.

A synchronized batch norm in a tower computes, per channel, the sum and the
sum of squares of its shard and the shard's element count, packed into one
vector ``[sums, squared sums, count]`` of length 2C+1, and sums that vector
over every tower with one :func:`cross_tower_sum` (TF's
SyncBatchNormalization formulation). The global mean is sums / count and the
global variance squared sums / count - mean², so a tower with an empty shard
adds zeros and every tower normalises with what one device would compute on
the whole batch.

``cross_tower_sum`` is a placeholder that the data-parallel stage wires once
every tower exists (towerflow/parallel/sync_batch_norm.py): its value becomes
the communicator's sum of all towers' inputs (NCCL, MPI, a host sum). Until
then (one device, no ``DataParallel``) it is its input, so a synchronized
layer is a plain batch norm there, as TF's SyncBatchNormalization is without
a distribution strategy. Its gradient is again a cross-tower sum, of the
towers' gradients for the global statistics (in effect the all-reduced sums
of dy and dy * x of each channel), which makes the backward pass exact.
"""

import contextlib

from .. import dtypes
from ..graph.core import Tensor
from ..graph.registry import register_gradient, register_op
from . import array_ops, math_ops

CROSS_TOWER_SUM = "CrossTowerSum"


def _second_input_shape(inputs, attrs):
    return [(inputs[1].shape, inputs[1].dtype)]


# (value, local) -> value. ``local`` is this tower's part of the sum; ``value`` is
# ``local`` until the towers are wired, then the sum over every tower. The value
# is forwarded without a kernel run; ``local`` is an input only so the gradient
# reaches this tower's part (and never flows into the other towers' graphs).
register_op(CROSS_TOWER_SUM, _second_input_shape, kernel="Identity", forwards_input=True)


def cross_tower_sum(local, name=None, gradient_of=None):
    """``local`` summed over every tower of the data-parallel step that builds
    it (and over its MPI ranks); ``local`` itself outside one. ``gradient_of``
    names the cross-tower sum whose gradient this is."""
    attrs = {"gradient_of": gradient_of}
    op = local.graph.create_op(CROSS_TOWER_SUM, [local, local], attrs,
                               name=name or "cross_tower_sum")
    return op.outputs[0]


def _cross_tower_sum_grad(op, grad):
    # d(sum over towers)/d(tower i's part) is the sum of every tower's gradient
    return [None, cross_tower_sum(grad, name="cross_tower_sum_grad", gradient_of=op.name)]


register_gradient(CROSS_TOWER_SUM, _cross_tower_sum_grad)


# -- every batch norm synchronized (DataParallel(sync_batch_norm=True)) -------------

_SYNCHRONIZE_ALL = [False]


@contextlib.contextmanager
def synchronizing_every_batch_norm(enabled=True):
    """Batch-norm layers built inside normalise with global statistics, whatever
    their ``synchronized`` argument says (DataParallel's ``sync_batch_norm``)."""
    _SYNCHRONIZE_ALL.append(bool(enabled))
    try:
        yield
    finally:
        _SYNCHRONIZE_ALL.pop()


def every_batch_norm_synchronized():
    return _SYNCHRONIZE_ALL[-1]


# -- the layer's arithmetic -----------------------------------------------------------


def global_moments(x, stats_dtype):
    """(mean, biased variance, count) per channel (the last axis) of ``x`` over
    the global batch: one cross-tower sum of [sums, squared sums, count]."""
    channels = x.shape.dims[-1]
    values = math_ops.cast_if_needed(x, stats_dtype)
    axes = list(range(x.shape.ndims - 1))
    # elements per channel: the product of every axis but the last (int64: exact)
    size = math_ops.reduce_prod(array_ops.shape(values, out_type=dtypes.int64))
    count = math_ops.cast(size, stats_dtype) / float(channels)
    local = array_ops.concat([math_ops.reduce_sum(values, axes),
                              math_ops.reduce_sum(math_ops.square(values), axes),
                              array_ops.reshape(count, [1])], 0, name="local_moments")
    sums, squares, total = array_ops.split(cross_tower_sum(local), [channels, channels, 1])
    mean = sums / total
    variance = squares / total - math_ops.square(mean)
    return mean, variance, total


def synchronized_batch_norm(x, scale, offset, moving_mean, moving_variance, epsilon,
                            training, stats_dtype):
    """(y, batch mean, unbiased batch variance) of a batch norm over the last
    axis with the global batch's statistics in training; ``training`` is a
    Python bool (False is not handled here: it needs no statistics) or a bool
    tensor, which selects the moving statistics when false."""
    mean, variance, count = global_moments(x, stats_dtype)
    # the moving variance follows the unbiased variance, as FusedBatchNorm's
    unbiased = variance * (count / math_ops.maximum(count - 1.0, 1.0))
    if isinstance(training, Tensor):
        mean, variance, unbiased = (math_ops.where(training, batch, moving) for batch, moving
                                    in ((mean, moving_mean), (variance, moving_variance),
                                        (unbiased, moving_variance)))
    gain = math_ops.rsqrt(variance + epsilon) * scale
    values = math_ops.cast_if_needed(x, stats_dtype)
    y = (values - mean) * gain + offset
    return math_ops.cast_if_needed(y, x.dtype), mean, unbiased
