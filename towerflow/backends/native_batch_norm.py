"""Training-mode batch norm on the CPU through the compiled kernels of
``native_batch_norm.c`` (in the ``_native`` extension), threaded over the
CPU pool: FusedBatchNorm, FusedBatchNormGrad and fusion.py's CPU chains
``_FusedBatchNormRelu`` (the ReLU applied as the output is written) and
``_ReluGradBatchNormGrad`` (the ReLU's gradient mask applied as the
gradient is read); and for batch_norm_pool.py the chains with a max pool
after the ReLU: its forward (one pass that normalises, rectifies and pools)
and its gradient (the pool's routed gradient made a block of rows at a
time, where the sums and the output pass read it).

Each runs in two passes over the [rows, C] data, with no full-size
temporaries (the NumPy kernels of fused_kernels.py make about eight):

1. per-channel sums over fixed blocks of rows, in float64, one pair of
   partial sums per block, the blocks shared out to the pool's threads;
   the partials are then added in block order, so the result is the same
   bits run after run and whatever the thread count;
2. the output, each row from per-channel coefficients.

The forward variance is ``E[d^2] - E[d]^2`` of ``d = x - shift`` with
``shift`` the batch's first row (a sample of each channel), summed in
float64: in float32 nothing cancels. Anything else (inference, a fed
training flag, float16, strided arrays, an empty batch, TOWERFLOW_NATIVE=0)
runs the NumPy kernels, with the ReLU or its mask as separate NumPy passes::

    kernels = cpu_batch_norm_kernels(table, CPU_POOL)   # numpy_backend.py
"""

import numpy as np

from . import native
from .cpu_threads import SERIAL
from .fused_kernels import batch_norm_chain_kernels

# Values per block of partial sums (a block is this many values' rows, at
# least one row): a function of the shape only, never of the thread count.
BLOCK_VALUES = 1 << 15


def block_rows(rows, channels):
    """Rows per block of partial sums for [rows, channels] data.

    >>> block_rows(65536, 64)
    512
    """
    return max(1, min(rows, BLOCK_VALUES // max(channels, 1)))


def takes(*arrays):
    """Whether the compiled kernels take these arrays (None skipped): on,
    C-contiguous NumPy arrays of one float dtype, with at least one row."""
    present = [array for array in arrays if array is not None]
    return native.float_arrays(*present) and present[0].ndim >= 1 and present[0].size > 0


def batch_norm_training(x, scale, offset, epsilon, relu=False, parallel=SERIAL):
    """FusedBatchNorm in training, then max(y, 0) if ``relu``: (y, batch
    mean, unbiased batch variance, saved mean, saved inv_std), or None where
    the compiled kernels do not take the arrays (see :func:`takes`)::

        y, mean, variance, _, inv_std = batch_norm_training(x, scale, offset, 1e-3)
    """
    if not takes(x, scale, offset) or scale.shape != (x.shape[-1],) or \
            offset.shape != scale.shape:
        return None
    rows2d = x.reshape(-1, x.shape[-1])
    coefficients, statistics = _statistics(rows2d, scale, offset, epsilon, parallel)
    y = np.empty_like(rows2d)
    _over_rows(parallel, rows2d, lambda geometry: native.batch_norm_apply(
        geometry, rows2d, coefficients, y, relu))
    return (y.reshape(x.shape),) + statistics


def batch_norm_relu_pool_training(x, scale, offset, epsilon, lay, parallel=SERIAL):
    """FusedBatchNorm in training → Relu → MaxPool of the windows ``lay``
    (window_geometry) as one pass after the sums: (pooled, winner bits,
    batch mean, unbiased batch variance, saved mean, saved inv_std), the
    pooled values and bits those of MaxPool on :func:`batch_norm_training`'s
    output, bit for bit; None where the compiled kernels do not take the
    arrays or the windows do not tile the input with at most 8 taps::

        pooled, winners, *statistics = batch_norm_relu_pool_training(
            x, scale, offset, 1e-3, layout_of(x.shape))
    """
    if x.ndim != 4 or not lay.tiles or not 0 < len(lay.taps) <= 8 or \
            not takes(x, scale, offset) or \
            scale.shape != (x.shape[-1],) or offset.shape != scale.shape:
        return None
    rows2d = x.reshape(-1, x.shape[-1])
    coefficients, statistics = _statistics(rows2d, scale, offset, epsilon, parallel)
    count, height, width, channels = x.shape
    pooled = np.empty((count, lay.out_h, lay.out_w, channels), x.dtype)
    winners = np.empty(pooled.shape, np.uint8)

    def pool_images(part):
        start, stop = count * part // parts, count * (part + 1) // parts
        geometry = (stop - start, height, width, channels) + tuple(lay.window) + \
            (lay.out_h, lay.out_w)
        native.batch_norm_pool(geometry, x[start:stop], coefficients, pooled[start:stop],
                               winners[start:stop])
    parts = parallel.parts(count, x.size)
    parallel.run_compiled(pool_images, parts)
    return (pooled, winners) + statistics


def _statistics(rows2d, scale, offset, epsilon, parallel):
    """([mean, gain, offset] in the rows' dtype, the four statistics outputs)."""
    count = rows2d.shape[0]
    shift = rows2d[0]
    sums = _sums(rows2d, shift, None, None, parallel)
    mean_shift = sums[0] / count
    variance = np.maximum(sums[1] / count - mean_shift * mean_shift, 0.0)
    mean = shift + mean_shift
    inv_std = 1.0 / np.sqrt(variance + epsilon)
    coefficients = np.array([mean, scale * inv_std, offset], dtype=rows2d.dtype)
    moving_variance = variance * (count / max(count - 1, 1))
    return coefficients, (coefficients[0].copy(), moving_variance.astype(rows2d.dtype),
                          coefficients[0].copy(), inv_std.astype(rows2d.dtype))


def batch_norm_grad_training(grad, relu_output, x, scale, mean, inv_std, parallel=SERIAL):
    """FusedBatchNormGrad in training of ``grad`` masked by ``relu_output >
    0`` first (ReluGrad) unless that is None: (dx, dscale, doffset), or None
    where the compiled kernels do not take the arrays::

        dx, dscale, doffset = batch_norm_grad_training(grad, y, x, scale, mean, inv_std)
    """
    if not takes(grad, relu_output, x, scale, mean, inv_std) or grad.shape != x.shape or \
            (relu_output is not None and relu_output.shape != x.shape) or \
            not _per_channel(x, scale, mean, inv_std):
        return None
    channels = x.shape[-1]
    relu2d = None if relu_output is None else relu_output.reshape(-1, channels)
    return _batch_norm_grad(grad.reshape(-1, channels), relu2d, None, x, scale, mean, inv_std,
                            parallel)


def batch_norm_grad_after_pool(winners, grad, pooled, x, scale, mean, inv_std, lay,
                               parallel=SERIAL):
    """FusedBatchNormGrad in training of the gradient that MaxPoolGrad →
    ReluGrad make of the pool's ``winners``, its gradient ``grad`` and its
    max ``pooled`` (pool_kernels' _MaxPoolGradRelu: the windows ``lay``
    tiling x), without making that full-size gradient: (dx, dscale,
    doffset), the separate kernels' bit for bit; or None where the compiled
    kernels do not take the arrays or the windows do not tile x with at
    most 8 taps::

        dx, dscale, doffset = batch_norm_grad_after_pool(
            winners, grad, pooled, x, scale, mean, inv_std, layout_of(x.shape))
    """
    pooled_shape = (x.shape[0], lay.out_h, lay.out_w, x.shape[-1]) if x.ndim == 4 else None
    # (max_pool_grad's own checks: its dx would have x's shape)
    if not takes(grad, pooled, x, scale, mean, inv_std) or \
            not native.max_pool_grad_applies(winners, grad, lay, x, pooled) or \
            any(array.shape != pooled_shape for array in (winners, grad, pooled)) or \
            not _per_channel(x, scale, mean, inv_std):
        return None
    pool = (native.pool_geometry(x, lay), winners, pooled)
    return _batch_norm_grad(grad, None, pool, x, scale, mean, inv_std, parallel)


def _per_channel(x, *vectors):
    return all(vector.shape == (x.shape[-1],) for vector in vectors)


def _batch_norm_grad(grad, relu, pool, x, scale, mean, inv_std, parallel):
    """(dx, dscale, doffset) of ``grad`` ([rows, C], masked by ``relu`` unless
    None), or with ``pool`` of MaxPool's gradient ``grad`` routed (see
    native.batch_norm_sums)."""
    rows2d = x.reshape(-1, x.shape[-1])
    count = rows2d.shape[0]
    doffset, centered_sum = _sums(rows2d, mean, grad, relu, parallel, pool)
    inv_std64 = inv_std.astype(np.float64)
    dscale = centered_sum * inv_std64
    gain = scale * inv_std64
    coefficients = np.array([mean, gain, gain * inv_std64 * dscale * (-1.0 / count),
                             gain * doffset * (1.0 / count)], dtype=x.dtype)
    dx = np.empty_like(rows2d)
    _over_rows(parallel, rows2d, lambda geometry: native.batch_norm_grad_apply(
        geometry, grad, relu, rows2d, coefficients, dx, pool))
    return dx.reshape(x.shape), dscale.astype(x.dtype), doffset.astype(x.dtype)


def _sums(rows2d, shift, grad2d, relu2d, parallel, pool=None):
    """[2, C] float64 sums over the rows (see native_batch_norm.c's batch_norm_sums),
    block partials added in block order."""
    count, channels = rows2d.shape
    per_block = block_rows(count, channels)
    blocks = -(-count // per_block)
    partials = np.empty((blocks, 2, channels))
    parts = parallel.parts(blocks, rows2d.size)

    def add_blocks(part):
        first, stop = blocks * part // parts, blocks * (part + 1) // parts
        native.batch_norm_sums((count, channels, per_block, first, stop), rows2d, shift,
                               grad2d, relu2d, partials, pool)
    parallel.run_compiled(add_blocks, parts)
    # NOTE: a reduction over the leading axis adds the blocks one after
    # another, in order (no pairwise regrouping that could depend on threads).
    return partials.sum(axis=0)


def _over_rows(parallel, rows2d, apply):
    """``apply((rows, C, first, stop))`` over row ranges covering the rows."""
    count, channels = rows2d.shape
    parts = parallel.parts(count, rows2d.size)

    def rows_of(part):
        apply((count, channels, count * part // parts, count * (part + 1) // parts))
    parallel.run_compiled(rows_of, parts)


# -- the kernel table ------------------------------------------------------------------


def cpu_batch_norm_kernels(table, parallel):
    """Makers for FusedBatchNorm, FusedBatchNormGrad and the fused CPU chains
    ``_FusedBatchNormRelu`` / ``_ReluGradBatchNormGrad``, over ``table``'s
    (kernels.build_kernels(np)) NumPy makers, which run whatever the
    compiled kernels do not take::

        KERNELS.update(cpu_batch_norm_kernels(KERNELS, CPU_POOL))
    """
    def train(x, scale, offset, epsilon, relu):
        return batch_norm_training(x, scale, offset, epsilon, relu, parallel)

    def train_grad(grad, relu_output, x, scale, mean, inv_std):
        return batch_norm_grad_training(grad, relu_output, x, scale, mean, inv_std, parallel)
    return batch_norm_chain_kernels(np, table, train, train_grad, takes_op=one_dtype)


def one_dtype(ctx):
    """Whether all the op's outputs share one dtype (the compiled kernels
    write every output in the input's dtype)."""
    return len({np.dtype(dtype) for dtype in ctx.output_dtypes}) == 1
