"""Gradient buckets: small tensors packed into flat buffers so that one
collective (or one copy) carries many of them, in a fixed order on every
tower.

``plan_buckets`` groups tensor indices greedily in order until a bucket would
exceed ``bucket_bytes``; a tensor larger than that gets a bucket of its own.
``backward=True`` takes the tensors last to first: gradients of variables in
forward order are produced in that order by the backward pass, so the first
bucket is complete first and its all-reduce can start while the backward pass
goes on (DDP's buckets, in reverse order of the parameters).
"""

from ..graph.registry import register_not_differentiable, register_op
from ..graph.shapes import TensorShape


def plan_buckets(tensors, bucket_bytes, backward=False):
    """Lists of indices into ``tensors``, each list one bucket; in order, or
    last to first with ``backward``."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    indices = range(len(tensors) - 1, -1, -1) if backward else range(len(tensors))
    buckets, current, size = [], [], 0
    for index in indices:
        tensor = tensors[index]
        nbytes = tensor.shape.num_elements() * tensor.dtype.size
        if current and size + nbytes > bucket_bytes:
            buckets.append(current)
            current, size = [], 0
        current.append(index)
        size += nbytes
    if current:
        buckets.append(current)
    return buckets


def _pack_shape(inputs, attrs):
    dtype = inputs[0].dtype
    if any(t.dtype is not dtype for t in inputs):
        raise TypeError("a bucket holds tensors of one dtype, got "
                        f"{sorted({t.dtype.name for t in inputs})}")
    return [(TensorShape([sum(t.shape.num_elements() for t in inputs)]), dtype)]


def _unpack_shape(inputs, attrs):
    return [(TensorShape(shape), inputs[0].dtype) for shape in attrs["shapes"]]


# (*tensors) -> one flat vector of them all, in order.
register_op("PackBucket", _pack_shape)
# (flat) -> the tensors again, shaped by attr ``shapes`` (views of flat).
register_op("UnpackBucket", _unpack_shape, aliases_input=True, variadic_outputs=True)
register_not_differentiable("PackBucket", "UnpackBucket")


def pack(tensors, name="pack_bucket"):
    for tensor in tensors:
        if not tensor.shape.is_fully_defined():
            raise ValueError(f"Cannot bucket {tensor.name} of shape {tensor.shape}: "
                             "gradients of variables have known shapes")
    return tensors[0].graph.create_op("PackBucket", list(tensors), name=name).outputs[0]


def unpack(flat, like, name="unpack_bucket"):
    """``flat`` cut back into tensors shaped like ``like``."""
    attrs = {"shapes": tuple(tuple(t.shape.dims) for t in like)}
    return list(flat.graph.create_op("UnpackBucket", [flat], attrs, name=name).outputs)
