"""``_FusedBatchNormReluPool``: fusion.py's chain FusedBatchNorm (training)
→ Relu → MaxPool whose pooled winners only masked gradients read, for any
kernel table (written over the table's own kernels, so CuPy's too).

Its outputs are the MaxPool's (pooled, winners) then the batch norm's four
statistics; the full-size ReLU output is never kept (only its shape was
read, and the batch norm's input stands in for that). Where the CPU's
compiled kernels take the arrays, the output pass normalises, applies the
ReLU and pools each window in one go (native_batch_norm.py), never writing
the full-size array; elsewhere it is the table's _FusedBatchNormRelu, then
its MaxPool. Both give the separate kernels' values bit for bit::

    table.update(batch_norm_relu_pool_kernels(table, CPU_POOL))
"""

import copy

from . import native_batch_norm
from .cpu_threads import SERIAL
from .fused_kernels import trains
from .window_geometry import _layout_maker

KERNEL = "_FusedBatchNormReluPool"


def batch_norm_relu_pool_kernels(table, parallel=SERIAL, compiled=True):
    """{KERNEL: maker} over ``table``'s _FusedBatchNormRelu and MaxPool makers
    (looked up when a plan binds the kernel); ``compiled``: try the CPU's
    compiled one-pass kernel first (NumPy tables only)."""
    def make(ctx):
        batch_norm_ctx, pool_ctx = _member_contexts(ctx)
        batch_norm_relu = table["_FusedBatchNormRelu"](batch_norm_ctx)
        max_pool = table["MaxPool"](pool_ctx)

        def separate(x, *inputs):
            outputs = batch_norm_relu(x, *inputs)
            return tuple(max_pool(outputs[0])) + tuple(outputs[1:])
        if not compiled or ctx.attrs["is_training"] is False or \
                not native_batch_norm.one_dtype(batch_norm_ctx):
            return separate
        epsilon, layout_of = ctx.attrs["epsilon"], _layout_maker(ctx.attrs["pool"])

        def run(x, scale, offset, mean, variance, *fed_training):
            # a fed flag (compiled: NumPy's, read on the host): False runs separate
            outputs = native_batch_norm.batch_norm_relu_pool_training(
                x, scale, offset, epsilon, layout_of(x.shape), parallel) \
                if trains(fed_training) else None
            return separate(x, scale, offset, mean, variance, *fed_training) \
                if outputs is None else outputs
        return run
    return {KERNEL: make}


def _member_contexts(ctx):
    """The contexts the batch norm's and the pool's own makers expect: their
    attributes, output dtypes and used outputs."""
    dtypes = list(ctx.output_dtypes)
    used = getattr(ctx, "outputs_used", None)
    batch_norm_ctx, pool_ctx = copy.copy(ctx), copy.copy(ctx)
    batch_norm_ctx.attrs = {key: value for key, value in ctx.attrs.items() if key != "pool"}
    batch_norm_ctx.output_dtypes = dtypes[:1] + dtypes[2:]
    pool_ctx.attrs, pool_ctx.output_dtypes = ctx.attrs["pool"], dtypes[:2]
    if used is not None:
        batch_norm_ctx.outputs_used = [True] + list(used[2:])
        pool_ctx.outputs_used = list(used[:2])
    return batch_norm_ctx, pool_ctx
