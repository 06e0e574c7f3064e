"""Kernels of the tower ops (sharding, weighting, gradient buckets), written
against ``xp``."""

import math


def shard_bounds(batch, num_shards, index):
    """[start, end) of shard ``index`` of ``batch`` examples (numpy.array_split)."""
    base, extra = divmod(batch, num_shards)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


def build_parallel_kernels(xp):
    """The tower-op kernel table for array module ``xp``."""
    def shard(ctx):
        count, index = ctx.attrs["num_shards"], ctx.attrs["index"]

        def take(x):
            start, end = shard_bounds(x.shape[0], count, index)
            return x[start:end]
        return take

    def fraction(ctx):
        count, index, dtype = ctx.attrs["num_shards"], ctx.attrs["index"], ctx.output_dtypes[0]
        examples = ctx.attrs.get("examples", False)     # n_i itself, not n_i / B

        def share(x):
            start, end = shard_bounds(x.shape[0], count, index)
            value = end - start if examples else \
                (end - start) / x.shape[0] if x.shape[0] else 0.0
            # NOTE: an array of this device's (made by a fill kernel, so a CUDA
            # graph can hold it), not a host scalar copied in each step.
            return xp.full((), value, dtype)
        return share

    def scale_or_zero(t, weight):
        # NOTE: an empty shard's mean is NaN, and NaN * 0 is NaN: exact zeros
        # are selected where the weight is 0, on the device (no host read).
        product = xp.multiply(t, weight, out=xp.empty_like(t))   # an array, even 0-d
        xp.copyto(product, 0, where=(weight == 0))
        return product

    def pack(*tensors):
        return xp.concatenate([t.reshape(-1) for t in tensors])

    def unpack(ctx):
        shapes = ctx.attrs["shapes"]
        sizes = [math.prod(shape) for shape in shapes]

        def split(flat):
            pieces, start = [], 0
            for shape, size in zip(shapes, sizes):
                pieces.append(flat[start:start + size].reshape(shape))
                start += size
            return tuple(pieces)
        return split

    return {"ShardBatch": shard, "ShardFraction": fraction,
            "ScaleOrZero": lambda ctx: scale_or_zero, "PackBucket": lambda ctx: pack,
            "UnpackBucket": unpack}
