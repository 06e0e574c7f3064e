"""Splitting a global batch across towers, and weighting each tower's share.

A global batch of B examples is cut into N contiguous shards the way
``numpy.array_split`` does (sizes differ by at most one; shards may be empty
when B < N). Each tower's loss and gradients are weighted by n_i / B, so the
sum over towers is the mean over the *global* batch, and an empty shard
(whose mean is NaN) contributes exactly zero.
"""

from .. import dtypes
from ..backends.parallel_kernels import shard_bounds  # noqa: F401  (re-exported)
from ..graph.registry import register_not_differentiable, register_op
from ..graph.shapes import TensorShape


def _shard_shape(inputs, attrs):
    x = inputs[0]
    if x.shape.ndims == 0:
        raise ValueError(f"Cannot shard the scalar {x.name}: inputs need a batch axis")
    dims = x.shape.dims
    return [(TensorShape([None] + list(dims[1:])) if dims is not None else x.shape, x.dtype)]


def _fraction_shape(inputs, attrs):
    return [(TensorShape([]), attrs["dtype"])]


def _scale_shape(inputs, attrs):
    return [(inputs[0].shape, inputs[0].dtype)]


# (x) -> shard ``index`` of ``num_shards`` along axis 0 (a view).
register_op("ShardBatch", _shard_shape, aliases_input=True)
# (x) -> n_index / B as a scalar of ``dtype`` (0 when B is 0); attr examples: n_index.
register_op("ShardFraction", _fraction_shape)
# (t, weight) -> t * weight, or exact zeros when weight is 0 (even if t is NaN).
register_op("ScaleOrZero", _scale_shape)
register_not_differentiable("ShardBatch", "ShardFraction", "ScaleOrZero")


def shard(tensor, num_shards, index, name=None):
    """Shard ``index`` of ``tensor``'s batch axis, built beside ``tensor``."""
    graph = tensor.graph
    attrs = {"num_shards": int(num_shards), "index": int(index)}
    with graph.colocate_with(tensor.op):
        return graph.create_op("ShardBatch", [tensor], attrs,
                               name=name or f"shard_{index}").outputs[0]


def shard_fraction(tensor, num_shards, index, dtype=dtypes.float32, examples=False):
    """n_index / B for ``tensor``'s batch axis, as a scalar of ``dtype``;
    ``examples=True``: n_index itself (gradient accumulation weighs by it)."""
    graph = tensor.graph
    attrs = {"num_shards": int(num_shards), "index": int(index), "dtype": dtype}
    if examples:
        attrs["examples"] = True
    with graph.colocate_with(tensor.op):
        return graph.create_op("ShardFraction", [tensor], attrs,
                               name=f"shard_fraction_{index}").outputs[0]


def scale_or_zero(tensor, weight, name=None):
    """``tensor * weight``, exactly zero where ``weight`` is zero."""
    from ..ops import math_ops
    weight = math_ops.cast(weight, tensor.dtype) if weight.dtype is not tensor.dtype \
        else weight
    return tensor.graph.create_op("ScaleOrZero", [tensor, weight],
                                  name=name or "scale_or_zero").outputs[0]
