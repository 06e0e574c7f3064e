"""Kernels of the random ops: RandomStandardNormal, TruncatedNormal,
RandomUniform, RandomUniformInt and their "Dims" forms, which draw a shape
read from an int input (``tf.random.normal(tf.shape(x))``)::

    build_random_kernels(np)["RandomUniform"](ctx)()    # -> an array of draws

Each op draws from its own generator, a Session resource seeded from the
graph and op seeds (and the tower), so a run is repeatable. Apart from
towerflow/backends/kernels.py because random streams are a concern of their
own: seeding and the per-session generator state, not array arithmetic.
"""

import numpy as np

# NOTE: a module import, not `from .kernels import read_dims`: kernels.py
# imports this module while it is itself being imported.
from . import kernels as _kernels


def build_random_kernels(xp):
    def stream(ctx):
        seed = ctx.attrs["seed"]  # (graph seed, op seed[, tower]) or (None, None)
        seed = None if seed[0] is None else list(seed)
        return ctx.resource(("random", ctx.op), lambda: xp.random.default_rng(seed))

    def normal(ctx):
        rng, (mean, stddev), shape, dtype = _random_setup(ctx, stream)
        draw_dtype = _generator_dtype(dtype)
        return _of_shape(ctx, shape, lambda shape: (
            rng.standard_normal(shape, dtype=draw_dtype) * stddev + mean)
            .astype(dtype, copy=False))

    def truncated(ctx):
        rng, (mean, stddev), shape, dtype = _random_setup(ctx, stream)
        draw_dtype = _generator_dtype(dtype)

        def draw(shape):
            values = rng.standard_normal(shape, dtype=draw_dtype)
            outside = xp.abs(values) > 2
            while outside.any():  # redraw the tails until every value is within 2σ
                values[outside] = rng.standard_normal(int(outside.sum()), dtype=draw_dtype)
                outside = xp.abs(values) > 2
            return (values * stddev + mean).astype(dtype, copy=False)
        return _of_shape(ctx, shape, draw)

    def uniform(ctx):
        rng, (low, high), shape, dtype = _random_setup(ctx, stream)
        draw_dtype = _generator_dtype(dtype)
        return _of_shape(ctx, shape, lambda shape: (
            rng.random(shape, dtype=draw_dtype) * (high - low) + low)
            .astype(dtype, copy=False))

    def uniform_int(ctx):
        rng, (low, high), shape, dtype = _random_setup(ctx, stream)
        return _of_shape(ctx, shape,
                         lambda shape: rng.integers(low, high, size=shape, dtype=dtype))

    table = {"RandomStandardNormal": normal, "TruncatedNormal": truncated,
             "RandomUniform": uniform, "RandomUniformInt": uniform_int}
    # the "Dims" ops draw the same, of a shape read from their int input
    return {**table, **{op_type + "Dims": make for op_type, make in table.items()}}


def _of_shape(ctx, shape, draw):
    """The kernel: ``draw(shape)`` for a static shape; for ``shape=tf.shape(x)``
    (the op's one input is x) ``draw`` of x's run-time shape, read from the
    array's metadata, never from device memory."""
    if ctx.op.type.endswith("Dims"):
        return lambda dims: draw(tuple(_kernels.read_dims(dims)))
    if ctx.op.inputs:
        return lambda like: draw(like.shape)
    return lambda: draw(shape)


def _generator_dtype(dtype):
    """Generators draw float32 or float64 only; float16 is drawn as float32 and cast."""
    return dtype if dtype.itemsize >= 4 else np.dtype(np.float32)


def _random_setup(ctx, stream):
    return stream(ctx), ctx.attrs["params"], ctx.attrs["shape"], ctx.output_dtypes[0]
